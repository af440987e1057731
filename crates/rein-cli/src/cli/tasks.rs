//! `rein tasks …` and how a run's outcome is printed, as clap types.

use clap::{Args, Subcommand};

#[derive(Debug, Args, Clone, Copy)]
pub struct RunOutput {
    /// Print the final task state as JSON on stdout (progress goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Print nothing but the outcome.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// List tasks, newest first.
    List(ListArgs),
    /// Show a task with its checkpoints.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a task's event log.
    Events {
        id: String,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long)]
        json: bool,
    },
    /// Print a task's events as they happen, until it finishes or pauses
    /// (exit 0 completed, 1 failed or cancelled, 3 paused or stalled).
    Follow {
        id: String,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long)]
        json: bool,
    },
    /// Print a task's history: each step started and finished (with its
    /// attempt), each checkpoint, each approval decided, each agent turn,
    /// with its log position and time.
    History {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Resume unfinished tasks from their last completed checkpoint.
    Resume(ResumeArgs),
    /// Fork a task from a point of its history (see `rein tasks history`):
    /// a new task with the task's state and workspace as they were there,
    /// which then runs the rest of the plan. The task itself is not changed.
    Fork(ForkArgs),
    /// Run a failed task again: fork it just before its first failed step,
    /// and run the fork.
    Retry(RetryArgs),
    /// Pause a task: its runner starts no more steps and pauses once running ones end.
    Pause {
        id: String,
        #[arg(long, default_value = "requested from the command line")]
        reason: String,
    },
    /// Abort a task: running steps are stopped and the task is cancelled.
    Abort {
        id: String,
        #[arg(long, default_value = "requested from the command line")]
        reason: String,
    },
    /// Take a snapshot of a task's current state.
    Snapshot {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// List a task's snapshots.
    Snapshots {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Create a new task from a snapshot (the original task is left as it is).
    Restore {
        snapshot: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete a finished or paused task with its log and snapshots.
    Delete { id: String },
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub session: Option<String>,
    /// pending, in_progress, completed, failed, paused or cancelled.
    #[arg(long)]
    pub status: Option<String>,
    /// Created at or after: RFC 3339 time, or a duration ago (e.g. 2h).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Created before: RFC 3339 time, or a duration ago.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    /// Continue after a previous page (its `next_cursor`).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Only the forks of this task.
    #[arg(long, value_name = "ID")]
    pub forked_from: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("point").required(true).args(["before", "after", "at"])))]
pub struct ForkArgs {
    /// The task to fork.
    pub id: String,
    /// Just before this step's first attempt started.
    #[arg(long, value_name = "STEP")]
    pub before: Option<String>,
    /// Just after this step completed.
    #[arg(long, value_name = "STEP")]
    pub after: Option<String>,
    /// As of this event of the task's log (a point's `seq` in its history).
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
    /// With --at the event an agent step started at: its session goes on
    /// after this many of its turns.
    #[arg(long, value_name = "N")]
    pub turn: Option<u32>,
    #[command(flatten)]
    pub changes: ForkChanges,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The failed task.
    pub id: String,
    #[command(flatten)]
    pub changes: ForkChanges,
}

/// What a fork changes, and how it is run.
#[derive(Debug, Args)]
pub struct ForkChanges {
    /// An empty directory for the fork's workspace (default: a new one
    /// under the data directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<std::path::PathBuf>,
    /// A step's field for the fork, as STEP.FIELD=VALUE (repeatable): for
    /// example `draft.model=other-model` or `build.run='make test'`. VALUE
    /// is read as JSON when it is JSON, else as text.
    #[arg(long = "set", value_name = "STEP.FIELD=VALUE")]
    pub set: Vec<String>,
    /// Exit 3 as soon as the fork waits for a person, instead of waiting for the answer.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub output: RunOutput,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The task to resume.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<String>,
    /// Resume every unfinished task that no live process is running.
    #[arg(long)]
    pub all: bool,
    /// Run this interrupted, non-idempotent step again.
    #[arg(long, value_name = "STEP", requires = "id")]
    pub rerun: Vec<String>,
    /// Skip this interrupted step.
    #[arg(long, value_name = "STEP", requires = "id")]
    pub skip: Vec<String>,
    /// Exit 3 as soon as the task waits for a person, instead of waiting for the answer.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub output: RunOutput,
}
