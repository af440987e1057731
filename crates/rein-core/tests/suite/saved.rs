//! A task's workspace kept at its step boundaries: as each run takes the
//! task up and as each step that can change files ends, recorded in the
//! log; never at the cost of the step; released with the task.

use rein_test_support::engine::completes;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use rein_core::CreateTask;
use rein_core::saved::WorkspaceHistory;
use rein_protocol::{
    HarnessEvent, SavedWorkspace, SnapshotRules, StepAction, TaskChange, TaskDecomposition,
    TaskStep,
};
use rein_store::SavedWorkspaces;

fn step(id: &str, run: Option<&str>, after: Option<&str>) -> TaskStep {
    let step = match run {
        Some(cmd) => TaskStep::command(id, cmd),
        None => TaskStep::new(id, StepAction::Noop),
    };
    TaskStep {
        depends_on: after.map(|a| vec![a.to_owned()]).unwrap_or_default(),
        ..step
    }
}

/// The kept workspaces of a log: which step's end each follows, and what.
fn saves(
    events: &[HarnessEvent],
    state: &rein_protocol::TaskState,
) -> Vec<(Option<String>, SavedWorkspace, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.change {
            TaskChange::WorkspaceSaved {
                checkpoint_id,
                workspace,
            } => {
                let step = checkpoint_id.as_ref().and_then(|id| {
                    state
                        .checkpoints
                        .iter()
                        .find(|c| &c.id == id)
                        .and_then(|c| c.step_id.clone())
                });
                Some((step, workspace.clone(), e.seq))
            }
            _ => None,
        })
        .collect()
}

/// What a run leaves: its directory (kept while the test holds it), the
/// engine, the keeper and the task's final state.
struct Ran {
    _dir: tempfile::TempDir,
    engine: Arc<rein_core::Engine>,
    keeper: Arc<SavedWorkspaces>,
    done: rein_protocol::TaskState,
    /// Its kept workspaces, as [`saves`] reads them from its log.
    kept: Vec<(Option<String>, SavedWorkspace, u64)>,
}

async fn run(plan: TaskDecomposition) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let keeper = Arc::new(SavedWorkspaces::open(&dir.path().join("saved")).unwrap());
    let held = Arc::clone(&keeper);
    let t = rein_test_support::engine::engine_in(dir.path())
        .config(move |c| c.saved = Some(held))
        .build();
    let created = t.engine.create(CreateTask::of(plan)).await.unwrap();
    let done = completes(&t.engine, created.id()).await;
    let events = t.engine.events(done.id(), 0, usize::MAX).await.unwrap();
    Ran {
        _dir: dir,
        engine: t.engine,
        keeper,
        kept: saves(&events, &done),
        done,
    }
}

#[tokio::test]
async fn each_step_that_can_change_files_keeps_the_workspace_it_left() {
    let plan = TaskDecomposition::new(
        "kept",
        vec![
            step("write", Some("echo one > f.txt"), None),
            step("think", None, Some("write")),
            step(
                "rewrite",
                Some("echo two > f.txt && chmod 755 f.txt && mkdir -p sub && echo x > sub/y"),
                Some("think"),
            ),
        ],
    );
    let Ran {
        engine,
        keeper,
        done,
        kept,
        ..
    } = run(plan).await;
    let steps: Vec<Option<&str>> = kept.iter().map(|(s, _, _)| s.as_deref()).collect();
    // As the run took the task up, then after each command; not after the
    // no-op, which cannot change a file.
    assert_eq!(steps, [None, Some("write"), Some("rewrite")]);
    assert!(
        kept.iter()
            .all(|(_, w, _)| w.unavailable.is_none() && w.root.is_some()),
        "{kept:?}"
    );
    assert_eq!(
        (kept[0].1.files, kept[1].1.files, kept[2].1.files),
        (0, 1, 2)
    );
    // Each point comes back as it was.
    let dir = tempfile::tempdir().unwrap();
    let restored = async |point: usize, name: &str| {
        let into = dir.path().join(name);
        keeper
            .restore(kept[point].1.root.as_deref().unwrap(), &into)
            .await
            .unwrap();
        let text = std::fs::read_to_string(into.join("f.txt")).unwrap();
        (into, text)
    };
    let (after_write, text) = restored(1, "after-write").await;
    assert_eq!(text, "one\n");
    assert!(!after_write.join("sub").exists());
    let (at_end, text) = restored(2, "end").await;
    assert_eq!(text, "two\n");
    let mode = std::fs::metadata(at_end.join("f.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // The keeper finds each point by its position in the log.
    let (seq, root) = keeper.point_at(done.id(), kept[2].2).unwrap().unwrap();
    assert_eq!((seq, Some(root)), (kept[2].2, kept[2].1.root.clone()));
    assert_eq!(
        keeper
            .point_at(done.id(), kept[1].2 - 1)
            .unwrap()
            .unwrap()
            .0,
        kept[0].2
    );

    // Deleting the task releases what only it used.
    engine.delete(done.id()).await.unwrap();
    assert_eq!(keeper.point_at(done.id(), u64::MAX >> 1).unwrap(), None);
    let gone = keeper
        .restore(kept[2].1.root.as_deref().unwrap(), &dir.path().join("gone"))
        .await
        .unwrap_err();
    assert!(gone.contains("missing from the keeper"), "{gone}");
}

#[tokio::test]
async fn a_workspace_that_cannot_be_kept_is_said_and_the_step_goes_on() {
    let mut plan = TaskDecomposition::new(
        "over the cap",
        vec![step("write", Some("echo 0123456789 > big.txt"), None)],
    );
    plan.snapshot = Some(SnapshotRules {
        exclude: vec![],
        max_bytes: Some(4),
    });
    let Ran { kept, .. } = run(plan).await;
    assert_eq!(kept.len(), 2, "{kept:?}");
    let why = kept[1].1.unavailable.clone().unwrap();
    assert!(why.contains("snapshot.max_bytes (4 bytes)"), "{why}");
    assert_eq!(kept[1].1.root, None);
}

#[tokio::test]
async fn a_plan_with_an_exclude_that_is_no_pattern_is_refused() {
    let mut plan = TaskDecomposition::new("bad", vec![step("a", Some("true"), None)]);
    plan.snapshot = Some(SnapshotRules {
        exclude: vec!["src/[".into()],
        max_bytes: None,
    });
    let refused = rein_core::plan::validate(plan).unwrap_err().to_string();
    assert!(refused.contains("snapshot.exclude `src/[`"), "{refused}");
}
