//! Where an `hmac` provider's signatures are: the header's values (of the
//! first named header present, or of every one with `every_header`), laid
//! out as `value`, `pairs`, `tagged` or `list`, or one request value
//! (`[signature] from`: Mailgun's and Midtrans's body), decoded into
//! candidate MACs.

use crate::verify::VerifyError;
use crate::verify::locator::Lookup;
use crate::verify::provider::Signature;
use crate::verify::fields::Fields;
use crate::verify::spec::HeaderFormat;
use http::HeaderMap;

/// Header values, and the `k=v` pairs parsed from them.
use crate::verify::fields::SignatureValues as Values;

/// Longest signature header we parse; real ones are well under 1 KiB.
pub const MAX_SIGNATURE_HEADER: usize = 8 * 1024;
/// Most signatures considered in one header (rotation needs two or three).
pub const MAX_CANDIDATES: usize = 16;

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
    if sig.format == HeaderFormat::List {
        // Item 0 as `signature:0`; the signatures are read in
        // `parse_candidates`.
        let first = values
            .first()
            .and_then(|v| split_items(v, &sig.separator).next())
            .map(str::trim)
            .ok_or(VerifyError::MalformedSignature("empty signature list"))?;
        pairs.push(("0", first));
    }
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
pub(super) fn parse_candidates(
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
        HeaderFormat::List => {
            for v in values {
                texts.extend(split_items(v, &sig.separator).skip(1).map(str::trim));
            }
        }
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

/// The signature one request value holds (`[signature] from`: Mailgun's
/// `json:/signature/signature`, Midtrans's `json:/signature_key`), after
/// the provider's prefix, as candidates.
pub(super) fn candidates_at(
    sig: &Signature,
    at: &Lookup,
    fields: &Fields<'_>,
) -> Result<Vec<Vec<u8>>, VerifyError> {
    let value = fields.lookup(at, &[]).ok_or(VerifyError::MissingSignature)?;
    if value.len() > MAX_SIGNATURE_HEADER {
        return Err(VerifyError::MalformedSignature("signature too long"));
    }
    let text = value
        .strip_prefix(sig.prefix.as_str())
        .ok_or(VerifyError::MalformedSignature("missing prefix"))?;
    decode_candidates(sig, &[text])
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
    let decoded: Vec<Vec<u8>> = texts
        .iter()
        .filter_map(|t| sig.encoding.decode(t.trim()))
        .filter(|d| sig.fits(d.len()))
        .collect();
    if decoded.is_empty() {
        return Err(VerifyError::MalformedSignature(
            "signature is not valid encoding",
        ));
    }
    Ok(decoded)
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

