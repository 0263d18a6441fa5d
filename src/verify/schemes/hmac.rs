//! The data-driven scheme: a MAC over a signed-content template, signatures
//! in one header laid out as `value`, `pairs` or `tagged`.

use super::{Ctx, Defaults, SchemeDef, matching_key};
use crate::verify::VerifyError;
use crate::verify::locator::{Locator, Lookup, Segment};
use crate::verify::provider::Signature;
use crate::verify::request::Fields;
use crate::verify::sign::{Signed, Signer};
use crate::verify::spec::{HeaderFormat, TimeUnit};
use http::HeaderMap;

/// Longest signature header we parse; real ones are well under 1 KiB.
pub const MAX_SIGNATURE_HEADER: usize = 8 * 1024;
/// Most signatures considered in one header (rotation needs two or three).
pub const MAX_CANDIDATES: usize = 16;

pub struct Hmac;

impl SchemeDef for Hmac {
    const DEFAULTS: Defaults = Defaults {
        needs_header: true,
        algorithm: None,
        encoding: None,
        needs_secret: true,
        signs_url: false,
        needs_allow_ips: false,
    };

    fn verify(ctx: &Ctx<'_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let (name, value) = sign(s, &mut out.headers)?;
        out.headers.push((name, value));
        Ok(())
    }
}

fn verify(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    let provider = &ctx.source.provider;
    let (values, pairs) = signature_values(sig, ctx.fields.headers())?;
    let candidates = parse_candidates(sig, &values, &pairs)?;

    let timestamp = match &provider.timestamp {
        Some(t) => Some(
            ctx.fields
                .lookup(&t.from, &pairs)
                .ok_or(VerifyError::MissingTimestamp)?,
        ),
        None => None,
    };

    // Resolve owned pieces first so `parts` can borrow them all.
    let mut owned: Vec<Vec<u8>> = Vec::new();
    for seg in &sig.content {
        if let Segment::Value(l) = seg {
            let v = ctx
                .fields
                .lookup(l, &pairs)
                .ok_or(VerifyError::MalformedSignature("a signed value is missing"))?;
            owned.push(v.into_bytes());
        }
    }
    let url = ctx.url.unwrap_or_default();
    let body = ctx.fields.body();
    let mut next_owned = owned.iter();
    let parts: Vec<&[u8]> = sig
        .content
        .iter()
        .map(|seg| match seg {
            Segment::Literal(b) => b.as_slice(),
            Segment::Body => body,
            Segment::Timestamp => timestamp.as_deref().unwrap_or_default().as_bytes(),
            Segment::Url => url.as_bytes(),
            Segment::Value(_) => next_owned.next().map(Vec::as_slice).unwrap_or_default(),
        })
        .collect();

    let key = matching_key(ctx, &parts, &candidates).ok_or(VerifyError::InvalidSignature)?;

    if let (Some(spec), Some(ts)) = (&provider.timestamp, &timestamp) {
        let ts: i64 = ts
            .trim()
            .parse()
            .map_err(|_| VerifyError::MalformedTimestamp)?;
        let secs = match spec.unit {
            TimeUnit::Seconds => ts,
            TimeUnit::Millis => ts.div_euclid(1000),
        };
        crate::verify::check_window(secs, ctx.now, ctx.source.tolerance, spec.reject_future)?;
    }
    Ok(key)
}

/// Header values, and the `k=v` pairs parsed from them.
type Values<'h> = (Vec<&'h str>, Vec<(&'h str, &'h str)>);

/// The raw signature header values, and `k=v` pairs for the `pairs` format.
pub fn signature_values<'h>(
    sig: &Signature,
    headers: &'h HeaderMap,
) -> Result<Values<'h>, VerifyError> {
    let name = sig
        .headers
        .iter()
        .find(|h| headers.contains_key(h.as_str()))
        .ok_or(VerifyError::MissingSignature)?;
    let mut values = Vec::new();
    for v in headers.get_all(name.as_str()) {
        if v.len() > MAX_SIGNATURE_HEADER {
            return Err(VerifyError::MalformedSignature("header too long"));
        }
        let v = v
            .to_str()
            .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))?;
        values.push(v.trim());
    }
    if values.len() > MAX_CANDIDATES {
        return Err(VerifyError::MalformedSignature("too many signatures"));
    }
    let mut pairs = Vec::new();
    if sig.format == HeaderFormat::Pairs {
        for v in &values {
            for item in v.split(sig.separator.as_str()) {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                let (k, val) = item
                    .split_once('=')
                    .ok_or(VerifyError::MalformedSignature("expected key=value items"))?;
                pairs.push((k.trim(), val.trim()));
            }
        }
    }
    Ok((values, pairs))
}

/// Every decodable signature in the header(s), capped at [`MAX_CANDIDATES`].
fn parse_candidates(
    sig: &Signature,
    values: &[&str],
    pairs: &[(&str, &str)],
) -> Result<Vec<Vec<u8>>, VerifyError> {
    let mut texts: Vec<&str> = Vec::new();
    match sig.format {
        HeaderFormat::Value => {
            for v in values {
                match v.strip_prefix(sig.prefix.as_str()) {
                    Some(s) => texts.push(s),
                    None => return Err(VerifyError::MalformedSignature("missing prefix")),
                }
            }
        }
        HeaderFormat::Pairs => texts.extend(
            pairs
                .iter()
                .filter(|(k, _)| sig.keys.iter().any(|key| key == k))
                .map(|(_, v)| *v),
        ),
        HeaderFormat::Tagged => {
            for v in values {
                for item in v.split(sig.separator.as_str()).filter(|s| !s.is_empty()) {
                    let (tag, s) = item.split_once(',').ok_or(VerifyError::MalformedSignature(
                        "expected tag,signature items",
                    ))?;
                    if sig.keys.iter().any(|k| k == tag) {
                        texts.push(s);
                    }
                }
            }
        }
    }
    decode_candidates(sig, &texts)
}

/// Decodes signature texts per the provider's encoding, dropping any of the
/// wrong length; an error when none is usable.
pub fn decode_candidates(sig: &Signature, texts: &[&str]) -> Result<Vec<Vec<u8>>, VerifyError> {
    if texts.is_empty() {
        return Err(VerifyError::MalformedSignature(
            "no signature of a known version",
        ));
    }
    if texts.len() > MAX_CANDIDATES {
        return Err(VerifyError::MalformedSignature("too many signatures"));
    }
    let want = sig.algorithm.output_len();
    let decoded: Vec<Vec<u8>> = texts
        .iter()
        .filter_map(|t| sig.encoding.decode(t.trim()))
        .filter(|d| d.len() == want)
        .collect();
    if decoded.is_empty() {
        return Err(VerifyError::MalformedSignature(
            "signature is not valid encoding",
        ));
    }
    Ok(decoded)
}

/// The signature header for `req`; headers the signed content names (the
/// timestamp, ids) are added to `out` first.
fn sign(s: &Signer<'_>, out: &mut Vec<(String, String)>) -> Result<(String, String), String> {
    let Signer { provider, key, req } = *s;
    let sig = &provider.signature;
    let ts = match provider.timestamp.as_ref().map(|t| t.unit) {
        Some(TimeUnit::Millis) => (req.timestamp * 1000).to_string(),
        _ => req.timestamp.to_string(),
    };
    let mut ts_pair_key = None;
    let mut ts_value = ts.clone();
    if let Some(t) = &provider.timestamp {
        match t.from.alternatives.first() {
            Some(Locator::Header(h)) => out.push((h.clone(), ts.clone())),
            Some(Locator::Signature(k)) => ts_pair_key = Some(k.clone()),
            // Carried in the body (Linear): the body already holds it.
            Some(Locator::Json(_)) => {
                let empty = HeaderMap::new();
                ts_value = Fields::new(&empty, req.body)
                    .lookup(&t.from, &[])
                    .ok_or("the body has no timestamp")?;
            }
            _ => return Err("cannot place the timestamp of this provider".into()),
        }
    }
    let empty = HeaderMap::new();
    let fields = Fields::with_query(&empty, req.body, req.query.unwrap_or_default());
    let mut values: Vec<Vec<u8>> = Vec::new();
    for seg in &sig.content {
        if let Segment::Value(l) = seg {
            values.push(value_for(l, out, &fields)?.into_bytes());
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
            Segment::Timestamp => ts_value.as_bytes(),
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
    let header = sig.headers.first().ok_or("the provider names no header")?;
    Ok((header.clone(), value))
}

/// A signed value: from a header already generated, from the body, or a
/// fresh id for a header nobody set yet.
fn value_for(
    lookup: &Lookup,
    out: &mut Vec<(String, String)>,
    fields: &Fields<'_>,
) -> Result<String, String> {
    for l in &lookup.alternatives {
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
