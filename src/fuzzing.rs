//! Entry points for the fuzz targets (`fuzz/`) and their corpus replay
//! (`tests/fuzz_corpus.rs`): every parser an unauthenticated request or an
//! operator's file reaches before or during verification. Each takes raw
//! bytes and must never panic; results are discarded.
//!
//! Not an API: hidden from the docs and free to change.

use crate::config::Config;
use crate::primitives::secret::Secret;
use crate::verify::fields::Fields;
use crate::verify::registry::Registry;
use crate::verify::source::Source;
use crate::verify::{Incoming, client_ip, event_id, provider::Provider};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Every built-in provider as a source with a test secret.
fn sources() -> &'static [Arc<Source>] {
    static SOURCES: OnceLock<Vec<Arc<Source>>> = OnceLock::new();
    SOURCES.get_or_init(|| {
        let reg = Registry::builtin();
        reg.names()
            .into_iter()
            .filter_map(|name| {
                let provider = reg.get(name)?;
                let keys = provider
                    .signing_key(&Secret::new("fuzz-secret"))
                    .ok()
                    .into_iter()
                    .collect();
                let withheld =
                    crate::verify::forwarded_headers::withheld(&provider, Default::default());
                Some(Arc::new(Source {
                    name: name.to_owned(),
                    tolerance: provider.default_tolerance(),
                    provider,
                    keys,
                    dedup_window: Duration::from_secs(60),
                    dedup_by_body: false,
                    silent_after: None,
                    targets: vec![],
                    routes: Arc::new(crate::verify::router::NoRoutes),
                    public_url: Some("https://hooks.example.test/webhooks/fuzz".into()),
                    allow_ips: vec![],
                    settings: None,
                    verify_token: None,
                    split: None,
                    withheld,
                }))
            })
            .collect()
    })
}

/// `data` = selector byte, then `headers NUL query NUL body`; headers are
/// `name: value` lines.
fn split(data: &[u8]) -> (u8, HeaderMap, String, Bytes) {
    let (&sel, rest) = data.split_first().unwrap_or((&0, &[]));
    let mut parts = rest.splitn(3, |b| *b == 0);
    let head = parts.next().unwrap_or_default();
    let query = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let body = Bytes::copy_from_slice(parts.next().unwrap_or_default());
    (sel, headers(head), query, body)
}

fn headers(text: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in text.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    map
}

/// One request through a built-in provider's whole check (signature
/// header parsing, locators, timestamp, control replies), then its
/// event-id rule and the forwarded-header filter directly (a random input
/// never gets past a MAC).
pub fn verify_request(data: &[u8]) {
    let (sel, headers, query, body) = split(data);
    let all = sources();
    let source = &all[sel as usize % all.len()];
    let incoming = Incoming {
        headers: headers.clone(),
        body: body.clone(),
        query: Some(&query),
        client_ip: None,
    };
    // A verified event's facts (type, routes, forwarded headers) are read
    // later, by dedup: read them here too.
    if let Ok(crate::verify::Checked::Event(mut v)) =
        crate::verify::check_with(source, incoming, 1_700_000_000, None)
    {
        let _ = v.take_facts();
    }
    let fields = Fields::with_query(&headers, &body, &query);
    let _ = event_id::resolve(&fields, &source.provider.event_id);
    let _ = crate::verify::forwarded_headers::forwardable(headers, &source.withheld).to_json();
}

/// `X-Forwarded-For` / peer resolution with a trusted proxy range.
pub fn client_ip(data: &[u8]) {
    let map = headers(data);
    let trusted = ["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
    let peer = Some(std::net::IpAddr::from([10, 1, 2, 3]));
    let _ = client_ip::client_ip(peer, &map, &trusted);
}

/// A proxied request target after `/api/<name>`: `path[?query]`. Whatever
/// the checks accept must join to a URL under the base path on the base's
/// origin (a panic here is a traversal the checks missed).
pub fn proxy_path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (path, query) = match text.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (text, None),
    };
    let rest = format!("/{}", path.trim_start_matches('/'));
    if let Ok(url) = crate::proxy::path::join("http://upstream.test:8000/base", &rest, query) {
        assert_eq!(url.host_str(), Some("upstream.test"), "{text:?}");
        assert_eq!(url.port(), Some(8000), "{text:?}");
        assert!(
            url.path() == "/base" || url.path().starts_with("/base/"),
            "{text:?} left the base path: {url}"
        );
        for segment in url.path().split('/') {
            assert!(segment != "." && segment != "..", "{text:?}");
        }
    }
}

/// A form body and a query string (`body NUL query`): a repeated field
/// that a lookup reads must be refused, never silently read once.
pub fn form_fields(data: &[u8]) {
    use crate::verify::locator::Lookup;
    let mut parts = data.splitn(2, |b| *b == 0);
    let body = parts.next().unwrap_or_default();
    let query = std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or_default();
    let headers = HeaderMap::new();
    let fields = Fields::with_query(&headers, body, query);
    for name in ["bt_payload", "a", "id"] {
        let lookups = [
            Lookup::parse(&format!("form:{name}")).expect("a form lookup"),
            Lookup::parse(&format!("query:{name}")).expect("a query lookup"),
        ];
        let refused = fields.refuse_repeated(&lookups).is_err();
        let in_query = form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == name)
            .count();
        let repeated = fields.form_count(name) > 1 || in_query > 1;
        assert_eq!(refused, repeated, "{name}: {data:?}");
        let _ = fields.lookup(&lookups[0], &[]);
    }
}

/// One provider definition file.
pub fn provider_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Provider::from_toml(text);
    }
}

/// A config file (secrets and `providers_dir` resolve under a directory
/// that does not exist).
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Config::from_toml_str(text, Path::new("/nonexistent-hookgate-fuzz"));
    }
}

/// A fuzz target's entry point.
pub type Target = fn(&[u8]);

/// The fuzz targets by name, for the corpus replay.
pub const TARGETS: &[(&str, Target)] = &[
    ("verify_request", verify_request),
    ("client_ip", client_ip),
    ("provider_file", provider_file),
    ("config", config),
    ("proxy_path", proxy_path),
    ("form_fields", form_fields),
];
