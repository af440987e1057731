//! A client of Anthropic's Messages API (`POST {base}/v1/messages`),
//! streaming, for the built-in runtime's `provider = "anthropic"`.
//!
//! The loop's conversation stays in one shape (the chat-completions
//! [`Message`]s it journals); this client turns it into the Messages API's —
//! system text apart, `tool_use` blocks on the assistant's turns, `tool_result`
//! blocks in the user's — and the streamed answer back into a
//! [`ChatResponse`]: `end_turn` is `stop`, `tool_use` is `tool_calls`,
//! `max_tokens` is `length`. Without streaming (`stream = false`), the
//! message is read the same way.

use std::time::Duration;

use serde_json::{Value, json};

use crate::openai::{
    Ask, ChatError, ChatResponse, FunctionCall, Message, Plain, ToolCall, ToolSpec, next_json,
    plain_body, send, shown, whole_answer,
};

/// The Messages API's own endpoint.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The API version rein speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Where the API is, which model to ask, and how long an answer may be.
#[derive(Clone, PartialEq, Eq)]
pub struct AnthropicConfig {
    /// Without `/v1`: e.g. `https://api.anthropic.com`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// The `max_tokens` of every request (the API requires one).
    pub max_tokens: u32,
    /// How long the server may stay silent (see [`crate::openai::ChatConfig`]).
    pub idle_timeout: Duration,
    /// Whether answers are asked for as a stream (the default; see
    /// [`crate::openai::ChatConfig`]).
    pub stream: bool,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("stream", &self.stream)
            .finish()
    }
}

impl Default for AnthropicConfig {
    fn default() -> AnthropicConfig {
        AnthropicConfig {
            base_url: ANTHROPIC_BASE_URL.into(),
            api_key: None,
            model: "claude-sonnet-4-5".into(),
            max_tokens: 8192,
            idle_timeout: crate::openai::DEFAULT_IDLE_TIMEOUT,
            stream: true,
        }
    }
}

impl AnthropicConfig {
    /// How its requests are prepared, for the `modelProvider` a harness is shown.
    pub fn facts(&self) -> rein_core::harness::ProviderFacts {
        rein_core::harness::ProviderFacts {
            auth_source: self
                .api_key
                .as_ref()
                .map(|_| "env:ANTHROPIC_API_KEY".to_owned()),
            transport_overridden: self.base_url.trim_end_matches('/') != ANTHROPIC_BASE_URL,
        }
    }
}

/// A prompt-cache breakpoint (`cache_control`) of the default lifetime.
static EPHEMERAL: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({ "type": "ephemeral" }));

/// Marks the stable prefix of the conversation for Anthropic's prompt cache:
/// the last block of the newest turn (what the next request starts with)
/// and of the user turn before it (what this request can read back). With
/// the system text and the tools, four breakpoints: the API's most.
fn cache_conversation(turns: &mut [Value]) {
    let mut marked = 0;
    let newest = turns.len().saturating_sub(1);
    for (i, turn) in turns.iter_mut().enumerate().rev() {
        if marked == 2 {
            break;
        }
        if i != newest && turn["role"] != "user" {
            continue;
        }
        if let Some(last) = turn["content"].as_array_mut().and_then(|c| c.last_mut()) {
            last["cache_control"] = EPHEMERAL.clone();
            marked += 1;
        }
    }
}

/// A Messages API client.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    config: AnthropicConfig,
}

/// The conversation in the Messages API's shape: the system text, and the
/// turns (consecutive ones of a role merged, as the API wants them).
fn request_messages(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match turns.last_mut() {
        Some((r, blocks)) if *r == role => blocks.push(block),
        _ => turns.push((role, vec![block])),
    };
    for m in messages {
        match m {
            Message::System { content } => system.push(content),
            Message::User { content } => push("user", json!({ "type": "text", "text": content })),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                    push("assistant", json!({ "type": "text", "text": text }));
                }
                for call in tool_calls {
                    // The API takes the input as an object; arguments that are
                    // not one go as an empty object (the tool then says why).
                    let input = serde_json::from_str::<Value>(&call.function.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    push(
                        "assistant",
                        json!({ "type": "tool_use", "id": call.id, "name": call.function.name, "input": input }),
                    );
                }
            }
            Message::Tool {
                tool_call_id,
                content,
            } => push(
                "user",
                json!({ "type": "tool_result", "tool_use_id": tool_call_id, "content": content }),
            ),
        }
    }
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    let turns = turns
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    (system, turns)
}

/// An error the API named by its type, as the HTTP status it stands for.
fn status_of(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "overloaded_error" => 529,
        _ => return None,
    })
}

impl AnthropicClient {
    /// The model it asks for.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// Asks for a stream (or one JSON body) from now on.
    pub fn set_stream(&mut self, stream: bool) {
        self.config.stream = stream;
    }

    pub fn new(config: AnthropicConfig) -> AnthropicClient {
        AnthropicClient {
            http: reqwest::Client::new(),
            config,
        }
    }

    /// One answer, asked as `ask` says: its limit instead of the configured
    /// `max_tokens`. The Messages API has no JSON-Schema answer format: a
    /// schema asked for is left to the prompt (the caller checks the answer).
    pub async fn ask(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        ask: &Ask<'_>,
        mut on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        let tool_choice = ask.tool_choice;
        let url = format!("{}/v1/messages", self.config.base_url.trim_end_matches('/'));
        let (system, mut turns) = request_messages(messages);
        cache_conversation(&mut turns);
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": ask.max_tokens.unwrap_or(self.config.max_tokens),
            "messages": turns,
            "stream": self.config.stream,
        });
        if let Some(system) = system {
            body["system"] =
                json!([{ "type": "text", "text": system, "cache_control": EPHEMERAL.clone() }]);
        }
        if !tools.is_empty() {
            let mut declared: Vec<Value> = tools
                .iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
                .collect();
            if let Some(last) = declared.last_mut() {
                last["cache_control"] = EPHEMERAL.clone();
            }
            body["tools"] = Value::Array(declared);
            match tool_choice {
                None => {}
                Some("auto") => body["tool_choice"] = json!({ "type": "auto" }),
                Some("required") => body["tool_choice"] = json!({ "type": "any" }),
                Some("none") => body["tool_choice"] = json!({ "type": "none" }),
                Some(name) => body["tool_choice"] = json!({ "type": "tool", "name": name }),
            }
        }
        let mut request = self
            .http
            .post(&url)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&body);
        if let Some(key) = &self.config.api_key {
            request = request.header("x-api-key", key);
        }
        let idle = self.config.idle_timeout;
        let (response, request_id) = send(request, &url, idle, "request-id").await?;
        let mut answer = match plain_body(response, &url, idle).await? {
            Plain::Json(body) => whole_answer(&body, &url, whole_message, &mut on_text)?,
            Plain::Stream(response) => read_events(response, &url, idle, &mut on_text).await?,
        };
        answer.request_id = request_id;
        Ok(answer)
    }
}

/// A content block being put together from its streamed pieces.
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    Other,
}

async fn read_events(
    response: reqwest::Response,
    url: &str,
    idle: Duration,
    on_text: &mut (impl FnMut(&str) + Send),
) -> Result<ChatResponse, ChatError> {
    use eventsource_stream::Eventsource;
    let mut events = response.bytes_stream().eventsource();
    let mut content = String::new();
    let mut blocks: Vec<Block> = Vec::new();
    let mut stop_reason: Option<String> = None;
    let mut counted: Option<rein_protocol::Usage> = None;
    let mut served_model: Option<String> = None;
    let mut events_seen = 0usize;
    while let Some((name, data)) = next_json(&mut events, idle, "an event").await? {
        events_seen += 1;
        match data["type"].as_str().unwrap_or(name.as_str()) {
            "error" => return Err(api_error(&data["error"], "the stream")),
            "content_block_start" => {
                let index = data["index"].as_u64().unwrap_or(0) as usize;
                if index > 256 {
                    return Err(ChatError::Protocol(format!("content block index {index}")));
                }
                let block = &data["content_block"];
                let made = match block["type"].as_str() {
                    Some("text") => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            content.push_str(text);
                            on_text(text);
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: block["name"].as_str().unwrap_or_default().to_owned(),
                        input: String::new(),
                    },
                    _ => Block::Other,
                };
                while blocks.len() < index {
                    blocks.push(Block::Other);
                }
                if blocks.len() == index {
                    blocks.push(made);
                } else {
                    blocks[index] = made;
                }
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap_or(0) as usize;
                let delta = &data["delta"];
                match (blocks.get_mut(index), delta["type"].as_str()) {
                    (Some(Block::Text), Some("text_delta")) => {
                        if let Some(text) = delta["text"].as_str() {
                            content.push_str(text);
                            on_text(text);
                        }
                    }
                    (Some(Block::ToolUse { input, .. }), Some("input_json_delta")) => {
                        input.push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "message_start" => {
                let message = &data["message"];
                served_model = message["model"].as_str().map(str::to_owned);
                counted = messages_usage(&message["usage"]);
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    stop_reason = Some(reason.to_owned());
                }
                // The output so far, counted anew each time.
                if let (Some(c), Some(out)) =
                    (counted.as_mut(), data["usage"]["output_tokens"].as_u64())
                {
                    c.output_tokens = out;
                }
            }
            "message_stop" => break,
            _ => {}
        }
    }
    let Some(stop_reason) = stop_reason else {
        return Err(ChatError::Protocol(format!(
            "{url} ended its stream after {events_seen} events without a stop reason; the server's own log will have the cause"
        )));
    };
    let tool_calls = blocks
        .into_iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, name, input } if !name.is_empty() => Some(ToolCall {
                id,
                kind: "function".into(),
                function: FunctionCall {
                    name,
                    arguments: if input.trim().is_empty() {
                        "{}".into()
                    } else {
                        input
                    },
                },
            }),
            _ => None,
        })
        .collect();
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason: finish_reason(&stop_reason),
        request_id: None,
        usage: counted,
        served_model,
    })
}

/// An error object (`{type, message}`) reported in `place` instead of by the
/// HTTP status, classified like the status its type stands for.
fn api_error(error: &Value, place: &str) -> ChatError {
    let kind = error["type"].as_str().unwrap_or_default();
    let message = error["message"].as_str().unwrap_or("no message");
    match status_of(kind) {
        Some(status) => ChatError::Http {
            status,
            message: format!("{message} (reported in {place})"),
            retry_after: None,
            code: Some(kind.to_owned()),
        },
        None => ChatError::Protocol(format!("{place} reported {kind}: {message}")),
    }
}

/// A stop reason in the chat-completions vocabulary.
fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        other => other,
    }
    .to_owned()
}

/// A Messages `usage`, normalised: Anthropic counts the cache apart, so
/// every prompt token is `input_tokens` + `cache_read_input_tokens` +
/// `cache_creation_input_tokens`; the reads are the cached ones.
fn messages_usage(usage: &Value) -> Option<rein_protocol::Usage> {
    let fresh = usage["input_tokens"].as_u64()?;
    let read = usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
    let written = usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
    Some(rein_protocol::Usage {
        input_tokens: fresh.saturating_add(read).saturating_add(written),
        cached_input_tokens: read,
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        reasoning_tokens: None,
        estimated: false,
    })
}

/// A whole message, as a request without streaming gets it: its `text` and
/// `tool_use` blocks, `stop_reason`, `usage` and `model`; an error body
/// (`{"type": "error", …}`) is classified like the HTTP error it names.
fn whole_message(message: &Value, url: &str) -> Result<ChatResponse, ChatError> {
    if message["type"] == "error" {
        return Err(api_error(&message["error"], "a 200 body"));
    }
    let (Some(blocks), Some(stop_reason)) = (
        message["content"].as_array(),
        message["stop_reason"].as_str(),
    ) else {
        return Err(ChatError::Protocol(format!(
            "{url} answered a JSON body without `content` and `stop_reason`: `{}`",
            shown(&message.to_string())
        )));
    };
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => content.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                let Some(name) = block["name"].as_str().filter(|n| !n.is_empty()) else {
                    continue;
                };
                tool_calls.push(ToolCall {
                    id: block["id"].as_str().unwrap_or_default().to_owned(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: name.to_owned(),
                        arguments: match &block["input"] {
                            Value::Null => "{}".to_owned(),
                            input => input.to_string(),
                        },
                    },
                });
            }
            _ => {}
        }
    }
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason: finish_reason(stop_reason),
        request_id: None,
        usage: messages_usage(&message["usage"]),
        served_model: message["model"].as_str().map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversation_takes_the_messages_apis_shape() {
        let messages = vec![
            Message::System {
                content: "be brief".into(),
            },
            Message::User {
                content: "write it".into(),
            },
            Message::Assistant {
                content: Some(String::new()),
                tool_calls: vec![ToolCall {
                    id: "toolu_1".into(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: "write_file".into(),
                        arguments: "{\"path\": \"a\"}".into(),
                    },
                }],
            },
            Message::Tool {
                tool_call_id: "toolu_1".into(),
                content: "wrote 1 bytes".into(),
            },
            Message::User {
                content: "and now?".into(),
            },
        ];
        let (system, turns) = request_messages(&messages);
        assert_eq!(system.as_deref(), Some("be brief"));
        assert_eq!(
            serde_json::Value::Array(turns),
            json!([
                { "role": "user", "content": [{ "type": "text", "text": "write it" }] },
                { "role": "assistant", "content": [{ "type": "tool_use", "id": "toolu_1", "name": "write_file", "input": { "path": "a" } }] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "toolu_1", "content": "wrote 1 bytes" },
                    { "type": "text", "text": "and now?" } ] },
            ])
        );
    }
}
