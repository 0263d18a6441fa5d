//! The provider file format as written (serde, `deny_unknown_fields`):
//! `providers/*.toml` and the per-source overrides. Checked into the model
//! in `provider.rs`.

use super::schemes::Scheme;
use crate::primitives::crypto::{Algorithm, Encoding, SecretEncoding};
use crate::primitives::duration::Dur;
use crate::primitives::time::Millis;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProviderFile {
    /// Name used as `provider = "…"` in a source.
    pub(super) name: String,
    /// Human name for listings.
    pub(super) title: String,
    /// Where the provider documents its signature.
    #[serde(default)]
    pub(super) docs: String,
    /// The catalogue section it is listed under (`docs/providers.md`).
    #[serde(default)]
    pub(super) category: Category,
    /// Where the operator finds the secret (or the values that stand for
    /// one) in the provider's dashboard, for the catalogue.
    #[serde(default)]
    pub(super) dashboard: String,
    /// One line the catalogue adds to the provider's row: what to set
    /// when registering the URL, or that the provider does not sign.
    #[serde(default)]
    pub(super) note: String,
    /// Where the provider's event type lives (`json:/type`), or several
    /// places whose values are joined with `.` (GitHub:
    /// `["header:X-GitHub-Event", "json:/action"]` gives `issues.opened`).
    /// Routed on and shown by the admin console, never verified.
    pub(super) event_type: Option<OneOrMany>,
    /// Where the id of the provider object the event is about is
    /// (`json:/data/object/id` for Stripe): stored with the event and
    /// searched by the console (`GET /admin/events?object=…`). A header,
    /// json, form or query locator; never verified.
    pub(super) object_id: Option<String>,
    pub(super) signature: SignatureSpec,
    pub(super) timestamp: Option<TimestampSpec>,
    pub(super) event_id: EventIdSpec,
    #[serde(default)]
    pub(super) response: ResponseSpec,
    /// Requests answered without storing (challenges, pings, handshakes).
    #[serde(default)]
    pub(super) control: Vec<ControlSpec>,
    /// A batch body whose items may be admitted one by one (`split`).
    pub(super) split: Option<SplitSpec>,
}

/// What a file does not take from its `preset`: it must say them itself.
const OWN_KEYS: &[&str] = &["name", "title", "docs", "category", "dashboard", "note"];
/// Tables a file replaces whole instead of key by key: an id rule is
/// tried in order (`from`, then `composite`), so keeping the preset's
/// `from` under the file's `composite` would change its meaning.
const WHOLE_TABLES: &[&str] = &["event_id"];

impl ProviderFile {
    /// Parses a provider file. `preset = "standard-webhooks"` (any built-in
    /// provider) starts from that provider's definition: each table of the
    /// file replaces the preset's keys one by one (`[event_id]` replaces
    /// the preset's whole), other keys replace whole, and the naming keys
    /// (`name`, `title`, `docs`, …) are never inherited. Clerk, Resend and OpenAI speak Standard Webhooks; their
    /// files add only what is theirs (event type, id, dashboard).
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        let mut file: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        if let Some(preset) = file.remove("preset") {
            let name = preset
                .as_str()
                .ok_or("preset must name a built-in provider")?;
            let base_text = super::registry::BUILTIN
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| *t)
                .ok_or_else(|| format!("preset `{name}` is not a built-in provider"))?;
            let mut base: toml::Table = base_text
                .parse()
                .map_err(|e: toml::de::Error| e.to_string())?;
            if base.contains_key("preset") {
                return Err(format!("preset `{name}` has a preset itself; name its own"));
            }
            for k in OWN_KEYS {
                base.remove(*k);
            }
            for (k, v) in file {
                match (base.get_mut(&k), v) {
                    (Some(toml::Value::Table(b)), toml::Value::Table(t))
                        if !WHOLE_TABLES.contains(&k.as_str()) =>
                    {
                        b.extend(t)
                    }
                    (_, v) => {
                        base.insert(k, v);
                    }
                }
            }
            file = base;
        }
        toml::Value::Table(file)
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignatureSpec {
    /// `hmac` (default, all data) or a code scheme (`adyen`, `paypal`, …).
    #[serde(default)]
    pub(super) scheme: Scheme,
    /// Header(s) carrying the signature; the first present is used. A
    /// name ending in `*` stands for every header with that prefix
    /// (DocuSign's `X-DocuSign-Signature-1`, `-2`, …; needs `every_header`).
    pub(super) header: Option<OneOrMany>,
    /// Every listed header present contributes its signatures, instead of
    /// the first present only: providers that sign with each active key in
    /// its own header (Box's primary and secondary, DocuSign's numbered ones).
    #[serde(default)]
    pub(super) every_header: bool,
    /// `hmac`: the signature is a value of the request instead of a header
    /// (a locator, as `[timestamp] from`: Mailgun's
    /// `json:/signature/signature`, Midtrans's `json:/signature_key`).
    pub(super) from: Option<String>,
    /// `token` scheme: query parameter carrying the token instead of a header.
    pub(super) query: Option<String>,
    /// How the header value holds signatures.
    #[serde(default)]
    pub(super) format: HeaderFormat,
    /// `pairs` and `list`: item separator (default `,`); `tagged`: list
    /// separator (default ` `).
    pub(super) separator: Option<String>,
    /// `pairs`: keys whose values are signatures (`["v1"]`); `tagged`: accepted tags.
    #[serde(default)]
    pub(super) keys: Vec<String>,
    /// `value`: a prefix the signature must carry (`sha256=`).
    pub(super) prefix: Option<String>,
    pub(super) algorithm: Option<Algorithm>,
    pub(super) encoding: Option<Encoding>,
    #[serde(default)]
    pub(super) secret_encoding: SecretEncoding,
    /// Prefixes removed from a secret before decoding (`["whsec_"]`).
    #[serde(default)]
    pub(super) secret_prefixes: Vec<String>,
    /// `canonical` scheme: which canonical request is signed
    /// (`contentful`: method, path, the signed header set and body;
    /// `hubspot`: method, URL, body and timestamp).
    pub(super) canonical: Option<crate::verify::schemes::canonical::Layout>,
    /// What is signed, e.g. `"{timestamp}.{body}"`. Placeholders: `{body}`,
    /// `{timestamp}`, `{url}`, `{secret}` (the secret itself, hashed with
    /// the content) and any locator (`{header:webhook-id}`).
    pub(super) signed_content: Option<String>,
}

/// `[sources.<name>.signature]`: per-source replacements for the provider's
/// `[signature]` fields (the generic `hmac` / `bearer` providers are built
/// this way).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureOverrides {
    /// Header carrying the signature or token.
    pub header: Option<OneOrMany>,
    /// Query parameter carrying the token (`bearer` provider).
    pub query: Option<String>,
    /// Prefix of the header value (`sha256=`, `Bearer `).
    pub prefix: Option<String>,
    /// `hmac-sha1`, `hmac-sha256`, `hmac-sha512` (or a plain digest for Robokassa).
    pub algorithm: Option<Algorithm>,
    /// `hex` or `base64`.
    pub encoding: Option<Encoding>,
    /// `raw` (default), `base64`, `hex`.
    pub secret_encoding: Option<SecretEncoding>,
    /// Signed-content template, default `{body}`.
    pub signed_content: Option<String>,
}

/// Catalogue sections, in the order `docs/providers.md` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// Payment processors, acquirers, wallets.
    Payments,
    /// Subscriptions, invoicing, usage billing.
    Billing,
    /// Banking, cards, treasury, payouts.
    Banking,
    /// Shops, marketplaces, shipping.
    Commerce,
    /// Source hosting, CI, deploys, monitoring, incidents.
    DeveloperTools,
    /// Chat, SMS, voice, social platforms.
    Messaging,
    /// Sending and receiving e-mail.
    Email,
    /// CRM, marketing, customer support.
    Crm,
    /// Documents, forms, scheduling, project tools, storage.
    Productivity,
    /// Sign-in, directories, identity verification.
    Identity,
    /// Content management, media, analytics pipelines.
    Content,
    /// AI and model APIs.
    Ai,
    /// Not a provider: a generic scheme configured per source.
    #[default]
    Generic,
}

impl Category {
    /// The heading `docs/providers.md` gives the section.
    pub fn title(self) -> &'static str {
        match self {
            Self::Payments => "Payments",
            Self::Billing => "Billing and subscriptions",
            Self::Banking => "Banking and cards",
            Self::Commerce => "Commerce",
            Self::DeveloperTools => "Developer tools",
            Self::Messaging => "Messaging and social",
            Self::Email => "E-mail",
            Self::Crm => "CRM, marketing and support",
            Self::Productivity => "Productivity",
            Self::Identity => "Identity",
            Self::Content => "Content, media and data",
            Self::Ai => "AI",
            Self::Generic => "Generic schemes",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// How a signature header value is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HeaderFormat {
    /// The whole value is one signature, after an optional prefix (GitHub, Shopify).
    #[default]
    Value,
    /// `k=v` items, e.g. `t=…,v1=…,v1=…` (Stripe).
    Pairs,
    /// `tag,sig` items, e.g. `v1,abc= v1,def=` (Standard Webhooks).
    Tagged,
    /// `first,sig[,sig…]`: the first item is not a signature but a value
    /// the template reads as `signature:0` (Recurly's timestamp); every
    /// later item is a signature.
    List,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TimestampSpec {
    /// Where the signed timestamp is (`signature:t`, `header:webhook-timestamp`).
    pub(super) from: String,
    /// `s` (default) or `ms` since the Unix epoch, or `rfc3339`.
    #[serde(default)]
    pub(super) unit: TimeUnit,
    /// Default window; a source may override it with `tolerance`.
    #[serde(default = "five_minutes")]
    pub(super) tolerance: Dur,
    /// Reject timestamps in the future beyond the window too (default true).
    #[serde(default = "yes")]
    pub(super) reject_future: bool,
    /// Check the window at all (default true). `false`: the timestamp is
    /// signed but its age is not checked, for providers that document no
    /// window and may resend an old signature (Sanity, Mailgun); replays
    /// are then bounded by dedup only.
    #[serde(default = "yes")]
    pub(super) checked: bool,
}

/// How a provider writes its signed timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum TimeUnit {
    /// Unix seconds (`1700000000`).
    #[default]
    #[serde(rename = "s")]
    Seconds,
    /// Unix milliseconds (`1700000000123`).
    #[serde(rename = "ms")]
    Millis,
    /// RFC 3339: `Z`, a numeric offset (Box's `2016-07-11T10:10:33-07:00`)
    /// or no zone, read as UTC (Orb's `2024-03-27T15:42:29.551`).
    #[serde(rename = "rfc3339")]
    Rfc3339,
}

impl TimeUnit {
    /// Unix seconds of a timestamp as the provider writes it.
    pub fn unix_secs(self, text: &str) -> Option<i64> {
        let text = text.trim();
        match self {
            Self::Seconds => text.parse().ok(),
            Self::Millis => text.parse::<i64>().ok().map(|ms| ms.div_euclid(1000)),
            Self::Rfc3339 => Millis::parse_rfc3339(text).map(|t| t.0.div_euclid(1000)),
        }
    }

    /// `secs` as the provider writes it (for `hookgate sign`). RFC 3339 is
    /// written in whole seconds and UTC, as Box, Increase and Zendesk send
    /// it; a reader of any of the forms above accepts it.
    pub fn format(self, secs: i64) -> String {
        match self {
            Self::Seconds => secs.to_string(),
            Self::Millis => (secs * 1000).to_string(),
            Self::Rfc3339 => Millis::from_secs(secs).rfc3339_seconds(),
        }
    }
}

fn five_minutes() -> Dur {
    Dur(Duration::from_secs(300))
}
fn yes() -> bool {
    true
}

/// `[event_id]`, in a provider file or as `[sources.<name>.event_id]`.
/// Tried in order: `from`, then `composite`, then the body hash.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventIdSpec {
    /// Locator(s) of the provider's event id; alternatives separated by `|`.
    pub from: Option<String>,
    /// Named fields joined with `:` when the provider has no single id;
    /// every part must be present. Ids over 256 bytes become `sha256:<hex>`.
    #[serde(default)]
    pub composite: Vec<String>,
    /// Always store the composite as `sha256:<hex>` (large signed blobs
    /// such as Braintree's payload).
    #[serde(default)]
    pub digest: bool,
    /// Last resort: `sha256:<hex of the body>`.
    #[serde(default)]
    pub body_hash: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResponseSpec {
    #[serde(default = "ok")]
    pub(super) status: u16,
    /// Body template; `${locator}` inserts a request value.
    #[serde(default)]
    pub(super) body: String,
    pub(super) content_type: Option<String>,
    /// Status for a missing or bad signature instead of 401 (GoCardless: 498).
    pub(super) reject_status: Option<u16>,
}

fn ok() -> u16 {
    200
}

impl Default for ResponseSpec {
    fn default() -> Self {
        Self {
            status: 200,
            body: String::new(),
            content_type: None,
            reject_status: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlSpec {
    /// `POST` (default) or `GET`: the method the exchange comes with.
    #[serde(default)]
    pub(super) method: ControlMethod,
    /// The value that marks a control request (`json:/type`).
    pub(super) when: String,
    /// The value it must have; unset = present with any value.
    pub(super) equals: Option<String>,
    /// Matches when `when` finds nothing instead (Xero's intent-to-receive
    /// carries an empty `events` array).
    #[serde(default)]
    pub(super) absent: bool,
    /// `true` (the default for `POST`): only after the request's signature
    /// verified (a `GET`: the scheme's check of its headers and query, as
    /// Okta's `Authorization`). `false` (the default for `GET`): answered
    /// without the signature; a `POST` then only when the request carries
    /// no signature header at all (unsigned pings).
    pub(super) signed: Option<bool>,
    /// A request value that must equal the source's `verify_token` (Meta's
    /// `query:hub.verify_token`); a wrong or missing one is refused with 403.
    pub(super) token: Option<String>,
    /// A request value that becomes a verification secret of the source,
    /// stored and shared by every replica (Asana's `header:X-Hook-Secret`).
    pub(super) learn: Option<String>,
    /// Response headers, as templates (`X-Hook-Secret = "${header:X-Hook-Secret}"`,
    /// Dropbox's `X-Content-Type-Options = "nosniff"`).
    #[serde(default)]
    pub(super) headers: std::collections::BTreeMap<String, String>,
    #[serde(default = "ok")]
    pub(super) status: u16,
    /// Reply template (`${json:/challenge}`).
    #[serde(default)]
    pub(super) reply: String,
    pub(super) content_type: Option<String>,
}

/// The method a control request comes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum ControlMethod {
    #[default]
    Post,
    Get,
}

/// `[split]`: where a batch body's items are, and how each item is named
/// when a source admits them one by one. Pointers are relative to the item.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SplitSpec {
    /// The array of items (`json:/entry`).
    pub(super) items: String,
    /// Split unless the source says `split = false` (default false: only
    /// when the source asks with `split = true` or `split = "json:/…"`).
    #[serde(default)]
    pub(super) default: bool,
    /// Each item's id (within the item); default: a hash of the item's bytes.
    #[serde(default)]
    pub(super) event_id: Option<EventIdSpec>,
    /// Each item's type (within the item).
    pub(super) event_type: Option<OneOrMany>,
}

/// A source's `split`: `true`/`false` (the provider's `[split]` on or off)
/// or the items' locator for a provider without one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SplitSetting {
    On(bool),
    At(String),
}
