//! Multi-step plans (spec `tasks.md` §5): the validated form every plan takes,
//! whether it came from a file or from an agent.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::approval::{Decision, Priority, Trigger};
use crate::recovery::RecoveryPolicy;
use crate::task::CheckpointType;

/// Risk of a step or a plan.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    #[default]
    Low,
    Medium,
    High,
}

/// What kind of work a step does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepType {
    Read,
    Write,
    #[default]
    Execute,
    Review,
    Approve,
}

/// What running a step does.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepAction {
    /// Run `run` with `sh -c` in the task's workspace; exit status 0 passes.
    Command {
        run: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// Whether the command may open network connections (sandboxed runs
        /// have no network otherwise).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        network: bool,
        /// Most address space, in MiB, each of the command's processes may map.
        #[serde(default, deserialize_with = "crate::de::integral")]
        memory_mb: Option<u64>,
        /// Most processes the command may have running at once (its own
        /// included), counted inside its sandbox.
        #[serde(default, deserialize_with = "crate::de::integral")]
        processes: Option<u32>,
        /// Directories beyond the workspace the command may read.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        allow_read: Vec<String>,
    },
    /// Do nothing and pass: a marker step, and the engine's own cost in benchmarks.
    Noop,
    /// Ask a person: the step waits, durably, for a decision on an approval request.
    Approval {
        title: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        description: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        options: Vec<String>,
        recommended: Option<String>,
        /// How long a person has; no deadline if `None`.
        #[serde(default, deserialize_with = "crate::de::integral")]
        timeout_ms: Option<u64>,
        /// What the deadline passing means (`deny` unless set).
        on_expiry: Decision,
        trigger: Trigger,
        priority: Option<Priority>,
    },
    /// Ask an agent to do work: the runtime the selection policy chooses for
    /// the provider and model runs the prompt with these tools.
    Agent {
        prompt: String,
        provider: Option<String>,
        model: Option<String>,
        /// `auto`, `rein` or a harness id; unset: the runtime policy decides.
        runtime: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tools: Vec<String>,
        /// The session the step takes its turns in: steps of a task naming the
        /// same one share a conversation. Unset: a session of its own.
        session: Option<String>,
        /// How the built-in runtime's model turns are bounded and steered.
        #[serde(default, skip_serializing_if = "AgentLimits::is_default")]
        limits: Box<AgentLimits>,
        /// The MCP tool servers whose tools the step is offered, by name.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mcp: Vec<McpUse>,
        /// Whether the step's sandbox shares the network: its commands and
        /// its stdio MCP servers have none otherwise.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        network: bool,
        /// Images the attempt is given with its prompt (the SDK's
        /// `AttemptParams.images`): paths inside the workspace of PNG, JPEG,
        /// GIF or WebP files, read when each attempt starts.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<String>,
    },
    /// Verify what plan–execute–verify step `step` did: run its verifiers,
    /// record the evidence, and settle its contract (added by the engine after
    /// every step with `pev`).
    Verify { step: String },
}

impl StepAction {
    /// A plain question for a person: no options to choose from, no deadline
    /// (`deny` if one were set and passed), asked as a significant change.
    pub fn approval(title: impl Into<String>, description: impl Into<String>) -> StepAction {
        StepAction::Approval {
            title: title.into(),
            description: description.into(),
            options: Vec::new(),
            recommended: None,
            timeout_ms: None,
            on_expiry: Decision::Deny,
            trigger: Trigger::SignificantChange,
            priority: None,
        }
    }

    /// Ask an agent: `prompt`, offered the built-in `tools`; its runtime,
    /// model, session and limits left to the configuration, no MCP servers,
    /// no network, no images.
    pub fn agent(prompt: impl Into<String>, tools: &[&str]) -> StepAction {
        StepAction::Agent {
            prompt: prompt.into(),
            provider: None,
            model: None,
            runtime: None,
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            session: None,
            limits: Box::default(),
            mcp: Vec::new(),
            network: false,
            images: Vec::new(),
        }
    }

    /// This action bounded by `new`, if it is an agent's; any other as it is.
    pub fn with_limits(mut self, new: AgentLimits) -> StepAction {
        if let StepAction::Agent { limits, .. } = &mut self {
            **limits = new;
        }
        self
    }
}

/// How an agent step's model turns are bounded and steered (the built-in
/// runtime's; a plugin's harness keeps its own).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentLimits {
    /// `auto`, `required`, `none`, or the name of one of the step's tools
    /// (sent as the request's `tool_choice`); unset: the server's default.
    /// A forced choice (`required`, a tool) holds until the model has made
    /// that call; later turns get the server's default, so the step can end.
    pub tool_choice: Option<String>,
    /// A final answer of a step part that called no tool fails the step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_tool_call: bool,
    /// The most model turns per attempt's budget (default 32).
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub max_turns: Option<u32>,
    /// At `finish_reason: "length"`, ask the model to go on instead of failing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_at_length: bool,
    /// The most bytes of one tool answer the model is sent (default
    /// [`AgentLimits::TOOL_ANSWER_BYTES`]); the rest is kept as a file in the
    /// workspace, and the model told where.
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 1024, max = 16_777_216))]
    pub max_tool_answer_bytes: Option<u64>,
    /// The share of the model's context window (in percent, 10–95) the
    /// next request may fill before the older part of the conversation is
    /// compacted (default 80).
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 10, max = 95))]
    pub compact_at_percent: Option<u8>,
    /// The models (`PROVIDER/MODEL`) that serve a turn, in order, when the
    /// step's model is rate-limited, overloaded, failing, or too small for
    /// the conversation; empty: the configured `fallback_models`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
    /// What the step's model calls may spend before a person is asked.
    pub budget: Option<crate::Budget>,
    /// Whether the step's model answers are asked for as a stream; unset:
    /// as the provider is configured (`[openai] stream`, `[anthropic]
    /// stream`, streaming unless they say). `false` for a server that
    /// refuses what the step needs when streaming.
    pub stream: Option<bool>,
    /// The plugin the step's `delegate` calls hand their child sessions to
    /// (harness-sdk rules 22–23): each child is made on the step's route,
    /// owned by the harness the runtime policy gives that route, and runs on
    /// this plugin's harness if the owner's manifest lists it in
    /// `delegated_execution_plugin_ids`.
    #[schemars(regex(pattern = r"\S"))]
    pub delegate_to: Option<String>,
}

impl AgentLimits {
    /// The most bytes of one tool answer sent to the model, unless the step
    /// says (`max_tool_answer_bytes`).
    pub const TOOL_ANSWER_BYTES: u64 = 256 * 1024;

    /// The most bytes of one tool answer this step's model is sent.
    pub fn tool_answer_bytes(&self) -> usize {
        usize::try_from(
            self.max_tool_answer_bytes
                .unwrap_or(Self::TOOL_ANSWER_BYTES),
        )
        .unwrap_or(usize::MAX)
    }

    pub fn is_default(&self) -> bool {
        *self == AgentLimits::default()
    }
}

/// An MCP server an agent step names (`mcp = ["fs"]`): declared in the plan
/// (its declaration travels with the stored plan, so a resumed task talks to
/// the same server), or else in the configuration of the rein that runs it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpUse {
    pub name: String,
    /// The plan's declaration; `None`: the configuration's.
    pub server: Option<McpServer>,
}

/// How to reach an MCP (Model Context Protocol) tool server: a program rein
/// starts in the step's sandbox and speaks to over stdio, or the URL of a
/// streamable HTTP endpoint.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpServer {
    /// stdio: the program (looked up on the sandbox's PATH).
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: its environment, beside PATH, HOME and LANG.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: directories beyond the workspace and the system's it may read
    /// (where its own code lives).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_read: Vec<String>,
    /// Streamable HTTP: the endpoint.
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// How long one tool call may take (default 60 s).
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub timeout_ms: Option<u64>,
}

/// Plan–execute–verify for one step: it runs as contract → approval → execute
/// → evidence → verification.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Pev {
    /// Commands that check the result, each run in the workspace after the
    /// step; all must exit 0 for the contract to be verified.
    pub verify: Vec<String>,
    /// A command that undoes the step, run when verification fails.
    pub rollback: Option<String>,
    /// The step's contract (`hctr_…`), set when the task is created.
    pub contract_id: Option<String>,
}

/// One step of a plan.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskStep {
    pub id: String,
    #[serde(default)]
    pub description: String,
    #[serde(rename = "type", default)]
    pub step_type: StepType,
    #[serde(default, alias = "dependsOn")]
    pub depends_on: Vec<String>,
    /// Steps that depend on this one; derived from `depends_on` by validation.
    #[serde(default, alias = "blockingSteps")]
    pub blocking_steps: Vec<String>,
    /// The checkpoint type recorded when the step runs.
    pub checkpoint: CheckpointType,
    #[serde(default, alias = "requiredPermissions")]
    pub required_permissions: Vec<String>,
    #[serde(default, alias = "riskLevel")]
    pub risk_level: RiskLevel,
    #[serde(alias = "riskDescription")]
    pub risk_description: Option<String>,
    pub action: StepAction,
    /// Longest the step may run before it is stopped and fails.
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub timeout_ms: Option<u64>,
    /// Whether running the step twice is harmless, so an interrupted run may be redone.
    #[serde(default)]
    pub idempotent: bool,
    /// This step's recovery strategies, over the plan's and the defaults.
    #[serde(default, skip_serializing_if = "RecoveryPolicy::is_empty")]
    pub recovery: RecoveryPolicy,
    /// Permission rules for this step, over the configured ones (deny still wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<crate::PermissionRule>,
    /// What the step declares it reads, recorded in the plan's shared state
    /// (paths; a trailing `/` marks a directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// What the step declares it writes, recorded likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Run as plan–execute–verify.
    pub pev: Option<Pev>,
}

impl TaskStep {
    /// A step that does `action`: an `execute` step recorded as `task_exec`, with no
    /// dependencies, low risk, no timeout, not idempotent.
    pub fn new(id: impl Into<String>, action: StepAction) -> TaskStep {
        TaskStep {
            id: id.into(),
            description: String::new(),
            step_type: StepType::Execute,
            depends_on: Vec::new(),
            blocking_steps: Vec::new(),
            checkpoint: CheckpointType::TaskExec,
            required_permissions: Vec::new(),
            risk_level: RiskLevel::Low,
            risk_description: None,
            action,
            timeout_ms: None,
            idempotent: false,
            recovery: RecoveryPolicy::new(),
            permissions: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            pev: None,
        }
    }

    /// A step that runs `run` with `sh -c`.
    pub fn command(id: impl Into<String>, run: impl Into<String>) -> TaskStep {
        TaskStep::new(
            id,
            StepAction::Command {
                run: run.into(),
                env: BTreeMap::new(),
                network: false,
                memory_mb: None,
                processes: None,
                allow_read: Vec::new(),
            },
        )
    }
}

/// A plan: the task decomposed into steps that form a DAG.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskDecomposition {
    #[serde(alias = "originalTask")]
    pub original_task: String,
    pub steps: Vec<TaskStep>,
    #[serde(
        default,
        alias = "estimatedDuration",
        deserialize_with = "crate::de::integral"
    )]
    pub estimated_duration_s: Option<u64>,
    #[serde(default, alias = "riskLevel")]
    pub risk_level: RiskLevel,
    /// Most steps running at once; `None` takes the engine's default.
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub max_parallel: Option<u32>,
    /// Stop starting steps after the first failure (otherwise only dependants stop).
    #[serde(default)]
    pub fail_fast: bool,
    /// The plan's recovery strategies, over the defaults.
    #[serde(default, skip_serializing_if = "RecoveryPolicy::is_empty")]
    pub recovery: RecoveryPolicy,
    /// What becomes of a fresh workspace once the task has finished.
    #[serde(default, skip_serializing_if = "WorkspaceCleanup::is_keep")]
    pub cleanup: WorkspaceCleanup,
    /// A shared harness state the task records itself into: a participant for
    /// the task, an action for each step with its declared reads and writes.
    pub shared_state: Option<String>,
    /// A task given as a goal (`original_task`): until CP2 has decomposed it,
    /// the plan has no steps; afterwards it keeps how it was decomposed.
    pub goal: Option<Goal>,
    /// What the task's model calls, all its steps together, may spend
    /// before a person is asked.
    pub budget: Option<crate::Budget>,
    /// What of the workspace rein keeps at each step boundary, over the
    /// configuration's (`snapshot = { exclude = […], max_bytes = … }`).
    pub snapshot: Option<crate::SnapshotRules>,
}

/// How a goal is turned into steps (CP2): by an isolated completion on this
/// model route, whose answer must be a [`DecompositionAnswer`].
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Goal {
    /// The route that decomposes the goal and runs its agent steps; unset:
    /// the configured default.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `auto`, `rein` or a harness id.
    pub runtime: Option<String>,
    /// Whether a person confirms the decomposed plan before its steps run.
    #[serde(default)]
    pub confirm: bool,
    /// How many answers the model may give before the task fails (an invalid
    /// one is sent back with what was wrong with it).
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub attempts: Option<u32>,
    /// The most tokens one decomposition answer may have (default 4096): a
    /// small model that never stops is cut off there, and the answer sent
    /// back naming the limit.
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 256, max = 131_072))]
    pub max_tokens: Option<u32>,
    /// MCP servers every agent step of the plan is given, beside those it
    /// names (an ACP client's `mcpServers`, for the tasks of its session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpUse>,
    /// Workspace images every agent step of the plan is given with its
    /// prompt (those an ACP client sent with the prompt that made the task).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// What a model must answer when it decomposes a goal: the source plan's
/// `TaskDecomposition` (seed 002 §6.1), under the seed's camelCase names,
/// without what rein adds to run it. rein's snake_case names are mapped to
/// these before the answer is checked (`rein_core::goal::seed_names`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecompositionAnswer {
    /// The goal, as the model understood it.
    pub original_task: String,
    /// The steps, at least one; ids are unique, dependencies form a DAG.
    #[schemars(length(min = 1))]
    pub steps: Vec<DecomposedStep>,
    /// Seconds the whole task should take.
    #[serde(
        default,
        rename = "estimatedDuration",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::integral"
    )]
    pub estimated_duration_s: Option<u64>,
    pub risk_level: RiskLevel,
}

/// One step of a [`DecompositionAnswer`].
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecomposedStep {
    /// Letters, digits, `-`, `_` and `.`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
    pub id: String,
    /// The work, said so that an agent can do it.
    #[schemars(length(min = 1))]
    pub description: String,
    /// read, write or execute: an agent does it (with tools to match);
    /// review: an agent checks the work; approve: a person decides.
    #[serde(rename = "type")]
    pub step_type: StepType,
    /// The steps that must finish first.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The steps that wait for this one (each then depends on it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocking_steps: Vec<String>,
    /// The checkpoint the step records; unset: the one its type records.
    pub checkpoint: Option<CheckpointType>,
    #[serde(default)]
    pub required_permissions: Vec<String>,
    pub risk_level: RiskLevel,
    pub risk_description: Option<String>,
}

/// What becomes of a task's fresh workspace once the task has finished
/// (completed, failed or cancelled). A workspace the task was given (a project
/// directory) is never removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceCleanup {
    /// Kept (the default): the files stay for inspection.
    #[default]
    Keep,
    /// Removed if the task completed; kept for a look if it failed or was cancelled.
    OnSuccess,
    /// Removed however the task ended.
    Always,
}

impl WorkspaceCleanup {
    pub fn is_keep(&self) -> bool {
        *self == WorkspaceCleanup::Keep
    }
}

impl TaskDecomposition {
    /// A low-risk plan of `steps` with the engine's default parallelism.
    pub fn new(original_task: impl Into<String>, steps: Vec<TaskStep>) -> TaskDecomposition {
        TaskDecomposition {
            original_task: original_task.into(),
            steps,
            estimated_duration_s: None,
            risk_level: RiskLevel::Low,
            max_parallel: None,
            fail_fast: false,
            recovery: RecoveryPolicy::new(),
            cleanup: WorkspaceCleanup::Keep,
            shared_state: None,
            goal: None,
            budget: None,
            snapshot: None,
        }
    }

    pub fn step(&self, id: &str) -> Option<&TaskStep> {
        self.steps.iter().find(|s| s.id == id)
    }
}
