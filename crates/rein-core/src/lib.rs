//! `rein-core`: the engine. It knows no SQL, no HTTP and no terminals.
//!
//! Layout, one line a module, in the order a task meets them:
//! - [`plan`]: plan files and validation of a plan as a DAG.
//! - [`permissions`]: permission rules applied to command steps, at creation
//!   and as each step runs.
//! - [`paths`]: the directories a task is given (workspace, `allow_read`),
//!   checked against the sandbox's guard and stored resolved.
//! - [`engine`]: [`Engine`], the one way into tasks (create, run, resume, pause,
//!   abort, snapshot, restore, delete).
//! - `interrupt`: the engine's pause and abort, asked of the task's live runner
//!   wherever it is, or applied at once to a task nobody runs.
//! - [`context`]: [`context::RunContext`], what runs, approvals, sessions and
//!   records need of the engine (store, executor, configuration, events), and
//!   [`EngineConfig`] and [`RunOptions`].
//! - `runner`: one task's run: scheduling (`mod.rs`), take-up after a stop
//!   (`take_up`), launching steps (`launch`), step progress (`progress`),
//!   people's answers (`approvals`, `questions`), recovery, the end (`end`).
//! - [`executor`]: running one step ([`StepExecutor`]; commands as child processes).
//! - [`asking`]: the questions and reports a running step sends its run.
//! - [`approvals`]: people's decisions on approval requests, and the ledger.
//! - [`clock`]: wall-clock time for deadlines, injectable for tests.
//! - [`recovery`]: classification of failures and the recovery strategies.
//! - [`recorder`]: turns changes into events, applies them, commits them in batches.
//! - [`spans`]: the task's trace exported over OpenTelemetry with its events' ids.
//! - `controls`: carries pause and abort requests from the store to running tasks.
//! - [`lifecycle`]: every lifecycle as a transition table (tasks, checkpoints,
//!   steps, approval requests, contracts), and the one [`lifecycle::IllegalTransition`].
//! - [`fold`]: state as the fold of the event log.
//! - [`history`]: a task's history, the points of its log and its steps' turns.
//! - [`saved`]: [`saved::WorkspaceHistory`], the keeper of workspaces as they were.
//! - [`fork`]: forks, new tasks from a point of another's history, and retries.
//! - [`journal`]: a step's journal, appended entry by entry, for resuming turns.
//! - [`store`]: the [`Store`] trait the storage backends implement.
//! - [`queries`]: the API's list queries and the store's filters, each way.
//! - [`shared_state`]: shared harness states, validated and changed optimistically.
//! - [`conflicts`]: conflict detection over a shared harness state.
//! - [`contracts`]: harness contracts and evidence bundles.
//! - [`pev`]: plan–execute–verify steps and the contracts that follow them.
//! - [`harness`]: agent harnesses, the plugins that register them, and the
//!   selection of the runtime that serves a model route.
//! - [`sessions`]: agent sessions, the conversations agent steps keep.
//! - [`goal`] and [`goal_run`]: goals decomposed into plans at CP2 by an
//!   isolated completion, checked and sent back until valid, durably.
//! - [`process`]: which process runs a task, and whether it is alive.
//! - [`error`]: [`EngineError`] and its [`ErrorKind`].

pub mod approvals;
pub mod asking;
pub mod clock;
pub mod conflicts;
pub mod context;
pub mod contracts;
mod controls;
pub mod engine;
pub mod error;
pub mod executor;
pub mod fold;
pub mod fork;
pub mod goal;
pub mod goal_run;
pub mod harness;
pub mod history;
mod interrupt;
pub mod journal;
pub mod lifecycle;
pub mod paths;
pub mod permissions;
pub mod pev;
pub mod plan;
pub mod process;
pub mod queries;
pub mod recorder;
pub mod recovery;
mod runner;
pub mod saved;
pub mod sessions;
pub mod shared_state;
pub mod spans;
pub mod store;

pub use engine::{ControlOutcome, CreateTask, Engine, EngineConfig, RunClaim, RunOptions};
pub use error::{EngineError, ErrorKind, Result};
pub use executor::{CommandExecutor, ExecutorHealth, StepExecutor, StepOutcome, StepRequest};
pub use store::{
    ApprovalStore, DocumentStore, JournalStore, LeaseStore, Store, StoreError, StoreResult,
    TaskStore,
};
