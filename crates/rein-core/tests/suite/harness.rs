//! Harness registration and selection (spec harness-sdk §1–§2), rule by rule,
//! with in-process harnesses whose answers the tests choose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::plugin;
use async_trait::async_trait;
use rein_core::harness::{
    AgentHarness, HarnessRegistry, RegistrationError, RuntimePolicy, SelectionError,
    SelectionRequest, select,
};
use rein_protocol::{
    PolicySource, SelectionReason, Support, SupportContext, WorkspaceEnvironment, WorkspaceKind,
};

struct Fake {
    id: String,
    support: Support,
    auto: Option<Vec<String>>,
    env: Option<WorkspaceEnvironment>,
    asked: AtomicUsize,
}

impl Fake {
    fn new(id: &str, support: Support) -> Fake {
        Fake {
            id: id.into(),
            support,
            auto: None,
            env: None,
            asked: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl AgentHarness for Fake {
    fn id(&self) -> &str {
        &self.id
    }
    fn label(&self) -> &str {
        "a test harness"
    }
    async fn supports(&self, ctx: &SupportContext) -> Support {
        assert!(!ctx.provider.is_empty());
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.support.clone()
    }
    fn auto_selection_provider_ids(&self) -> Option<Vec<String>> {
        self.auto.clone()
    }
    fn workspace_environment(&self) -> Option<WorkspaceEnvironment> {
        self.env.clone()
    }
}

fn yes(priority: i32) -> Support {
    Support::Supported {
        priority,
        reason: Some(format!("priority {priority}")),
    }
}

fn no(reason: &str, fallback: Option<&str>) -> Support {
    Support::Unsupported {
        reason: Some(reason.into()),
        fallback_runtime: fallback.map(str::to_owned),
    }
}

/// A registry with these harnesses, each from a plugin of its own.
fn registry(harnesses: Vec<Arc<Fake>>) -> HarnessRegistry {
    let mut r = HarnessRegistry::new(1);
    for h in harnesses {
        let refused = r.load(plugin(&format!("p-{}", h.id)), |api| {
            api.register_agent_harness(h).unwrap();
        });
        assert!(refused.is_empty());
    }
    r
}

fn request(provider: &str, model: &str) -> SelectionRequest {
    SelectionRequest {
        provider: provider.into(),
        model: Some(model.into()),
        ..SelectionRequest::default()
    }
}

#[test]
fn empty_reserved_and_duplicate_ids_are_refused_and_the_first_stays() {
    let mut r = HarnessRegistry::new(1);
    let refused = r.load(plugin("first"), |api| {
        api.register_agent_harness(Arc::new(Fake::new("codex", yes(0))))
            .unwrap();
        let empty = api.register_agent_harness(Arc::new(Fake::new("  ", yes(0))));
        assert_eq!(
            empty,
            Err(RegistrationError::EmptyId {
                plugin: "first".into()
            })
        );
    });
    assert_eq!(refused.len(), 1);
    let refused = r.load(plugin("second"), |api| {
        let _ = api.register_agent_harness(Arc::new(Fake::new("codex", yes(9))));
        // The built-in runtime cannot be impersonated, under rein's name or
        // the SDK's, nor a runtime setting taken for an id.
        for reserved in ["rein", "openclaw", "default"] {
            let _ = api.register_agent_harness(Arc::new(Fake::new(reserved, yes(9))));
        }
    });
    assert_eq!(
        refused,
        [
            RegistrationError::Duplicate {
                plugin: "second".into(),
                id: "codex".into(),
                owner: "first".into()
            },
            RegistrationError::Reserved {
                plugin: "second".into(),
                id: "rein".into()
            },
            RegistrationError::Reserved {
                plugin: "second".into(),
                id: "openclaw".into()
            },
            RegistrationError::Reserved {
                plugin: "second".into(),
                id: "default".into()
            },
        ]
    );
    assert!(
        refused[0]
            .to_string()
            .contains("plugin `first` registered it first")
    );
    assert_eq!(r.get("codex").unwrap().plugin.id, "first");
    assert!(r.get("rein").is_none());
    assert_eq!(r.harnesses().count(), 1);
}

#[test]
fn a_pinned_session_beats_the_model_which_beats_the_provider_which_beats_auto() {
    let policy = RuntimePolicy {
        default: "auto".into(),
        providers: BTreeMap::from([("openai".into(), "p".into())]),
        models: BTreeMap::from([("openai/gpt".into(), "m".into())]),
        compatible: BTreeMap::new(),
    };
    let mut req = request("openai", "gpt");
    req.session_runtime = Some("s".into());
    let resolved = |req: &SelectionRequest| {
        let p = policy.resolve(req);
        (p.source, p.runtime)
    };
    assert_eq!(resolved(&req), (PolicySource::Session, "s".into()));
    req.session_runtime = None;
    // A step's own runtime comes after a pin, before every configured setting.
    req.step_runtime = Some("x".into());
    assert_eq!(resolved(&req), (PolicySource::Step, "x".into()));
    req.step_runtime = None;
    assert_eq!(resolved(&req), (PolicySource::Model, "m".into()));
    req.model = Some("other".into());
    assert_eq!(resolved(&req), (PolicySource::Provider, "p".into()));
    req.provider = "anthropic".into();
    assert_eq!(resolved(&req), (PolicySource::Default, "auto".into()));
}

#[tokio::test]
async fn auto_asks_by_the_declared_providers_and_the_highest_priority_wins() {
    let asked_always = Arc::new(Fake::new("a-any", yes(1)));
    let listed = Arc::new(Fake {
        auto: Some(vec!["openai".into()]),
        ..Fake::new("b-listed", yes(5))
    });
    let explicit_only = Arc::new(Fake {
        auto: Some(Vec::new()),
        ..Fake::new("c-explicit", yes(99))
    });
    let elsewhere = Arc::new(Fake {
        auto: Some(vec!["anthropic".into()]),
        ..Fake::new("d-elsewhere", yes(99))
    });
    let r = registry(vec![
        asked_always.clone(),
        listed.clone(),
        explicit_only.clone(),
        elsewhere.clone(),
    ]);
    let d = select(&r, &RuntimePolicy::default(), &request("openai", "gpt"))
        .await
        .unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("b-listed", SelectionReason::AutoPlugin)
    );
    let answers: Vec<(&str, bool, Option<&str>)> = d
        .candidates
        .iter()
        .map(|c| (c.id.as_str(), c.supported, c.reason.as_deref()))
        .collect();
    assert_eq!(
        answers,
        [
            ("a-any", true, Some("priority 1")),
            ("b-listed", true, Some("priority 5")),
            ("c-explicit", false, Some("harness is explicit-only")),
            (
                "d-elsewhere",
                false,
                Some("provider is not auto-selectable")
            ),
        ]
    );
    // Harnesses ruled out by their declaration are not asked.
    assert_eq!(explicit_only.asked.load(Ordering::SeqCst), 0);
    assert_eq!(elsewhere.asked.load(Ordering::SeqCst), 0);
    assert_eq!(asked_always.asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn auto_breaks_ties_by_id_and_falls_back_to_the_builtin_runtime() {
    let r = registry(vec![
        Arc::new(Fake::new("zeta", yes(3))),
        Arc::new(Fake::new("alpha", yes(3))),
    ]);
    let d = select(&r, &RuntimePolicy::default(), &request("openai", "gpt"))
        .await
        .unwrap();
    assert_eq!(d.selected, "alpha");
    let r = registry(vec![Arc::new(Fake::new("zeta", no("not mine", None)))]);
    let d = select(&r, &RuntimePolicy::default(), &request("openai", "gpt"))
        .await
        .unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("rein", SelectionReason::AutoBuiltin)
    );
    assert_eq!(d.candidates.len(), 1, "the refusal is recorded");
    // Nothing registered: the built-in runtime, not an error.
    let d = select(
        &HarnessRegistry::new(1),
        &RuntimePolicy::default(),
        &request("openai", "gpt"),
    )
    .await
    .unwrap();
    assert_eq!(d.reason, SelectionReason::AutoBuiltin);
}

#[tokio::test]
async fn an_explicit_runtime_is_used_falls_back_only_when_it_says_or_is_an_error() {
    let forced = |runtime: &str| RuntimePolicy {
        default: runtime.into(),
        ..RuntimePolicy::default()
    };
    let r = registry(vec![
        Arc::new(Fake::new("codex", yes(0))),
        Arc::new(Fake::new("falls", no("no such model", Some("rein")))),
        Arc::new(Fake::new("strict", no("wrong provider", None))),
    ]);
    let req = request("openai", "gpt");
    let d = select(&r, &forced("codex"), &req).await.unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("codex", SelectionReason::ForcedPlugin)
    );
    let d = select(&r, &forced("falls"), &req).await.unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("rein", SelectionReason::PluginDeclaredFallback)
    );
    let err = select(&r, &forced("strict"), &req).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "harness \"strict\" does not support openai/gpt (wrong provider)"
    );
    let err = select(&r, &forced("ghost"), &req).await.unwrap_err();
    assert!(
        matches!(err, SelectionError::MissingHarness { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("codex, falls, strict"), "{err}");
    let d = select(&r, &forced("rein"), &req).await.unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("rein", SelectionReason::ForcedBuiltin)
    );
}

/// A plugin ported from the SDK names the built-in runtime `openclaw`; a
/// policy may too, and may set a level to `default` to defer to the policy's
/// default.
#[tokio::test]
async fn the_sdks_names_for_the_builtin_runtime_and_the_default_are_understood() {
    let r = registry(vec![
        Arc::new(Fake::new("codex", yes(0))),
        Arc::new(Fake::new("ported", no("no such model", Some("openclaw")))),
    ]);
    let req = request("openai", "gpt");
    let policy = |default: &str, provider: &str| RuntimePolicy {
        default: default.into(),
        providers: [("openai".to_owned(), provider.to_owned())].into(),
        ..RuntimePolicy::default()
    };
    let d = select(&r, &policy("ported", "default"), &req)
        .await
        .unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("rein", SelectionReason::PluginDeclaredFallback),
        "fallbackRuntime openclaw is rein's built-in runtime"
    );
    let d = select(&r, &policy("auto", "openclaw"), &req).await.unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("rein", SelectionReason::ForcedBuiltin)
    );
    // `default` at the provider defers to the policy's default (codex);
    // `default` as the policy's default is `auto`.
    let d = select(&r, &policy("codex", "default"), &req).await.unwrap();
    assert_eq!(
        (d.selected.as_str(), d.policy.source),
        ("codex", rein_protocol::PolicySource::Default)
    );
    let d = select(&r, &policy("default", "default"), &req)
        .await
        .unwrap();
    assert_eq!(d.policy.runtime, "auto");
    assert_eq!(d.reason, SelectionReason::AutoPlugin);
}

#[tokio::test]
async fn the_decision_shows_where_the_selected_runtime_works() {
    let hosted = WorkspaceEnvironment {
        kind: WorkspaceKind::ProviderHosted,
        label: "Codex cloud".into(),
    };
    let r = registry(vec![Arc::new(Fake {
        env: Some(hosted.clone()),
        ..Fake::new("codex", yes(0))
    })]);
    let d = select(&r, &RuntimePolicy::default(), &request("openai", "gpt"))
        .await
        .unwrap();
    assert_eq!(d.workspace_environment, Some(hosted));
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["workspace_environment"]["kind"], "provider_hosted");
    assert_eq!(json["reason"], "auto_plugin");
    assert_eq!(json["policy"]["source"], "default");
}

#[tokio::test]
async fn harnesses_of_a_disabled_or_revoked_plugin_are_not_selected() {
    let r = registry(vec![
        Arc::new(Fake::new("alpha", yes(9))),
        Arc::new(Fake::new("beta", yes(1))),
    ]);
    r.disable("p-alpha");
    let d = select(&r, &RuntimePolicy::default(), &request("openai", "gpt"))
        .await
        .unwrap();
    assert_eq!(d.selected, "beta");
    assert!(d.candidates.iter().all(|c| c.id != "alpha"));
    let forced = RuntimePolicy {
        default: "alpha".into(),
        ..RuntimePolicy::default()
    };
    let err = select(&r, &forced, &request("openai", "gpt"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "harness `alpha` is unavailable: its plugin is disabled"
    );
    r.revoke("p-beta");
    let d = select(&r, &RuntimePolicy::default(), &request("openai", "gpt"))
        .await
        .unwrap();
    assert_eq!(d.reason, SelectionReason::AutoBuiltin);
}
