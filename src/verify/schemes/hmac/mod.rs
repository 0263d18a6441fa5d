//! The data-driven scheme: a MAC over a signed-content template
//! (`template.rs`), with the signatures in the signature header(s) laid out
//! as `value`, `pairs`, `tagged` or `list`, or in one request value
//! (`header.rs`).
//!
//! Two generalisations serve providers that do not key an HMAC with their
//! secret alone: `{secret}` puts the secret into the signed content
//! (iyzico's HMAC over `secretKey + fields`), and with it a plain digest
//! (`sha512`, `md5`) replaces the HMAC (Midtrans's SHA-512 over
//! `order_id+status_code+gross_amount+ServerKey`, PayU's MD5 over
//! `body+second_key`). A plain digest without `{secret}` would be unkeyed,
//! so provider validation refuses it.

mod header;
mod template;

pub use header::{
    MAX_CANDIDATES, MAX_SIGNATURE_HEADER, decode_candidates, signature_values,
    signature_values_of,
};
pub use template::template_covers;

use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::verify::VerifyError;
use crate::primitives::crypto::mac_eq;
use crate::verify::locator::{Locator, Lookup, Segment};
use crate::verify::provider::Provider;
use crate::verify::fields::Fields;
use crate::verify::sign::{Signed, Signer};
use crate::verify::spec::{HeaderFormat, TimeUnit};
use http::HeaderMap;
use template::{Fixed, any_segment, as_slices, assemble, has_lowercase};

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
        sign(s, out)
    }

    fn covers(provider: &Provider, part: Part<'_>) -> Cover {
        template_covers(provider, &provider.signature.content, part)
    }
}

/// Checks one candidate signature of the signed bytes with one configured
/// public key: `(key, message, signature)`. The public-key schemes
/// (`ed25519`, `ecdsa`, `rsa`) reuse this file's reading of headers,
/// templates and timestamps and differ only in this check.
pub type PublicCheck<'a> = &'a dyn Fn(&[u8], &[u8], &[u8]) -> bool;

/// Makes the signature of the signed bytes with a test's private key.
pub type PrivateSign<'a> = &'a dyn Fn(&[u8]) -> Result<Vec<u8>, String>;

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    verify_with(ctx, None)
}

/// [`Hmac`]'s verification, with `public` checking each candidate instead
/// of a MAC when given.
pub fn verify_with(ctx: &Ctx<'_, '_>, public: Option<PublicCheck<'_>>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    let provider = &ctx.source.provider;
    let (candidates, pairs): (Vec<Vec<u8>>, &[(&str, &str)]) = match &sig.from {
        Some(at) => (header::candidates_at(sig, at, ctx.fields)?, &[]),
        None => {
            let (values, pairs) = signature_values_of(sig, ctx.fields)?;
            (header::parse_candidates(sig, values, pairs)?, pairs)
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
    let fixed = |secret| Fixed {
        body: ctx.fields.body(),
        timestamp: timestamp.as_deref().unwrap_or_default(),
        url: ctx.url.unwrap_or_default(),
        secret,
    };
    let matching = |as_received: bool| -> Result<Option<usize>, VerifyError> {
        let mut value = |l: &Lookup| {
            let l = Lookup {
                lowercase: l.lowercase && !as_received,
                ..l.clone()
            };
            ctx.fields.lookup(&l, pairs).map(String::into_bytes)
        };
        let missing = VerifyError::MalformedSignature("a signed value is missing");
        if let Some(check) = public {
            let parts = assemble(&sig.content, &fixed(&[]), &mut value).ok_or(missing)?;
            let message = parts.concat();
            return Ok(ctx.source.keys.iter().position(|key| {
                candidates.iter().any(|c| check(key.bytes(), &message, c))
            }));
        }
        if !any_segment(&sig.content, &|s| *s == Segment::Secret) {
            let parts = assemble(&sig.content, &fixed(&[]), &mut value).ok_or(missing)?;
            return Ok(super::matching_key(ctx, &as_slices(&parts), &candidates));
        }
        // The signed content differs per configured secret.
        for (i, key) in ctx.source.keys.iter().enumerate() {
            let parts = assemble(&sig.content, &fixed(key.bytes()), &mut value).ok_or(missing)?;
            let expected = sig.algorithm.mac(key.bytes(), &as_slices(&parts));
            if candidates.iter().any(|c| mac_eq(&expected, c)) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    };
    let mut key = matching(false)?;
    // A `lower:` value is also tried as received: Mercado Pago's docs ask
    // for lowercased ids; what their SDKs sign is not confirmed
    // (docs/providers.md). Both are MACs with the secret, so accepting
    // either admits no forgery.
    if key.is_none() && has_lowercase(&sig.content) {
        key = matching(true)?;
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

/// Signs `req`: the signature header (headers the signed content names,
/// the timestamp and ids, are added first), or the signature placed at
/// `[signature] from` in the body.
fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
    sign_with(s, out, None)
}

/// [`Hmac`]'s signer, with `private` making the signature instead of a
/// MAC when given.
pub fn sign_with(
    s: &Signer<'_>,
    out: &mut Signed,
    private: Option<PrivateSign<'_>>,
) -> Result<(), String> {
    let Signer { provider, key, req } = *s;
    let sig = &provider.signature;
    let unit = provider.timestamp.as_ref().map_or(TimeUnit::Seconds, |t| t.unit);
    let ts = unit.format(req.timestamp);
    let headers = &mut out.headers;
    let mut ts_pair_key = None;
    let mut ts_value = ts.clone();
    if let Some(t) = &provider.timestamp {
        match t.from.alternatives.first() {
            Some(Locator::Header(h)) => headers.push((h.clone(), ts.clone())),
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
        secret: key.bytes(),
    };
    let mut problem = None;
    let parts = assemble(&sig.content, &fixed, &mut |l| {
        match value_for(l, headers, &fields) {
            Ok(v) => Some(v.into_bytes()),
            Err(e) => {
                problem = Some(e);
                None
            }
        }
    });
    let parts = parts.ok_or_else(|| problem.unwrap_or_default())?;
    let raw = match private {
        Some(f) => f(&parts.concat())?,
        None => sig.algorithm.mac(key.bytes(), &as_slices(&parts)),
    };
    let mac = sig.encoding.encode(&raw);
    if let Some(at) = &sig.from {
        out.body = Some(with_signature_at(req.body, at, &format!("{}{mac}", sig.prefix))?);
        return Ok(());
    }
    let first_key = sig.keys.first().map(String::as_str).unwrap_or("v1");
    let value = match sig.format {
        HeaderFormat::Value => format!("{}{mac}", sig.prefix),
        HeaderFormat::Pairs => match &ts_pair_key {
            Some(k) => format!("{k}={ts}{}{first_key}={mac}", sig.separator),
            None => format!("{first_key}={mac}"),
        },
        HeaderFormat::Tagged => format!("{first_key},{mac}"),
        HeaderFormat::List => match &ts_pair_key {
            Some(_) => format!("{ts}{}{mac}", sig.separator),
            None => return Err("a `list` header needs its first item from [timestamp]".into()),
        },
    };
    let header = sig.first_header().ok_or("the provider names no header")?;
    headers.push((header, value));
    Ok(())
}

/// `body` with the signature set at `at`: a JSON member whose parent
/// object the body already has (Midtrans's root `signature_key`, Mailgun's
/// `signature` object next to its timestamp and token), or a form field.
fn with_signature_at(body: &[u8], at: &Lookup, signature: &str) -> Result<Vec<u8>, String> {
    match at.alternatives.first() {
        Some(Locator::Json(pointer)) => {
            let mut json: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| format!("body: {e}"))?;
            let (parent, member) = pointer.rsplit_once('/').ok_or("not a JSON pointer")?;
            let obj = json
                .pointer_mut(parent)
                .and_then(serde_json::Value::as_object_mut)
                .ok_or_else(|| format!("the body has no JSON object at `{parent}`"))?;
            let member = member.replace("~1", "/").replace("~0", "~");
            obj.insert(member, signature.into());
            serde_json::to_vec(&json).map_err(|e| e.to_string())
        }
        Some(Locator::Form(name)) => {
            let mut out = body.to_vec();
            let pair = form_urlencoded::Serializer::new(String::new())
                .append_pair(name, signature)
                .finish();
            if !out.is_empty() {
                out.push(b'&');
            }
            out.extend_from_slice(pair.as_bytes());
            Ok(out)
        }
        _ => Err("can only sign into a JSON member or a form field".into()),
    }
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
