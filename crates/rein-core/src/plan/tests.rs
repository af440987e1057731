use super::*;

fn parse(text: &str) -> Result<PlanSpec, String> {
    parse_plan(text, Path::new("/plans")).map_err(|(message, _)| message)
}

fn issues(text: &str) -> Vec<PlanIssue> {
    match parse_plan(text, Path::new("/plans")) {
        Err((_, Some(errors))) => errors.0,
        other => panic!("expected validation errors, got {other:?}"),
    }
}

const TWO: &str = r#"
description = "two"
[[steps]]
id = "a"
run = "true"
[[steps]]
id = "b"
run = "true"
depends_on = ["a"]
"#;

#[test]
fn a_valid_plan_parses_with_defaults_and_derived_blocking_steps() {
    let spec = parse(TWO).unwrap();
    let plan = &spec.plan;
    assert_eq!(plan.original_task, "two");
    assert_eq!(plan.steps.len(), 2);
    assert_eq!(plan.steps[0].blocking_steps, vec!["b".to_owned()]);
    assert!(plan.steps[1].blocking_steps.is_empty());
    assert_eq!(plan.steps[0].checkpoint, CheckpointType::TaskExec);
    assert!(!plan.steps[0].idempotent);
    assert_eq!(plan.steps[0].timeout_ms, None);
    assert_eq!(spec.workspace, None);
}

#[test]
fn step_fields_map_onto_the_task_step() {
    let spec = parse(
        r#"
description = "d"
workspace = "proj"
session = "s1"
max_parallel = 2
fail_fast = true
[[steps]]
id = "build"
run = "cargo build"
timeout = "10m"
idempotent = true
env = { RUST_LOG = "info" }
[[steps]]
id = "test"
kind = "gate"
checkpoint = "test_pass"
run = "cargo test"
depends_on = ["build"]
[[steps]]
id = "look"
kind = "review"
run = "true"
depends_on = ["test"]
"#,
    )
    .unwrap();
    assert_eq!(spec.workspace, Some(PathBuf::from("/plans/proj")));
    assert_eq!(spec.session.as_deref(), Some("s1"));
    let p = spec.plan;
    assert_eq!(p.max_parallel, Some(2));
    assert!(p.fail_fast);
    assert_eq!(p.steps[0].timeout_ms, Some(600_000));
    assert!(p.steps[0].idempotent);
    match &p.steps[0].action {
        StepAction::Command { run, env, .. } => {
            assert_eq!(run, "cargo build");
            assert_eq!(env.get("RUST_LOG").map(String::as_str), Some("info"));
        }
        _ => panic!("expected a command"),
    }
    assert_eq!(p.steps[1].checkpoint, CheckpointType::TestPass);
    assert_eq!(p.steps[2].checkpoint, CheckpointType::TaskReview);
}

#[test]
fn a_gate_defaults_to_quality_gate_and_build_pass_is_accepted() {
    let spec = parse(
        "description='d'\n[[steps]]\nid='g'\nkind='gate'\nrun='true'\n[[steps]]\nid='b'\nkind='gate'\ncheckpoint='build_pass'\nrun='true'\n",
    )
    .unwrap();
    assert_eq!(spec.plan.steps[0].checkpoint, CheckpointType::QualityGate);
    assert_eq!(spec.plan.steps[1].checkpoint, CheckpointType::BuildPass);
}

#[test]
fn a_cycle_is_rejected_naming_its_path() {
    let found = issues(
        r#"
description = "c"
[[steps]]
id = "a"
run = "true"
depends_on = ["c"]
[[steps]]
id = "b"
run = "true"
depends_on = ["a"]
[[steps]]
id = "c"
run = "true"
depends_on = ["b"]
[[steps]]
id = "free"
run = "true"
"#,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    let PlanIssue::Cycle { path } = &found[0] else {
        panic!("{found:?}")
    };
    assert_eq!(path.first(), path.last());
    assert_eq!(path.len(), 4);
    for id in ["a", "b", "c"] {
        assert!(path.contains(&id.to_owned()));
    }
    assert!(!path.contains(&"free".to_owned()));
    let text = found[0].to_string();
    assert!(text.starts_with("dependency cycle: "), "{text}");
}

#[test]
fn a_step_depending_on_itself_is_a_cycle() {
    let found = issues("description='d'\n[[steps]]\nid='a'\nrun='true'\ndepends_on=['a']\n");
    assert_eq!(
        found,
        vec![PlanIssue::Cycle {
            path: vec!["a".into(), "a".into()]
        }]
    );
}

#[test]
fn every_cycle_is_reported_also_beside_an_unknown_dependency() {
    let found = issues(
        r#"
description = "rings"
[[steps]]
id = "a"
run = "true"
depends_on = ["b", "nope"]
[[steps]]
id = "b"
run = "true"
depends_on = ["a"]
[[steps]]
id = "c"
run = "true"
depends_on = ["d"]
[[steps]]
id = "d"
run = "true"
depends_on = ["c"]
[[steps]]
id = "e"
run = "true"
depends_on = ["e", "a"]
"#,
    );
    let cycles: Vec<&Vec<String>> = found
        .iter()
        .filter_map(|i| match i {
            PlanIssue::Cycle { path } => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(cycles.len(), 3, "{found:?}");
    assert_eq!(cycles[0], &vec!["b", "a", "b"], "in running order");
    assert_eq!(cycles[1], &vec!["d", "c", "d"]);
    assert_eq!(cycles[2], &vec!["e", "e"]);
    assert!(found.contains(&PlanIssue::UnknownDependency {
        step: "a".into(),
        dependency: "nope".into()
    }));
}

#[test]
fn an_empty_description_and_strings_too_long_for_exec_are_refused_at_check_time() {
    let found = issues(
        "description = '  '
[[steps]]
id='a'
run='true'
",
    );
    assert_eq!(found, vec![PlanIssue::EmptyDescription]);
    let long = "x".repeat(MAX_EXEC_STRING + 1);
    let found = issues(&format!(
        "description='d'
[[steps]]
id='a'
run='echo {long}'
[[steps]]
id='b'
run='true'
env = {{ BIG = '{long}' }}
"
    ));
    assert_eq!(found.len(), 2, "{found:?}");
    let text = found[0].to_string();
    assert!(
        text.contains("step `a`: `run` is 131077 bytes") && text.contains("131071"),
        "{text}"
    );
    assert!(found[1].to_string().contains("`env.BIG`"), "{}", found[1]);
    // At the limit it is fine.
    let fits = "x".repeat(MAX_EXEC_STRING - 5);
    assert!(
        parse(&format!(
            "description='d'
[[steps]]
id='a'
run='echo {fits}'
"
        ))
        .is_ok()
    );
}

#[test]
fn an_unknown_dependency_is_rejected_naming_both_steps() {
    let found = issues("description='d'\n[[steps]]\nid='a'\nrun='true'\ndepends_on=['nope']\n");
    assert_eq!(
        found,
        vec![PlanIssue::UnknownDependency {
            step: "a".into(),
            dependency: "nope".into()
        }]
    );
    assert!(found[0].to_string().contains("`a` depends on `nope`"));
}

#[test]
fn a_duplicate_id_is_rejected_naming_it() {
    let found =
        issues("description='d'\n[[steps]]\nid='a'\nrun='true'\n[[steps]]\nid='a'\nrun='false'\n");
    assert_eq!(found, vec![PlanIssue::DuplicateStepId { id: "a".into() }]);
}

#[test]
fn a_dependency_listed_twice_is_rejected() {
    let found = issues(
        "description='d'\n[[steps]]\nid='a'\nrun='true'\n[[steps]]\nid='b'\nrun='true'\ndepends_on=['a','a']\n",
    );
    assert_eq!(
        found,
        vec![PlanIssue::DuplicateDependency {
            step: "b".into(),
            dependency: "a".into()
        }]
    );
}

#[test]
fn every_issue_is_reported_at_once() {
    let found = issues(
        "description='d'\nmax_parallel=0\n[[steps]]\nid=''\nrun='true'\n[[steps]]\nid='bad id!'\nrun='  '\ntimeout='0s'\n",
    );
    assert!(found.contains(&PlanIssue::ZeroParallelism), "{found:?}");
    assert!(
        found.contains(&PlanIssue::EmptyStepId { index: 0 }),
        "{found:?}"
    );
    assert!(
        found.contains(&PlanIssue::BadStepId {
            id: "bad id!".into()
        }),
        "{found:?}"
    );
    assert!(
        found.contains(&PlanIssue::EmptyCommand {
            step: "bad id!".into()
        }),
        "{found:?}"
    );
    assert!(
        found.contains(&PlanIssue::ZeroTimeout {
            step: "bad id!".into()
        }),
        "{found:?}"
    );
}

#[test]
fn a_plan_without_steps_is_rejected() {
    assert_eq!(issues("description='d'\n"), vec![PlanIssue::NoSteps]);
}

#[test]
fn unknown_fields_are_rejected_naming_them() {
    let top = parse("description='d'\ncolour='red'\n[[steps]]\nid='a'\nrun='true'\n").unwrap_err();
    assert!(top.contains("the plan: unknown key `colour`"), "{top}");
    let step = parse("description='d'\n[[steps]]\nid='a'\nrun='true'\nretries=3\n").unwrap_err();
    assert!(
        step.contains("steps[0] (`a`): unknown key `retries`"),
        "{step}"
    );
}

#[test]
fn unknown_kinds_bad_durations_and_misplaced_checkpoints_are_rejected() {
    let kind =
        parse("description='d'\n[[steps]]\nid='a'\nrun='true'\nkind='deploy'\n").unwrap_err();
    assert!(kind.contains("deploy"), "{kind}");
    let timeout =
        parse("description='d'\n[[steps]]\nid='a'\nrun='true'\ntimeout='soon'\n").unwrap_err();
    assert!(
        timeout.contains("step `a`: timeout") && timeout.contains("soon"),
        "{timeout}"
    );
    let cp = parse("description='d'\n[[steps]]\nid='a'\nrun='true'\ncheckpoint='test_pass'\n")
        .unwrap_err();
    assert!(cp.contains("only for steps of kind = \"gate\""), "{cp}");
    let missing = parse("description='d'\n[[steps]]\nid='a'\n").unwrap_err();
    assert!(missing.contains("step `a` needs `run`"), "{missing}");
}

const APPROVE: &str = r#"
description = "ship"
[[steps]]
id = "ship"
kind = "approve"
title = "Publish?"
options = ["publish", "hold"]
recommended = "publish"
timeout = "30m"
default = "skip"
"#;

#[test]
fn an_approve_step_asks_with_its_options_deadline_and_default() {
    let plan = parse(APPROVE).unwrap().plan;
    let step = &plan.steps[0];
    assert_eq!(step.checkpoint, CheckpointType::UserApproval);
    assert_eq!(step.step_type, StepType::Approve);
    assert_eq!(
        step.timeout_ms, None,
        "the timeout is the person's, not a process's"
    );
    let StepAction::Approval {
        title,
        options,
        recommended,
        timeout_ms,
        on_expiry,
        trigger,
        ..
    } = &step.action
    else {
        panic!("expected an approval: {:?}", step.action);
    };
    assert_eq!(title, "Publish?");
    assert_eq!(options, &vec!["publish".to_owned(), "hold".to_owned()]);
    assert_eq!(recommended.as_deref(), Some("publish"));
    assert_eq!(*timeout_ms, Some(30 * 60 * 1000));
    assert_eq!(*on_expiry, Decision::Skip);
    assert_eq!(*trigger, Trigger::MultipleOptions);
    let plain = parse("description='d'\n[[steps]]\nid='ok'\nkind='approve'\ntitle='Go?'\n")
        .unwrap()
        .plan;
    let StepAction::Approval {
        on_expiry, trigger, ..
    } = &plain.steps[0].action
    else {
        panic!()
    };
    assert_eq!(
        (*on_expiry, *trigger),
        (Decision::Deny, Trigger::SignificantChange),
        "deny unless set"
    );
}

#[test]
fn approve_steps_are_checked() {
    let with_run =
        parse("description='d'\n[[steps]]\nid='a'\nkind='approve'\ntitle='t'\nrun='x'\n")
            .unwrap_err();
    assert!(with_run.contains("has no `run`"), "{with_run}");
    let untitled = parse("description='d'\n[[steps]]\nid='a'\nkind='approve'\n").unwrap_err();
    assert!(untitled.contains("needs a `title`"), "{untitled}");
    let misplaced =
        parse("description='d'\n[[steps]]\nid='a'\nrun='x'\noptions=['a']\n").unwrap_err();
    assert!(
        misplaced.contains("`options` is only for steps of kind = \"approve\""),
        "{misplaced}"
    );
    let found = issues(
        "description='d'\n[[steps]]\nid='a'\nkind='approve'\ntitle=' '\noptions=['x','x']\nrecommended='y'\ndefault='delegate'\n",
    );
    assert!(
        found.contains(&PlanIssue::EmptyApprovalTitle { step: "a".into() }),
        "{found:?}"
    );
    assert!(
        found.contains(&PlanIssue::DuplicateOption {
            step: "a".into(),
            option: "x".into()
        }),
        "{found:?}"
    );
    assert!(
        found.contains(&PlanIssue::RecommendedNotAnOption {
            step: "a".into(),
            option: "y".into()
        }),
        "{found:?}"
    );
    assert!(
        found.contains(&PlanIssue::ExpiryCannotDelegate { step: "a".into() }),
        "{found:?}"
    );
    let bad_default =
        parse("description='d'\n[[steps]]\nid='a'\nkind='approve'\ntitle='t'\ndefault='maybe'\n")
            .unwrap_err();
    assert!(bad_default.contains("maybe"), "{bad_default}");
}

#[test]
fn validate_checks_plans_built_in_code_too() {
    let step = |id: &str, deps: &[&str]| TaskStep {
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        ..TaskStep::new(id, StepAction::Noop)
    };
    let plan = TaskDecomposition::new("t", vec![step("x", &["y"]), step("y", &["x"])]);
    let errors = validate(plan).unwrap_err();
    assert!(matches!(errors.0[0], PlanIssue::Cycle { .. }));
    assert!(
        errors
            .to_string()
            .starts_with("invalid plan:\n  - dependency cycle: ")
    );
}

#[test]
fn a_missing_plan_file_names_its_path() {
    let err = load_plan_file(Path::new("/no/such/plan.toml")).unwrap_err();
    assert!(err.to_string().contains("/no/such/plan.toml"), "{err}");
    assert!(matches!(err, PlanFileError::Read { .. }));
}

#[test]
fn recovery_strategies_are_read_at_plan_and_step_level() {
    let plan = parse(
        r#"
description = "d"
[recovery]
transient = { action = "retry", max_retries = 5, retry_delay = "2s", fallback = "skip" }
fatal = "pause"
[[steps]]
id = "a"
run = "true"
recovery = { rate_limit = { action = "wait", retry_delay = "1m" }, fatal = "escalate" }
"#,
    )
    .unwrap()
    .plan;
    let t = plan.recovery[&ErrorType::Transient];
    assert_eq!(
        (t.action, t.max_retries, t.retry_delay_ms, t.fallback),
        (
            RecoveryAction::Retry,
            Some(5),
            Some(2_000),
            Some(RecoveryAction::Skip)
        )
    );
    assert_eq!(
        plan.recovery[&ErrorType::Fatal],
        RecoveryStrategy::action(RecoveryAction::Pause)
    );
    let step = &plan.steps[0].recovery;
    assert_eq!(step[&ErrorType::RateLimit].retry_delay_ms, Some(60_000));
    assert_eq!(step[&ErrorType::Fatal].action, RecoveryAction::Escalate);
}

#[test]
fn bad_recovery_entries_are_named() {
    let unknown_type =
        parse("description='d'\n[recovery]\nflaky='retry'\n[[steps]]\nid='a'\nrun='true'\n")
            .unwrap_err();
    assert!(
        unknown_type.contains("recovery: unknown key `flaky`"),
        "{unknown_type}"
    );
    let unknown_action =
        parse("description='d'\n[recovery]\nfatal='pray'\n[[steps]]\nid='a'\nrun='true'\n")
            .unwrap_err();
    assert!(
        unknown_action.contains("recovery.fatal") && unknown_action.contains("pray"),
        "{unknown_action}"
    );
    let unknown_key = parse(
        "description='d'\n[[steps]]\nid='a'\nrun='true'\nrecovery={transient={action='retry',tries=3}}\n",
    )
    .unwrap_err();
    assert!(
        unknown_key.contains("steps[0] (`a`).recovery.transient: unknown key `tries`"),
        "{unknown_key}"
    );
    let bad_delay = parse(
        "description='d'\n[recovery]\ntransient={action='retry',retry_delay='soonish'}\n[[steps]]\nid='a'\nrun='true'\n",
    )
    .unwrap_err();
    assert!(
        bad_delay.contains("recovery.transient.retry_delay"),
        "{bad_delay}"
    );
    let loop_fallback = parse(
        "description='d'\n[recovery]\ntransient={action='retry',fallback='wait'}\n[[steps]]\nid='a'\nrun='true'\n",
    )
    .unwrap_err();
    assert!(
        loop_fallback.contains("cannot be retry or wait"),
        "{loop_fallback}"
    );
    let wrong_type =
        parse("description='d'\n[recovery]\nfatal=3\n[[steps]]\nid='a'\nrun='true'\n").unwrap_err();
    assert!(wrong_type.contains("expected an action"), "{wrong_type}");
}

#[test]
fn confirm_adds_a_first_approval_every_root_step_waits_for() {
    let plan = parse("description='Ship'\nconfirm=true\n[[steps]]\nid='a'\nrun='true'\n[[steps]]\nid='b'\nrun='true'\ndepends_on=['a']\n")
        .unwrap()
        .plan;
    assert_eq!(plan.steps[0].id, CONFIRM_STEP);
    assert_eq!(plan.steps[0].checkpoint, CheckpointType::UserApproval);
    let StepAction::Approval {
        title, description, ..
    } = &plan.steps[0].action
    else {
        panic!()
    };
    assert_eq!(title, "Start this task? Ship");
    assert!(description.contains("2 steps: a, b"), "{description}");
    assert_eq!(plan.steps[1].depends_on, vec![CONFIRM_STEP.to_owned()]);
    assert_eq!(
        plan.steps[2].depends_on,
        vec!["a".to_owned()],
        "only root steps wait directly"
    );
    let taken =
        parse("description='d'\nconfirm=true\n[[steps]]\nid='confirm'\nrun='true'\n").unwrap_err();
    assert!(taken.contains("reserved"), "{taken}");
}

#[test]
fn an_agent_steps_limits_are_read_and_bad_ones_named() {
    let plan = parse(
        r#"
description = "limits"
[[steps]]
id = "a"
kind = "agent"
prompt = "write it"
tools = ["write_file"]
tool_choice = "write_file"
require_tool_call = true
max_turns = 5
on_token_limit = "continue"
max_tool_answer_bytes = 65536
compact_at_percent = 60
fallback_models = ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"]
budget = { tokens = 10000, cost_usd = 0.5 }
stream = false
"#,
    )
    .unwrap();
    let StepAction::Agent { limits, .. } = &plan.plan.steps[0].action else {
        panic!("not an agent step");
    };
    assert_eq!(
        **limits,
        rein_protocol::AgentLimits {
            tool_choice: Some("write_file".into()),
            require_tool_call: true,
            max_turns: Some(5),
            continue_at_length: true,
            max_tool_answer_bytes: Some(65536),
            compact_at_percent: Some(60),
            fallback_models: vec![
                "openai/gpt-4o-mini".into(),
                "anthropic/claude-haiku-4-5".into()
            ],
            budget: Some(rein_protocol::Budget {
                tokens: Some(10_000),
                cost_usd: Some(0.5),
            }),
            stream: Some(false),
            delegate_to: None,
        }
    );
    let bad = |extra: &str| {
        parse(&format!(
            "description = \"x\"\n[[steps]]\nid = \"a\"\nkind = \"agent\"\nprompt = \"p\"\ntools = [\"read_file\"]\n{extra}\n"
        ))
        .unwrap_err()
    };
    assert!(
        bad("tool_choice = \"write_file\"")
            .contains("neither auto, required, none nor one of the step's tools (read_file)")
    );
    assert!(bad("max_turns = 0").contains("`max_turns` is between 1 and 1000"));
    assert!(bad("on_token_limit = \"shrug\"").contains("write \"fail\" or \"continue\""));
    assert!(bad("max_tool_answer_bytes = 100").contains("between 1024 and 16777216"));
    assert!(bad("compact_at_percent = 99").contains("`compact_at_percent` is between 10 and 95"));
    assert!(bad("compact_at_percent = 300").contains("compact_at_percent"));
    assert!(bad("stream = \"no\"").contains("stream"));
    assert!(
        bad("fallback_models = [\"gpt-4o\"]").contains("not a model named as \"PROVIDER/MODEL\"")
    );
    assert!(bad("fallback_models = [\"a/b\", \"a/b\"]").contains("names `a/b` twice"));
    assert!(
        bad("budget = {}")
            .contains("step `a`: `budget`: a budget gives `tokens`, `cost_usd` or both")
    );
    assert!(bad("budget = { cost_usd = -1.0 }").contains("positive number of US dollars"));
    assert!(bad("budget = { dollars = 1.0 }").contains("dollars"));
    // The plan's own budget, over all its steps.
    let plan = parse(
        "description = \"x\"\nbudget = { tokens = 500 }\n[[steps]]\nid = \"a\"\nrun = \"true\"\n",
    )
    .unwrap();
    assert_eq!(plan.plan.budget.unwrap().tokens, Some(500));
    let err = parse(
        "description = \"x\"\nbudget = { tokens = 0 }\n[[steps]]\nid = \"a\"\nrun = \"true\"\n",
    )
    .unwrap_err();
    assert!(
        err.contains("the plan's `budget`: `tokens` is at least 1"),
        "{err}"
    );
    // Only agent steps take them.
    let err = parse("description = \"x\"\n[[steps]]\nid = \"a\"\nrun = \"true\"\nmax_turns = 3\n")
        .unwrap_err();
    assert!(err.contains("max_turns"), "{err}");
}

const MCP: &str = r#"
description = "mcp"
[mcp_servers.fs]
command = "node"
args = ["server.js", "."]
allow_read = ["node_modules"]
timeout = "5s"
[mcp_servers.remote]
url = "https://mcp.example.org/mcp"
headers = { Authorization = "Bearer x" }
[[steps]]
id = "a"
kind = "agent"
prompt = "look"
mcp = ["fs", "remote", "configured"]
network = true
"#;

#[test]
fn mcp_servers_declared_in_the_plan_travel_with_the_steps_that_name_them() {
    let spec = parse(MCP).unwrap();
    let StepAction::Agent { mcp, network, .. } = &spec.plan.steps[0].action else {
        panic!("{:?}", spec.plan.steps[0].action)
    };
    assert!(*network);
    let names: Vec<&str> = mcp.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["fs", "remote", "configured"]);
    let fs = mcp[0].server.as_ref().unwrap();
    assert_eq!(fs.command.as_deref(), Some("node"));
    assert_eq!(fs.allow_read, ["/plans/node_modules"]);
    assert_eq!(fs.timeout_ms, Some(5000));
    let remote = mcp[1].server.as_ref().unwrap();
    assert_eq!(remote.url.as_deref(), Some("https://mcp.example.org/mcp"));
    // Not in the plan: the configuration of the rein that runs it says.
    assert_eq!(mcp[2].server, None);
}

#[test]
fn bad_mcp_declarations_and_uses_are_refused_naming_them() {
    let step = "[[steps]]\nid = \"a\"\nkind = \"agent\"\nprompt = \"p\"\n";
    for (text, says) in [
        (
            format!(
                "description = \"d\"\n[mcp_servers.x]\ncommand = \"a\"\nurl = \"http://h\"\n{step}"
            ),
            "mcp_servers.x: give `command`",
        ),
        (
            format!("description = \"d\"\n[mcp_servers.x]\nargs = [\"a\"]\n{step}"),
            "mcp_servers.x: needs `command`",
        ),
        (
            format!("description = \"d\"\n[mcp_servers.x]\nurl = \"ftp://h\"\n{step}"),
            "is not an http:// or https:// URL",
        ),
        (
            format!(
                "description = \"d\"\n[mcp_servers.x]\nurl = \"http://h\"\nenv = {{ A = \"b\" }}\n{step}"
            ),
            "`env` goes with `command`",
        ),
        (
            format!("description = \"d\"\n[mcp_servers.a__b]\ncommand = \"a\"\n{step}"),
            "mcp_servers.a__b: a server's name",
        ),
        (
            format!(
                "description = \"d\"\n[mcp_servers.x]\ncommand = \"a\"\ntimeout = \"0s\"\n{step}"
            ),
            "mcp_servers.x.timeout: must be more than zero",
        ),
        (
            format!("description = \"d\"\n{step}mcp = [\"x\", \"x\"]\n"),
            "`mcp` names `x` twice",
        ),
        (
            format!("description = \"d\"\n{step}env = {{ A = \"b\" }}\n"),
            "confine a command step",
        ),
        (
            "description = \"d\"\n[[steps]]\nid = \"a\"\nrun = \"true\"\nmcp = [\"x\"]\n"
                .to_owned(),
            "`mcp` is only for steps of kind = \"agent\"",
        ),
    ] {
        let err = parse(&text).unwrap_err();
        assert!(err.contains(says), "{text}\n=> {err}");
    }
}

#[test]
fn delegate_to_names_a_plugin_and_needs_the_delegate_tool() {
    let plan = |extra: &str| {
        format!(
            "description = \"d\"\n[[steps]]\nid = \"lead\"\nkind = \"agent\"\nprompt = \"go\"\n{extra}"
        )
    };
    let spec = parse(&plan("tools = [\"delegate\"]\ndelegate_to = \"runner\"\n")).unwrap();
    let StepAction::Agent { limits, .. } = &spec.plan.steps[0].action else {
        panic!("not an agent step");
    };
    assert_eq!(limits.delegate_to.as_deref(), Some("runner"));
    let err = parse(&plan("tools = [\"read_file\"]\ndelegate_to = \"runner\"\n")).unwrap_err();
    assert!(err.contains("has no `delegate` tool"), "{err}");
    let err = parse(&plan("tools = [\"delegate\"]\ndelegate_to = \" \"\n")).unwrap_err();
    assert!(err.contains("`delegate_to` names no plugin"), "{err}");
    let err = parse(
        "description = \"d\"\n[[steps]]\nid = \"c\"\nrun = \"true\"\ndelegate_to = \"runner\"\n",
    )
    .unwrap_err();
    assert!(err.contains("delegate_to"), "{err}");
}
