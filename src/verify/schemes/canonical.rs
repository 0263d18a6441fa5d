//! Signed canonical requests: an HMAC over a text built from the request
//! line, a set of headers and the body, where the provider names part of
//! what is signed in the request itself.
//!
//! - `contentful`: `POST\n{path}\n{headers}\n{body}`, hex HMAC-SHA256 in
//!   `x-contentful-signature`. `{headers}` is `name:value` joined by `;`
//!   for every header `x-contentful-signed-headers` lists (lowercased,
//!   trimmed, sorted by name), that list itself rewritten as the sorted
//!   names joined by `,`, and `x-contentful-timestamp` (Unix ms). `{path}`
//!   is the public URL's path, its query escaped as Contentful's
//!   `node-apps-toolkit` (`getNormalizedEncodedURI`) escapes it.
//!   https://www.contentful.com/developers/docs/webhooks/request-verification/
//! - `hubspot`: `POST{url}{body}{timestamp}`, base64 HMAC-SHA256 in
//!   `X-HubSpot-Signature-v3`, the timestamp (Unix ms) in
//!   `X-HubSpot-Request-Timestamp`; the URL with the characters HubSpot
//!   lists decoded.
//!   https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests
//!
//! Rule: the method is `POST` because `/webhooks/<source>` receives events
//! only by POST; the path or URL is the source's `public_url` (with the
//! request's query), never the Host header; the timestamp window follows
//! `[timestamp]` and is checked after the signature.

use super::hmac::{decode_candidates, signature_values_of};
use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::primitives::crypto::{Algorithm, Encoding, SigningKey};
use crate::verify::VerifyError;
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::sign::{Signed, Signer};
use http::HeaderMap;
use serde::Deserialize;

/// The method every signed webhook arrives with.
const METHOD: &str = "POST";
const SIGNED_HEADERS: &str = "x-contentful-signed-headers";
const TIMESTAMP: &str = "x-contentful-timestamp";
/// Most headers one Contentful signature may name (it signs a handful).
const MAX_SIGNED_HEADERS: usize = 32;

/// Which canonical request a provider signs (`[signature] canonical`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Contentful,
    Hubspot,
}

pub struct Canonical;

impl SchemeDef for Canonical {
    const SUMMARY: &'static str =
        "HMAC over a canonical request: method, path or URL, signed headers, body";

    const DEFAULTS: Defaults = Defaults {
        signs_url: true,
        ..Defaults::keyed(true, Algorithm::HmacSha256, Encoding::Hex)
    };

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        sign(s, out)
    }

    /// The body and the timestamp always; Contentful's other headers only
    /// when a request lists them, which a provider file cannot promise.
    fn covers(provider: &Provider, part: Part<'_>) -> Cover {
        match part {
            Part::Body | Part::At(Locator::Json(_) | Locator::Form(_)) => Cover::Signed,
            Part::At(at) => Cover::signed_if(
                provider
                    .timestamp
                    .as_ref()
                    .is_some_and(|t| t.from.alternatives.contains(at)),
            ),
            Part::OwnType => Cover::Unsigned,
        }
    }
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    let provider = &ctx.source.provider;
    let (values, _) = signature_values_of(sig, ctx.fields)?;
    let candidates = decode_candidates(sig, values)?;
    let spec = provider
        .timestamp
        .as_ref()
        .ok_or(VerifyError::MissingTimestamp)?;
    let ts = ctx
        .fields
        .lookup(&spec.from, &[])
        .ok_or(VerifyError::MissingTimestamp)?;
    let url = ctx
        .url
        .ok_or(VerifyError::MalformedSignature("the source has no public_url"))?;
    let text = match sig.layout {
        Some(Layout::Contentful) => {
            let ms: i64 = ts.trim().parse().map_err(|_| VerifyError::MalformedTimestamp)?;
            contentful_text(ctx.fields.headers(), url, ms, ctx.fields.body())?
        }
        Some(Layout::Hubspot) => hubspot_text(url, ctx.fields.body(), ts.trim()),
        None => return Err(VerifyError::MalformedSignature("no canonical layout")),
    };
    let key = super::matching_key(ctx, &[&text], &candidates).ok_or(VerifyError::InvalidSignature)?;
    let secs = spec.unit.unix_secs(&ts).ok_or(VerifyError::MalformedTimestamp)?;
    crate::verify::check_window(secs, ctx.now, ctx.source.tolerance, spec.reject_future)?;
    Ok(key)
}

/// Contentful's canonical request for the headers the request lists.
fn contentful_text(
    headers: &HeaderMap,
    url: &str,
    timestamp_ms: i64,
    body: &[u8],
) -> Result<Vec<u8>, VerifyError> {
    let listed = header(headers, SIGNED_HEADERS)?;
    let names: Vec<String> = listed
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    if names.len() > MAX_SIGNED_HEADERS {
        return Err(VerifyError::MalformedSignature("too many signed headers"));
    }
    let mut picked: Vec<(String, String)> = Vec::with_capacity(names.len() + 2);
    for name in names {
        if picked.iter().any(|(n, _)| *n == name) {
            continue;
        }
        // A listed header that is absent is left out, as the toolkit does.
        if let Some(v) = headers.get(name.as_str()) {
            let v = v
                .to_str()
                .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))?;
            picked.push((name, v.trim().to_owned()));
        }
    }
    Ok(contentful_canonical(&contentful_path(url), picked, timestamp_ms, body))
}

/// The canonical text from the headers to sign: the signed-headers list
/// and the timestamp are (re)written as Contentful's signer writes them.
fn contentful_canonical(
    path: &str,
    mut headers: Vec<(String, String)>,
    timestamp_ms: i64,
    body: &[u8],
) -> Vec<u8> {
    headers.retain(|(n, _)| n != SIGNED_HEADERS && n != TIMESTAMP);
    headers.push((TIMESTAMP.to_owned(), timestamp_ms.to_string()));
    headers.push((SIGNED_HEADERS.to_owned(), String::new()));
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let list = names.join(",");
    let joined: Vec<String> = headers
        .iter()
        .map(|(n, v)| match n.as_str() {
            SIGNED_HEADERS => format!("{n}:{list}"),
            _ => format!("{n}:{v}"),
        })
        .collect();
    let mut text = format!("{METHOD}\n{path}\n{}\n", joined.join(";")).into_bytes();
    text.extend_from_slice(body);
    text
}

/// The path Contentful signs: the URL's path and query, the query escaped
/// with `querystring.escape` and then the whole with `encodeURI`, as
/// `getNormalizedEncodedURI` does.
fn contentful_path(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path_and_query = rest.find('/').map_or("/", |i| &rest[i..]);
    let path_and_query = path_and_query.split('#').next().unwrap_or_default();
    let joined = match path_and_query.split_once('?') {
        Some((path, query)) if !query.is_empty() => {
            // The toolkit splits on every `?` and keeps the first two parts.
            let query = query.split('?').next().unwrap_or_default();
            format!("{path}?{}", escape(query, COMPONENT_SAFE))
        }
        Some((path, _)) => path.to_owned(),
        None => path_and_query.to_owned(),
    };
    escape(&joined, URI_SAFE)
}

/// Characters `encodeURIComponent` (and `querystring.escape`) keep.
const COMPONENT_SAFE: &str = "-_.!~*'()";
/// Characters `encodeURI` keeps besides those.
const URI_SAFE: &str = "-_.!~*'();/?:@&=+$,#";

/// Percent-encodes every byte but ASCII letters, digits and `safe`.
fn escape(text: &str, safe: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || safe.as_bytes().contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// HubSpot's v3 source string: method, URL (decoded as HubSpot lists),
/// body, timestamp.
fn hubspot_text(url: &str, body: &[u8], timestamp: &str) -> Vec<u8> {
    let mut text = format!("{METHOD}{}", hubspot_uri(url)).into_bytes();
    text.extend_from_slice(body);
    text.extend_from_slice(timestamp.as_bytes());
    text
}

/// The URL with the escapes HubSpot's v3 instructions decode (and no
/// others): `%3A :`, `%2F /`, `%3F ?`, `%40 @`, `%21 !`, `%24 $`, `%27 '`,
/// `%28 (`, `%29 )`, `%2A *`, `%2C ,`, `%3B ;`.
fn hubspot_uri(url: &str) -> String {
    const DECODED: &[(&str, char)] = &[
        ("3A", ':'),
        ("2F", '/'),
        ("3F", '?'),
        ("40", '@'),
        ("21", '!'),
        ("24", '$'),
        ("27", '\''),
        ("28", '('),
        ("29", ')'),
        ("2A", '*'),
        ("2C", ','),
        ("3B", ';'),
    ];
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3).unwrap_or_default();
        match DECODED.iter().find(|(c, _)| c.eq_ignore_ascii_case(code)) {
            Some((_, ch)) => {
                out.push(*ch);
                rest = &rest[i + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, VerifyError> {
    let v = headers.get(name).ok_or(VerifyError::MissingSignature)?;
    if v.len() > super::hmac::MAX_SIGNATURE_HEADER {
        return Err(VerifyError::MalformedSignature("header too long"));
    }
    v.to_str()
        .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))
}

/// The provider's headers for `s.req`: Contentful's signature over the
/// headers already set (the event id header) plus its timestamp and
/// signed-headers list; HubSpot's over the URL, body and timestamp.
fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
    let Signer { provider, key, req } = *s;
    let sig = &provider.signature;
    let url = req.url.ok_or("the canonical scheme signs the public URL: pass it")?;
    let ms = req.timestamp * 1000;
    let header = sig.first_header().ok_or("the provider names no header")?;
    let mac = |text: &[u8], key: &SigningKey| sig.encoding.encode(&sig.algorithm.mac(key.bytes(), &[text]));
    match sig.layout {
        Some(Layout::Contentful) => {
            // Sign what Contentful signs for a webhook: every header the
            // signer already set (the event id) plus the two of its own.
            let picked: Vec<(String, String)> = out
                .headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let text = contentful_canonical(&contentful_path(url), picked.clone(), ms, req.body);
            let mut names: Vec<String> = picked.into_iter().map(|(n, _)| n).collect();
            names.extend([SIGNED_HEADERS.to_owned(), TIMESTAMP.to_owned()]);
            names.sort();
            out.headers.push((TIMESTAMP.into(), ms.to_string()));
            out.headers.push((SIGNED_HEADERS.into(), names.join(",")));
            out.headers.push((header, mac(&text, key)));
        }
        Some(Layout::Hubspot) => {
            let ts = ms.to_string();
            let ts_header = match provider.timestamp.as_ref().and_then(|t| t.from.header()) {
                Some(h) => h.to_owned(),
                None => return Err("the provider names no timestamp header".into()),
            };
            out.headers.push((ts_header, ts.clone()));
            out.headers.push((header, mac(&hubspot_text(url, req.body, &ts), key)));
        }
        None => return Err("the provider file names no `canonical` layout".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contentful_escapes_the_query_twice_as_its_toolkit_does() {
        assert_eq!(contentful_path("https://h.example/hooks/cf"), "/hooks/cf");
        assert_eq!(contentful_path("https://h.example"), "/");
        // querystring.escape("a=1&b=2") = "a%3D1%26b%3D2"; encodeURI then
        // escapes each `%`.
        assert_eq!(
            contentful_path("https://h.example/p?a=1&b=2"),
            "/p?a%253D1%2526b%253D2"
        );
        assert_eq!(contentful_path("https://h.example/a b"), "/a%20b");
    }

    #[test]
    fn hubspot_decodes_only_the_listed_escapes() {
        assert_eq!(
            hubspot_uri("https://h.example/x?u=a%3Ab%2Fc%40d%20e%"),
            "https://h.example/x?u=a:b/c@d%20e%"
        );
    }

    #[test]
    fn contentful_signed_header_list_is_rewritten_sorted() {
        let text = contentful_canonical(
            "/p",
            vec![
                ("x-b".into(), "2".into()),
                ("x-a".into(), "1".into()),
                (SIGNED_HEADERS.into(), "x-b,x-a".into()),
            ],
            1_700_000_000_000,
            b"{}",
        );
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "POST\n/p\nx-a:1;x-b:2;x-contentful-signed-headers:x-a,x-b,x-contentful-signed-headers,x-contentful-timestamp;x-contentful-timestamp:1700000000000\n{}"
        );
    }
}
