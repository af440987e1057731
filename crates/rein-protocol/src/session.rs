//! Agent sessions (`ses_…`): the conversation of agent steps with their
//! runtime, kept durably beside the task that owns them.
//!
//! An agent step has a session of its own unless it names one
//! (`session = "…"` in the plan): steps of one task naming the same session
//! share one conversation, and a later one sees what the earlier ones did. A
//! `delegate` tool call runs a child session, owned by the session that made
//! the call.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{SessionId, TaskId, Timestamp};

/// Whether a session can still take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Its task may still run steps in it.
    Active,
    /// Its task ended (or, for a delegation, the child answered).
    Ended,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Ended => "ended",
        }
    }
}

/// Where an executor controller's environment for the session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorPhase {
    /// `ensure` was asked for and has not answered (or rein stopped meanwhile).
    Ensuring,
    Ensured,
    Retired,
}

/// The executor a plugin's controller connected for the session (harness-sdk
/// rules 10–13): recorded before `ensure` is asked, so that one left behind by a
/// crash is retired when the session is next used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionExecutor {
    /// The plugin whose controller it is.
    pub plugin: String,
    /// The registry it was ensured from (one per rein process and plugin
    /// reload): a handle of another registry is stale.
    pub registry: String,
    /// The session's generation it was ensured for (a reset moves it on).
    pub generation: u64,
    pub environment_id: String,
    pub workspace_directory: String,
    pub phase: ExecutorPhase,
}

/// Who made a delegated (child) session, and for which tool call.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Delegation {
    /// The session whose `delegate` call started it; only its task may change it.
    pub parent: SessionId,
    pub step_id: String,
    pub call_id: String,
    /// The child's final answer, once it gave one: a resumed parent takes it
    /// instead of running the delegation again.
    pub answer: Option<String>,
}

/// A session handed to another plugin to run (harness-sdk §5 rules 22–24):
/// the plugin its owner's harness trusts (`delegated_execution_plugin_ids`)
/// runs its later turns, scoped to the owner — the owner's executor, the
/// owner's harness recorded as the runtime. Creating, pinning, resetting and
/// compacting it stay the owner's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DelegatedExecution {
    /// The plugin that runs the session's turns.
    pub plugin: String,
    /// The harness of that plugin the turns run on.
    pub harness: String,
    /// The plugin that owns the session.
    pub owner: String,
    /// The owner's harness, the one the session is locked to.
    pub owner_harness: String,
    /// Who handed it over (an operator, or `task` for a `delegate` call).
    pub by: String,
    pub at: Timestamp,
}

/// A session as stored.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentSessionInfo {
    pub id: SessionId,
    pub task_id: TaskId,
    /// The plan's `session` name, the step id for a step's own session, or
    /// `delegate:STEP:CALL` for a delegation.
    pub name: String,
    /// Named in the plan, and so shared by the steps that name it.
    #[serde(default)]
    pub shared: bool,
    pub status: SessionStatus,
    /// The steps that took turns in it, in order.
    #[serde(default)]
    pub steps: Vec<String>,
    /// The model route it runs on (`provider/model`); a delegation runs on its
    /// parent's.
    pub route: Option<String>,
    /// The runtime that served its latest turn (`rein` or a harness id).
    pub runtime: Option<String>,
    /// Set by `rein sessions pin`: the runtime its later turns must use, above
    /// every other setting.
    pub pinned_runtime: Option<String>,
    /// The runtime's own id for the conversation (an ACP agent's session).
    pub native_session_id: Option<String>,
    /// Turns taken since it was created or last reset.
    #[serde(default)]
    pub turns: u64,
    /// Moves on with each reset; the conversation before it is not sent again.
    #[serde(default)]
    pub generation: u64,
    pub executor: Option<SessionExecutor>,
    pub delegation: Option<Delegation>,
    /// Handed to another plugin to run (`rein sessions delegate`).
    pub delegated_execution: Option<DelegatedExecution>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}
