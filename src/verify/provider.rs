//! Provider definitions as data: one TOML file per provider in `providers/`,
//! embedded in the binary, plus any directory named in the config.
//!
//! A definition is parsed and checked once, at config load, into a
//! [`Provider`] whose templates and locators are ready to evaluate; nothing
//! is re-parsed per request.

use super::scheme::{Algorithm, Encoding, SecretEncoding, SigningKey};
use crate::config::duration::Dur;
use crate::config::secret::Secret;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The providers shipped in `providers/`, compiled in.
const BUILTIN: &[(&str, &str)] = &[
    ("stripe", include_str!("../../providers/stripe.toml")),
    (
        "standard-webhooks",
        include_str!("../../providers/standard-webhooks.toml"),
    ),
    ("github", include_str!("../../providers/github.toml")),
    ("shopify", include_str!("../../providers/shopify.toml")),
];

// ---------- the file format ----------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderFile {
    /// Name used as `provider = "…"` in a source.
    name: String,
    /// Human name for listings.
    title: String,
    /// Where the provider documents its signature.
    #[serde(default)]
    docs: String,
    signature: SignatureSpec,
    timestamp: Option<TimestampSpec>,
    event_id: EventIdSpec,
    #[serde(default)]
    response: ResponseSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureSpec {
    /// Header(s) carrying the signature; the first present is used.
    header: OneOrMany,
    /// How the header value holds signatures.
    #[serde(default)]
    format: HeaderFormat,
    /// `pairs`: item separator (default `,`); `tagged`: list separator (default ` `).
    separator: Option<String>,
    /// `pairs`: keys whose values are signatures (`["v1"]`); `tagged`: accepted tags.
    #[serde(default)]
    keys: Vec<String>,
    /// `value`: a prefix the signature must carry (`sha256=`).
    prefix: Option<String>,
    algorithm: Algorithm,
    encoding: Encoding,
    #[serde(default)]
    secret_encoding: SecretEncoding,
    /// Prefixes removed from a secret before decoding (`["whsec_"]`).
    #[serde(default)]
    secret_prefixes: Vec<String>,
    /// What is signed, e.g. `"{timestamp}.{body}"`. Placeholders: `{body}`,
    /// `{timestamp}`, `{url}` and any locator (`{header:webhook-id}`).
    signed_content: String,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// How a signature header value is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HeaderFormat {
    /// The whole value is one signature, after an optional prefix (GitHub, Shopify).
    #[default]
    Value,
    /// `k=v` items, e.g. `t=…,v1=…,v1=…` (Stripe).
    Pairs,
    /// `tag,sig` items, e.g. `v1,abc= v1,def=` (Standard Webhooks).
    Tagged,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TimestampSpec {
    /// Where the signed timestamp is (`signature:t`, `header:webhook-timestamp`).
    from: String,
    /// Default window; a source may override it with `tolerance`.
    #[serde(default = "five_minutes")]
    tolerance: Dur,
    /// Reject timestamps in the future beyond the window too (default true).
    #[serde(default = "yes")]
    reject_future: bool,
}

fn five_minutes() -> Dur {
    Dur(Duration::from_secs(300))
}
fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventIdSpec {
    /// Locator(s) of the provider's event id; alternatives separated by `|`.
    from: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponseSpec {
    #[serde(default = "ok")]
    status: u16,
    #[serde(default)]
    body: String,
    content_type: Option<String>,
}

fn ok() -> u16 {
    200
}

impl Default for ResponseSpec {
    fn default() -> Self {
        Self {
            status: 200,
            body: String::new(),
            content_type: None,
        }
    }
}

// ---------- the checked model ----------

/// Where a value is found in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    /// A request header (lowercase name).
    Header(String),
    /// A JSON pointer into the body (`/id`, `/event/id`).
    Json(String),
    /// A field of an `application/x-www-form-urlencoded` body.
    Form(String),
    /// A key of the parsed signature header (`pairs` format), e.g. Stripe's `t`.
    Signature(String),
}

/// Alternatives, tried in order; the first present wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup(pub Vec<Locator>);

impl Lookup {
    fn parse(text: &str) -> Result<Self, String> {
        let alts = text
            .split('|')
            .map(|s| Locator::parse(s.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self(alts))
    }

    /// The first header this lookup names, if any (for `hookgate sign`).
    pub fn header(&self) -> Option<&str> {
        self.0.iter().find_map(|l| match l {
            Locator::Header(h) => Some(h.as_str()),
            _ => None,
        })
    }
}

impl Locator {
    fn parse(text: &str) -> Result<Self, String> {
        let (kind, arg) = text
            .split_once(':')
            .ok_or_else(|| format!("locator `{text}` must look like `header:NAME`"))?;
        if arg.is_empty() {
            return Err(format!("locator `{text}` has no name"));
        }
        match kind {
            "header" => Ok(Self::Header(arg.to_ascii_lowercase())),
            "json" if arg.starts_with('/') => Ok(Self::Json(arg.to_owned())),
            "json" => Err(format!("JSON pointer `{arg}` must start with `/`")),
            "form" => Ok(Self::Form(arg.to_owned())),
            "signature" => Ok(Self::Signature(arg.to_owned())),
            other => Err(format!(
                "unknown locator kind `{other}` (use header, json, form or signature)"
            )),
        }
    }
}

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Url,
    Value(Lookup),
}

/// Parses `"{timestamp}.{body}"` into segments.
fn parse_template(text: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            out.push(Segment::Literal(rest.as_bytes()[..open].to_vec()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("unclosed `{{` in `{text}`"))?
            + open;
        let name = &rest[open + 1..close];
        out.push(match name {
            "body" => Segment::Body,
            "timestamp" => Segment::Timestamp,
            "url" => Segment::Url,
            other => Segment::Value(Lookup::parse(other)?),
        });
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Segment::Literal(rest.as_bytes().to_vec()));
    }
    Ok(out)
}

/// A checked provider definition.
#[derive(Debug)]
pub struct Provider {
    pub name: String,
    pub title: String,
    pub docs: String,
    pub signature: Signature,
    pub timestamp: Option<Timestamp>,
    pub event_id: Lookup,
    pub response: Response,
}

#[derive(Debug)]
pub struct Signature {
    /// Lowercase header names, first present wins.
    pub headers: Vec<String>,
    pub format: HeaderFormat,
    pub separator: String,
    pub keys: Vec<String>,
    pub prefix: String,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
    pub secret_encoding: SecretEncoding,
    pub secret_prefixes: Vec<String>,
    pub content: Vec<Segment>,
}

#[derive(Debug)]
pub struct Timestamp {
    pub from: Lookup,
    pub tolerance: Duration,
    pub reject_future: bool,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: String,
    pub content_type: Option<String>,
}

impl Provider {
    /// Parses and checks one provider file.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let f: ProviderFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let s = f.signature;
        let headers: Vec<String> = match s.header {
            OneOrMany::One(h) => vec![h],
            OneOrMany::Many(v) => v,
        }
        .into_iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
        if headers.is_empty() {
            return Err("signature.header names no header".into());
        }
        let separator = s.separator.unwrap_or_else(|| match s.format {
            HeaderFormat::Tagged => " ".into(),
            _ => ",".into(),
        });
        if s.format != HeaderFormat::Value && s.keys.is_empty() {
            return Err("signature.keys is required for `pairs` and `tagged` formats".into());
        }
        let content = parse_template(&s.signed_content)
            .map_err(|e| format!("signature.signed_content: {e}"))?;
        let timestamp = f
            .timestamp
            .map(|t| -> Result<Timestamp, String> {
                Ok(Timestamp {
                    from: Lookup::parse(&t.from).map_err(|e| format!("timestamp.from: {e}"))?,
                    tolerance: t.tolerance.0,
                    reject_future: t.reject_future,
                })
            })
            .transpose()?;
        if content.contains(&Segment::Timestamp) && timestamp.is_none() {
            return Err("signed_content uses {timestamp} but [timestamp] is missing".into());
        }
        let event_id =
            Lookup::parse(&f.event_id.from).map_err(|e| format!("event_id.from: {e}"))?;
        if !(100..=599).contains(&f.response.status) {
            return Err("response.status must be an HTTP status".into());
        }
        Ok(Self {
            name: f.name,
            title: f.title,
            docs: f.docs,
            signature: Signature {
                headers,
                format: s.format,
                separator,
                keys: s.keys,
                prefix: s.prefix.unwrap_or_default(),
                algorithm: s.algorithm,
                encoding: s.encoding,
                secret_encoding: s.secret_encoding,
                secret_prefixes: s.secret_prefixes,
                content,
            },
            timestamp,
            event_id,
            response: Response {
                status: f.response.status,
                body: f.response.body,
                content_type: f.response.content_type,
            },
        })
    }

    /// Key bytes for one configured secret, per this provider's encoding.
    pub fn signing_key(&self, secret: &Secret) -> Result<SigningKey, String> {
        SigningKey::decode(
            secret,
            self.signature.secret_encoding,
            &self.signature.secret_prefixes,
        )
    }

    pub fn needs_secret(&self) -> bool {
        true
    }

    pub fn needs_public_url(&self) -> bool {
        self.signature.content.contains(&Segment::Url)
    }

    pub fn default_tolerance(&self) -> Duration {
        self.timestamp
            .as_ref()
            .map_or(Duration::from_secs(300), |t| t.tolerance)
    }
}

/// All known providers by name.
#[derive(Debug, Clone)]
pub struct Registry(BTreeMap<String, Arc<Provider>>);

/// A provider file that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("provider file `{file}`: {reason}")]
pub struct ProviderError {
    pub file: String,
    pub reason: String,
}

impl Registry {
    /// The providers shipped with hookgate. A broken built-in file is a bug
    /// caught by the unit tests, hence the panic.
    pub fn builtin() -> Self {
        let map = BUILTIN
            .iter()
            .map(|(file, text)| {
                let p = Provider::from_toml(text)
                    .unwrap_or_else(|e| panic!("built-in provider {file}: {e}"));
                assert_eq!(&p.name, file, "provider name must match its file name");
                (p.name.clone(), Arc::new(p))
            })
            .collect();
        Self(map)
    }

    /// Adds every `*.toml` of `dir`; a file may replace a built-in provider.
    pub fn load_dir(&mut self, dir: &Path) -> Result<usize, ProviderError> {
        let err = |file: &Path, reason: String| ProviderError {
            file: file.display().to_string(),
            reason,
        };
        let entries = std::fs::read_dir(dir).map_err(|e| err(dir, e.to_string()))?;
        let mut paths: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        paths.sort();
        for path in &paths {
            let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
            let p = Provider::from_toml(&text).map_err(|e| err(path, e))?;
            self.0.insert(p.name.clone(), Arc::new(p));
        }
        Ok(paths.len())
    }

    pub fn get(&self, name: &str) -> Option<Arc<Provider>> {
        self.0.get(name).cloned()
    }

    pub fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_provider_parses() {
        let r = Registry::builtin();
        assert_eq!(
            r.names(),
            vec!["github", "shopify", "standard-webhooks", "stripe"]
        );
    }

    #[test]
    fn template_parses_into_segments() {
        let t = parse_template("{header:webhook-id|header:svix-id}.{timestamp}.{body}").unwrap();
        assert_eq!(
            t,
            vec![
                Segment::Value(Lookup(vec![
                    Locator::Header("webhook-id".into()),
                    Locator::Header("svix-id".into())
                ])),
                Segment::Literal(b".".to_vec()),
                Segment::Timestamp,
                Segment::Literal(b".".to_vec()),
                Segment::Body,
            ]
        );
        assert!(parse_template("{body").is_err());
        assert!(parse_template("{nope:x}").is_err());
    }

    #[test]
    fn bad_provider_files_are_rejected_with_a_reason() {
        let base = r#"
            name = "x"
            title = "X"
            [signature]
            header = "x-sig"
            algorithm = "hmac-sha256"
            encoding = "hex"
            signed_content = "{body}"
            [event_id]
            from = "json:/id"
        "#;
        assert!(Provider::from_toml(base).is_ok());
        let e = Provider::from_toml(&base.replace("{body}", "{timestamp}.{body}")).unwrap_err();
        assert!(e.contains("[timestamp] is missing"), "{e}");
        let e = Provider::from_toml(&base.replace("hex", "hexx")).unwrap_err();
        assert!(e.contains("unknown variant"), "{e}");
        let e = Provider::from_toml(&base.replace("json:/id", "json:id")).unwrap_err();
        assert!(e.contains("must start with `/`"), "{e}");
    }

    #[test]
    fn a_directory_adds_and_replaces_providers() {
        let dir = tempfile::tempdir().unwrap();
        let text = BUILTIN[2].1.replace("name = \"github\"", "name = \"acme\"");
        std::fs::write(dir.path().join("acme.toml"), text).unwrap();
        let mut r = Registry::builtin();
        assert_eq!(r.load_dir(dir.path()).unwrap(), 1);
        assert!(r.get("acme").is_some());
        std::fs::write(dir.path().join("broken.toml"), "name = 1").unwrap();
        let e = r.load_dir(dir.path()).unwrap_err();
        assert!(e.to_string().contains("broken.toml"), "{e}");
    }
}
