//! The data-driven scheme: a MAC over a signed-content template, signatures
//! in one header laid out as `value`, `pairs` or `tagged`.

use super::{Ctx, matching_key};
use crate::verify::VerifyError;
use crate::verify::provider::{HeaderFormat, Segment, Signature, TimeUnit};
use http::HeaderMap;

/// Longest signature header we parse; real ones are well under 1 KiB.
pub const MAX_SIGNATURE_HEADER: usize = 8 * 1024;
/// Most signatures considered in one header (rotation needs two or three).
pub const MAX_CANDIDATES: usize = 16;

pub fn verify(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
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
