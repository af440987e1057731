//! Budgets: an agent step stops before a model turn that would pass its
//! step's, its task's or the day's budget, and asks a person, whose grant
//! lets it go on (journaled, and in the ledger as the approval's answer) and
//! whose refusal fails the step naming the budget. Through the engine, over
//! a real SQLite store, against the local fake chat-completions server that
//! reports usage as OpenAI does (the hosted API cannot be reached here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_test_support::engine::assert_completed;
use rein_test_support::model as common;

use std::sync::Arc;
use std::time::Duration;

use rein_core::JournalStore;
use rein_core::{ApprovalStore, CreateTask, Engine, RunOptions};
use rein_protocol::{
    Budget, ModelInfo, Models, StepAction, TaskDecomposition, TaskStatus, TaskStep,
};

type Running = tokio::task::JoinHandle<Result<rein_protocol::TaskState, rein_core::EngineError>>;

struct Setup {
    _dir: tempfile::TempDir,
    engine: Arc<Engine>,
    store: Arc<rein_store::SqliteStore>,
    seen: common::Seen,
    base: String,
}

async fn setup(daily: Option<Budget>) -> Setup {
    let (base, seen) = common::fake_model().await;
    let agent = rein_test_support::engine::agent(&base, "gpt-test")
        .with_models(Models::from([(
            "openai/gpt-test".to_owned(),
            ModelInfo {
                input_usd_per_mtok: Some(2.0),
                output_usd_per_mtok: Some(8.0),
                ..ModelInfo::default()
            },
        )]))
        .with_daily_budget(daily);
    let t = rein_test_support::engine::engine()
        .executor(Arc::new(agent))
        .workspaces_here()
        .build();
    Setup {
        _dir: t.dir.unwrap(),
        engine: t.engine,
        store: t.store,
        seen,
        base,
    }
}

/// A step that lists the workspace three times (three tool calls, four
/// model turns), with `budget`.
fn step(budget: Option<Budget>) -> TaskStep {
    let limits = rein_protocol::AgentLimits {
        budget,
        ..Default::default()
    };
    TaskStep::new(
        "draft",
        StepAction::agent("list three times", &["list_dir"]).with_limits(limits),
    )
}

async fn start(s: &Setup, plan: TaskDecomposition) -> (rein_protocol::TaskState, Running) {
    let state = s.engine.create(CreateTask::of(plan)).await.unwrap();
    let run = tokio::spawn({
        let (engine, id) = (Arc::clone(&s.engine), state.id().clone());
        async move { engine.run(&id, RunOptions::default()).await }
    });
    (state, run)
}

/// The task's next pending question, waited for.
async fn question(s: &Setup, task: &rein_protocol::TaskState) -> rein_protocol::ApprovalRequest {
    for _ in 0..1000 {
        let pending = s
            .engine
            .approvals(&rein_core::store::ApprovalFilter {
                status: Some(rein_protocol::ApprovalStatus::Pending),
                task_id: Some(task.id().clone()),
                limit: None,
            })
            .await
            .unwrap();
        if let Some(p) = pending.into_iter().next() {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now = s.engine.get(task.id()).await.unwrap();
    panic!("no question came: {:?} {:?}", now.status(), now.head.error);
}

async fn answer(
    s: &Setup,
    request: &rein_protocol::ApprovalRequest,
    option: &str,
    reason: Option<&str>,
) {
    s.engine
        .decide(rein_protocol::ApprovalResponse {
            request_id: request.id.clone(),
            decision: rein_protocol::Decision::Approve,
            selected_option: Some(option.into()),
            reason: reason.map(str::to_owned),
            decided_by: "ana".into(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
}

fn tokens(n: u64) -> Option<Budget> {
    Some(Budget {
        tokens: Some(n),
        cost_usd: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_budget_stops_the_step_for_a_person_whose_grants_let_it_finish() {
    let s = setup(None).await;
    let (state, run) = start(
        &s,
        TaskDecomposition::new("budget", vec![step(tokens(300))]),
    )
    .await;
    // The first turns fit; one would pass 300 tokens: the step asks before it.
    let first = question(&s, &state).await;
    let asked = s.seen.0.lock().unwrap().len();
    assert!(asked >= 1, "at least a turn fit in the budget");
    assert!(
        first.title.starts_with("step `draft` has used ")
            && first.title.contains(" of 300 tokens ($"),
        "{}",
        first.title
    );
    assert_eq!(
        first.options,
        [
            "allow ×2",
            "allow ×4",
            "allow the amount given as the reason",
            "stop"
        ]
    );
    // No request was made while it waited.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.seen.0.lock().unwrap().len(), asked);
    answer(&s, &first, "allow ×2", None).await;
    // Doubled to 600; the step asks again when that would pass, and is given
    // an amount, which lets it finish.
    let second = question(&s, &state).await;
    assert_ne!(second.id, first.id);
    assert!(second.title.contains(" of 600 tokens"), "{}", second.title);
    answer(
        &s,
        &second,
        "allow the amount given as the reason",
        Some("100,000 tokens"),
    )
    .await;
    let done = run.await.unwrap().unwrap();
    assert_completed(&done);

    // The grants are journaled, each with who gave it and the approval.
    let journal = s.store.load_journal(done.id(), "draft").await.unwrap();
    let grants: Vec<&serde_json::Value> = journal
        .iter()
        .filter_map(|e| e.get("budget_grant"))
        .collect();
    assert_eq!(grants.len(), 2);
    assert_eq!(grants[0]["budget"]["tokens"], 600);
    assert_eq!(grants[1]["budget"]["tokens"], 100_000);
    assert_eq!(grants[1]["by"], "ana");
    // And the answers are sealed in the ledger.
    let ledger = s.store.ledger(0, 1000).await.unwrap();
    for q in [&first, &second] {
        assert!(
            ledger
                .iter()
                .any(|e| serde_json::to_string(e).unwrap().contains(q.id.as_str())),
            "{} is not in the ledger",
            q.id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_stops_at_the_budget_fails_the_step_naming_it() {
    let s = setup(None).await;
    let (state, run) = start(&s, TaskDecomposition::new("budget", vec![step(tokens(1))])).await;
    let q = question(&s, &state).await;
    // Not a single turn fits in one token: nothing was asked of the model.
    assert_eq!(s.seen.0.lock().unwrap().len(), 0);
    answer(&s, &q, "stop", None).await;
    let done = run.await.unwrap().unwrap();
    assert_ne!(done.status(), TaskStatus::Completed);
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert!(
        error.starts_with("stopped at the step budget: step `draft` has used 0 of 1 tokens")
            && error.ends_with("ana chose to stop it"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_dollars_and_the_days_tokens_count_every_step_and_every_task() {
    // The plan's budget in dollars, at the configured prices: two steps
    // share it.
    let s = setup(None).await;
    let mut second = step(None);
    second.id = "again".into();
    second.depends_on = vec!["draft".into()];
    let mut plan = TaskDecomposition::new("budget", vec![step(None), second]);
    plan.budget = Some(Budget {
        tokens: None,
        cost_usd: Some(0.002),
    });
    let (state, run) = start(&s, plan).await;
    let q = question(&s, &state).await;
    assert!(
        q.title.starts_with("the task has used $0.00"),
        "{}",
        q.title
    );
    assert!(q.title.contains("of $0.002"), "{}", q.title);
    assert_eq!(q.step_id.as_deref(), Some("draft"));
    answer(&s, &q, "allow the amount given as the reason", Some("$5")).await;
    // The other step meets the same budget, spent by the first, and asks
    // for itself before its first turn.
    let q = question(&s, &state).await;
    assert_eq!(q.step_id.as_deref(), Some("again"), "{}", q.title);
    let asked = s.seen.0.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        s.seen.0.lock().unwrap().len(),
        asked,
        "no turn while it waits"
    );
    answer(&s, &q, "allow the amount given as the reason", Some("$5")).await;
    let done = run.await.unwrap().unwrap();
    assert_completed(&done);

    // The day's budget counts what another task spent today: a second
    // rein on the same store, with a daily budget one token past it.
    let s = setup(None).await;
    let (_, run) = start(&s, TaskDecomposition::new("first", vec![step(None)])).await;
    let first = run.await.unwrap().unwrap();
    assert_eq!(first.status(), TaskStatus::Completed);
    let spent: u64 = s
        .store
        .usage(&rein_core::store::UsageFilter::default())
        .await
        .unwrap()
        .iter()
        .map(|r| r.usage.total())
        .sum();
    assert!(spent > 0);
    let other = Setup {
        engine: engine_on(&s, tokens(spent + 1)),
        store: s.store.clone(),
        seen: s.seen.clone(),
        base: s.base.clone(),
        _dir: tempfile::tempdir().unwrap(),
    };
    let asked = s.seen.0.lock().unwrap().len();
    let (state, run) = start(&other, TaskDecomposition::new("second", vec![step(None)])).await;
    let q = question(&other, &state).await;
    assert!(
        q.title.starts_with(&format!(
            "all tasks today have used {} of {} tokens",
            rein_runtimes::budget::thousands(spent),
            rein_runtimes::budget::thousands(spent + 1)
        )),
        "{}",
        q.title
    );
    assert_eq!(s.seen.0.lock().unwrap().len(), asked);
    answer(&other, &q, "stop", None).await;
    let stopped = run.await.unwrap().unwrap();
    let error = rein_test_support::engine::step_error(&stopped, "draft");
    assert!(
        error.starts_with("stopped at the daily budget: "),
        "{error}"
    );
}

/// Another engine on `s`'s store and model server, with a daily budget.
fn engine_on(s: &Setup, daily: Option<Budget>) -> Arc<Engine> {
    let agent = rein_test_support::engine::agent(&s.base, "gpt-test").with_daily_budget(daily);
    rein_test_support::engine::engine_in(s._dir.path())
        .store(Arc::clone(&s.store))
        .executor(Arc::new(agent))
        .workspaces_here()
        .build()
        .engine
}
