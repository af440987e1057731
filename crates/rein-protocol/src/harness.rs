//! Agent harnesses (spec harness-sdk.md §1–§2): what a harness says about a
//! model route, and the decision of which runtime serves it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The id of the built-in runtime; reserved.
pub const BUILTIN_RUNTIME: &str = "rein";

/// The built-in runtime's name in the OpenClaw harness SDK: a plugin ported
/// from it answers `fallbackRuntime: "openclaw"`, and a policy may name it.
/// It means rein's built-in runtime, and is reserved too.
pub const SDK_BUILTIN_RUNTIME: &str = "openclaw";

/// A runtime setting that defers to the one below it (the SDK's `default`:
/// the policy's default runtime).
pub const DEFAULT_RUNTIME: &str = "default";

/// Whether `id` names rein's built-in runtime (`rein`, or the SDK's
/// `openclaw`).
pub fn is_builtin(id: &str) -> bool {
    id == BUILTIN_RUNTIME || id == SDK_BUILTIN_RUNTIME
}

/// Whether the model provider's request transport is overridden.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransportOverrides {
    #[default]
    None,
    Present,
}

/// What a harness is asked about: the model route and how it is prepared
/// (camelCase on the wire, like the rest of the plugin protocol).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportContext {
    pub provider: String,
    pub model_id: Option<String>,
    /// `auto`, or the runtime asked for.
    pub requested_runtime: String,
    #[serde(default)]
    pub model_provider: ModelProvider,
    /// The agent session the run is for (`ses_…`), when there is one.
    pub session_key: Option<String>,
}

/// The model provider of a route, as the SDK's `ctx.modelProvider` has it:
/// `runtimePolicy.compatibleIds`, `requestTransportOverrides`,
/// `preparedAuth.source`. rein's earlier flat names (`compatibleIds`,
/// `preparedAuthSource`) are sent beside them for plugins written against
/// them.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelProvider {
    #[serde(default)]
    pub request_transport_overrides: TransportOverrides,
    #[serde(default)]
    pub runtime_policy: ProviderRuntimePolicy,
    pub prepared_auth: Option<PreparedAuth>,
    /// The same as `runtimePolicy.compatibleIds` (rein's earlier name).
    #[serde(default)]
    pub compatible_ids: Vec<String>,
    /// The same as `preparedAuth.source` (rein's earlier name).
    pub prepared_auth_source: Option<String>,
}

/// The provider's runtime policy, as a harness is shown it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRuntimePolicy {
    /// Runtime ids the provider's policy declares compatible.
    #[serde(default)]
    pub compatible_ids: Vec<String>,
}

/// How the route's credentials were prepared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreparedAuth {
    /// Where they come from (`env:OPENAI_API_KEY`, a profile).
    pub source: String,
}

impl ModelProvider {
    /// A provider's facts, in the SDK's structure and rein's earlier flat
    /// names alike.
    pub fn new(
        transport: TransportOverrides,
        compatible_ids: Vec<String>,
        auth_source: Option<String>,
    ) -> ModelProvider {
        ModelProvider {
            request_transport_overrides: transport,
            runtime_policy: ProviderRuntimePolicy {
                compatible_ids: compatible_ids.clone(),
            },
            prepared_auth: auth_source.clone().map(|source| PreparedAuth { source }),
            compatible_ids,
            prepared_auth_source: auth_source,
        }
    }
}

/// A harness's answer about one model route.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Support {
    Supported {
        #[serde(default)]
        priority: i32,
        reason: Option<String>,
    },
    Unsupported {
        reason: Option<String>,
        /// A runtime to fall back to when the harness was asked for explicitly
        /// (only the built-in runtime is honoured).
        fallback_runtime: Option<String>,
    },
}

/// Where a harness's agents work, shown to operators (it grants nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceKind {
    /// The provider hosts the workspace; the agent does not see local files.
    ProviderHosted,
    /// A directory on this machine.
    Local,
}

impl WorkspaceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceKind::ProviderHosted => "provider_hosted",
            WorkspaceKind::Local => "local",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceEnvironment {
    pub kind: WorkspaceKind,
    pub label: String,
}

/// Which setting chose the runtime (the most specific one present wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicySource {
    /// The session is pinned to a harness.
    Session,
    /// The run names its runtime itself: an agent step's `runtime`, a goal's or
    /// a completion's `--runtime`.
    Step,
    /// A setting for this provider and model.
    Model,
    /// A setting for this provider.
    Provider,
    /// Nothing set: `auto`.
    Default,
}

impl PolicySource {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::Session => "session",
            PolicySource::Step => "step",
            PolicySource::Model => "model",
            PolicySource::Provider => "provider",
            PolicySource::Default => "default",
        }
    }
}

/// Why the selected runtime serves the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SelectionReason {
    ForcedBuiltin,
    ForcedPlugin,
    PluginDeclaredFallback,
    AutoPlugin,
    AutoBuiltin,
}

impl SelectionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionReason::ForcedBuiltin => "forced_builtin",
            SelectionReason::ForcedPlugin => "forced_plugin",
            SelectionReason::PluginDeclaredFallback => "plugin_declared_fallback",
            SelectionReason::AutoPlugin => "auto_plugin",
            SelectionReason::AutoBuiltin => "auto_builtin",
        }
    }
}

/// One harness's answer, as the decision records it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Candidate {
    pub id: String,
    pub supported: bool,
    pub priority: Option<i32>,
    pub reason: Option<String>,
}

/// The policy in force for a selection: where it came from and what it says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SelectionPolicy {
    pub source: PolicySource,
    /// `auto`, `rein`, or a harness id.
    pub runtime: String,
}

/// Which runtime serves a run, and why (spec §2 rule 6).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SelectionDecision {
    pub provider: String,
    pub model: Option<String>,
    pub policy: SelectionPolicy,
    pub selected: String,
    pub reason: SelectionReason,
    /// Every harness asked, in the order asked (by id).
    pub candidates: Vec<Candidate>,
    /// Where the selected runtime's agents work, when it says.
    pub workspace_environment: Option<WorkspaceEnvironment>,
    /// The models (`PROVIDER/MODEL`) that serve a turn, in order, when the
    /// model before them is rate-limited, overloaded, failing or too small
    /// for the conversation (the built-in runtime's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
}

/// Who prepares the request's transport and credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionOwner {
    /// rein: the harness gets the exact transport model and auth to use.
    Host,
    /// The harness (it declares `auth_bootstrap = harness`): it gets an auth
    /// plan and the credentials of one profile.
    Harness,
}

/// Which path serves the completion: rein's host-prepared one, or the
/// harness's own runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CompletionRuntime {
    #[serde(rename = "rein")]
    Rein,
    #[serde(rename = "self")]
    OwnRuntime,
}

/// A completion as it came back, and how it was served.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Completion {
    /// The visible text of the answer.
    pub text: String,
    /// The answer as JSON, when a schema was given (and it passed).
    pub json: Option<serde_json::Value>,
    /// Which runtime served it, and why (the rule-21 selector's choice).
    pub selection: SelectionDecision,
    pub owner: CompletionOwner,
    /// What answered: `rein` (rein's host-prepared path) or the id of the
    /// harness whose own runtime did (rule 21: what is reported is what ran).
    pub runtime: String,
    /// Which credential profile served it.
    pub profile: String,
    /// Each inference request's own duration.
    pub request_durations_ms: Vec<u64>,
    /// The whole completion, selection included.
    pub duration_ms: u64,
    /// What its model request used (the server's count, or rein's estimate
    /// marked so), when the runtime that served it counts it.
    pub usage: Option<crate::Usage>,
    /// `stop`, or `length` when the answer was cut at the token limit.
    pub stop_reason: String,
}
