//! Whether a source's event id and event type come from signed data: a
//! header outside the signature can be changed by whoever relays the
//! request (and an unsigned id lets them dodge dedup or collide with
//! another event); a body field under a body signature cannot. Shown by
//! `hookgate check-config`, `/stats` and the console.
//!
//! Rule: computed from the checked provider model alone. Each scheme says
//! what its signature covers ([`SchemeDef::covers`](super::schemes::SchemeDef::covers));
//! this module only asks it about every place the id and type are read
//! from, and keeps the weakest answer.

use super::locator::{Locator, Lookup};
use super::provider::Provider;
use super::schemes::{Cover, Part};
use super::source::Source;

/// How one fact (the event id, the event type) is covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// The weakest cover of every place the fact may be read from: the
    /// request picks which one is present, so the weakest is what counts.
    pub cover: Cover,
    /// The places (as written in the provider file) with that weakest
    /// cover, when it is not `Signed`.
    pub weakest: Vec<String>,
}

/// A provider's event id and type, as its signature covers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signedness {
    pub event_id: Fact,
    /// `None`: the provider's events are untyped.
    pub event_type: Option<Fact>,
}

/// What `provider`'s signature covers of its event id and type.
pub fn of(provider: &Provider) -> Signedness {
    let scheme = provider.signature.scheme;
    let mut id = Weakest::default();
    let rule = &provider.event_id;
    for lookup in rule.from.iter().chain(&rule.composite) {
        id.lookup(provider, lookup);
    }
    if rule.body_hash {
        id.add(
            scheme.covers(provider, Part::Body),
            "the body's hash".into(),
        );
    }
    let event_type = match (&provider.event_type, scheme.type_from()) {
        (Some(t), _) => {
            let mut w = Weakest::default();
            for lookup in &t.parts {
                w.lookup(provider, lookup);
            }
            Some(w.fact())
        }
        (None, Some(from)) => {
            let mut w = Weakest::default();
            w.add(scheme.covers(provider, Part::OwnType), from.to_owned());
            Some(w.fact())
        }
        (None, None) => None,
    };
    Signedness {
        event_id: id.fact(),
        event_type,
    }
}

/// What a source's signature covers: its provider's id and type, or, for
/// a `split` source, each item's (read within the item, which is part of
/// the body: as covered as the body).
pub fn of_source(source: &Source) -> Signedness {
    let provider = &source.provider;
    let Some(split) = &source.split else {
        return of(provider);
    };
    let body = provider.signature.scheme.covers(provider, Part::Body);
    let mut id = Weakest::default();
    match &split.event_id {
        Some(rule) => {
            for lookup in rule.from.iter().chain(&rule.composite) {
                id.item(provider, lookup, body);
            }
            if rule.body_hash {
                id.add(body, "the item's hash".into());
            }
        }
        None => id.add(body, "the item's hash".into()),
    }
    let event_type = split.event_type.as_ref().map(|t| {
        let mut w = Weakest::default();
        for lookup in &t.parts {
            w.item(provider, lookup, body);
        }
        w.fact()
    });
    Signedness {
        event_id: id.fact(),
        event_type,
    }
}

impl Fact {
    /// `signed`, or e.g. `unsigned (header:x-github-delivery)`.
    pub fn describe(&self) -> String {
        if self.cover == Cover::Signed {
            return "signed".into();
        }
        format!("{} ({})", self.cover.as_str(), self.weakest.join(", "))
    }

    /// `{"cover": "unsigned", "weakest": ["header:x"]}` for `/stats`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "cover": self.cover.as_str(), "weakest": self.weakest })
    }
}

impl Signedness {
    /// The `check-config` line: `event id signed; event type unsigned (…)`.
    pub fn describe(&self) -> String {
        let t = self
            .event_type
            .as_ref()
            .map_or_else(|| "none".to_owned(), Fact::describe);
        format!("event id {}; event type {t}", self.event_id.describe())
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "event_id": self.event_id.to_json(),
            "event_type": self.event_type.as_ref().map(Fact::to_json),
        })
    }
}

/// The weakest cover of the places `lookup` may read from.
pub fn cover_of(provider: &Provider, lookup: &Lookup) -> Cover {
    let mut w = Weakest::default();
    w.lookup(provider, lookup);
    w.cover
}

/// The weakest cover seen so far and where.
struct Weakest {
    cover: Cover,
    at: Vec<String>,
}

impl Default for Weakest {
    fn default() -> Self {
        Self {
            cover: Cover::Signed,
            at: vec![],
        }
    }
}

impl Weakest {
    fn lookup(&mut self, provider: &Provider, lookup: &Lookup) {
        for alt in &lookup.alternatives {
            let cover = provider.signature.scheme.covers(provider, Part::At(alt));
            let one = Lookup {
                alternatives: vec![alt.clone()],
                ..Lookup::default()
            };
            self.add(cover, one.show());
        }
    }

    /// A lookup within a split item: its JSON values are the body's.
    fn item(&mut self, provider: &Provider, lookup: &Lookup, body: Cover) {
        for alt in &lookup.alternatives {
            let one = Lookup {
                alternatives: vec![alt.clone()],
                ..Lookup::default()
            };
            let cover = match alt {
                Locator::Json(_) => body,
                _ => provider.signature.scheme.covers(provider, Part::At(alt)),
            };
            self.add(cover, format!("item {}", one.show()));
        }
    }

    fn add(&mut self, cover: Cover, at: String) {
        if cover < self.cover {
            (self.cover, self.at) = (cover, vec![]);
        }
        if cover == self.cover && cover != Cover::Signed && !self.at.contains(&at) {
            self.at.push(at);
        }
    }

    fn fact(self) -> Fact {
        Fact {
            cover: self.cover,
            weakest: self.at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::registry::Registry;

    #[test]
    fn a_split_source_is_judged_by_its_items() {
        let p = Registry::builtin().get("microsoft-graph").unwrap();
        let src = crate::verify::tests::source_with("microsoft-graph", &["cs"], |s| {
            s.split = p.split.clone();
        });
        let s = of_source(&src);
        assert_eq!(s.event_id, unsigned(&["the item's hash"]));
        let p = Registry::builtin().get("xero").unwrap();
        let src = crate::verify::tests::source_with("xero", &["k"], |s| s.split = p.split.clone());
        let s = of_source(&src);
        assert_eq!((s.event_id, s.event_type), (signed(), Some(signed())));
    }

    fn of_builtin(name: &str) -> Signedness {
        of(&Registry::builtin().get(name).unwrap())
    }

    fn signed() -> Fact {
        Fact {
            cover: Cover::Signed,
            weakest: vec![],
        }
    }

    fn unsigned(at: &[&str]) -> Fact {
        Fact {
            cover: Cover::Unsigned,
            weakest: at.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Issue #32: Linear preferred its unsigned `Linear-Event` header over
    /// the signed `type`; Lemon Squeezy fell back to `X-Event-Name`. Where
    /// the body names the type, only the body is read. GitHub, Shopify and
    /// WooCommerce name it only in a header (the per-source cap of type
    /// names bounds what a relay can invent there).
    #[test]
    fn a_type_the_body_signs_is_read_from_the_body_only() {
        for p in ["linear", "lemonsqueezy"] {
            assert_eq!(of_builtin(p).event_type, Some(signed()), "{p}");
        }
        for p in ["github", "shopify", "woocommerce"] {
            let t = of_builtin(p).event_type.unwrap();
            assert_eq!(t.cover, Cover::Unsigned, "{p}");
        }
    }

    #[test]
    fn a_body_signature_signs_body_fields() {
        // Stripe: HMAC over `{t}.{body}`; id and type are body fields.
        let s = of_builtin("stripe");
        assert_eq!(s.event_id, signed());
        assert_eq!(s.event_type, Some(signed()));
        assert_eq!(s.describe(), "event id signed; event type signed");
    }

    #[test]
    fn headers_outside_the_signature_are_unsigned() {
        // GitHub signs the body only: the delivery GUID and the event
        // header are not covered; the type's `action` part is.
        let s = of_builtin("github");
        assert_eq!(s.event_id, unsigned(&["header:x-github-delivery"]));
        assert_eq!(s.event_type, Some(unsigned(&["header:x-github-event"])));
        assert_eq!(
            s.describe(),
            "event id unsigned (header:x-github-delivery); event type unsigned (header:x-github-event)"
        );
    }

    #[test]
    fn a_header_the_template_names_is_signed() {
        // Standard Webhooks signs `{webhook-id}.{timestamp}.{body}`.
        let s = of_builtin("standard-webhooks");
        assert_eq!(s.event_id, signed());
    }

    #[test]
    fn a_manifest_that_leaves_the_body_out_leaves_its_fields_unsigned() {
        // Mercado Pago signs `id:{query:data.id};request-id:…;ts:…;` only.
        let s = of_builtin("mercadopago");
        assert_eq!(s.event_id, unsigned(&["json:/id"]));
    }

    #[test]
    fn code_schemes_answer_for_their_own_fields() {
        // Adyen: pspReference, eventCode and success are among the eight
        // signed fields of each item.
        let s = of_builtin("adyen");
        assert_eq!(s.event_id, signed());
        assert_eq!(s.event_type, Some(signed()));
        // Braintree: its own type comes from the signed payload.
        let b = of_builtin("braintree");
        assert_eq!((b.event_id, b.event_type), (signed(), Some(signed())));
        // PayPal: the body is bound only by a CRC-32.
        let p = of_builtin("paypal");
        assert_eq!(p.event_id.cover, Cover::Checksum);
        assert!(
            p.describe().starts_with("event id crc32 (json:/id)"),
            "{}",
            p.describe()
        );
        // Twilio signs URL and form, not the idempotency header that is
        // tried first: the weakest place decides.
        let t = of_builtin("twilio");
        assert_eq!(t.event_id, unsigned(&["header:i-twilio-idempotency-token"]));
        assert_eq!(t.event_type, Some(signed()));
        // A token authenticates the sender and signs nothing.
        let x = of_builtin("xendit");
        assert_eq!(x.event_id.cover, Cover::Unsigned);
        // Robokassa signs `InvId`; its events are untyped.
        let r = of_builtin("robokassa");
        assert_eq!((r.event_id, r.event_type), (signed(), None));
        // T-Bank hashes the root scalars, so `PaymentId` and `Status`.
        assert_eq!(of_builtin("tbank").event_id, signed());
    }
}
