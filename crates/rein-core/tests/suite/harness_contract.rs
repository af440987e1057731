//! The rest of the harness contract (spec harness-sdk §3–§5), rule by rule:
//! executor controllers and their handles, session reset, isolated completion,
//! delegated execution.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::plugin;
use async_trait::async_trait;
use rein_core::harness::delegation::{
    DelegatedRun, DelegationError, SessionChange, StoredSession, authorize_delegated_run,
    authorize_session_change,
};
use rein_core::harness::executor::{
    ExecutorBinding, ExecutorContext, ExecutorController, ExecutorError, ResolveError,
};
use rein_core::harness::isolated::{
    AuthProfile, CompletionAuth, CompletionError, CompletionOutput, CompletionOwner,
    CompletionRuntime, ContentPart, IsolatedParams, IsolatedRequest, OutputTextPolicy,
    run_isolated, validate,
};
use rein_core::harness::{
    AgentHarness, AgentSession, HarnessRegistry, RegistrationError, ResetError, reset_session,
};
use rein_protocol::{Support, SupportContext};
use tokio_util::sync::CancellationToken;

// ---- §3 executor controllers ------------------------------------------------

#[derive(Default)]
struct Controller {
    dir: PathBuf,
    ensured: Mutex<Vec<ExecutorBinding>>,
    /// Wait for cancellation inside `ensure`, and say it came.
    wait_for_cancel: bool,
    saw_cancel: AtomicUsize,
    kept: Mutex<Option<ExecutorContext>>,
}

impl Controller {
    fn at(dir: &str) -> Controller {
        Controller {
            dir: PathBuf::from(dir),
            ..Controller::default()
        }
    }
}

#[async_trait]
impl ExecutorController for Controller {
    fn workspace_directory(&self) -> &std::path::Path {
        &self.dir
    }
    async fn ensure(
        &self,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError> {
        ctx.assert_current()?;
        *self.kept.lock().unwrap() = Some(ctx.clone());
        if self.wait_for_cancel {
            ctx.cancel.cancelled().await;
            self.saw_cancel.fetch_add(1, Ordering::SeqCst);
        }
        let mut ensured = self.ensured.lock().unwrap();
        // Exactly that environment, once.
        if !ensured.contains(binding) {
            ensured.push(binding.clone());
        }
        Ok(())
    }
    async fn retire(
        &self,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError> {
        ctx.assert_current()?;
        self.ensured.lock().unwrap().retain(|b| b != binding);
        Ok(())
    }
}

fn binding(env: &str) -> ExecutorBinding {
    ExecutorBinding {
        session_key: "agent:main".into(),
        agent_id: "main".into(),
        native_session_id: Some("native-1".into()),
        environment_id: env.into(),
        remote_url: None,
        workspace_directory: PathBuf::from("/srv/work"),
    }
}

fn with_controller(c: Arc<Controller>) -> HarnessRegistry {
    let mut r = HarnessRegistry::new(7);
    let refused = r.load(plugin("cloud"), |api| {
        api.register_executor_controller(c).unwrap();
    });
    assert!(refused.is_empty());
    r
}

#[test]
fn a_relative_workspace_or_a_second_controller_is_refused() {
    let mut r = HarnessRegistry::new(1);
    let refused = r.load(plugin("cloud"), |api| {
        let _ = api.register_executor_controller(Arc::new(Controller::at("work")));
        api.register_executor_controller(Arc::new(Controller::at("/srv/a")))
            .unwrap();
        let _ = api.register_executor_controller(Arc::new(Controller::at("/srv/b")));
    });
    assert_eq!(
        refused,
        [
            RegistrationError::RelativeWorkspace {
                plugin: "cloud".into(),
                path: "work".into()
            },
            RegistrationError::SecondController {
                plugin: "cloud".into()
            },
        ]
    );
    let handle = r.resolve_executor_controller("cloud").unwrap();
    assert_eq!(handle.workspace_directory(), std::path::Path::new("/srv/a"));
}

#[test]
fn a_controller_resolves_only_from_this_registry_and_only_for_a_usable_owner() {
    let mut r = with_controller(Arc::new(Controller::at("/srv/a")));
    r.load(plugin("bare"), |_| {});
    assert_eq!(
        r.resolve_executor_controller("nobody").unwrap_err(),
        ResolveError::Missing("nobody".into())
    );
    assert_eq!(
        r.resolve_executor_controller("bare").unwrap_err(),
        ResolveError::Missing("bare".into())
    );
    // Another registry knows nothing of this one's controllers: no fallback.
    assert!(
        HarnessRegistry::new(8)
            .resolve_executor_controller("cloud")
            .is_err()
    );
    r.disable("cloud");
    assert_eq!(
        r.resolve_executor_controller("cloud").unwrap_err(),
        ResolveError::Disabled("cloud".into())
    );
    r.revoke("cloud");
    assert_eq!(
        r.resolve_executor_controller("cloud").unwrap_err(),
        ResolveError::Revoked("cloud".into())
    );
}

#[tokio::test]
async fn a_handle_stops_working_when_its_registry_owner_or_registration_goes() {
    let cancel = CancellationToken::new();
    // Replaced registry.
    let c = Arc::new(Controller::at("/srv/a"));
    let r = with_controller(c.clone());
    let handle = r.resolve_executor_controller("cloud").unwrap();
    assert_eq!(handle.generation(), 7);
    handle.ensure(&binding("e1"), &cancel).await.unwrap();
    let mut next = r.succeed();
    assert_eq!(next.generation(), 8);
    let err = handle.ensure(&binding("e1"), &cancel).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("no longer available: its registry was retired or replaced"),
        "{err}"
    );
    assert_eq!(
        r.resolve_executor_controller("cloud").unwrap_err(),
        ResolveError::Retired
    );
    // A fresh resolve from the new registry works.
    next.load(plugin("cloud"), |api| {
        api.register_executor_controller(c.clone()).unwrap();
    });
    let fresh = next.resolve_executor_controller("cloud").unwrap();
    fresh.ensure(&binding("e1"), &cancel).await.unwrap();
    assert_eq!(fresh.generation(), 8);

    // Registration replaced (the plugin loaded again).
    let old = next.resolve_executor_controller("cloud").unwrap();
    next.load(plugin("cloud"), |api| {
        api.register_executor_controller(c.clone()).unwrap();
    });
    let err = old.retire(&binding("e1"), &cancel).await.unwrap_err();
    assert!(
        err.to_string().contains("its registration was replaced"),
        "{err}"
    );
    next.resolve_executor_controller("cloud")
        .unwrap()
        .retire(&binding("e1"), &cancel)
        .await
        .unwrap();

    // Owner revoked.
    let handle = next.resolve_executor_controller("cloud").unwrap();
    next.revoke("cloud");
    let err = handle.ensure(&binding("e1"), &cancel).await.unwrap_err();
    assert!(err.to_string().contains("its owner was revoked"), "{err}");
}

#[tokio::test]
async fn ensure_and_retire_touch_exactly_the_binding_and_resolving_probes_nothing() {
    let c = Arc::new(Controller::at("/srv/a"));
    let r = with_controller(c.clone());
    let handle = r.resolve_executor_controller("cloud").unwrap();
    assert!(
        c.ensured.lock().unwrap().is_empty(),
        "resolve calls nothing"
    );
    let cancel = CancellationToken::new();
    handle.ensure(&binding("e1"), &cancel).await.unwrap();
    handle.ensure(&binding("e1"), &cancel).await.unwrap();
    assert_eq!(*c.ensured.lock().unwrap(), [binding("e1")], "no duplicate");
    handle.retire(&binding("e1"), &cancel).await.unwrap();
    handle.retire(&binding("e1"), &cancel).await.unwrap();
    assert!(c.ensured.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_operation_is_cancelled_by_its_caller_or_its_registry_and_ends_current() {
    // The caller cancels.
    let c = Arc::new(Controller {
        wait_for_cancel: true,
        ..Controller::at("/srv/a")
    });
    let r = with_controller(c.clone());
    let handle = r.resolve_executor_controller("cloud").unwrap();
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            cancel.cancel();
        })
    };
    handle.ensure(&binding("e1"), &cancel).await.unwrap();
    canceller.await.unwrap();
    assert_eq!(c.saw_cancel.load(Ordering::SeqCst), 1);
    // Once the operation completed, its context is no longer current.
    let kept = c.kept.lock().unwrap().clone().unwrap();
    assert!(matches!(
        kept.assert_current(),
        Err(ExecutorError::Completed { .. })
    ));

    // The registry retires mid-call: the controller's context fires, and the
    // check after the call fails.
    let c = Arc::new(Controller {
        wait_for_cancel: true,
        ..Controller::at("/srv/a")
    });
    let r = Arc::new(with_controller(c.clone()));
    let handle = r.resolve_executor_controller("cloud").unwrap();
    let retirer = {
        let r = Arc::clone(&r);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            r.retire();
        })
    };
    let err = handle
        .ensure(&binding("e2"), &CancellationToken::new())
        .await
        .unwrap_err();
    retirer.await.unwrap();
    assert_eq!(c.saw_cancel.load(Ordering::SeqCst), 1);
    assert!(
        matches!(err, ExecutorError::NoLongerAvailable { .. }),
        "{err}"
    );
}

// ---- §3 rule 14: reset ------------------------------------------------------

struct Resetting(Result<(), ResetError>);

#[async_trait]
impl AgentHarness for Resetting {
    fn id(&self) -> &str {
        "native"
    }
    fn label(&self) -> &str {
        "resets"
    }
    async fn supports(&self, _: &SupportContext) -> Support {
        Support::Supported {
            priority: 0,
            reason: None,
        }
    }
    async fn reset(&self, _: &AgentSession) -> Result<(), ResetError> {
        self.0.clone()
    }
}

fn session() -> AgentSession {
    AgentSession {
        key: "agent:main".into(),
        harness_id: "native".into(),
        native_session_id: Some("n-1".into()),
        turns: 4,
    }
}

#[tokio::test]
async fn a_failed_native_cleanup_refuses_the_reset_after_the_other_cleanups_ran() {
    let others_ran = Arc::new(AtomicUsize::new(0));
    let other =
        |n: Arc<AtomicUsize>| -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
            Box::pin(async move {
                n.fetch_add(1, Ordering::SeqCst);
            })
        };
    let mut s = session();
    let err = reset_session(
        &Resetting(Err(ResetError::Cleanup(
            "the sandbox is still attached".into(),
        ))),
        &mut s,
        vec![other(others_ran.clone()), other(others_ran.clone())],
    )
    .await
    .unwrap_err();
    assert_eq!(
        others_ran.load(Ordering::SeqCst),
        2,
        "the others were waited for"
    );
    assert_eq!(s, session(), "the session is unchanged");
    assert!(err.to_string().contains("the sandbox is still attached"));

    // An ordinary failure is logged and the reset goes on.
    let mut s = session();
    reset_session(
        &Resetting(Err(ResetError::Other("timeout".into()))),
        &mut s,
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!((s.native_session_id, s.turns), (None, 0));
}

// ---- §4 isolated completion -------------------------------------------------

/// A harness whose isolated completions answer from a script, per profile.
struct Completer {
    own_auth: bool,
    supports_v2: bool,
    /// The answer for each profile id; a missing one is a refused credential.
    answers: Vec<(&'static str, Result<CompletionOutput, CompletionError>)>,
    /// Per call: sleep this long first.
    delay: Duration,
    report_ms: Option<u64>,
    seen: Mutex<Vec<CompletionAuth>>,
    kept: Mutex<Option<rein_core::harness::isolated::CompletionContext>>,
}

impl Completer {
    fn answering(answers: Vec<(&'static str, Result<CompletionOutput, CompletionError>)>) -> Self {
        Completer {
            own_auth: false,
            supports_v2: true,
            answers,
            delay: Duration::ZERO,
            report_ms: Some(42),
            seen: Mutex::new(Vec::new()),
            kept: Mutex::new(None),
        }
    }
}

#[async_trait]
impl AgentHarness for Completer {
    fn id(&self) -> &str {
        "completer"
    }
    fn label(&self) -> &str {
        "completes"
    }
    async fn supports(&self, _: &SupportContext) -> Support {
        Support::Supported {
            priority: 0,
            reason: None,
        }
    }
    fn auth_bootstrap_harness(&self) -> bool {
        self.own_auth
    }
    async fn run_isolated_completion_v2(
        &self,
        params: &IsolatedParams,
    ) -> Option<Result<CompletionOutput, CompletionError>> {
        if !self.supports_v2 {
            return None;
        }
        *self.kept.lock().unwrap() = Some(params.ctx.clone());
        self.seen.lock().unwrap().push(params.auth.clone());
        tokio::time::sleep(self.delay).await;
        if let Err(e) = params.ctx.assert_current() {
            return Some(Err(e));
        }
        if let Some(ms) = self.report_ms {
            params.ctx.on_request_complete(ms);
        }
        let profile = match &params.auth {
            CompletionAuth::Host { profile, .. } | CompletionAuth::Harness { profile, .. } => {
                profile.id.clone()
            }
        };
        Some(
            self.answers
                .iter()
                .find(|(p, _)| *p == profile)
                .map(|(_, a)| a.clone())
                .unwrap_or(Err(CompletionError::Credential {
                    profile,
                    message: "401".into(),
                })),
        )
    }
}

fn text(t: &str) -> CompletionOutput {
    CompletionOutput {
        content: vec![ContentPart::Text(t.into())],
        stop_reason: "stop".into(),
        usage: None,
    }
}

fn ask(profiles: &[&str]) -> IsolatedRequest {
    IsolatedRequest {
        prompt: "Title this conversation".into(),
        system: None,
        transport_model: "openai/gpt-4.1-mini".into(),
        auth_plan: "oauth-device".into(),
        profiles: profiles
            .iter()
            .map(|p| AuthProfile {
                id: (*p).into(),
                credential: format!("secret-{p}"),
            })
            .collect(),
        deadline: Duration::from_secs(5),
        policy: OutputTextPolicy::Default,
        shape: Default::default(),
    }
}

#[tokio::test]
async fn a_harness_without_isolated_completion_is_an_error_not_a_replay() {
    let h = Completer {
        supports_v2: false,
        ..Completer::answering(vec![("work", Ok(text("Release notes")))])
    };
    let err = run_isolated(&h, &ask(&["work"])).await.unwrap_err();
    assert_eq!(err, CompletionError::Unsupported("completer".into()));
}

#[tokio::test]
async fn the_host_walks_its_profiles_and_the_owner_decides_what_the_harness_gets() {
    // Host-owned: the exact model and one profile at a time, in order.
    let h = Completer::answering(vec![("backup", Ok(text("Release notes")))]);
    let done = run_isolated(&h, &ask(&["work", "backup"])).await.unwrap();
    assert_eq!(done.text, "Release notes");
    assert_eq!(done.profile, "backup");
    // No declared selector: the harness itself served it (the SDK reports a
    // harness without the hook as itself).
    assert_eq!(
        (done.owner, done.runtime),
        (CompletionOwner::Host, CompletionRuntime::OwnRuntime)
    );
    let seen = h.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "once per candidate profile");
    assert!(matches!(
        &seen[0],
        CompletionAuth::Host { transport_model, profile } if transport_model == "openai/gpt-4.1-mini" && profile.id == "work"
    ));
    // Harness-owned: the auth plan and the one profile's credentials.
    let h = Completer {
        own_auth: true,
        ..Completer::answering(vec![("work", Ok(text("Notes")))])
    };
    let done = run_isolated(&h, &ask(&["work", "backup"])).await.unwrap();
    assert_eq!(
        (done.owner, done.runtime),
        (CompletionOwner::Harness, CompletionRuntime::OwnRuntime)
    );
    let seen = h.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(matches!(
        &seen[0],
        CompletionAuth::Harness { auth_plan, profile } if auth_plan == "oauth-device" && profile.id == "work" && profile.credential == "secret-work"
    ));
    // Secrets stay out of debug output.
    assert!(!format!("{:?}", seen[0]).contains("secret-work"));
}

#[tokio::test(start_paused = true)]
async fn one_deadline_covers_every_attempt() {
    let h = Completer {
        delay: Duration::from_secs(3),
        ..Completer::answering(Vec::new())
    };
    // Each attempt alone fits in 5 s; two do not.
    let err = run_isolated(&h, &ask(&["a", "b"])).await.unwrap_err();
    assert_eq!(err, CompletionError::TimedOut);
    assert_eq!(err.to_string(), "isolated completion timed out");
    assert_eq!(h.seen.lock().unwrap().len(), 2);
    // The completion has ended: its context is no longer current.
    let kept = h.kept.lock().unwrap().clone().unwrap();
    assert_eq!(kept.assert_current(), Err(CompletionError::Ended));
}

#[tokio::test]
async fn a_failed_assertion_ends_the_completion_and_is_no_credential_failure() {
    let h = Completer::answering(vec![("a", Err(CompletionError::Ended))]);
    let err = run_isolated(&h, &ask(&["a", "b"])).await.unwrap_err();
    assert_eq!(err, CompletionError::Ended);
    assert_eq!(
        h.seen.lock().unwrap().len(),
        1,
        "the next profile is not tried"
    );
}

#[tokio::test]
async fn request_durations_are_the_harnesss_reports_never_invented() {
    let h = Completer::answering(vec![("b", Ok(text("Notes")))]);
    let done = run_isolated(&h, &ask(&["a", "b"])).await.unwrap();
    // The refused attempt's request reported too.
    assert_eq!(done.request_durations_ms, [42, 42]);
    let h = Completer {
        report_ms: None,
        ..Completer::answering(vec![("a", Ok(text("Notes")))])
    };
    let done = run_isolated(&h, &ask(&["a"])).await.unwrap();
    assert!(done.request_durations_ms.is_empty());
}

#[test]
fn only_text_ended_by_stop_or_length_is_an_answer() {
    let out = |content: Vec<ContentPart>, stop: &str| CompletionOutput {
        content,
        stop_reason: stop.into(),
        usage: None,
    };
    let t = |s: &str| ContentPart::Text(s.into());
    let think = |s: &str| ContentPart::Thinking(s.into());
    let default = OutputTextPolicy::Default;
    let strict = OutputTextPolicy::StrictVisible;
    for (output, policy, expected) in [
        (
            out(vec![t("Title")], "stop"),
            default,
            Ok("Title".to_owned()),
        ),
        (
            out(vec![think("hmm"), t("Title")], "length"),
            default,
            Ok("Title".to_owned()),
        ),
        (
            out(
                vec![t("x"), ContentPart::ToolCall { name: "ls".into() }],
                "stop",
            ),
            default,
            Err("isolated completion returned a tool call"),
        ),
        (
            out(vec![t("x")], "content_filter"),
            default,
            Err("isolated completion failed with stop reason content_filter"),
        ),
        (
            out(vec![think("only thoughts")], "stop"),
            default,
            Err("isolated completion returned empty output"),
        ),
        (
            out(vec![t("  ")], "stop"),
            default,
            Err("isolated completion returned empty output"),
        ),
        // Strict visible: empty is an answer, and thinking never becomes text.
        (
            out(vec![think("only thoughts")], "stop"),
            strict,
            Ok(String::new()),
        ),
    ] {
        let got = validate(&output, policy).map_err(|e| e.to_string());
        assert_eq!(
            got,
            expected.map_err(str::to_owned),
            "{output:?} {policy:?}"
        );
    }
}

// ---- §5 delegated execution -------------------------------------------------

struct Owner;

#[async_trait]
impl AgentHarness for Owner {
    fn id(&self) -> &str {
        "codex"
    }
    fn label(&self) -> &str {
        "owns sessions"
    }
    async fn supports(&self, _: &SupportContext) -> Support {
        Support::Supported {
            priority: 0,
            reason: None,
        }
    }
    fn delegated_execution_plugin_ids(&self) -> Vec<String> {
        vec!["scheduler".into()]
    }
}

fn stored() -> StoredSession {
    StoredSession {
        key: "agent:main:42".into(),
        store_path: "/var/lib/rein/sessions.json".into(),
        session_id: "s-42".into(),
        model_selection_locked: true,
        agent_harness_id: Some("codex".into()),
        agent_harness_runtime_override: Some("codex".into()),
        owner_plugin_id: "openai".into(),
    }
}

fn run_by(delegate: &str) -> DelegatedRun {
    DelegatedRun {
        delegate_plugin_id: delegate.into(),
        key: "agent:main:42".into(),
        store_path: "/var/lib/rein/sessions.json".into(),
        session_id: "s-42".into(),
    }
}

fn owners_registry() -> HarnessRegistry {
    let mut r = HarnessRegistry::new(1);
    r.load(plugin("openai"), |api| {
        api.register_agent_harness(Arc::new(Owner)).unwrap();
    });
    r
}

#[test]
fn a_trusted_delegate_runs_exactly_the_stored_locked_session_as_the_owners() {
    let r = owners_registry();
    let scope = authorize_delegated_run(&r, &stored(), &run_by("scheduler")).unwrap();
    assert_eq!(
        (scope.owner_plugin_id.as_str(), scope.harness_id.as_str()),
        ("openai", "codex")
    );
    assert_eq!(
        authorize_delegated_run(&r, &stored(), &run_by("stranger")).unwrap_err(),
        DelegationError::NotTrusted {
            delegate: "stranger".into(),
            owner: "openai".into()
        }
    );
}

#[test]
fn a_delegated_run_that_differs_in_anything_is_refused_naming_each_difference() {
    let r = owners_registry();
    let mut run = run_by("scheduler");
    run.session_id = "s-43".into();
    run.store_path = "/tmp/other.json".into();
    let mut s = stored();
    s.model_selection_locked = false;
    s.agent_harness_runtime_override = Some("rein".into());
    let err = authorize_delegated_run(&r, &s, &run)
        .unwrap_err()
        .to_string();
    for expected in [
        "store path `/tmp/other.json` is not the stored `/var/lib/rein/sessions.json`",
        "session id `s-43` is not the stored `s-42`",
        "model selection is not locked",
        "its runtime override is `rein` rather than the owner's harness `codex`",
    ] {
        assert!(err.contains(expected), "{expected} in {err}");
    }
    assert!(!err.contains("session key"), "{err}");
}

#[test]
fn changing_a_session_stays_with_its_owner() {
    let s = stored();
    for change in [
        SessionChange::Create,
        SessionChange::Patch,
        SessionChange::Reset,
        SessionChange::Delete,
        SessionChange::Archive,
        SessionChange::GatewayMutation,
    ] {
        authorize_session_change(&s, "openai", change).unwrap();
        let err = authorize_session_change(&s, "scheduler", change).unwrap_err();
        assert_eq!(err.to_string(), "owned by plugin openai");
    }
}
