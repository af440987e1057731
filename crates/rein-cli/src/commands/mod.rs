//! One module per command group; [`dispatch`] routes a parsed command line.

mod acp;
mod approvals;
pub mod complete;
mod fork;
mod harness;
mod plan;
mod records;
mod run;
mod serve;
mod sessions;
mod state;
mod tasks;
mod usage;

use crate::output::{say, shout};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rein_core::{CommandExecutor, Engine, EngineConfig};
use rein_protocol::{SnapshotId, TaskId};
use rein_store::SqliteStore;

pub use crate::backend::actor;
use crate::backend::{Backend, Serving};
use crate::cli::{Cli, Command};
use crate::client::Client;
use crate::exit::UsageError;

/// What every command that touches tasks needs: the engine over the store.
pub struct Context {
    pub engine: Arc<Engine>,
    /// The harnesses the engine's agent steps select from (commands that run
    /// agent steps).
    pub harnesses: Option<Arc<rein_core::harness::Harnesses>>,
}

/// The data directory: `--data-dir`, `REIN_DATA_DIR`, or the XDG data directory.
fn data_dir(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(dir);
    }
    dirs::data_dir()
        .map(|d| d.join("rein"))
        .context("cannot find a data directory (no $HOME or $XDG_DATA_HOME); pass --data-dir DIR or set REIN_DATA_DIR")
}

/// Where the engine keeps its state: the data directory (task workspaces, and
/// the SQLite store unless `store` names a PostgreSQL one).
#[derive(Debug, Clone, Default)]
pub struct Place {
    pub data_dir: Option<PathBuf>,
    pub store: Option<String>,
    /// A PostgreSQL store's lease on the tasks this process runs.
    pub lease: Option<std::time::Duration>,
    /// With a PostgreSQL store: the most tasks this node runs at once.
    pub max_tasks: Option<usize>,
    /// Directories declared for workspaces.
    pub workspace_roots: Vec<PathBuf>,
    /// What of each task's workspace is kept at its step boundaries.
    pub snapshot: rein_protocol::SnapshotRules,
}

/// How often a process on a PostgreSQL store looks for pause, abort and
/// decisions from other nodes besides when it is notified.
const SHARED_STORE_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// The store `target` names, opened on its own (no engine).
pub(crate) fn open_target_store(target: &Target) -> anyhow::Result<Arc<dyn rein_core::Store>> {
    let place = target.place();
    let dir = data_dir(place.data_dir.clone())?;
    open_store(&place, &dir)
}

/// The store `place` names: PostgreSQL at its URL, else SQLite in `dir`.
fn open_store(place: &Place, dir: &std::path::Path) -> anyhow::Result<Arc<dyn rein_core::Store>> {
    Ok(match &place.store {
        None => {
            let store = SqliteStore::open(&dir.join("rein.db"))?;
            for lost in store.unacknowledged_lost_writes() {
                crate::output::shout!(
                    "rein: WARNING: {lost}. `rein health` says more; \
                     `rein health --acknowledge-lost-writes` says you know."
                );
            }
            Arc::new(store)
        }
        Some(url) => {
            // Opening is async (a pool, its first connection) and this caller
            // is not: it waits here, off the runtime's other tasks.
            let mut options = rein_store::postgres::PostgresOptions::default();
            if let Some(lease) = place.lease {
                options.lease = lease;
            }
            let connect = rein_store::PostgresStore::connect_with(url, options);
            let store = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(connect)
            })?;
            Arc::new(store)
        }
    })
}

impl Context {
    /// The engine over the store, for commands that run no steps.
    pub fn open(place: Place, max_parallel: usize) -> anyhow::Result<Context> {
        let why = rein_sandbox::Unavailable {
            reason: "this command does not run steps".into(),
            remedy: "run the task with `rein run` or `rein tasks resume`".into(),
        };
        Context::running(place, max_parallel, CommandExecutor::refusing(why), None)
    }

    /// The engine for commands that run steps as `target` says: under its
    /// permission rules, with its plugins' harnesses and the built-in agent
    /// runtime (configured from `OPENAI_BASE_URL`, `OPENAI_API_KEY` and
    /// `REIN_MODEL`) for agent steps.
    pub fn for_target(
        target: &Target,
        max_parallel: usize,
        executor: CommandExecutor,
    ) -> anyhow::Result<Context> {
        let harnesses = Arc::new(target.harnesses()?);
        let (registry, policy) = (Arc::clone(&harnesses.registry), harnesses.policy.clone());
        // Where nodes share tasks, a step's supervisor kills the step's tree
        // when this node falls silent for half its lease: before another
        // node may take the step over.
        let executor = match &target.store {
            Some(_) => {
                let lease = target
                    .lease
                    .unwrap_or(rein_store::postgres::PostgresOptions::default().lease);
                executor.with_heartbeat(lease / 2)
            }
            None => executor,
        };
        let providers = target.providers.clone();
        let chat = providers.openai.clone();
        let completions =
            rein_runtimes::Completions::new(Arc::clone(&registry), policy.clone(), chat.clone())
                .with_anthropic(providers.anthropic.clone())
                .with_profiles(target.auth_profiles.clone());
        let agent = rein_runtimes::AgentExecutor::new(Arc::new(executor), registry, policy, chat)
            .with_anthropic(providers.anthropic)
            .with_mcp_servers(target.mcp_servers.clone())
            .with_models(target.models.clone())
            .with_fallback_models(target.fallback_models.clone())
            .with_daily_budget(target.daily_budget);
        let mut ctx = Context::running_with(
            target.place(),
            max_parallel,
            Arc::new(agent),
            target.policy.as_deref(),
            Some(Arc::new(completions)),
        )?;
        ctx.harnesses = Some(harnesses);
        Ok(ctx)
    }

    /// The engine for commands that ask a model but run no steps (`rein
    /// complete`, `rein plan draft`): the plugins' harnesses and the built-in
    /// runtime serve its completions.
    pub fn for_completions(target: &Target) -> anyhow::Result<Context> {
        let harnesses = target.harnesses()?;
        let providers = target.providers.clone();
        let completions =
            rein_runtimes::Completions::new(harnesses.registry, harnesses.policy, providers.openai)
                .with_anthropic(providers.anthropic)
                .with_profiles(target.auth_profiles.clone());
        let why = rein_sandbox::Unavailable {
            reason: "this command does not run steps".into(),
            remedy: "run the task with `rein run` or `rein tasks resume`".into(),
        };
        Context::running_with(
            target.place(),
            1,
            Arc::new(CommandExecutor::refusing(why)),
            target.policy.as_deref(),
            Some(Arc::new(completions)),
        )
    }

    /// The engine for commands that run steps, under `policy`'s rules.
    pub fn running(
        place: Place,
        max_parallel: usize,
        executor: CommandExecutor,
        policy: Option<&std::path::Path>,
    ) -> anyhow::Result<Context> {
        Context::running_with(place, max_parallel, Arc::new(executor), policy, None)
    }

    fn running_with(
        place: Place,
        max_parallel: usize,
        executor: Arc<dyn rein_core::StepExecutor>,
        policy: Option<&std::path::Path>,
        completer: Option<Arc<dyn rein_core::harness::completion::Completer>>,
    ) -> anyhow::Result<Context> {
        let dir = data_dir(place.data_dir.clone())?;
        let store = open_store(&place, &dir)?;
        let mut config = engine_config(dir);
        config.max_parallel = max_parallel;
        if place.store.is_some() {
            // Requests and decisions from other nodes arrive by notification;
            // the poll only catches one that was missed.
            config.control_poll = SHARED_STORE_POLL;
        }
        if let Some(n) = place.max_tasks {
            config.max_tasks = n;
        }
        config.workspace_roots = place.workspace_roots.clone();
        config.policy = Arc::new(load_policy(policy)?);
        config.policy_file = policy.and_then(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|text| (p.to_path_buf(), text))
        });
        config.snapshot = place.snapshot.clone();
        if let Some(data) = &config.data_dir {
            // Beside the store, inside the data directory no step may reach.
            let saved = rein_store::SavedWorkspaces::open(&data.join("saved"))
                .map_err(anyhow::Error::msg)?;
            config.saved = Some(Arc::new(saved));
        }
        let mut engine = Engine::new(store, executor, config);
        if let Some(completer) = completer {
            engine = engine.with_completer(completer);
        }
        Ok(Context {
            engine: Arc::new(engine),
            harnesses: None,
        })
    }
}

/// The engine's settings for the data directory `dir`: the store and the task
/// workspaces in it, and it kept out of every task's reach.
fn engine_config(dir: PathBuf) -> EngineConfig {
    let mut config = EngineConfig::new(dir.join("workspaces"));
    config.data_dir = Some(dir);
    config
}

/// What the directories of a plan run here must keep clear of (`--data-dir`).
pub fn protected(target: &Target) -> anyhow::Result<rein_sandbox::Protected> {
    let mut config = engine_config(data_dir(target.data_dir.clone())?);
    config.workspace_roots = target.workspace_roots.clone();
    Ok(config.protected(None))
}

/// The harnesses of the plugins named by `--plugin` (or `REIN_PLUGINS`). A
/// manifest that cannot be read, or a registration the registry refuses, is bad
/// usage.
pub fn harness_registry(
    plugins: &[PathBuf],
) -> anyhow::Result<rein_core::harness::HarnessRegistry> {
    let mut registry = rein_core::harness::HarnessRegistry::new(1);
    for path in plugins {
        let (manifest, dir) =
            rein_runtimes::load_manifest(path).map_err(|e| UsageError(e.to_string()))?;
        let refused = rein_runtimes::register_plugin(&mut registry, manifest, dir);
        if let Some(first) = refused.first() {
            return Err(UsageError(first.to_string()).into());
        }
    }
    Ok(registry)
}

/// The runtime policy of `--runtime-policy FILE`, or `auto` everywhere.
pub fn runtime_policy(
    path: Option<&std::path::Path>,
) -> anyhow::Result<rein_core::harness::RuntimePolicy> {
    let Some(path) = path else {
        return Ok(rein_core::harness::RuntimePolicy::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text)
        .map_err(|e| UsageError(format!("{}: not a runtime policy: {e}", path.display())).into())
}

/// The permission rules of `--policy FILE`, or none.
pub fn load_policy(path: Option<&std::path::Path>) -> anyhow::Result<rein_sandbox::Policy> {
    match path {
        Some(path) => rein_sandbox::Policy::load(path).map_err(|e| {
            UsageError(format!(
                "{e}; the rule format is in docs/src/people/permissions.md"
            ))
            .into()
        }),
        None => Ok(rein_sandbox::Policy::default()),
    }
}

/// The first argument that makes `rein` the Landlock trampoline.
pub const CONFINE: &str = "__confine";

/// The executor for commands that run steps, after probing the sandbox `choice`
/// names. A sandbox that cannot run is an error (`strict`), or makes every
/// command step fail saying why (`rein serve`, which runs on to say so in
/// `/healthz`). `none` warns once on stderr.
pub async fn executor(choice: &str, strict: bool) -> anyhow::Result<CommandExecutor> {
    use rein_sandbox::Sandbox;
    let trampoline = match std::env::current_exe() {
        Ok(rein) => Some(rein_sandbox::Trampoline::beside(rein, vec![CONFINE.into()]).await),
        Err(_) => None,
    };
    if choice == "none" {
        shout!(
            "warning: --sandbox none: plan steps run unsandboxed, with rein's own permissions; each run is recorded as unsandboxed"
        );
        return Ok(match trampoline {
            Some(t) => CommandExecutor::unsandboxed_via(t),
            None => CommandExecutor::unsandboxed(),
        });
    }
    let probed = match (choice, trampoline) {
        ("bubblewrap", trampoline) => Sandbox::probe_started_by(trampoline).await,
        ("landlock", Some(t)) => Sandbox::probe_landlock(t).await,
        ("landlock", None) => Err(rein_sandbox::Unavailable {
            reason: "cannot find the rein executable to confine steps with".into(),
            remedy: "run rein by its path, or use --sandbox bubblewrap".into(),
        }),
        (_, trampoline) => Sandbox::probe_any(trampoline).await,
    };
    match probed {
        Ok(sandbox) => Ok(CommandExecutor::sandboxed(sandbox)),
        Err(why) if strict => Err(why.into()),
        Err(why) => {
            shout!("warning: {why}");
            Ok(CommandExecutor::refusing(why))
        }
    }
}

/// Where the tasks are: `--url` (a running server, with `--token`), else the store
/// under `--data-dir`.
#[derive(Debug, Clone)]
pub struct Target {
    pub data_dir: Option<PathBuf>,
    /// `--store`: a PostgreSQL URL, or SQLite in the data directory.
    pub store: Option<String>,
    /// `rein serve --lease`.
    pub lease: Option<std::time::Duration>,
    /// `rein serve --max-tasks`.
    pub max_tasks: Option<usize>,
    /// Directories declared for workspaces (`workspace_roots`, and a
    /// server's `--workspace-root`).
    pub workspace_roots: Vec<PathBuf>,
    pub url: Option<String>,
    pub token: Option<String>,
    /// `--sandbox`: auto, bubblewrap, landlock or none.
    pub sandbox: String,
    /// `--policy`: the permission rules' file.
    pub policy: Option<PathBuf>,
    /// `--plugin`: harness plugins' manifests.
    pub plugins: Vec<PathBuf>,
    /// `--runtime-policy`: which runtime serves which model route.
    pub runtime_policy: Option<PathBuf>,
    /// The built-in runtime's providers.
    pub providers: rein_runtimes::provider::Providers,
    /// The configuration's MCP servers.
    pub mcp_servers: rein_runtimes::mcp::McpServers,
    /// Prices and context windows, by `PROVIDER/MODEL`.
    pub models: rein_runtimes::agent::Models,
    /// Agent steps' default fallback models.
    pub fallback_models: Vec<String>,
    /// Credential profiles of isolated completions (`[auth_profiles.NAME]`).
    pub auth_profiles: Vec<rein_runtimes::ProfileSpec>,
    /// What all tasks' model calls may spend in a UTC day.
    pub daily_budget: Option<rein_protocol::Budget>,
    /// What of each task's workspace is kept at its step boundaries.
    pub snapshot: rein_protocol::SnapshotRules,
}

/// `rein config show`.
fn show_config(config: &crate::config::Config, json: bool) -> anyhow::Result<u8> {
    let looked_for = crate::config::default_file().map(|p| p.display().to_string());
    if json {
        print_json(&serde_json::json!({
            "file": config.file.as_ref().map(|p| p.display().to_string()),
            "looked_for": looked_for,
            "settings": config.shown,
        }))?;
    } else {
        say!(
            "config file: {}",
            config.file.as_ref().map_or_else(
                || format!(
                    "none (looked for {}; --config FILE or REIN_CONFIG names one)",
                    looked_for
                        .as_deref()
                        .unwrap_or("rein/rein.toml in the XDG config directory")
                ),
                |p| p.display().to_string()
            )
        );
        for s in &config.shown {
            say!(
                "{:<22} {:<40} {}",
                s.key,
                s.value.as_deref().unwrap_or("-"),
                s.source
            );
        }
    }
    Ok(crate::exit::SUCCESS)
}

impl Target {
    /// Where the engine keeps its state.
    pub fn place(&self) -> Place {
        Place {
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            lease: self.lease,
            max_tasks: self.max_tasks,
            workspace_roots: self.workspace_roots.clone(),
            snapshot: self.snapshot.clone(),
        }
    }

    /// The harnesses of `--plugin` with the runtime policy and how each
    /// provider's requests are prepared: what selection reads.
    pub fn harnesses(&self) -> anyhow::Result<rein_core::harness::Harnesses> {
        Ok(rein_core::harness::Harnesses {
            registry: Arc::new(harness_registry(&self.plugins)?),
            policy: runtime_policy(self.runtime_policy.as_deref())?,
            facts: self.providers.all_facts(),
            fallback_models: self.fallback_models.clone(),
        })
    }

    /// The backend for commands that may end a task (`tasks abort`): here,
    /// with the agent runtimes, so the task's sessions' executors are retired
    /// through the controllers of the plugins named with `--plugin`.
    pub fn open_ending(&self, max_parallel: usize) -> anyhow::Result<Backend> {
        if self.url.is_some() {
            return self.open(max_parallel);
        }
        let why = rein_sandbox::Unavailable {
            reason: "this command does not run steps".into(),
            remedy: "run the task with `rein run` or `rein tasks resume`".into(),
        };
        let ctx = Context::for_target(self, max_parallel, CommandExecutor::refusing(why))?;
        Ok(self.serve_here(ctx))
    }

    /// The backend for commands that read and steer tasks.
    pub fn open(&self, max_parallel: usize) -> anyhow::Result<Backend> {
        Ok(match &self.url {
            Some(url) => Backend::remote(Client::new(url, self.token.clone())?),
            None => self.serve_here(Context::open(self.place(), max_parallel)?),
        })
    }

    /// The backend for commands about agent runtimes and sessions: here,
    /// with the harnesses of the plugins named with `--plugin`.
    pub fn open_with_harnesses(&self) -> anyhow::Result<Backend> {
        if self.url.is_some() {
            return self.open(1);
        }
        let mut ctx = Context::open(self.place(), 1)?;
        ctx.harnesses = Some(Arc::new(self.harnesses()?));
        Ok(self.serve_here(ctx))
    }

    /// The API served here over `ctx`'s engine, with its harnesses.
    pub fn serve_here(&self, ctx: Context) -> Backend {
        Backend::local(
            ctx.engine,
            Serving {
                harnesses: ctx.harnesses,
                models: self.models.clone(),
            },
        )
    }
}

/// How a goal is to become a plan, from the command line.
pub fn goal(args: &crate::cli::GoalArgs) -> rein_protocol::Goal {
    rein_protocol::Goal {
        provider: args.route.provider.clone(),
        model: args.route.model.clone(),
        runtime: args.route.runtime.clone(),
        confirm: !args.yes,
        attempts: Some(args.attempts),
        max_tokens: Some(args.max_tokens),
        mcp: Vec::new(),
        images: Vec::new(),
    }
}

pub fn parse_task_id(id: &str) -> anyhow::Result<TaskId> {
    TaskId::parse(id.trim()).map_err(|e| UsageError(e.to_string()).into())
}

/// The task `--task` names, if it names one: a malformed id is a usage
/// error naming the flag.
pub fn task_flag(id: Option<&str>) -> anyhow::Result<Option<TaskId>> {
    id.map(|id| TaskId::parse(id.trim()).map_err(|e| UsageError(format!("--task: {e}")).into()))
        .transpose()
}

pub fn parse_snapshot_id(id: &str) -> anyhow::Result<SnapshotId> {
    SnapshotId::parse(id.trim()).map_err(|e| UsageError(e.to_string()).into())
}

pub fn parse_session_id(id: &str) -> anyhow::Result<rein_protocol::SessionId> {
    rein_protocol::SessionId::parse(id.trim()).map_err(|e| UsageError(e.to_string()).into())
}

/// Prints one page of a listing: with `json`, the page as the API answers it
/// (`{"items": […], "next_cursor": …}`, the cursor `null` on the last page);
/// else a table of `columns`, one `row` of cells per item, or "no WHAT", and
/// the command for the next page (`more`).
pub fn print_page<T: serde::Serialize>(
    page: &rein_protocol::api::Page<T>,
    json: bool,
    what: &str,
    more: &str,
    columns: &[(&str, isize)],
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<()> {
    if json {
        print_json(page)?;
    } else if page.items.is_empty() {
        say!("no {what}");
    } else {
        let headings: Vec<&str> = columns.iter().map(|(heading, _)| *heading).collect();
        say!("{}", laid_out(columns, &headings));
        for item in &page.items {
            say!("{}", laid_out(columns, &row(item)));
        }
        if let Some(c) = &page.next_cursor {
            say!("more: {more} --cursor '{c}'");
        }
    }
    Ok(())
}

/// One line of a table: each cell padded to its column's width (a negative
/// width right-aligns, as for numbers), one space apart; the last cell, two
/// spaces on, takes the rest of the line as it is.
fn laid_out(columns: &[(&str, isize)], cells: &[impl AsRef<str>]) -> String {
    let mut line = String::new();
    for (i, (cell, (_, width))) in cells.iter().zip(columns).enumerate() {
        let cell = cell.as_ref();
        let w = width.unsigned_abs();
        if i + 1 == columns.len() {
            line.push_str(if i == 0 { "" } else { "  " });
            line.push_str(cell);
        } else {
            line.push_str(if i == 0 { "" } else { " " });
            if *width < 0 {
                line.push_str(&format!("{cell:>w$}"));
            } else {
                line.push_str(&format!("{cell:<w$}"));
            }
        }
    }
    line
}

/// `rein manpages DIR`: a page for rein and one for each subcommand.
fn manpages(dir: &std::path::Path) -> anyhow::Result<u8> {
    std::fs::create_dir_all(dir).map_err(|e| {
        UsageError(format!(
            "cannot make the directory {} for the man pages: {e}",
            dir.display()
        ))
    })?;
    clap_mangen::generate_to(crate::cli::command(), dir)
        .map_err(|e| anyhow::anyhow!("cannot write the man pages into {}: {e}", dir.display()))?;
    let written = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".1"))
        .count();
    say!("wrote {written} man pages into {}", dir.display());
    Ok(crate::exit::SUCCESS)
}

/// Prints a value as pretty JSON on stdout.
/// Which of the two stopping signals came.
pub(super) enum Stop {
    /// SIGINT: Ctrl-C at the terminal.
    Interrupt,
    /// SIGTERM: a service manager, `kill`.
    Terminate,
}

/// Ctrl-C and SIGTERM, listened for from now on.
pub(super) struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// None where they cannot be listened for (no signal driver): the
    /// process then ends as signals end it by default.
    pub(super) fn listen() -> Option<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let int = signal(SignalKind::interrupt()).ok()?;
        let term = signal(SignalKind::terminate()).ok()?;
        Some(StopSignals { int, term })
    }

    /// The next of them to come.
    pub(super) async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.int.recv() => Stop::Interrupt,
            _ = self.term.recv() => Stop::Terminate,
        }
    }
}

pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    say!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    // Made from the command line's definition alone: no configuration read.
    match &cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut crate::cli::command(),
                "rein",
                &mut std::io::stdout(),
            );
            return Ok(crate::exit::SUCCESS);
        }
        Command::Manpages { dir } => return manpages(dir),
        _ => {}
    }
    let config = crate::config::Config::resolve(
        cli.config.as_deref(),
        crate::config::FromCommandLine {
            data_dir: cli.data_dir,
            store: cli.store.filter(|s| !s.trim().is_empty()),
            url: cli.url.filter(|u| !u.trim().is_empty()),
            sandbox: cli.sandbox,
            policy: cli.policy,
            plugins: cli.plugins,
            runtime_policy: cli.runtime_policy,
            sources: cli.sources,
        },
    )?;
    let target = Target {
        data_dir: config.data_dir.clone(),
        store: config.store.clone(),
        lease: None,
        max_tasks: None,
        workspace_roots: config.workspace_roots.clone(),
        url: config.url.clone().filter(|u| !u.trim().is_empty()),
        token: cli.token,
        sandbox: config.sandbox.clone(),
        policy: config.policy.clone(),
        plugins: config.plugins.clone(),
        runtime_policy: config.runtime_policy.clone(),
        providers: config.providers.clone(),
        mcp_servers: config.mcp_servers.clone(),
        models: config.models.clone(),
        fallback_models: config.fallback_models.clone(),
        daily_budget: config.daily_budget,
        snapshot: config.snapshot.clone(),
        auth_profiles: config.auth_profiles.clone(),
    };
    match cli.command {
        Command::Config(crate::cli::ConfigCommand::Show { json }) => show_config(&config, json),
        Command::Run(args) => run::run(&target, args).await,
        Command::Plan(cmd) => plan::dispatch(&target, cmd).await,
        Command::Complete(args) => complete::complete(&target, args).await,
        Command::Policy(cmd) => plan::policy(&target, cmd),
        Command::State(cmd) => state::dispatch(&target, cmd).await,
        Command::Contracts(cmd) => records::contracts(&target, cmd).await,
        Command::Evidence(cmd) => records::evidence(&target, cmd).await,
        Command::Harness(cmd) => harness::dispatch(&target, cmd).await,
        Command::Sessions(cmd) => sessions::dispatch(&target, cmd).await,
        Command::Tasks(cmd) => tasks::dispatch(&target, cmd).await,
        Command::Approvals(cmd) => approvals::dispatch(&target, cmd).await,
        Command::Ledger(cmd) => approvals::ledger(&target, cmd).await,
        Command::Usage(args) => usage::usage(&target, args).await,
        Command::Metrics { json } => approvals::metrics(&target, json).await,
        Command::Health {
            json,
            acknowledge_lost_writes,
        } => approvals::health(&target, json, acknowledge_lost_writes).await,
        Command::Acp(args) => acp::serve(&target, args).await,
        // Answered before the configuration was read.
        Command::Completions { .. } | Command::Manpages { .. } => Ok(crate::exit::SUCCESS),
        Command::Serve(args) => {
            if target.url.is_some() {
                return Err(UsageError(
                    "`rein serve` is the server: it takes --listen ADDR:PORT, not --url (unset REIN_URL)"
                        .into(),
                )
                .into());
            }
            serve::serve(&target, args).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::laid_out;

    #[test]
    fn a_tables_heading_and_rows_are_laid_out_by_the_same_columns() {
        let columns = [("ID", 6), ("STATUS", 8), ("TURNS", -5), ("NAME", 0)];
        assert_eq!(
            laid_out(&columns, &["ID", "STATUS", "TURNS", "NAME"]),
            "ID     STATUS   TURNS  NAME"
        );
        assert_eq!(
            laid_out(&columns, &["ses_1", "idle", "12", "a long name"]),
            "ses_1  idle        12  a long name"
        );
        // A cell wider than its column is not cut: the line moves on.
        assert_eq!(
            laid_out(&columns, &["ses_123456", "idle", "123456", "n"]),
            "ses_123456 idle     123456  n"
        );
        assert_eq!(laid_out(&[("ONLY", 0)], &["x"]), "x");
    }
}
