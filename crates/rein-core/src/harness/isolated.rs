//! Isolated completion (spec harness-sdk §4): one prompt-only inference call
//! with a literally empty tool surface (titles, summaries, classifications),
//! served by the selected harness or not at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::AgentHarness;

pub use rein_protocol::harness::{CompletionOwner, CompletionRuntime};

/// A credential profile, in the host's fallback order. Its secret never
/// appears in debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthProfile {
    pub id: String,
    pub credential: String,
}

impl std::fmt::Debug for AuthProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthProfile")
            .field("id", &self.id)
            .field("credential", &"<redacted>")
            .finish()
    }
}

/// How one attempt is authorized (spec §4 rule 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompletionAuth {
    /// Use exactly this transport model and this profile's credentials; do not
    /// substitute others.
    Host {
        transport_model: String,
        profile: AuthProfile,
    },
    /// Prepare the request from this plan, with the credentials of this one
    /// profile and no other.
    Harness {
        auth_plan: String,
        profile: AuthProfile,
    },
}

/// How an answer is to be shaped, where the runtime can ask for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerShape {
    /// The most tokens the answer may have.
    pub max_tokens: Option<u32>,
    /// A JSON Schema the answer must match, asked of the model as structured
    /// output where its provider has that (the answer is checked anyway).
    pub json_schema: Option<serde_json::Value>,
}

/// What the harness is handed for one attempt.
#[derive(Debug)]
pub struct IsolatedParams {
    pub prompt: String,
    pub system: Option<String>,
    pub shape: AnswerShape,
    pub auth: CompletionAuth,
    pub ctx: CompletionContext,
}

/// The attempt's link back to the host: whether the completion is still
/// current, and where the request's own duration is reported.
#[derive(Debug, Clone)]
pub struct CompletionContext {
    ended: Arc<AtomicBool>,
    durations: Arc<Mutex<Vec<u64>>>,
}

impl CompletionContext {
    /// Fails once the completion has ended (spec §4 rule 18). Called after
    /// preparation and before every credential handoff, request or retry.
    pub fn assert_current(&self) -> Result<(), CompletionError> {
        if self.ended.load(Ordering::SeqCst) {
            Err(CompletionError::Ended)
        } else {
            Ok(())
        }
    }

    /// The inference request's own duration, measured at the request boundary
    /// (spec §4 rule 19); reported also when the dispatch failed.
    pub fn on_request_complete(&self, duration_ms: u64) {
        if let Ok(mut d) = self.durations.lock() {
            d.push(duration_ms);
        }
    }
}

/// One part of what the model returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    Text(String),
    Thinking(String),
    ToolCall { name: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionOutput {
    pub content: Vec<ContentPart>,
    pub stop_reason: String,
    /// What the request used, when the runtime counts it.
    pub usage: Option<rein_protocol::Usage>,
}

/// Whether empty visible text is an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutputTextPolicy {
    #[default]
    Default,
    /// Empty visible text is valid, and thinking is never shown as text.
    StrictVisible,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompletionError {
    #[error("harness `{0}` does not support isolated completion")]
    Unsupported(String),
    #[error("isolated completion timed out")]
    TimedOut,
    #[error("the isolated completion has already ended")]
    Ended,
    #[error("credentials of profile `{profile}` were refused: {message}")]
    Credential { profile: String, message: String },
    #[error("no credential profile to try")]
    NoProfiles,
    #[error("isolated completion returned a tool call")]
    ToolCall,
    #[error("isolated completion failed with stop reason {0}")]
    StopReason(String),
    #[error("isolated completion returned empty output")]
    Empty,
    #[error("isolated completion failed: {0}")]
    Failed(String),
}

/// The visible text of an output (spec §4 rule 20): only text and thinking,
/// ended by `stop` or `length`; a tool call, any other stop reason, or empty
/// visible text (unless `strict_visible`) is refused.
pub fn validate(
    output: &CompletionOutput,
    policy: OutputTextPolicy,
) -> Result<String, CompletionError> {
    if output
        .content
        .iter()
        .any(|p| matches!(p, ContentPart::ToolCall { .. }))
    {
        return Err(CompletionError::ToolCall);
    }
    if output.stop_reason != "stop" && output.stop_reason != "length" {
        return Err(CompletionError::StopReason(output.stop_reason.clone()));
    }
    let text: String = output
        .content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if text.trim().is_empty() && policy != OutputTextPolicy::StrictVisible {
        return Err(CompletionError::Empty);
    }
    Ok(text)
}

/// What the caller asks for.
#[derive(Debug, Clone)]
pub struct IsolatedRequest {
    pub prompt: String,
    pub system: Option<String>,
    pub shape: AnswerShape,
    /// The model the host resolved, for host-prepared requests.
    pub transport_model: String,
    /// How a harness that prepares its own auth is to do it.
    pub auth_plan: String,
    /// Credential profiles, in the host's fallback order.
    pub profiles: Vec<AuthProfile>,
    /// One deadline for every attempt together.
    pub deadline: Duration,
    pub policy: OutputTextPolicy,
}

/// What a completion gave, and how it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolatedResult {
    pub text: String,
    pub owner: CompletionOwner,
    pub runtime: CompletionRuntime,
    /// The profile whose credentials served it.
    pub profile: String,
    /// Each inference request's own duration, as the harness reported it.
    pub request_durations_ms: Vec<u64>,
    /// What the answered request used, when the runtime counted it.
    pub usage: Option<rein_protocol::Usage>,
    /// `stop`, or `length` when the answer was cut at the token limit.
    pub stop_reason: String,
}

/// Runs an isolated completion on `harness` (spec §4 rules 15–21): the owner
/// is the harness only if it prepares its own auth; the host walks the
/// profiles in order, calling the harness once per profile while credentials
/// are refused; one deadline covers every attempt; a harness without isolated
/// completion is an error, never replayed elsewhere.
pub async fn run_isolated(
    harness: &dyn AgentHarness,
    request: &IsolatedRequest,
) -> Result<IsolatedResult, CompletionError> {
    let owner = if harness.auth_bootstrap_harness() {
        CompletionOwner::Harness
    } else {
        CompletionOwner::Host
    };
    let runtime = harness.resolve_isolated_completion_runtime(owner);
    if request.profiles.is_empty() {
        return Err(CompletionError::NoProfiles);
    }
    let ended = Arc::new(AtomicBool::new(false));
    let durations = Arc::new(Mutex::new(Vec::new()));
    let ctx = CompletionContext {
        ended: Arc::clone(&ended),
        durations: Arc::clone(&durations),
    };
    let attempts = async {
        let mut last = None;
        for profile in &request.profiles {
            let auth = match owner {
                CompletionOwner::Host => CompletionAuth::Host {
                    transport_model: request.transport_model.clone(),
                    profile: profile.clone(),
                },
                CompletionOwner::Harness => CompletionAuth::Harness {
                    auth_plan: request.auth_plan.clone(),
                    profile: profile.clone(),
                },
            };
            let params = IsolatedParams {
                prompt: request.prompt.clone(),
                system: request.system.clone(),
                shape: request.shape.clone(),
                auth,
                ctx: ctx.clone(),
            };
            // Prepared: still current before the handoff.
            ctx.assert_current()?;
            match harness.run_isolated_completion_v2(&params).await {
                None => return Err(CompletionError::Unsupported(harness.id().to_owned())),
                Some(Ok(output)) => {
                    return validate(&output, request.policy)
                        .map(|text| (text, profile.id.clone(), output.usage, output.stop_reason));
                }
                Some(Err(e @ CompletionError::Credential { .. })) => last = Some(e),
                Some(Err(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or(CompletionError::NoProfiles))
    };
    let outcome = match tokio::time::timeout(request.deadline, attempts).await {
        Ok(outcome) => outcome,
        Err(_) => Err(CompletionError::TimedOut),
    };
    ended.store(true, Ordering::SeqCst);
    let (text, profile, usage, stop_reason) = outcome?;
    let request_durations_ms = durations.lock().map(|d| d.clone()).unwrap_or_default();
    Ok(IsolatedResult {
        text,
        owner,
        runtime,
        profile,
        request_durations_ms,
        usage,
        stop_reason,
    })
}
