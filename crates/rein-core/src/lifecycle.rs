//! Every lifecycle as an explicit transition table: (state, event) → state.
//!
//! Five machines, one shape ([`Machine`]): tasks ([`Tasks`]), checkpoints
//! ([`Checkpoints`]), a run's steps ([`Steps`]), approval requests
//! ([`Approvals`]) and harness contracts ([`Contracts`]). Every change of
//! status goes through [`Machine::next`]; anything not in a table is an
//! [`IllegalTransition`] (HTTP 409, exit 1). Two surface it in their own
//! words: a decision on a request already settled is "already decided",
//! naming the first decision (spec `tasks.md` rule 88), and an event that
//! breaks a task's log is a corrupt log ([`crate::fold::FoldError::Illegal`]).

use rein_protocol::{ApprovalStatus, CheckpointStatus, ContractStatus, TaskStatus};

/// A transition not in its machine's table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition: {kind}{} is {from}, which cannot {event}; {}", id_part(.id), allowed_part(.allowed))]
pub struct IllegalTransition {
    /// Which machine: `task`, `checkpoint`, `step`, `approval request`,
    /// `harness contract`.
    pub kind: &'static str,
    /// Which one, where the caller knows it.
    pub id: Option<String>,
    pub from: String,
    pub event: String,
    /// The events its state allows (none: it is final).
    pub allowed: Vec<String>,
}

fn id_part(id: &Option<String>) -> String {
    id.as_deref().map(|id| format!(" {id}")).unwrap_or_default()
}

/// What a state allows, the words all its events begin with said once:
/// "it can move to approved, rejected, cancelled".
fn allowed_part(allowed: &[String]) -> String {
    let Some(first) = allowed.first() else {
        return "it can do nothing (it is final)".to_owned();
    };
    let shared = first
        .match_indices(' ')
        .rev()
        .map(|(at, _)| &first[..=at])
        .find(|prefix| {
            allowed
                .iter()
                .all(|a| a.starts_with(prefix) && a.len() > prefix.len())
        })
        .unwrap_or("");
    let rest: Vec<&str> = allowed.iter().map(|a| &a[shared.len()..]).collect();
    format!("it can {shared}{}", rest.join(", "))
}

impl IllegalTransition {
    /// The same, naming which one.
    pub fn of(mut self, id: impl std::fmt::Display) -> IllegalTransition {
        self.id = Some(id.to_string());
        self
    }
}

/// One lifecycle: its states, its events, and what each event does in each state.
pub trait Machine {
    type State: Copy + Eq + std::fmt::Debug + 'static;
    type Event: Copy + Eq + std::fmt::Debug + 'static;
    /// What the machine's subjects are called in errors.
    const KIND: &'static str;
    const STATES: &'static [Self::State];
    const EVENTS: &'static [Self::Event];
    /// Every legal transition; each (state, event) pair at most once.
    const TABLE: &'static [(Self::State, Self::Event, Self::State)];

    fn state_name(state: Self::State) -> &'static str;
    fn event_name(event: Self::Event) -> &'static str;

    /// Where `event` takes a subject in state `from`.
    fn next(from: Self::State, event: Self::Event) -> Result<Self::State, IllegalTransition> {
        Self::TABLE
            .iter()
            .find(|(f, e, _)| *f == from && *e == event)
            .map(|(_, _, to)| *to)
            .ok_or_else(|| Self::refusal(from, Self::event_name(event)))
    }

    /// Why `event` (as it is to be named) cannot happen to a subject in
    /// state `from`, with what the state allows.
    fn refusal(from: Self::State, event: &str) -> IllegalTransition {
        IllegalTransition {
            kind: Self::KIND,
            id: None,
            from: Self::state_name(from).to_owned(),
            event: event.to_owned(),
            allowed: Self::allowed(from)
                .into_iter()
                .map(|e| Self::event_name(e).to_owned())
                .collect(),
        }
    }

    /// The events state `from` allows, in table order.
    fn allowed(from: Self::State) -> Vec<Self::Event> {
        Self::TABLE
            .iter()
            .filter(|(f, _, _)| *f == from)
            .map(|(_, e, _)| *e)
            .collect()
    }

    /// Whether nothing can happen to a subject in `state` any more.
    fn is_final(state: Self::State) -> bool {
        Self::allowed(state).is_empty()
    }
}

// Tasks.

/// What can happen to a task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEvent {
    /// A runner takes up a pending task.
    Start,
    /// A runner takes up a paused task, or an in-progress task whose runner died.
    Resume,
    Pause,
    Complete,
    Fail,
    Cancel,
}

impl TaskEvent {
    pub const ALL: [TaskEvent; 6] = [
        TaskEvent::Start,
        TaskEvent::Resume,
        TaskEvent::Pause,
        TaskEvent::Complete,
        TaskEvent::Fail,
        TaskEvent::Cancel,
    ];
}

/// The task lifecycle. Completed, failed and cancelled have no way out.
#[derive(Debug)]
pub struct Tasks;

impl Machine for Tasks {
    type State = TaskStatus;
    type Event = TaskEvent;
    const KIND: &'static str = "task";
    const STATES: &'static [TaskStatus] = &TaskStatus::ALL;
    const EVENTS: &'static [TaskEvent] = &TaskEvent::ALL;
    const TABLE: &'static [(TaskStatus, TaskEvent, TaskStatus)] = TASK_TRANSITIONS;

    fn state_name(state: TaskStatus) -> &'static str {
        state.as_str()
    }
    fn event_name(event: TaskEvent) -> &'static str {
        match event {
            TaskEvent::Start => "start",
            TaskEvent::Resume => "resume",
            TaskEvent::Pause => "pause",
            TaskEvent::Complete => "complete",
            TaskEvent::Fail => "fail",
            TaskEvent::Cancel => "cancel",
        }
    }
}

use TaskStatus as T;

/// Every legal task transition.
pub const TASK_TRANSITIONS: &[(TaskStatus, TaskEvent, TaskStatus)] = &[
    (T::Pending, TaskEvent::Start, T::InProgress),
    (T::Pending, TaskEvent::Pause, T::Paused),
    (T::Pending, TaskEvent::Cancel, T::Cancelled),
    (T::InProgress, TaskEvent::Resume, T::InProgress),
    (T::InProgress, TaskEvent::Pause, T::Paused),
    (T::InProgress, TaskEvent::Complete, T::Completed),
    (T::InProgress, TaskEvent::Fail, T::Failed),
    (T::InProgress, TaskEvent::Cancel, T::Cancelled),
    (T::Paused, TaskEvent::Resume, T::InProgress),
    (T::Paused, TaskEvent::Cancel, T::Cancelled),
];

pub fn task_transition(
    from: TaskStatus,
    event: TaskEvent,
) -> Result<TaskStatus, IllegalTransition> {
    Tasks::next(from, event)
}

// Checkpoints.

/// What can happen to a checkpoint's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointEvent {
    Enter,
    Pass,
    Fail,
    Skip,
}

impl CheckpointEvent {
    pub const ALL: [CheckpointEvent; 4] = [
        CheckpointEvent::Enter,
        CheckpointEvent::Pass,
        CheckpointEvent::Fail,
        CheckpointEvent::Skip,
    ];
}

/// The checkpoint lifecycle: pending → in_progress → completed | failed |
/// skipped, and pending → skipped for a step that never ran. Never backwards.
#[derive(Debug)]
pub struct Checkpoints;

impl Machine for Checkpoints {
    type State = CheckpointStatus;
    type Event = CheckpointEvent;
    const KIND: &'static str = "checkpoint";
    const STATES: &'static [CheckpointStatus] = &CheckpointStatus::ALL;
    const EVENTS: &'static [CheckpointEvent] = &CheckpointEvent::ALL;
    const TABLE: &'static [(CheckpointStatus, CheckpointEvent, CheckpointStatus)] =
        CHECKPOINT_TRANSITIONS;

    fn state_name(state: CheckpointStatus) -> &'static str {
        state.as_str()
    }
    fn event_name(event: CheckpointEvent) -> &'static str {
        match event {
            CheckpointEvent::Enter => "enter",
            CheckpointEvent::Pass => "pass",
            CheckpointEvent::Fail => "fail",
            CheckpointEvent::Skip => "skip",
        }
    }
}

use CheckpointStatus as C;

/// Every legal checkpoint transition.
pub const CHECKPOINT_TRANSITIONS: &[(CheckpointStatus, CheckpointEvent, CheckpointStatus)] = &[
    (C::Pending, CheckpointEvent::Enter, C::InProgress),
    (C::Pending, CheckpointEvent::Skip, C::Skipped),
    (C::InProgress, CheckpointEvent::Pass, C::Completed),
    (C::InProgress, CheckpointEvent::Fail, C::Failed),
    (C::InProgress, CheckpointEvent::Skip, C::Skipped),
];

pub fn checkpoint_transition(
    from: CheckpointStatus,
    event: CheckpointEvent,
) -> Result<CheckpointStatus, IllegalTransition> {
    Checkpoints::next(from, event)
}

// Steps.

/// Where one step of a run is: the runner's view, which the task's
/// checkpoints record durably (a resumed run rebuilds it from them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepState {
    NotStarted,
    Running,
    /// Its attempt has ended; the runner is recording the outcome.
    Ended,
    /// Waiting for a person to settle a request.
    Awaiting,
    /// To run again once a durable retry timer has passed.
    Delayed,
    /// Left in progress by a runner that stopped.
    Interrupted,
    Completed,
    /// Skipped on purpose: counts as done for the steps that depend on it.
    Skipped,
    Failed,
    /// Not run because a dependency failed.
    DependencyFailed,
}

impl StepState {
    pub const ALL: [StepState; 10] = [
        StepState::NotStarted,
        StepState::Running,
        StepState::Ended,
        StepState::Awaiting,
        StepState::Delayed,
        StepState::Interrupted,
        StepState::Completed,
        StepState::Skipped,
        StepState::Failed,
        StepState::DependencyFailed,
    ];
}

/// What can happen to a step in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEvent {
    /// Its checkpoint opens and its attempt starts.
    Start,
    /// Its attempt ends (its outcome not yet recorded).
    End,
    /// A person is asked: the step's own request, an escalation, or what to do
    /// with an interrupted attempt.
    Ask,
    /// The request it waits on changes while still pending (delegated,
    /// brought up to date).
    Reask,
    Pass,
    Skip,
    Fail,
    /// Recovery retries it after a delay.
    Delay,
    /// It is to run again: now, after its delay, or when the task resumes.
    RunAgain,
    /// A step it depends on failed.
    Block,
}

impl StepEvent {
    pub const ALL: [StepEvent; 10] = [
        StepEvent::Start,
        StepEvent::End,
        StepEvent::Ask,
        StepEvent::Reask,
        StepEvent::Pass,
        StepEvent::Skip,
        StepEvent::Fail,
        StepEvent::Delay,
        StepEvent::RunAgain,
        StepEvent::Block,
    ];
}

/// The step lifecycle in a run (spec `tasks.md` §5). Completed, skipped,
/// failed and dependency-failed are final for the run.
#[derive(Debug)]
pub struct Steps;

impl Machine for Steps {
    type State = StepState;
    type Event = StepEvent;
    const KIND: &'static str = "step";
    const STATES: &'static [StepState] = &StepState::ALL;
    const EVENTS: &'static [StepEvent] = &StepEvent::ALL;
    const TABLE: &'static [(StepState, StepEvent, StepState)] = STEP_TRANSITIONS;

    fn state_name(state: StepState) -> &'static str {
        match state {
            StepState::NotStarted => "not started",
            StepState::Running => "running",
            StepState::Ended => "ended",
            StepState::Awaiting => "awaiting a person",
            StepState::Delayed => "delayed",
            StepState::Interrupted => "interrupted",
            StepState::Completed => "completed",
            StepState::Skipped => "skipped",
            StepState::Failed => "failed",
            StepState::DependencyFailed => "dependency-failed",
        }
    }
    fn event_name(event: StepEvent) -> &'static str {
        match event {
            StepEvent::Start => "start",
            StepEvent::End => "end",
            StepEvent::Ask => "ask",
            StepEvent::Reask => "reask",
            StepEvent::Pass => "pass",
            StepEvent::Skip => "skip",
            StepEvent::Fail => "fail",
            StepEvent::Delay => "delay",
            StepEvent::RunAgain => "run again",
            StepEvent::Block => "block",
        }
    }
}

use StepEvent as SE;
use StepState as S;

/// Every legal step transition.
pub const STEP_TRANSITIONS: &[(StepState, StepEvent, StepState)] = &[
    (S::NotStarted, SE::Start, S::Running),
    // A person's step waits without running.
    (S::NotStarted, SE::Ask, S::Awaiting),
    (S::NotStarted, SE::Block, S::DependencyFailed),
    (S::Running, SE::End, S::Ended),
    // An abort stops it where it is.
    (S::Running, SE::Fail, S::Failed),
    (S::Ended, SE::Pass, S::Completed),
    (S::Ended, SE::Skip, S::Skipped),
    (S::Ended, SE::Fail, S::Failed),
    (S::Ended, SE::Delay, S::Delayed),
    (S::Ended, SE::RunAgain, S::NotStarted),
    // Recovery escalates to a person.
    (S::Ended, SE::Ask, S::Awaiting),
    (S::Awaiting, SE::Reask, S::Awaiting),
    (S::Awaiting, SE::Pass, S::Completed),
    (S::Awaiting, SE::Skip, S::Skipped),
    (S::Awaiting, SE::Fail, S::Failed),
    (S::Awaiting, SE::RunAgain, S::NotStarted),
    (S::Delayed, SE::RunAgain, S::NotStarted),
    // Resumed: run again, skipped, or a person asked (or asked again).
    (S::Interrupted, SE::RunAgain, S::NotStarted),
    (S::Interrupted, SE::Skip, S::Skipped),
    (S::Interrupted, SE::Ask, S::Awaiting),
];

// Approval requests.

/// What can happen to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalEvent {
    Approve,
    Deny,
    Skip,
    /// Handed to another approver: still pending.
    Delegate,
    /// Its deadline passed.
    Expire,
    /// Withdrawn because nobody needs the answer any more: denied by the system.
    Revoke,
}

impl ApprovalEvent {
    pub const ALL: [ApprovalEvent; 6] = [
        ApprovalEvent::Approve,
        ApprovalEvent::Deny,
        ApprovalEvent::Skip,
        ApprovalEvent::Delegate,
        ApprovalEvent::Expire,
        ApprovalEvent::Revoke,
    ];

    /// The event a person's decision is.
    pub fn of(decision: rein_protocol::Decision) -> ApprovalEvent {
        match decision {
            rein_protocol::Decision::Approve => ApprovalEvent::Approve,
            rein_protocol::Decision::Deny => ApprovalEvent::Deny,
            rein_protocol::Decision::Skip => ApprovalEvent::Skip,
            rein_protocol::Decision::Delegate => ApprovalEvent::Delegate,
        }
    }
}

/// The approval lifecycle: pending until decided, expired or revoked; the
/// first decision wins.
#[derive(Debug)]
pub struct Approvals;

impl Machine for Approvals {
    type State = ApprovalStatus;
    type Event = ApprovalEvent;
    const KIND: &'static str = "approval request";
    const STATES: &'static [ApprovalStatus] = &ApprovalStatus::ALL;
    const EVENTS: &'static [ApprovalEvent] = &ApprovalEvent::ALL;
    const TABLE: &'static [(ApprovalStatus, ApprovalEvent, ApprovalStatus)] = APPROVAL_TRANSITIONS;

    fn state_name(state: ApprovalStatus) -> &'static str {
        state.as_str()
    }
    fn event_name(event: ApprovalEvent) -> &'static str {
        match event {
            ApprovalEvent::Approve => "approve",
            ApprovalEvent::Deny => "deny",
            ApprovalEvent::Skip => "skip",
            ApprovalEvent::Delegate => "delegate",
            ApprovalEvent::Expire => "expire",
            ApprovalEvent::Revoke => "revoke",
        }
    }
}

use ApprovalStatus as A;

/// Every legal approval transition.
pub const APPROVAL_TRANSITIONS: &[(ApprovalStatus, ApprovalEvent, ApprovalStatus)] = &[
    (A::Pending, ApprovalEvent::Approve, A::Approved),
    (A::Pending, ApprovalEvent::Deny, A::Denied),
    (A::Pending, ApprovalEvent::Skip, A::Skipped),
    (A::Pending, ApprovalEvent::Delegate, A::Pending),
    (A::Pending, ApprovalEvent::Expire, A::Expired),
    (A::Pending, ApprovalEvent::Revoke, A::Denied),
];

// Harness contracts.

/// What can happen to a harness contract: each moves it to one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractEvent {
    Propose,
    Approve,
    Reject,
    Execute,
    Verify,
    Fail,
    RollBack,
    Cancel,
}

impl ContractEvent {
    pub const ALL: [ContractEvent; 8] = [
        ContractEvent::Propose,
        ContractEvent::Approve,
        ContractEvent::Reject,
        ContractEvent::Execute,
        ContractEvent::Verify,
        ContractEvent::Fail,
        ContractEvent::RollBack,
        ContractEvent::Cancel,
    ];

    /// The event that moves a contract to `status` (none moves one back to draft).
    pub fn toward(status: ContractStatus) -> Option<ContractEvent> {
        Some(match status {
            ContractStatus::Draft => return None,
            ContractStatus::Proposed => ContractEvent::Propose,
            ContractStatus::Approved => ContractEvent::Approve,
            ContractStatus::Rejected => ContractEvent::Reject,
            ContractStatus::Executing => ContractEvent::Execute,
            ContractStatus::Verified => ContractEvent::Verify,
            ContractStatus::Failed => ContractEvent::Fail,
            ContractStatus::RolledBack => ContractEvent::RollBack,
            ContractStatus::Cancelled => ContractEvent::Cancel,
        })
    }
}

/// The contract lifecycle: draft → proposed → approved → executing → verified
/// | failed | rejected | rolled_back | cancelled; `failed` may still be rolled
/// back, the others at the end are final.
#[derive(Debug)]
pub struct Contracts;

impl Machine for Contracts {
    type State = ContractStatus;
    type Event = ContractEvent;
    const KIND: &'static str = "harness contract";
    const STATES: &'static [ContractStatus] = &ContractStatus::ALL;
    const EVENTS: &'static [ContractEvent] = &ContractEvent::ALL;
    const TABLE: &'static [(ContractStatus, ContractEvent, ContractStatus)] = CONTRACT_TRANSITIONS;

    fn state_name(state: ContractStatus) -> &'static str {
        state.as_str()
    }
    /// Named by where each leads: "move to approved".
    fn event_name(event: ContractEvent) -> &'static str {
        match event {
            ContractEvent::Propose => "move to proposed",
            ContractEvent::Approve => "move to approved",
            ContractEvent::Reject => "move to rejected",
            ContractEvent::Execute => "move to executing",
            ContractEvent::Verify => "move to verified",
            ContractEvent::Fail => "move to failed",
            ContractEvent::RollBack => "move to rolled_back",
            ContractEvent::Cancel => "move to cancelled",
        }
    }
}

use ContractEvent as CE;
use ContractStatus as K;

/// Every legal contract transition.
pub const CONTRACT_TRANSITIONS: &[(ContractStatus, ContractEvent, ContractStatus)] = &[
    (K::Draft, CE::Propose, K::Proposed),
    (K::Draft, CE::Cancel, K::Cancelled),
    (K::Proposed, CE::Approve, K::Approved),
    (K::Proposed, CE::Reject, K::Rejected),
    (K::Proposed, CE::Cancel, K::Cancelled),
    (K::Approved, CE::Execute, K::Executing),
    (K::Approved, CE::Cancel, K::Cancelled),
    (K::Executing, CE::Verify, K::Verified),
    (K::Executing, CE::Fail, K::Failed),
    (K::Executing, CE::RollBack, K::RolledBack),
    (K::Executing, CE::Cancel, K::Cancelled),
    (K::Failed, CE::RollBack, K::RolledBack),
];

/// Where a contract moved to `to` goes: `to` itself, if its table allows it.
pub fn contract_transition(
    from: ContractStatus,
    to: ContractStatus,
) -> Result<ContractStatus, IllegalTransition> {
    match ContractEvent::toward(to) {
        Some(event) => Contracts::next(from, event),
        None => Err(Contracts::refusal(from, "move back to draft")),
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
