//! A client of OpenAI's Responses API (`POST {base}/responses`), streaming,
//! for the built-in runtime's `provider = "openai-responses"` (some agents,
//! Codex among them, speak only this). It takes the OpenAI settings
//! (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `REIN_MODEL`).
//!
//! The loop's conversation becomes input items — system text as
//! `instructions`, messages, `function_call` and `function_call_output`
//! items — and the streamed events become a [`ChatResponse`]: a completed
//! response with function calls is `tool_calls`, without `stop`, an
//! incomplete one cut at `max_output_tokens` is `length`. Without streaming
//! (`stream = false`), the response object is read the same way.

use std::time::Duration;

use serde_json::{Value, json};

use crate::openai::{
    Ask, ChatConfig, ChatError, ChatResponse, FunctionCall, Message, Plain, ToolCall, ToolSpec,
    next_json, plain_body, refuses, send, shown, whole_answer,
};

/// The conversation as the Responses API's `instructions` and input items.
fn input_items(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let mut system: Vec<&str> = Vec::new();
    let mut items = Vec::new();
    for m in messages {
        match m {
            Message::System { content } => system.push(content),
            Message::User { content } => {
                items.push(json!({ "type": "message", "role": "user", "content": [{ "type": "input_text", "text": content }] }));
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                    items.push(json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": text }] }));
                }
                for call in tool_calls {
                    items.push(json!({ "type": "function_call", "call_id": call.id, "name": call.function.name, "arguments": call.function.arguments }));
                }
            }
            Message::Tool {
                tool_call_id,
                content,
            } => items.push(
                json!({ "type": "function_call_output", "call_id": tool_call_id, "output": content }),
            ),
        }
    }
    ((!system.is_empty()).then(|| system.join("\n\n")), items)
}

/// A Responses API client.
#[derive(Debug, Clone)]
pub struct ResponsesClient {
    http: reqwest::Client,
    config: ChatConfig,
}

impl ResponsesClient {
    pub fn config(&self) -> &ChatConfig {
        &self.config
    }

    /// Asks for a stream (or one JSON body) from now on.
    pub fn set_stream(&mut self, stream: bool) {
        self.config.stream = stream;
    }

    /// The model it asks for.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    pub fn new(config: ChatConfig) -> ResponsesClient {
        ResponsesClient {
            http: reqwest::Client::new(),
            config,
        }
    }

    /// One answer, asked as `ask` says: its limit as `max_output_tokens`, a
    /// JSON Schema as `text.format` `json_schema` (asked again without when
    /// a server refuses it, a 400 or 422 naming `text`).
    pub async fn ask(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        ask: &Ask<'_>,
        mut on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        let url = format!("{}/responses", self.config.base_url.trim_end_matches('/'));
        let (instructions, input) = input_items(messages);
        let mut body = json!({
            "model": self.config.model,
            "input": input,
            "stream": self.config.stream,
            // The conversation is rein's (journaled); nothing kept server-side.
            "store": false,
        });
        if let Some(instructions) = instructions {
            body["instructions"] = json!(instructions);
        }
        if let Some(limit) = ask.max_tokens {
            body["max_output_tokens"] = json!(limit);
        }
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|t| json!({ "type": "function", "name": t.name, "description": t.description, "parameters": t.parameters }))
                .collect();
        }
        match ask.tool_choice {
            None => {}
            Some(c @ ("auto" | "required" | "none")) => body["tool_choice"] = json!(c),
            Some(name) => body["tool_choice"] = json!({ "type": "function", "name": name }),
        }
        let idle = self.config.idle_timeout;
        let mut structured = ask.json_schema.is_some();
        let (response, request_id) = loop {
            let mut sent = body.clone();
            if let (true, Some(schema)) = (structured, ask.json_schema) {
                sent["text"] = json!({ "format": { "type": "json_schema", "name": "answer", "schema": schema, "strict": false } });
            }
            let mut request = self.http.post(&url).json(&sent);
            if let Some(key) = &self.config.api_key {
                request = request.bearer_auth(key);
            }
            match send(request, &url, idle, "x-request-id").await {
                Err(e) if structured && refuses(&e, "text") => structured = false,
                sent => break sent?,
            }
        };
        let mut answer = match plain_body(response, &url, idle).await? {
            Plain::Json(body) => whole_answer(&body, &url, whole_response, &mut on_text)?,
            Plain::Stream(response) => read_events(response, &url, idle, &mut on_text).await?,
        };
        answer.request_id = request_id;
        Ok(answer)
    }
}

/// An error the stream reported, by its code, as the HTTP status it stands for.
fn stream_error(code: &str, message: &str) -> ChatError {
    let status = match code {
        "rate_limit_exceeded" => Some(429),
        "server_error" => Some(500),
        "server_is_overloaded" | "slow_down" => Some(503),
        "context_length_exceeded" => Some(400),
        _ => None,
    };
    match status {
        Some(status) => ChatError::Http {
            status,
            message: format!("{message} (reported in the stream)"),
            retry_after: None,
            code: Some(code.to_owned()),
        },
        None => ChatError::Protocol(format!("the stream reported {code}: {message}")),
    }
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
    // Function calls by output index: call id, name, arguments.
    let mut calls: Vec<(usize, ToolCall)> = Vec::new();
    let mut finish_reason: Option<String> = None;
    let mut events_seen = 0usize;
    let mut usage = None;
    let mut served_model = None;
    while let Some((name, data)) = next_json(&mut events, idle, "an event").await? {
        events_seen += 1;
        let index = data["output_index"].as_u64().unwrap_or(0) as usize;
        match data["type"].as_str().unwrap_or(name.as_str()) {
            "error" => {
                return Err(stream_error(
                    data["code"].as_str().unwrap_or_default(),
                    data["message"].as_str().unwrap_or("no message"),
                ));
            }
            "response.failed" => {
                let error = &data["response"]["error"];
                return Err(stream_error(
                    error["code"].as_str().unwrap_or_default(),
                    error["message"].as_str().unwrap_or("the response failed"),
                ));
            }
            "response.output_item.added" => {
                let item = &data["item"];
                if item["type"] == "function_call" {
                    calls.push((
                        index,
                        ToolCall {
                            id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                            kind: "function".into(),
                            function: FunctionCall {
                                name: item["name"].as_str().unwrap_or_default().to_owned(),
                                arguments: String::new(),
                            },
                        },
                    ));
                }
            }
            "response.output_text.delta" => {
                if let Some(text) = data["delta"].as_str() {
                    content.push_str(text);
                    on_text(text);
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some((_, call)) = calls.iter_mut().find(|(i, _)| *i == index) {
                    call.function
                        .arguments
                        .push_str(data["delta"].as_str().unwrap_or_default());
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some((_, call)), Some(all)) = (
                    calls.iter_mut().find(|(i, _)| *i == index),
                    data["arguments"].as_str(),
                ) {
                    call.function.arguments = all.to_owned();
                }
            }
            "response.completed" => {
                (usage, served_model) = responses_usage(&data["response"]);
                finish_reason = Some(
                    if calls.is_empty() {
                        "stop"
                    } else {
                        "tool_calls"
                    }
                    .into(),
                );
                break;
            }
            "response.incomplete" => {
                (usage, served_model) = responses_usage(&data["response"]);
                let reason = data["response"]["incomplete_details"]["reason"]
                    .as_str()
                    .unwrap_or("incomplete");
                finish_reason = Some(
                    if reason == "max_output_tokens" {
                        "length"
                    } else {
                        reason
                    }
                    .to_owned(),
                );
                break;
            }
            _ => {}
        }
    }
    let Some(finish_reason) = finish_reason else {
        return Err(ChatError::Protocol(format!(
            "{url} ended its stream after {events_seen} events without response.completed; the server's own log will have the cause"
        )));
    };
    Ok(ChatResponse {
        content,
        tool_calls: calls.into_iter().map(|(_, c)| c).collect(),
        finish_reason,
        request_id: None,
        usage,
        served_model,
    })
}

/// A whole response object, as a request without streaming gets it: its
/// `output` items (`message` text, `function_call`s), its `status`
/// (`completed`, `incomplete` with the reason, `failed` with the error).
fn whole_response(response: &Value, url: &str) -> Result<ChatResponse, ChatError> {
    if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
        return Err(stream_error(
            error["code"].as_str().unwrap_or_default(),
            error["message"].as_str().unwrap_or("the response failed"),
        ));
    }
    let Some(output) = response["output"].as_array() else {
        return Err(ChatError::Protocol(format!(
            "{url} answered a JSON body without `output`: `{}`",
            shown(&response.to_string())
        )));
    };
    let mut content = String::new();
    let mut calls = Vec::new();
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text"
                        && let Some(text) = part["text"].as_str()
                    {
                        content.push_str(text);
                    }
                }
            }
            Some("function_call") => calls.push(ToolCall {
                id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                kind: "function".into(),
                function: FunctionCall {
                    name: item["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: item["arguments"].as_str().unwrap_or_default().to_owned(),
                },
            }),
            _ => {}
        }
    }
    let finish_reason = match response["status"].as_str() {
        Some("incomplete") => match response["incomplete_details"]["reason"].as_str() {
            Some("max_output_tokens") => "length",
            Some(other) => other,
            None => "incomplete",
        },
        _ if calls.is_empty() => "stop",
        _ => "tool_calls",
    }
    .to_owned();
    let (usage, served_model) = responses_usage(response);
    Ok(ChatResponse {
        content,
        tool_calls: calls,
        finish_reason,
        request_id: None,
        usage,
        served_model,
    })
}

/// A Responses `response`'s usage, normalised (`input_tokens` with the cached
/// ones in it, `input_tokens_details.cached_tokens`, `output_tokens`,
/// `output_tokens_details.reasoning_tokens`), and the model it names.
fn responses_usage(response: &Value) -> (Option<rein_protocol::Usage>, Option<String>) {
    let usage = &response["usage"];
    let counted = usage["input_tokens"]
        .as_u64()
        .map(|input| rein_protocol::Usage {
            input_tokens: input,
            cached_input_tokens: usage["input_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
            output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
            reasoning_tokens: usage["output_tokens_details"]["reasoning_tokens"].as_u64(),
            estimated: false,
        });
    (counted, response["model"].as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversation_becomes_input_items() {
        let call = ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "list_dir".into(),
                arguments: "{\"path\": \".\"}".into(),
            },
        };
        let (instructions, items) = input_items(&[
            Message::System {
                content: "be brief".into(),
            },
            Message::User {
                content: "list".into(),
            },
            Message::Assistant {
                content: None,
                tool_calls: vec![call],
            },
            Message::Tool {
                tool_call_id: "call_1".into(),
                content: "a.md".into(),
            },
        ]);
        assert_eq!(instructions.as_deref(), Some("be brief"));
        assert_eq!(
            Value::Array(items),
            json!([
                { "type": "message", "role": "user", "content": [{ "type": "input_text", "text": "list" }] },
                { "type": "function_call", "call_id": "call_1", "name": "list_dir", "arguments": "{\"path\": \".\"}" },
                { "type": "function_call_output", "call_id": "call_1", "output": "a.md" },
            ])
        );
    }
}
