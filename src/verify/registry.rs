//! The registry of provider definitions: the files shipped in `providers/`
//! (compiled in) plus any directory named in the config.
//!
//! An operator's file is data anyone with write access to that directory
//! controls, so it is held to more than a built-in: it may not take a
//! built-in's name (a weakened `stripe` would replace the real one under
//! every source naming it), its `signed_content` must contain `{body}`, and
//! no reply may compute `${mac:…}` over a value the signature does not
//! cover (a signing oracle). Built-ins pass the last check too (tested).

use super::locator::{ReplyPart, Segment};
use super::provider::Provider;
use super::schemes::Cover;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The providers shipped in `providers/`, compiled in: `(file stem, text)`,
/// sorted by name. The list is written by `build.rs` from the directory, so
/// adding a provider is adding its file.
pub(crate) const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/providers.rs"));

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

    /// Adds every `*.toml` of `dir`; a file naming a built-in provider, a
    /// `signed_content` without `{body}` and a `${mac:…}` oracle are refused.
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
        let mut named = std::collections::BTreeSet::new();
        for path in &paths {
            let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
            let p = Provider::from_toml(&text).map_err(|e| err(path, e))?;
            if BUILTIN.iter().any(|(name, _)| *name == p.name) {
                return Err(err(
                    path,
                    format!(
                        "replaces the built-in provider `{}`; give it another name and name \
                         that in `provider`",
                        p.name
                    ),
                ));
            }
            if !p.signature.content.is_empty() && !p.signature.content.contains(&Segment::Body) {
                return Err(err(
                    path,
                    "signature.signed_content must contain `{body}`: without it the body \
                     is not signed and a relay can change it"
                        .into(),
                ));
            }
            if let Some(why) = mac_oracle(&p) {
                return Err(err(path, why));
            }
            if !named.insert(p.name.clone()) {
                return Err(err(path, format!("a second file names `{}`", p.name)));
            }
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

/// Why a reply of `p` would MAC a value an attacker chooses: `${mac:…}` in a
/// control answered without a signature, or over a value the signature
/// does not cover (a header outside it, the query).
pub fn mac_oracle(p: &Provider) -> Option<String> {
    let replies =
        std::iter::once((true, &p.response)).chain(p.controls.iter().map(|c| (c.signed, &c.reply)));
    for (signed, reply) in replies {
        for part in &reply.body {
            let ReplyPart::Mac(lookup) = part else {
                continue;
            };
            let shown = lookup.show();
            if !signed {
                return Some(format!(
                    "`${{mac:{shown}}}` in the reply of an unsigned control: anyone could \
                     have hookgate sign a value of their choice"
                ));
            }
            if super::signedness::cover_of(p, lookup) != Cover::Signed {
                return Some(format!(
                    "`${{mac:{shown}}}` reads a value the signature does not cover: anyone \
                     could have hookgate sign a value of their choice"
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_provider_parses_and_is_listed_once() {
        let r = Registry::builtin();
        let names = r.names();
        assert_eq!(names.len(), BUILTIN.len());
        for p in ["stripe", "paypal", "adyen", "twilio", "yookassa", "hmac"] {
            assert!(names.contains(&p), "{p}");
        }
    }

    #[test]
    fn every_named_provider_cites_its_docs_and_says_where_its_secret_is() {
        use crate::verify::spec::Category;
        for (file, _) in BUILTIN {
            let p = Registry::builtin().get(file).unwrap();
            if p.category == Category::Generic {
                continue;
            }
            assert!(
                p.docs.starts_with("https://"),
                "{file}: docs = {:?}",
                p.docs
            );
            assert!(!p.dashboard.is_empty(), "{file}: no dashboard note");
            assert!(!p.title.is_empty(), "{file}: no title");
        }
    }

    /// Issue #32: a file silently replaced a built-in, `signed_content`
    /// needed no `{body}`, and `${mac:…}` could sign a header's value.
    #[test]
    fn a_directory_may_not_replace_a_builtin_or_weaken_what_is_signed() {
        let load = |name: &str, text: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(format!("{name}.toml")), text).unwrap();
            Registry::builtin().load_dir(dir.path()).map(|_| ())
        };
        let github = BUILTIN.iter().find(|(n, _)| *n == "github").unwrap().1;
        let e = load("github", github).unwrap_err().to_string();
        assert!(e.contains("replaces the built-in provider `github`"), "{e}");
        let acme = &github.replace("name = \"github\"", "name = \"acme\"");
        assert!(load("acme", acme).is_ok());
        let no_body = acme.replace(
            "signed_content = \"{body}\"",
            "signed_content = \"{json:/id}\"",
        );
        let e = load("acme", &no_body).unwrap_err().to_string();
        assert!(e.contains("must contain `{body}`"), "{e}");
        let oracle = format!(
            "{acme}[[control]]\nwhen = \"header:x-ping\"\nreply = '${{mac:header:x-ping}}'\n"
        );
        let e = load("acme", &oracle).unwrap_err().to_string();
        assert!(e.contains("does not cover"), "{e}");
        let unsigned = format!(
            "{acme}[[control]]\nwhen = \"json:/ping\"\nsigned = false\nreply = '${{mac:json:/ping}}'\n"
        );
        let e = load("acme", &unsigned).unwrap_err().to_string();
        assert!(e.contains("unsigned control"), "{e}");
        let body_mac =
            format!("{acme}[[control]]\nwhen = \"json:/ping\"\nreply = '${{mac:json:/ping}}'\n");
        assert!(load("acme", &body_mac).is_ok());
        // Every built-in passes the oracle check but X's CRC answer, which
        // X's protocol defines as exactly that: it MACs `crc_token` with the
        // key that signs bodies. `reply::is_challenge_token` limits what is
        // MACed to tokens, which no JSON body can be.
        let r = Registry::builtin();
        let flagged: Vec<&str> = BUILTIN
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| mac_oracle(&r.get(name).unwrap()).is_some())
            .collect();
        assert_eq!(flagged, ["twitter"]);
    }

    #[test]
    fn a_directory_adds_providers() {
        let dir = tempfile::tempdir().unwrap();
        let github = BUILTIN.iter().find(|(n, _)| *n == "github").unwrap().1;
        let text = github.replace("name = \"github\"", "name = \"acme\"");
        std::fs::write(dir.path().join("acme.toml"), text).unwrap();
        let mut r = Registry::builtin();
        assert_eq!(r.load_dir(dir.path()).unwrap(), 1);
        assert!(r.get("acme").is_some());
        std::fs::write(dir.path().join("broken.toml"), "name = 1").unwrap();
        let e = r.load_dir(dir.path()).unwrap_err();
        assert!(e.to_string().contains("broken.toml"), "{e}");
    }
}
