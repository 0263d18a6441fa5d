//! Loopback GitHub and PayPal APIs with the subset reconciliation uses; a
//! resend request makes the fake POST the event, correctly signed, to the
//! gateway's `/webhooks/<source>` (as the real provider would), so it is
//! accepted only through normal verification.
//!
//! GitHub (shapes from
//! <https://docs.github.com/en/rest/repos/webhooks#list-deliveries-for-a-repository-webhook>
//! and
//! <https://docs.github.com/en/rest/repos/webhooks#redeliver-a-delivery-for-a-repository-webhook>):
//! `GET /repos/{o}/{r}/hooks/{id}/deliveries?per_page=&cursor=` (newest
//! first, next page in `Link`), `POST …/deliveries/{delivery_id}/attempts`
//! → 202, `Authorization: Bearer <token>`. A GitHub App's own hook
//! (<https://docs.github.com/en/rest/apps/webhooks>): the same below
//! `/app/hook`, authenticated with a JWT that the fake verifies as GitHub
//! documents it
//! (<https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app>):
//! RS256 signature by the App's key, `iss` the App's id, `exp` at most 10
//! minutes after `iat` and not past; anything else is a 401.
//!
//! PayPal (<https://developer.paypal.com/docs/api/webhooks/v1/> and
//! <https://developer.paypal.com/api/rest/authentication/>): `POST
//! /v1/oauth2/token` (Basic client id:secret) → access token;
//! `GET /v1/notifications/webhooks-events?page_size=&start_time=&end_time=`
//! (events created between the two times) → `{events, count, links[rel=next]}`; `POST
//! /v1/notifications/webhooks-events/{id}/resend` `{"webhook_ids": […]}` → 202.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::signature::Verifier;
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where resends go, once the gateway's address is known.
#[derive(Default)]
struct Gateway(Mutex<Option<String>>);

impl Gateway {
    /// POSTs `body` with `headers` to `<gateway>/webhooks/<source>`, waiting
    /// for the address if the gateway is still starting.
    fn send(self: &Arc<Self>, source: &str, headers: Vec<(String, String)>, body: Vec<u8>) {
        let me = self.clone();
        let source = source.to_owned();
        tokio::spawn(async move {
            let base = loop {
                if let Some(b) = me.0.lock().unwrap().clone() {
                    break b;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let mut req = reqwest::Client::new()
                .post(format!("{base}/webhooks/{source}"))
                .header("content-type", "application/json");
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let res = req.body(body).send().await.unwrap();
            assert!(
                res.status().is_success(),
                "gateway answered {}",
                res.status()
            );
        });
    }
}

fn bearer(headers: &HeaderMap, token: &str) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {token}"))
}

/// How the fake GitHub checks a caller.
enum GhAuth {
    /// A repository hook: this token.
    Token(String),
    /// An App hook: a JWT issued by App `id`, signed with its key.
    App {
        id: String,
        key: VerifyingKey<Sha256>,
    },
}

impl GhAuth {
    fn allows(&self, headers: &HeaderMap) -> bool {
        match self {
            Self::Token(token) => bearer(headers, token),
            Self::App { id, key } => {
                let Some(jwt) = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                else {
                    return false;
                };
                app_jwt_ok(jwt, id, key, super::now())
            }
        }
    }
}

/// Whether `jwt` is a token GitHub takes from App `id` at `now`: RS256 over
/// `header.claims` by the App's key, `iss` the App (GitHub takes the client
/// id or the numeric app id), `iat` not in the future (a minute of drift),
/// `exp` not past and at most 10 minutes after `iat`.
fn app_jwt_ok(jwt: &str, id: &str, key: &VerifyingKey<Sha256>, now: i64) -> bool {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, sig] = parts.as_slice() else {
        return false;
    };
    let json = |p: &str| -> Option<serde_json::Value> {
        serde_json::from_slice(&b64.decode(p).ok()?).ok()
    };
    let (Some(header), Some(claims)) = (json(header), json(claims)) else {
        return false;
    };
    if header["alg"] != "RS256" {
        return false;
    }
    let signed = b64
        .decode(sig)
        .ok()
        .and_then(|s| Signature::try_from(s.as_slice()).ok())
        .is_some_and(|s| {
            key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &s)
                .is_ok()
        });
    let iss = match &claims["iss"] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => return false,
    };
    let (Some(iat), Some(exp)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return false;
    };
    signed && iss == id && iat <= now + 60 && exp > now && exp - iat <= 600
}

/// The public half of a PEM private key (PKCS#1): what GitHub keeps of an
/// App's key.
pub fn public_key(private_pem: &str) -> rsa::PublicKey {
    use rsa::pkcs1::DecodeRsaPrivateKey;
    rsa::PublicKey::from(rsa::PrivateKey::from_pkcs1_pem(private_pem).unwrap())
}

fn rfc3339(secs: i64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(secs as u64))
        .to_string()
}

// ---------------------------------------------------------------- GitHub

/// One delivery of a GitHub hook.
#[derive(Debug, Clone)]
pub struct GhDelivery {
    pub id: i64,
    pub guid: String,
    pub delivered_at: i64,
    pub status_code: u16,
    pub redelivery: bool,
    pub body: String,
}

struct GhInner {
    /// The gateway source redeliveries are posted to.
    source: String,
    auth: GhAuth,
    secret: String,
    hook: String,
    /// Set on an App hook's deliveries.
    installation_id: Option<i64>,
    /// Newest first.
    deliveries: Mutex<Vec<GhDelivery>>,
    redelivered: Mutex<Vec<i64>>,
    list_calls: Mutex<Vec<(Option<String>, u16)>>,
    rate_limit: Mutex<Vec<usize>>,
    gateway: Arc<Gateway>,
    base: String,
}

#[derive(Clone)]
pub struct FakeGitHub {
    pub url: String,
    inner: Arc<GhInner>,
}

impl FakeGitHub {
    /// A repository hook `repos/octo/shop/hooks/7` with `deliveries` (newest
    /// first), redelivering to the gateway's `source`.
    pub async fn start(
        source: &str,
        token: &str,
        secret: &str,
        deliveries: Vec<GhDelivery>,
    ) -> Self {
        let auth = GhAuth::Token(token.into());
        Self::serve(source, auth, "repos/octo/shop/hooks/7", secret, deliveries).await
    }

    /// The hook of GitHub App `app_id`, whose private key's public half is
    /// `key`; otherwise as [`FakeGitHub::start`].
    pub async fn start_app(
        source: &str,
        app_id: &str,
        key: rsa::PublicKey,
        secret: &str,
        deliveries: Vec<GhDelivery>,
    ) -> Self {
        let auth = GhAuth::App {
            id: app_id.into(),
            key: VerifyingKey::new(key),
        };
        Self::serve(source, auth, "app/hook", secret, deliveries).await
    }

    async fn serve(
        source: &str,
        auth: GhAuth,
        hook: &str,
        secret: &str,
        deliveries: Vec<GhDelivery>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let installation_id = matches!(auth, GhAuth::App { .. }).then_some(4_242_001);
        let inner = Arc::new(GhInner {
            source: source.into(),
            auth,
            secret: secret.into(),
            deliveries: Mutex::new(deliveries),
            redelivered: Mutex::default(),
            list_calls: Mutex::default(),
            rate_limit: Mutex::default(),
            gateway: Arc::default(),
            base: format!("{url}/{hook}"),
            hook: hook.to_owned(),
            installation_id,
        });
        let app = Router::new()
            .route(&format!("/{hook}/deliveries"), get(gh_list))
            .route(
                &format!("/{hook}/deliveries/{{id}}/attempts"),
                post(gh_redeliver),
            )
            .with_state(inner.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, inner }
    }

    pub fn hook(&self) -> &str {
        &self.inner.hook
    }

    pub fn set_gateway(&self, base: &str) {
        *self.inner.gateway.0.lock().unwrap() = Some(base.to_owned());
    }

    pub fn redelivered(&self) -> Vec<i64> {
        self.inner.redelivered.lock().unwrap().clone()
    }

    /// `(cursor, status)` of each list call.
    pub fn list_calls(&self) -> Vec<(Option<String>, u16)> {
        self.inner.list_calls.lock().unwrap().clone()
    }

    pub fn rate_limit_call(&self, n: usize) {
        self.inner.rate_limit.lock().unwrap().push(n);
    }
}

async fn gh_list(
    State(inner): State<Arc<GhInner>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let cursor = q.get("cursor").cloned();
    let n = inner.list_calls.lock().unwrap().len();
    let status = if !inner.auth.allows(&headers) {
        401
    } else if inner.rate_limit.lock().unwrap().contains(&n) {
        403
    } else {
        200
    };
    inner
        .list_calls
        .lock()
        .unwrap()
        .push((cursor.clone(), status));
    match status {
        401 => {
            return (
                StatusCode::UNAUTHORIZED,
                r#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}"#,
            )
                .into_response();
        }
        // GitHub's primary rate limit: 403 with no requests left until the
        // reset time (UTC epoch seconds), https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-rate-limit
        403 => {
            let reset = (super::now() + 1).to_string();
            return (
                StatusCode::FORBIDDEN,
                [
                    ("x-ratelimit-limit", "5000".to_owned()),
                    ("x-ratelimit-remaining", "0".to_owned()),
                    ("x-ratelimit-reset", reset),
                ],
                r#"{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api","status":"403"}"#,
            )
                .into_response();
        }
        _ => {}
    }
    // GitHub allows up to 100; the fake pages by 8 so that a handful of
    // deliveries already spans several pages.
    let per_page: usize = q
        .get("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
        .clamp(1, 8);
    let start: usize = cursor
        .as_deref()
        .and_then(|c| c.strip_prefix("v1_"))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let all = inner.deliveries.lock().unwrap().clone();
    let page: Vec<serde_json::Value> = all
        .iter()
        .skip(start)
        .take(per_page)
        .map(|d| {
            serde_json::json!({
                "id": d.id,
                "guid": d.guid,
                "delivered_at": rfc3339(d.delivered_at),
                "redelivery": d.redelivery,
                "duration": 0.27,
                "status": if d.status_code < 300 { "OK" } else { "Service Unavailable" },
                "status_code": d.status_code,
                "event": "issues",
                "action": "opened",
                "installation_id": inner.installation_id,
                "repository_id": 1296269,
                "throttled_at": null
            })
        })
        .collect();
    let mut res = axum::Json(page).into_response();
    if start + per_page < all.len() {
        let next = format!(
            "<{}/deliveries?per_page={per_page}&cursor=v1_{}>; rel=\"next\"",
            inner.base,
            start + per_page
        );
        res.headers_mut().insert("link", next.parse().unwrap());
    }
    res
}

async fn gh_redeliver(
    State(inner): State<Arc<GhInner>>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    if !inner.auth.allows(&headers) {
        return (StatusCode::UNAUTHORIZED, r#"{"message":"Bad credentials"}"#).into_response();
    }
    let Some(d) = inner
        .deliveries
        .lock()
        .unwrap()
        .iter()
        .find(|d| d.id == id)
        .cloned()
    else {
        return (StatusCode::NOT_FOUND, r#"{"message":"Not Found"}"#).into_response();
    };
    inner.redelivered.lock().unwrap().push(id);
    let mut h = super::signers::github(&inner.secret, &d.guid, d.body.as_bytes());
    h.retain(|(k, _)| k != "X-GitHub-Event");
    h.push(("X-GitHub-Event".into(), "issues".into()));
    inner.gateway.send(&inner.source, h, d.body.into_bytes());
    (StatusCode::ACCEPTED, "{}").into_response()
}

// ---------------------------------------------------------------- PayPal

/// One PayPal webhook event (the JSON the webhook POSTs).
#[derive(Debug, Clone)]
pub struct PpEvent {
    pub id: String,
    pub create_time: i64,
    pub json: String,
}

/// A `PAYMENT.CAPTURE.COMPLETED` event, shaped from the sample in
/// <https://developer.paypal.com/api/rest/webhooks/event-names/>.
pub fn paypal_event(id: &str, create_time: i64) -> String {
    serde_json::json!({
        "id": id,
        "create_time": rfc3339(create_time),
        "resource_type": "capture",
        "event_version": "1.0",
        "event_type": "PAYMENT.CAPTURE.COMPLETED",
        "summary": "Payment completed for $ 7.47 USD",
        "resource": {
            "id": format!("CAP-{id}"),
            "amount": {"currency_code": "USD", "value": "7.47"},
            "status": "COMPLETED"
        },
        "links": []
    })
    .to_string()
}

struct PpInner {
    source: String,
    signer: PaypalSigner,
    client_id: String,
    secret: String,
    token: String,
    webhook_id: String,
    /// Newest first.
    events: Mutex<Vec<PpEvent>>,
    resent: Mutex<Vec<String>>,
    /// The status of each `POST /v1/oauth2/token`.
    token_calls: Mutex<Vec<u16>>,
    list_calls: Mutex<Vec<u16>>,
    rate_limit: Mutex<Vec<usize>>,
    gateway: Arc<Gateway>,
    base: String,
}

#[derive(Clone)]
pub struct FakePayPal {
    pub url: String,
    inner: Arc<PpInner>,
}

/// Signs a PayPal webhook for the gateway's pinned test certificate.
pub type PaypalSigner = fn(&str, &str, i64, &[u8]) -> Vec<(String, String)>;

impl FakePayPal {
    pub async fn start(
        source: &str,
        client_id: &str,
        secret: &str,
        webhook_id: &str,
        events: Vec<PpEvent>,
        signer: PaypalSigner,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let inner = Arc::new(PpInner {
            source: source.into(),
            signer,
            client_id: client_id.into(),
            secret: secret.into(),
            token: format!("A21AA{}", hookgate::primitives::token::random_hex()),
            webhook_id: webhook_id.into(),
            events: Mutex::new(events),
            resent: Mutex::default(),
            token_calls: Mutex::default(),
            list_calls: Mutex::default(),
            rate_limit: Mutex::default(),
            gateway: Arc::default(),
            base: url.clone(),
        });
        let app = Router::new()
            .route("/v1/oauth2/token", post(pp_token))
            .route("/v1/notifications/webhooks-events", get(pp_list))
            .route(
                "/v1/notifications/webhooks-events/{id}/resend",
                post(pp_resend),
            )
            .with_state(inner.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, inner }
    }

    pub fn set_gateway(&self, base: &str) {
        *self.inner.gateway.0.lock().unwrap() = Some(base.to_owned());
    }

    pub fn resent(&self) -> Vec<String> {
        self.inner.resent.lock().unwrap().clone()
    }

    pub fn list_calls(&self) -> Vec<u16> {
        self.inner.list_calls.lock().unwrap().clone()
    }

    pub fn token_calls(&self) -> Vec<u16> {
        self.inner.token_calls.lock().unwrap().clone()
    }

    pub fn rate_limit_call(&self, n: usize) {
        self.inner.rate_limit.lock().unwrap().push(n);
    }
}

async fn pp_token(State(inner): State<Arc<PpInner>>, headers: HeaderMap, body: String) -> Response {
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", inner.client_id, inner.secret));
    let auth_ok = headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Basic {basic}"));
    if !auth_ok || body != "grant_type=client_credentials" {
        inner.token_calls.lock().unwrap().push(401);
        // PayPal's answer to a wrong client id or secret
        // (https://developer.paypal.com/api/rest/authentication/).
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error":"invalid_client","error_description":"Client Authentication failed"}"#,
        )
            .into_response();
    }
    inner.token_calls.lock().unwrap().push(200);
    axum::Json(serde_json::json!({
        "scope": "https://uri.paypal.com/services/webhooks",
        "access_token": inner.token,
        "token_type": "Bearer",
        "app_id": "APP-80W284485P519543T",
        "expires_in": 32400,
        "nonce": "2026-01-01T00:00:00Z-nonce"
    }))
    .into_response()
}

async fn pp_list(
    State(inner): State<Arc<PpInner>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let n = inner.list_calls.lock().unwrap().len();
    let status = if !bearer(&headers, &inner.token) {
        401
    } else if inner.rate_limit.lock().unwrap().contains(&n) {
        429
    } else {
        200
    };
    inner.list_calls.lock().unwrap().push(status);
    match status {
        401 => {
            return (
                StatusCode::UNAUTHORIZED,
                r#"{"name":"AUTHENTICATION_FAILURE"}"#,
            )
                .into_response();
        }
        429 => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                r#"{"name":"RATE_LIMIT_REACHED"}"#,
            )
                .into_response();
        }
        _ => {}
    }
    // PayPal allows up to 300; the fake pages by 5.
    let page_size: usize = q
        .get("page_size")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .clamp(1, 5);
    let page: usize = q.get("page").and_then(|v| v.parse().ok()).unwrap_or(0);
    let start_time = q.get("start_time").cloned().unwrap_or_default();
    let end_time = q.get("end_time").cloned().unwrap_or_default();
    let secs = |t: &str| {
        humantime::parse_rfc3339(t)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64)
    };
    let since = secs(&start_time).unwrap_or(0);
    let until = secs(&end_time).unwrap_or(i64::MAX);
    let all: Vec<PpEvent> = inner
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| (since..=until).contains(&e.create_time))
        .cloned()
        .collect();
    let events: Vec<serde_json::Value> = all
        .iter()
        .skip(page * page_size)
        .take(page_size)
        .map(|e| serde_json::from_str(&e.json).unwrap())
        .collect();
    let mut links = vec![];
    if (page + 1) * page_size < all.len() {
        links.push(serde_json::json!({
            "href": format!(
                "{}/v1/notifications/webhooks-events?page_size={page_size}&start_time={start_time}&end_time={end_time}&page={}",
                inner.base,
                page + 1
            ),
            "rel": "next",
            "method": "GET"
        }));
    }
    axum::Json(serde_json::json!({ "events": events, "count": events.len(), "links": links }))
        .into_response()
}

async fn pp_resend(
    State(inner): State<Arc<PpInner>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: String,
) -> Response {
    if !bearer(&headers, &inner.token) {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"name":"AUTHENTICATION_FAILURE"}"#,
        )
            .into_response();
    }
    let asked: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    if asked["webhook_ids"] != serde_json::json!([inner.webhook_id]) {
        return (StatusCode::BAD_REQUEST, r#"{"name":"INVALID_REQUEST"}"#).into_response();
    }
    let Some(e) = inner
        .events
        .lock()
        .unwrap()
        .iter()
        .find(|e| e.id == id)
        .cloned()
    else {
        return (StatusCode::NOT_FOUND, r#"{"name":"INVALID_RESOURCE_ID"}"#).into_response();
    };
    inner.resent.lock().unwrap().push(id);
    let h = (inner.signer)(
        &inner.webhook_id,
        "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270",
        super::now(),
        e.json.as_bytes(),
    );
    inner
        .gateway
        .send(&inner.source, h, e.json.clone().into_bytes());
    (StatusCode::ACCEPTED, e.json).into_response()
}
