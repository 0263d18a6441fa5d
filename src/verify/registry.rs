//! The registry of provider definitions: the files shipped in `providers/`
//! (compiled in) plus any directory named in the config.

use super::provider::Provider;
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

    #[test]
    fn a_directory_adds_and_replaces_providers() {
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
