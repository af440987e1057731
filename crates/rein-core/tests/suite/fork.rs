//! Forks: a new task from a point of another's history, with the workspace
//! as rein kept it there; steps that already ran in the source asked about
//! before they run again; a failed task retried.

use rein_test_support::engine::assert_completed;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use rein_core::fork::{Fork, ForkPoint};
use rein_core::{CreateTask, Engine, RunOptions};
use rein_protocol::{
    ApprovalStatus, CheckpointStatus, TaskChange, TaskDecomposition, TaskId, TaskState, TaskStatus,
    TaskStep,
};
use rein_store::SavedWorkspaces;

use crate::common::{choose, no_wait};

fn step(id: &str, run: &str, after: &[&str], idempotent: bool) -> TaskStep {
    TaskStep {
        depends_on: after.iter().map(|s| (*s).to_owned()).collect(),
        idempotent,
        ..TaskStep::command(id, run)
    }
}

/// An engine keeping workspaces, in a directory the test holds.
struct Keeping {
    dir: tempfile::TempDir,
    engine: Arc<Engine>,
}

fn keeping() -> Keeping {
    let dir = tempfile::tempdir().unwrap();
    let keeper = Arc::new(SavedWorkspaces::open(&dir.path().join("saved")).unwrap());
    let t = rein_test_support::engine::engine_in(dir.path())
        .workspaces_here()
        .config(move |c| c.saved = Some(keeper))
        .build();
    Keeping {
        dir,
        engine: t.engine,
    }
}

impl Keeping {
    async fn run(&self, plan: TaskDecomposition) -> TaskState {
        let created = self.engine.create(CreateTask::of(plan)).await.unwrap();
        self.engine
            .run(created.id(), RunOptions::default())
            .await
            .unwrap()
    }

    /// Runs task `id` until it ends or waits.
    async fn go(&self, id: &TaskId) -> TaskState {
        self.engine.run(id, RunOptions::default()).await.unwrap()
    }

    async fn fork(&self, id: &TaskId, point: ForkPoint) -> rein_core::Result<TaskState> {
        self.fork_setting(id, point, BTreeMap::new()).await
    }

    async fn fork_setting(
        &self,
        id: &TaskId,
        point: ForkPoint,
        set: BTreeMap<String, serde_json::Value>,
    ) -> rein_core::Result<TaskState> {
        let fork = Fork {
            point,
            workspace: None,
            set,
            confined_to: None,
        };
        self.engine.fork(id, fork).await
    }

    /// The approval requests raised in task `id`.
    async fn questions(&self, id: &TaskId) -> Vec<rein_protocol::ApprovalRequest> {
        let all = self.engine.approvals(&Default::default()).await.unwrap();
        all.into_iter().filter(|r| &r.task_id == id).collect()
    }
}

fn workspace(state: &TaskState) -> &Path {
    Path::new(state.head.resources.workspace_path.as_deref().unwrap())
}

fn read(state: &TaskState, file: &str) -> Option<String> {
    std::fs::read_to_string(workspace(state).join(file)).ok()
}

fn mode(state: &TaskState, file: &str) -> u32 {
    std::fs::metadata(workspace(state).join(file))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn a_fork_after_a_step_has_the_files_as_they_were_and_asks_before_repeating_an_effect() {
    let k = keeping();
    let source = k
        .run(TaskDecomposition::new(
            "three steps",
            vec![
                step(
                    "write",
                    "echo one > a.txt && chmod 640 a.txt && mkdir -p d && printf x > d/b && chmod 700 d",
                    &[],
                    false,
                ),
                step("append", "echo two >> a.txt && echo c > c.txt", &["write"], false),
                step("count", "wc -l < a.txt > n.txt", &["append"], true),
            ],
        ))
        .await;
    assert_eq!(source.status(), TaskStatus::Completed);
    let source_log = k.engine.events(source.id(), 0, usize::MAX).await.unwrap();

    let fork = k
        .fork(source.id(), ForkPoint::After("write".into()))
        .await
        .unwrap();
    // The state as of `write`'s end, ready to run on; the source as it was.
    assert_eq!(fork.status(), TaskStatus::Pending);
    assert_eq!(fork.head.context.completed_steps, ["write"]);
    let from = fork.head.forked_from.clone().unwrap();
    assert_eq!(&from.task_id, source.id());
    assert_ne!(workspace(&fork), workspace(&source));
    assert_eq!(
        k.engine.events(source.id(), 0, usize::MAX).await.unwrap(),
        source_log,
        "the source's log is not changed"
    );
    // Its files and modes as `write` left them, the source's as they are.
    assert_eq!(read(&fork, "a.txt").as_deref(), Some("one\n"));
    assert_eq!(mode(&fork, "a.txt"), 0o640);
    assert_eq!(mode(&fork, "d"), 0o700);
    assert_eq!(read(&fork, "d/b").as_deref(), Some("x"));
    assert_eq!(read(&fork, "c.txt"), None);
    assert_eq!(read(&source, "a.txt").as_deref(), Some("one\ntwo\n"));
    // `append` changed files in the source after the point: it is asked
    // about; `count` is idempotent and is not.
    let asked: Vec<&str> = from
        .ran_in_source
        .iter()
        .map(|r| r.step_id.as_str())
        .collect();
    assert_eq!(asked, ["append"]);
    // The source lists it as its fork.
    let forks = k
        .engine
        .list(&rein_core::store::TaskFilter {
            forked_from: Some(source.id().clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(forks.items.len(), 1);
    assert_eq!(forks.items[0].forked_from.as_ref().unwrap().seq, from.seq);

    let paused = k.engine.run(fork.id(), no_wait()).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    let request = k.questions(fork.id()).await.remove(0);
    assert_eq!(request.step_id.as_deref(), Some("append"));
    assert_eq!(request.options, ["rerun", "skip", "abort"]);
    assert!(
        request.description.contains(source.id().as_str())
            && request.description.contains("echo two >> a.txt"),
        "it says where and what it ran: {}",
        request.description
    );
    // Nothing ran while it waited.
    assert_eq!(read(&paused, "a.txt").as_deref(), Some("one\n"));
    k.engine
        .decide(choose(&request, "rerun", "ana"))
        .await
        .unwrap();
    let done = k.go(fork.id()).await;
    assert_completed(&done);
    assert_eq!(read(&done, "a.txt").as_deref(), Some("one\ntwo\n"));
    assert_eq!(read(&done, "n.txt").as_deref(), Some("2\n"));
    // Asked once: the rerun ran without a second question.
    assert_eq!(k.questions(fork.id()).await.len(), 1);
    assert_eq!(read(&source, "a.txt").as_deref(), Some("one\ntwo\n"));
}

#[tokio::test]
async fn a_step_skipped_at_the_question_does_not_run_in_the_fork() {
    let k = keeping();
    let source = k
        .run(TaskDecomposition::new(
            "two steps",
            vec![
                step("first", "echo 1 > f", &[], false),
                step("send", "echo sent >> outbox", &["first"], false),
            ],
        ))
        .await;
    let fork = k
        .fork(source.id(), ForkPoint::After("first".into()))
        .await
        .unwrap();
    k.engine.run(fork.id(), no_wait()).await.unwrap();
    let request = k.questions(fork.id()).await.remove(0);
    k.engine
        .decide(choose(&request, "skip", "ana"))
        .await
        .unwrap();
    let done = k.go(fork.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(read(&done, "outbox"), None, "the skipped step did not run");
    let send = done
        .checkpoints
        .iter()
        .rev()
        .find(|c| c.step_id.as_deref() == Some("send"))
        .unwrap();
    assert_eq!(send.status, CheckpointStatus::Skipped);
    let why = send.metadata["skipped_reason"].as_str().unwrap();
    assert!(
        why.contains("skipped by ana: it had already run in the task this one was forked from"),
        "{why}"
    );
    let decided = k.engine.approval(&request.id).await.unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
}

#[tokio::test]
async fn a_failed_task_retried_after_its_cause_is_fixed_completes() {
    let k = keeping();
    let outside = tempfile::tempdir().unwrap();
    let flag = outside.path().join("flag");
    let mut check = step(
        "check",
        &format!("test -f {} && echo ok > checked", flag.display()),
        &["prepare"],
        false,
    );
    if let rein_protocol::StepAction::Command { allow_read, .. } = &mut check.action {
        allow_read.push(outside.path().display().to_string());
    }
    let source = k
        .run(TaskDecomposition::new(
            "needs a flag",
            vec![step("prepare", "echo p > p", &[], false), check],
        ))
        .await;
    assert_eq!(source.status(), TaskStatus::Failed);
    // A task that did not fail is not retried.
    let prepared = k.engine.retry_point(source.id()).await.unwrap();
    assert_eq!(prepared, ForkPoint::Before("check".into()));

    std::fs::write(&flag, "").unwrap();
    let fork = k.fork(source.id(), prepared).await.unwrap();
    // The step forked before is the one asked for: it runs without a question.
    assert!(
        fork.head
            .forked_from
            .as_ref()
            .unwrap()
            .ran_in_source
            .is_empty()
    );
    let done = k.go(fork.id()).await;
    assert_completed(&done);
    assert_eq!(read(&done, "checked").as_deref(), Some("ok\n"));
    assert_eq!(read(&done, "p").as_deref(), Some("p\n"));
    // `prepare` ran once, in the source.
    let prepares = done
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some("prepare"))
        .count();
    assert_eq!(prepares, 1);
    assert_eq!(
        k.engine.get(source.id()).await.unwrap().status(),
        TaskStatus::Failed
    );
    let again = k.engine.retry_point(done.id()).await.unwrap_err();
    assert!(
        again.to_string().contains("only a failed task is retried"),
        "{again}"
    );
}

#[tokio::test]
async fn a_fork_with_a_step_changed_runs_the_change() {
    let k = keeping();
    let source = k
        .run(TaskDecomposition::new(
            "a wrong command",
            vec![
                step("make", "echo made > m", &[], true),
                step("build", "exit 3", &["make"], false),
            ],
        ))
        .await;
    assert_eq!(source.status(), TaskStatus::Failed);
    let mut set = BTreeMap::new();
    set.insert("build.run".to_owned(), "cat m > built".into());
    set.insert("build.timeout_ms".to_owned(), 60_000.into());
    let fork = k
        .fork_setting(source.id(), ForkPoint::Before("build".into()), set)
        .await
        .unwrap();
    let plan = k.engine.plan(fork.id()).await.unwrap();
    assert_eq!(plan.steps[1].timeout_ms, Some(60_000));
    let done = k.go(fork.id()).await;
    assert_completed(&done);
    assert_eq!(read(&done, "built").as_deref(), Some("made\n"));
    // The source's plan is its own.
    let theirs = k.engine.plan(source.id()).await.unwrap();
    assert!(matches!(&theirs.steps[1].action,
        rein_protocol::StepAction::Command { run, .. } if run == "exit 3"));

    // What cannot be set is refused, naming it.
    for (key, value, says) in [
        (
            "build.modle",
            serde_json::json!("x"),
            "has no field `modle`",
        ),
        (
            "nope.run",
            serde_json::json!("x"),
            "STEP one of the plan's steps (make, build)",
        ),
        (
            "make.run",
            serde_json::json!("x"),
            "step `make` had completed at the fork point",
        ),
        (
            "build.timeout_ms",
            serde_json::json!("soon"),
            "--set build.timeout_ms",
        ),
    ] {
        let mut set = BTreeMap::new();
        set.insert(key.to_owned(), value);
        let refused = k
            .fork_setting(source.id(), ForkPoint::Before("build".into()), set)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains(says), "{key}: {refused}");
    }
}

#[tokio::test]
async fn points_a_fork_cannot_start_from_are_refused_saying_why() {
    let k = keeping();
    let source = k
        .run(TaskDecomposition::new(
            "fails",
            vec![
                step("ok", "true", &[], true),
                step("bad", "exit 1", &["ok"], false),
                step("never", "true", &["bad"], false),
            ],
        ))
        .await;
    assert_eq!(source.status(), TaskStatus::Failed);
    let last = source.head.last_seq;
    for (point, says) in [
        (ForkPoint::After("bad".into()), "step `bad` never completed"),
        (
            ForkPoint::Before("never".into()),
            "step `never` never started",
        ),
        (ForkPoint::Before("ghost".into()), "has no step `ghost`"),
        (
            ForkPoint::At {
                seq: last,
                turn: None,
            },
            "had ended (failed)",
        ),
        (
            ForkPoint::At {
                seq: last + 1,
                turn: None,
            },
            "has no event",
        ),
        (
            ForkPoint::At {
                seq: 2,
                turn: Some(1),
            },
            "is not the start of an agent step",
        ),
    ] {
        let refused = k.fork(source.id(), point.clone()).await.unwrap_err();
        assert!(refused.to_string().contains(says), "{point:?}: {refused}");
    }
    // Nothing was made by the refusals.
    let all = k.engine.list(&Default::default()).await.unwrap();
    assert_eq!(all.items.len(), 1);
    let left: Vec<_> = std::fs::read_dir(k.dir.path().join("workspaces"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[tokio::test]
async fn a_fork_into_a_named_directory_needs_it_empty() {
    let k = keeping();
    let source = k
        .run(TaskDecomposition::new(
            "one",
            vec![step("write", "echo w > w", &[], true)],
        ))
        .await;
    let into = tempfile::tempdir_in(k.dir.path()).unwrap();
    std::fs::write(into.path().join("mine"), "keep me").unwrap();
    let fork = |dir: &Path| Fork {
        point: ForkPoint::After("write".into()),
        workspace: Some(dir.to_owned()),
        set: BTreeMap::new(),
        confined_to: None,
    };
    let refused = k
        .engine
        .fork(source.id(), fork(into.path()))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("is not empty"), "{refused}");
    assert_eq!(
        std::fs::read_to_string(into.path().join("mine")).unwrap(),
        "keep me"
    );
    let empty = into.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let made = k.engine.fork(source.id(), fork(&empty)).await.unwrap();
    assert_eq!(std::fs::read_to_string(empty.join("w")).unwrap(), "w\n");
    let first = k.engine.events(made.id(), 0, 1).await.unwrap();
    assert!(matches!(&first[0].change,
        TaskChange::TaskForked { workspace, .. } if workspace.files == 1));
}

#[tokio::test]
async fn a_point_whose_workspace_could_not_be_kept_is_refused_saying_why() {
    let k = keeping();
    let mut plan = TaskDecomposition::new(
        "over the cap",
        vec![
            step("big", "echo 0123456789 > big.txt", &[], true),
            step("next", "true", &["big"], true),
        ],
    );
    plan.snapshot = Some(rein_protocol::SnapshotRules {
        exclude: vec![],
        max_bytes: Some(4),
    });
    let source = k.run(plan).await;
    assert_eq!(source.status(), TaskStatus::Completed);
    let refused = k
        .fork(source.id(), ForkPoint::After("big".into()))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), rein_core::ErrorKind::Conflict);
    assert!(
        refused.to_string().contains("could not keep the workspace")
            && refused.to_string().contains("snapshot.max_bytes"),
        "{refused}"
    );
    // Before it, the workspace (empty) was kept: a fork starts there.
    let fork = k
        .fork(source.id(), ForkPoint::Before("big".into()))
        .await
        .unwrap();
    assert_eq!(fork.head.context.completed_steps, Vec::<String>::new());
}

#[tokio::test]
async fn an_idempotent_step_is_asked_about_when_it_had_the_network() {
    let k = keeping();
    let mut online = step("fetch", "true", &["first"], true);
    if let rein_protocol::StepAction::Command { network, .. } = &mut online.action {
        *network = true;
    }
    let source = k
        .run(TaskDecomposition::new(
            "online",
            vec![
                step("first", "true", &[], true),
                online,
                step("local", "true", &["fetch"], true),
            ],
        ))
        .await;
    assert_eq!(source.status(), TaskStatus::Completed);
    let fork = k
        .fork(source.id(), ForkPoint::After("first".into()))
        .await
        .unwrap();
    let asked: Vec<&str> = fork
        .head
        .forked_from
        .as_ref()
        .unwrap()
        .ran_in_source
        .iter()
        .map(|r| r.step_id.as_str())
        .collect();
    assert_eq!(asked, ["fetch"], "the network step, not the local one");
    assert!(
        fork.head.forked_from.as_ref().unwrap().ran_in_source[0]
            .did
            .contains("with the network")
    );
}

#[tokio::test]
async fn a_fork_of_a_fork_says_where_a_step_before_it_ran() {
    let k = keeping();
    let source = k
        .run(TaskDecomposition::new(
            "two",
            vec![
                step("a", "echo a > a", &[], true),
                step("b", "echo b > b", &["a"], true),
            ],
        ))
        .await;
    let fork = k
        .fork(source.id(), ForkPoint::After("a".into()))
        .await
        .unwrap();
    let done = k.go(fork.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    // `b` ran in the fork: a fork of the fork goes back before it.
    let again = k
        .fork(fork.id(), ForkPoint::Before("b".into()))
        .await
        .unwrap();
    assert_eq!(again.head.context.completed_steps, ["a"]);
    assert_eq!(read(&again, "a").as_deref(), Some("a\n"));
    assert_eq!(read(&again, "b"), None);
    // `a` ran before the fork was made: said so.
    let refused = k
        .fork(fork.id(), ForkPoint::Before("a".into()))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("ran before task"), "{refused}");
}
