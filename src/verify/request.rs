//! Reading values out of a request for templates and event ids: headers,
//! JSON pointers, form fields. The body is read lazily, only after the
//! signature has been checked or when the template needs it, and a JSON
//! pointer materialises only its own path (`json_subset`): this may run
//! before the signature is checked.

use super::VerifyError;
use super::json_subset::{self, Want, subset};
use super::locator::{Locator, Lookup};
use crate::primitives::headers::StoredHeaders;
use http::HeaderMap;
use serde_json::Value;
use std::borrow::Cow;
use std::cell::OnceCell;

/// Most values a `*` JSON pointer collects (a batch of 250 GoCardless events
/// fits; anything larger is not a real webhook).
const MAX_WILDCARD_VALUES: usize = 1000;

/// The JSON pointers a provider reads from every request (event id, type,
/// timestamp, controls), merged into one [`Want`]: the first of them that a
/// request asks for walks the body once for all ([`Fields::reading_together`]).
#[derive(Debug, Clone, Default)]
pub struct JsonWants {
    pointers: Vec<String>,
    want: Option<Want>,
}

impl JsonWants {
    /// The JSON locators of `lookups`. Pointers that cannot share one walk
    /// with the others are left out (they walk the body on their own).
    pub fn of<'l>(lookups: impl IntoIterator<Item = &'l Lookup>) -> Self {
        let mut out = Self::default();
        for lookup in lookups {
            for l in &lookup.alternatives {
                let Locator::Json(pointer) = l else { continue };
                let Some(w) = Want::pointer(pointer, MAX_WILDCARD_VALUES) else {
                    continue;
                };
                let merged = match out.want.take() {
                    None => Some(w),
                    Some(mine) => match mine.clone().merge(w) {
                        Some(m) => Some(m),
                        None => {
                            out.want = Some(mine);
                            continue;
                        }
                    },
                };
                out.want = merged;
                if !out.pointers.contains(pointer) {
                    out.pointers.push(pointer.clone());
                }
            }
        }
        // One pointer gains nothing from sharing.
        if out.pointers.len() < 2 {
            return Self::default();
        }
        out
    }

    fn covers(&self, pointer: &str) -> Option<&Want> {
        self.want
            .as_ref()
            .filter(|_| self.pointers.iter().any(|p| p == pointer))
    }
}

/// The shared walk of a body's JSON ([`Fields::into_shared`]): `None` if
/// not done yet, else its result (`Some(None)`: not JSON within the limits).
pub type SharedWalk = Option<Option<Value>>;

pub struct Fields<'a> {
    headers: &'a HeaderMap,
    body: &'a [u8],
    query: &'a str,
    /// Pointers read together, and their shared walk (at most once).
    together: Option<&'a JsonWants>,
    shared: OnceCell<Option<Value>>,
    /// `Some(is an object)` for a valid JSON body, read at most once.
    json_shape: OnceCell<Option<bool>>,
    form: OnceCell<Vec<(String, String)>>,
    query_pairs: OnceCell<Vec<(String, String)>>,
    /// The provider's signature header(s), parsed once (`hmac::signature_values_of`):
    /// verification and the console's provider timestamp both read it.
    pub(super) signature: OnceCell<SignatureValues<'a>>,
}

/// The raw signature header values, and `k=v` pairs for the `pairs` format.
pub type SignatureValues<'h> = (Vec<&'h str>, Vec<(&'h str, &'h str)>);

impl<'a> Fields<'a> {
    pub fn new(headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Self::with_query(headers, body, "")
    }

    /// Fields of a request whose URL had `query` (without the `?`).
    pub fn with_query(headers: &'a HeaderMap, body: &'a [u8], query: &'a str) -> Self {
        Self {
            headers,
            body,
            query,
            together: None,
            shared: OnceCell::new(),
            json_shape: OnceCell::new(),
            form: OnceCell::new(),
            query_pairs: OnceCell::new(),
            signature: OnceCell::new(),
        }
    }

    /// Reads the pointers of `wants` in one walk of the body, the first
    /// time any of them is asked for.
    pub fn reading_together(mut self, wants: &'a JsonWants) -> Self {
        self.together = Some(wants);
        self
    }

    /// The shared walk of the body, as far as it went, for a later
    /// `Fields` of the same request ([`Fields::with_shared`]).
    pub fn into_shared(self) -> SharedWalk {
        self.shared.into_inner()
    }

    /// Reuses the shared walk an earlier `Fields` of the same request and
    /// body did ([`Fields::into_shared`]); both must read together the same
    /// `wants` (`verify::fields_of` builds both).
    pub fn with_shared(mut self, walk: SharedWalk) -> Self {
        if let Some(done) = walk {
            self.shared = OnceCell::from(done);
        }
        self
    }

    pub fn headers(&self) -> &'a HeaderMap {
        self.headers
    }

    pub fn body(&self) -> &[u8] {
        self.body
    }

    /// `Some(true)` for a JSON object body, `Some(false)` for other JSON,
    /// `None` when the body is not JSON or is nested deeper than
    /// [`MAX_JSON_DEPTH`] (a deep body costs far more than its size, which
    /// `max_body_bytes` already bounds). Nothing of the body is kept.
    pub fn json_is_object(&self) -> Option<bool> {
        *self
            .json_shape
            .get_or_init(|| subset(self.body, &Want::shape()).map(|v| v.is_object()))
    }

    /// The wanted part of the JSON body (see [`json_subset`](super::json_subset)).
    fn json_part(&self, pointer: &str) -> Option<Cow<'_, Value>> {
        if let Some(want) = self.together.and_then(|t| t.covers(pointer)) {
            return self
                .shared
                .get_or_init(|| subset(self.body, want))
                .as_ref()
                .map(Cow::Borrowed);
        }
        subset(self.body, &Want::pointer(pointer, MAX_WILDCARD_VALUES)?).map(Cow::Owned)
    }

    /// The body as form fields, in order (parsed at most once).
    pub fn form(&self) -> &[(String, String)] {
        self.form.get_or_init(|| {
            form_urlencoded::parse(self.body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
    }

    fn query_pairs(&self) -> &[(String, String)] {
        self.query_pairs.get_or_init(|| {
            form_urlencoded::parse(self.query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
    }

    /// The first value of form field `name`. Reads the body without
    /// collecting its other fields (this may run before the signature).
    pub fn form_value(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.body)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Why the body cannot hold what a lookup wants, if it cannot.
    pub fn body_problem(&self, lookup: &Lookup) -> Option<VerifyError> {
        if lookup.wants_json() {
            match self.json_is_object() {
                None if std::str::from_utf8(self.body).is_err() => {
                    return Some(VerifyError::BadBody("body is not UTF-8 JSON"));
                }
                None if !lookup.wants_form() => {
                    return Some(VerifyError::BadBody("body is not valid JSON"));
                }
                Some(false) => {
                    return Some(VerifyError::BadBody("JSON body is not an object"));
                }
                _ => {}
            }
        }
        if lookup.wants_form() && std::str::from_utf8(self.body).is_err() {
            return Some(VerifyError::BadBody("form body is not UTF-8"));
        }
        None
    }

    /// A clear 400 when the body cannot hold the value `lookup` wants.
    pub fn check_body_for(&self, lookup: &Lookup) -> Result<(), VerifyError> {
        if self.lookup(lookup, &[]).is_some() {
            return Ok(());
        }
        self.body_problem(lookup).map_or(Ok(()), Err)
    }

    /// The first present alternative of `lookup`, as text.
    pub fn lookup(&self, lookup: &Lookup, pairs: &[(&str, &str)]) -> Option<String> {
        let v = lookup
            .alternatives
            .iter()
            .find_map(|l| self.locate(l, pairs))?;
        let v = if lookup.trim_line_feeds {
            v.trim_end_matches('\n').to_owned()
        } else {
            v
        };
        Some(if lookup.lowercase {
            v.to_lowercase()
        } else {
            v
        })
    }

    fn locate(&self, locator: &Locator, pairs: &[(&str, &str)]) -> Option<String> {
        match locator {
            Locator::Header(name) => self
                .headers
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_owned()),
            Locator::Signature(key) => pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| (*v).to_owned()),
            Locator::Json(pointer) if pointer.contains("/*") => {
                let mut out = Vec::new();
                collect(&*self.json_part(pointer)?, pointer, &mut out);
                (!out.is_empty()).then(|| out.join(","))
            }
            Locator::Json(pointer) => scalar(at_pointer(&*self.json_part(pointer)?, pointer)?),
            Locator::Form(name) => self.form_value(name),
            Locator::Query(name) => self
                .query_pairs()
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone()),
        }
    }
}

/// Deepest JSON nesting hookgate parses (real webhooks nest a handful of
/// levels; serde_json's own recursion limit is 128).
pub const MAX_JSON_DEPTH: usize = 32;

/// Whether `body`'s `[`/`{` nesting (outside strings) stays within `max`:
/// one pass over the bytes, no allocation. The inside of a string (most of
/// a webhook's bytes) is skipped with `memchr` to its next quote or
/// backslash instead of byte by byte.
pub fn json_depth_within(body: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // Past the string: its closing quote (a backslash escapes
                // the byte after it). Unterminated: nothing nests further.
                i += 1;
                loop {
                    let Some(k) = body.get(i..).and_then(|r| memchr::memchr2(b'"', b'\\', r))
                    else {
                        return true;
                    };
                    i += k;
                    if body[i] == b'"' {
                        break;
                    }
                    i += 2;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    true
}

/// A JSON scalar as text (`true`, `12`, `abc`); objects, arrays and null are
/// not values.
pub fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `Value::pointer` (RFC 6901) without an allocation per segment: a
/// segment is unescaped (`~1` to `/`, `~0` to `~`) only when it holds a
/// `~`; an array index is read as `json_subset` reads one.
pub fn at_pointer<'v>(v: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(v);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(v, |v, segment| {
            let segment = if segment.contains('~') {
                Cow::Owned(segment.replace("~1", "/").replace("~0", "~"))
            } else {
                Cow::Borrowed(segment)
            };
            match v {
                Value::Object(members) => members.get(&*segment),
                Value::Array(items) => items.get(json_subset::index(&segment)?),
                _ => None,
            }
        })
}

/// Values under a pointer with `*` segments, in document order.
fn collect(v: &Value, pointer: &str, out: &mut Vec<String>) {
    if out.len() >= MAX_WILDCARD_VALUES {
        return;
    }
    let Some((head, tail)) = pointer.split_once("/*") else {
        if let Some(s) = at_pointer(v, pointer).and_then(scalar) {
            out.push(s);
        }
        return;
    };
    let Some(Value::Array(items)) = (if head.is_empty() {
        Some(v)
    } else {
        at_pointer(v, head)
    }) else {
        return;
    };
    for item in items {
        collect(item, tail, out);
    }
}

/// Headers that describe this hop, not the event, and are never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "expect",
];

/// Headers a client (or a proxy in front of hookgate) uses to name the
/// client; passed on only to targets with `forward_proxy_headers`.
pub const PROXY_HEADERS: &[&str] = &[
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
    "x-forwarded-prefix",
    "x-real-ip",
];

/// Headers that carry a credential whatever the scheme: never stored or
/// forwarded unless a target of the source sets `forward_credentials`.
const ALWAYS_CREDENTIALS: &[&str] = &["authorization", "cookie"];

/// Which of the normally withheld headers a source stores (because one of
/// its targets forwards them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    pub credentials: bool,
    pub proxy_headers: bool,
}

/// The headers holding `provider`'s credential: `Authorization` and
/// `Cookie` always, plus the header a shared-secret scheme (bearer, token,
/// basic) reads its secret from. A MAC signature is not a credential (it
/// only vouches for this one body) and is forwarded.
pub fn credential_headers(provider: &super::provider::Provider) -> Vec<String> {
    use super::schemes::Scheme;
    let mut out: Vec<String> = ALWAYS_CREDENTIALS.iter().map(|h| (*h).to_owned()).collect();
    if matches!(provider.signature.scheme, Scheme::Token | Scheme::Basic) {
        for h in &provider.signature.headers {
            let h = h.to_ascii_lowercase();
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out
}

/// The header names withheld from a destination that does (or does not)
/// take credentials and proxy headers.
pub fn withheld(provider: &super::provider::Provider, keep: Keep) -> Vec<String> {
    let mut out = Vec::new();
    if !keep.credentials {
        out.extend(credential_headers(provider));
    }
    if !keep.proxy_headers {
        out.extend(PROXY_HEADERS.iter().map(|h| (*h).to_owned()));
    }
    out
}

/// The provider's headers as they will be stored and forwarded: hop-by-hop
/// headers, the headers the client's `Connection` header names, Host,
/// Content-Length, any client-sent `Hookgate-*`, and every name in
/// `withheld` removed. A value that is not ASCII is kept: as text when it
/// is UTF-8, otherwise read as ISO-8859-1 (RFC 9110 §5.5's `obs-text`).
///
/// The names and values move out of the request's map, uncopied: this runs
/// for every new event.
pub fn forwardable(headers: HeaderMap, withheld: &[String]) -> StoredHeaders {
    let named_by_connection: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let forwarded = |n: &str| {
        !HOP_BY_HOP.contains(&n)
            && !n.starts_with("hookgate-")
            && !named_by_connection.iter().any(|c| c == n)
            && !withheld.iter().any(|w| w == n)
    };
    let mut out = StoredHeaders::with_capacity(headers.len());
    // A name comes once, with its first value; its further values follow
    // with `None`, so the name is copied only for those.
    let mut values = headers.into_iter().peekable();
    let mut name: Option<http::HeaderName> = None;
    while let Some((first, value)) = values.next() {
        if first.is_some() {
            name = first;
        }
        let Some(n) = &name else { continue };
        if !forwarded(n.as_str()) {
            continue;
        }
        let more = matches!(values.peek(), Some((None, _)));
        let n = if more {
            n.clone()
        } else {
            name.take().expect("matched above")
        };
        out.push(n, value);
    }
    out
}

/// [`header_text`] without a copy of a UTF-8 value.
fn header_cow(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
    }
}

/// A header value's bytes as text: UTF-8 when valid, else ISO-8859-1.
pub fn header_text(bytes: &[u8]) -> String {
    header_cow(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// `at_pointer` reads what serde_json's `Value::pointer` reads, escapes
    /// and array indices included.
    #[test]
    fn at_pointer_agrees_with_serde_json() {
        let doc: Value = serde_json::from_str(
            r#"{"id":"evt_1","a/b":{"m~n":[10,{"x":true}]},"":{"":"empty"},"list":[0,1,2]}"#,
        )
        .unwrap();
        for p in [
            "",
            "/id",
            "/a~1b",
            "/a~1b/m~0n",
            "/a~1b/m~0n/0",
            "/a~1b/m~0n/1/x",
            "/a~1b/m~0n/2",
            "/list/01",
            "/list/+1",
            "/list/2",
            "/list/-",
            "/",
            "//",
            "/id/0",
            "id",
            "/missing/x",
            "/a~1b/m~n",
        ] {
            assert_eq!(at_pointer(&doc, p), doc.pointer(p), "{p:?}");
        }
    }

    #[test]
    fn headers_named_by_connection_and_withheld_ones_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("keep-alive, X-Hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        h.insert("authorization", HeaderValue::from_static("Bearer t"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        let withheld = vec!["authorization".to_owned(), "x-forwarded-for".to_owned()];
        let out = forwarded_pairs(&h, &withheld);
        assert_eq!(out, vec![("x-kept".to_owned(), "yes".to_owned())]);
    }

    #[test]
    fn bodies_nested_deeper_than_the_limit_are_not_parsed() {
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        let ok = format!("{{\"a\":{}1{}}}", "[".repeat(10), "]".repeat(10));
        let h = HeaderMap::new();
        assert!(Fields::new(&h, deep.as_bytes()).json_is_object().is_none());
        assert!(Fields::new(&h, ok.as_bytes()).json_is_object().is_some());
        // Brackets inside strings do not count.
        let s = format!("{{\"a\":\"{}\\\"\"}}", "[".repeat(100));
        assert!(json_depth_within(s.as_bytes(), 2));
    }

    /// The byte-by-byte scan the `memchr` one replaced: both must agree.
    fn depth_within_bytewise(body: &[u8], max: usize) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for &b in body {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return false;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        true
    }

    #[test]
    fn the_depth_scan_agrees_with_a_bytewise_scan_on_random_bodies() {
        // Bodies over the bytes that matter (quotes, escapes, brackets),
        // with a fixed-seed xorshift so a failure reproduces.
        let alphabet = b"\"\\[]{}a:,";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut body = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for _ in 0..(x % 40) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                body.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            for max in [0, 1, 2, 3] {
                assert_eq!(
                    json_depth_within(&body, max),
                    depth_within_bytewise(&body, max),
                    "{:?} max {max}",
                    String::from_utf8_lossy(&body)
                );
            }
        }
    }

    #[test]
    fn non_ascii_header_values_survive() {
        let mut h = HeaderMap::new();
        h.insert("x-name", HeaderValue::from_bytes("Zoë".as_bytes()).unwrap());
        h.insert("x-latin1", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        let out = forwarded_pairs(&h, &[]);
        assert!(out.contains(&("x-name".to_owned(), "Zoë".to_owned())));
        assert!(out.contains(&("x-latin1".to_owned(), "café".to_owned())));
    }

    /// What the ledger stores: quotes escaped, a repeated header kept in
    /// order, `[]` for none.
    #[test]
    fn forwarded_headers_are_json_pairs() {
        let mut h = HeaderMap::new();
        h.insert("x-name", HeaderValue::from_static("a \"q\""));
        h.append("x-twice", HeaderValue::from_static("1"));
        h.append("x-twice", HeaderValue::from_static("2"));
        assert_eq!(
            forwardable(h, &[]).to_json(),
            r#"[["x-name","a \"q\""],["x-twice","1"],["x-twice","2"]]"#
        );
        assert_eq!(forwardable(HeaderMap::new(), &[]).to_json(), "[]");
    }

    fn forwarded_pairs(h: &HeaderMap, withheld: &[String]) -> Vec<(String, String)> {
        let stored = forwardable(h.clone(), withheld);
        serde_json::from_str(&stored.to_json()).unwrap()
    }
}
