//! The two routes that serve the API's own description: the OpenAPI
//! document and the reference page made from it.

use axum::response::{IntoResponse, Response};

use super::document::document;
use super::reference::html as reference_html;

/// The OpenAPI document of the routes, made once.
pub async fn openapi_document() -> Response {
    static DOCUMENT: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| document().to_string());
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

/// The API reference as one HTML page, made once.
pub async fn api_docs() -> Response {
    static PAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(reference_html);
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                axum::http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        PAGE.as_str(),
    )
        .into_response()
}
