//! `[apis.<name>]`: internal HTTP APIs served behind the Idempotency-Key
//! proxy at `/api/<name>/{rest}` (docs/idempotency.md). The raw table as
//! written (every field with its doc and default) and its validation.

use crate::primitives::duration::Dur;
use http::Method;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    /// `http://` or `https://` base URL; `/api/<name>/x/y` goes to `<upstream>/x/y`.
    pub upstream: String,
    /// Methods the key applies to; others pass through untouched. Default `["POST", "PATCH"]`.
    #[serde(default = "default_methods")]
    pub methods: Vec<String>,
    /// Request header carrying the key. Default `Idempotency-Key`.
    #[serde(default = "default_key_header")]
    pub key_header: String,
    /// `true`: a covered method without a key gets 400. Default false (passed through).
    #[serde(default)]
    pub required: bool,
    /// Namespace of keys: `header:<Name>` (e.g. the caller's user id) or `none`. Default `none`.
    #[serde(default = "default_scope")]
    pub scope: String,
    /// Request headers that carry the caller's credential. A digest of
    /// their values is part of every key's scope, so a stored answer is
    /// only replayed to a request with the same credentials. `[]` turns
    /// this off. Default `["Authorization"]`.
    #[serde(default = "default_credential_headers")]
    pub credential_headers: Vec<String>,
    /// Pass the upstream's `Set-Cookie` to the client. Proxied answers are
    /// served from hookgate's origin, so by default a cookie is dropped.
    /// Default false.
    #[serde(default)]
    pub forward_set_cookie: bool,
    /// How long a completed response is replayed. Default 24h.
    #[serde(default = "default_ttl")]
    pub ttl: Dur,
    /// How long an in-flight claim lives if its owner dies; must exceed `timeout`. Default 30s.
    #[serde(default = "default_lock_ttl")]
    pub lock_ttl: Dur,
    /// How long a copy waits for the in-flight first attempt before 409. Default 5s.
    #[serde(default = "default_inflight_wait")]
    pub inflight_wait: Dur,
    /// Deadline of the upstream call. Default 25s.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    /// Upstream statuses that are stored and replayed: `2xx`, `3xx`, `4xx` or
    /// exact codes, comma-separated. Never 5xx, 401, 403 or 407. Default
    /// `2xx,4xx` (404, 405, 408, 425 and 429 are only stored when listed
    /// exactly).
    #[serde(default = "default_replay_statuses")]
    pub replay_statuses: String,
    /// Status for a key reused with a different request: 409 or 422. Default 409.
    #[serde(default = "default_mismatch_status")]
    pub mismatch_status: u16,
    /// Largest request body; larger get 413. Default `server.max_body_bytes`.
    pub max_body_bytes: Option<u64>,
    /// Hash JSON bodies in canonical form (sorted keys, no whitespace)
    /// instead of the exact bytes. Default false.
    #[serde(default)]
    pub canonical_json: bool,
    /// Response headers stored and replayed besides the built-in allow-list
    /// (content-type, location, etag, …).
    #[serde(default)]
    pub replay_headers: Vec<String>,
}

fn default_methods() -> Vec<String> {
    vec!["POST".into(), "PATCH".into()]
}
fn default_key_header() -> String {
    "Idempotency-Key".into()
}
fn default_scope() -> String {
    "none".into()
}
fn default_credential_headers() -> Vec<String> {
    vec!["Authorization".into()]
}
fn default_ttl() -> Dur {
    Dur(Duration::from_secs(86_400))
}
fn default_lock_ttl() -> Dur {
    Dur(Duration::from_secs(30))
}
fn default_inflight_wait() -> Dur {
    Dur(Duration::from_secs(5))
}
fn default_timeout() -> Dur {
    Dur(Duration::from_secs(25))
}
fn default_replay_statuses() -> String {
    "2xx,4xx".into()
}
fn default_mismatch_status() -> u16 {
    409
}

/// Whose keys these are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    None,
    /// A request header (lowercase name).
    Header(String),
}

/// Which upstream statuses are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayStatuses {
    /// `2` for `2xx`, …
    classes: Vec<u16>,
    exact: Vec<u16>,
}

/// Answers a class does not cover; only an exact entry stores them. 408,
/// 425 and 429 say "try again"; 404 and 405 often mean a route not deployed
/// yet, and storing them would keep a key failing after the deploy.
const UNLISTED_4XX: [u16; 5] = [404, 405, 408, 425, 429];

/// Answers about the caller's credentials, never stored: an anonymous 401
/// under a guessable key would otherwise poison it for `ttl`, and a client
/// whose token expired would keep getting its 401 after refreshing.
const CREDENTIAL_4XX: [u16; 3] = [401, 403, 407];

impl ReplayStatuses {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Self {
            classes: vec![],
            exact: vec![],
        };
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let class = item
                .strip_suffix("xx")
                .or_else(|| item.strip_suffix("XX"))
                .and_then(|d| d.parse::<u16>().ok());
            let (lo, code) = match (class, item.parse::<u16>()) {
                (Some(c), _) => (c * 100, None),
                (None, Ok(code)) => (code, Some(code)),
                _ => return Err(format!("`{item}` is not a status (`2xx` or `404`)")),
            };
            if !(200..500).contains(&lo) {
                return Err(format!(
                    "`{item}`: only 2xx, 3xx and 4xx answers can be stored (5xx are never replayed)"
                ));
            }
            if code.is_some_and(|c| CREDENTIAL_4XX.contains(&c)) {
                return Err(format!(
                    "`{item}`: 401, 403 and 407 answer the caller's credentials and are never stored"
                ));
            }
            match code {
                Some(c) => out.exact.push(c),
                None => out.classes.push(lo / 100),
            }
        }
        if out.classes.is_empty() && out.exact.is_empty() {
            return Err("list at least one status class or code".into());
        }
        Ok(out)
    }

    pub fn stores(&self, status: u16) -> bool {
        if CREDENTIAL_4XX.contains(&status) {
            return false;
        }
        self.exact.contains(&status)
            || (self.classes.contains(&(status / 100)) && !UNLISTED_4XX.contains(&status))
    }
}

/// One validated `[apis.<name>]`.
#[derive(Debug, Clone)]
pub struct Api {
    pub name: String,
    /// Without a trailing `/`.
    pub upstream: String,
    pub methods: Vec<Method>,
    /// Lowercase.
    pub key_header: String,
    pub required: bool,
    pub scope: Scope,
    /// Lowercase; their values' digest is part of the key's scope.
    pub credential_headers: Vec<String>,
    pub forward_set_cookie: bool,
    pub ttl: Duration,
    pub lock_ttl: Duration,
    pub inflight_wait: Duration,
    pub timeout: Duration,
    pub replay_statuses: ReplayStatuses,
    pub mismatch_status: u16,
    pub max_body_bytes: usize,
    pub canonical_json: bool,
    /// Lowercase, extra to the built-in allow-list.
    pub replay_headers: Vec<String>,
}

const KNOWN_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Validates every API; problems are `(key path, message)`.
pub(super) fn validate(
    raw: BTreeMap<String, RawApi>,
    server_max_body: usize,
    valid_name: fn(&str) -> bool,
    problems: &mut Vec<(String, String)>,
) -> BTreeMap<String, Arc<Api>> {
    let mut apis = BTreeMap::new();
    for (name, a) in raw {
        let key = format!("apis.{name}");
        if !valid_name(&name) {
            problems.push((
                key.clone(),
                "API names use letters, digits, `-` and `_`".into(),
            ));
        }
        let mut problem = |k: &str, msg: String| problems.push((format!("{key}.{k}"), msg));
        if !(a.upstream.starts_with("http://") || a.upstream.starts_with("https://")) {
            problem("upstream", "must be an http:// or https:// URL".into());
        }
        let methods = methods(&a.methods, &mut problem);
        if http::HeaderName::from_bytes(a.key_header.as_bytes()).is_err() {
            problem(
                "key_header",
                format!("`{}` is not a header name", a.key_header),
            );
        }
        let scope = scope(&a.scope, &mut problem);
        for h in &a.credential_headers {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                problem("credential_headers", format!("`{h}` is not a header name"));
            }
        }
        for (k, d) in [
            ("ttl", a.ttl),
            ("lock_ttl", a.lock_ttl),
            ("inflight_wait", a.inflight_wait),
            ("timeout", a.timeout),
        ] {
            if d.0.is_zero() {
                problem(k, "must be greater than 0".into());
            }
        }
        if a.lock_ttl.0 <= a.timeout.0 {
            problem(
                "lock_ttl",
                "must exceed `timeout`, or a slow first call could lose its claim to a retry"
                    .into(),
            );
        }
        let replay_statuses = ReplayStatuses::parse(&a.replay_statuses).unwrap_or_else(|e| {
            problem("replay_statuses", e);
            ReplayStatuses {
                classes: vec![2],
                exact: vec![],
            }
        });
        if ![409, 422].contains(&a.mismatch_status) {
            problem("mismatch_status", "must be 409 or 422".into());
        }
        if a.max_body_bytes == Some(0) {
            problem("max_body_bytes", "must be greater than 0".into());
        }
        let api = Api {
            upstream: a.upstream.trim_end_matches('/').to_owned(),
            methods,
            key_header: a.key_header.to_ascii_lowercase(),
            required: a.required,
            scope,
            credential_headers: a
                .credential_headers
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            forward_set_cookie: a.forward_set_cookie,
            ttl: a.ttl.0,
            lock_ttl: a.lock_ttl.0,
            inflight_wait: a.inflight_wait.0,
            timeout: a.timeout.0,
            replay_statuses,
            mismatch_status: a.mismatch_status,
            max_body_bytes: a.max_body_bytes.map_or(server_max_body, |n| n as usize),
            canonical_json: a.canonical_json,
            replay_headers: a
                .replay_headers
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            name: name.clone(),
        };
        apis.insert(name, Arc::new(api));
    }
    apis
}

/// The covered methods, upper-cased; unknown ones are problems.
fn methods(raw: &[String], problem: &mut impl FnMut(&str, String)) -> Vec<Method> {
    raw.iter()
        .filter_map(|m| {
            let up = m.to_ascii_uppercase();
            if KNOWN_METHODS.contains(&up.as_str()) {
                Method::from_bytes(up.as_bytes()).ok()
            } else {
                problem(
                    "methods",
                    format!("unknown method `{m}` (known: {})", KNOWN_METHODS.join(", ")),
                );
                None
            }
        })
        .collect()
}

/// `none` or `header:<Name>`.
fn scope(raw: &str, problem: &mut impl FnMut(&str, String)) -> Scope {
    match raw.trim() {
        "none" => Scope::None,
        s => match s.strip_prefix("header:") {
            Some(h) if http::HeaderName::from_bytes(h.as_bytes()).is_ok() => {
                Scope::Header(h.to_ascii_lowercase())
            }
            _ => {
                problem("scope", format!("`{s}`: use `header:<Name>` or `none`"));
                Scope::None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn load(api: &str) -> Result<Config, Vec<(String, String)>> {
        let text = format!(
            "[server]\nmax_body_bytes = 1000\nadmin_listen = \"127.0.0.1:0\"\n\n[apis.pay]\n{api}"
        );
        Config::from_toml_str(&text, Path::new(".")).map_err(|e| e.problems)
    }

    #[test]
    fn defaults_fill_an_api_and_the_body_limit_is_the_servers() {
        let c = load("upstream = \"http://127.0.0.1:9/base/\"").unwrap();
        let a = &c.apis["pay"];
        assert_eq!(a.upstream, "http://127.0.0.1:9/base");
        assert_eq!(a.methods, vec![Method::POST, Method::PATCH]);
        assert_eq!(a.key_header, "idempotency-key");
        assert_eq!(a.scope, Scope::None);
        assert_eq!(
            (a.ttl, a.lock_ttl),
            (Duration::from_secs(86_400), Duration::from_secs(30))
        );
        assert_eq!((a.max_body_bytes, a.mismatch_status), (1000, 409));
        let c = load("upstream = \"https://x\"\nscope = \"header:X-User-ID\"\nmax_body_bytes = 5")
            .unwrap();
        assert_eq!(c.apis["pay"].scope, Scope::Header("x-user-id".into()));
        assert_eq!(c.apis["pay"].max_body_bytes, 5);
    }

    #[test]
    fn every_bad_value_is_named_by_its_key_path() {
        let bad = load(
            r#"upstream = "ftp://x"
methods = ["POST", "FETCH"]
scope = "cookie:x"
ttl = "0s"
lock_ttl = "10s"
timeout = "10s"
replay_statuses = "2xx,5xx"
mismatch_status = 400
"#,
        )
        .unwrap_err();
        let keys: Vec<&str> = bad.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "apis.pay.upstream",
                "apis.pay.methods",
                "apis.pay.scope",
                "apis.pay.ttl",
                "apis.pay.lock_ttl",
                "apis.pay.replay_statuses",
                "apis.pay.mismatch_status",
            ],
            "{bad:?}"
        );
        assert!(bad[4].1.contains("must exceed `timeout`"));
        assert!(bad[5].1.contains("never replayed"));
    }

    #[test]
    fn credential_answers_are_never_stored_and_404_405_only_when_listed() {
        let r = ReplayStatuses::parse("2xx,4xx").unwrap();
        for s in [401, 403, 407, 404, 405] {
            assert!(!r.stores(s), "{s}");
        }
        assert!(r.stores(400) && r.stores(409) && r.stores(422));
        let listed = ReplayStatuses::parse("2xx,404,405").unwrap();
        assert!(listed.stores(404) && listed.stores(405));
        for s in ["401", "2xx,403", "407"] {
            let e = ReplayStatuses::parse(s).unwrap_err();
            assert!(e.contains("never stored"), "{s}: {e}");
        }
        let c = load("upstream = \"http://x\"").unwrap();
        assert_eq!(c.apis["pay"].credential_headers, ["authorization"]);
        assert!(!c.apis["pay"].forward_set_cookie);
        let bad = load("upstream = \"http://x\"\ncredential_headers = [\"a b\"]").unwrap_err();
        assert_eq!(bad[0].0, "apis.pay.credential_headers");
    }

    #[test]
    fn replay_statuses_never_store_5xx_and_skip_transient_4xx_unless_exact() {
        let r = ReplayStatuses::parse("2xx,4xx").unwrap();
        assert!(r.stores(201) && r.stores(400) && !r.stores(500) && !r.stores(302));
        assert!(!r.stores(429) && !r.stores(408));
        assert!(ReplayStatuses::parse("2xx, 429").unwrap().stores(429));
        assert!(ReplayStatuses::parse("5xx").is_err());
        assert!(ReplayStatuses::parse("2xx,503").is_err());
        assert!(ReplayStatuses::parse("abc").is_err());
        assert!(ReplayStatuses::parse("").is_err());
    }
}
