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
    /// How long one request may take, streaming included.
    pub timeout: Duration,
}

impl std::fmt::Debug for ChatConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .finish()
    }
}

/// The OpenAI API's own endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

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

    /// Every provider's facts (for [`rein_core::harness::Harnesses`]).
    pub fn all_facts(
        &self,
    ) -> std::collections::BTreeMap<String, rein_core::harness::ProviderFacts> {
        [("openai".to_owned(), self.facts("openai"))].into()
    }

    /// From `OPENAI_BASE_URL` (default the OpenAI API), `OPENAI_API_KEY` and
    /// `REIN_MODEL` (default `gpt-4.1-mini`).
    pub fn from_env() -> ChatConfig {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        ChatConfig {
            base_url: var("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_BASE_URL.into()),
            api_key: var("OPENAI_API_KEY"),
            model: var("REIN_MODEL").unwrap_or_else(|| "gpt-4.1-mini".into()),
            timeout: Duration::from_secs(300),
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
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A call the model asked for: which tool, with what arguments (JSON text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function() -> String {
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
    },
    #[error("the model API sent something rein cannot read: {0}")]
    Protocol(String),
    #[error("the model API did not finish within {0:?}")]
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

    /// One streamed completion: `on_text` gets each piece of content as it
    /// arrives; the tool calls come back whole.
    pub async fn complete(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        mut on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": true,
        });
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters } })
                })
                .collect();
        }
        let mut request = self.http.post(&url).json(&body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let timeout = self.config.timeout;
        let exchange = async {
            let response = request.send().await.map_err(|e| ChatError::Unreachable {
                url: url.clone(),
                detail: e.to_string(),
            })?;
            let status = response.status();
            if !status.is_success() {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let text = response.text().await.unwrap_or_default();
                let message = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                    .unwrap_or(text);
                return Err(ChatError::Http {
                    status: status.as_u16(),
                    message,
                    retry_after,
                });
            }
            read_stream(response, &mut on_text).await
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ChatError::TimedOut(timeout))?
    }
}

/// A tool call being put together from its streamed pieces.
#[derive(Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

async fn read_stream(
    response: reqwest::Response,
    on_text: &mut (impl FnMut(&str) + Send),
) -> Result<ChatResponse, ChatError> {
    use eventsource_stream::Eventsource;
    let mut events = response.bytes_stream().eventsource();
    let mut content = String::new();
    let mut calls: Vec<Partial> = Vec::new();
    let mut finish_reason = None;
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| ChatError::Protocol(e.to_string()))?;
        if event.data.trim() == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| ChatError::Protocol(format!("a chunk is not JSON ({e})")))?;
        if let Some(message) = chunk["error"]["message"].as_str() {
            return Err(ChatError::Protocol(format!(
                "the stream reported: {message}"
            )));
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
                if let Some(id) = piece["id"].as_str() {
                    call.id = id.to_owned();
                }
                if let Some(name) = piece["function"]["name"].as_str() {
                    call.name.push_str(name);
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
    let finish_reason = finish_reason
        .ok_or_else(|| ChatError::Protocol("the stream ended without a finish reason".into()))?;
    let tool_calls = calls
        .into_iter()
        .filter(|c| !c.name.is_empty())
        .map(|c| ToolCall {
            id: c.id,
            kind: function(),
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
    })
}
