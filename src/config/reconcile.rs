//! `[sources.<name>.reconcile]`: asking the provider's API for the events
//! it has, and recovering the ones the ledger lacks (docs/operations.md,
//! "Reconciliation"). The raw table as written (every field with its doc and
//! default) and its validation. Off unless the table is present.

use crate::primitives::duration::Dur;
use crate::primitives::secret::Secret;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawReconcile {
    /// API credential (secret: `env:`, `file:` or literal). Stripe: a
    /// restricted key with read access to events. GitHub: a token that may
    /// read and redeliver the hook's deliveries. PayPal: `client_id:secret`
    /// of the REST app (exchanged for an OAuth token).
    pub api_key: String,
    /// How often a replica looks. Default 10m.
    #[serde(default = "default_interval")]
    pub interval: Dur,
    /// The window re-checked on each run, back from now. Default 72h
    /// (Stripe keeps 30 days of events, GitHub 3 days of deliveries).
    #[serde(default = "default_lookback")]
    pub lookback: Dur,
    /// API base URL. Default: the provider's public API
    /// (`https://api.stripe.com`, `https://api.github.com`,
    /// `https://api-m.paypal.com`).
    pub api_base: Option<String>,
    /// GitHub only: the hook whose deliveries are listed, as its API path
    /// below `api_base`: `repos/<owner>/<repo>/hooks/<id>` or
    /// `orgs/<org>/hooks/<id>` (App hooks are not supported: their API
    /// needs a JWT signed with the App's private key).
    pub hook: Option<String>,
}

fn default_interval() -> Dur {
    Dur(Duration::from_secs(600))
}
fn default_lookback() -> Dur {
    Dur(Duration::from_secs(72 * 3600))
}

/// Which provider API a source reconciles against (from its provider name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKind {
    Stripe,
    GitHub,
    PayPal,
}

impl ApiKind {
    pub fn of(provider: &str) -> Option<Self> {
        match provider {
            "stripe" => Some(Self::Stripe),
            "github" => Some(Self::GitHub),
            "paypal" => Some(Self::PayPal),
            _ => None,
        }
    }

    fn default_base(self) -> &'static str {
        match self {
            Self::Stripe => "https://api.stripe.com",
            Self::GitHub => "https://api.github.com",
            Self::PayPal => "https://api-m.paypal.com",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::GitHub => "github",
            Self::PayPal => "paypal",
        }
    }
}

/// One validated `[sources.<name>.reconcile]`.
#[derive(Debug, Clone)]
pub struct Reconcile {
    pub source: String,
    pub kind: ApiKind,
    pub api_key: Secret,
    pub interval: Duration,
    pub lookback: Duration,
    /// Without a trailing `/`.
    pub api_base: String,
    /// GitHub: the hook's API path, without leading or trailing `/`.
    pub hook: Option<String>,
}

/// Validates one source's table; `problem(key, message)` reports under
/// `sources.<name>.reconcile.<key>`.
pub(super) fn validate(
    source: &str,
    provider: &str,
    raw: RawReconcile,
    secret: &mut dyn FnMut(&str, &str) -> Option<Secret>,
    problem: &mut dyn FnMut(&str, String),
) -> Option<Reconcile> {
    let key = format!("sources.{source}.reconcile");
    let Some(kind) = ApiKind::of(provider) else {
        problem(
            &key,
            format!(
                "reconciliation supports the stripe, github and paypal providers, not `{provider}`"
            ),
        );
        return None;
    };
    let api_key = secret(&format!("{key}.api_key"), &raw.api_key);
    if raw.interval.0 < Duration::from_secs(1) {
        problem(&format!("{key}.interval"), "must be at least 1s".into());
    }
    if raw.lookback.0.is_zero() {
        problem(&format!("{key}.lookback"), "must be greater than 0".into());
    }
    let api_base = raw
        .api_base
        .unwrap_or_else(|| kind.default_base().to_owned());
    if !(api_base.starts_with("http://") || api_base.starts_with("https://")) {
        problem(
            &format!("{key}.api_base"),
            "must be an http:// or https:// URL".into(),
        );
    }
    let hook = raw.hook.map(|h| h.trim_matches('/').to_owned());
    match (kind, &hook) {
        (ApiKind::GitHub, None) => problem(
            &format!("{key}.hook"),
            "required for github: `repos/<owner>/<repo>/hooks/<id>` or `orgs/<org>/hooks/<id>`"
                .into(),
        ),
        (ApiKind::GitHub, Some(h)) if !valid_hook(h) => problem(
            &format!("{key}.hook"),
            format!("`{h}` is not `repos/<owner>/<repo>/hooks/<id>` or `orgs/<org>/hooks/<id>`"),
        ),
        // An App hook's deliveries need a JWT signed with the App's private
        // key, which hookgate does not hold.
        (ApiKind::GitHub, Some(h)) if h == "app/hook" => problem(
            &format!("{key}.hook"),
            "GitHub App hooks need a JWT signed with the App's private key, which \
             reconciliation does not support yet: use a repository or organisation hook"
                .into(),
        ),
        (ApiKind::Stripe | ApiKind::PayPal, Some(_)) => problem(
            &format!("{key}.hook"),
            "only github sources name a hook".into(),
        ),
        _ => {}
    }
    if kind == ApiKind::PayPal
        && let Some(k) = &api_key
        && !k.expose().contains(':')
    {
        problem(
            &format!("{key}.api_key"),
            "paypal needs `client_id:secret` of the REST app".into(),
        );
    }
    Some(Reconcile {
        source: source.to_owned(),
        kind,
        api_key: api_key?,
        interval: raw.interval.0,
        lookback: raw.lookback.0,
        api_base: api_base.trim_end_matches('/').to_owned(),
        hook,
    })
}

fn valid_hook(h: &str) -> bool {
    let parts: Vec<&str> = h.split('/').collect();
    let segment = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    let id = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        ["app", "hook"] => true,
        ["repos", owner, repo, "hooks", n] => segment(owner) && segment(repo) && id(n),
        ["orgs", org, "hooks", n] => segment(org) && id(n),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn load(extra: &str) -> Result<Config, String> {
        let text = format!(
            "[sources.s]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n\
             [sources.g]\nprovider = \"github\"\nsecrets = [\"x\"]\n\
             [sources.v]\nprovider = \"standard-webhooks\"\nsecrets = [\"whsec_aGVsbG8=\"]\n{extra}"
        );
        Config::from_toml_str(&text, Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_reconcile_table_is_validated_per_provider_and_its_key_never_shown() {
        let c = load("[sources.s.reconcile]\napi_key = \"rk_live_secret_123\"\n").unwrap();
        let r = &c.reconcile["s"];
        assert_eq!(r.kind, ApiKind::Stripe);
        assert_eq!(r.api_base, "https://api.stripe.com");
        assert_eq!(r.interval, Duration::from_secs(600));
        assert_eq!(r.lookback, Duration::from_secs(72 * 3600));
        assert!(!format!("{c:?}").contains("rk_live_secret_123"));

        let e = load("[sources.v.reconcile]\napi_key = \"k\"\n").unwrap_err();
        assert!(
            e.contains("`sources.v.reconcile`") && e.contains("stripe, github and paypal"),
            "{e}"
        );
        let e = load("[sources.g.reconcile]\napi_key = \"k\"\n").unwrap_err();
        assert!(e.contains("sources.g.reconcile.hook"), "{e}");
        let e = load("[sources.g.reconcile]\napi_key = \"k\"\nhook = \"app/hook\"\n").unwrap_err();
        assert!(e.contains("JWT"), "{e}");
        let e = load(
            "[sources.s.reconcile]\napi_key = \"k\"\ninterval = \"0s\"\napi_base = \"ftp://x\"\n",
        )
        .unwrap_err();
        assert!(
            e.contains("reconcile.interval") && e.contains("reconcile.api_base"),
            "{e}"
        );
        let e =
            load("[sources.s.reconcile]\napi_key = \"env:HOOKGATE_TEST_UNSET_RECONCILE_KEY\"\n")
                .unwrap_err();
        assert!(e.contains("sources.s.reconcile.api_key"), "{e}");
    }

    #[test]
    fn github_hook_paths_are_the_three_documented_forms() {
        assert!(valid_hook("repos/octo/hello-world/hooks/12"));
        assert!(valid_hook("orgs/octo/hooks/1"));
        assert!(valid_hook("app/hook"));
        assert!(!valid_hook("repos/octo/hooks/1"));
        assert!(!valid_hook("repos/octo/x/hooks/1/../../2"));
        assert!(!valid_hook("https://evil/x"));
    }
}
