//! The dashboard's static files, embedded in the binary (no front-end
//! toolchain at build or run time): `services/gateway/admin-ui/`. A
//! single page with hash routing, so `/admin` is the only page URL.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::App;

/// The dashboard's policy: scripts, styles and requests only from here, no
/// inline code, never framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const INDEX: &[u8] = include_bytes!("../../admin-ui/index.html");

/// (name, content type, bytes) of everything under `/admin/assets/`.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../admin-ui/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../admin-ui/app.js"),
    ),
    (
        "graph.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../admin-ui/graph.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../admin-ui/charts.js"),
    ),
];

pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/admin", get(index))
        .route("/admin/", get(index))
        .route("/admin/assets/{name}", get(asset))
}

fn with_headers(content_type: &'static str, body: &'static [u8]) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    // Small files; revalidated so a new release is picked up at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn index() -> Response {
    with_headers("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(file, _, _)| *file == name) {
        Some((_, content_type, body)) => with_headers(content_type, body),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
