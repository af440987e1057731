//! Conflict detection, one test per rule of spec shared-state §2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::conflicts::{detect, normalise_path};
use rein_protocol::{
    Action, Assumption, ConflictPolicy, ConflictType, Resource, Risk, SharedHarnessState,
    VerifierObligation, VersionDependency,
};

fn state(actions: Vec<Action>) -> SharedHarnessState {
    serde_json::from_value(serde_json::json!({ "id": "shs_t", "goal": "test" }))
        .map(|mut s: SharedHarnessState| {
            s.actions = actions;
            s
        })
        .unwrap()
}

fn action(id: &str, participant: &str) -> Action {
    serde_json::from_value(serde_json::json!({
        "id": id, "participantId": participant, "title": format!("do {id}")
    }))
    .unwrap()
}

fn file(path: &str) -> Resource {
    Resource {
        kind: "file".into(),
        path: Some(path.into()),
        ..Resource::default()
    }
}

fn dir(path: &str) -> Resource {
    Resource {
        kind: "directory".into(),
        path: Some(path.into()),
        ..Resource::default()
    }
}

fn writes(id: &str, who: &str, resources: Vec<Resource>) -> Action {
    Action {
        write_set: resources,
        ..action(id, who)
    }
}

fn kinds(s: &SharedHarnessState) -> Vec<ConflictType> {
    detect(s).unwrap().iter().map(|c| c.conflict_type).collect()
}

#[test]
fn write_write_is_one_conflict_per_pair_listing_every_shared_resource() {
    let s = state(vec![
        writes("a", "p1", vec![file("x.md"), file("y.md"), file("z.md")]),
        writes("b", "p2", vec![file("y.md"), file("x.md")]),
        writes("c", "p3", vec![file("other.md")]),
    ]);
    let found = detect(&s).unwrap();
    assert_eq!(found.len(), 1);
    let c = &found[0];
    assert_eq!(c.conflict_type, ConflictType::WriteWrite);
    assert_eq!(c.actions, vec!["a", "b"]);
    assert_eq!(c.participants, vec!["p1", "p2"]);
    let mut names: Vec<&str> = c
        .resources
        .iter()
        .map(|r| r.path.as_deref().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, vec!["x.md", "y.md"]);
    // One action writing a resource twice is not a conflict with itself.
    let alone = state(vec![writes("a", "p", vec![file("x"), file("x")])]);
    assert!(detect(&alone).unwrap().is_empty());
}

#[test]
fn read_write_needs_a_version_dependency_on_the_read() {
    let reader = Action {
        read_set: vec![file("CHANGELOG.md")],
        version_dependencies: vec![VersionDependency {
            id: "v".into(),
            resource: Some(file("CHANGELOG.md")),
            version: Some("main@abc".into()),
            required: true,
            ..VersionDependency::default()
        }],
        ..action("read", "docs")
    };
    let writer = writes("write", "coder", vec![file("CHANGELOG.md")]);
    let found = detect(&state(vec![reader.clone(), writer.clone()])).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].conflict_type, ConflictType::ReadWrite);
    assert_eq!(found[0].actions, vec!["read", "write"], "[reader, writer]");
    // Without the dependency, a plain read is no conflict.
    let plain = Action {
        version_dependencies: Vec::new(),
        ..reader.clone()
    };
    assert!(kinds(&state(vec![plain.clone(), writer.clone()])).is_empty());
    // A dependency held by the state pins the read as well.
    let mut s = state(vec![plain, writer]);
    s.version_dependencies = reader.version_dependencies.clone();
    assert_eq!(kinds(&s), vec![ConflictType::ReadWrite]);
    // A pinned read of a directory meets a write beneath it.
    let dir_reader = Action {
        read_set: vec![dir("docs")],
        version_dependencies: vec![VersionDependency {
            id: "v".into(),
            resource: Some(dir("docs")),
            ..VersionDependency::default()
        }],
        ..action("read", "docs")
    };
    let beneath = writes("write", "coder", vec![file("docs/guide/a.md")]);
    assert_eq!(
        kinds(&state(vec![dir_reader, beneath])),
        vec![ConflictType::ReadWrite]
    );
}

#[test]
fn assumption_keys_compare_without_case_one_conflict_per_pair_of_values() {
    let assume = |key: &str, value: &str| Assumption {
        id: format!("{key}-{value}"),
        key: Some(key.into()),
        value: Some(value.into()),
        text: String::new(),
        ..Assumption::default()
    };
    let mut s = state(vec![
        Action {
            assumptions: vec![assume("API_Version", "v1")],
            ..action("a", "p1")
        },
        Action {
            assumptions: vec![assume("api_version", "v2")],
            ..action("b", "p2")
        },
        Action {
            assumptions: vec![assume("API_VERSION", "v1")],
            ..action("c", "p3")
        },
    ]);
    s.assumptions = vec![assume("api_version", "v3")];
    let found = detect(&s).unwrap();
    assert!(
        found
            .iter()
            .all(|c| c.conflict_type == ConflictType::Assumption)
    );
    assert_eq!(found.len(), 3, "values v1, v2, v3: three pairs");
    assert!(
        found
            .iter()
            .all(|c| c.policy == ConflictPolicy::Warn && c.severity == Risk::Medium)
    );
    let v1_v2 = &found[0];
    assert_eq!(
        v1_v2.actions,
        vec!["a", "c", "b"],
        "holders of v1, then of v2"
    );
    assert!(v1_v2.summary.contains("`v1`") && v1_v2.summary.contains("`v2`"));
    // Equal values agree.
    let agree = state(vec![
        Action {
            assumptions: vec![assume("k", "same")],
            ..action("a", "p1")
        },
        Action {
            assumptions: vec![assume("K", "same")],
            ..action("b", "p2")
        },
    ]);
    assert!(detect(&agree).unwrap().is_empty());
}

#[test]
fn a_risky_write_needs_a_required_verifier_on_it_or_on_the_state() {
    let risky = Action {
        risk_level: Some(Risk::High),
        ..writes("deploy", "ops", vec![file("prod.yaml")])
    };
    let found = detect(&state(vec![risky.clone()])).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].conflict_type, ConflictType::VerifierObligation);
    assert_eq!(found[0].policy, ConflictPolicy::Escalate);
    assert_eq!(found[0].severity, Risk::High);
    let obligation = VerifierObligation {
        id: "review".into(),
        title: "Review".into(),
        required: true,
        ..VerifierObligation::default()
    };
    let verified = Action {
        verifier_obligations: vec![obligation.clone()],
        ..risky.clone()
    };
    assert!(detect(&state(vec![verified])).unwrap().is_empty());
    let mut on_state = state(vec![risky.clone()]);
    on_state.verifier_obligations = vec![obligation.clone()];
    assert!(detect(&on_state).unwrap().is_empty());
    // An optional verifier does not count; a medium-risk write needs none.
    let optional = Action {
        verifier_obligations: vec![VerifierObligation {
            required: false,
            ..obligation
        }],
        ..risky.clone()
    };
    assert_eq!(
        kinds(&state(vec![optional])),
        vec![ConflictType::VerifierObligation]
    );
    let medium = Action {
        risk_level: Some(Risk::Medium),
        ..risky
    };
    assert!(detect(&state(vec![medium])).unwrap().is_empty());
}

#[test]
fn resources_are_the_same_by_id_key_or_uri_or_by_path_and_kind() {
    let by = |field: &str, value: &str, kind: &str| {
        let mut r: Resource = serde_json::from_value(serde_json::json!({ "kind": kind })).unwrap();
        match field {
            "id" => r.id = Some(value.into()),
            "key" => r.key = Some(value.into()),
            _ => r.uri = Some(value.into()),
        }
        r
    };
    for field in ["id", "key", "uri"] {
        let s = state(vec![
            writes("a", "p1", vec![by(field, "same", "record")]),
            writes("b", "p2", vec![by(field, "same", "table")]),
        ]);
        assert_eq!(kinds(&s), vec![ConflictType::WriteWrite], "{field}");
    }
    // The same path but different kinds are different resources.
    let s = state(vec![
        writes("a", "p1", vec![file("notes")]),
        writes(
            "b",
            "p2",
            vec![Resource {
                kind: "branch".into(),
                path: Some("notes".into()),
                ..Resource::default()
            }],
        ),
    ]);
    assert!(detect(&s).unwrap().is_empty());
}

#[test]
fn a_directory_covers_what_is_beneath_it_at_a_slash_boundary() {
    for (directory, path, overlaps) in [
        ("docs", "docs/a.md", true),
        ("docs", "docs/deep/er/b.md", true),
        ("docs", "doc/a.md", false),
        ("docs", "docsx/a.md", false),
        ("docs", "docs", false), // a file named like the directory is another kind
        ("/srv", "/srv/www/index.html", true),
        ("/srv", "srv/a", false), // absolute and relative are different places
        ("/", "/etc/hosts", true),
        ("/", "etc/hosts", false),
        ("", "a.md", true), // the relative root: the whole workspace
        ("", "/etc/hosts", false),
        ("docs/", "docs/a.md", true), // normalised
    ] {
        let s = state(vec![
            writes("dir", "p1", vec![dir(directory)]),
            writes("file", "p2", vec![file(path)]),
        ]);
        assert_eq!(
            !detect(&s).unwrap().is_empty(),
            overlaps,
            "`{directory}` and `{path}`"
        );
        // The same either way round.
        let s = state(vec![
            writes("file", "p2", vec![file(path)]),
            writes("dir", "p1", vec![dir(directory)]),
        ]);
        assert_eq!(
            !detect(&s).unwrap().is_empty(),
            overlaps,
            "`{path}` and `{directory}`"
        );
    }
}

#[test]
fn paths_are_normalised_and_one_climbing_out_is_invalid_input() {
    assert_eq!(normalise_path("docs\\a.md").as_deref(), Some("docs/a.md"));
    assert_eq!(
        normalise_path("./docs/../docs/a.md/").as_deref(),
        Some("docs/a.md")
    );
    assert_eq!(normalise_path("/srv//x/./y").as_deref(), Some("/srv/x/y"));
    assert_eq!(normalise_path("../x"), None);
    assert_eq!(normalise_path("a/../../x"), None);
    // Names made of dots are names unless they are `.` or `..`; the fast check
    // for paths already normal must agree with the slow path at every edge.
    for (path, normal) in [
        ("a/.", Some("a")),
        ("a/..", Some("")),
        (".", Some("")),
        ("./a", Some("a")),
        ("a//", Some("a")),
        ("/", Some("/")),
        ("", Some("")),
        ("a/...", Some("a/...")),
        ("..b/.c/d..", Some("..b/.c/d..")),
        ("/srv/x", Some("/srv/x")),
        ("..", None),
    ] {
        assert_eq!(normalise_path(path).as_deref(), normal, "`{path}`");
    }
    let s = state(vec![
        writes("a", "p1", vec![file("docs/./a.md")]),
        writes("b", "p2", vec![file("docs\\tmp\\..\\a.md")]),
    ]);
    assert_eq!(kinds(&s), vec![ConflictType::WriteWrite]);
    let bad = state(vec![writes("a", "p1", vec![file("../outside")])]);
    let err = detect(&bad).unwrap_err();
    assert!(
        err.to_string().contains("action `a`") && err.to_string().contains("../outside"),
        "{err}"
    );
}

#[test]
fn risk_sets_severity_and_policy() {
    let risky = |id: &str, risk: Option<Risk>| Action {
        risk_level: risk,
        verifier_obligations: vec![VerifierObligation {
            id: "v".into(),
            title: "v".into(),
            required: true,
            ..VerifierObligation::default()
        }],
        ..writes(id, "p", vec![file("x")])
    };
    for (a, b, severity, policy) in [
        (None, None, Risk::Low, ConflictPolicy::Warn),
        (Some(Risk::Medium), None, Risk::Medium, ConflictPolicy::Warn),
        (
            Some(Risk::Low),
            Some(Risk::High),
            Risk::High,
            ConflictPolicy::Escalate,
        ),
        (
            Some(Risk::Critical),
            None,
            Risk::Critical,
            ConflictPolicy::Escalate,
        ),
    ] {
        let found = detect(&state(vec![risky("a", a), risky("b", b)])).unwrap();
        assert_eq!(found[0].severity, severity);
        assert_eq!(found[0].policy, policy);
    }
}

#[test]
fn detection_is_deterministic_same_conflicts_same_order_same_ids() {
    let make = || {
        let mut actions = Vec::new();
        for i in 0..40 {
            actions.push(Action {
                risk_level: Some(if i % 7 == 0 { Risk::High } else { Risk::Low }),
                ..writes(
                    &format!("a{i}"),
                    &format!("p{}", i % 5),
                    vec![file(&format!("f{}.md", i % 9)), dir(&format!("d{}", i % 4))],
                )
            });
        }
        state(actions)
    };
    let first = detect(&make()).unwrap();
    let second = detect(&make()).unwrap();
    assert!(!first.is_empty());
    assert_eq!(first, second);
    let ids: std::collections::BTreeSet<&str> = first.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), first.len(), "ids are unique");
    assert!(first.iter().all(|c| c.id.starts_with("cfl_")));
    // An unrelated action added keeps the others' ids.
    let mut more = make();
    more.actions
        .push(writes("zz", "p9", vec![file("elsewhere")]));
    let after = detect(&more).unwrap();
    assert_eq!(after, first);
}
