//! The data-driven scheme: a MAC over a signed-content template, signatures
//! in one header laid out as `value`, `pairs` or `tagged`.

use super::{Ctx, Defaults, SchemeDef, matching_key};
use crate::verify::VerifyError;
use crate::verify::locator::{Locator, Lookup, Segment};
use crate::verify::provider::Signature;
use crate::verify::fields::Fields;
use crate::verify::sign::{Signed, Signer};
use crate::verify::spec::{HeaderFormat, TimeUnit};
use http::HeaderMap;

/// Longest signature header we parse; real ones are well under 1 KiB.
pub const MAX_SIGNATURE_HEADER: usize = 8 * 1024;
/// Most signatures considered in one header (rotation needs two or three).
pub const MAX_CANDIDATES: usize = 16;

pub struct Hmac;

impl SchemeDef for Hmac {
    const SUMMARY: &'static str = "MAC over the signed-content template of the provider file";

    const DEFAULTS: Defaults = Defaults {
        needs_header: true,
        algorithm: None,
        encoding: None,
        needs_secret: true,
        signs_url: false,
        needs_allow_ips: false,
    };

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let (name, value) = sign(s, &mut out.headers)?;
        out.headers.push((name, value));
        Ok(())
    }
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    let provider = &ctx.source.provider;
    let (candidates, pairs) = match &sig.from {
        Some(at) => (candidates_at(sig, ctx.fields, at)?, &[][..]),
        None => {
            let (values, pairs) = signature_values_of(sig, ctx.fields)?;
            (parse_candidates(sig, values, pairs)?, pairs.as_slice())
        }
    };

    let timestamp = match &provider.timestamp {
        Some(t) => Some(
            ctx.fields
                .lookup(&t.from, pairs)
                .ok_or(VerifyError::MissingTimestamp)?,
        ),
        None => None,
    };

    let fixed = Fixed {
        body: ctx.fields.body(),
        timestamp: timestamp.as_deref().unwrap_or_default(),
        url: ctx.url.unwrap_or_default(),
    };
    let missing = VerifyError::MalformedSignature("a signed value is missing");
    let parts = assemble(&sig.content, &fixed, &mut |l| {
        ctx.fields.lookup(l, pairs).map(String::into_bytes)
    })
    .ok_or(missing)?;
    let mut key = matching_key(ctx, &as_slices(&parts), &candidates);
    // A `lower:` value is also tried as received: Mercado Pago's docs ask
    // for lowercased ids; what their SDKs sign is not confirmed
    // (docs/providers.md). Both are MACs with the secret, so accepting
    // either admits no forgery.
    if key.is_none() && has_lowercase(&sig.content) {
        let parts = assemble(&sig.content, &fixed, &mut |l| {
            let as_received = Lookup {
                lowercase: false,
                ..l.clone()
            };
            ctx.fields.lookup(&as_received, pairs).map(String::into_bytes)
        })
        .ok_or(missing)?;
        key = matching_key(ctx, &as_slices(&parts), &candidates);
    }
    let key = key.ok_or(VerifyError::InvalidSignature)?;

    if let (Some(spec), Some(ts)) = (&provider.timestamp, &timestamp)
        && spec.checked
    {
        let secs = spec
            .unit
            .unix_secs(ts)
            .ok_or(VerifyError::MalformedTimestamp)?;
        crate::verify::check_window(secs, ctx.now, ctx.source.tolerance, spec.reject_future)?;
    }
    Ok(key)
}

/// The parts of a signed-content template that do not need a lookup.
struct Fixed<'a> {
    body: &'a [u8],
    timestamp: &'a str,
    url: &'a str,
}

/// The signed bytes of `content`, in order, with `value` resolving each
/// lookup. A missing value fails the whole (`None`) unless it sits in an
/// optional group, which is then left out.
fn assemble<'a>(
    content: &'a [Segment],
    fixed: &Fixed<'a>,
    value: &mut dyn FnMut(&Lookup) -> Option<Vec<u8>>,
) -> Option<Vec<std::borrow::Cow<'a, [u8]>>> {
    use std::borrow::Cow;
    let mut out = Vec::with_capacity(content.len());
    for seg in content {
        match seg {
            Segment::Literal(b) => out.push(Cow::Borrowed(b.as_slice())),
            Segment::Body => out.push(Cow::Borrowed(fixed.body)),
            Segment::Timestamp => out.push(Cow::Borrowed(fixed.timestamp.as_bytes())),
            Segment::Url => out.push(Cow::Borrowed(fixed.url.as_bytes())),
            Segment::Value(l) => out.push(Cow::Owned(value(l)?)),
            Segment::Optional(group) => {
                if let Some(parts) = assemble(group, fixed, value) {
                    out.extend(parts);
                }
            }
        }
    }
    Some(out)
}

fn as_slices<'p>(parts: &'p [std::borrow::Cow<'_, [u8]>]) -> Vec<&'p [u8]> {
    parts.iter().map(|p| p.as_ref()).collect()
}

fn has_lowercase(content: &[Segment]) -> bool {
    content.iter().any(|s| match s {
        Segment::Value(l) => l.lowercase,
        Segment::Optional(g) => has_lowercase(g),
        _ => false,
    })
}

/// The signature a request carries at `at` instead of a header (Mailgun's
/// `json:/signature/signature`), after the provider's prefix.
fn candidates_at(
    sig: &Signature,
    fields: &Fields<'_>,
    at: &Lookup,
) -> Result<Vec<Vec<u8>>, VerifyError> {
    let value = fields.lookup(at, &[]).ok_or(VerifyError::MissingSignature)?;
    if value.len() > MAX_SIGNATURE_HEADER {
        return Err(VerifyError::MalformedSignature("header too long"));
    }
    let text = value
        .strip_prefix(sig.prefix.as_str())
        .ok_or(VerifyError::MalformedSignature("missing prefix"))?;
    decode_candidates(sig, &[text])
}

/// Header values, and the `k=v` pairs parsed from them.
use crate::verify::fields::SignatureValues as Values;

/// [`signature_values`] of the request `fields` reads, parsed on the first
/// call and kept with the fields (a request has one provider, so one
/// `sig`); an error is not kept, the next call parses again.
pub fn signature_values_of<'f, 'a>(
    sig: &Signature,
    fields: &'f Fields<'a>,
) -> Result<&'f Values<'a>, VerifyError> {
    if let Some(v) = fields.signature.get() {
        return Ok(v);
    }
    let v = signature_values(sig, fields.headers())?;
    Ok(fields.signature.get_or_init(|| v))
}

/// The raw signature header values, and `k=v` pairs for the `pairs` format.
pub fn signature_values<'h>(
    sig: &Signature,
    headers: &'h HeaderMap,
) -> Result<Values<'h>, VerifyError> {
    let mut values = Vec::new();
    let mut add = |v: &'h http::HeaderValue| -> Result<(), VerifyError> {
        if v.len() > MAX_SIGNATURE_HEADER {
            return Err(VerifyError::MalformedSignature("header too long"));
        }
        let v = v
            .to_str()
            .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))?;
        values.push(v.trim());
        Ok(())
    };
    if sig.every_header {
        for (name, v) in headers {
            if sig.names(name.as_str()) {
                add(v)?;
            }
        }
    } else if let Some(name) = sig.headers.iter().find(|h| headers.contains_key(h.as_str())) {
        for v in headers.get_all(name.as_str()) {
            add(v)?;
        }
    }
    if values.is_empty() {
        return Err(VerifyError::MissingSignature);
    }
    if values.len() > MAX_CANDIDATES {
        return Err(VerifyError::MalformedSignature("too many signatures"));
    }
    let mut pairs = Vec::new();
    if sig.format == HeaderFormat::Pairs {
        // Whitespace also ends an item: Persona sends one `t=…,v1=…` set
        // per secret while rotating, the sets separated by a space.
        for v in &values {
            for item in split_items(v, &sig.separator).flat_map(str::split_ascii_whitespace) {
                let (k, val) = item
                    .split_once('=')
                    .ok_or(VerifyError::MalformedSignature("expected key=value items"))?;
                pairs.push((k.trim(), val.trim()));
            }
        }
    }
    Ok((values, pairs))
}

/// `text.split(sep)`, with a one-character separator (every built-in
/// provider's) searched as a `char`: a `&str` pattern runs the general
/// two-way searcher, far slower for a short header on every request.
fn split_items<'t, 's>(text: &'t str, sep: &'s str) -> impl Iterator<Item = &'t str> + use<'t, 's> {
    let mut chars = sep.chars();
    let (by_char, by_str) = match (chars.next(), chars.next()) {
        (Some(c), None) => (Some(text.split(c)), None),
        _ => (None, Some(text.split(sep))),
    };
    by_char.into_iter().flatten().chain(by_str.into_iter().flatten())
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
                for item in split_items(v, &sig.separator).filter(|s| !s.is_empty()) {
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
    if sig.from.is_some() {
        return Err("the signature travels inside the body: build the body with it".into());
    }
    let ts = provider
        .timestamp
        .as_ref()
        .map_or(TimeUnit::Seconds, |t| t.unit)
        .write(req.timestamp);
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
    let fixed = Fixed {
        body: req.body,
        timestamp: &ts_value,
        url: req.url.unwrap_or_default(),
    };
    let mut problem = None;
    let parts = assemble(&sig.content, &fixed, &mut |l| match value_for(l, out, &fields) {
        Ok(v) => Some(v.into_bytes()),
        Err(e) => {
            problem = Some(e);
            None
        }
    });
    let parts = parts.ok_or_else(|| problem.unwrap_or_default())?;
    let parts = as_slices(&parts);
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
    let header = sig.first_header().ok_or("the provider names no header")?;
    Ok((header, value))
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
            let v = crate::primitives::token::random_uuid();
            out.push((h.to_owned(), v.clone()));
            Ok(v)
        }
        None => Err(format!("the body has no value for {lookup:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::split_items;

    #[test]
    fn split_items_is_str_split() {
        let texts = ["", ",", "t=1,v1=ab,v0=cd", ",a,,b,", "v1,x v1,y", "a;;b", "aXYbXYc", "é,ü"];
        for text in texts {
            for sep in [",", " ", ";", "XY", "é", ""] {
                let ours: Vec<&str> = split_items(text, sep).collect();
                let std: Vec<&str> = text.split(sep).collect();
                assert_eq!(ours, std, "{text:?} split on {sep:?}");
            }
        }
    }
}
