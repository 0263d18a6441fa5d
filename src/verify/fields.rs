//! Reading values out of a request for templates and event ids: headers,
//! JSON pointers, form fields. The body is read lazily, only after the
//! signature has been checked or when the template needs it, and a JSON
//! pointer materialises only its own path (`json_subset`): this may run
//! before the signature is checked.
//!
//! Rule: a read that may come before the signature check never parses more
//! of the body than its pointer needs, and each kind of read (form, query,
//! the JSON walk of the pointers read together) is done at most once per
//! request.

use super::VerifyError;
use super::json_pointer::{at_pointer, scalar};
use super::json_subset::{Want, subset};
use super::locator::{Locator, Lookup};
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

/// The one walk of a body's JSON that serves every pointer read together
/// ([`Fields::into_walk`]): `None` if not done yet, else its result
/// (`Some(None)`: not JSON within the limits).
pub type JsonWalk = Option<Option<Value>>;

pub struct Fields<'a> {
    headers: &'a HeaderMap,
    body: &'a [u8],
    query: &'a str,
    /// Pointers read together, and their one walk (at most once).
    together: Option<&'a JsonWants>,
    walk: OnceCell<Option<Value>>,
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
            walk: OnceCell::new(),
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

    /// The walk of the body, as far as it went, for a later `Fields` of
    /// the same request ([`Fields::with_walk`]).
    pub fn into_walk(self) -> JsonWalk {
        self.walk.into_inner()
    }

    /// Reuses the walk an earlier `Fields` of the same request and body
    /// did ([`Fields::into_walk`]); both must read together the same
    /// `wants` (`verify::fields_of` builds both).
    pub fn with_walk(mut self, walk: JsonWalk) -> Self {
        if let Some(done) = walk {
            self.walk = OnceCell::from(done);
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
    /// [`MAX_JSON_DEPTH`](super::json_depth::MAX_JSON_DEPTH) (a deep body costs far more than its size, which
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
                .walk
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

    /// A 400 when a header, form field or query parameter that one of
    /// `lookups` reads appears more than once: hookgate reads the first,
    /// and a consumer reading the last would act on a value nobody
    /// checked. (A JSON key repeated on a path hookgate reads makes the
    /// body unreadable instead: `json_subset`.)
    pub fn refuse_repeated<'l>(
        &self,
        lookups: impl IntoIterator<Item = &'l Lookup>,
    ) -> Result<(), VerifyError> {
        for lookup in lookups {
            for l in &lookup.alternatives {
                let repeated = match l {
                    Locator::Header(name) => self.headers.get_all(name.as_str()).iter().count() > 1,
                    Locator::Form(name) => self.form_count(name) > 1,
                    Locator::Query(name) => {
                        self.query_pairs().iter().filter(|(k, _)| k == name).count() > 1
                    }
                    Locator::Json(_) | Locator::Signature(_) => false,
                };
                if repeated {
                    return Err(VerifyError::BadBody(
                        "a field hookgate reads is repeated in the request",
                    ));
                }
            }
        }
        Ok(())
    }

    /// How often form field `name` appears in the body.
    pub fn form_count(&self, name: &str) -> usize {
        form_urlencoded::parse(self.body)
            .filter(|(k, _)| k == name)
            .count()
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

    /// Every value a `*` JSON pointer of `lookup` finds, each apart (not
    /// joined); any other lookup gives its one value. Empty when absent.
    pub fn lookup_each(&self, lookup: &Lookup) -> Vec<String> {
        for l in &lookup.alternatives {
            if let Locator::Json(pointer) = l
                && pointer.contains("/*")
            {
                let mut out = Vec::new();
                if let Some(part) = self.json_part(pointer) {
                    collect(&part, pointer, &mut out);
                }
                if !out.is_empty() {
                    return out;
                }
            } else if let Some(v) = self.locate(l, &[]) {
                return vec![v];
            }
        }
        Vec::new()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::json_depth::{MAX_JSON_DEPTH, json_depth_within};

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
}
