//! The permission rules in the engine: decided again when a step runs, so a
//! task made under looser rules cannot run what the rules now deny or ask about.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::{plan, step};
use rein_core::{CreateTask, Engine, RunOptions};
use rein_protocol::TaskStatus;

fn engine_with(dir: &std::path::Path, rules: &str) -> Arc<Engine> {
    let policy = Arc::new(rein_sandbox::Policy::parse(rules, "rules.toml").unwrap());
    rein_test_support::engine::engine_in(dir)
        .config(move |c| c.policy = policy)
        .build()
        .engine
}

/// Creates a task of `steps` under no rules, then runs it (not waiting for
/// people) under `rules`.
async fn made_loose_run_under(
    dir: &std::path::Path,
    steps: Vec<rein_protocol::TaskStep>,
    rules: &str,
) -> rein_protocol::TaskState {
    let loose = engine_with(dir, "");
    let task = loose.create(CreateTask::of(plan(steps))).await.unwrap();
    drop(loose);
    // A permission error is escalated to a person (spec defaults); not waiting
    // for one, the run pauses.
    let no_wait = RunOptions {
        no_wait: true,
        ..RunOptions::default()
    };
    engine_with(dir, rules)
        .run(task.id(), no_wait)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_tightened_after_creation_stop_the_step_and_say_which_rule() {
    let dir = tempfile::tempdir().unwrap();
    let done = made_loose_run_under(
        dir.path(),
        vec![
            step("first", "touch first", &[]),
            step("ship", "touch shipped", &["first"]),
        ],
        "[[rules]]\nverdict = 'deny'\ncommand = 'touch shipped'\nreason = 'frozen'\n",
    )
    .await;
    assert_eq!(done.status(), TaskStatus::Paused);
    let ship = done
        .checkpoints
        .iter()
        .find(|c| c.step_id.as_deref() == Some("ship"))
        .unwrap();
    let error = ship.error.as_deref().unwrap();
    assert!(
        error.contains("`touch shipped` is denied by rule 1 of rules.toml")
            && error.contains("frozen"),
        "{error}"
    );
    let output = ship.output.as_ref().unwrap();
    assert_eq!(output["permission"]["verdict"], "deny");
    let workspace = dir.path().join("workspaces").join(done.id().as_str());
    assert!(workspace.join("first").exists(), "the allowed step ran");
    assert!(
        !workspace.join("shipped").exists(),
        "the denied one did not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_no_permit_step_refuses_instead_of_running_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let done = made_loose_run_under(
        dir.path(),
        vec![step("push", "touch pushed", &[])],
        "[[rules]]\nverdict = 'ask'\ncommand = 'touch **'\n",
    )
    .await;
    assert_eq!(done.status(), TaskStatus::Paused);
    let errors: Vec<String> = done
        .checkpoints
        .iter()
        .filter_map(|c| c.error.clone())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("needs a person's approval") && e.contains("push.permit")),
        "{errors:?}"
    );
    let workspace = dir.path().join("workspaces").join(done.id().as_str());
    assert!(!workspace.join("pushed").exists());
}

#[test]
fn a_high_risk_step_asks_a_person_unless_the_policy_says_otherwise() {
    use rein_core::permissions::{apply, permit_id};
    use rein_protocol::{RiskLevel, StepAction};
    let mut risky = step("wipe", "true", &[]);
    risky.risk_level = RiskLevel::High;
    risky.risk_description = Some("removes the build".into());
    let plan = || plan(vec![step("a", "true", &[]), risky.clone()]);

    // The default: a permit step the risky one waits for, saying why.
    let asked = apply(plan(), &rein_sandbox::Policy::default()).unwrap();
    let permit = asked.step(&permit_id("wipe")).expect("a permit step");
    let StepAction::Approval { description, .. } = &permit.action else {
        panic!("{permit:?}");
    };
    assert!(description.contains("removes the build"), "{description}");
    assert_eq!(asked.step("wipe").unwrap().depends_on, [permit_id("wipe")]);
    assert!(
        asked.step(&permit_id("a")).is_none(),
        "a low-risk step asks nothing"
    );

    let allowing = rein_sandbox::Policy::parse("high_risk = \"allow\"", "p.toml").unwrap();
    let allowed = apply(plan(), &allowing).unwrap();
    assert!(allowed.step(&permit_id("wipe")).is_none());

    let denying = rein_sandbox::Policy::parse("high_risk = \"deny\"", "p.toml").unwrap();
    let denied = apply(plan(), &denying).unwrap_err().to_string();
    assert!(
        denied.contains("wipe") && denied.contains("high_risk"),
        "{denied}"
    );
}
