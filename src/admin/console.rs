//! The admin console: static HTML, CSS and JS embedded in the binary and
//! served at `/console/`. The page holds no data and no token: it asks for
//! the admin token in a login form, keeps it in `sessionStorage`, and calls
//! the bearer-protected JSON API from JavaScript.
//!
//! Rule: every console answer carries a strict Content-Security-Policy
//! (`default-src 'self'`, no inline script or style), `frame-ancestors
//! 'none'` + `X-Frame-Options: DENY`, `Referrer-Policy: no-referrer` and
//! `nosniff`; nothing is loaded from anywhere but this origin.

use crate::state::AppState;
use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/app.js");
const STYLE: &str = include_str!("../../console/app.css");

/// The policy of every console response.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

pub fn routes() -> Router<AppState> {
    Router::new()
        // A browser pointed at the host finds the console. Not permanent:
        // the console moves when `admin_listen` is set.
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/app.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut res = body.into_response();
    let h = res.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    res
}
