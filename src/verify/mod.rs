//! Verify: the provider's signature over the exact raw body, then the event id.
//!
//! Rule: [`Verified`] can only be built here, and dedup accepts only a
//! `Verified`, so a request with a bad signature can never consume an event
//! id. Order inside: source IP allowlist → (unsigned pings) → signature →
//! timestamp → (signed challenges) → event id (per item for `split`) →
//! reply. Nothing here is logged: bodies, signatures and keys stay inside.
//!
//! Layering: `verify` imports only `primitives`; `config` builds each
//! [`source::Source`] with the checks the schemes provide here.

pub mod catalogue;
pub mod client_ip;
pub mod error;
pub mod event_id;
pub mod facts;
pub mod fetch_budget;
pub mod fields;
pub mod forwarded_headers;
pub mod json_depth;
pub mod json_pointer;
pub mod json_subset;
pub mod key_cache;
pub mod learned;
pub mod locator;
pub mod provider;
pub mod registry;
pub mod reply;
pub mod router;
pub mod schemes;
pub mod sign;
pub mod signedness;
pub mod source;
pub mod spec;
pub mod split;

use crate::primitives::headers::StoredHeaders;
use bytes::Bytes;
pub use error::VerifyError;
pub use event_id::{EventId, MAX_EVENT_ID};
use fields::Fields;
use http::HeaderMap;
pub use reply::Reply;
use schemes::Ctx;
pub use schemes::FetchedKey;
use source::Source;
use spec::ControlMethod;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// A request whose signature matched one of the source's keys, with its event id.
#[derive(Debug)]
pub struct Verified {
    source: Arc<Source>,
    event_id: EventId,
    body: Bytes,
    reply: Reply,
    key_index: Option<usize>,
    provider_timestamp: Option<i64>,
    /// Read from the provider's API by reconciliation, not received.
    recovered: bool,
    /// Where [`Verified::take_facts`] gets the facts from.
    facts: FactsSource,
}

/// Where an event's facts come from until [`Verified::take_facts`] hands
/// them over.
#[derive(Debug)]
enum FactsSource {
    /// Known up front (an event read from the provider's API).
    Known(Box<Facts>),
    /// To be read from the parts of the request verification kept.
    FromRequest(Box<RequestParts>),
    /// Handed over already.
    HandedOver,
}

/// What storing and routing an event needs beyond its id and body. Read
/// only once dedup may store the event: a provider retry answered from the
/// cache never pays for its headers, type or routes.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The request headers to forward (hop-by-hop, Host and Content-Length
    /// removed; [`forwarded_headers::forwardable`]).
    pub headers: StoredHeaders,
    /// The provider's event type, where it defines one (`event_type` locator).
    pub event_type: Option<String>,
    /// The provider object the event is about (`object_id` locator).
    pub object_id: Option<String>,
    /// The source's targets whose routes match (see [`router`]; none:
    /// stored, counted `unrouted`, delivered nowhere), with their ordering keys.
    pub routed: router::Routed,
}

/// A verified request's parts that [`Facts`] are read from.
struct RequestParts {
    headers: HeaderMap,
    query: String,
    /// The body's JSON walk done during verification, reused.
    json: fields::JsonWalk,
    /// One item of a split batch: its type is read by the split's rule,
    /// and the provider's signature headers (over the whole batch) are
    /// not kept.
    item: bool,
}

/// Header names only: the values may hold credentials (`Authorization`,
/// a token scheme's header) that the forwarded list leaves out.
impl std::fmt::Debug for RequestParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestParts")
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("query_len", &self.query.len())
            .finish_non_exhaustive()
    }
}

impl RequestParts {
    fn facts(self, source: &Source, body: &[u8]) -> Facts {
        if self.item {
            return self.item_facts(source, body);
        }
        let fields = fields_of(source, &self.headers, body, &self.query).with_walk(self.json);
        let event_type = facts::event_type(&source.provider, &fields);
        let object_id = facts::object_id(&source.provider, &fields);
        let routed = source.routes.select(event_type.as_deref(), &fields);
        drop(fields);
        Facts {
            headers: forwarded_headers::forwardable(self.headers, &source.withheld),
            event_type,
            object_id,
            routed,
        }
    }
}

impl RequestParts {
    fn item_facts(self, source: &Source, body: &[u8]) -> Facts {
        let fields = Fields::with_query(&self.headers, body, &self.query);
        let rule = source.split.as_ref().and_then(|s| s.event_type.as_ref());
        let event_type = rule.and_then(|r| facts::type_by(r, &fields));
        let routed = source.routes.select(event_type.as_deref(), &fields);
        drop(fields);
        let mut withheld = source.withheld.clone();
        withheld.extend(source.provider.signature.headers.iter().cloned());
        Facts {
            headers: forwarded_headers::forwardable(self.headers, &withheld),
            event_type,
            // The provider's locator is relative to its envelope, not to an item.
            object_id: None,
            routed,
        }
    }
}

impl Default for Facts {
    /// No headers, no type, no routes.
    fn default() -> Self {
        Self {
            headers: StoredHeaders::default(),
            event_type: None,
            object_id: None,
            routed: router::Routed::default(),
        }
    }
}

/// The header a recovered event is stored and forwarded with (value `true`).
pub const RECOVERED_HEADER: &str = "hookgate-recovered";

/// What a recovered event is stored and forwarded with: its content type
/// and [`RECOVERED_HEADER`].
fn recovered_headers() -> StoredHeaders {
    let mut h = StoredHeaders::with_capacity(2);
    h.push(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h.push(
        http::HeaderName::from_static(RECOVERED_HEADER),
        http::HeaderValue::from_static("true"),
    );
    h
}

impl Verified {
    /// An event read back from the provider's own API (Stripe's
    /// `GET /v1/events`) by reconciliation, over TLS with our API key: its
    /// authenticity comes from that authenticated call, so there is no
    /// signature to check. `body` is the event object exactly as the API
    /// returned it. It is stored with `Hookgate-Recovered: true`, and
    /// [`Verified::recovered`] is true.
    ///
    /// Only `reconcile/` calls this, with an id and body taken from the API
    /// response; request handlers (ingest) never do: an incoming request is
    /// authentic only through [`check`]. A unit test keeps ingest free of it.
    pub(crate) fn from_provider_api(
        source: &Arc<Source>,
        event_id: EventId,
        body: Bytes,
        event_type: Option<String>,
        provider_timestamp: Option<i64>,
    ) -> Self {
        // Routed like a received event: on its type and body fields.
        let no_headers = HeaderMap::new();
        let fields = Fields::new(&no_headers, &body);
        let routed = source.routes.select(event_type.as_deref(), &fields);
        let object_id = facts::object_id(&source.provider, &fields);
        drop(fields);
        Self {
            source: source.clone(),
            event_id,
            body,
            reply: Reply {
                status: 200,
                ..Reply::default()
            },
            key_index: None,
            provider_timestamp,
            recovered: true,
            facts: FactsSource::Known(Box::new(Facts {
                headers: recovered_headers(),
                event_type,
                object_id,
                routed,
            })),
        }
    }

    /// Whether this event came from [`Verified::from_provider_api`].
    pub fn recovered(&self) -> bool {
        self.recovered
    }
    pub fn source(&self) -> &Arc<Source> {
        &self.source
    }
    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// The provider's required answer, the same for a new event and a
    /// duplicate, handed over (the event keeps an empty one).
    pub fn take_reply(&mut self) -> Reply {
        std::mem::take(&mut self.reply)
    }
    /// Which configured secret matched (0-based), for schemes keyed by secrets.
    pub fn key_index(&self) -> Option<usize> {
        self.key_index
    }
    /// The provider's signed timestamp (unix seconds), where it sends one.
    pub fn provider_timestamp(&self) -> Option<i64> {
        self.provider_timestamp
    }
    /// Headers, type and routes, handed over once: read from the request
    /// now (dedup asks once it may store the event), or as given by
    /// [`Verified::from_provider_api`]. Asked again, they are empty.
    pub fn take_facts(&mut self) -> Facts {
        match std::mem::replace(&mut self.facts, FactsSource::HandedOver) {
            FactsSource::Known(f) => *f,
            FactsSource::FromRequest(k) => k.facts(&self.source, &self.body),
            FactsSource::HandedOver => {
                debug_assert!(false, "an event's facts are taken once");
                Facts::default()
            }
        }
    }
}

/// What `check` decided about an authentic request.
#[derive(Debug)]
pub enum Checked {
    /// An event to dedupe, store and forward.
    Event(Verified),
    /// A challenge or ping answered directly; nothing is stored.
    Answer(Reply),
    /// A batch admitted item by item (`split`): each item an event, the
    /// request answered once with `reply`. No items: nothing to store.
    Split { events: Vec<Verified>, reply: Reply },
}

/// One incoming request, as verification sees it.
pub struct Incoming<'a> {
    /// Kept by a verified event until its facts are read.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The request's query string, without `?`.
    pub query: Option<&'a str>,
    /// The client address (after trusted proxies), if known.
    pub client_ip: Option<IpAddr>,
}

/// Checks a request against `source` at `now` (unix seconds). Async only
/// because PayPal's certificate or Plaid's key may have to be fetched
/// (once, then cached).
pub async fn check(
    source: &Arc<Source>,
    incoming: Incoming<'_>,
    now: i64,
) -> Result<Checked, VerifyError> {
    check_returning(source, incoming, now)
        .await
        .map_err(|refused| refused.error)
}

/// A request [`check`] refused, with its headers and body given back (the
/// refused-request log keeps them; a retry with fresh keys needs them), so
/// the caller does not have to copy them up front.
#[derive(Debug)]
pub struct Refused {
    pub error: VerifyError,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// [`check`], giving the request back when it is refused.
pub async fn check_returning(
    source: &Arc<Source>,
    mut incoming: Incoming<'_>,
    now: i64,
) -> Result<Checked, Refused> {
    let checked = async {
        client_ip::check(&source.allow_ips, incoming.client_ip)?;
        let scheme = source.provider.signature.scheme;
        let fetched = scheme.fetch(source, &incoming, now).await?;
        check_in(source, &mut incoming, now, fetched.as_ref())
    }
    .await;
    checked.map_err(|error| Refused {
        error,
        headers: incoming.headers,
        body: incoming.body,
    })
}

/// [`check`] with the provider's key already at hand (tests, and after
/// the fetch).
pub(crate) fn check_with(
    source: &Arc<Source>,
    mut incoming: Incoming<'_>,
    now: i64,
    fetched: Option<&FetchedKey>,
) -> Result<Checked, VerifyError> {
    check_in(source, &mut incoming, now, fetched)
}

/// [`check_with`] on a borrowed request: its headers and body are taken
/// only by an event that passed, so a refused request still has them.
fn check_in(
    source: &Arc<Source>,
    incoming: &mut Incoming<'_>,
    now: i64,
    fetched: Option<&FetchedKey>,
) -> Result<Checked, VerifyError> {
    client_ip::check(&source.allow_ips, incoming.client_ip)?;
    let provider = &source.provider;
    let sig = &provider.signature;
    let body = &incoming.body;
    let query = incoming.query.unwrap_or_default();
    let fields = fields_of(source, &incoming.headers, body, query);

    // A request without the provider's signature header may be one of its
    // unsigned controls (a ping, a handshake); a provider without such a
    // header has its unsigned controls looked for on every request.
    let unsigned = sig.headers.is_empty() || !sig.present_in(&incoming.headers);
    if unsigned
        && let Some(answer) = reply::control(
            provider,
            &fields,
            ControlMethod::Post,
            false,
            first_key(source),
            source.verify_token.as_ref(),
        )?
    {
        return Ok(Checked::Answer(answer));
    }

    let url = source
        .public_url
        .as_deref()
        .map(|u| effective_url(u, incoming.query));
    let ctx = Ctx {
        source,
        sig,
        fields: &fields,
        now,
        url: url.as_deref(),
        fetched,
    };
    let key_index = sig.scheme.verify(&ctx)?;
    // A provider that MACs an unsigned value in a reply (X's CRC) has made
    // that MAC for whoever asked: a body it could have been asked for (a
    // challenge token) is not taken as signed.
    if body.len() <= 256
        && std::str::from_utf8(body).is_ok_and(reply::is_challenge_token)
        && registry::mac_oracle(provider).is_some()
    {
        return Err(VerifyError::InvalidSignature);
    }
    let key = key_index.map(|i| (&source.keys[i], sig));
    fields.refuse_repeated(read_lookups(provider))?;

    if let Some(answer) = reply::control(
        provider,
        &fields,
        ControlMethod::Post,
        true,
        key,
        source.verify_token.as_ref(),
    )? {
        return Ok(Checked::Answer(answer));
    }
    if let Some(split) = &source.split {
        let reply = reply::render(&provider.response, &fields, key);
        let signed_at = facts::provider_timestamp(provider, &fields);
        drop(fields);
        let request = (&incoming.headers, query, key_index, signed_at);
        let events = split_events(source, split, body, request)?;
        return Ok(Checked::Split { events, reply });
    }
    let event_id = event_id::resolve(&fields, &provider.event_id)?;
    let reply = reply::render(&provider.response, &fields, key);
    let provider_timestamp = facts::provider_timestamp(provider, &fields);
    let json = fields.into_walk();
    Ok(Checked::Event(Verified {
        source: source.clone(),
        event_id,
        body: std::mem::take(&mut incoming.body),
        reply,
        key_index,
        provider_timestamp,
        recovered: false,
        facts: FactsSource::FromRequest(Box::new(RequestParts {
            headers: std::mem::take(&mut incoming.headers),
            query: query.to_owned(),
            json,
            item: false,
        })),
    }))
}

/// Every value `provider` reads from a request: event id and type,
/// timestamp, controls, and the values its signed content names.
fn read_lookups(provider: &provider::Provider) -> Vec<&locator::Lookup> {
    fn values<'p>(segments: &'p [locator::Segment], out: &mut Vec<&'p locator::Lookup>) {
        for s in segments {
            match s {
                locator::Segment::Value(l) => out.push(l),
                locator::Segment::Optional(inner) => values(inner, out),
                _ => {}
            }
        }
    }
    let rule = &provider.event_id;
    let mut out: Vec<&locator::Lookup> = rule.from.iter().chain(&rule.composite).collect();
    out.extend(provider.event_type.iter().flat_map(|t| &t.parts));
    out.extend(provider.timestamp.iter().map(|t| &t.from));
    out.extend(provider.controls.iter().map(|c| &c.when));
    values(&provider.signature.content, &mut out);
    out
}

/// The source's first key with the provider's MAC settings, for a reply
/// that is a MAC made without a verified request (X's CRC answer).
fn first_key(source: &Source) -> reply::MacKey<'_> {
    source.keys.first().map(|k| (k, &source.provider.signature))
}

/// Each item of a verified batch as an event of its own: its id from the
/// split's rule within the item (or the item's hash), its body the item's
/// bytes as sent.
/// `request`: its headers, query string, the key that verified it and its
/// signed timestamp, which every item shares.
fn split_events(
    source: &Arc<Source>,
    split: &provider::Split,
    body: &Bytes,
    request: (&HeaderMap, &str, Option<usize>, Option<i64>),
) -> Result<Vec<Verified>, VerifyError> {
    let (headers, query, key_index, provider_timestamp) = request;
    let items = split::items(body, &split.items)?;
    let mut events = Vec::with_capacity(items.len());
    for item in items {
        let fields = Fields::with_query(headers, &item, query);
        let event_id = match &split.event_id {
            Some(rule) => event_id::resolve(&fields, rule)?,
            None => EventId::parse(&event_id::hashed(&item))?,
        };
        drop(fields);
        events.push(Verified {
            source: source.clone(),
            event_id,
            body: item,
            reply: Reply::default(),
            key_index,
            provider_timestamp,
            recovered: false,
            facts: FactsSource::FromRequest(Box::new(RequestParts {
                headers: headers.clone(),
                query: query.to_owned(),
                json: None,
                item: true,
            })),
        });
    }
    Ok(events)
}

/// A request's fields as `source` reads them: its provider's pointers in
/// one walk of the body. Verification and [`RequestParts::facts`] build theirs
/// here, so the walk one leaves the other can reuse.
fn fields_of<'a>(
    source: &'a Source,
    headers: &'a HeaderMap,
    body: &'a [u8],
    query: &'a str,
) -> Fields<'a> {
    Fields::with_query(headers, body, query).reading_together(&source.provider.json_wants)
}

/// What a `GET /webhooks/<source>` gets: only providers that verify the
/// URL with a GET (Meta's `hub.challenge`, Dropbox's `challenge`, X's CRC,
/// Okta's verification, Braintree's `bt_challenge`) answer one.
#[derive(Debug, PartialEq, Eq)]
pub enum GetAnswer {
    /// The challenge answered; nothing is stored.
    Reply(Reply),
    /// The provider sends no GET (405, `Allow: POST`).
    NotOffered,
    /// The provider does, but this source lacks the setting (404).
    NotConfigured(&'static str),
    /// A malformed challenge (400).
    Bad(&'static str),
    /// A wrong token or signature (403 / 401).
    Refused(VerifyError),
}

/// Answers a GET for `source` from its headers and query string: the
/// provider file's `GET` controls, else its scheme's own challenge.
pub fn answer_get(
    source: &Source,
    headers: &HeaderMap,
    query: Option<&str>,
    now: i64,
) -> GetAnswer {
    let provider = &source.provider;
    if !provider
        .controls
        .iter()
        .any(|c| c.method == ControlMethod::Get)
    {
        return provider.signature.scheme.answer_get(source, query);
    }
    let query = query.unwrap_or_default();
    let fields = Fields::with_query(headers, &[], query);
    let token = source.verify_token.as_ref();
    let get = ControlMethod::Get;
    let answered = match reply::control(provider, &fields, get, false, first_key(source), token) {
        Ok(Some(r)) => return GetAnswer::Reply(r),
        Err(e) => return GetAnswer::Refused(e),
        Ok(None) => reply::matching(provider, &fields, get, true).map(|_| {
            // A GET the scheme authenticates by its headers (Okta's
            // `Authorization`): verified like an event, with an empty body.
            let ctx = Ctx {
                source,
                sig: &provider.signature,
                fields: &fields,
                now,
                url: None,
                fetched: None,
            };
            let i = provider.signature.scheme.verify(&ctx)?;
            let key = i.map(|i| (&source.keys[i], &provider.signature));
            reply::control(provider, &fields, get, true, key, token)
        }),
    };
    match answered {
        Some(Ok(Some(r))) => GetAnswer::Reply(r),
        Some(Err(e)) => GetAnswer::Refused(e),
        Some(Ok(None)) | None => GetAnswer::Bad("not a verification request this provider sends"),
    }
}

/// Rejects `ts` outside `now ± tolerance` (future side only if asked).
pub fn check_window(
    ts: i64,
    now: i64,
    tolerance: Duration,
    reject_future: bool,
) -> Result<(), VerifyError> {
    let tolerance = tolerance.as_secs() as i64;
    let too_old = ts < now.saturating_sub(tolerance);
    let too_new = reject_future && ts > now.saturating_add(tolerance);
    if too_old || too_new {
        return Err(VerifyError::TimestampOutOfTolerance);
    }
    Ok(())
}

/// The URL the provider called: the configured public URL, with the
/// request's own query string when it has one (Twilio's `bodySHA256`,
/// Mercado Pago's `data.id`). Never derived from the Host header.
pub fn effective_url(public_url: &str, query: Option<&str>) -> String {
    match query.filter(|q| !q.is_empty()) {
        Some(q) => {
            let base = public_url.split(['?', '#']).next().unwrap_or(public_url);
            format!("{base}?{q}")
        }
        None => public_url.to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
