//! Routes: which of a source's targets want a verified event.
//!
//! A target subscribes with `events` (globs over the provider's event
//! type; default: every event) and an optional `filter` (locator =
//! value, all must match). Decided once per event, when dedup may store it
//! (`verify::Verified::take_facts` asks the source's [`Routes`] through
//! `verify::router::Router`), so a retry answered from the cache costs
//! nothing. A `filter` or `order_by` JSON pointer walks the body on its
//! own; only the provider's own pointers share verification's walk. An
//! event no target wants is still stored (counted `unrouted`); it just gets
//! no delivery rows.
//!
//! Rule: a route is the target's `events`, `filter` and `order_by`, nothing
//! else; every replica with the same config decides the same way.

use super::Target;
use crate::verify::fields::Fields;
use crate::verify::locator::{Locator, Lookup};
use crate::verify::router::{Routed, Router};

/// What one target accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    /// Globs over the event type (`*` = any run of characters, `?` = one);
    /// `None` = every event, typed or not.
    pub events: Option<Vec<String>>,
    /// Locator → the value it must hold; every entry must match.
    pub filter: Vec<(Lookup, String)>,
}

/// One of a source's targets with the rule it subscribes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub target: String,
    pub rule: Rule,
    /// `order_by`: where the event's ordering key is (docs/design.md
    /// "Ordering"); `None` = deliveries to this target are unordered.
    pub order_by: Option<Lookup>,
}

/// Longest ordering key stored as is; a longer one is stored as
/// `sha256:<hex>` of itself (the same key still maps to the same text, and
/// an index entry stays small).
pub const MAX_ORDER_KEY: usize = 200;

/// Parses a target's `order_by`: any locator routing accepts.
pub fn parse_order_by(text: &str) -> Result<Lookup, String> {
    routing_locator(text)
}

/// A locator routing accepts (`filter`, `order_by`): header, json, form or
/// query, alternatives with `|`; never a signature part.
fn routing_locator(text: &str) -> Result<Lookup, String> {
    let lookup = Lookup::parse(text)?;
    if lookup
        .alternatives
        .iter()
        .any(|l| matches!(l, Locator::Signature(_)))
    {
        return Err(format!(
            "`{text}`: use a header, json, form or query locator"
        ));
    }
    Ok(lookup)
}

/// The ordering key `order_by` finds in the event; `None` (unordered) when
/// the locator finds nothing or an empty value.
pub fn order_key(order_by: &Lookup, fields: &Fields<'_>) -> Option<String> {
    let key = fields.lookup(order_by, &[]).filter(|k| !k.is_empty())?;
    if key.len() <= MAX_ORDER_KEY {
        return Some(key);
    }
    use sha2::Digest;
    let digest: [u8; 32] = sha2::Sha256::digest(key.as_bytes()).into();
    Some(format!("sha256:{}", hex::encode(digest)))
}

impl Rule {
    /// Parses a target's `events` and `filter`; the error names the
    /// offending entry.
    pub fn parse(
        events: Option<Vec<String>>,
        filter: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, String> {
        if let Some(globs) = &events
            && let Some(bad) = globs.iter().find(|g| g.trim().is_empty())
        {
            return Err(format!("empty event pattern `{bad}`"));
        }
        let mut parsed = Vec::new();
        for (locator, value) in filter {
            let lookup = routing_locator(&locator).map_err(|e| format!("filter: {e}"))?;
            parsed.push((lookup, value));
        }
        Ok(Self {
            events,
            filter: parsed,
        })
    }

    /// Whether an event of type `event_type` with these fields matches.
    pub fn matches(&self, event_type: Option<&str>, fields: &Fields<'_>) -> bool {
        let typed = match (&self.events, event_type) {
            (None, _) => true,
            (Some(globs), Some(t)) => globs.iter().any(|g| glob(g.as_bytes(), t.as_bytes())),
            (Some(_), None) => false,
        };
        typed
            && self
                .filter
                .iter()
                .all(|(lookup, want)| fields.lookup(lookup, &[]).as_deref() == Some(want))
    }

    /// `events=[…] filter={…}` for `check-config`; empty for the default.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(globs) = &self.events {
            parts.push(format!("events=[{}]", globs.join(", ")));
        }
        if !self.filter.is_empty() {
            let f: Vec<String> = self
                .filter
                .iter()
                .map(|(l, v)| format!("{} = {v:?}", l.show()))
                .collect();
            parts.push(format!("filter={{{}}}", f.join(", ")));
        }
        parts.join(" ")
    }
}

/// A source's routes: its targets with their rules, in its `targets` order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes(pub Vec<Route>);

impl Routes {
    /// The routes of a source whose `targets` are these names; a name
    /// `target` does not know is left out (config validation reports it).
    pub fn of<'a>(names: &[String], target: impl Fn(&str) -> Option<&'a Target>) -> Self {
        Self(
            names
                .iter()
                .filter_map(|n| target(n))
                .map(|t| Route {
                    target: t.name.clone(),
                    rule: t.rule.clone(),
                    order_by: t.order_by.clone(),
                })
                .collect(),
        )
    }
}

impl Router for Routes {
    fn select(&self, event_type: Option<&str>, fields: &Fields<'_>) -> Routed {
        select(&self.0, event_type, fields)
    }
}

/// The routes that want this event, with their ordering keys.
pub fn select(routes: &[Route], event_type: Option<&str>, fields: &Fields<'_>) -> Routed {
    let mut out = Routed::default();
    for r in routes.iter().filter(|r| r.rule.matches(event_type, fields)) {
        out.targets.push(r.target.clone());
        out.order_keys.push(
            r.order_by
                .as_ref()
                .map(|l| order_key(l, fields).unwrap_or_default()),
        );
    }
    out
}

/// Shell-style match of the whole text: `*` any run (dots included), `?`
/// one byte, anything else itself. Iterative with one backtrack point, so
/// a pattern costs O(pattern × text) at worst.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn globs_match_whole_types() {
        assert!(glob(b"invoice.*", b"invoice.paid"));
        assert!(glob(b"charge.dispute.*", b"charge.dispute.funds_withdrawn"));
        assert!(glob(b"*", b"anything.at.all"));
        assert!(glob(b"*.created", b"customer.subscription.created"));
        assert!(glob(b"invoice.?aid", b"invoice.paid"));
        assert!(glob(b"a*b*c", b"aXXbYYbc"));
        assert!(!glob(b"invoice.*", b"invoices.paid"));
        assert!(!glob(b"invoice.paid", b"invoice.paid.late"));
        assert!(!glob(b"charge.dispute.*", b"charge.succeeded"));
    }

    #[test]
    fn events_and_filter_must_both_match() {
        let rule = Rule::parse(
            Some(vec!["invoice.*".into()]),
            [("json:/data/object/currency".to_owned(), "eur".to_owned())],
        )
        .unwrap();
        let h = HeaderMap::new();
        let eur = br#"{"data":{"object":{"currency":"eur"}}}"#;
        let usd = br#"{"data":{"object":{"currency":"usd"}}}"#;
        assert!(rule.matches(Some("invoice.paid"), &Fields::new(&h, eur)));
        assert!(!rule.matches(Some("invoice.paid"), &Fields::new(&h, usd)));
        assert!(!rule.matches(Some("charge.succeeded"), &Fields::new(&h, eur)));
        assert!(!rule.matches(None, &Fields::new(&h, eur)));
        assert!(Rule::default().matches(None, &Fields::new(&h, b"not json")));
    }

    #[test]
    fn order_keys_come_from_any_locator_and_missing_means_unordered() {
        let by_json = parse_order_by("json:/data/object/id").unwrap();
        let by_header = parse_order_by("header:X-Object|json:/id").unwrap();
        assert!(parse_order_by("signature:t").is_err());
        assert!(parse_order_by("nope:x").is_err());
        let route = |order_by| Route {
            target: "t".into(),
            rule: Rule::default(),
            order_by,
        };
        let mut h = HeaderMap::new();
        let body = br#"{"id":"evt_1","data":{"object":{"id":"cus_9"}}}"#;
        let picked = select(
            &[route(Some(by_json.clone()))],
            None,
            &Fields::new(&h, body),
        );
        assert_eq!(picked.order_keys, [Some("cus_9".to_owned())]);
        // An ordered target, no key in this event: "" (delivered unordered).
        let keyless = select(
            &[route(Some(by_json.clone()))],
            None,
            &Fields::new(&h, b"{}"),
        );
        assert_eq!(keyless.order_keys, [Some(String::new())]);
        // Missing or empty: unordered.
        let none = br#"{"data":{"object":{"id":""}}}"#;
        assert_eq!(order_key(&by_json, &Fields::new(&h, none)), None);
        assert_eq!(order_key(&by_json, &Fields::new(&h, b"{}")), None);
        // Alternatives: the header first, then the body.
        assert_eq!(
            order_key(&by_header, &Fields::new(&h, body)),
            Some("evt_1".into())
        );
        h.insert("x-object", "obj_7".parse().unwrap());
        assert_eq!(
            order_key(&by_header, &Fields::new(&h, body)),
            Some("obj_7".into())
        );
        // No order_by: no key.
        let plain = select(&[route(None)], None, &Fields::new(&h, body));
        assert_eq!(plain.targets, ["t"]);
        assert_eq!(plain.order_keys, [None]);
        // A long key is stored by its hash, the same for the same key.
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(500));
        let k = order_key(
            &parse_order_by("json:/id").unwrap(),
            &Fields::new(&h, long.as_bytes()),
        );
        let k = k.unwrap();
        assert!(k.starts_with("sha256:") && k.len() == 7 + 64, "{k}");
    }

    #[test]
    fn a_filter_reads_headers_and_refuses_signature_locators() {
        let rule = Rule::parse(None, [("header:X-Region".to_owned(), "eu".to_owned())]).unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-region", "eu".parse().unwrap());
        assert!(rule.matches(None, &Fields::new(&h, b"{}")));
        assert!(Rule::parse(None, [("signature:t".to_owned(), "1".to_owned())]).is_err());
        assert!(Rule::parse(None, [("nope".to_owned(), "1".to_owned())]).is_err());
        assert!(Rule::parse(Some(vec![" ".into()]), []).is_err());
    }
}
