//! An engine over a real SQLite store in a directory of its own, as most
//! tests want one: workspaces under `DIR/workspaces`, control requests looked
//! for every 20 ms, commands run unsandboxed unless an executor is given.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rein_core::clock::Clock;
use rein_core::{CommandExecutor, Engine, EngineConfig, StepExecutor, Store};
use rein_store::SqliteStore;

/// A built engine, its store, and the directory both live in (removed when
/// this is dropped, unless the directory was the caller's).
#[derive(Debug)]
pub struct TestEngine {
    pub engine: Arc<Engine>,
    pub store: Arc<SqliteStore>,
    /// The temporary directory made for it, if it made one.
    pub dir: Option<tempfile::TempDir>,
}

/// How to build one: [`engine`] in a fresh directory, [`engine_in`] in the
/// caller's.
pub struct EngineBuilder {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    executor: Arc<dyn StepExecutor>,
    clock: Option<Arc<dyn Clock>>,
    roots_here: bool,
    store: Option<Arc<SqliteStore>>,
    configure: Vec<Change>,
}

/// A change to the configuration, made as the engine is built.
type Change = Box<dyn FnOnce(&mut EngineConfig)>;

/// An engine in a fresh temporary directory.
///
/// # Panics
/// If no temporary directory can be made.
#[allow(clippy::expect_used)]
pub fn engine() -> EngineBuilder {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().to_owned();
    EngineBuilder {
        dir: Some(dir),
        ..engine_in(&path)
    }
}

/// An engine whose store (`DIR/rein.db`) and workspaces are in `dir`, which
/// the caller keeps (a second engine on the same store, as after a restart).
pub fn engine_in(dir: &Path) -> EngineBuilder {
    EngineBuilder {
        dir: None,
        path: dir.to_owned(),
        executor: Arc::new(CommandExecutor::unsandboxed()),
        clock: None,
        roots_here: false,
        store: None,
        configure: Vec::new(),
    }
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    /// Steps run through `executor`.
    pub fn executor(mut self, executor: Arc<dyn StepExecutor>) -> Self {
        self.executor = executor;
        self
    }

    /// Deadlines follow `clock` (a `TokioClock` under `tokio::time::pause`):
    /// the store's writes then hold the paused clock still, and control
    /// requests are looked for once a second (deadlines of minutes would
    /// otherwise mean tens of thousands of reads).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Declares the engine's directory for workspaces, so a plan may name
    /// one inside it (its directories are root's when the tests run as root).
    pub fn workspaces_here(mut self) -> Self {
        self.roots_here = true;
        self
    }

    /// Shares `store` (opened on this directory's `rein.db`) with another
    /// engine, rather than opening the file again.
    pub fn store(mut self, store: Arc<SqliteStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Changes the configuration further.
    pub fn config(mut self, change: impl FnOnce(&mut EngineConfig) + 'static) -> Self {
        self.configure.push(Box::new(change));
        self
    }

    /// The engine.
    ///
    /// # Panics
    /// If the store cannot be opened.
    #[allow(clippy::expect_used)]
    pub fn build(self) -> TestEngine {
        // On tokio's paused clock the runtime looks idle while it waits on the
        // store's writer thread, and the clock would jump to the next timer:
        // waiting on the blocking pool holds it still.
        let options = rein_store::WriterOptions {
            wait_blocking: self.clock.is_some(),
            ..rein_store::WriterOptions::default()
        };
        let store = self.store.unwrap_or_else(|| {
            Arc::new(
                SqliteStore::open_with(&self.path.join("rein.db"), options)
                    .expect("the test store opens"),
            )
        });
        let mut config = EngineConfig::new(self.path.join("workspaces"));
        config.control_poll = Duration::from_millis(20);
        if let Some(clock) = self.clock {
            config.clock = clock;
            config.control_poll = Duration::from_secs(1);
        }
        if self.roots_here {
            config.workspace_roots = vec![self.path.clone()];
        }
        for change in self.configure {
            change(&mut config);
        }
        let shared: Arc<dyn Store> = store.clone();
        TestEngine {
            engine: Arc::new(Engine::new(shared, self.executor, config)),
            store,
            dir: self.dir,
        }
    }
}

/// The built-in agent runtime over the chat completions at `base` (as
/// `model`, with a test key), running its commands unsandboxed, no plugin
/// harnesses: what an engine's agent steps run in most tests.
pub fn agent(base: &str, model: &str) -> rein_runtimes::AgentExecutor {
    agent_on(rein_runtimes::openai::ChatConfig {
        base_url: base.to_owned(),
        api_key: Some("sk-test".into()),
        model: model.to_owned(),
        idle_timeout: Duration::from_secs(10),
        stream: true,
    })
}

/// The built-in agent runtime over `chat`, as [`agent`] otherwise.
pub fn agent_on(chat: rein_runtimes::openai::ChatConfig) -> rein_runtimes::AgentExecutor {
    rein_runtimes::AgentExecutor::new(
        Arc::new(CommandExecutor::unsandboxed()),
        Arc::new(rein_core::harness::HarnessRegistry::new(1)),
        rein_core::harness::RuntimePolicy::default(),
        chat,
    )
}

/// Runs (or resumes) task `id` on `engine` to where it stops, which must be
/// its completion; else the task's error and its steps' are shown.
pub async fn completes(engine: &Engine, id: &rein_protocol::TaskId) -> rein_protocol::TaskState {
    let done = engine
        .run(id, rein_core::RunOptions::default())
        .await
        .unwrap_or_else(|e| panic!("task {id} did not run: {e}"));
    assert_completed(&done);
    done
}

/// `done` completed; else its error and its steps' are shown.
pub fn assert_completed(done: &rein_protocol::TaskState) {
    let failed: Vec<_> = done
        .checkpoints
        .iter()
        .filter_map(|c| Some((c.step_id.as_deref()?, c.error.as_deref()?)))
        .collect();
    assert_eq!(
        done.status(),
        rein_protocol::TaskStatus::Completed,
        "task error {:?}, step errors {failed:?}",
        done.head.error
    );
}

/// The error of `step`'s newest checkpoint in `state`; fails the test, naming
/// the step, if it has no checkpoint or that one no error.
pub fn step_error(state: &rein_protocol::TaskState, step: &str) -> String {
    state
        .latest_for_step(step)
        .and_then(|c| c.error.clone())
        .unwrap_or_else(|| panic!("step `{step}` has no error: {:?}", state.status()))
}
