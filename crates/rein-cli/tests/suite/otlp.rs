//! Span export over OTLP: `rein run` with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! pointing at a collector on loopback (a small axum server standing in for an
//! OpenTelemetry Collector). It takes protobuf bodies only, as receivers that
//! follow the OTLP default do, and decodes them with the official OTLP
//! definitions (`opentelemetry-proto`); or JSON, when rein is told
//! `http/json`. Over gRPC the collector is the official definitions' own
//! `TraceService` server (tonic), as the Collector's OTLP/gRPC receiver is.
//! The exported spans carry the trace id every event of the task carries. An
//! endpoint that refuses them gets one warning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::{json, rein, run_ok, show, task_ids, write_plan};
use serde_json::Value;

type Received = Arc<Mutex<Vec<Value>>>;

/// Two command steps, one after the other.
const TRACED: &str = "description='traced'\n[[steps]]\nid='a'\nrun='true'\n[[steps]]\nid='b'\nrun='true'\ndepends_on=['a']\n";

/// A collector's `/v1/traces`: protobuf (decoded with the official
/// definitions, then kept in the JSON mapping the assertions read), or JSON.
async fn traces(
    State(received): State<Received>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let decoded = if json {
        serde_json::from_slice(&body).ok()
    } else {
        use prost::Message as _;
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(body)
            .ok()
            .map(|r| as_json(&r))
    };
    match decoded {
        Some(mut v) => {
            v["contentType"] = Value::from(if json { "json" } else { "protobuf" });
            v["team"] = headers
                .get("x-team")
                .and_then(|t| t.to_str().ok())
                .map_or(Value::Null, Value::from);
            received.lock().unwrap().push(v);
            (StatusCode::OK, "{}")
        }
        None => (StatusCode::BAD_REQUEST, "{}"),
    }
}

/// A decoded protobuf request in the OTLP/JSON shape (ids in hex).
fn as_json(
    request: &opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
) -> Value {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let spans: Vec<Value> = request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(|s| {
            let attributes: Vec<Value> = s
                .attributes
                .iter()
                .map(|kv| {
                    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
                    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(V::StringValue(s)) => serde_json::json!({ "stringValue": s }),
                        Some(V::IntValue(i)) => serde_json::json!({ "intValue": i.to_string() }),
                        Some(V::BoolValue(b)) => serde_json::json!({ "boolValue": b }),
                        other => serde_json::json!({ "other": format!("{other:?}") }),
                    };
                    serde_json::json!({ "key": kv.key, "value": value })
                })
                .collect();
            serde_json::json!({
                "name": s.name,
                "traceId": hex(&s.trace_id),
                "spanId": hex(&s.span_id),
                "parentSpanId": hex(&s.parent_span_id),
                "kind": s.kind,
                "attributes": attributes,
            })
        })
        .collect();
    serde_json::json!({ "resourceSpans": [{ "scopeSpans": [{ "spans": spans }] }] })
}

/// An exported span, as the collector received it.
#[derive(Debug)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client.
    kind: i64,
    attributes: Vec<(String, String)>,
}

impl Exported {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn spans(received: &[Value]) -> Vec<Exported> {
    let mut out = Vec::new();
    for body in received {
        for rs in body["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    let attrs = s["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let v = &a["value"];
                            let v = v["stringValue"]
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| v.to_string());
                            (a["key"].as_str().unwrap_or_default().to_owned(), v)
                        })
                        .collect();
                    out.push(Exported {
                        name: s["name"].as_str().unwrap_or_default().to_owned(),
                        trace_id: s["traceId"].as_str().unwrap_or_default().to_owned(),
                        span_id: s["spanId"].as_str().unwrap_or_default().to_owned(),
                        parent_span_id: s["parentSpanId"].as_str().unwrap_or_default().to_owned(),
                        kind: s["kind"].as_i64().unwrap_or_default(),
                        attributes: attrs,
                    });
                }
            }
        }
    }
    out
}

/// The OTLP/gRPC trace service: what it is sent, decoded by tonic.
struct Grpc(Received);

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
        >,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        let mut v = as_json(request.get_ref());
        v["contentType"] = Value::from("grpc");
        v["team"] = request
            .metadata()
            .get("x-team")
            .and_then(|t| t.to_str().ok())
            .map_or(Value::Null, Value::from);
        self.0.lock().unwrap().push(v);
        Ok(tonic::Response::new(
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse {
                partial_success: None,
            },
        ))
    }
}

/// A gRPC collector on loopback: its address, and what it received.
async fn grpc_collector() -> (std::net::SocketAddr, Received) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(Grpc(Arc::clone(&received)));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (addr, received)
}

/// A collector on loopback: its address, and what it received.
async fn collector() -> (std::net::SocketAddr, Received) {
    let received = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .with_state(Arc::clone(&received));
    let addr = rein_test_support::model::serve(app).await;
    (addr, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_spans_reach_a_protobuf_collector_with_the_tasks_trace_id() {
    exported_with_the_tasks_trace_id(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_as_json_when_the_protocol_says_so() {
    exported_with_the_tasks_trace_id(Some("http/json")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_over_grpc_when_the_protocol_says_so() {
    exported_with_the_tasks_trace_id(Some("grpc")).await;
}

/// `rein run PLAN` with its spans exported to the collector at `addr`, on a
/// blocking thread (`more` tells the run what else it needs): the task as
/// `rein tasks show` shows it, and its events.
async fn run_exported(
    addr: std::net::SocketAddr,
    data: std::path::PathBuf,
    plan: std::path::PathBuf,
    more: impl FnOnce(&mut std::process::Command) + Send + 'static,
) -> (Value, Value) {
    tokio::task::spawn_blocking(move || {
        let mut run = rein(&data);
        run.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
        more(&mut run);
        run_ok(run.arg("run").arg(&plan));
        let id = task_ids(&data).remove(0);
        let events = json(&run_ok(
            rein(&data).args(["tasks", "events", &id, "--json"]),
        ));
        (show(&data, &id), events)
    })
    .await
    .unwrap()
}

/// Runs the traced plan exporting as `settings` say (one span a batch); the
/// export warnings it printed, and all its stderr.
async fn export_warnings(settings: Vec<(&'static str, String)>) -> (Vec<String>, String) {
    let (_dir, data, plan) = common::with_plan("p.toml", TRACED);
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = rein(&data);
        for var in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ] {
            cmd.env_remove(var);
        }
        run_ok(
            cmd.envs(settings)
                .env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
                .arg("run")
                .arg(&plan),
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("spans could not be exported"))
        .map(str::to_owned)
        .collect();
    (warnings, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_refuses_spans_gets_one_warning_naming_it() {
    let (addr, _) = collector().await;
    // Not a collector's traces path: 404 for every batch.
    let (warnings, stderr) = export_warnings(vec![(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("http://{addr}/nowhere"),
    )])
    .await;
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains(&format!("http://{addr}/nowhere")) && warnings[0].contains("404"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_endpoint_nobody_listens_on_gets_one_warning_naming_it() {
    // A port that was free a moment ago: the connection is refused.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (warnings, stderr) = export_warnings(vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
    ])
    .await;
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains(&format!("http://{addr}")), "{stderr}");
}

async fn exported_with_the_tasks_trace_id(protocol: Option<&'static str>) {
    let (addr, received) = if protocol == Some("grpc") {
        grpc_collector().await
    } else {
        collector().await
    };

    let (_dir, data, plan) = common::with_plan("p.toml", TRACED);
    let (task, events) = run_exported(addr, data, plan, move |run| {
        run.envs(protocol.map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p)))
            .env("OTEL_EXPORTER_OTLP_HEADERS", "x-team=docs");
    })
    .await;
    let trace_id = task["trace_id"].as_str().expect("trace_id").to_owned();
    let root_span = task["span_id"].as_str().expect("span_id").to_owned();

    // The process flushes its spans before it exits, in the protocol asked
    // for (protobuf unless told otherwise).
    let received = received.lock().unwrap().clone();
    let wanted = match protocol {
        Some("http/json") => "json",
        Some("grpc") => "grpc",
        _ => "protobuf",
    };
    assert!(!received.is_empty());
    assert!(
        received.iter().all(|r| r["contentType"] == wanted),
        "{received:?}"
    );
    // With the headers OTEL_EXPORTER_OTLP_HEADERS names.
    assert!(received.iter().all(|r| r["team"] == "docs"), "{received:?}");
    let spans = spans(&received);
    let task_spans: Vec<&Exported> = spans.iter().filter(|s| s.name == "task").collect();
    assert_eq!(task_spans.len(), 1, "{spans:?}");
    let run = task_spans[0];
    assert_eq!(run.trace_id, trace_id);
    assert_eq!(
        run.parent_span_id, root_span,
        "the task's root span is the run's parent"
    );
    assert_eq!(run.attribute("task_id"), task["id"].as_str(), "{run:?}");
    // The parent itself is exported, by the run that ended the task: a root
    // with the task's own ids, so a viewer shows no missing parent.
    let roots: Vec<&Exported> = spans.iter().filter(|s| s.name == "task_root").collect();
    assert_eq!(roots.len(), 1, "{spans:?}");
    assert_eq!(roots[0].span_id, root_span);
    assert_eq!(roots[0].trace_id, trace_id);
    assert_eq!(roots[0].parent_span_id, "", "{:?}", roots[0]);
    assert_eq!(roots[0].attribute("status"), Some("completed"));
    let mut steps: Vec<&str> = spans
        .iter()
        .filter(|s| s.name == "step")
        .map(|s| {
            assert_eq!(s.trace_id, trace_id, "a step span is in the task's trace");
            s.attribute("step_id").unwrap()
        })
        .collect();
    steps.sort_unstable();
    assert_eq!(steps, vec!["a", "b"]);
    // A step's exported span has the span id its events carry, so a person
    // goes from an event to its span.
    let event_spans: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["checkpoint_id"].is_string())
        .filter_map(|e| e["span_id"].as_str())
        .collect();
    for step in spans.iter().filter(|s| s.name == "step") {
        assert_eq!(
            Some(step.span_id.as_str()),
            step.attribute("span_id"),
            "{step:?}"
        );
        assert!(
            event_spans.contains(&step.span_id.as_str()),
            "{step:?} {event_spans:?}"
        );
    }
}

use rein_test_support::model as fake;

/// Each model turn of an agent step is a span in the GenAI semantic
/// conventions, in the task's trace, with the usage the server reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_turns_are_spans_with_gen_ai_usage_attributes() {
    let (addr, received) = collector().await;
    let (base, seen) = fake::fake_model().await;
    let (_dir, data, plan) = common::with_plan(
        "agent.toml",
        "description = \"notes\"\n[[steps]]\nid = \"agent\"\nkind = \"agent\"\nprompt = \"write notes\"\ntools = [\"write_file\", \"run_command\"]\n",
    );
    let (task, _) = run_exported(addr, data, plan, move |run| {
        run.env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-test")
            .env("REIN_MODEL", "gpt-test");
    })
    .await;
    let requests = seen.0.lock().unwrap().clone();
    let spans = spans(&received.lock().unwrap().clone());
    let chats: Vec<&Exported> = spans.iter().filter(|s| s.name == "chat gpt-test").collect();
    assert_eq!(chats.len(), requests.len(), "{spans:?}");
    let int = |s: &Exported, key: &str| -> u64 {
        let v: Value = serde_json::from_str(s.attribute(key).unwrap()).unwrap();
        v["intValue"]
            .as_str()
            .unwrap_or_else(|| panic!("{key}: {v} of {s:?}"))
            .parse()
            .unwrap()
    };
    for s in &chats {
        assert_eq!(s.trace_id, task["trace_id"].as_str().unwrap());
        assert_eq!(s.attribute("gen_ai.operation.name"), Some("chat"));
        assert_eq!(s.attribute("gen_ai.provider.name"), Some("openai"));
        assert_eq!(s.attribute("gen_ai.request.model"), Some("gpt-test"));
        assert_eq!(s.attribute("gen_ai.response.model"), Some("gpt-test-0001"));
        assert_eq!(s.attribute("rein.step_id"), Some("agent"));
    }
    let sum = |key: &str| chats.iter().map(|s| int(s, key)).sum::<u64>();
    let reported = |field: &str| common::reported(&requests, field);
    assert_eq!(sum("gen_ai.usage.input_tokens"), reported("/prompt_tokens"));
    assert_eq!(
        sum("gen_ai.usage.output_tokens"),
        reported("/completion_tokens")
    );
    assert_eq!(
        sum("gen_ai.usage.cache_read.input_tokens"),
        reported("/prompt_tokens_details/cached_tokens")
    );
}

/// A caller's W3C trace context: trace and span ids, sampled.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_under_traceparent_is_in_the_callers_trace_and_its_approve_step_has_a_span() {
    let (addr, received) = collector().await;
    let (dir, data) = common::scratch();
    // The person does not answer: the deadline passes and approves.
    let plan = write_plan(
        dir.path(),
        "p.toml",
        "description='traced approval'\n[[steps]]\nid='ship'\nkind='approve'\ntitle='Ship it?'\ntimeout='1s'\ndefault='approve'\n[[steps]]\nid='after'\nrun='true'\ndepends_on=['ship']\n",
    );
    let (task, events) = run_exported(addr, data, plan, |run| {
        run.env("TRACEPARENT", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"));
    })
    .await;
    assert_eq!(task["status"], "completed", "{task}");
    // The task is in the caller's trace.
    assert_eq!(task["trace_id"], CALLER_TRACE);
    let spans = spans(&received.lock().unwrap().clone());
    assert!(
        spans.iter().all(|s| s.trace_id == CALLER_TRACE),
        "{spans:?}"
    );
    // The command's own span is the caller's child; the task's root is the
    // command's child.
    let command = spans
        .iter()
        .find(|s| s.name == "rein")
        .expect("the command's span");
    assert_eq!(command.parent_span_id, CALLER_SPAN);
    let root = spans
        .iter()
        .find(|s| s.name == "task_root")
        .expect("a root");
    assert_eq!(root.span_id, task["span_id"].as_str().unwrap());
    assert_eq!(root.parent_span_id, command.span_id, "{root:?}");
    // The approve step's wait is a span, with the id its events carry.
    let approve = spans
        .iter()
        .find(|s| s.name == "approve")
        .expect("an approve span");
    assert_eq!(approve.attribute("step_id"), Some("ship"));
    assert_eq!(approve.attribute("decision"), Some("approve"));
    assert_eq!(approve.parent_span_id, root.span_id);
    let ship_spans: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "human_approval_requested")
        .filter_map(|e| e["span_id"].as_str())
        .collect();
    assert_eq!(ship_spans, vec![approve.span_id.as_str()], "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_request_is_a_server_span_in_the_http_conventions_under_its_traceparent() {
    let (collector_addr, received) = collector().await;
    let (_dir, data) = common::scratch();
    let token = "otlp-test-token-0123";
    let (mut server, addr) = tokio::task::spawn_blocking({
        let data = data.clone();
        move || {
            let mut exporting = rein(&data);
            exporting
                .env(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://{collector_addr}"),
                )
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
            common::serve(exporting, token)
        }
    })
    .await
    .unwrap();
    // One request, under the caller's trace context.
    let traced = |addr: String, head: String, body: &'static str| {
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(&addr).unwrap();
            write!(
                stream,
                "{head} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\ntraceparent: 00-{CALLER_TRACE}-{CALLER_SPAN}-01\r\nContent-Type: application/toml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            let status = response.split_whitespace().nth(1).unwrap().to_owned();
            let body = response
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_owned())
                .unwrap_or_default();
            (status, body)
        })
    };
    let (status, _) = traced(addr.clone(), "GET /admin/tasks?limit=5".into(), "")
        .await
        .unwrap();
    assert_eq!(status, "200");
    // A task made by a traced request is in the caller's trace.
    let (status, created) = traced(addr.clone(), "POST /admin/tasks".into(), TRACED)
        .await
        .unwrap();
    assert_eq!(status, "201", "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["task"]["trace_id"], CALLER_TRACE, "{created}");
    // The server exports in batches: stopped (SIGTERM), it flushes.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tokio::task::spawn_blocking(move || server.0.wait().unwrap())
        .await
        .unwrap();
    let spans = spans(&received.lock().unwrap().clone());
    let request = spans
        .iter()
        .find(|s| s.name == "GET /admin/tasks")
        .unwrap_or_else(|| panic!("no request span: {spans:?}"));
    assert_eq!(request.kind, 2, "kind server: {request:?}");
    assert_eq!(request.trace_id, CALLER_TRACE);
    assert_eq!(request.parent_span_id, CALLER_SPAN);
    assert_eq!(request.attribute("http.request.method"), Some("GET"));
    assert_eq!(request.attribute("url.path"), Some("/admin/tasks"));
    assert_eq!(request.attribute("http.route"), Some("/admin/tasks"));
    assert_eq!(
        request.attribute("http.response.status_code"),
        Some("{\"intValue\":\"200\"}"),
        "{request:?}"
    );
}
