//! Agent harnesses (spec harness-sdk.md §1–§2): the [`AgentHarness`] contract,
//! the plugins that register harnesses, the registry, and the selection of the
//! runtime that serves a model route, with the [`SelectionDecision`] that
//! explains it.
//!
//! The built-in runtime (`rein`) is not a registered harness: it is what
//! selection falls back to, and its id is reserved so no plugin can pass for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use rein_protocol::api::{AuthBootstrap, HarnessInfo};
use rein_protocol::{
    BUILTIN_RUNTIME, Candidate, DEFAULT_RUNTIME, PolicySource, SelectionDecision, SelectionPolicy,
    SelectionReason, Support, SupportContext, WorkspaceEnvironment,
};

/// A plugin: it registers harnesses (and, later, executor controllers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginInfo {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The runtime ids it is loaded for besides its own harnesses (its
    /// manifest's `activation.on_agent_harnesses`): its executor controller
    /// serves those runtimes' sessions (spec §3 rule 10).
    pub activates: Vec<String>,
}

/// An agent runtime behind one contract. `supports` is asked during selection;
/// the optional parts default to "not declared".
#[async_trait]
pub trait AgentHarness: Send + Sync {
    fn id(&self) -> &str;
    fn label(&self) -> &str;
    /// Whether (and how eagerly) it serves this model route.
    async fn supports(&self, ctx: &SupportContext) -> Support;
    /// Providers for which `auto` may choose it: `None` asks `supports` for
    /// every provider; `Some(empty)` makes it explicit-only.
    fn auto_selection_provider_ids(&self) -> Option<Vec<String>> {
        None
    }
    /// Whether it prepares its own credentials (`auth_bootstrap = harness`).
    fn auth_bootstrap_harness(&self) -> bool {
        false
    }
    fn workspace_environment(&self) -> Option<WorkspaceEnvironment> {
        None
    }
    /// Plugins trusted to run its model-locked sessions.
    fn delegated_execution_plugin_ids(&self) -> Vec<String> {
        Vec::new()
    }
    /// What its runtime speaks: `rein` (in process, or a plugin on rein's
    /// protocol) or `acp` (an external agent).
    fn protocol(&self) -> &'static str {
        "rein"
    }
    /// Runs one attempt: the prompt, with these tools, in this session and
    /// workspace, before the deadline; partial replies and agent events go to
    /// `params.events` as they come.
    async fn run_attempt(&self, params: AttemptParams) -> Result<AttemptResult, HarnessError> {
        let _ = params;
        Err(HarnessError::Unsupported(self.id().to_owned()))
    }
    /// Ends the native side of a session before rein resets it. A
    /// [`ResetError::Cleanup`] means required native cleanup could not finish:
    /// the reset is refused and the session kept.
    async fn reset(&self, session: &AgentSession) -> Result<(), ResetError> {
        let _ = session;
        Ok(())
    }
    /// Its plugin is reloaded (spec §3 rule 11): a runtime that keeps a
    /// program running stops it, so that the next call starts it anew.
    async fn restart(&self) {}
    /// Serves an isolated completion (spec §4); `None`: not supported.
    async fn run_isolated_completion_v2(
        &self,
        params: &isolated::IsolatedParams,
    ) -> Option<Result<isolated::CompletionOutput, isolated::CompletionError>> {
        let _ = params;
        None
    }
    /// Which path serves an isolated completion for this owner: the host's
    /// (`Rein`) or the harness's own (`OwnRuntime`). Synchronous and free of side
    /// effects: the same selector the dispatch uses. Without a declaration,
    /// the harness itself (as the SDK reports a harness without the hook).
    fn resolve_isolated_completion_runtime(
        &self,
        owner: isolated::CompletionOwner,
    ) -> isolated::CompletionRuntime {
        let _ = owner;
        isolated::CompletionRuntime::OwnRuntime
    }
}

/// One attempt as the harness is handed it.
#[derive(Debug)]
pub struct AttemptParams {
    pub attempt_id: String,
    pub prompt: String,
    pub tools: Vec<String>,
    pub session_key: String,
    /// The task's workspace, pinned: files the runtime reads or writes for
    /// the agent are opened beneath the directory the task was given.
    pub workspace: rein_sandbox::Pinned,
    pub deadline: std::time::Duration,
    pub cancel: tokio_util::sync::CancellationToken,
    pub events: tokio::sync::mpsc::UnboundedSender<AttemptEvent>,
    /// The step's line to its run: permission questions go there (a person
    /// decides; without it, every permission question is refused), and a
    /// harness that asks reports its agent events there too
    /// ([`crate::asking::Asker::report`]), so they stay in order with its
    /// questions. Events sent to `events` are forwarded to it as well.
    pub asker: Option<crate::asking::Asker>,
    /// The step's journal, where a harness may keep what a later attempt needs
    /// (an external agent's session id), durably.
    pub journal: Option<crate::journal::Journal>,
    /// The MCP servers the step names, each with its declaration, for a
    /// runtime that connects to them itself (an ACP agent's `mcpServers`).
    pub mcp_servers: Vec<rein_protocol::McpUse>,
    /// The permission rules in force for the step (the configured ones and
    /// the step's own): they decide an agent's permission requests before
    /// any person is asked.
    pub policy: std::sync::Arc<rein_sandbox::Policy>,
    /// The images given with the prompt, read from the workspace.
    pub images: Vec<rein_protocol::plugin::AttemptImage>,
    /// Whose session it is, when it is another plugin's run here by
    /// delegation (rules 22–23).
    pub delegated_execution: Option<rein_protocol::plugin::DelegatedScope>,
}

/// What an attempt reports while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEvent {
    PartialReply(String),
    Agent(serde_json::Value),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptResult {
    pub text: String,
    pub stop_reason: String,
    /// What else the runtime reported (tool calls, side effects), for the
    /// step's output; `null` when nothing.
    pub details: serde_json::Value,
    /// What the attempt's model calls used, when the runtime reported it,
    /// and the model that served them if it said.
    pub usage: Option<(rein_protocol::Usage, Option<String>)>,
}

/// Why an attempt failed. Once a harness has claimed a run, its failure is
/// reported, never replayed on another runtime (spec §2 rule 7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HarnessError {
    #[error("harness `{0}` cannot run attempts")]
    Unsupported(String),
    #[error("harness `{harness}` did not finish within {ms} ms")]
    TimedOut { harness: String, ms: u64 },
    #[error("the attempt was cancelled")]
    Cancelled,
    /// A person refused what the runtime asked (a skipped permission
    /// request): its turn was cancelled.
    #[error("{message}")]
    Refused { harness: String, message: String },
    #[error("harness `{harness}` failed: {message}")]
    Failed { harness: String, message: String },
}

/// An agent session as rein keeps it: which harness runs it and its native
/// side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSession {
    pub key: String,
    pub harness_id: String,
    pub native_session_id: Option<String>,
    pub turns: u64,
}

/// How a harness's reset went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// Required native cleanup could not finish (a `SessionCleanupError`).
    #[error("session cleanup failed: {0}")]
    Cleanup(String),
    #[error("{0}")]
    Other(String),
}

/// A reset refused because required native cleanup failed; the session is as
/// it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "session {session} was not reset: harness `{harness}` could not finish its cleanup ({reason})"
)]
pub struct SessionCleanupError {
    pub session: String,
    pub harness: String,
    pub reason: String,
}

/// Resets a session (spec §3 rule 14): the harness's reset and every other
/// cleanup run; if the harness's required cleanup failed, the host waits for
/// the others, then refuses and keeps the session; an ordinary failure is
/// logged and the reset goes on.
pub async fn reset_session(
    harness: &dyn AgentHarness,
    session: &mut AgentSession,
    others: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>>,
) -> Result<(), SessionCleanupError> {
    let own = harness.reset(session).await;
    for cleanup in others {
        cleanup.await;
    }
    match own {
        Err(ResetError::Cleanup(reason)) => {
            return Err(SessionCleanupError {
                session: session.key.clone(),
                harness: harness.id().to_owned(),
                reason,
            });
        }
        Err(ResetError::Other(e)) => {
            tracing::warn!(session = %session.key, harness = harness.id(), error = %e, "the harness's reset failed; resetting anyway");
        }
        Ok(()) => {}
    }
    session.native_session_id = None;
    session.turns = 0;
    Ok(())
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    #[error("plugin `{plugin}` registered a harness with an empty id")]
    EmptyId { plugin: String },
    #[error(
        "plugin `{plugin}` cannot register a harness with id `{id}`: `rein` and `openclaw` name the built-in runtime, `auto` and `default` runtime settings"
    )]
    Reserved { plugin: String, id: String },
    #[error(
        "plugin `{plugin}` cannot register harness `{id}`: plugin `{owner}` registered it first"
    )]
    Duplicate {
        plugin: String,
        id: String,
        owner: String,
    },
    #[error(
        "plugin `{plugin}` registered an executor controller with a relative workspace directory `{path}`; it must be absolute"
    )]
    RelativeWorkspace { plugin: String, path: String },
    #[error("plugin `{plugin}` already registered an executor controller; a plugin has one")]
    SecondController { plugin: String },
}

/// A registered harness and the plugin that owns it.
#[derive(Clone)]
pub struct Registered {
    pub harness: Arc<dyn AgentHarness>,
    pub plugin: PluginInfo,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("id", &self.harness.id())
            .field("plugin", &self.plugin.id)
            .finish()
    }
}

pub mod completion;
pub mod delegation;
pub mod executor;
pub mod isolated;

/// Whether a loaded plugin may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginStatus {
    Enabled,
    /// Switched off by the operator: its registrations stay, unused.
    Disabled,
    /// Its grants were withdrawn: whatever it holds stops working at once.
    Revoked,
}

impl PluginStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginStatus::Enabled => "enabled",
            PluginStatus::Disabled => "disabled",
            PluginStatus::Revoked => "revoked",
        }
    }
}

/// A plugin's status, changed while the registry is shared (an operator
/// disables or revokes a plugin of a running server).
#[derive(Debug, Clone)]
pub(crate) struct StatusCell(Arc<std::sync::atomic::AtomicU8>);

impl StatusCell {
    fn new(status: PluginStatus) -> StatusCell {
        StatusCell(Arc::new(std::sync::atomic::AtomicU8::new(status as u8)))
    }

    pub(crate) fn get(&self) -> PluginStatus {
        match self.0.load(std::sync::atomic::Ordering::SeqCst) {
            0 => PluginStatus::Enabled,
            1 => PluginStatus::Disabled,
            _ => PluginStatus::Revoked,
        }
    }

    fn set(&self, status: PluginStatus) {
        self.0
            .store(status as u8, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Why a plugin's status could not be changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginChangeError {
    #[error("no plugin `{id}` is loaded here (loaded: {loaded})")]
    Unknown { id: String, loaded: String },
    #[error("plugin `{id}` was revoked: a revoked plugin stays revoked until rein restarts")]
    Revoked { id: String },
}

/// A loaded plugin: what it is, whether it may be used, and the signal its
/// revocation sends to the operations it owns.
#[derive(Debug, Clone)]
pub(crate) struct PluginState {
    pub(crate) info: PluginInfo,
    pub(crate) status: StatusCell,
    pub(crate) revoked: tokio_util::sync::CancellationToken,
    /// Its current registrations' serial: a reload gives a new one.
    pub(crate) serial: Arc<std::sync::atomic::AtomicU64>,
}

/// The harnesses (and executor controllers) plugins registered. Each registry
/// has a generation: one that replaces another has a later one, and retiring a
/// registry ends every handle resolved from it.
#[derive(Debug, Default)]
pub struct HarnessRegistry {
    generation: u64,
    /// Unique to this registry (and so to the process that made it): an
    /// executor recorded under another instance is stale.
    instance: String,
    harnesses: BTreeMap<String, Registered>,
    plugins: BTreeMap<String, PluginState>,
    controllers: BTreeMap<String, executor::Slot>,
    retired: tokio_util::sync::CancellationToken,
    next_serial: u64,
}

/// What a plugin's `register` entry is handed.
#[derive(Debug)]
pub struct PluginApi<'r> {
    registry: &'r mut HarnessRegistry,
    plugin: PluginInfo,
    refused: Vec<RegistrationError>,
}

impl PluginApi<'_> {
    /// Registers a harness (spec §1 rules 1–2): an empty or reserved id, or one
    /// already taken, is refused and the first registration stays.
    pub fn register_agent_harness(
        &mut self,
        harness: Arc<dyn AgentHarness>,
    ) -> Result<(), RegistrationError> {
        let result = self.registry.add(&self.plugin, harness);
        if let Err(e) = &result {
            self.refused.push(e.clone());
        }
        result
    }
}

impl HarnessRegistry {
    pub fn new(generation: u64) -> HarnessRegistry {
        HarnessRegistry {
            generation,
            instance: format!("{}.{generation}", rein_protocol::ids::new_span_id()),
            ..HarnessRegistry::default()
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// This registry's own id: no other registry, in this process or another,
    /// has it.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Loads a plugin: runs its `register` entry with this registry's API and
    /// returns what was refused (the rest stays registered). Loading a plugin
    /// again replaces its registrations: handles to the old ones stop working.
    pub fn load(
        &mut self,
        plugin: PluginInfo,
        register: impl FnOnce(&mut PluginApi<'_>),
    ) -> Vec<RegistrationError> {
        self.next_serial += 1;
        let serial = self.next_serial;
        match self.plugins.get_mut(&plugin.id) {
            Some(state) => {
                state
                    .serial
                    .store(serial, std::sync::atomic::Ordering::SeqCst);
                state.info = plugin.clone();
                let id = plugin.id.clone();
                self.harnesses.retain(|_, r| r.plugin.id != id);
                self.controllers.remove(&id);
            }
            None => {
                self.plugins.insert(
                    plugin.id.clone(),
                    PluginState {
                        info: plugin.clone(),
                        status: StatusCell::new(PluginStatus::Enabled),
                        revoked: tokio_util::sync::CancellationToken::new(),
                        serial: Arc::new(std::sync::atomic::AtomicU64::new(serial)),
                    },
                );
            }
        }
        let mut api = PluginApi {
            registry: self,
            plugin,
            refused: Vec::new(),
        };
        register(&mut api);
        api.refused
    }

    fn add(
        &mut self,
        plugin: &PluginInfo,
        harness: Arc<dyn AgentHarness>,
    ) -> Result<(), RegistrationError> {
        let id = harness.id().to_owned();
        if id.trim().is_empty() {
            return Err(RegistrationError::EmptyId {
                plugin: plugin.id.clone(),
            });
        }
        if rein_protocol::harness::is_builtin(&id) || id == DEFAULT_RUNTIME || id == "auto" {
            return Err(RegistrationError::Reserved {
                plugin: plugin.id.clone(),
                id,
            });
        }
        if let Some(first) = self.harnesses.get(&id) {
            return Err(RegistrationError::Duplicate {
                plugin: plugin.id.clone(),
                id,
                owner: first.plugin.id.clone(),
            });
        }
        self.harnesses.insert(
            id,
            Registered {
                harness,
                plugin: plugin.clone(),
            },
        );
        Ok(())
    }

    pub fn get(&self, id: &str) -> Option<&Registered> {
        self.harnesses.get(id)
    }

    /// Every registered harness, by id.
    pub fn harnesses(&self) -> impl Iterator<Item = &Registered> {
        self.harnesses.values()
    }

    /// The status of the plugin that registered harness `id`.
    pub fn owner_status(&self, id: &str) -> Option<PluginStatus> {
        let owner = &self.harnesses.get(id)?.plugin.id;
        self.plugins.get(owner).map(|p| p.status.get())
    }

    /// The harnesses selection may choose: those of enabled plugins.
    fn usable(&self) -> impl Iterator<Item = &Registered> {
        self.harnesses
            .values()
            .filter(|r| self.owner_status(r.harness.id()) == Some(PluginStatus::Enabled))
    }

    pub fn plugins(&self) -> impl Iterator<Item = (&PluginInfo, PluginStatus)> {
        self.plugins.values().map(|p| (&p.info, p.status.get()))
    }

    /// The plugin whose executor controller serves the sessions of harness
    /// `harness_id` (spec §3 rule 10): its own plugin's, if that plugin
    /// registered one; else that of the first plugin (by id) whose
    /// activation names the harness. None: no controller.
    pub fn controller_for(&self, harness_id: &str) -> Option<String> {
        let own = &self.harnesses.get(harness_id)?.plugin.id;
        if self.controllers.contains_key(own) {
            return Some(own.clone());
        }
        self.plugins
            .values()
            .find(|p| {
                p.info.activates.iter().any(|h| h == harness_id)
                    && self.controllers.contains_key(&p.info.id)
            })
            .map(|p| p.info.id.clone())
    }

    /// Switches a plugin off: its registrations can no longer be resolved.
    pub fn disable(&self, plugin_id: &str) {
        if let Some(p) = self.plugins.get(plugin_id)
            && p.status.get() == PluginStatus::Enabled
        {
            p.status.set(PluginStatus::Disabled);
        }
    }

    /// Withdraws a plugin's grants: its handles stop working and the operations
    /// it is running are cancelled.
    pub fn revoke(&self, plugin_id: &str) {
        if let Some(p) = self.plugins.get(plugin_id) {
            p.status.set(PluginStatus::Revoked);
            p.revoked.cancel();
        }
    }

    /// Reloads plugin `plugin_id` while rein runs (spec §3 rule 11): its
    /// registration is replaced — handles resolved before stop working, and
    /// the executors recorded under it are stale, retired and ensured again
    /// at their sessions' next turn — and its program is restarted at its
    /// next call. A revoked plugin stays revoked. The new registration's
    /// serial, or why not.
    pub async fn reload(&self, plugin_id: &str) -> Result<u64, PluginChangeError> {
        let p = self.known(plugin_id)?;
        if p.status.get() == PluginStatus::Revoked {
            return Err(PluginChangeError::Revoked {
                id: plugin_id.to_owned(),
            });
        }
        let serial = p.serial.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        for r in self.harnesses.values().filter(|r| r.plugin.id == plugin_id) {
            r.harness.restart().await;
        }
        if let Some(slot) = self.controllers.get(plugin_id) {
            slot.controller.restart().await;
        }
        Ok(serial)
    }

    /// Where executors of `plugin_id`'s controller are recorded as made: this
    /// registry and the plugin's current registration (an executor recorded
    /// under another is stale).
    pub fn instance_for(&self, plugin_id: &str) -> String {
        match self.plugins.get(plugin_id) {
            Some(p) => format!(
                "{}#{}",
                self.instance,
                p.serial.load(std::sync::atomic::Ordering::SeqCst)
            ),
            None => self.instance.clone(),
        }
    }

    /// The loaded plugin `plugin_id`, or an error naming the loaded ones.
    pub(crate) fn known(&self, plugin_id: &str) -> Result<&PluginState, PluginChangeError> {
        self.plugins.get(plugin_id).ok_or_else(|| {
            let loaded: Vec<&str> = self.plugins.keys().map(String::as_str).collect();
            PluginChangeError::Unknown {
                id: plugin_id.to_owned(),
                loaded: if loaded.is_empty() {
                    "none".into()
                } else {
                    loaded.join(", ")
                },
            }
        })
    }

    /// An operator's change of a loaded plugin's status while rein runs:
    /// `enable` (from disabled), `disable`, or `revoke` (final until a
    /// restart). The new status, or why not.
    pub fn change_plugin(
        &self,
        plugin_id: &str,
        to: PluginStatus,
    ) -> Result<PluginStatus, PluginChangeError> {
        let p = self.known(plugin_id)?;
        if p.status.get() == PluginStatus::Revoked {
            return Err(PluginChangeError::Revoked {
                id: plugin_id.to_owned(),
            });
        }
        match to {
            PluginStatus::Revoked => self.revoke(plugin_id),
            other => p.status.set(other),
        }
        Ok(p.status.get())
    }

    /// Ends this registry: every handle resolved from it stops working and the
    /// operations run through them are cancelled.
    pub fn retire(&self) {
        self.retired.cancel();
    }

    /// A registry that replaces this one (the next generation, empty); this one
    /// is retired.
    pub fn succeed(&self) -> HarnessRegistry {
        self.retire();
        HarnessRegistry::new(self.generation + 1)
    }
}

/// The runtime settings selection reads: `auto`, `rein`, or a harness id, by
/// model (`provider/model`) and by provider, and a default.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimePolicy {
    #[serde(default = "auto")]
    pub default: String,
    #[serde(default)]
    pub providers: BTreeMap<String, String>,
    /// Keyed `provider/model`.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// The runtime ids each provider's policy declares compatible, handed to
    /// harnesses as `modelProvider.compatibleIds` when they are asked.
    #[serde(default)]
    pub compatible: BTreeMap<String, Vec<String>>,
}

/// What rein knows about how a provider's requests are prepared, for the
/// `modelProvider` a harness is shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderFacts {
    /// Where the credentials come from (`env:OPENAI_API_KEY`); none: no key.
    pub auth_source: Option<String>,
    /// The provider's requests go somewhere other than its default endpoint.
    pub transport_overridden: bool,
}

fn auto() -> String {
    "auto".into()
}

impl Default for RuntimePolicy {
    fn default() -> RuntimePolicy {
        RuntimePolicy {
            default: auto(),
            providers: BTreeMap::new(),
            models: BTreeMap::new(),
            compatible: BTreeMap::new(),
        }
    }
}

/// One selection: the route, and a harness the session is pinned to, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectionRequest {
    pub provider: String,
    pub model: Option<String>,
    pub session_runtime: Option<String>,
    /// The runtime the run names itself (a step's `runtime`).
    pub step_runtime: Option<String>,
    pub model_provider: rein_protocol::ModelProvider,
    /// The agent session the run is for.
    pub session: Option<String>,
}

/// Why no runtime could be selected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// An explicit runtime that no plugin registered.
    #[error("no harness `{id}` is registered (registered: {registered})")]
    MissingHarness { id: String, registered: String },
    /// An explicit runtime whose plugin is disabled or revoked.
    #[error("harness `{id}` is unavailable: its plugin is {status}")]
    Unavailable { id: String, status: &'static str },
    /// An explicit runtime that does not serve the route and names no fallback.
    #[error("harness \"{id}\" does not support {route} ({reason})")]
    Unsupported {
        id: String,
        route: String,
        reason: String,
    },
}

impl RuntimePolicy {
    /// The `modelProvider` of `provider`'s routes: its declared compatible
    /// runtimes, and how its requests are prepared.
    pub fn model_provider(
        &self,
        provider: &str,
        facts: &ProviderFacts,
    ) -> rein_protocol::ModelProvider {
        rein_protocol::ModelProvider::new(
            if facts.transport_overridden {
                rein_protocol::TransportOverrides::Present
            } else {
                rein_protocol::TransportOverrides::None
            },
            self.compatible.get(provider).cloned().unwrap_or_default(),
            facts.auth_source.clone(),
        )
    }

    /// The selection request of a run on `provider`/`model`, its context
    /// filled from the route.
    pub fn request(
        &self,
        provider: &str,
        model: Option<String>,
        facts: &ProviderFacts,
    ) -> SelectionRequest {
        SelectionRequest {
            provider: provider.to_owned(),
            model,
            model_provider: self.model_provider(provider, facts),
            ..SelectionRequest::default()
        }
    }

    /// The runtime setting in force (spec §2 rule 3): a pinned session, then
    /// the run's own (a step's `runtime`), then a model-scoped setting, then a
    /// provider-scoped one, then the default.
    pub fn resolve(&self, request: &SelectionRequest) -> SelectionPolicy {
        let model_key = request
            .model
            .as_ref()
            .map(|m| format!("{}/{m}", request.provider));
        // A level set to `default` (the SDK's) defers to the levels below it.
        let set = |r: Option<&String>| r.filter(|r| r.as_str() != DEFAULT_RUNTIME).cloned();
        let (source, runtime) = if let Some(r) = set(request.session_runtime.as_ref()) {
            (PolicySource::Session, r)
        } else if let Some(r) = set(request.step_runtime.as_ref()) {
            (PolicySource::Step, r)
        } else if let Some(r) = set(model_key.as_ref().and_then(|k| self.models.get(k))) {
            (PolicySource::Model, r)
        } else if let Some(r) = set(self.providers.get(&request.provider)) {
            (PolicySource::Provider, r)
        } else {
            (
                PolicySource::Default,
                set(Some(&self.default)).unwrap_or_else(auto),
            )
        };
        SelectionPolicy { source, runtime }
    }
}

fn route(request: &SelectionRequest) -> String {
    match &request.model {
        Some(m) => format!("{}/{m}", request.provider),
        None => request.provider.clone(),
    }
}

fn candidate(id: &str, support: &Support) -> Candidate {
    match support {
        Support::Supported { priority, reason } => Candidate {
            id: id.to_owned(),
            supported: true,
            priority: Some(*priority),
            reason: reason.clone(),
        },
        Support::Unsupported { reason, .. } => Candidate {
            id: id.to_owned(),
            supported: false,
            priority: None,
            reason: reason.clone(),
        },
    }
}

/// Chooses the runtime for `request` under `policy` (spec §2 rules 3–6).
pub async fn select(
    registry: &HarnessRegistry,
    policy: &RuntimePolicy,
    request: &SelectionRequest,
) -> Result<SelectionDecision, SelectionError> {
    let in_force = policy.resolve(request);
    let ctx = SupportContext {
        provider: request.provider.clone(),
        model_id: request.model.clone(),
        requested_runtime: in_force.runtime.clone(),
        model_provider: request.model_provider.clone(),
        session_key: request.session.clone(),
    };
    let decision = |selected: &str, reason, candidates| SelectionDecision {
        provider: request.provider.clone(),
        model: request.model.clone(),
        policy: in_force.clone(),
        selected: selected.to_owned(),
        reason,
        candidates,
        workspace_environment: registry
            .get(selected)
            .and_then(|r| r.harness.workspace_environment()),
        fallback_models: Vec::new(),
    };
    match in_force.runtime.as_str() {
        id if rein_protocol::harness::is_builtin(id) => Ok(decision(
            BUILTIN_RUNTIME,
            SelectionReason::ForcedBuiltin,
            Vec::new(),
        )),
        "auto" => {
            let mut candidates = Vec::new();
            let mut best: Option<(i32, String)> = None;
            for r in registry.usable() {
                let id = r.harness.id();
                let support = match r.harness.auto_selection_provider_ids() {
                    Some(ids) if ids.is_empty() => Support::Unsupported {
                        reason: Some("harness is explicit-only".into()),
                        fallback_runtime: None,
                    },
                    Some(ids) if !ids.contains(&request.provider) => Support::Unsupported {
                        reason: Some("provider is not auto-selectable".into()),
                        fallback_runtime: None,
                    },
                    _ => r.harness.supports(&ctx).await,
                };
                if let Support::Supported { priority, .. } = support {
                    // Highest priority wins; on a tie the first id (they come in order).
                    if best.as_ref().is_none_or(|(p, _)| priority > *p) {
                        best = Some((priority, id.to_owned()));
                    }
                }
                candidates.push(candidate(id, &support));
            }
            Ok(match best {
                Some((_, id)) => decision(&id, SelectionReason::AutoPlugin, candidates),
                None => decision(BUILTIN_RUNTIME, SelectionReason::AutoBuiltin, candidates),
            })
        }
        id => {
            if let Some(status) = registry.owner_status(id)
                && status != PluginStatus::Enabled
            {
                return Err(SelectionError::Unavailable {
                    id: id.to_owned(),
                    status: if status == PluginStatus::Disabled {
                        "disabled"
                    } else {
                        "revoked"
                    },
                });
            }
            let Some(r) = registry.get(id) else {
                let registered: Vec<&str> = registry.harnesses().map(|r| r.harness.id()).collect();
                return Err(SelectionError::MissingHarness {
                    id: id.to_owned(),
                    registered: if registered.is_empty() {
                        "none".into()
                    } else {
                        registered.join(", ")
                    },
                });
            };
            let support = r.harness.supports(&ctx).await;
            let candidates = vec![candidate(id, &support)];
            match support {
                Support::Supported { .. } => {
                    Ok(decision(id, SelectionReason::ForcedPlugin, candidates))
                }
                Support::Unsupported {
                    fallback_runtime: Some(fallback),
                    ..
                } if rein_protocol::harness::is_builtin(&fallback) => Ok(decision(
                    BUILTIN_RUNTIME,
                    SelectionReason::PluginDeclaredFallback,
                    candidates,
                )),
                Support::Unsupported { reason, .. } => Err(SelectionError::Unsupported {
                    id: id.to_owned(),
                    route: route(request),
                    reason: reason.unwrap_or_else(|| "no reason given".into()),
                }),
            }
        }
    }
}

/// A registry with the policy that selects from it: what `rein harness list |
/// explain` reports, here or from a server.
#[derive(Debug)]
pub struct Harnesses {
    pub registry: Arc<HarnessRegistry>,
    pub policy: RuntimePolicy,
    /// How each provider's requests are prepared here (none known: nothing
    /// prepared, nothing overridden).
    pub facts: BTreeMap<String, ProviderFacts>,
    /// The configured fallback models (`fallback_models` in `rein.toml`),
    /// for a step that names none of its own.
    pub fallback_models: Vec<String>,
}

impl Harnesses {
    /// The built-in runtime, then every registered harness with its plugin and
    /// what it declares.
    pub fn list(&self) -> Vec<HarnessInfo> {
        let mut rows = vec![HarnessInfo {
            id: BUILTIN_RUNTIME.to_owned(),
            label: "the built-in runtime".to_owned(),
            plugin: None,
            builtin: true,
            protocol: "rein".to_owned(),
            auto_selection_provider_ids: None,
            auth_bootstrap: None,
            workspace_environment: None,
            delegated_execution_plugin_ids: None,
            status: None,
        }];
        for r in self.registry.harnesses() {
            let h = &r.harness;
            rows.push(HarnessInfo {
                id: h.id().to_owned(),
                label: h.label().to_owned(),
                plugin: Some(r.plugin.id.clone()),
                builtin: false,
                protocol: h.protocol().to_owned(),
                auto_selection_provider_ids: h.auto_selection_provider_ids(),
                auth_bootstrap: Some(if h.auth_bootstrap_harness() {
                    AuthBootstrap::Harness
                } else {
                    AuthBootstrap::Host
                }),
                workspace_environment: h.workspace_environment(),
                delegated_execution_plugin_ids: Some(h.delegated_execution_plugin_ids()),
                status: self
                    .registry
                    .owner_status(h.id())
                    .map(|s| s.as_str().to_owned()),
            });
        }
        rows
    }

    /// Which runtime would serve `provider`/`model`, `runtime` being what a
    /// step would name itself.
    pub async fn explain(
        &self,
        provider: String,
        model: Option<String>,
        runtime: Option<String>,
    ) -> Result<SelectionDecision, SelectionError> {
        let request = SelectionRequest {
            step_runtime: runtime,
            ..self.policy.request(
                &provider,
                model,
                &self.facts.get(&provider).cloned().unwrap_or_default(),
            )
        };
        let mut decision = select(&self.registry, &self.policy, &request).await?;
        if decision.selected == BUILTIN_RUNTIME {
            decision.fallback_models = self.fallback_models.clone();
        }
        Ok(decision)
    }
}
