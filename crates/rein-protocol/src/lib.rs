//! `rein-protocol`: every type that crosses a boundary of rein.
//!
//! Plain serde types with JSON Schema, and nothing that does I/O.
//!
//! Layout:
//! - [`ids`]: type-prefixed, time-ordered ids (`task_…`, `cp_…`, `evt_…`, `snap_…`).
//! - [`task`]: [`TaskState`], [`TaskSummary`], [`Checkpoint`] and their status enums,
//!   the CP1–CP5 phases.
//! - [`plan`]: [`TaskDecomposition`] and [`TaskStep`], the validated form of a plan.
//! - [`event`]: [`HarnessEvent`], the envelope of every entry in a task's log, and
//!   [`TaskChange`], the typed change it carries.
//! - [`snapshot`]: [`Snapshot`], a copy of a task's state at a point of its log.
//! - [`history`]: [`History`], the points of a task's log a person looks back at.
//! - [`approval`]: [`ApprovalRequest`] and [`ApprovalResponse`], the human in the loop.
//! - [`recovery`]: [`ErrorType`], [`RecoveryAction`], [`RecoveryStrategy`]: error recovery.
//! - [`metrics`]: [`HarnessMetrics`], the counters of spec §6.
//! - [`ledger`]: [`LedgerEntry`], the hash-chained record of human decisions.
//! - [`permission`]: [`PermissionRule`] and [`PermissionDecision`]: allow / ask /
//!   deny rules on commands, paths and network use.
//! - [`shared_state`]: [`SharedHarnessState`] with its participants, actions,
//!   resources, assumptions, versions, verifier obligations and [`Conflict`]s.
//! - [`contract`]: [`HarnessContract`] (planned work, `hctr_…`) and
//!   [`EvidenceBundle`] (what happened, `evb_…`).
//! - [`harness`]: what agent harnesses say about a model route, and the
//!   [`SelectionDecision`] of which runtime serves it.
//! - [`plugin`]: the manifest of an out-of-process harness plugin and the
//!   JSON-RPC messages rein exchanges with it.
//! - [`session`]: [`AgentSessionInfo`], an agent session (`ses_…`) as stored.
//! - [`api`]: the admin API's request and response bodies and query parameters.
//! - [`endpoints`]: every operation of the admin API, typed: method, path, role,
//!   id, query, request and response, from which server and CLI are built.
//! - [`usage`]: what model calls cost in tokens, each turn's usage normalised.
//! - [`de`]: deserializers for the API's numbers (integers taken as such, bounds
//!   refused, never clamped).
//! - [`schema`]: the JSON Schemas of the types above, by name.

pub mod api;
pub mod approval;
pub mod contract;
pub mod de;
pub mod endpoints;
pub mod event;
pub mod harness;
pub mod history;
pub mod ids;
pub mod ledger;
pub mod metrics;
pub mod permission;
pub mod plan;
pub mod plugin;
pub mod recovery;
pub mod schema;
pub mod seed;
pub mod session;
pub mod shared_state;
pub mod snapshot;
pub mod task;
pub mod usage;

pub use approval::{
    ApprovalContext, ApprovalRequest, ApprovalResponse, ApprovalStatus, ApprovalType, Decision,
    Priority, Trigger,
};
pub use contract::{
    ApprovalRequirement, Capture, CheckStatus, Constraint, ContractStatus, EvidenceAssumption,
    EvidenceBundle, EvidenceCheck, EvidenceItem, EvidenceKind, EvidenceRisk, EvidenceSource,
    HarnessContract, HumanReview, PlannedAction, Review, ReviewVerdict, RollbackStep, StatusChange,
    ToolRequirement, UntestedArea, VerificationStep,
};
pub use event::{EventType, HarnessEvent, TaskChange};
pub use harness::{
    BUILTIN_RUNTIME, Candidate, DEFAULT_RUNTIME, ModelProvider, PolicySource, PreparedAuth,
    ProviderRuntimePolicy, SDK_BUILTIN_RUNTIME, SelectionDecision, SelectionPolicy,
    SelectionReason, Support, SupportContext, TransportOverrides, WorkspaceEnvironment,
    WorkspaceKind,
};
pub use history::{
    ForkedFrom, History, HistoryKind, HistoryPoint, JournalCopy, RanInSource, SavedWorkspace,
    SnapshotRules,
};
pub use ids::{
    ApprovalId, CheckpointId, ContractId, EventId, EvidenceId, LedgerId, SessionId, SharedStateId,
    SnapshotId, TaskId,
};
pub use ledger::{
    GovernanceAdd, GovernanceDetails, GovernanceEntry, GovernanceQuery, GovernanceScope,
    LedgerCheck, LedgerEntry, LedgerHead, LedgerKind, RevokeRequest,
};
pub use metrics::HarnessMetrics;
pub use permission::{Access, AskTrigger, PermissionDecision, PermissionRule, Verdict};
pub use plan::{
    AgentLimits, DecomposedStep, DecompositionAnswer, Goal, McpServer, McpUse, Pev, RiskLevel,
    StepAction, StepType, TaskDecomposition, TaskStep, WorkspaceCleanup,
};
pub use recovery::{ErrorType, RecoveryAction, RecoveryPolicy, RecoveryStrategy};
pub use seed::{Confidence, ConfidenceLevel, RecordMetadata, Said, TextOr};
pub use session::{
    AgentSessionInfo, DelegatedExecution, Delegation, ExecutorPhase, SessionExecutor, SessionStatus,
};
pub use shared_state::{
    Action, Assumption, Conflict, ConflictPolicy, ConflictStatus, ConflictType, Enforcement,
    Participant, ParticipantRole, Resource, Risk, SharedHarnessState, VerifierObligation,
    VersionDependency, WorkStatus,
};
pub use snapshot::Snapshot;
pub use task::{
    ApprovedBy, Approver, Checkpoint, CheckpointStatus, CheckpointType, Phase, RunnerInfo,
    StepProcess, TaskContext, TaskHead, TaskResources, TaskState, TaskStatus, TaskSummary,
    WorkspacePin,
};
pub use usage::{
    Budget, ModelInfo, Models, Spend, TurnUsage, Usage, UsageLine, UsageReport, check_model_name,
};

/// Timestamps are UTC, RFC 3339 on the wire.
pub type Timestamp = chrono::DateTime<chrono::Utc>;
