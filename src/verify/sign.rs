//! Builds the headers a provider would send for a body: `hookgate sign` and
//! the tests use it to exercise a source end to end. It is the inverse of
//! `verify` and is driven by the same provider definition.

use super::provider::{HeaderFormat, Locator, Lookup, Provider, Segment};
use super::request::Fields;
use super::scheme::SigningKey;
use http::HeaderMap;

/// What to sign.
pub struct SignRequest<'a> {
    pub body: &'a [u8],
    /// Unix seconds, for timestamped schemes.
    pub timestamp: i64,
    /// Event id for providers that carry it in a header; generated if `None`.
    pub event_id: Option<String>,
    /// The public URL, for schemes that sign it.
    pub url: Option<&'a str>,
}

/// The headers (name, value) a provider would send with `req.body`.
pub fn sign(
    provider: &Provider,
    key: &SigningKey,
    req: &SignRequest<'_>,
) -> Result<Vec<(String, String)>, String> {
    let sig = &provider.signature;
    let mut out: Vec<(String, String)> = Vec::new();
    let ts = req.timestamp.to_string();
    let mut ts_pair_key = None;
    if let Some(t) = &provider.timestamp {
        match t.from.0.first() {
            Some(Locator::Header(h)) => out.push((h.clone(), ts.clone())),
            Some(Locator::Signature(k)) => ts_pair_key = Some(k.clone()),
            _ => return Err("cannot place the timestamp of this provider".into()),
        }
    }
    if let Some(h) = provider.event_id.header() {
        let id = req
            .event_id
            .clone()
            .unwrap_or_else(|| format!("evt_{}", uuid::Uuid::new_v4().simple()));
        out.push((h.to_owned(), id));
    }

    let empty = HeaderMap::new();
    let fields = Fields::new(&empty, req.body);
    let mut values: Vec<Vec<u8>> = Vec::new();
    for seg in &sig.content {
        if let Segment::Value(l) = seg {
            values.push(value_for(l, &mut out, &fields)?.into_bytes());
        }
    }
    let mut next = values.iter();
    let url = req.url.unwrap_or_default();
    let parts: Vec<&[u8]> = sig
        .content
        .iter()
        .map(|seg| match seg {
            Segment::Literal(b) => b.as_slice(),
            Segment::Body => req.body,
            Segment::Timestamp => ts.as_bytes(),
            Segment::Url => url.as_bytes(),
            Segment::Value(_) => next.next().map(Vec::as_slice).unwrap_or_default(),
        })
        .collect();
    let mac = sig.encoding.encode(&sig.algorithm.mac(key.bytes(), &parts));
    let first_key = sig.keys.first().map(String::as_str).unwrap_or("v1");
    let value = match sig.format {
        HeaderFormat::Value => format!("{}{mac}", sig.prefix),
        HeaderFormat::Pairs => match &ts_pair_key {
            Some(k) => format!("{k}={ts}{}{first_key}={mac}", sig.separator),
            None => format!("{first_key}={mac}"),
        },
        HeaderFormat::Tagged => format!("{first_key},{mac}"),
    };
    out.push((sig.headers[0].clone(), value));
    Ok(out)
}

/// A signed value: from a header already generated, from the body, or a
/// fresh id for a header nobody set yet.
fn value_for(
    lookup: &Lookup,
    out: &mut Vec<(String, String)>,
    fields: &Fields<'_>,
) -> Result<String, String> {
    for l in &lookup.0 {
        if let Locator::Header(h) = l
            && let Some((_, v)) = out.iter().find(|(n, _)| n == h)
        {
            return Ok(v.clone());
        }
    }
    if let Some(v) = fields.lookup(lookup, &[]) {
        return Ok(v);
    }
    match lookup.header() {
        Some(h) => {
            let v = uuid::Uuid::new_v4().to_string();
            out.push((h.to_owned(), v.clone()));
            Ok(v)
        }
        None => Err(format!("the body has no value for {lookup:?}")),
    }
}
