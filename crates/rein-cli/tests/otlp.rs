//! Span export over OTLP/HTTP: `rein run` with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! pointing at a collector on loopback (a small axum server standing in for an
//! OpenTelemetry Collector, speaking OTLP/HTTP with JSON bodies). The exported
//! spans carry the trace id every event of the task carries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::{rein, run_ok, show, task_ids, write_plan};
use serde_json::Value;

type Received = Arc<Mutex<Vec<Value>>>;

async fn traces(State(received): State<Received>, body: Bytes) -> (StatusCode, &'static str) {
    match serde_json::from_slice(&body) {
        Ok(v) => {
            received.lock().unwrap().push(v);
            (StatusCode::OK, "{}")
        }
        Err(_) => (StatusCode::BAD_REQUEST, "{}"),
    }
}

/// An exported span, as the collector received it.
#[derive(Debug)]
struct Exported {
    name: String,
    trace_id: String,
    parent_span_id: String,
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
                        parent_span_id: s["parentSpanId"].as_str().unwrap_or_default().to_owned(),
                        attributes: attrs,
                    });
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_spans_are_exported_with_the_tasks_trace_id() {
    let received = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plan = write_plan(
        dir.path(),
        "p.toml",
        "description='traced'\n[[steps]]\nid='a'\nrun='true'\n[[steps]]\nid='b'\nrun='true'\ndepends_on=['a']\n",
    );
    let task = tokio::task::spawn_blocking(move || {
        run_ok(
            rein(&data)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .arg("run")
                .arg(&plan),
        );
        let id = task_ids(&data).remove(0);
        show(&data, &id)
    })
    .await
    .unwrap();
    let trace_id = task["trace_id"].as_str().expect("trace_id").to_owned();
    let root_span = task["span_id"].as_str().expect("span_id").to_owned();

    // The process flushes its spans before it exits.
    let received = received.lock().unwrap().clone();
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
}
