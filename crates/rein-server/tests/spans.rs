//! The request span the router opens for every request, seen by a real `tracing`
//! subscriber. It lives in its own test binary with a global subscriber: a
//! thread-local one (`set_default`) races with other tests of the same binary
//! over `tracing`'s per-callsite interest cache, which can leave the span disabled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use rein_server::auth::hash_token;
use rein_server::{AppState, Auth, Role, TokenEntry, router};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

/// Spans named `request` as they were opened and recorded.
#[derive(Clone, Default)]
struct RequestSpans(Arc<Mutex<Vec<(tracing::span::Id, String)>>>);

struct Line<'a>(&'a mut String);

impl tracing::field::Visit for Line<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RequestSpans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "request" {
            let mut line = String::new();
            attrs.record(&mut Line(&mut line));
            self.0.lock().unwrap().push((id.clone(), line));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some((_, line)) = self.0.lock().unwrap().iter_mut().find(|(i, _)| i == id) {
            values.record(&mut Line(line));
        }
    }
}

#[tokio::test]
async fn every_request_gets_a_span_in_the_http_semantic_conventions() {
    let spans = RequestSpans::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans.clone()))
        .unwrap();
    let built = rein_test_support::engine::engine().build();
    let state = AppState::new(
        built.engine.clone(),
        Auth::new(vec![TokenEntry {
            name: "otto".into(),
            role: Role::Operator,
            sha256: hash_token("operator-token"),
        }]),
        CancellationToken::new(),
    );
    for (path, status) in [
        ("/healthz", StatusCode::OK),
        ("/admin/tasks", StatusCode::UNAUTHORIZED),
    ] {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let res = router(state.clone()).oneshot(req).await.unwrap();
        assert_eq!(res.status(), status, "{path}");
    }
    let lines: Vec<String> = spans
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(_, l)| l.clone())
        .collect();
    // In the HTTP semantic conventions: named after the method and the
    // route's template, of kind server.
    assert_eq!(
        lines,
        vec![
            " otel.name=GET /healthz otel.kind=\"server\" http.request.method=GET url.path=/healthz http.route=\"/healthz\" http.response.status_code=200".to_owned(),
            " otel.name=GET /admin/tasks otel.kind=\"server\" http.request.method=GET url.path=/admin/tasks http.route=\"/admin/tasks\" http.response.status_code=401".to_owned(),
        ]
    );
}
