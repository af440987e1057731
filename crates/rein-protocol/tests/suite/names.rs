//! Every enum's `as_str` is its wire name (what serde writes), so messages,
//! pages and queries that use the name agree with the JSON.
#![allow(clippy::unwrap_used)]

use rein_protocol::approval::{ApprovalStatus, Decision, Priority, Trigger};
use rein_protocol::harness::{PolicySource, SelectionReason, WorkspaceKind};
use rein_protocol::{ParticipantRole, WorkStatus};
use serde::Serialize;

fn wire<T: Serialize>(value: T) -> String {
    serde_json::to_value(value)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn approval_names_are_the_wire_names() {
    for t in Trigger::ALL {
        assert_eq!(t.as_str(), wire(t));
        assert_eq!(t.priority().as_str(), wire(t.priority()));
    }
    assert_eq!(Priority::Critical.as_str(), wire(Priority::Critical));
    for s in ApprovalStatus::ALL {
        assert_eq!(s.as_str(), wire(s));
    }
    for d in [
        Decision::Approve,
        Decision::Deny,
        Decision::Skip,
        Decision::Delegate,
    ] {
        assert_eq!(d.as_str(), wire(d));
    }
}

#[test]
fn harness_and_ledger_names_are_the_wire_names() {
    for k in [WorkspaceKind::ProviderHosted, WorkspaceKind::Local] {
        assert_eq!(k.as_str(), wire(k));
    }
    for s in [
        PolicySource::Session,
        PolicySource::Step,
        PolicySource::Model,
        PolicySource::Provider,
        PolicySource::Default,
    ] {
        assert_eq!(s.as_str(), wire(s));
    }
    for r in [
        SelectionReason::ForcedBuiltin,
        SelectionReason::ForcedPlugin,
        SelectionReason::PluginDeclaredFallback,
        SelectionReason::AutoPlugin,
        SelectionReason::AutoBuiltin,
    ] {
        assert_eq!(r.as_str(), wire(r));
    }
    for k in [
        rein_protocol::LedgerKind::Approved,
        rein_protocol::LedgerKind::Rejected,
        rein_protocol::LedgerKind::Skipped,
        rein_protocol::LedgerKind::Delegated,
        rein_protocol::LedgerKind::Escalated,
        rein_protocol::LedgerKind::Expired,
        rein_protocol::LedgerKind::Revoked,
    ] {
        assert_eq!(k.as_str(), wire(k));
    }
}

#[test]
fn shared_state_names_are_the_wire_names() {
    use rein_protocol::{ConflictPolicy, Risk};
    for s in WorkStatus::ALL {
        assert_eq!(s.as_str(), wire(s));
        assert_eq!(WorkStatus::parse(s.as_str()), Some(s));
    }
    assert_eq!(WorkStatus::parse("sleepy"), None);
    for r in [Risk::Low, Risk::Medium, Risk::High, Risk::Critical] {
        assert_eq!(r.as_str(), wire(r));
    }
    for p in [
        ConflictPolicy::Allow,
        ConflictPolicy::Warn,
        ConflictPolicy::Serialize,
        ConflictPolicy::Escalate,
        ConflictPolicy::Reject,
    ] {
        assert_eq!(p.as_str(), wire(p));
    }
    for c in [
        rein_protocol::ConflictStatus::Open,
        rein_protocol::ConflictStatus::Resolved,
        rein_protocol::ConflictStatus::Dismissed,
    ] {
        assert_eq!(c.as_str(), wire(c));
    }
    for role in [
        "manager",
        "planner",
        "coder",
        "reviewer",
        "tester",
        "security_reviewer",
        "ops_verifier",
        "docs_writer",
        "researcher",
        "operator",
        "custom",
    ] {
        let parsed: ParticipantRole = serde_json::from_value(serde_json::json!(role)).unwrap();
        assert_eq!(parsed.as_str(), role);
    }
}

#[test]
fn token_counts_are_grouped_in_thousands() {
    use rein_protocol::usage::thousands;
    for (n, shown) in [
        (0, "0"),
        (7, "7"),
        (999, "999"),
        (1_000, "1,000"),
        (65_536, "65,536"),
        (1_234_567, "1,234,567"),
        (u64::MAX, "18,446,744,073,709,551,615"),
    ] {
        assert_eq!(thousands(n), shown);
    }
}
