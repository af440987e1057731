//! A wire type's unset optional fields are left out of its JSON, not sent as
//! `null` (the types say so once, with `serde_with::skip_serializing_none`),
//! and what is left out reads back as unset; the few fields that are always
//! sent, `null` included, say so with `#[serialize_always]`.

use rein_protocol::{
    api, approval, contract, harness, history, ledger, metrics, permission, plan, seed,
    shared_state, task, usage,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Where `value` holds a `null`, as JSON pointers.
fn nulls(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Null => found.push(at.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                nulls(item, &format!("{at}/{i}"), found);
            }
        }
        Value::Object(fields) => {
            for (name, item) in fields {
                nulls(item, &format!("{at}/{name}"), found);
            }
        }
        _ => {}
    }
}

/// `T::default()` as JSON: its `null`s (none but `always`), and the same
/// value read back.
fn check<T>(name: &str, always: &[&str])
where
    T: Default + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let unset = T::default();
    let json = serde_json::to_value(&unset).unwrap();
    let mut found = Vec::new();
    nulls(&json, "", &mut found);
    assert_eq!(found, always, "{name}: {json}");
    let back: T = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, unset, "{name} reads back from {json}");
}

macro_rules! unset {
    ($($ty:path $(: $($always:literal),+)?;)*) => {
        $(check::<$ty>(stringify!($ty), &[$($($always),+)?]);)*
    };
}

#[test]
fn unset_optional_fields_are_left_out_and_read_back_unset() {
    unset! {
        api::Reason;
        api::ForkRequest;
        api::RetryRequest;
        api::SubmitTask;
        api::CompletionRequest;
        approval::ApprovalContext;
        contract::PlannedAction;
        contract::ToolRequirement;
        contract::VerificationStep;
        contract::RollbackStep;
        contract::Constraint;
        contract::EvidenceSource;
        contract::EvidenceItem;
        contract::EvidenceCheck;
        contract::HumanReview;
        contract::EvidenceRisk;
        contract::UntestedArea;
        contract::EvidenceAssumption;
        harness::SupportContext;
        harness::ModelProvider;
        history::SavedWorkspace;
        ledger::LedgerMetadata;
        ledger::GovernanceDetails;
        ledger::RevokeRequest;
        metrics::TaskMetrics;
        metrics::CheckpointMetrics;
        metrics::HumanLoopMetrics;
        permission::PermissionRule: "/verdict";
        plan::AgentLimits;
        plan::McpServer;
        plan::Pev;
        plan::Goal;
        seed::RecordMetadata;
        shared_state::Resource;
        shared_state::Assumption;
        shared_state::VersionDependency;
        shared_state::VerifierObligation;
        task::TaskContext;
        task::TaskResources;
        usage::Usage;
        usage::ModelInfo;
        usage::UsageLine: "/cost_usd";
        usage::UsageReport: "/cost_usd";
        usage::Budget;
    }
}
