//! The command line, as clap types. Parsing only: no logic here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod tasks;

pub use tasks::{ForkArgs, ForkChanges, ListArgs, ResumeArgs, RetryArgs, RunOutput, TasksCommand};

/// Commands (by their path of names) and the global options (by id; none
/// named: every one) that do not apply to them: their help, man pages and
/// completions leave those out (given anyway, they are accepted and ignored).
const NOT_FOR: &[(&[&str], &[&str])] = &[
    (&["completions"], &[]),
    (&["manpages"], &[]),
    (&["plan", "schema"], &[]),
    // A server serves; it does not talk to another one.
    (&["serve"], &["url"]),
];

/// The command line as parsed, documented and completed: each command's
/// help shows the global options apart from its own, and only those that
/// apply to it.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let globals: Vec<String> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| a.get_id().to_string())
        .collect();
    // Built, every command holds the global options it inherits.
    cmd.build();
    fn hide(cmd: clap::Command, path: &[&str], ids: &[String]) -> clap::Command {
        match path.split_first() {
            Some((name, rest)) => cmd.mut_subcommand(*name, |sub| hide(sub, rest, ids)),
            None => cmd.mut_args(|arg| {
                if ids.iter().any(|id| id == arg.get_id().as_str()) {
                    arg.hide(true)
                } else {
                    arg
                }
            }),
        }
    }
    for (path, ids) in NOT_FOR {
        let ids: Vec<String> = if ids.is_empty() {
            globals.clone()
        } else {
            ids.iter().map(|s| (*s).to_owned()).collect()
        };
        cmd = hide(cmd, path, &ids);
    }
    cmd
}

#[derive(Debug, Parser)]
#[command(
    name = "rein",
    version = env!("REIN_LONG_VERSION"),
    about = "Run agent tasks durably: every step checkpointed, every crash resumable.",
    // Every command's help lists its own options first, these apart.
    next_help_heading = "Global options"
)]
pub struct Cli {
    /// The configuration file [default: rein/rein.toml in the XDG config
    /// directory, if it exists]; flags and environment variables override it.
    #[arg(long, global = true, env = "REIN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Directory holding rein's store and task workspaces
    /// [default: the XDG data directory, e.g. ~/.local/share/rein].
    #[arg(long, global = true, env = "REIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The store: a PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE), which
    /// several `rein serve` nodes may share [default: the SQLite file rein.db in
    /// the data directory].
    #[arg(
        long,
        global = true,
        env = "REIN_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,

    /// Talk to a running `rein serve` at this URL (e.g. http://127.0.0.1:7433)
    /// instead of opening the store here.
    #[arg(long, global = true, env = "REIN_URL", value_name = "URL")]
    pub url: Option<String>,

    /// The operator token: sent to the server with --url; for `rein serve`, a token
    /// with the admin role (kept only as its hash).
    #[arg(long, global = true, env = "REIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// What confines the commands of plan steps: `auto` (bubblewrap, else
    /// Landlock; rein refuses to run steps if neither can), `bubblewrap`,
    /// `landlock`, or `none` (unsandboxed, with rein's own permissions; every run
    /// is marked so).
    /// [default: auto]
    #[arg(
        long,
        global = true,
        env = "REIN_SANDBOX",
        value_parser = ["auto", "bubblewrap", "landlock", "none"]
    )]
    pub sandbox: Option<String>,

    /// Permission rules for plan steps: a TOML file of `[[rules]]` (the book's "Permission rules" chapter, docs/src/people/permissions.md).
    #[arg(long, global = true, env = "REIN_POLICY", value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// A harness plugin's manifest (`plugin.toml`); repeat for more, or list
    /// them in REIN_PLUGINS separated by `:`.
    #[arg(
        long = "plugin",
        global = true,
        env = "REIN_PLUGINS",
        value_name = "MANIFEST",
        value_delimiter = ':'
    )]
    pub plugins: Vec<PathBuf>,

    /// Which runtime serves which model route: a TOML file with `default`,
    /// `[providers]` and `[models]` ("provider/model") settings (auto, rein or
    /// a harness id).
    #[arg(
        long = "runtime-policy",
        global = true,
        env = "REIN_RUNTIME_POLICY",
        value_name = "FILE"
    )]
    pub runtime_policy: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,

    /// Where the global settings came from (`flag --x`, `env NAME`), by id.
    #[arg(skip)]
    pub sources: std::collections::BTreeMap<&'static str, String>,
}

/// The global settings a configuration file may also give: argument id, flag,
/// variable.
pub const GLOBAL_SETTINGS: &[(&str, &str, &str)] = &[
    ("data_dir", "--data-dir", "REIN_DATA_DIR"),
    ("store", "--store", "REIN_STORE"),
    ("url", "--url", "REIN_URL"),
    ("sandbox", "--sandbox", "REIN_SANDBOX"),
    ("policy", "--policy", "REIN_POLICY"),
    ("plugins", "--plugin", "REIN_PLUGINS"),
    ("runtime_policy", "--runtime-policy", "REIN_RUNTIME_POLICY"),
];

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a plan file, or a goal a model decomposes, in the foreground (exit 0
    /// completed, 1 failed, 3 paused).
    Run(RunArgs),
    /// One isolated completion: a prompt, no tools, on the runtime the
    /// selection policy picks; with --schema, the answer must be JSON it accepts.
    Complete(CompleteArgs),
    /// Check plan files without running them.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Try the permission rules without running anything.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Shared harness state: who read and wrote what, and where work conflicts.
    #[command(subcommand)]
    State(StateCommand),
    /// Harness contracts (`hctr_…`): planned work and its status flow.
    #[command(subcommand)]
    Contracts(ContractsCommand),
    /// Evidence bundles (`evb_…`): what happened, checked and reviewed.
    #[command(subcommand)]
    Evidence(EvidenceCommand),
    /// Agent harnesses: which runtimes are registered, and which would serve a
    /// model route.
    #[command(subcommand)]
    Harness(HarnessCommand),
    /// Agent sessions (`ses_…`): the conversations of agent steps; reset one,
    /// or pin it to a runtime.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Inspect and steer tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Answer and inspect approval requests (first answer wins).
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// The governance ledger: every human decision, hash-chained.
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Model tokens and their cost, from what every agent turn recorded.
    Usage(UsageArgs),
    /// The configuration in force: each setting, its value and where it came
    /// from (flag, environment, config file, default); secrets redacted.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Serve the admin HTTP API; a running server lists its routes at /docs/api.
    Serve(ServeArgs),
    /// Be an Agent Client Protocol agent on stdin and stdout, for an editor
    /// (Zed: an agent server with `"command": "rein", "args": ["acp"]`): each
    /// prompt is a goal task in the session's directory, its questions asked
    /// as permission requests.
    Acp(AcpArgs),
    /// Probe the store, the sandbox, the permission rules and the ledger, as
    /// `/healthz` does (exit 0 healthy or degraded, 1 unhealthy).
    Health {
        #[arg(long)]
        json: bool,
        /// Say you know the store lost committed writes (its write-ahead log
        /// was deleted, or an older copy restored): the store is healthy
        /// again, and the ledger still names the entries that were lost.
        #[arg(long)]
        acknowledge_lost_writes: bool,
    },
    /// Counters over the tasks in the store: tasks, checkpoints, recovery, the human loop.
    Metrics {
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script (bash: `rein completions bash >
    /// ~/.local/share/bash-completion/completions/rein`; zsh: into a directory
    /// of `$fpath` as `_rein`; fish: `~/.config/fish/completions/rein.fish`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages into DIR: rein.1 and one per subcommand
    /// (rein-tasks-fork.1, …); `man -l DIR/rein.1` reads one.
    Manpages {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List requests, newest first.
    List {
        /// pending, approved, denied, expired, skipped, or all.
        #[arg(long, default_value = "pending")]
        status: String,
        /// Only the requests of this task.
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Show one request.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve, choosing an option if the request has options (default: the recommended one).
    Approve {
        id: String,
        #[arg(long)]
        option: Option<String>,
        #[command(flatten)]
        who: Decider,
    },
    /// Deny: the step fails.
    Deny {
        id: String,
        #[command(flatten)]
        who: Decider,
    },
    /// Skip: the step is skipped and the plan goes on.
    Skip {
        id: String,
        #[command(flatten)]
        who: Decider,
    },
    /// Hand the request to another approver; it stays pending.
    Delegate {
        id: String,
        #[arg(long, value_name = "NAME")]
        to: String,
        #[command(flatten)]
        who: Decider,
    },
}

#[derive(Debug, Args)]
pub struct Decider {
    /// Why (recorded in the ledger).
    #[arg(long)]
    pub reason: Option<String>,
    /// Who decides [default: $REIN_USER, else $USER].
    #[arg(long = "as", value_name = "NAME")]
    pub actor: Option<String>,
    /// Print the settled request as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Print the ledger, oldest first.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Check the hash chain; exit 1 naming the first entry that was edited or removed.
    /// Prints the ledger's head (SEQ:HASH): record it, and check against it later.
    Verify {
        /// A head recorded earlier (SEQ:HASH): also check the ledger still holds
        /// it, which finds its newest entries removed.
        #[arg(long, value_name = "SEQ:HASH")]
        head: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Record a decision by hand: FILE is an entry in the seed's shape
    /// (OpenClaw.NET's governance-ledger entry), or give it with the flags.
    Add {
        /// The entry as JSON.
        #[arg(conflicts_with_all = ["decision", "summary", "scope", "risk", "tool", "reason", "by"])]
        file: Option<std::path::PathBuf>,
        /// approved, rejected, escalated, expired, revoked or unknown.
        #[arg(long)]
        decision: Option<String>,
        /// What was decided on (the seed's actionSummary).
        #[arg(long)]
        summary: Option<String>,
        /// once, session, actor, channel, project, tool, global or unknown.
        #[arg(long)]
        scope: Option<String>,
        /// unknown, low, medium, high or critical.
        #[arg(long)]
        risk: Option<String>,
        /// The tool the decision is about.
        #[arg(long)]
        tool: Option<String>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Who decided [default: you].
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Revoke an entry: a revocation entry naming it is appended (the entry
    /// itself is never changed). Exit 1 if it was already revoked.
    Revoke {
        id: String,
        #[arg(long)]
        reason: Option<String>,
        /// Who revokes [default: you].
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

/// The model route a goal or a completion uses.
#[derive(Debug, Args, Clone, Default)]
pub struct RouteArgs {
    /// The provider [default: openai].
    #[arg(long)]
    pub provider: Option<String>,
    /// The model [default: $REIN_MODEL].
    #[arg(long)]
    pub model: Option<String>,
    /// The runtime: auto, rein or a harness id [default: the runtime policy].
    #[arg(long)]
    pub runtime: Option<String>,
}

/// How a goal becomes a plan.
#[derive(Debug, Args, Clone)]
pub struct GoalArgs {
    #[command(flatten)]
    pub route: RouteArgs,
    /// How many answers the model may give before the goal fails (a refused one
    /// is sent back with what was wrong).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub attempts: u32,
    /// The most tokens one answer may have (a small model that never stops is
    /// cut off there, and asked again naming the limit).
    #[arg(long, default_value_t = rein_core::goal::DEFAULT_MAX_TOKENS, value_parser = clap::value_parser!(u32).range(256..=131_072))]
    pub max_tokens: u32,
    /// Run the decomposed plan without asking a person to confirm it first.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct AcpArgs {
    /// How prompts become plans: the route that decomposes them and runs their
    /// agent steps, the answers allowed, and --yes to run a plan unconfirmed.
    #[command(flatten)]
    pub decompose: GoalArgs,
    /// What each prompt's task may spend.
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// How many steps of a task run at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_parallel: u32,
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The prompt; `-` reads it from stdin.
    pub prompt: String,
    /// A system text sent before the prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// A JSON Schema file: the answer must be JSON that it accepts (exit 1, naming
    /// each violation, if not).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// The longest the completion may take, every attempt included.
    #[arg(long, default_value = "2m")]
    pub timeout: String,
    /// What counts as an answer: `default` refuses empty visible text;
    /// `strict` takes it (the model may answer only in thinking) and never
    /// shows thinking as text.
    #[arg(long, value_name = "default|strict", value_parser = ["default", "strict"])]
    pub visible: Option<String>,
    #[command(flatten)]
    pub route: RouteArgs,
    /// Print the completion with how it was served, as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a task's model calls may spend, all its steps together, before a
/// person is asked.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct BudgetArgs {
    /// Tokens (in and out, cached input included) [default: the plan's `budget`].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,
    /// US dollars, at the prices of rein.toml's [models."PROVIDER/MODEL"].
    #[arg(long, value_name = "USD")]
    pub budget_usd: Option<f64>,
}

impl BudgetArgs {
    /// `plan`'s budget with the flags' bounds over its own.
    pub fn over(
        &self,
        plan: Option<rein_protocol::Budget>,
    ) -> Result<Option<rein_protocol::Budget>, crate::exit::UsageError> {
        if self.budget_tokens.is_none() && self.budget_usd.is_none() {
            return Ok(plan);
        }
        let plan = plan.unwrap_or_default();
        let budget = rein_protocol::Budget {
            tokens: self.budget_tokens.or(plan.tokens),
            cost_usd: self.budget_usd.or(plan.cost_usd),
        };
        budget
            .check()
            .map_err(|e| crate::exit::UsageError(format!("--budget-tokens/--budget-usd: {e}")))?;
        Ok(Some(budget))
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plan file (TOML); or give --goal instead.
    #[arg(required_unless_present = "goal", conflicts_with = "goal")]
    pub plan: Option<PathBuf>,
    /// A goal instead of a plan: a model decomposes it into steps (CP2), a person
    /// confirms them (unless --yes), and they run.
    #[arg(long)]
    pub goal: Option<String>,
    #[command(flatten)]
    pub decompose: GoalArgs,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Session the task belongs to [default: the plan's `session`, else "default"].
    #[arg(long)]
    pub session: Option<String>,
    /// Workspace directory the steps run in [default: the plan's `workspace`, else a
    /// fresh directory under the data directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Most steps running at once, unless the plan says otherwise.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_parallel: u32,
    /// Exit 3 as soon as the task waits for a person, instead of waiting for the answer.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub output: RunOutput,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// List shared states, newest first.
    List {
        #[arg(long)]
        session: Option<String>,
        /// active, completed, failed, cancelled, blocked or unknown.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        tag: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one shared state.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// The newest shared state of a session.
    Session {
        session: String,
        #[arg(long)]
        json: bool,
    },
    /// Run conflict detection and print the conflicts (exit 0 even when there are
    /// some, unless --fail-on says otherwise).
    Conflicts {
        id: String,
        /// Exit 1 when a conflict's policy is at least this: escalate or warn.
        #[arg(long, value_parser = ["escalate", "warn"])]
        fail_on: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Create a shared state from a JSON file (the spec's wire format).
    Create {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Add a participant from a JSON file (one with the same id is replaced).
    AddParticipant {
        id: String,
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Add an action from a JSON file (one with the same id is replaced).
    AddAction {
        id: String,
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ContractsCommand {
    /// List contracts, newest first.
    List {
        /// draft, proposed, approved, executing, verified, failed, rejected,
        /// rolled_back or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only the contracts of this task's plan–execute–verify steps.
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        /// Only contracts recording into this shared state.
        #[arg(long, value_name = "STATE_ID")]
        state: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one contract with its status history.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Create a contract from a JSON file (draft or proposed; risk derived when
    /// not given).
    Create {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Move a contract along its flow: draft → proposed → approved → executing →
    /// verified | failed | rejected | rolled_back | cancelled.
    Status {
        id: String,
        status: String,
        #[arg(long)]
        reason: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// List evidence bundles, newest first.
    List {
        /// Only the bundles of this contract.
        #[arg(long, value_name = "CONTRACT_ID")]
        contract: Option<String>,
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        #[arg(long, value_name = "STATE_ID")]
        state: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one bundle: items, checks, risks, reviews.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Create a bundle from a JSON file (linked from its contract and shared state).
    Create {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Add an item from a JSON file (one with the same id is replaced).
    AddItem {
        id: String,
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Add a check from a JSON file (one with the same id is replaced).
    AddCheck {
        id: String,
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Review the evidence, as yourself.
    Review {
        id: String,
        #[arg(long, value_parser = ["approved", "changes_requested", "rejected", "commented"])]
        verdict: String,
        #[arg(long)]
        comment: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum HarnessCommand {
    /// The registered harnesses, their plugins and what they declare.
    List {
        #[arg(long)]
        json: bool,
    },
    /// The selection decision for a model route, with every candidate's answer.
    Explain {
        #[arg(long)]
        provider: String,
        #[arg(long)]
        model: Option<String>,
        /// auto, rein, or a harness id, as a step's `runtime` would; without it,
        /// the runtime policy (`--runtime-policy`) decides.
        #[arg(long)]
        runtime: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Switch a running server's plugin off (with --url): its harnesses are no
    /// longer selected, and runs naming them are refused saying why.
    Disable {
        plugin: String,
        #[arg(long)]
        json: bool,
    },
    /// Switch a disabled plugin of a running server on again (with --url).
    Enable {
        plugin: String,
        #[arg(long)]
        json: bool,
    },
    /// Withdraw a running server's plugin's grants (with --url): what it runs
    /// is cancelled, its executors retired as stale, its sessions refused —
    /// until the server restarts.
    Revoke {
        plugin: String,
        #[arg(long)]
        json: bool,
    },
    /// Reload a running server's plugin (with --url): its program is
    /// restarted at its next call (calls waiting on it fail, saying so), and
    /// its executors are stale — retired and ensured again at their
    /// sessions' next turn.
    Reload {
        plugin: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration.
    Show {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest task first.
    List {
        /// Only this task's sessions.
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        /// active or ended.
        #[arg(long, value_parser = ["active", "ended"])]
        status: Option<String>,
        /// Only the children this session delegated.
        #[arg(long, value_name = "SESSION_ID")]
        parent: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one session: its steps, runtime, executor and delegated children.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Reset a session through its harness: its conversation starts over.
    /// Refused while its task runs, or when the harness's cleanup fails.
    Reset {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Compact a session's conversation now: its older part summarised by its
    /// model (no tools), its next turn going on from the summary and the
    /// recent turns. Refused while its task runs.
    Compact {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Pin a session to a runtime (`rein` or a harness id), above every other
    /// runtime setting for its later turns.
    Pin {
        id: String,
        #[arg(long, conflicts_with = "unpin", required_unless_present = "unpin")]
        runtime: Option<String>,
        /// Remove the pin.
        #[arg(long)]
        unpin: bool,
        #[arg(long)]
        json: bool,
    },
    /// Hand a session to another plugin to run its later turns, scoped to
    /// its owner: the owner's harness must list the plugin in
    /// `delegated_execution_plugin_ids`, and the session must be pinned to
    /// that harness (`rein sessions pin ID --runtime HARNESS`).
    Delegate {
        id: String,
        /// The plugin that runs the session.
        #[arg(
            long,
            conflicts_with = "take_back",
            required_unless_present = "take_back"
        )]
        to: Option<String>,
        /// Take the session back: its owner's harness runs it again.
        #[arg(long)]
        take_back: bool,
        /// The session key as the delegate knows it (default: the stored one).
        #[arg(long, value_name = "KEY")]
        session_key: Option<String>,
        /// Where the delegate says the session is kept (default: its task).
        #[arg(long, value_name = "PATH")]
        store_path: Option<String>,
        /// The runtime's own session id as the delegate knows it.
        #[arg(long, value_name = "ID")]
        session_id: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// The verdict on a command (or an MCP tool) and the rule that decided
    /// (exit 0 allow, 1 deny, 3 ask).
    Check {
        /// The command as a script (`sh -c` text) instead of as words.
        #[arg(long, conflicts_with_all = ["command", "mcp"])]
        script: Option<String>,
        /// An MCP tool as SERVER/TOOL (`fs/write_file`) instead of a command.
        #[arg(long, conflicts_with = "command")]
        mcp: Option<String>,
        #[arg(long)]
        json: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required_unless_present_any = ["script", "mcp"])]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Print the plan file's JSON Schema: every key a plan and its steps take,
    /// with what each means (editors read it to complete and check plans).
    Schema,
    /// Validate a plan file and show its steps in running order.
    Check {
        plan: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Ask a model to decompose a goal into a plan file, for a person to read,
    /// edit and `rein run`; nothing runs.
    Draft {
        /// What the task is to achieve.
        #[arg(long)]
        goal: String,
        /// The directory the plan will work in (its file listing goes into the
        /// prompt) [default: none].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Write the plan here instead of printing it.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        decompose: GoalArgs,
        /// Print the decomposition and the plan as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:7433", value_name = "ADDR:PORT")]
    pub listen: String,
    /// Operator tokens: a TOML file of `[[tokens]]` with `name`, `role`
    /// (viewer|operator|admin) and `sha256` (the token's SHA-256, hex).
    #[arg(long, env = "REIN_TOKENS_FILE", value_name = "FILE")]
    pub tokens: Option<std::path::PathBuf>,
    /// A directory inside which submitted plans may name their `workspace` and
    /// `allow_read` directories (repeatable); without one, plans that name
    /// either are refused and every task gets a fresh workspace.
    #[arg(long = "workspace-root", value_name = "DIR")]
    pub workspace_roots: Vec<std::path::PathBuf>,
    /// How long a connection has to send its request head, and how long a
    /// kept-alive connection may sit idle, before it is closed.
    #[arg(long, default_value = "10s", value_parser = positive_duration, value_name = "DURATION")]
    pub header_timeout: std::time::Duration,
    /// Most connections served at once (lowered to fit the file limit); past
    /// it only `/healthz` is answered, everything else gets 503.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_connections: u32,
    /// Most connections one client address may hold at once; past it a
    /// connection gets 429 (a health probe is still answered).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_connections_per_client: u32,
    /// Failed sign-ins (wrong tokens, stale sessions) one client address may
    /// make in a minute; past it, its requests get 429 until the minute is over.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub sign_in_failures: u32,
    /// On SIGTERM or Ctrl-C: how long requests in flight get to finish before
    /// the server exits (event streams end at once).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shutdown_grace: std::time::Duration,

    /// With a PostgreSQL --store: the most tasks this node runs at once;
    /// others wait for a node with room.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_tasks: u32,

    /// With a PostgreSQL --store: how long this node's hold on a task lasts
    /// unless renewed (every quarter of it). When a node dies, other nodes take
    /// its tasks over within this much (plus a fraction of a second).
    #[arg(long, default_value = "10s", value_parser = lease_duration, value_name = "DURATION")]
    pub lease: std::time::Duration,
}

/// A lease: long enough to be renewed on a busy machine (at least 300ms).
fn lease_duration(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d >= std::time::Duration::from_millis(300) => Ok(d),
        Ok(_) => Err("must be at least 300ms (it is renewed every quarter of it)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A duration above zero, as `10s`, `500ms` or `2m`.
fn positive_duration(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be more than zero".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only this task's model calls.
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Only this agent session's (`ses_…`).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Recorded at or after: RFC 3339 time, or a duration ago (e.g. 24h).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Recorded before: RFC 3339 time, or a duration ago.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// A row per task, per model or per UTC day (default: one total).
    #[arg(long, value_name = "task|model|day")]
    pub by: Option<String>,
    #[arg(long)]
    pub json: bool,
}
