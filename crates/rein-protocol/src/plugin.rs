//! Out-of-process harness plugins (spec harness-sdk §1): the manifest that
//! declares one, and the messages rein and the plugin exchange as
//! newline-delimited JSON-RPC 2.0 over the plugin's stdin and stdout. The
//! protocol is described in `docs/src/agents/plugin-protocol.md`; every message has a JSON
//! Schema in `schemas/plugin/`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Support, SupportContext, WorkspaceEnvironment};

/// The version of the plugin protocol this rein speaks.
pub const PLUGIN_PROTOCOL_VERSION: u32 = 2;

/// Who prepares a harness's credentials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthBootstrap {
    #[default]
    Host,
    Harness,
}

/// A harness a plugin serves, as its manifest declares it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HarnessDeclaration {
    pub id: String,
    #[serde(default)]
    pub label: String,
    /// Providers `auto` may choose it for; absent: ask it for every provider;
    /// empty: explicit-only.
    pub auto_selection_provider_ids: Option<Vec<String>>,
    #[serde(default)]
    pub auth_bootstrap: AuthBootstrap,
    pub workspace_environment: Option<WorkspaceEnvironment>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegated_execution_plugin_ids: Vec<String>,
    /// Whether it serves isolated completions (`completion/isolated`).
    #[serde(default)]
    pub isolated_completion: bool,
    /// The SDK's `resolveIsolatedCompletionRuntime({authorizationOwner})`,
    /// declared: for each owner, whether rein's host-prepared path (`rein`,
    /// or the SDK's `openclaw`) or the harness itself (`self`) serves an
    /// isolated completion. Absent: the harness itself. The completion is
    /// dispatched as declared, so what is reported is what ran.
    pub isolated_completion_runtime: Option<IsolatedCompletionRuntime>,
}

/// Which path serves a harness's isolated completions, by owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IsolatedCompletionRuntime {
    /// When rein owns the credentials (`auth_bootstrap = "host"`).
    #[serde(default)]
    pub host: RuntimeChoice,
    /// When the harness owns them (`auth_bootstrap = "harness"`).
    #[serde(default)]
    pub harness: RuntimeChoice,
}

/// rein's host-prepared completion path, or the harness's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RuntimeChoice {
    #[serde(rename = "rein", alias = "openclaw")]
    Rein,
    #[default]
    #[serde(rename = "self")]
    OwnRuntime,
}

/// When a plugin must be loaded besides the harnesses it registers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Activation {
    /// Runtime ids for which the plugin is loaded even if it registers no
    /// harness of that id.
    #[serde(default)]
    pub on_agent_harnesses: Vec<String>,
}

/// What a plugin's program speaks on its stdin and stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PluginProtocol {
    /// rein's plugin protocol (`docs/src/agents/plugin-protocol.md`).
    #[default]
    Rein,
    /// The Agent Client Protocol: the program is an external agent; each
    /// harness it declares runs attempts as ACP prompt turns.
    Acp,
}

/// A plugin's manifest (`plugin.toml`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginManifest {
    pub id: String,
    #[serde(default)]
    pub protocol: PluginProtocol,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The program and its arguments; a relative program path is the
    /// manifest's directory's.
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub harnesses: Vec<HarnessDeclaration>,
    #[serde(default)]
    pub activation: Activation,
    /// How long a call may take before the plugin is stopped (default 30 s;
    /// `harness/runAttempt` has the attempt's own deadline).
    pub timeout_ms: Option<u64>,
    /// The plugin's executor controller, if it has one (`executor/ensure`,
    /// `executor/retire`).
    pub executor: Option<ExecutorDeclaration>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutorDeclaration {
    /// Absolute.
    pub workspace_directory: String,
}

/// `initialize`: the first request after the plugin starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub protocol_version: u32,
    pub plugin_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub protocol_version: u32,
}

/// `harness/supports` → [`Support`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportsParams {
    pub harness_id: String,
    pub context: SupportContext,
}

/// The answer to `harness/supports`, in the seed's shape: `{supported: true,
/// priority?, reason?}` or `{supported: false, reason?, fallbackRuntime?}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportsResult {
    pub supported: bool,
    /// With `supported`: higher wins when `auto` chooses (default 0).
    pub priority: Option<i32>,
    pub reason: Option<String>,
    /// Without `supported`: the runtime to fall back to when the harness was
    /// asked for explicitly (only the built-in runtime, `rein`, is honoured).
    pub fallback_runtime: Option<String>,
}

impl From<SupportsResult> for Support {
    fn from(r: SupportsResult) -> Support {
        if r.supported {
            Support::Supported {
                priority: r.priority.unwrap_or(0),
                reason: r.reason,
            }
        } else {
            Support::Unsupported {
                reason: r.reason,
                fallback_runtime: r.fallback_runtime,
            }
        }
    }
}

/// `harness/runAttempt`: run one attempt; partial replies and agent events come
/// as notifications naming the attempt before the result.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAttemptParams {
    pub harness_id: String,
    pub attempt_id: String,
    pub prompt: String,
    #[serde(default)]
    pub tools: Vec<String>,
    pub session_key: String,
    pub workspace: String,
    pub deadline_ms: u64,
    /// The MCP servers the step names, with their declarations (`command`,
    /// `args`, `env`, or `url`, `headers`), for the harness to connect to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<crate::McpUse>,
    /// The images given with the prompt (the SDK's `AttemptParams.images`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<AttemptImage>,
    /// Set when the session is another plugin's, run here by delegation
    /// (harness-sdk rules 22–23): whose session it is.
    pub delegated_execution: Option<DelegatedScope>,
}

/// The owner a delegated run is scoped to: the plugin whose session it is,
/// and the harness the session is locked to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DelegatedScope {
    pub owner_plugin_id: String,
    pub owner_harness_id: String,
    pub delegate_plugin_id: String,
}

/// An image an attempt is given: its bytes in base64, their MIME type, and
/// where it came from (a workspace path, or `acp:` and its position for one
/// an editor sent with a prompt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptImage {
    pub mime_type: String,
    pub data: String,
    pub path: String,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAttemptResult {
    pub text: String,
    pub stop_reason: String,
    /// What the attempt's model calls used, if the harness counts it.
    pub usage: Option<AttemptUsage>,
}

/// The tokens an attempt used, as a harness reports them (optional in
/// `RunAttemptResult`): `inputTokens` counts every prompt token, cached ones
/// included; `cachedInputTokens` the part read from a cache.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttemptUsage {
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: Option<u64>,
    /// The model that served the calls, if not the route's.
    pub model: Option<String>,
}

/// `harness/partialReply` (notification, plugin → rein).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartialReplyParams {
    pub attempt_id: String,
    pub text: String,
}

/// `harness/agentEvent` (notification, plugin → rein).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentEventParams {
    pub attempt_id: String,
    pub event: serde_json::Value,
}

/// How an isolated completion is authorized, on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "owner", rename_all = "snake_case")]
pub enum WireAuth {
    Host {
        #[serde(rename = "transportModel")]
        transport_model: String,
        #[serde(rename = "profileId")]
        profile_id: String,
        credential: String,
    },
    Harness {
        #[serde(rename = "authPlan")]
        auth_plan: String,
        #[serde(rename = "profileId")]
        profile_id: String,
        credential: String,
    },
}

/// `completion/isolated`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IsolatedCompletionParams {
    pub harness_id: String,
    pub prompt: String,
    pub system: Option<String>,
    pub auth: WireAuth,
}

/// One part of an isolated completion's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireContent {
    Text { text: String },
    Thinking { text: String },
    ToolCall { name: String },
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IsolatedCompletionResult {
    pub content: Vec<WireContent>,
    pub stop_reason: String,
    /// The inference request's own duration, when the plugin measured it.
    pub request_duration_ms: Option<u64>,
}

/// `harness/reset`. A plugin that cannot finish required native cleanup
/// answers with error code [`SESSION_CLEANUP_ERROR`].
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResetParams {
    pub harness_id: String,
    pub session_key: String,
    pub native_session_id: Option<String>,
}

/// The JSON-RPC error code of a failed required session cleanup.
pub const SESSION_CLEANUP_ERROR: i64 = -32010;
/// The JSON-RPC error code of refused credentials in `completion/isolated`.
pub const CREDENTIAL_ERROR: i64 = -32011;

/// `executor/ensure` and `executor/retire`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorParams {
    pub session_key: String,
    pub agent_id: String,
    pub native_session_id: Option<String>,
    pub environment_id: String,
    pub remote_url: Option<String>,
    pub workspace_directory: String,
}

#[cfg(test)]
mod supports_tests {
    use super::*;

    #[test]
    fn supports_speaks_the_seeds_shape_and_one_casing() {
        let yes: SupportsResult =
            serde_json::from_str(r#"{"supported": true, "priority": 100}"#).unwrap();
        assert_eq!(
            Support::from(yes),
            Support::Supported {
                priority: 100,
                reason: None
            }
        );
        let no: SupportsResult = serde_json::from_str(
            r#"{"supported": false, "reason": "effective route is not harness-compatible", "fallbackRuntime": "rein"}"#,
        )
        .unwrap();
        assert_eq!(
            Support::from(no),
            Support::Unsupported {
                reason: Some("effective route is not harness-compatible".into()),
                fallback_runtime: Some("rein".into()),
            }
        );
        // The version-1 shape is not taken for an answer.
        assert!(serde_json::from_str::<SupportsResult>(r#"{"status": "supported"}"#).is_err());
        let params = serde_json::to_value(SupportsParams {
            harness_id: "h".into(),
            context: crate::SupportContext {
                provider: "openai".into(),
                model_id: Some("m".into()),
                requested_runtime: "auto".into(),
                model_provider: crate::ModelProvider::default(),
                session_key: Some("ses_1".into()),
            },
        })
        .unwrap();
        let context = &params["context"];
        assert_eq!(context["modelId"], "m");
        assert_eq!(context["requestedRuntime"], "auto");
        assert_eq!(context["sessionKey"], "ses_1");
        assert!(
            context["modelProvider"]["compatibleIds"].is_array(),
            "{context}"
        );
        // The SDK's own structure: `runtimePolicy.compatibleIds`.
        assert!(
            context["modelProvider"]["runtimePolicy"]["compatibleIds"].is_array(),
            "{context}"
        );
    }
}
