//! JSON Schemas of the wire types, by name. `schemas/` at the repository root holds
//! them as files; a test checks the files match these.

use schemars::{JsonSchema, Schema, schema_for};

/// `value` with every object's keys in order, whether or not serde_json keeps
/// insertion order (a dependency of the workspace turns that on): documents
/// rein publishes read the same however it was built.
pub fn canonical(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

/// Name and schema of every published type.
pub fn all() -> Vec<(&'static str, Schema)> {
    fn one<T: JsonSchema>(name: &'static str) -> (&'static str, Schema) {
        (name, schema_for!(T))
    }
    vec![
        one::<crate::TaskState>("TaskState"),
        one::<crate::TaskSummary>("TaskSummary"),
        one::<crate::Checkpoint>("Checkpoint"),
        one::<crate::TaskDecomposition>("TaskDecomposition"),
        one::<crate::TaskStep>("TaskStep"),
        one::<crate::DecompositionAnswer>("DecompositionAnswer"),
        one::<crate::HarnessEvent>("HarnessEvent"),
        one::<crate::EventType>("EventType"),
        one::<crate::Snapshot>("Snapshot"),
        one::<crate::History>("History"),
        one::<crate::ApprovalRequest>("ApprovalRequest"),
        one::<crate::ApprovalResponse>("ApprovalResponse"),
        one::<crate::LedgerEntry>("LedgerEntry"),
        one::<crate::HarnessMetrics>("HarnessMetrics"),
        one::<crate::SharedHarnessState>("SharedHarnessState"),
        one::<crate::Conflict>("Conflict"),
        one::<crate::PermissionRule>("PermissionRule"),
        one::<crate::HarnessContract>("HarnessContract"),
        one::<crate::EvidenceBundle>("EvidenceBundle"),
        one::<crate::SelectionDecision>("SelectionDecision"),
        one::<crate::AgentSessionInfo>("AgentSessionInfo"),
        one::<crate::plugin::PluginManifest>("plugin/PluginManifest"),
        one::<crate::plugin::InitializeParams>("plugin/InitializeParams"),
        one::<crate::plugin::InitializeResult>("plugin/InitializeResult"),
        one::<crate::plugin::SupportsParams>("plugin/SupportsParams"),
        one::<crate::plugin::SupportsResult>("plugin/SupportsResult"),
        one::<crate::plugin::RunAttemptParams>("plugin/RunAttemptParams"),
        one::<crate::plugin::RunAttemptResult>("plugin/RunAttemptResult"),
        one::<crate::plugin::PartialReplyParams>("plugin/PartialReplyParams"),
        one::<crate::plugin::AgentEventParams>("plugin/AgentEventParams"),
        one::<crate::plugin::IsolatedCompletionParams>("plugin/IsolatedCompletionParams"),
        one::<crate::plugin::IsolatedCompletionResult>("plugin/IsolatedCompletionResult"),
        one::<crate::plugin::ResetParams>("plugin/ResetParams"),
        one::<crate::plugin::ExecutorParams>("plugin/ExecutorParams"),
    ]
}
