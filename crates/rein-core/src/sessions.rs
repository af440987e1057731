//! Agent sessions (`ses_…`): the conversation an agent step has with its
//! runtime, kept as a record beside its task, with every change audited.
//!
//! - A step without `session` has a session of its own, named after the step;
//!   steps naming the same session share one (the plan orders them).
//! - The built-in runtime keeps the conversation in the session's journal (a
//!   step's own session: the step's journal); a plugin's harness is handed the
//!   session id as its session key.
//! - A harness whose plugin has an executor controller gets `ensure` before a
//!   session's first turn in this registry and `retire` when the session is
//!   reset or its task ends; the executor is recorded before `ensure` is
//!   asked, so one a crash left behind is retired when the session is next used
//!   (harness-sdk rules 10–13).
//! - `reset` goes through the harness's reset; a cleanup that fails refuses it
//!   (rule 14). `pin` sets the runtime that outranks every other setting
//!   (rule 3).
//! - A delegated child session is changed only by its owner, the task whose
//!   session delegated it (rule 24).

use std::sync::Arc;

use rein_protocol::{
    AgentSessionInfo, Delegation, ExecutorPhase, SessionExecutor, SessionId, SessionStatus, TaskId,
    TaskStatus,
};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::harness::executor::{ExecutorBinding, ExecutorHandle, ResolveError};
use crate::harness::{AgentSession, HarnessRegistry, Harnesses};
use crate::process::runner_alive;
use crate::store::{Record, RecordFilter, RecordKind, StoreError};
use crate::store::{UPDATE_TRIES, audit};
use crate::{EngineError, Store};

/// The agent sessions in the engine's store.
#[derive(Clone)]
pub struct Sessions {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) audited: Arc<tokio::sync::Notify>,
}

impl Sessions {
    /// The model calls metered in the store, added up (what a budget has
    /// spent).
    pub async fn usage(
        &self,
        filter: &crate::store::UsageFilter,
    ) -> Result<Vec<crate::store::UsageRow>, EngineError> {
        Ok(self.store.usage(filter).await?)
    }
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

/// Who changes a session when its own task does.
pub const TASK_ACTOR: &str = "task";

/// A page of sessions, newest task first.
pub type SessionPage = rein_protocol::api::Page<AgentSessionInfo>;

/// Which session a turn is taken in.
#[derive(Debug, Clone)]
pub enum SessionName<'a> {
    /// The step's own.
    Own,
    /// Named by the plan, shared by the steps naming it.
    Shared(&'a str),
    /// A child run for a `delegate` call.
    Delegated(Delegation),
}

/// Where the built-in runtime keeps a session's conversation: a step's own
/// session in the step's journal (as before sessions were named), any other in
/// a journal named after the session.
pub fn journal_name(session: &AgentSessionInfo) -> String {
    if session.shared || session.delegation.is_some() {
        session.id.to_string()
    } else {
        session.name.clone()
    }
}

fn record_of(s: &AgentSessionInfo) -> Result<Record, EngineError> {
    Ok(Record {
        kind: RecordKind::Session,
        id: s.id.to_string(),
        status: Some(s.status.as_str().to_owned()),
        task_id: Some(s.task_id.to_string()),
        shared_state_id: None,
        // A child is found by its parent.
        contract_id: s.delegation.as_ref().map(|d| d.parent.to_string()),
        created_at: s.created_at,
        body: serde_json::to_value(s).map_err(|e| EngineError::BadRequest(e.to_string()))?,
    })
}

fn decode(record: &Record) -> Result<AgentSessionInfo, EngineError> {
    serde_json::from_value(record.body.clone()).map_err(|e| {
        StoreError::Corrupt(format!("{} {}: {e}", record.kind.noun(), record.id)).into()
    })
}

fn not_found(id: &str) -> EngineError {
    StoreError::RecordNotFound {
        kind: RecordKind::Session,
        id: id.to_owned(),
    }
    .into()
}

/// The binding an executor controller is handed for `executor` of `session`.
fn binding(session: &AgentSessionInfo, executor: &SessionExecutor) -> ExecutorBinding {
    ExecutorBinding {
        session_key: session.id.to_string(),
        agent_id: session.name.clone(),
        native_session_id: session.native_session_id.clone(),
        environment_id: executor.environment_id.clone(),
        remote_url: None,
        workspace_directory: executor.workspace_directory.clone().into(),
    }
}

impl Sessions {
    /// The session `step` of `task` takes its turns in, made on first use (the
    /// same id every time: a resumed step finds the session it started), with
    /// the step added to its list.
    pub async fn open(
        &self,
        task: &TaskId,
        step: &str,
        name: SessionName<'_>,
        route: &str,
    ) -> Result<AgentSessionInfo, EngineError> {
        let (label, shared, delegation) = match name {
            SessionName::Own => (step.to_owned(), false, None),
            SessionName::Shared(n) => (n.to_owned(), true, None),
            SessionName::Delegated(d) => (
                format!("delegate:{}:{}", d.step_id, d.call_id),
                false,
                Some(d),
            ),
        };
        let id = SessionId::of(task, &label);
        let step = step.to_owned();
        // The step joins the session it finds (one read); only a session
        // not yet there is made.
        let mut join = |s: &mut AgentSessionInfo| {
            // A child that answered stays ended: it is not run again.
            let answered = s.delegation.as_ref().is_some_and(|d| d.answer.is_some());
            if answered || (s.steps.last() == Some(&step) && s.status == SessionStatus::Active) {
                return Ok(None);
            }
            if !s.steps.contains(&step) {
                s.steps.push(step.clone());
            }
            s.status = SessionStatus::Active;
            Ok(Some(()))
        };
        match self
            .change(id.as_str(), TASK_ACTOR, "session.open", &mut join)
            .await
        {
            Ok((s, _)) => return Ok(s),
            Err(EngineError::Store(StoreError::RecordNotFound { .. })) => {}
            Err(e) => return Err(e),
        }
        let now = self.clock.now();
        let fresh = AgentSessionInfo {
            id: id.clone(),
            task_id: task.clone(),
            name: label,
            shared,
            status: SessionStatus::Active,
            steps: vec![step.clone()],
            route: Some(route.to_owned()),
            runtime: None,
            pinned_runtime: None,
            native_session_id: None,
            turns: 0,
            generation: 0,
            executor: None,
            delegation,
            delegated_execution: None,
            created_at: now,
            updated_at: now,
        };
        match self
            .store
            .insert_record(
                &record_of(&fresh)?,
                &audit(now, TASK_ACTOR, "session.create", id.as_str()),
            )
            .await
        {
            Ok(()) => Ok(fresh),
            // Made meanwhile by another process: joined instead.
            Err(StoreError::RecordExists { .. }) => self
                .change(id.as_str(), TASK_ACTOR, "session.open", &mut join)
                .await
                .map(|(s, _)| s),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn get(&self, id: &str) -> Result<AgentSessionInfo, EngineError> {
        match self.store.load_record(RecordKind::Session, id).await? {
            Some((record, _)) => decode(&record),
            None => Err(not_found(id)),
        }
    }

    /// Sessions, newest task first; `task` and `status` narrow them, `parent`
    /// lists a session's delegated children.
    pub async fn list(
        &self,
        task: Option<&TaskId>,
        status: Option<SessionStatus>,
        parent: Option<&str>,
        limit: Option<usize>,
        cursor: Option<String>,
    ) -> Result<SessionPage, EngineError> {
        let page = self
            .store
            .list_records(&RecordFilter {
                task_id: task.map(ToString::to_string),
                status: status.map(|s| s.as_str().to_owned()),
                contract_id: parent.map(str::to_owned),
                limit,
                cursor,
                ..RecordFilter::new(RecordKind::Session)
            })
            .await?;
        Ok(SessionPage {
            items: page.items.iter().map(decode).collect::<Result<_, _>>()?,
            next_cursor: page.next_cursor,
        })
    }

    /// Every session of `task`.
    pub async fn of_task(&self, task: &TaskId) -> Result<Vec<AgentSessionInfo>, EngineError> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.list(Some(task), None, None, Some(500), cursor).await?;
            out.extend(page.items);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// Reads, changes and writes back a session, again if someone wrote in
    /// between; the change may decline (`None`), and then nothing is written.
    pub async fn change<T>(
        &self,
        id: &str,
        by: &str,
        action: &str,
        mut change: impl FnMut(&mut AgentSessionInfo) -> Result<Option<T>, EngineError>,
    ) -> Result<(AgentSessionInfo, Option<T>), EngineError> {
        let mut last = 0;
        for _ in 0..UPDATE_TRIES {
            let Some((record, version)) = self.store.load_record(RecordKind::Session, id).await?
            else {
                return Err(not_found(id));
            };
            let mut session = decode(&record)?;
            let Some(out) = change(&mut session)? else {
                return Ok((session, None));
            };
            session.updated_at = self.clock.now();
            last = version;
            let record = record_of(&session)?;
            let audit = audit(session.updated_at, by, action, id);
            match self.store.update_record(&record, version, &audit).await {
                Ok(()) => {
                    self.audited.notify_waiters();
                    return Ok((session, Some(out)));
                }
                Err(StoreError::RecordMoved { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::RecordMoved {
            kind: RecordKind::Session,
            id: id.to_owned(),
            expected: last,
        }
        .into())
    }

    /// The journal the built-in runtime keeps the session's conversation in.
    pub fn journal(&self, session: &AgentSessionInfo) -> crate::journal::Journal {
        crate::journal::Journal::new(
            Arc::clone(&self.store),
            &session.task_id,
            &journal_name(session),
        )
    }

    /// Records what a step's turns left: the runtime that served them, the
    /// runtime's own session id, how many there were.
    pub async fn took_turns(
        &self,
        id: &str,
        runtime: &str,
        native_session_id: Option<String>,
        turns: u64,
    ) -> Result<AgentSessionInfo, EngineError> {
        let runtime = runtime.to_owned();
        self.change(id, TASK_ACTOR, "session.turn", |s| {
            s.runtime = Some(runtime.clone());
            if native_session_id.is_some() {
                s.native_session_id.clone_from(&native_session_id);
            }
            s.turns += turns;
            Ok(Some(()))
        })
        .await
        .map(|(s, _)| s)
    }

    /// A delegated child's answer, kept so that a resumed parent takes it
    /// instead of running the delegation again; the child ends.
    pub async fn answered(&self, id: &str, answer: &str) -> Result<(), EngineError> {
        self.change(id, TASK_ACTOR, "session.answer", |s| {
            if let Some(d) = &mut s.delegation {
                d.answer = Some(answer.to_owned());
            }
            s.status = SessionStatus::Ended;
            Ok(Some(()))
        })
        .await
        .map(|_| ())
    }

    /// Refuses a change by anyone but the session's owner: a delegated child
    /// belongs to the task of the session that delegated it, and is changed
    /// through that session only.
    fn owner_only(session: &AgentSessionInfo, what: &str) -> Result<(), EngineError> {
        match &session.delegation {
            Some(d) => Err(EngineError::SessionRefused(format!(
                "session {} cannot be {what}: owned by session {} of task {} (it was delegated by step `{}`); change the parent session instead",
                session.id, d.parent, session.task_id, d.step_id
            ))),
            None => Ok(()),
        }
    }

    /// A session to compact by hand, its journal (loaded, so appends go after
    /// it) and the journal's entries: refused for a delegated child (its
    /// parent's task owns it) and while its task runs.
    pub async fn to_compact(
        &self,
        id: &str,
    ) -> Result<
        (
            AgentSessionInfo,
            crate::journal::Journal,
            Vec<serde_json::Value>,
        ),
        EngineError,
    > {
        let session = self.get(id).await?;
        Self::owner_only(&session, "compacted")?;
        self.idle(&session, "compacted").await?;
        let journal = self.journal(&session);
        let entries = journal.load().await?;
        Ok((session, journal, entries))
    }

    /// Refuses a change while a live process runs the session's task (one
    /// left in progress by a crash runs nothing).
    async fn idle(&self, session: &AgentSessionInfo, what: &str) -> Result<(), EngineError> {
        let Some(task) = self.store.load_summary(&session.task_id).await? else {
            return Ok(());
        };
        if task.status == TaskStatus::InProgress
            && let Some(runner) = task.runner.as_ref().filter(|r| runner_alive(r))
        {
            return Err(EngineError::SessionRefused(format!(
                "session {} cannot be {what} while its task {} is running (process {} on {}); pause it first (`rein tasks pause {}`) or wait for it",
                session.id, session.task_id, runner.pid, runner.host, session.task_id
            )));
        }
        Ok(())
    }

    /// Pins the session to `runtime` (`rein` or a registered harness), or
    /// unpins it (`None`): the highest-precedence runtime setting of its
    /// later turns.
    pub async fn pin(
        &self,
        id: &str,
        runtime: Option<&str>,
        harnesses: &Harnesses,
        by: &str,
    ) -> Result<AgentSessionInfo, EngineError> {
        let session = self.get(id).await?;
        Self::owner_only(&session, "pinned")?;
        if let Some(r) = runtime
            && r != rein_protocol::BUILTIN_RUNTIME
            && harnesses.registry.get(r).is_none()
        {
            let known: Vec<&str> = std::iter::once(rein_protocol::BUILTIN_RUNTIME)
                .chain(harnesses.registry.harnesses().map(|h| h.harness.id()))
                .collect();
            return Err(EngineError::BadRequest(format!(
                "no runtime `{r}` to pin session {id} to; the runtimes are {} (a plugin's harness needs `--plugin MANIFEST`)",
                known.join(", ")
            )));
        }
        let runtime = runtime.map(str::to_owned);
        self.change(id, by, "session.pin", |s| {
            s.pinned_runtime.clone_from(&runtime);
            Ok(Some(()))
        })
        .await
        .map(|(s, _)| s)
    }

    /// Hands the session to plugin `plugin` to run its later turns, or takes
    /// it back (`None`), as an operator `by` asks (harness-sdk rules 22–23):
    /// refused naming why when its owner's harness does not list the plugin,
    /// the identity `asked` differs from the stored one, or the session is not
    /// locked to its owner's harness. A delegated child is its parent's.
    pub async fn delegate(
        &self,
        id: &str,
        plugin: Option<&str>,
        asked: &crate::harness::delegation::DelegateAsk,
        harnesses: &Harnesses,
        by: &str,
    ) -> Result<AgentSessionInfo, EngineError> {
        let session = self.get(id).await?;
        Self::owner_only(&session, "handed to another plugin")?;
        match plugin {
            Some(p) => {
                self.hand_over(&session, p, asked, &harnesses.registry, by)
                    .await
            }
            None => self
                .change(id, by, "session.take_back", |s| {
                    Ok(s.delegated_execution.take().map(|_| ()))
                })
                .await
                .map(|(s, _)| s),
        }
    }

    /// [`Sessions::delegate`] without the owner check: also how a step's
    /// `delegate` call hands its child to the plugin the step names.
    pub async fn hand_over(
        &self,
        session: &AgentSessionInfo,
        plugin: &str,
        asked: &crate::harness::delegation::DelegateAsk,
        registry: &HarnessRegistry,
        by: &str,
    ) -> Result<AgentSessionInfo, EngineError> {
        // A plugin that is not loaded is the caller's mistake, not a refusal.
        crate::harness::delegation::loaded(registry, plugin).map_err(EngineError::BadRequest)?;
        let (scope, runner) =
            crate::harness::delegation::authorize_session(registry, session, plugin, asked)
                .map_err(|why| {
                    EngineError::SessionRefused(format!(
                        "session {} cannot be handed to plugin `{plugin}`: {why}",
                        session.id
                    ))
                })?;
        let handed = rein_protocol::DelegatedExecution {
            plugin: plugin.to_owned(),
            harness: runner.harness.id().to_owned(),
            owner: scope.owner_plugin_id,
            owner_harness: scope.harness_id,
            by: by.to_owned(),
            at: self.clock.now(),
        };
        self.change(session.id.as_str(), by, "session.delegate", |s| {
            s.delegated_execution = Some(handed.clone());
            Ok(Some(()))
        })
        .await
        .map(|(s, _)| s)
    }

    /// Resets the session: its harness's reset (and its executor's retire)
    /// run; if the harness's required cleanup failed the session stays as it
    /// was and the reset is refused, saying why. Otherwise its conversation
    /// starts over: a generation on, no turns, no native session.
    pub async fn reset(
        &self,
        id: &str,
        harnesses: &Harnesses,
        by: &str,
    ) -> Result<AgentSessionInfo, EngineError> {
        let session = self.get(id).await?;
        Self::owner_only(&session, "reset")?;
        self.idle(&session, "reset").await?;
        let registry = &harnesses.registry;
        let harness = session.runtime.as_deref().and_then(|r| registry.get(r));
        // A plugin's harness resets its own side; without it nothing would.
        if let Some(r) = session.runtime.as_deref()
            && r != rein_protocol::BUILTIN_RUNTIME
            && harness.is_none()
        {
            return Err(EngineError::SessionRefused(format!(
                "session {} was served by harness `{r}`, which is not registered here: name its plugin with --plugin MANIFEST so that its reset runs",
                session.id
            )));
        }
        let executor = session
            .executor
            .clone()
            .filter(|e| e.phase != ExecutorPhase::Retired);
        // The executor is released beside the harness's own cleanup.
        let retire = async {
            if let Some(e) = &executor {
                self.retire(&session, e, registry).await;
            }
        };
        if let Some(registered) = harness {
            let mut native = AgentSession {
                key: session.id.to_string(),
                harness_id: registered.harness.id().to_owned(),
                native_session_id: session.native_session_id.clone(),
                turns: session.turns,
            };
            crate::harness::reset_session(
                &*registered.harness,
                &mut native,
                vec![Box::pin(retire)],
            )
            .await
            .map_err(|e| EngineError::SessionRefused(e.to_string()))?;
        } else {
            retire.await;
        }
        // The built-in runtime's conversation starts over after this mark.
        let journal = self.journal(&session);
        journal.load().await?;
        let by_whom = by.to_owned();
        journal
            .append(&[serde_json::json!({ "reset": { "by": by_whom, "generation": session.generation + 1 } })])
            .await?;
        self.change(id, by, "session.reset", |s| {
            s.generation += 1;
            s.turns = 0;
            s.native_session_id = None;
            if let Some(e) = &mut s.executor {
                e.phase = ExecutorPhase::Retired;
            }
            Ok(Some(()))
        })
        .await
        .map(|(s, _)| s)
    }

    /// Asks the current registry's controller to release an executor; a
    /// failure is logged (the record still says what was not retired).
    async fn retire(
        &self,
        session: &AgentSessionInfo,
        executor: &SessionExecutor,
        registry: &HarnessRegistry,
    ) -> bool {
        let handle = match registry.resolve_executor_controller(&executor.plugin) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "cannot retire the session's executor");
                return false;
            }
        };
        match handle
            .retire(&binding(session, executor), &CancellationToken::new())
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "the session's executor was not retired");
                false
            }
        }
    }

    /// Before a turn on a harness of `plugin`: the plugin's executor
    /// controller, if it has one, with the session's executor ensured in this
    /// registry. An executor recorded under another registry or an earlier
    /// generation (a restart, a reload, a reset) is stale: it is retired first
    /// and a new one ensured. The executor is recorded as `ensuring` before
    /// `ensure` is asked, so a crash in between leaves a trace to retire.
    pub async fn ensure_executor(
        &self,
        id: &str,
        registry: &HarnessRegistry,
        plugin: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<ExecutorHandle>, String> {
        let handle = match registry.resolve_executor_controller(plugin) {
            Ok(h) => h,
            Err(ResolveError::Missing(_)) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let session = self.get(id).await.map_err(|e| e.to_string())?;
        let current = |e: &SessionExecutor| {
            e.registry == registry.instance_for(plugin)
                && e.generation == session.generation
                && e.plugin == plugin
        };
        if let Some(e) = &session.executor {
            if current(e) && e.phase == ExecutorPhase::Ensured {
                return Ok(Some(handle));
            }
            if e.phase != ExecutorPhase::Retired {
                // Stale (from before a restart, a reload or a reset), or an
                // `ensure` that never answered: released before a new one.
                handle
                    .retire(&binding(&session, e), cancel)
                    .await
                    .map_err(|err| {
                        format!(
                            "cannot retire the stale executor {}: {err}",
                            e.environment_id
                        )
                    })?;
                let stale = e.environment_id.clone();
                self.change(id, TASK_ACTOR, "session.executor_retire", |s| {
                    if let Some(x) = &mut s.executor
                        && x.environment_id == stale
                    {
                        x.phase = ExecutorPhase::Retired;
                    }
                    Ok(Some(()))
                })
                .await
                .map_err(|e| e.to_string())?;
            }
        }
        let executor = SessionExecutor {
            plugin: plugin.to_owned(),
            registry: registry.instance_for(plugin),
            generation: session.generation,
            environment_id: format!("{}.{}", session.id, rein_protocol::ids::new_span_id()),
            workspace_directory: handle.workspace_directory().display().to_string(),
            phase: ExecutorPhase::Ensuring,
        };
        let (session, _) = self
            .change(id, TASK_ACTOR, "session.executor_ensure", |s| {
                s.executor = Some(executor.clone());
                Ok(Some(()))
            })
            .await
            .map_err(|e| e.to_string())?;
        handle
            .ensure(&binding(&session, &executor), cancel)
            .await
            .map_err(|e| e.to_string())?;
        self.change(id, TASK_ACTOR, "session.executor_ensured", |s| {
            if let Some(x) = &mut s.executor
                && x.environment_id == executor.environment_id
            {
                x.phase = ExecutorPhase::Ensured;
            }
            Ok(Some(()))
        })
        .await
        .map_err(|e| e.to_string())?;
        Ok(Some(handle))
    }

    /// The task ended: each of its sessions ends, and an executor still
    /// connected for one is retired.
    pub async fn end_task(
        &self,
        task: &TaskId,
        registry: &HarnessRegistry,
    ) -> Result<(), EngineError> {
        for session in self.of_task(task).await? {
            let executor = session
                .executor
                .clone()
                .filter(|e| e.phase != ExecutorPhase::Retired);
            let retired = match &executor {
                Some(e) => self.retire(&session, e, registry).await,
                None => false,
            };
            if session.status == SessionStatus::Ended && !retired {
                continue;
            }
            self.change(session.id.as_str(), TASK_ACTOR, "session.end", |s| {
                s.status = SessionStatus::Ended;
                if retired && let Some(x) = &mut s.executor {
                    x.phase = ExecutorPhase::Retired;
                }
                Ok(Some(()))
            })
            .await?;
        }
        Ok(())
    }
}
