//! The providers the built-in runtime speaks, each with its endpoint, key
//! variable and defaults in one place: `openai` (the chat-completions API, at
//! any compatible endpoint), `openai-responses` (OpenAI's Responses API, on the
//! same settings) and `anthropic` (the Messages API).

use crate::anthropic::{AnthropicClient, AnthropicConfig};
use crate::openai::{Ask, ChatClient, ChatConfig, ChatError, ChatResponse, Message, ToolSpec};
use crate::responses::ResponsesClient;

/// The providers' names, as steps and routes give them.
pub const PROVIDERS: &[&str] = &["openai", "openai-responses", "anthropic"];

/// Whether the built-in runtime speaks `provider`; if not, what to tell the
/// caller.
pub fn speaks(provider: &str) -> Result<(), String> {
    if PROVIDERS.contains(&provider) {
        return Ok(());
    }
    Err(format!(
        "the built-in runtime speaks the providers {}, not `{provider}`; a plugin's harness may serve it (`rein harness explain --provider {provider}`)",
        PROVIDERS.join(", ")
    ))
}

/// The settings of every provider.
#[derive(Debug, Clone, Default)]
pub struct Providers {
    pub openai: ChatConfig,
    pub anthropic: AnthropicConfig,
}

impl Providers {
    /// The model a route without one asks.
    pub fn default_model(&self, provider: &str) -> String {
        match provider {
            "anthropic" => self.anthropic.model.clone(),
            _ => self.openai.model.clone(),
        }
    }

    /// A client of `provider` asking `model`; a provider the built-in runtime
    /// does not speak is named, with those it does.
    pub fn client(&self, provider: &str, model: &str) -> Result<ModelClient, String> {
        match provider {
            "openai" => Ok(ModelClient::OpenAi(ChatClient::new(ChatConfig {
                model: model.to_owned(),
                ..self.openai.clone()
            }))),
            "openai-responses" => Ok(ModelClient::Responses(ResponsesClient::new(ChatConfig {
                model: model.to_owned(),
                ..self.openai.clone()
            }))),
            "anthropic" => Ok(ModelClient::Anthropic(AnthropicClient::new(
                AnthropicConfig {
                    model: model.to_owned(),
                    ..self.anthropic.clone()
                },
            ))),
            other => Err(speaks(other).err().unwrap_or_default()),
        }
    }

    /// How `provider`'s requests are prepared here.
    pub fn facts(&self, provider: &str) -> rein_core::harness::ProviderFacts {
        match provider {
            "anthropic" => self.anthropic.facts(),
            "openai-responses" => self.openai.facts("openai"),
            other => self.openai.facts(other),
        }
    }

    /// Every provider's facts (for [`rein_core::harness::Harnesses`]).
    pub fn all_facts(
        &self,
    ) -> std::collections::BTreeMap<String, rein_core::harness::ProviderFacts> {
        PROVIDERS
            .iter()
            .map(|p| ((*p).to_owned(), self.facts(p)))
            .collect()
    }
}

/// A client of one provider's API.
#[derive(Debug, Clone)]
pub enum ModelClient {
    OpenAi(ChatClient),
    Responses(ResponsesClient),
    Anthropic(AnthropicClient),
}

impl ModelClient {
    /// The provider it speaks to, by the name a step gives it.
    pub fn provider(&self) -> &'static str {
        match self {
            ModelClient::OpenAi(_) => "openai",
            ModelClient::Responses(_) => "openai-responses",
            ModelClient::Anthropic(_) => "anthropic",
        }
    }

    /// The model it asks for.
    pub fn model(&self) -> &str {
        match self {
            ModelClient::OpenAi(c) => &c.config().model,
            ModelClient::Responses(c) => c.model(),
            ModelClient::Anthropic(c) => c.model(),
        }
    }

    /// The same client asking for a stream or not as a step says (`None`: as
    /// its provider is configured).
    pub fn streaming(mut self, stream: Option<bool>) -> ModelClient {
        if let Some(stream) = stream {
            match &mut self {
                ModelClient::OpenAi(c) => c.set_stream(stream),
                ModelClient::Responses(c) => c.set_stream(stream),
                ModelClient::Anthropic(c) => c.set_stream(stream),
            }
        }
        self
    }

    /// The OpenAI-compatible server's base URL and key, where a server may
    /// be asked what it serves (`None`: Anthropic's API).
    pub fn endpoint(&self) -> Option<(&str, Option<&str>)> {
        let config = match self {
            ModelClient::OpenAi(c) => c.config(),
            ModelClient::Responses(c) => c.config(),
            ModelClient::Anthropic(_) => return None,
        };
        Some((config.base_url.as_str(), config.api_key.as_deref()))
    }

    /// One streamed answer: content pieces to `on_text` as they come, the
    /// tool calls whole, the finish reason in the chat-completions vocabulary.
    pub async fn complete_with(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        tool_choice: Option<&str>,
        on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        let ask = Ask {
            tool_choice,
            ..Ask::default()
        };
        self.ask(messages, tools, &ask, on_text).await
    }

    /// The same, asked as `ask` says (its token limit, the JSON Schema the
    /// answer must match where the provider can be asked for one).
    pub async fn ask(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        ask: &Ask<'_>,
        on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, ChatError> {
        match self {
            ModelClient::OpenAi(c) => c.ask(messages, tools, ask, on_text).await,
            ModelClient::Responses(c) => c.ask(messages, tools, ask, on_text).await,
            ModelClient::Anthropic(c) => c.ask(messages, tools, ask, on_text).await,
        }
    }
}
