//! The OpenAPI document and the API reference: checked in at
//! `docs/src/api/openapi.json` and `docs/src/api/reference.md`, generated from the same operations
//! as the router. Regenerate with
//! `REIN_UPDATE_OPENAPI=1 cargo test -p rein-server --test all -- suite::openapi::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use rein_server::{AppState, Auth, openapi, router};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

#[test]
fn the_checked_in_document_matches_the_code() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/api/openapi.json");
    let text = serde_json::to_string_pretty(&openapi::document()).unwrap() + "\n";
    if std::env::var_os("REIN_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == text,
        "docs/src/api/openapi.json is out of date; run REIN_UPDATE_OPENAPI=1 cargo test -p rein-server --test all -- suite::openapi::"
    );
}

#[test]
fn the_checked_in_reference_matches_the_code() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/api/reference.md");
    let text = openapi::reference();
    if std::env::var_os("REIN_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == text,
        "docs/src/api/reference.md is out of date; run REIN_UPDATE_OPENAPI=1 cargo test -p rein-server --test all -- suite::openapi::"
    );
    // Every operation is in it, on its own row.
    for o in rein_protocol::endpoints::ALL {
        let row = format!("| {} | {} | `{}` |", o.name, o.method.as_str(), o.path);
        assert_eq!(text.matches(&row).count(), 1, "{row}");
    }
}

#[test]
fn every_reference_resolves() {
    let doc = openapi::document();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let text = doc.to_string();
    let mut refs = 0;
    for part in text.split("\"$ref\":\"").skip(1) {
        let target = part.split('"').next().unwrap();
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {target}"));
        assert!(schemas.contains_key(name), "{target} does not resolve");
        refs += 1;
    }
    assert!(refs > 20, "{refs}");
    for name in [
        "TaskState",
        "TaskSummary",
        "HarnessEvent",
        "ApprovalRequest",
        "LedgerEntry",
        "HarnessMetrics",
        "Error",
    ] {
        assert!(schemas.contains_key(name), "{name}");
    }
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let built = rein_test_support::engine::engine().build();
    let state = AppState::new(
        built.engine,
        Auth::new(Vec::new()),
        CancellationToken::new(),
    );
    let doc = openapi::document();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let uri = path
                .replace("/tasks/{id}", "/tasks/task_01ARZ3NDEKTSV4RRFFQ69G5FAV")
                .replace(
                    "/snapshots/{id}",
                    "/snapshots/snap_01ARZ3NDEKTSV4RRFFQ69G5FAV",
                )
                .replace(
                    "/approvals/{id}",
                    "/approvals/apr_01ARZ3NDEKTSV4RRFFQ69G5FAV",
                );
            let req = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&uri)
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .unwrap();
            let res = router(state.clone()).oneshot(req).await.unwrap();
            assert_ne!(
                res.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but not served"
            );
            let streaming = res.headers().get("content-type").is_some_and(|v| {
                v.to_str()
                    .unwrap_or_default()
                    .starts_with("text/event-stream")
            });
            if streaming {
                // An endless stream: that it answered as one is the proof.
                checked += 1;
                continue;
            }
            let body = axum::body::to_bytes(res.into_body(), 1 << 20)
                .await
                .unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert!(
                !body["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("no such route"),
                "{method} {path} is documented but not routed"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, rein_protocol::endpoints::ALL.len());
}

/// `/docs/api`: the reference as a page anyone may read, every operation a
/// row and every schema of the document folded under it, with nothing
/// fetched from elsewhere (no script, stylesheet, image or font).
#[tokio::test]
async fn the_reference_is_served_as_one_page_with_no_external_assets() {
    let built = rein_test_support::engine::engine().build();
    let state = AppState::new(
        built.engine,
        Auth::new(Vec::new()),
        CancellationToken::new(),
    );
    let req = Request::builder()
        .uri("/docs/api")
        .body(Body::empty())
        .unwrap();
    let res = router(state).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let headers = res.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("default-src 'none'")
    );
    let page = axum::body::to_bytes(res.into_body(), 8 << 20)
        .await
        .unwrap();
    let page = String::from_utf8(page.to_vec()).unwrap();
    for o in rein_protocol::endpoints::ALL {
        assert!(
            page.contains(&format!("<tr id=\"{}\">", o.name)),
            "{} has no row",
            o.name
        );
    }
    let doc = openapi::document();
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(
            page.contains(&format!("id=\"schema-{name}\"")),
            "{name} is not shown"
        );
    }
    for external in ["<script", "<link", "src=", "url(", "@import"] {
        assert!(
            !page.contains(external),
            "the page loads something: {external}"
        );
    }
}
