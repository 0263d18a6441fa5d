//! Secret values: `env:NAME`, `file:PATH` or a literal, resolved once at load.
//!
//! Rule: a [`Secret`] never prints its value. `Debug` and `Display` both show
//! `[redacted]`; the only way to the bytes is [`Secret::expose`], which is
//! greppable.

use std::fmt;
use std::path::Path;

/// A resolved secret value. Cloning is cheap enough (secrets are short).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// Why a secret reference could not be resolved. Never contains the value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("environment variable `{0}` is not set")]
    MissingEnv(String),
    #[error("environment variable `{0}` is empty")]
    EmptyEnv(String),
    #[error("cannot read secret file `{path}`: {reason}")]
    File { path: String, reason: String },
    #[error("secret is empty")]
    Empty,
}

impl Secret {
    /// Wraps a literal value (tests, `hookgate sign`).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Resolves `env:NAME`, `file:PATH` (relative to `base_dir`) or a literal.
    pub fn resolve(reference: &str, base_dir: &Path) -> Result<Self, SecretError> {
        let value = Self::lookup(reference, base_dir)?;
        match value {
            Some(v) => Ok(Self(v)),
            None => Err(SecretError::MissingEnv(
                reference.trim_start_matches("env:").to_owned(),
            )),
        }
    }

    /// Like [`Secret::resolve`], but an unset `env:` variable yields `None`
    /// (used for optional settings such as `database_url = "env:DATABASE_URL"`).
    pub fn resolve_optional(reference: &str, base_dir: &Path) -> Result<Option<Self>, SecretError> {
        Ok(Self::lookup(reference, base_dir)?.map(Self))
    }

    fn lookup(reference: &str, base_dir: &Path) -> Result<Option<String>, SecretError> {
        if let Some(name) = reference.strip_prefix("env:") {
            return match std::env::var(name) {
                Ok(v) if v.is_empty() => Err(SecretError::EmptyEnv(name.to_owned())),
                Ok(v) => Ok(Some(v)),
                Err(_) => Ok(None),
            };
        }
        if let Some(path) = reference.strip_prefix("file:") {
            let full = base_dir.join(path);
            let text = std::fs::read_to_string(&full).map_err(|e| SecretError::File {
                path: path.to_owned(),
                reason: e.kind().to_string(),
            })?;
            // Files written by editors and `echo` end in a newline that is
            // never part of the secret.
            let value = text.trim_end_matches(['\n', '\r']).to_owned();
            if value.is_empty() {
                return Err(SecretError::Empty);
            }
            return Ok(Some(value));
        }
        if reference.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Some(reference.to_owned()))
    }

    /// The secret's bytes. Call sites of this are the whole attack surface.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let s = Secret::new("whsec_super_secret");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{s}"), "[redacted]");
        assert!(!format!("{:?}", vec![s.clone()]).contains("super"));
    }

    #[test]
    fn literal_file_and_missing_env() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.txt"), "from-file\n").unwrap();
        assert_eq!(
            Secret::resolve("file:s.txt", dir.path()).unwrap().expose(),
            "from-file"
        );
        assert_eq!(Secret::resolve("lit", dir.path()).unwrap().expose(), "lit");
        let missing = "env:HOOKGATE_TEST_SURELY_UNSET_VARIABLE";
        assert_eq!(
            Secret::resolve(missing, dir.path()),
            Err(SecretError::MissingEnv(
                "HOOKGATE_TEST_SURELY_UNSET_VARIABLE".into()
            ))
        );
        assert_eq!(Secret::resolve_optional(missing, dir.path()), Ok(None));
        assert!(matches!(
            Secret::resolve("file:nope.txt", dir.path()),
            Err(SecretError::File { .. })
        ));
    }
}
