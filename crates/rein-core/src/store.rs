//! The `Store` trait: what the engine needs from durable storage. The SQL lives in
//! `rein-store`; business rules (who may delete what, when) live in the engine.
//!
//! A task is stored as its event log, the truth, plus a [`TaskSummary`] row that
//! every write updates in the same transaction (for listings and filters). The
//! engine gets a task's full state by folding its log.

use async_trait::async_trait;
use rein_protocol::{
    ApprovalId, ApprovalRequest, ApprovalStatus, HarnessEvent, HarnessMetrics, LedgerEntry,
    Snapshot, SnapshotId, TaskDecomposition, TaskId, TaskStatus, TaskSummary, Timestamp,
};
use serde::{Deserialize, Serialize};

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("task {0} not found")]
    TaskNotFound(TaskId),
    #[error("snapshot {0} not found")]
    SnapshotNotFound(SnapshotId),
    #[error("task {0} already exists")]
    AlreadyExists(TaskId),
    /// Someone else wrote to the task since it was read (optimistic concurrency).
    #[error(
        "task {task_id} changed underneath this writer (expected its log at {expected}, found {actual})"
    )]
    Conflict {
        task_id: TaskId,
        expected: u64,
        actual: u64,
    },
    #[error("approval request {0} not found")]
    ApprovalNotFound(ApprovalId),
    /// A decision lost the compare-and-set: the request was no longer pending.
    #[error("approval request {} is already {}", .current.id, .current.status)]
    NotPending { current: Box<ApprovalRequest> },
    #[error("invalid list cursor `{0}`")]
    BadCursor(String),
    #[error("shared state {0} already exists")]
    SharedStateExists(String),
    #[error("shared state {0} not found")]
    SharedStateNotFound(String),
    /// Someone else updated the shared state since it was read.
    #[error("shared state {id} changed underneath this writer (expected version {expected})")]
    SharedStateMoved { id: String, expected: u64 },
    #[error("{} {id} already exists", .kind.noun())]
    RecordExists { kind: RecordKind, id: String },
    #[error("{} {id} not found", .kind.noun())]
    RecordNotFound { kind: RecordKind, id: String },
    /// Someone else updated the record since it was read.
    #[error("{} {id} changed underneath this writer (expected version {expected})", .kind.noun())]
    RecordMoved {
        kind: RecordKind,
        id: String,
        expected: u64,
    },
    /// Someone else wrote to the step's journal at the same position.
    #[error("the journal of step {step} of task {task_id} already has entry {seq}")]
    JournalMoved {
        task_id: TaskId,
        step: String,
        seq: u64,
    },
    /// This node's lease on the task was taken over by another node (it
    /// expired while this node was paused or cut off): the write is refused,
    /// and this node stops touching the task.
    #[error(
        "task {task_id} is now run by {holder}: this node's lease on it expired and was taken over, so it no longer writes to the task"
    )]
    LeaseLost { task_id: TaskId, holder: String },
    #[error("ledger entry {0} not found")]
    LedgerEntryNotFound(String),
    /// A revocation of an entry that cannot be revoked (already revoked, or
    /// itself a revocation).
    #[error("ledger entry {id} cannot be revoked: {why}")]
    NotRevocable { id: String, why: String },
    #[error("store error: {0}")]
    Backend(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

/// One atomic write to a task: events appended to its log and its state row
/// (the summary after those events), in one transaction.
#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub task_id: TaskId,
    /// The task's `last_seq` before this write; the write fails if it moved.
    pub expected_seq: u64,
    pub events: Vec<HarnessEvent>,
    /// The task's summary after `events`: it follows from the log, so a store
    /// keeps it with them, and a write without events changes nothing (its
    /// position is still checked).
    pub summary: TaskSummary,
    /// Approval requests the events raise, stored in the same transaction.
    pub approvals: Vec<ApprovalRequest>,
    /// Ledger entries the events call for (an escalation to a person), sealed
    /// after the ledger's last entry in the same transaction.
    pub ledger: Vec<rein_protocol::LedgerEntry>,
    /// The plan that replaces the task's from these events on (a goal that CP2
    /// decomposed), stored in the same transaction.
    pub plan: Option<TaskDecomposition>,
}

/// A new task: its plan and its first write (with `expected_seq` 0).
#[derive(Debug, Clone)]
pub struct NewTask {
    pub plan: TaskDecomposition,
    pub write: TaskWrite,
}

/// Filter for [`Store::list`]. Results come newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub session_id: Option<String>,
    pub status: Option<TaskStatus>,
    pub created_from: Option<Timestamp>,
    pub created_to: Option<Timestamp>,
    /// At most this many items (the store caps it at 500).
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only the forks of this task.
    pub forked_from: Option<TaskId>,
}

pub type TaskPage = Page<TaskSummary>;

/// Filter for [`Store::list_shared_states`]. Results come newest first.
#[derive(Debug, Clone, Default)]
pub struct SharedStateFilter {
    pub session_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub harness_contract_id: Option<String>,
    pub status: Option<rein_protocol::WorkStatus>,
    pub tag: Option<String>,
    pub created_from: Option<Timestamp>,
    pub created_to: Option<Timestamp>,
    /// At most this many items (the store caps it at 500).
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

pub type SharedStatePage = Page<rein_protocol::SharedHarnessState>;

/// The records kept beside tasks and shared states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A harness contract (`hctr_…`).
    Contract,
    /// An evidence bundle (`evb_…`).
    Evidence,
    /// An agent session (`ses_…`); it goes with its task.
    Session,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Contract => "contract",
            RecordKind::Evidence => "evidence",
            RecordKind::Session => "session",
        }
    }

    /// How messages name one.
    pub fn noun(self) -> &'static str {
        match self {
            RecordKind::Contract => "harness contract",
            RecordKind::Evidence => "evidence bundle",
            RecordKind::Session => "agent session",
        }
    }
}

/// A stored contract or evidence bundle: its JSON body and the columns it is
/// found by.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub kind: RecordKind,
    pub id: String,
    pub status: Option<String>,
    pub task_id: Option<String>,
    pub shared_state_id: Option<String>,
    pub contract_id: Option<String>,
    pub created_at: Timestamp,
    pub body: serde_json::Value,
}

/// Filter for [`Store::list_records`]. Results come newest first.
#[derive(Debug, Clone)]
pub struct RecordFilter {
    pub kind: RecordKind,
    pub status: Option<String>,
    pub task_id: Option<String>,
    pub shared_state_id: Option<String>,
    pub contract_id: Option<String>,
    /// Top-level text fields of the record that must equal a value (the
    /// seed's list filters: a contract's `riskLevel`, a bundle's `actorId`,
    /// …). The names are rein's own constants, never a caller's text.
    pub fields: Vec<(&'static str, String)>,
    /// Only records with this tag.
    pub tag: Option<String>,
    /// Created at or after.
    pub created_from: Option<Timestamp>,
    /// Created before.
    pub created_to: Option<Timestamp>,
    /// At most this many items (the store caps it at 500).
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl RecordFilter {
    pub fn new(kind: RecordKind) -> RecordFilter {
        RecordFilter {
            kind,
            status: None,
            task_id: None,
            shared_state_id: None,
            contract_id: None,
            fields: Vec::new(),
            tag: None,
            created_from: None,
            created_to: None,
            limit: None,
            cursor: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RecordPage {
    pub items: Vec<Record>,
    pub next_cursor: Option<String>,
}

pub use rein_protocol::api::{AuditRecord, Page, SnapshotInfo};

/// The most requests one `list_approvals` call returns.
pub const MAX_APPROVALS_PAGE: usize = 500;

/// Filter for [`Store::list_approvals`]. Results come newest first.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    pub status: Option<ApprovalStatus>,
    pub task_id: Option<TaskId>,
    /// At most this many (the store caps it at 500).
    pub limit: Option<usize>,
}

/// What another process asks a task's runner to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlKind {
    Pause,
    Abort,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlRequest {
    pub task_id: TaskId,
    pub kind: ControlKind,
    pub by: String,
    pub reason: String,
    pub requested_at: Timestamp,
}

/// What a store's probe found besides that a write and a read went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreProbe {
    /// Where the store is (a file, a server).
    pub location: String,
    /// Bytes free for the store to grow into, where the store can tell.
    pub free_bytes: Option<u64>,
    /// The last write that failed since the store was opened, and when.
    pub last_write_error: Option<String>,
    /// Committed writes the store found missing, nobody has acknowledged yet.
    pub lost_writes: Vec<LostWrites>,
}

/// Committed writes a store found missing when it was opened: the count of
/// commits recorded beside the store (after each commit) is past the one the
/// store holds, because its write-ahead log was deleted or an older copy of
/// it was put in its place. What was committed after `found` is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostWrites {
    pub detected_at: Timestamp,
    /// Commits recorded beside the store.
    pub recorded: u64,
    /// Commits the store held when it was opened.
    pub found: u64,
    /// The ledger's head as recorded beside the store then: the ledger is
    /// checked against it for good, as its entries after it are gone.
    pub ledger_head: Option<rein_protocol::LedgerHead>,
    /// When a person said they know (`rein health --acknowledge-lost-writes`).
    pub acknowledged_at: Option<Timestamp>,
}

impl std::fmt::Display for LostWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the store lost committed writes: {} commits were recorded beside it, it held {} when opened on {} \
             (its write-ahead log, the `-wal` file beside it, was deleted, or an older copy was put in its place); \
             tasks, approvals and ledger entries committed after that are gone",
            self.recorded,
            self.found,
            self.detected_at.format("%Y-%m-%d %H:%M:%S UTC"),
        )?;
        if let Some(head) = &self.ledger_head {
            write!(f, " (the ledger's recorded head was {head})")?;
        }
        Ok(())
    }
}

/// Tasks: each one's event log with its summary row and plan, snapshots, the
/// control requests addressed to its runner, and what is counted over them.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Stores a new task; fails with `AlreadyExists` if its id is taken.
    async fn create(&self, task: NewTask) -> StoreResult<()>;
    /// Appends events and updates the state, atomically, if `expected_seq` matches.
    async fn save(&self, write: TaskWrite) -> StoreResult<()>;
    /// The task's state row.
    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>>;
    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>>;
    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage>;
    /// Events of a task with `seq > after_seq`, oldest first, at most `limit`.
    async fn events(
        &self,
        id: &TaskId,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>>;
    /// Events of every task with a global position `> after`, in the order they
    /// were committed, at most `limit`: (position, event).
    async fn all_events(&self, after: u64, limit: usize) -> StoreResult<Vec<(u64, HarnessEvent)>>;
    /// The newest global event position and the newest audit record's (0 for
    /// none): a cheap look at whether anything was written since.
    async fn positions(&self) -> StoreResult<(u64, u64)>;
    /// Removes a task's log, state row, plan, snapshots and control requests together,
    /// if its log is still at `expected_seq`.
    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()>;
    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()>;
    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>>;
    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>>;
    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()>;
    /// Every control request waiting, for any task, oldest first, without removing them.
    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>>;
    /// Removes and returns the control requests waiting for a task.
    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>>;
    /// The counters of spec §6 rule 21 over the tasks in the store.
    async fn metrics(&self) -> StoreResult<HarnessMetrics>;
    /// A write and a read through the store's own file that prove it works
    /// (for health checks), with what the store can tell about its room.
    async fn probe(&self) -> StoreResult<StoreProbe>;
    /// Every loss of committed writes the store has detected, acknowledged
    /// or not (a store that cannot lose them: none).
    async fn lost_writes(&self) -> StoreResult<Vec<LostWrites>> {
        Ok(Vec::new())
    }
    /// Marks every detected loss acknowledged; answers how many were not yet.
    async fn acknowledge_lost_writes(&self) -> StoreResult<usize> {
        Ok(0)
    }
    /// Task ownership by lease, where several nodes share the store
    /// (PostgreSQL); `None` for a store one machine owns (SQLite), where a
    /// runner's process tells whether it is alive.
    fn leases(&self) -> Option<&dyn LeaseStore> {
        None
    }
}

/// A node's hold on a task. Every new holder gets a larger `token`; a write
/// for a task whose lease this node held under a token that is no longer the
/// task's is refused (`LeaseLost`): fencing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub task_id: TaskId,
    /// The node holding it.
    pub runner: rein_protocol::RunnerInfo,
    pub token: u64,
    pub expires_at: Timestamp,
}

/// Tasks owned by lease across the nodes sharing a store. The store holds
/// this node's leases and renews them while the node lives (every quarter of
/// the lease, or more often); a node that dies stops renewing, and when its
/// leases expire other nodes may claim its tasks.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// This node, as its leases name it.
    fn node(&self) -> &rein_protocol::RunnerInfo;
    /// How long a lease lasts unless it is renewed.
    fn lease_duration(&self) -> std::time::Duration;
    /// Claims `task` for this node: `Ok(lease)` if nobody else holds a live
    /// lease on it (a lease this node holds is kept), else `Err(holder's lease)`.
    async fn claim(&self, task: &TaskId) -> StoreResult<Result<Lease, Lease>>;
    /// Claims up to `n` tasks that are pending or in progress and that no
    /// live lease holds, oldest first; each is skipped if another node is
    /// claiming it at the same moment.
    async fn claim_free(&self, n: usize) -> StoreResult<Vec<Lease>>;
    /// Takes `lease` over for this node if it is still the task's (the same
    /// holder, the same token), live or not: for a holder this node knows to
    /// be dead (a process of this machine that is gone). `None` if the lease
    /// moved on meanwhile.
    async fn claim_from(&self, lease: &Lease) -> StoreResult<Option<Lease>>;
    /// Gives a task's lease up (the run ended); nothing if it was lost.
    async fn release(&self, task: &TaskId) -> StoreResult<()>;
    /// Every live lease, any node's.
    async fn live(&self) -> StoreResult<Vec<Lease>>;
    /// The live lease on `task`, if any node holds one.
    async fn holder(&self, task: &TaskId) -> StoreResult<Option<Lease>>;
    /// Resolves once this node can no longer count on holding `task`'s
    /// lease: its renewals have not gone through for nearly a lease, so the
    /// lease may have run out and another node may take the task over. The
    /// run of the task stops its steps then, before that can happen
    /// (self-fencing: a node cut off from the store stops touching the task,
    /// where fencing only refuses its writes). Never, for a task this node
    /// holds no lease on.
    async fn lost(&self, task: &TaskId);
    /// Resolves when some node (this one included) may have written `what`:
    /// a notification from the store, so waiters need not wait for their
    /// next poll. A notification can be missed (a connection that dropped);
    /// waiters still poll, less often.
    async fn changed(&self, what: Change);
}

/// Resolves when another node may have written `what` to `store` (a store
/// several nodes share notifies); never, for a store only this machine writes.
pub async fn changed_elsewhere(store: &dyn Store, what: Change) {
    match store.leases() {
        Some(leases) => leases.changed(what).await,
        None => std::future::pending().await,
    }
}

/// What a store's notification says was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// A new task, for whichever node has room.
    Tasks,
    /// A pause or abort request, for the node that runs the task.
    Controls,
    /// A decision on an approval request, for the node whose task waits.
    Decisions,
    /// Events appended to some task's log, for event streams.
    Events,
}

impl Change {
    pub const ALL: [Change; 4] = [
        Change::Tasks,
        Change::Controls,
        Change::Decisions,
        Change::Events,
    ];

    /// How a notification names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Tasks => "tasks",
            Change::Controls => "controls",
            Change::Decisions => "decisions",
            Change::Events => "events",
        }
    }
}

/// Approval requests (raised with a task's write) and the hash-chained ledger
/// their decisions are sealed into.
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    async fn get_approval(&self, id: &ApprovalId) -> StoreResult<Option<ApprovalRequest>>;
    async fn list_approvals(&self, filter: &ApprovalFilter) -> StoreResult<Vec<ApprovalRequest>>;
    /// Replaces a request that is still `pending` with `updated` (compare-and-set on
    /// `pending`: the first valid decision wins) and appends `entry` to the ledger,
    /// sealed after the last entry, in the same transaction. Returns the sealed entry;
    /// `NotPending` with the request as it is if it was no longer pending.
    async fn settle_approval(
        &self,
        updated: &ApprovalRequest,
        entry: LedgerEntry,
    ) -> StoreResult<LedgerEntry>;
    /// Ledger entries with `seq > after_seq`, oldest first, at most `limit`.
    async fn ledger(&self, after_seq: u64, limit: usize) -> StoreResult<Vec<LedgerEntry>>;
    /// Appends `entry` (a decision recorded by hand, or a revocation),
    /// sealed after the last entry. One that revokes another is appended only
    /// if that entry exists (else `LedgerEntryNotFound`), is not a revocation
    /// itself and has not been revoked (else `NotRevocable`), checked in the
    /// same transaction: of two revocations of one entry, one is appended.
    async fn append_ledger(&self, entry: LedgerEntry) -> StoreResult<LedgerEntry>;
}

/// Versioned documents kept beside tasks — shared harness states, contracts,
/// evidence bundles — each written with compare-and-set on its version, and
/// the audit records written with them.
#[async_trait]
pub trait DocumentStore: Send + Sync {
    /// Stores a new shared state (version 1) and `audit`, in one transaction;
    /// `SharedStateExists` if its id is taken.
    async fn insert_shared_state(
        &self,
        state: &rein_protocol::SharedHarnessState,
        audit: &AuditRecord,
    ) -> StoreResult<()>;
    /// A shared state and its version.
    async fn load_shared_state(
        &self,
        id: &str,
    ) -> StoreResult<Option<(rein_protocol::SharedHarnessState, u64)>>;
    /// Writes a shared state back if its version is still `expected` (then it is
    /// `expected + 1`); `SharedStateMoved` if someone wrote in between.
    async fn update_shared_state(
        &self,
        state: &rein_protocol::SharedHarnessState,
        expected: u64,
        audit: &AuditRecord,
    ) -> StoreResult<()>;
    async fn list_shared_states(&self, filter: &SharedStateFilter) -> StoreResult<SharedStatePage>;
    /// Audit records after position `after`, oldest first, at most `limit`.
    async fn audit_records(&self, after: u64, limit: usize) -> StoreResult<Vec<AuditRecord>>;
    /// Stores a new contract or evidence bundle (version 1) and `audit`, in one
    /// transaction; `RecordExists` if its id is taken.
    async fn insert_record(&self, record: &Record, audit: &AuditRecord) -> StoreResult<()>;
    /// A record and its version.
    async fn load_record(&self, kind: RecordKind, id: &str) -> StoreResult<Option<(Record, u64)>>;
    /// Writes a record back if its version is still `expected`; `RecordMoved` if
    /// someone wrote in between.
    async fn update_record(
        &self,
        record: &Record,
        expected: u64,
        audit: &AuditRecord,
    ) -> StoreResult<()>;
    async fn list_records(&self, filter: &RecordFilter) -> StoreResult<RecordPage>;
}

/// The agent journal: each step's session entries, appended at fixed positions.
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Appends entries to a step's journal at positions `from`, `from + 1`, …
    /// (`Conflict`-free: a position already written is `JournalMoved`).
    async fn append_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
        from: u64,
        entries: &[serde_json::Value],
    ) -> StoreResult<()>;
    /// A step's journal, in order.
    async fn load_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
    ) -> StoreResult<Vec<serde_json::Value>>;
    /// The model calls journaled (entries with a `usage`, each counted once
    /// when appended, and kept when its task is deleted: the meter is not
    /// the log), added up by `filter.by` and model.
    async fn usage(&self, filter: &UsageFilter) -> StoreResult<Vec<UsageRow>>;
}

/// The usage a journal entry records, if it records one.
pub fn entry_usage(entry: &serde_json::Value) -> Option<rein_protocol::TurnUsage> {
    serde_json::from_value(entry.get("usage")?.clone()).ok()
}

/// Which model calls [`JournalStore::usage`] adds up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFilter {
    pub task_id: Option<TaskId>,
    /// An agent session (`ses_…`).
    pub session_id: Option<String>,
    /// Recorded at or after.
    pub since: Option<Timestamp>,
    /// Recorded before.
    pub until: Option<Timestamp>,
    pub by: UsageGroup,
}

/// What usage is added up by, besides the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UsageGroup {
    /// Everything together.
    #[default]
    All,
    Task,
    /// The UTC day it was recorded (`YYYY-MM-DD`).
    Day,
}

/// Model calls added up: of one group (a task id, a day, or `""` for all)
/// and one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    pub key: String,
    pub provider: String,
    pub model: String,
    /// Model calls counted.
    pub calls: u64,
    pub usage: rein_protocol::Usage,
}

/// The report of `found` (what [`JournalStore::usage`] gave for `by`:
/// `None`, `task`, `model` or `day`), costed at `models`' prices.
pub fn usage_report(
    found: &[UsageRow],
    by: Option<&str>,
    models: &rein_protocol::Models,
) -> rein_protocol::UsageReport {
    use rein_protocol::{Spend, UsageLine};
    let mut total = Spend::default();
    let mut rows: std::collections::BTreeMap<String, Spend> = std::collections::BTreeMap::new();
    for r in found {
        let model = format!("{}/{}", r.provider, r.model);
        total.add(&model, &r.usage, r.calls, models);
        let key = match by {
            Some("model") => model.clone(),
            _ => r.key.clone(),
        };
        rows.entry(key)
            .or_default()
            .add(&model, &r.usage, r.calls, models);
    }
    rein_protocol::UsageReport {
        total: UsageLine::of(None, &total),
        by: by.map(str::to_owned),
        rows: by.map(|_| {
            rows.iter()
                .map(|(key, spent)| UsageLine::of(Some(key.clone()), spent))
                .collect()
        }),
    }
}

/// What `by` (`task`, `model`, `day`) asks the store to group by; `None`:
/// what else it could be.
pub fn usage_group(by: Option<&str>) -> Option<UsageGroup> {
    Some(match by {
        None | Some("model") => UsageGroup::All,
        Some("task") => UsageGroup::Task,
        Some("day") => UsageGroup::Day,
        Some(_) => return None,
    })
}

/// What the engine needs from durable storage: all four parts, from one
/// backend (SQLite, or any store that passes the conformance suite in
/// `rein-store/tests/suite/conformance.rs`).
pub trait Store:
    TaskStore + ApprovalStore + DocumentStore + JournalStore + std::fmt::Debug
{
}

impl<S> Store for S where
    S: TaskStore + ApprovalStore + DocumentStore + JournalStore + std::fmt::Debug + ?Sized
{
}

/// How many times an optimistic read-change-write (of a shared state, a
/// contract, an evidence bundle, a session) is tried before the contention
/// is reported.
pub(crate) const UPDATE_TRIES: usize = 64;

/// An audit record of `who` doing `action` to `subject` at `at`.
pub(crate) fn audit(at: Timestamp, who: &str, action: &str, subject: &str) -> AuditRecord {
    AuditRecord {
        seq: 0,
        at,
        who: who.to_owned(),
        action: action.to_owned(),
        subject: subject.to_owned(),
        detail: serde_json::Value::Null,
    }
}
