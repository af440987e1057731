//! A client of the OpenAI-compatible chat-completions API (`POST
//! {base}/chat/completions`), streaming: content deltas are handed on as they
//! arrive, tool calls are put together from their pieces, and failures say
//! what the server said (and when to try again, if it said).

use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where the API is and which model to ask.
#[derive(Clone, PartialEq, Eq)]
pub struct ChatConfig {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// How long the server may stay silent: before its answer begins, and
    /// between two pieces of a streamed answer. A slow model whose stream is
    /// still arriving is not cut off; the step's own `timeout` bounds the whole.
    /// Without streaming, the whole answer must come within it.
    pub idle_timeout: Duration,
    /// Whether answers are asked for as a stream (the default). Some servers
    /// refuse what a step needs when streaming (llama-cpp-python's
    /// function-calling chat format refuses `tool_choice: "auto"`); `false`
    /// asks for one JSON body.
    pub stream: bool,
}

impl std::fmt::Debug for ChatConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("stream", &self.stream)
            .finish()
    }
}

/// The OpenAI API's own endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// How long a model server may stay silent unless `REIN_MODEL_IDLE_TIMEOUT` says.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for ChatConfig {
    fn default() -> ChatConfig {
        ChatConfig {
            base_url: OPENAI_BASE_URL.into(),
            api_key: None,
            model: "gpt-4.1-mini".into(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            stream: true,
        }
    }
}

impl ChatConfig {
    /// How `provider`'s requests are prepared under this configuration: the
    /// built-in provider `openai` takes its key from `OPENAI_API_KEY`, and its
    /// transport is overridden when `OPENAI_BASE_URL` points elsewhere.
    pub fn facts(&self, provider: &str) -> rein_core::harness::ProviderFacts {
        if provider != "openai" {
            return rein_core::harness::ProviderFacts::default();
        }
        rein_core::harness::ProviderFacts {
            auth_source: self
                .api_key
                .as_ref()
                .map(|_| "env:OPENAI_API_KEY".to_owned()),
            transport_overridden: self.base_url.trim_end_matches('/') != OPENAI_BASE_URL,
        }
    }
}

/// One message of a conversation, in the API's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        /// Sent as `""` when the turn only calls tools: llama.cpp's chat
        /// templates read `content` of every message (a missing one fails
        /// the request behind a 200, `null` gets a 500).
        #[serde(default, serialize_with = "content_or_empty")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

fn content_or_empty<S: serde::Serializer>(
    content: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(content.as_deref().unwrap_or(""))
}

/// A call the model asked for: which tool, with what arguments (JSON text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// What one request came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// `stop`, `length`, `tool_calls`, …
    pub finish_reason: String,
    /// The provider's own id of the request (`x-request-id`, `request-id`),
    /// when it sent one.
    pub request_id: Option<String>,
    /// The tokens the provider reported the request used (`None`: it
    /// reported none).
    pub usage: Option<rein_protocol::Usage>,
    /// The model the server says answered.
    pub served_model: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error("cannot reach the model API at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("the model API answered {status}: {message}")]
    Http {
        status: u16,
        message: String,
        /// From `Retry-After`, when the server said.
        retry_after: Option<Duration>,
        /// The error's `code` (or else its `type`), when the body named one:
        /// `context_length_exceeded`, `rate_limit_exceeded`, …
        code: Option<String>,
    },
    #[error("the model API sent something rein cannot read: {0}")]
    Protocol(String),
    #[error(
        "the model API sent nothing for {0:?}; a slow model may need a longer REIN_MODEL_IDLE_TIMEOUT"
    )]
    TimedOut(Duration),
}

/// A chat-completions client.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    config: ChatConfig,
}

impl ChatClient {
    pub fn new(config: ChatConfig) -> ChatClient {
        ChatClient {
            http: reqwest::Client::new(),
            config,
        }
    }

    pub fn config(&self) -> &ChatConfig {
        &self.config
    }

    /// Asks for a stream (or one JSON body) from now on.
    pub fn set_stream(&mut self, stream: bool) {
        self.config.stream = stream;
    }

    /// One completion, streamed unless the configuration says otherwise:
    /// `on_text` gets each piece of content as it arrives; the tool calls
    /// come back whole.
    pub async fn complete(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        self.ask(messages, tools, &Ask::default(), on_text).await
    }

    /// One answer to the conversation, asked as `ask` says. A JSON Schema
    /// is asked for as `response_format` `json_schema` (OpenAI, vLLM,
    /// llama.cpp's server); a server that refuses that form (an error naming
    /// `response_format`, see [`refuses`]) is asked with `json_object` and the
    /// schema (llama-cpp-python's), then without.
    pub async fn ask(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        ask: &Ask<'_>,
        mut on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let formats: Vec<Option<Value>> = match ask.json_schema {
            None => vec![None],
            Some(schema) => vec![
                Some(
                    json!({ "type": "json_schema", "json_schema": { "name": "answer", "schema": schema, "strict": false } }),
                ),
                Some(json!({ "type": "json_object", "schema": schema })),
                None,
            ],
        };
        let last = formats.len() - 1;
        for (i, format) in formats.into_iter().enumerate() {
            let mut body = self.body(messages, tools, ask);
            if let Some(format) = format {
                body["response_format"] = format;
            }
            let mut request = self.http.post(&url).json(&body);
            if let Some(key) = &self.config.api_key {
                request = request.bearer_auth(key);
            }
            let idle = self.config.idle_timeout;
            let (response, request_id) = match send(request, &url, idle, "x-request-id").await {
                Err(e) if i < last && refuses(&e, "response_format") => continue,
                sent => sent?,
            };
            let mut answer = match plain_body(response, &url, idle).await? {
                Plain::Json(body) => whole_answer(&body, &url, chat_completion, &mut on_text)?,
                Plain::Stream(response) => read_stream(response, &url, idle, &mut on_text).await?,
            };
            answer.request_id = request_id;
            return Ok(answer);
        }
        Err(ChatError::Protocol(format!(
            "{url}: no form of the request was accepted"
        )))
    }

    /// The request's body, but for its response format.
    fn body(&self, messages: &[Message], tools: &[ToolSpec], ask: &Ask<'_>) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": self.config.stream,
        });
        if self.config.stream {
            // The usage comes in a last chunk of its own (servers that do not
            // know the option send none, and rein estimates).
            body["stream_options"] = json!({ "include_usage": true });
        }
        if let Some(limit) = ask.max_tokens {
            body["max_tokens"] = json!(limit);
        }
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters } })
                })
                .collect();
        }
        match ask.tool_choice {
            None => {}
            Some(c @ ("auto" | "required" | "none")) => body["tool_choice"] = json!(c),
            Some(name) => {
                body["tool_choice"] = json!({ "type": "function", "function": { "name": name } });
            }
        }
        body
    }
}

/// What one request asks beyond the conversation and its tools.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ask<'a> {
    /// `auto`, `required`, `none`, or a tool's name; unset: the server's default.
    pub tool_choice: Option<&'a str>,
    /// The most tokens the answer may have (`max_tokens`; the Responses
    /// API's `max_output_tokens`); unset: the server's limit (Anthropic's:
    /// the configured `max_tokens`).
    pub max_tokens: Option<u32>,
    /// A JSON Schema the answer must match, asked for as the provider's
    /// structured output where it has one.
    pub json_schema: Option<&'a Value>,
}

/// Whether a server refused a request for a part of it it does not take: a
/// 400 or 422 whose message names `part`, or a 500 that does
/// (llama-cpp-python answers its request validation's errors with a 500).
pub(crate) fn refuses(error: &ChatError, part: &str) -> bool {
    matches!(error, ChatError::Http { status: 400 | 422 | 500, message, .. } if message.contains(part))
}

/// A successful answer: one JSON body, or a stream to read.
pub(crate) enum Plain {
    Json(Value),
    Stream(reqwest::Response),
}

/// The answer as one JSON body when the server sent one (`Content-Type`
/// `application/json` or `…+json`): asked for without streaming, or a server
/// or proxy that answered a streamed request whole. Read within the idle
/// timeout; a body that is not JSON is named.
pub(crate) async fn plain_body(
    response: reqwest::Response,
    url: &str,
    idle: Duration,
) -> Result<Plain, ChatError> {
    let json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            let v = v.trim().to_ascii_lowercase();
            v == "application/json" || v.ends_with("+json")
        });
    if !json {
        return Ok(Plain::Stream(response));
    }
    let text = in_time(idle, url, response.text()).await?;
    serde_json::from_str(&text).map(Plain::Json).map_err(|e| {
        ChatError::Protocol(format!(
            "{url} answered with a JSON content type but a body that is not JSON ({e}): `{}`",
            shown(&text)
        ))
    })
}

/// The answer of a whole JSON body, read by `parse` (the provider's shape),
/// its text handed to `on_text` at once.
pub(crate) fn whole_answer(
    body: &Value,
    url: &str,
    parse: fn(&Value, &str) -> Result<ChatResponse, ChatError>,
    on_text: &mut (impl FnMut(&str) + Send),
) -> Result<ChatResponse, ChatError> {
    let answer = parse(body, url)?;
    if !answer.content.is_empty() {
        on_text(&answer.content);
    }
    Ok(answer)
}

/// The first [`SHOWN_BYTES`] characters of what a server sent, on one line:
/// to say what came back when it is not a usable answer.
pub(crate) fn shown(text: &str) -> String {
    text.chars()
        .take(SHOWN_BYTES)
        .collect::<String>()
        .replace('\n', "\\n")
}

/// A whole `chat.completion` body (`choices[0].message` with its `content`
/// and `tool_calls`, `finish_reason`, `usage`, `model`); an `{"error": …}`
/// body is classified like the HTTP error it names.
fn chat_completion(body: &Value, url: &str) -> Result<ChatResponse, ChatError> {
    if body.get("error").is_some_and(|e| !e.is_null()) {
        return Err(stream_error(&body["error"]));
    }
    let Some(choice) = body["choices"].get(0) else {
        return Err(ChatError::Protocol(format!(
            "{url} answered a JSON body without `choices`: `{}`",
            shown(&body.to_string())
        )));
    };
    let message = &choice["message"];
    let content = message["content"].as_str().unwrap_or_default().to_owned();
    let mut tool_calls = Vec::new();
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let function = &call["function"];
        let Some(name) = function["name"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        // The arguments are JSON text; a server that sent the object itself
        // is read as its text.
        let arguments = match &function["arguments"] {
            Value::String(text) => text.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        tool_calls.push(ToolCall {
            id: call["id"].as_str().unwrap_or_default().to_owned(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.to_owned(),
                arguments,
            },
        });
    }
    let finish_reason = choice["finish_reason"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .into()
        });
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason,
        request_id: None,
        usage: chat_usage(&body["usage"]),
        served_model: body["model"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(str::to_owned),
    })
}

/// Sends a model request under the idle timeout: the response (a success)
/// and the provider's id of the request (`id_header`), or what went wrong —
/// the server unreachable, silent, or answering an error (its message, and
/// `Retry-After` when it said). Every provider's client sends through here.
/// What `io` gives, within `idle`: an error of `url`'s server otherwise.
async fn in_time<T>(
    idle: Duration,
    url: &str,
    io: impl std::future::Future<Output = reqwest::Result<T>>,
) -> Result<T, ChatError> {
    tokio::time::timeout(idle, io)
        .await
        .map_err(|_| ChatError::TimedOut(idle))?
        .map_err(|e| ChatError::Unreachable {
            url: url.to_owned(),
            detail: e.to_string(),
        })
}

pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    url: &str,
    idle: Duration,
    id_header: &str,
) -> Result<(reqwest::Response, Option<String>), ChatError> {
    let response = in_time(idle, url, request.send()).await?;
    let request_id = response
        .headers()
        .get(id_header)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = response.status();
    if status.is_success() {
        return Ok((response, request_id));
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let text = tokio::time::timeout(idle, response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    // Every provider puts its message at `error.message`; its code at
    // `error.code` (OpenAI, llama-cpp-python) or its kind at `error.type`
    // (llama.cpp's `exceed_context_size_error`, Anthropic's).
    let body = serde_json::from_str::<Value>(&text).ok();
    let code = body.as_ref().and_then(|v| {
        let error = &v["error"];
        error["code"]
            .as_str()
            .filter(|c| !c.is_empty())
            .or_else(|| error["type"].as_str())
            .map(str::to_owned)
    });
    let message = body
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or(text);
    Err(ChatError::Http {
        status: status.as_u16(),
        message,
        retry_after,
        code,
    })
}

/// The next event of a model's stream, within the idle timeout; `None` when
/// the stream ends. Every provider's client reads its stream through here.
pub(crate) async fn next_event<S, E>(
    events: &mut S,
    idle: Duration,
) -> Result<Option<eventsource_stream::Event>, ChatError>
where
    S: futures_util::Stream<Item = Result<eventsource_stream::Event, E>> + Unpin,
    E: std::fmt::Display,
{
    match tokio::time::timeout(idle, events.next()).await {
        Err(_) => Err(ChatError::TimedOut(idle)),
        Ok(None) => Ok(None),
        Ok(Some(event)) => event
            .map(Some)
            .map_err(|e| ChatError::Protocol(e.to_string())),
    }
}

/// The next event of a streamed answer as JSON, with its SSE event name;
/// `None` at the end of the stream or at OpenAI's `[DONE]`. `what` names an
/// event in the error for one that is not JSON ("a chunk", "an event").
pub(crate) async fn next_json<S, E>(
    events: &mut S,
    idle: Duration,
    what: &str,
) -> Result<Option<(String, Value)>, ChatError>
where
    S: futures_util::Stream<Item = Result<eventsource_stream::Event, E>> + Unpin,
    E: std::fmt::Display,
{
    let Some(event) = next_event(events, idle).await? else {
        return Ok(None);
    };
    if event.data.trim() == "[DONE]" {
        return Ok(None);
    }
    let data = serde_json::from_str(&event.data)
        .map_err(|e| ChatError::Protocol(format!("{what} is not JSON ({e})")))?;
    Ok(Some((event.event, data)))
}

/// An `{"error": …}` chunk in the middle of a stream, classified like the
/// HTTP error it names (its `code`, or a `type` that says rate limit,
/// overload or server error).
fn stream_error(error: &Value) -> ChatError {
    let message = error["message"]
        .as_str()
        .map_or_else(|| error.to_string(), str::to_owned);
    let code = error["code"]
        .as_u64()
        .or_else(|| error["code"].as_str().and_then(|c| c.parse().ok()))
        .filter(|c| (400..600).contains(c));
    let kind = error["type"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let status = code.map(|c| c as u16).or(if kind.contains("rate_limit") {
        Some(429)
    } else if kind.contains("overloaded") {
        Some(529)
    } else if kind.contains("server_error") || kind.contains("internal") {
        Some(500)
    } else {
        None
    });
    match status {
        Some(status) => ChatError::Http {
            status,
            message: format!("{message} (reported in the stream)"),
            retry_after: None,
            code: error["code"].as_str().map(str::to_owned),
        },
        None => ChatError::Protocol(format!("the stream reported: {message}")),
    }
}

/// A tool call being put together from its streamed pieces.
#[derive(Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

/// The most bytes of a stream kept to show what a server sent when its
/// answer cannot be used.
const SHOWN_BYTES: usize = 200;

async fn read_stream(
    response: reqwest::Response,
    url: &str,
    idle: Duration,
    on_text: &mut (impl FnMut(&str) + Send),
) -> Result<ChatResponse, ChatError> {
    use eventsource_stream::Eventsource;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_owned();
    // The first bytes, to say what came back when it is not a usable answer.
    let head = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let kept = std::sync::Arc::clone(&head);
    let bytes = response.bytes_stream().inspect(move |piece| {
        if let (Ok(piece), Ok(mut head)) = (piece, kept.lock())
            && head.len() < SHOWN_BYTES
        {
            let room = SHOWN_BYTES - head.len();
            head.extend_from_slice(&piece[..piece.len().min(room)]);
        }
    });
    let mut events = bytes.eventsource();
    let mut content = String::new();
    let mut calls: Vec<Partial> = Vec::new();
    let mut finish_reason = None;
    let mut chunks = 0usize;
    let mut usage = None;
    let mut served_model = None;
    while let Some((_, chunk)) = next_json(&mut events, idle, "a chunk").await? {
        chunks += 1;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(stream_error(&chunk["error"]));
        }
        if let Some(model) = chunk["model"].as_str()
            && !model.is_empty()
        {
            served_model = Some(model.to_owned());
        }
        if let Some(reported) = chat_usage(&chunk["usage"]) {
            usage = Some(reported);
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str()
            && !text.is_empty()
        {
            content.push_str(text);
            on_text(text);
        }
        if let Some(pieces) = delta["tool_calls"].as_array() {
            for piece in pieces {
                let index = piece["index"].as_u64().unwrap_or(0) as usize;
                if index > 128 {
                    return Err(ChatError::Protocol(format!("tool call index {index}")));
                }
                while calls.len() <= index {
                    calls.push(Partial::default());
                }
                let call = &mut calls[index];
                if let Some(id) = piece["id"].as_str()
                    && !id.is_empty()
                {
                    call.id = id.to_owned();
                }
                // Set once per call: llama.cpp repeats the name in every
                // chunk of it; the arguments are what accumulate.
                if let Some(name) = piece["function"]["name"].as_str()
                    && call.name.is_empty()
                {
                    call.name = name.to_owned();
                }
                if let Some(args) = piece["function"]["arguments"].as_str() {
                    call.arguments.push_str(args);
                }
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish_reason = Some(reason.to_owned());
        }
    }
    let Some(finish_reason) = finish_reason else {
        let head = head.lock().map(|h| h.clone()).unwrap_or_default();
        let body = if head.is_empty() {
            "an empty body".to_owned()
        } else {
            format!(
                "a body beginning `{}`",
                String::from_utf8_lossy(&head).replace('\n', "\\n")
            )
        };
        let what = match chunks {
            0 => "no chunk".to_owned(),
            1 => "1 chunk".to_owned(),
            n => format!("{n} chunks"),
        };
        return Err(ChatError::Protocol(format!(
            "{url} answered {status} ({content_type}) with {body}: {what} and no finish reason; the server's own log will have the cause (a chat template that failed, a model that crashed)"
        )));
    };
    let tool_calls = calls
        .into_iter()
        .filter(|c| !c.name.is_empty())
        .map(|c| ToolCall {
            id: c.id,
            kind: function_kind(),
            function: FunctionCall {
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect();
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason,
        request_id: None,
        usage,
        served_model,
    })
}

/// A Chat Completions `usage` object, normalised: `prompt_tokens` (cached
/// ones included), `prompt_tokens_details.cached_tokens`,
/// `completion_tokens` and `completion_tokens_details.reasoning_tokens`.
/// `None` for a null or absent one.
pub(crate) fn chat_usage(usage: &Value) -> Option<rein_protocol::Usage> {
    let input = usage["prompt_tokens"].as_u64()?;
    Some(rein_protocol::Usage {
        input_tokens: input,
        cached_input_tokens: usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        reasoning_tokens: usage["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        estimated: false,
    })
}
