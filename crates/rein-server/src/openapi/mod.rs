//! The API's operations ([`rein_protocol::endpoints`]) bound to their
//! handlers: the router is built from this table, and the OpenAPI document
//! from the same operations, so the two cannot drift apart. The document's
//! schemas are derived from the request, response and query types each
//! operation names. `docs/src/api/openapi.json` is the document as generated and
//! `docs/src/api/reference.md` the reference a person reads; a test fails when either is
//! out of date.
//!
//! Layout: [`document`] (the OpenAPI document), `generators` (the document
//! spelled for client generators), [`reference`] (the reference: Markdown for
//! the book, HTML for `/docs/api`), `serve` (the two routes that serve them).

mod document;
mod generators;
mod reference;
mod serve;

pub use document::document;
use generators::*;
pub use reference::{html as reference_html, reference};

use axum::handler::Handler;
use axum::routing::{MethodFilter, MethodRouter};
use rein_protocol::api::*;
use rein_protocol::endpoints::{self, Content, Endpoint, Method, Operation};
use schemars::SchemaGenerator;
use serde_json::{Map, Value, json};

use crate::{AppState, events, routes};

/// One operation and the handler that serves it.
pub struct Route {
    pub operation: Operation,
    pub handler: MethodRouter<AppState>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("operation", &self.operation.name)
            .finish()
    }
}

/// Serves operation `E` with `handler`, on `E`'s method (GET takes HEAD too).
fn bind<E: Endpoint, T: 'static>(handler: impl Handler<T, AppState>) -> Route {
    let filter = match E::OPERATION.method {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
        Method::Delete => MethodFilter::DELETE,
    };
    Route {
        operation: E::OPERATION,
        handler: axum::routing::on(filter, handler),
    }
}

/// Every operation the server serves, each once: a test holds this to
/// [`endpoints::ALL`].
pub fn table() -> Vec<Route> {
    use crate::{records, sessions, shared_state};
    use endpoints::*;
    use routes::*;
    vec![
        bind::<Healthz, _>(healthz),
        bind::<OpenApiDocument, _>(serve::openapi_document),
        bind::<ApiDocs, _>(serve::api_docs),
        bind::<MetricsText, _>(metrics_text),
        bind::<OpenSession, _>(open_session),
        bind::<Metrics, _>(metrics_json),
        bind::<Usage, _>(usage_report),
        bind::<ListTasks, _>(list_tasks),
        bind::<CreateTask, _>(submit_task),
        bind::<ListHarnesses, _>(list_harnesses),
        bind::<ExplainHarness, _>(explain_harness),
        bind::<ListAgentSessions, _>(sessions::list_sessions),
        bind::<ShowAgentSession, _>(sessions::show_session),
        bind::<ResetAgentSession, _>(sessions::reset_session),
        bind::<PinAgentSession, _>(sessions::pin_session),
        bind::<DelegateAgentSession, _>(sessions::delegate_session),
        bind::<Complete, _>(complete),
        bind::<ShowTask, _>(show_task),
        bind::<DeleteTask, _>(delete_task),
        bind::<TaskEvents, _>(task_events),
        bind::<TaskEventStream, _>(events::task_stream),
        bind::<EventStream, _>(events::all_stream),
        bind::<PauseTask, _>(pause_task),
        bind::<AbortTask, _>(abort_task),
        bind::<ResumeTask, _>(resume_task),
        bind::<ResumeAll, _>(resume_all),
        bind::<TaskPlan, _>(task_plan),
        bind::<TaskHistory, _>(task_history),
        bind::<ForkTask, _>(fork_task),
        bind::<RetryTask, _>(retry_task),
        bind::<ListSnapshots, _>(list_snapshots),
        bind::<TakeSnapshot, _>(snapshot_task),
        bind::<RestoreSnapshot, _>(restore_snapshot),
        bind::<ListApprovals, _>(list_approvals),
        bind::<ShowApproval, _>(show_approval),
        bind::<Decide, _>(decide),
        bind::<ListSharedStates, _>(shared_state::list),
        bind::<CreateSharedState, _>(shared_state::create),
        bind::<ShowSharedState, _>(shared_state::show),
        bind::<SessionSharedState, _>(shared_state::of_session),
        bind::<AddParticipant, _>(shared_state::add_participant),
        bind::<AddAction, _>(shared_state::add_action),
        bind::<DetectConflicts, _>(shared_state::detect),
        bind::<ListContracts, _>(records::list_contracts),
        bind::<CreateContract, _>(records::create_contract),
        bind::<ShowContract, _>(records::show_contract),
        bind::<ChangeContractStatus, _>(records::change_status),
        bind::<ListEvidence, _>(records::list_evidence),
        bind::<CreateEvidence, _>(records::create_evidence),
        bind::<ShowEvidence, _>(records::show_evidence),
        bind::<AddEvidenceItem, _>(records::add_item),
        bind::<AddEvidenceCheck, _>(records::add_check),
        bind::<AddEvidenceReview, _>(records::add_review),
        bind::<Audit, _>(shared_state::audit),
        bind::<AuditStream, _>(shared_state::audit_stream),
        bind::<Ledger, _>(ledger),
        bind::<VerifyLedger, _>(verify_ledger),
        bind::<DisablePlugin, _>(disable_plugin),
        bind::<EnablePlugin, _>(enable_plugin),
        bind::<RevokePlugin, _>(revoke_plugin),
        bind::<ReloadPlugin, _>(reload_plugin),
        bind::<ListGovernance, _>(crate::governance::list),
        bind::<AddGovernance, _>(crate::governance::add),
        bind::<ShowGovernance, _>(crate::governance::show),
        bind::<RevokeGovernance, _>(crate::governance::revoke),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_served_once_and_nothing_else_is() {
        let mut served: Vec<&str> = table().iter().map(|r| r.operation.name).collect();
        let mut defined: Vec<&str> = endpoints::ALL.iter().map(|o| o.name).collect();
        served.sort_unstable();
        defined.sort_unstable();
        assert_eq!(served, defined);
        let unique = served.len();
        served.dedup();
        assert_eq!(served.len(), unique, "an operation is bound twice");
    }
}
