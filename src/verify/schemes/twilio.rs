//! Twilio: base64 HMAC-SHA1 (auth token) over the URL Twilio called
//! followed by every form parameter sorted by name (`name` + `value`, no
//! separators; repeated names in value order). JSON bodies are signed via
//! the URL instead: it carries `bodySHA256=<hex sha256 of the body>` and the
//! signature covers the URL alone. Twilio may or may not include the default
//! port, so the URL is tried with and without it.

use super::hmac::{decode_candidates, signature_values};
use super::{Cover, Ctx, Defaults, Part, SchemeDef, first_header, matching_key};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding, mac_eq};
use crate::verify::sign::{Signed, Signer};

pub struct Twilio;

impl SchemeDef for Twilio {
    const SUMMARY: &'static str = "HMAC-SHA1 → base64 over the public URL + sorted form parameters (JSON: URL with `bodySHA256`)";

    const DEFAULTS: Defaults = Defaults {
        signs_url: true,
        ..Defaults::keyed(true, Algorithm::HmacSha1, Encoding::Base64)
    };

    /// The URL (query included) and every form parameter, or a JSON body
    /// through `bodySHA256`; headers are not signed.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        Cover::signed_if(!matches!(
            part,
            Part::OwnType | Part::At(Locator::Header(_) | Locator::Signature(_))
        ))
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// Form bodies sign URL + sorted parameters; JSON bodies add
    /// `bodySHA256` to the query and sign the URL alone.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let sig = &provider.signature;
        let url = req.url.ok_or("twilio signs the URL: pass the public URL")?;
        let text = std::str::from_utf8(req.body).map_err(|_| "body is not UTF-8")?;
        let (url, params) = if serde_json::from_str::<serde_json::Value>(text).is_ok() {
            let hash = hex::encode(Algorithm::Sha256.digest(&[req.body]));
            let q = format!("bodySHA256={hash}");
            out.query = Some(q.clone());
            let sep = if url.contains('?') { '&' } else { '?' };
            (format!("{url}{sep}{q}"), String::new())
        } else {
            let params: Vec<(String, String)> = form_urlencoded::parse(req.body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            (url.to_owned(), sorted_params(&params))
        };
        let mac = sig
            .algorithm
            .mac(key.bytes(), &[url.as_bytes(), params.as_bytes()]);
        out.headers.push((first_header(sig), sig.encoding.encode(&mac)));
        Ok(())
    }
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let (values, _) = signature_values(ctx.sig, ctx.fields.headers())?;
    let candidates = decode_candidates(ctx.sig, &values)?;
    // Config validation guarantees a public URL for this scheme.
    let url = ctx.url.ok_or(VerifyError::MissingSignature)?;
    let content = match body_hash_param(url) {
        Some(expected) => {
            let actual = hex::encode(Algorithm::Sha256.digest(&[ctx.fields.body()]));
            if !mac_eq(actual.as_bytes(), expected.to_ascii_lowercase().as_bytes()) {
                return Err(VerifyError::InvalidSignature);
            }
            String::new()
        }
        None => {
            if std::str::from_utf8(ctx.fields.body()).is_err() {
                return Err(VerifyError::BadBody("form body is not UTF-8"));
            }
            sorted_params(ctx.fields.form())
        }
    };
    for candidate_url in url_variants(url) {
        let parts: [&[u8]; 2] = [candidate_url.as_bytes(), content.as_bytes()];
        if let Some(k) = matching_key(ctx, &parts, &candidates) {
            return Ok(k);
        }
    }
    Err(VerifyError::InvalidSignature)
}

/// `name+value` for every parameter, sorted by name, then value.
pub fn sorted_params(params: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = params.iter().collect();
    sorted.sort();
    sorted.dedup();
    sorted.iter().map(|(k, v)| format!("{k}{v}")).collect()
}

/// The `bodySHA256` query parameter of `url`, if any.
pub fn body_hash_param(url: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or_default();
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "bodySHA256")
        .map(|(_, v)| v.into_owned())
}

/// The URL as given, plus the same URL with the scheme's default port added
/// or removed.
pub fn url_variants(url: &str) -> Vec<String> {
    let mut out = vec![url.to_owned()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return out;
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return out,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // Userinfo never appears in a webhook URL; IPv6 literals end in `]`.
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    match port {
        Some(p) if p == default_port => out.push(format!("{scheme}://{host}{tail}")),
        Some(_) => {}
        None => out.push(format!("{scheme}://{host}:{default_port}{tail}")),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(url: &str, params: &[(&str, &str)]) -> String {
        let p: Vec<(String, String)> = params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let content = format!("{url}{}", sorted_params(&p));
        Encoding::Base64.encode(&Algorithm::HmacSha1.mac(b"12345", &[content.as_bytes()]))
    }

    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const V6: &[(&str, &str)] = &[
        ("CallSid", "CA1234567890ABCDE"),
        ("Digits", "1234"),
        ("From", "+14158675309"),
        ("To", "+18005551212"),
        ("Caller", "+14158675309"),
    ];

    // V5: twilio.com "webhooks-security" worked example.
    #[test]
    fn v5_docs_vector() {
        let params = [
            ("CallSid", "CA1234567890ABCDE"),
            ("Caller", "+12349013030"),
            ("Digits", "1234"),
            ("From", "+12349013030"),
            ("To", "+18005551212"),
        ];
        assert_eq!(sign(URL, &params), "0/KCTR6DLpKmkAf8muzZqo1nDgQ=");
    }

    // V6, V6b-d, V6e: twilio-python tests/unit/test_request_validator.py.
    #[test]
    fn v6_sdk_vectors_with_ports_and_repeated_keys() {
        assert_eq!(sign(URL, V6), "RSOYDt4T1cUTdK1PDd93/VVr8B8=");
        let with = |u: &str| sign(u, V6);
        assert_eq!(
            with("https://mycompany.com:443/myapp.php?foo=1&bar=2"),
            "kvajT1Ptam85bY51eRf/AJRuM3w="
        );
        assert_eq!(
            with("http://mycompany.com:80/myapp.php?foo=1&bar=2"),
            "0ZXoZLH/DfblKGATFgpif+LLRf4="
        );
        assert_eq!(
            with("http://mycompany.com:1234/myapp.php?foo=1&bar=2"),
            "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="
        );
        let repeated = [
            ("Sid", "CA123"),
            ("SidAccount", "AC123"),
            ("Digits", "5678"),
            ("Digits", "1234"),
        ];
        assert_eq!(sign(URL, &repeated), "IK+Dwps556ElfBT0I3Rgjkr1wJU=");
    }

    // V6f: same test file, JSON body signed through bodySHA256.
    #[test]
    fn v6f_body_hash_vector() {
        let body = br#"{"property": "value", "boolean": true}"#;
        let hash = hex::encode(Algorithm::Sha256.digest(&[body]));
        assert_eq!(
            hash,
            "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"
        );
        let url = format!("{URL}&bodySHA256={hash}");
        assert_eq!(body_hash_param(&url).unwrap(), hash);
        assert_eq!(sign(&url, &[]), "a9nBmqA0ju/hNViExpshrM61xv4=");
    }

    #[test]
    fn default_ports_are_added_and_removed() {
        assert_eq!(
            url_variants("https://a.com/x?y=1"),
            vec!["https://a.com/x?y=1", "https://a.com:443/x?y=1"]
        );
        assert_eq!(
            url_variants("http://a.com:80/x"),
            vec!["http://a.com:80/x", "http://a.com/x"]
        );
        assert_eq!(url_variants("http://a.com:1234/x").len(), 1);
    }
}
