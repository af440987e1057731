//! Isolated completions served for real: the selection policy picks the
//! runtime for the route (spec harness-sdk §2), and that choice dispatches
//! the completion (§4 rule 21) — a plugin harness that declares isolated
//! completion, or rein's own chat client, which sends the prompt with no
//! tools at all.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use rein_core::harness::completion::{Completer, Completion, CompletionFailure, CompletionRequest};
use rein_core::harness::isolated::{
    AuthProfile, CompletionAuth, CompletionError, CompletionOutput, CompletionOwner,
    CompletionRuntime, ContentPart, IsolatedParams, IsolatedRequest, run_isolated,
};
use rein_core::harness::{
    AgentHarness, HarnessRegistry, RuntimePolicy, SelectionError, SelectionRequest, select,
};
use rein_protocol::{BUILTIN_RUNTIME, Support, SupportContext};

use crate::openai::{ChatConfig, ChatError, Message};
use crate::provider::Providers;

/// Serves isolated completions on the routes the registry and policy cover.
pub struct Completions {
    registry: Arc<HarnessRegistry>,
    policy: RuntimePolicy,
    providers: Providers,
    profiles: Vec<ProfileSpec>,
}

/// A credential profile (`[auth_profiles.NAME]` in `rein.toml`): the host
/// walks a provider's profiles in order, calling the runtime once per
/// profile while its credentials are refused (spec harness-sdk rule 16).
#[derive(Clone, PartialEq, Eq)]
pub struct ProfileSpec {
    pub id: String,
    pub provider: String,
    pub credential: String,
}

impl std::fmt::Debug for ProfileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileSpec")
            .field("id", &self.id)
            .field("provider", &self.provider)
            .field("credential", &"<redacted>")
            .finish()
    }
}

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions")
            .field("providers", &self.providers)
            .finish_non_exhaustive()
    }
}

impl Completions {
    pub fn new(
        registry: Arc<HarnessRegistry>,
        policy: RuntimePolicy,
        chat: ChatConfig,
    ) -> Completions {
        Completions {
            registry,
            policy,
            providers: Providers {
                openai: chat,
                ..Providers::default()
            },
            profiles: Vec::new(),
        }
    }

    /// The credential profiles completions fall back across, in order; a
    /// provider with none uses its configured key.
    pub fn with_profiles(mut self, profiles: Vec<ProfileSpec>) -> Completions {
        self.profiles = profiles;
        self
    }

    /// Completions on `provider = "anthropic"` ask the Messages API with these
    /// settings.
    pub fn with_anthropic(mut self, anthropic: crate::anthropic::AnthropicConfig) -> Completions {
        self.providers.anthropic = anthropic;
        self
    }
}

/// The profile id of the host's one credential (`OPENAI_API_KEY`).
const PROFILE: &str = "default";

#[async_trait]
impl Completer for Completions {
    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, CompletionFailure> {
        let started = Instant::now();
        let provider = request
            .route
            .provider
            .clone()
            .unwrap_or_else(|| "openai".into());
        let model = request
            .route
            .model
            .clone()
            .unwrap_or_else(|| self.providers.default_model(&provider));
        let wanted = SelectionRequest {
            step_runtime: request.route.runtime.clone(),
            ..self.policy.request(
                &provider,
                Some(model.clone()),
                &self.providers.facts(&provider),
            )
        };
        let selection = select(&self.registry, &self.policy, &wanted).await?;
        let builtin = Builtin {
            provider: provider.clone(),
            providers: self.providers.clone(),
        };
        let selected: &dyn AgentHarness = if selection.selected == BUILTIN_RUNTIME {
            &builtin
        } else {
            match self.registry.get(&selection.selected) {
                Some(r) => &*r.harness,
                None => {
                    return Err(CompletionFailure::NotConfigured(format!(
                        "harness `{}` is no longer registered",
                        selection.selected
                    )));
                }
            }
        };
        // Rule 21: the harness's own selector decides the path, and the
        // dispatch follows it — rein's host-prepared path, or the harness.
        let owner = if selected.auth_bootstrap_harness() {
            CompletionOwner::Harness
        } else {
            CompletionOwner::Host
        };
        let harness: &dyn AgentHarness = match selected.resolve_isolated_completion_runtime(owner) {
            CompletionRuntime::Rein => &builtin,
            CompletionRuntime::OwnRuntime => selected,
        };
        if harness.id() == BUILTIN_RUNTIME {
            // A provider it does not speak is the caller's mistake, told
            // before any request is made.
            if let Err(reason) = crate::provider::speaks(&provider) {
                return Err(SelectionError::Unsupported {
                    id: BUILTIN_RUNTIME.to_owned(),
                    route: format!("{provider}/{model}"),
                    reason,
                }
                .into());
            }
        }
        let isolated = IsolatedRequest {
            prompt: request.prompt.clone(),
            system: request.system.clone(),
            transport_model: model,
            auth_plan: "api_key".into(),
            profiles: {
                let configured: Vec<AuthProfile> = self
                    .profiles
                    .iter()
                    .filter(|p| p.provider == provider)
                    .map(|p| AuthProfile {
                        id: p.id.clone(),
                        credential: p.credential.clone(),
                    })
                    .collect();
                if configured.is_empty() {
                    vec![AuthProfile {
                        id: PROFILE.into(),
                        credential: match provider.as_str() {
                            "anthropic" => self.providers.anthropic.api_key.clone(),
                            _ => self.providers.openai.api_key.clone(),
                        }
                        .unwrap_or_default(),
                    }]
                } else {
                    configured
                }
            },
            deadline: request.timeout,
            policy: request.policy,
            shape: request.shape.clone(),
        };
        let result = run_isolated(harness, &isolated).await?;
        Ok(Completion {
            text: result.text,
            json: None,
            selection,
            owner: result.owner,
            // What answered: rein's own path, or the harness by its id.
            runtime: match result.runtime {
                CompletionRuntime::Rein => BUILTIN_RUNTIME.to_owned(),
                CompletionRuntime::OwnRuntime => harness.id().to_owned(),
            },
            profile: result.profile,
            request_durations_ms: result.request_durations_ms,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            usage: result.usage,
            stop_reason: result.stop_reason,
        })
    }
}

/// rein's own runtime as a harness for isolated completions: one streamed
/// chat request with the system text and the prompt, and no `tools` field.
struct Builtin {
    provider: String,
    providers: Providers,
}

#[async_trait]
impl AgentHarness for Builtin {
    fn id(&self) -> &str {
        BUILTIN_RUNTIME
    }

    fn label(&self) -> &str {
        "rein (built-in)"
    }

    fn resolve_isolated_completion_runtime(&self, _owner: CompletionOwner) -> CompletionRuntime {
        CompletionRuntime::Rein
    }

    async fn supports(&self, _ctx: &SupportContext) -> Support {
        Support::Supported {
            priority: 0,
            reason: None,
        }
    }

    async fn run_isolated_completion_v2(
        &self,
        params: &IsolatedParams,
    ) -> Option<Result<CompletionOutput, CompletionError>> {
        let CompletionAuth::Host {
            transport_model,
            profile,
        } = &params.auth
        else {
            return Some(Err(CompletionError::Failed(
                "rein prepares its own requests; it was handed a harness's auth plan".into(),
            )));
        };
        // The host's credential of the profile, on the provider's client.
        let key = Some(profile.credential.clone()).filter(|k| !k.is_empty());
        let mut providers = self.providers.clone();
        providers.openai.api_key.clone_from(&key);
        providers.anthropic.api_key = key;
        let client = match providers.client(&self.provider, transport_model) {
            Ok(c) => c,
            Err(e) => return Some(Err(CompletionError::Failed(e))),
        };
        let mut messages = Vec::new();
        if let Some(system) = &params.system {
            messages.push(Message::System {
                content: system.clone(),
            });
        }
        messages.push(Message::User {
            content: params.prompt.clone(),
        });
        if let Err(e) = params.ctx.assert_current() {
            return Some(Err(e));
        }
        let started = Instant::now();
        let ask = crate::openai::Ask {
            tool_choice: None,
            max_tokens: params.shape.max_tokens,
            json_schema: params.shape.json_schema.as_ref(),
        };
        let answer = client.ask(&messages, &[], &ask, |_| {}).await;
        params
            .ctx
            .on_request_complete(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        Some(match answer {
            Ok(response) => {
                // The server's count, or rein's estimate marked so.
                let usage = response.usage.unwrap_or_else(|| rein_protocol::Usage {
                    input_tokens: crate::context::estimate(&messages),
                    output_tokens: crate::context::tokens_of(response.content.len()),
                    estimated: true,
                    ..rein_protocol::Usage::default()
                });
                let content = content_parts(response.content, response.tool_calls);
                Ok(CompletionOutput {
                    content,
                    stop_reason: response.finish_reason,
                    usage: Some(usage),
                })
            }
            Err(ChatError::Http {
                status: status @ (401 | 403),
                message,
                ..
            }) => Err(CompletionError::Credential {
                profile: profile.id.clone(),
                message: format!("the model API answered {status}: {message}"),
            }),
            Err(e) => Err(CompletionError::Failed(e.to_string())),
        })
    }
}

/// A model's answer as an isolated completion's content: its text, then the
/// tools it asked to call (by name: an isolated completion calls none).
pub(crate) fn content_parts(
    text: String,
    tool_calls: Vec<crate::openai::ToolCall>,
) -> Vec<ContentPart> {
    let mut content = vec![ContentPart::Text(text)];
    content.extend(tool_calls.into_iter().map(|c| ContentPart::ToolCall {
        name: c.function.name,
    }));
    content
}
