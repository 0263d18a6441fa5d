//! Provider definitions as data: one TOML file per provider in `providers/`,
//! embedded in the binary, plus any directory named in the config.
//!
//! A definition is parsed and checked once, at config load, into a
//! [`Provider`] whose templates and locators are ready to evaluate; nothing
//! is re-parsed per request. A source may override parts of `[signature]`
//! and `[event_id]` (the generic `hmac`, `bearer`, `basic` providers need
//! that); the overridden provider is checked like a file.

use super::fields::JsonWants;
use super::locator::{Lookup, ReplyPart, Segment, parse_reply, parse_template};
use super::schemes::Scheme;
use super::spec::{
    Category, ControlMethod, EventIdSpec, HeaderFormat, OneOrMany, ProviderFile,
    SignatureOverrides, SignatureSpec, SplitSpec, TimeUnit,
};
use crate::primitives::crypto::{Algorithm, Encoding, SecretEncoding, SigningKey};
use crate::primitives::secret::Secret;
use std::time::Duration;

// ---------- the checked model ----------

/// What a source replaces in its provider's definition
/// (`[sources.<name>.signature]`, `.event_id`, `event_type`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceOverrides<'a> {
    pub signature: Option<&'a SignatureOverrides>,
    pub event_id: Option<&'a EventIdSpec>,
    pub event_type: Option<&'a OneOrMany>,
    pub object_id: Option<&'a str>,
}

/// Where an event's type is: the first part names it, each later part
/// found adds `.<value>` (GitHub's `issues` + `opened`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeRule {
    pub parts: Vec<Lookup>,
}

impl TypeRule {
    pub fn parse(spec: OneOrMany) -> Result<Self, String> {
        let texts = match spec {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        };
        if texts.is_empty() {
            return Err("needs at least one locator".into());
        }
        let parts = texts
            .iter()
            .map(|t| Lookup::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { parts })
    }
}

/// A checked provider definition.
#[derive(Debug)]
pub struct Provider {
    pub name: String,
    pub title: String,
    pub docs: String,
    pub category: Category,
    /// Where the secret is in the provider's dashboard.
    pub dashboard: String,
    /// The catalogue's note for this provider (what to set, or that it
    /// does not sign).
    pub note: String,
    pub signature: Signature,
    pub timestamp: Option<Timestamp>,
    pub event_id: EventIdRule,
    /// Where the event type is, if the provider (or the source) defines
    /// one: one lookup, or several whose values are joined with `.`.
    pub event_type: Option<TypeRule>,
    /// Where the id of the object the event is about is (`object_id`).
    pub object_id: Option<Lookup>,
    pub response: Response,
    pub controls: Vec<Control>,
    /// Where a batch body's items are, for sources that admit them one by
    /// one (`split`).
    pub split: Option<Split>,
    /// The JSON pointers read from every request (event id, type,
    /// timestamp, controls), walked together (`fields::JsonWants`).
    pub json_wants: JsonWants,
    /// Why this definition cannot verify yet (a generic provider without a
    /// source's `[signature]` settings); `None` when complete.
    pub incomplete: Option<String>,
    /// The definition as written, so a source can derive an overridden copy.
    text: String,
}

#[derive(Debug)]
pub struct Signature {
    pub scheme: Scheme,
    /// Lowercase header names, first present wins (may be empty for schemes
    /// that carry the signature in the body). A trailing `*` is a prefix.
    pub headers: Vec<String>,
    /// Every present header contributes signatures, not the first only.
    pub every_header: bool,
    /// `hmac`: the request value holding the signature when it is not in a
    /// header (Mailgun's and Midtrans's JSON body).
    pub from: Option<Lookup>,
    pub query: Option<String>,
    pub format: HeaderFormat,
    pub separator: String,
    pub keys: Vec<String>,
    pub prefix: String,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
    pub secret_encoding: SecretEncoding,
    pub secret_prefixes: Vec<String>,
    pub content: Vec<Segment>,
    /// The `canonical` scheme's request layout.
    pub layout: Option<super::schemes::canonical::Layout>,
}

impl Signature {
    /// Whether `name` (lowercase) is one of the signature headers, a
    /// trailing `*` in a configured name matching any rest.
    pub fn names(&self, name: &str) -> bool {
        self.headers.iter().any(|h| match h.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == h,
        })
    }

    /// Whether the request carries any signature header.
    pub fn present_in(&self, headers: &http::HeaderMap) -> bool {
        self.headers.iter().any(|h| match h.strip_suffix('*') {
            Some(_) => headers.keys().any(|k| self.names(k.as_str())),
            None => headers.contains_key(h.as_str()),
        })
    }

    /// Whether a decoded signature of `len` bytes can be this scheme's: a
    /// MAC's exact length, or the scheme's range (DER ECDSA, RSA moduli).
    pub fn fits(&self, len: usize) -> bool {
        match self.scheme.signature_len() {
            Some((min, max)) => (min..=max).contains(&len),
            None => len == self.algorithm.output_len(),
        }
    }

    /// The header a signer writes: the first named, a `*` made `1`.
    pub fn first_header(&self) -> Option<String> {
        let h = self.headers.first()?;
        Some(match h.strip_suffix('*') {
            Some(prefix) => format!("{prefix}1"),
            None => h.clone(),
        })
    }
}

#[derive(Debug)]
pub struct Timestamp {
    pub from: Lookup,
    pub unit: TimeUnit,
    pub tolerance: Duration,
    pub reject_future: bool,
    /// The window is checked (else the timestamp is only signed content).
    pub checked: bool,
}

#[derive(Debug, Clone)]
pub struct EventIdRule {
    pub from: Option<Lookup>,
    pub composite: Vec<Lookup>,
    pub digest: bool,
    pub body_hash: bool,
}

impl EventIdRule {
    /// The header `hookgate sign` should fill with an id, if any.
    pub fn header(&self) -> Option<&str> {
        self.from.as_ref()?.header()
    }
}

/// A status, body template and content type.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Vec<ReplyPart>,
    pub content_type: Option<String>,
    pub reject_status: Option<u16>,
}

#[derive(Debug)]
pub struct Control {
    pub method: ControlMethod,
    pub when: Lookup,
    pub equals: Option<String>,
    /// Matches when `when` finds nothing.
    pub absent: bool,
    pub signed: bool,
    /// Compared with the source's `verify_token`.
    pub token: Option<Lookup>,
    /// Stored as a verification secret of the source.
    pub learn: Option<Lookup>,
    pub reply: Response,
    /// Response headers: name and value template.
    pub headers: Vec<(http::HeaderName, Vec<ReplyPart>)>,
}

/// A checked `[split]`.
#[derive(Debug, Clone)]
pub struct Split {
    /// The JSON pointer of the items' array.
    pub items: String,
    pub default: bool,
    /// Each item's id; `None`: a hash of the item's bytes.
    pub event_id: Option<EventIdRule>,
    pub event_type: Option<TypeRule>,
}

impl Split {
    /// Items at `at` (`json:/…`), with the item-relative rules of `base`
    /// when there is one.
    pub fn at(at: &str, base: Option<&Split>) -> Result<Self, String> {
        Ok(Self {
            items: split_pointer(at)?,
            default: true,
            event_id: base.and_then(|b| b.event_id.clone()),
            event_type: base.and_then(|b| b.event_type.clone()),
        })
    }

    fn check(s: SplitSpec) -> Result<Self, String> {
        Ok(Self {
            items: split_pointer(&s.items)?,
            default: s.default,
            event_id: s.event_id.as_ref().map(check_event_id).transpose()?,
            event_type: s
                .event_type
                .map(TypeRule::parse)
                .transpose()
                .map_err(|e| format!("event_type: {e}"))?,
        })
    }
}

/// An `object_id` locator: a header, json, form or query one (a value of
/// the signature header says nothing about the object).
fn check_object_id(text: &str) -> Result<Lookup, String> {
    let lookup = Lookup::parse(text)?;
    if lookup
        .alternatives
        .iter()
        .any(|l| matches!(l, super::locator::Locator::Signature(_)))
    {
        return Err(format!(
            "`{text}`: use a header, json, form or query locator"
        ));
    }
    Ok(lookup)
}

/// The JSON pointer of a `split` locator (`json:/entry`; `json:` alone:
/// the body is the array); no `*`.
fn split_pointer(at: &str) -> Result<String, String> {
    match at.trim().strip_prefix("json:") {
        Some(p) if (p.is_empty() || p.starts_with('/')) && !p.contains('*') => Ok(p.to_owned()),
        _ => Err(format!(
            "split `{at}` must be a JSON pointer to an array, `json:/…` (or `json:` for the body) without `*`"
        )),
    }
}

impl Provider {
    /// Parses and checks one provider file.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        Self::build(text, None)
    }

    /// This provider with a source's overrides applied and checked again.
    pub fn customized(&self, o: &SourceOverrides<'_>) -> Result<Self, String> {
        Self::build(&self.text, Some(o))
    }

    fn build(text: &str, source: Option<&SourceOverrides<'_>>) -> Result<Self, String> {
        let mut f = ProviderFile::parse(text)?;
        let o = source.copied().unwrap_or_default();
        let (overrides, event_id) = (o.signature, o.event_id);
        if let Some(t) = o.event_type {
            f.event_type = Some(t.clone());
        }
        if let Some(t) = o.object_id {
            f.object_id = Some(t.to_owned());
        }
        if let Some(o) = overrides {
            let s = &mut f.signature;
            s.header = o.header.clone().or(s.header.take());
            s.query = o.query.clone().or(s.query.take());
            s.prefix = o.prefix.clone().or(s.prefix.take());
            s.algorithm = o.algorithm.or(s.algorithm);
            s.encoding = o.encoding.or(s.encoding);
            s.secret_encoding = o.secret_encoding.unwrap_or(s.secret_encoding);
            s.signed_content = o.signed_content.clone().or(s.signed_content.take());
        }
        if let Some(e) = event_id {
            f.event_id = e.clone();
        }
        let (signature, incomplete) = check_signature(f.signature)?;
        // A source's own `signed_content` is operator data like a
        // providers_dir file (verify::registry): it must sign the body.
        if overrides.is_some_and(|o| o.signed_content.is_some())
            && !signature.content.contains(&Segment::Body)
        {
            return Err(
                "signed_content must contain `{body}`: without it the body is not signed".into(),
            );
        }
        let timestamp = f
            .timestamp
            .map(|t| -> Result<Timestamp, String> {
                Ok(Timestamp {
                    from: Lookup::parse(&t.from).map_err(|e| format!("timestamp.from: {e}"))?,
                    unit: t.unit,
                    tolerance: t.tolerance.0,
                    reject_future: t.reject_future,
                    checked: t.checked,
                })
            })
            .transpose()?;
        if signature.content.contains(&Segment::Timestamp) && timestamp.is_none() {
            return Err("signed_content uses {timestamp} but [timestamp] is missing".into());
        }
        let event_id = check_event_id(&f.event_id)?;
        let event_type = f
            .event_type
            .map(TypeRule::parse)
            .transpose()
            .map_err(|e| format!("event_type: {e}"))?;
        let object_id = f
            .object_id
            .as_deref()
            .map(check_object_id)
            .transpose()
            .map_err(|e| format!("object_id: {e}"))?;
        let response = check_response(
            f.response.status,
            &f.response.body,
            f.response.content_type,
            f.response.reject_status,
        )
        .map_err(|e| format!("response: {e}"))?;
        let mut controls = Vec::new();
        for (i, c) in f.control.into_iter().enumerate() {
            let at = |e: String| format!("control[{i}]: {e}");
            let get = c.method == ControlMethod::Get;
            let signed = c.signed.unwrap_or(!get);
            // An unsigned POST control is told apart from an event by the
            // missing signature header; a provider without one (a token in
            // the body, Graph's `clientState`) has its controls answered
            // before verification, so they may only echo request values.
            if !signed
                && !get
                && c.learn.is_none()
                && signature.headers.is_empty()
                && c.token.is_none()
            {
                let echo_only = !c.reply.contains("${mac:")
                    && c.headers.values().all(|v| !v.contains("${mac:"));
                if !echo_only {
                    return Err(at("an unsigned control of a provider without a signature header may only echo values".into()));
                }
            }
            if c.learn.is_some() && (signed || signature.scheme != Scheme::Hmac) {
                return Err(at(
                    "`learn` is for unsigned handshakes of `hmac` providers".into()
                ));
            }
            // Anyone can send an unsigned handshake: without a token only
            // the operator knows, anyone could hand the source a key.
            if c.learn.is_some() && c.token.is_none() {
                return Err(at(
                    "`learn` needs a `token` the source's verify_token must match".into(),
                ));
            }
            let lookup =
                |t: Option<String>| t.as_deref().map(Lookup::parse).transpose().map_err(at);
            let mut headers = Vec::new();
            for (name, value) in &c.headers {
                let name = http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| at(format!("header name `{name}`")))?;
                headers.push((name, parse_reply(value).map_err(at)?));
            }
            controls.push(Control {
                method: c.method,
                when: Lookup::parse(&c.when).map_err(at)?,
                equals: c.equals,
                absent: c.absent,
                signed,
                token: lookup(c.token)?,
                learn: lookup(c.learn)?,
                reply: check_response(c.status, &c.reply, c.content_type, None).map_err(at)?,
                headers,
            });
        }
        let split = f
            .split
            .map(Split::check)
            .transpose()
            .map_err(|e| format!("split: {e}"))?;
        let json_wants = JsonWants::of(
            event_id
                .from
                .iter()
                .chain(&event_id.composite)
                .chain(event_type.iter().flat_map(|t| &t.parts))
                .chain(&object_id)
                .chain(timestamp.as_ref().map(|t| &t.from))
                .chain(controls.iter().map(|c| &c.when)),
        );
        Ok(Self {
            name: f.name,
            title: f.title,
            docs: f.docs,
            category: f.category,
            dashboard: f.dashboard,
            note: f.note,
            signature,
            timestamp,
            event_id,
            event_type,
            object_id,
            response,
            controls,
            split,
            json_wants,
            incomplete,
            text: text.to_owned(),
        })
    }

    /// Key bytes for one configured secret, per this provider's encoding.
    /// A public-key scheme checks here that the key parses, so a wrong
    /// key is a config error rather than a 401 for every request.
    pub fn signing_key(&self, secret: &Secret) -> Result<SigningKey, String> {
        let key = SigningKey::decode(
            secret,
            self.signature.secret_encoding,
            &self.signature.secret_prefixes,
        )?;
        self.signature.scheme.check_key(key.bytes())?;
        Ok(key)
    }

    /// PayPal (certificates), Plaid (fetched keys) and unsigned providers
    /// take no secret.
    pub fn needs_secret(&self) -> bool {
        self.signature.scheme.defaults().needs_secret
    }

    pub fn needs_public_url(&self) -> bool {
        self.signature.scheme.defaults().signs_url || self.signature.content.contains(&Segment::Url)
    }

    /// Whether a handshake hands this provider's secrets over (`learn`).
    pub fn learns(&self) -> bool {
        self.controls.iter().any(|c| c.learn.is_some())
    }

    /// Whether a handshake of this provider carries a verify token.
    pub fn wants_verify_token(&self) -> bool {
        self.controls.iter().any(|c| c.token.is_some())
    }

    /// Unsigned providers are only safe behind a source IP allowlist.
    pub fn needs_allow_ips(&self) -> bool {
        self.signature.scheme.defaults().needs_allow_ips
    }

    pub fn default_tolerance(&self) -> Duration {
        self.timestamp
            .as_ref()
            .map_or(Duration::from_secs(300), |t| t.tolerance)
    }
}

/// A checked `[signature]`, or the reason it is incomplete: a generic
/// provider (`hmac`) leaves the header and algorithm to each source, so a
/// missing field is only an error once a source uses the provider as is.
fn check_signature(s: SignatureSpec) -> Result<(Signature, Option<String>), String> {
    let headers: Vec<String> = match s.header {
        None => vec![],
        Some(OneOrMany::One(h)) => vec![h],
        Some(OneOrMany::Many(v)) => v,
    }
    .into_iter()
    .map(|h| h.to_ascii_lowercase())
    .collect();
    let from = s
        .from
        .as_deref()
        .map(Lookup::parse)
        .transpose()
        .map_err(|e| format!("signature.from: {e}"))?;
    if from.is_some() && (!matches!(s.scheme, Scheme::Hmac | Scheme::Token) || !headers.is_empty())
    {
        return Err(
            "signature.from is for the `hmac` and `token` schemes, instead of `header`".into(),
        );
    }
    if headers.iter().any(|h| h.ends_with('*')) && !s.every_header {
        return Err("a header name ending in `*` needs `every_header = true`".into());
    }
    let d = s.scheme.defaults();
    let need = |what: &str| {
        format!(
            "signature.{what} is required for the `{}` scheme (a source sets it in [sources.<name>.signature])",
            s.scheme.name()
        )
    };
    let mut incomplete = None;
    if d.needs_header && headers.is_empty() && from.is_none() {
        incomplete = Some(need("header"));
    }
    if s.scheme == Scheme::Token && headers.is_empty() && s.query.is_none() && from.is_none() {
        incomplete = Some(
            "signature.header, signature.query or signature.from is required for `token`".into(),
        );
    }
    let algorithm = s.algorithm.or(d.algorithm);
    if algorithm.is_none() {
        incomplete = incomplete.or_else(|| Some(need("algorithm")));
    }
    let algorithm = algorithm.unwrap_or(Algorithm::HmacSha256);
    let encoding = s.encoding.or(d.encoding);
    if encoding.is_none() {
        incomplete = incomplete.or_else(|| Some(need("encoding")));
    }
    let encoding = encoding.unwrap_or(Encoding::Hex);
    let separator = s.separator.unwrap_or_else(|| match s.format {
        HeaderFormat::Tagged => " ".into(),
        _ => ",".into(),
    });
    if matches!(s.format, HeaderFormat::Pairs | HeaderFormat::Tagged) && s.keys.is_empty() {
        return Err("signature.keys is required for `pairs` and `tagged` formats".into());
    }
    let content = match (s.signed_content, s.scheme) {
        (Some(t), _) => parse_template(&t).map_err(|e| format!("signature.signed_content: {e}"))?,
        (None, Scheme::Hmac) => vec![Segment::Body],
        (None, _) => vec![],
    };
    // A plain digest is keyed only by a `{secret}` in what it hashes.
    let keyed = content.contains(&Segment::Secret);
    if s.scheme == Scheme::Hmac && !algorithm.is_hmac() && !keyed {
        return Err(
            "the `hmac` scheme needs an hmac-* algorithm, or `{secret}` in signed_content".into(),
        );
    }
    if (s.scheme == Scheme::Canonical) != s.canonical.is_some() {
        return Err(
            "signature.canonical names the `canonical` scheme's layout, and only its".into(),
        );
    }
    let sig = Signature {
        layout: s.canonical,
        scheme: s.scheme,
        headers,
        every_header: s.every_header,
        from,
        query: s.query,
        format: s.format,
        separator,
        keys: s.keys,
        prefix: s.prefix.unwrap_or_default(),
        algorithm,
        encoding,
        secret_encoding: s.secret_encoding,
        secret_prefixes: s.secret_prefixes,
        content,
    };
    Ok((sig, incomplete))
}

fn check_event_id(e: &EventIdSpec) -> Result<EventIdRule, String> {
    let from = e
        .from
        .as_deref()
        .map(Lookup::parse)
        .transpose()
        .map_err(|e| format!("event_id.from: {e}"))?;
    let composite = e
        .composite
        .iter()
        .map(|c| Lookup::parse(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("event_id.composite: {e}"))?;
    if from.is_none() && composite.is_empty() && !e.body_hash {
        return Err("event_id needs `from`, `composite` or `body_hash = true`".into());
    }
    Ok(EventIdRule {
        from,
        composite,
        digest: e.digest,
        body_hash: e.body_hash,
    })
}

fn check_response(
    status: u16,
    body: &str,
    content_type: Option<String>,
    reject_status: Option<u16>,
) -> Result<Response, String> {
    let http = |s: u16| (100..=599).contains(&s);
    if !http(status) || reject_status.is_some_and(|s| !http(s)) {
        return Err("status must be an HTTP status".into());
    }
    Ok(Response {
        status,
        body: parse_reply(body)?,
        content_type,
        reject_status,
    })
}
