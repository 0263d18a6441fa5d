//! `[sources.<name>.reconcile]`: asking the provider's API for the events
//! it has, and recovering the ones the ledger lacks (docs/operations.md,
//! "Reconciliation"). The raw table as written (every field with its doc and
//! default) and its validation. Off unless the table is present.

use crate::primitives::duration::Dur;
use crate::primitives::secret::Secret;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use serde::Deserialize;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawReconcile {
    /// API credential (secret: `env:`, `file:` or literal). Stripe: a
    /// restricted key with read access to events. GitHub: a token that may
    /// read and redeliver the hook's deliveries; for an App hook, the App's
    /// private key (PEM, PKCS#1 as GitHub hands it out, or PKCS#8) that
    /// signs the JWT. PayPal: `client_id:secret` of the REST app (exchanged
    /// for an OAuth token).
    pub api_key: String,
    /// How often a replica looks. Default 10m.
    #[serde(default = "default_interval")]
    pub interval: Dur,
    /// The window re-checked on each run, back from now. Default 72h
    /// (Stripe keeps 30 days of events, GitHub 3 days of deliveries).
    #[serde(default = "default_lookback")]
    pub lookback: Dur,
    /// Events younger than this are left to the provider's own delivery
    /// (a later run recovers them if they never arrive). Default 10m for
    /// Stripe and PayPal, which list an event before they deliver it and
    /// retry a failed delivery for days; 0 for GitHub, whose deliveries
    /// list shows only attempts already made and which never retries one.
    pub grace: Option<Dur>,
    /// API base URL. Default: the provider's public API
    /// (`https://api.stripe.com`, `https://api.github.com`,
    /// `https://api-m.paypal.com`).
    pub api_base: Option<String>,
    /// GitHub only: the hook whose deliveries are listed, as its API path
    /// below `api_base`: `repos/<owner>/<repo>/hooks/<id>`,
    /// `orgs/<org>/hooks/<id>` or `app/hook` (the GitHub App's own hook).
    pub hook: Option<String>,
    /// GitHub App hooks only (`hook = "app/hook"`), required there: the
    /// App's client id (GitHub's recommendation) or its numeric app id, the
    /// JWT's `iss`.
    pub app_id: Option<String>,
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

    /// The default `grace`: how long the provider itself may still be
    /// delivering an event it already lists.
    fn default_grace(self) -> Duration {
        match self {
            // Stripe lists an event when it is created, before the first
            // delivery attempt, and retries failed ones for 3 days
            // (https://docs.stripe.com/webhooks#retries); PayPal retries
            // for 3 days and does not resend a notification still pending
            // (https://developer.paypal.com/docs/api/webhooks/v1/#webhooks-events_resend).
            Self::Stripe | Self::PayPal => Duration::from_secs(600),
            // GitHub lists a delivery once attempted and never redelivers a
            // failed one by itself
            // (https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries):
            // waiting would only delay the recovery.
            Self::GitHub => Duration::ZERO,
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
    /// Events created (Stripe, PayPal) or delivered (GitHub) less than
    /// this long before a run starts are left to the provider.
    pub grace: Duration,
    /// Without a trailing `/`.
    pub api_base: String,
    /// GitHub: the hook's API path, without leading or trailing `/`.
    pub hook: Option<String>,
    /// GitHub App hooks: the App whose JWT authenticates the calls (then
    /// `api_key` holds the private key's PEM and is not sent anywhere).
    pub app: Option<GitHubApp>,
}

/// A GitHub App, as its JWT needs it: the issuer and the RS256 key.
#[derive(Clone)]
pub struct GitHubApp {
    /// The App's client id or app id (the JWT's `iss`).
    pub id: String,
    /// The App's private key, parsed at load, as an RS256 signer.
    pub key: Arc<rsa::pkcs1v15::SigningKey<sha2::Sha256>>,
}

/// The key's own `Debug` prints its private numbers.
impl fmt::Debug for GitHubApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubApp")
            .field("id", &self.id)
            .field("key", &"[redacted]")
            .finish()
    }
}

/// An RSA private key in PEM: PKCS#1 (`BEGIN RSA PRIVATE KEY`, what GitHub
/// hands out) or PKCS#8 (`BEGIN PRIVATE KEY`). `None` for anything else; the
/// parser's error is dropped, so no part of the text reaches a message.
fn rsa_private_key(pem: &str) -> Option<rsa::PrivateKey> {
    rsa::PrivateKey::from_pkcs1_pem(pem)
        .or_else(|_| rsa::PrivateKey::from_pkcs8_pem(pem))
        .ok()
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
    let grace = raw.grace.map_or(kind.default_grace(), |g| g.0);
    // An event leaves the grace at `created + grace` and the window at
    // `created + lookback`; some run must start in between.
    if grace + raw.interval.0 > raw.lookback.0 {
        problem(
            &format!("{key}.grace"),
            format!(
                "grace ({}) plus interval ({}) exceeds lookback ({}): an event still too young \
                 for one run would be out of the window at the next",
                humantime::format_duration(grace),
                humantime::format_duration(raw.interval.0),
                humantime::format_duration(raw.lookback.0),
            ),
        );
    }
    let api_base = raw
        .api_base
        .unwrap_or_else(|| kind.default_base().to_owned());
    if !(api_base.starts_with("http://") || api_base.starts_with("https://")) {
        problem(
            &format!("{key}.api_base"),
            "must be an http:// or https:// URL".into(),
        );
    } else if api_base.starts_with("http://") && !is_loopback_url(&api_base) {
        problem(
            &format!("{key}.api_base"),
            "http:// is only accepted for a loopback host: the API key would cross the \
             network in clear; use https://"
                .into(),
        );
    }
    let hook = raw.hook.map(|h| h.trim_matches('/').to_owned());
    match (kind, &hook) {
        (ApiKind::GitHub, None) => problem(
            &format!("{key}.hook"),
            "required for github: `repos/<owner>/<repo>/hooks/<id>`, `orgs/<org>/hooks/<id>` \
             or `app/hook`"
                .into(),
        ),
        (ApiKind::GitHub, Some(h)) if !valid_hook(h) => problem(
            &format!("{key}.hook"),
            format!(
                "`{h}` is not `repos/<owner>/<repo>/hooks/<id>`, `orgs/<org>/hooks/<id>` \
                 or `app/hook`"
            ),
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
    let app = if kind == ApiKind::GitHub && hook.as_deref() == Some("app/hook") {
        github_app(&key, raw.app_id, api_key.as_ref(), problem)
    } else {
        if raw.app_id.is_some() {
            problem(
                &format!("{key}.app_id"),
                "only a GitHub App hook (`hook = \"app/hook\"`) takes an app_id".into(),
            );
        }
        None
    };
    Some(Reconcile {
        source: source.to_owned(),
        kind,
        api_key: api_key?,
        interval: raw.interval.0,
        lookback: raw.lookback.0,
        grace,
        api_base: api_base.trim_end_matches('/').to_owned(),
        hook,
        app,
    })
}

/// An App hook's `app_id` and private key (`api_key`, already resolved when
/// `Some`). Messages name the key, never its value.
fn github_app(
    key: &str,
    app_id: Option<String>,
    api_key: Option<&Secret>,
    problem: &mut dyn FnMut(&str, String),
) -> Option<GitHubApp> {
    let id = match app_id.map(|a| a.trim().to_owned()) {
        None => {
            problem(
                &format!("{key}.app_id"),
                "required for `hook = \"app/hook\"`: the GitHub App's client id (recommended) \
                 or app id, from the App's settings page"
                    .into(),
            );
            None
        }
        Some(id)
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.') =>
        {
            problem(
                &format!("{key}.app_id"),
                "must be the App's client id (`Iv…`) or numeric app id".into(),
            );
            None
        }
        Some(id) => Some(id),
    };
    let pem = api_key?;
    let Some(private) = rsa_private_key(pem.expose()) else {
        problem(
            &format!("{key}.api_key"),
            "for a GitHub App hook this is the App's private key, and it does not parse as \
             an RSA private key in PEM (`-----BEGIN RSA PRIVATE KEY-----` or \
             `-----BEGIN PRIVATE KEY-----`)"
                .into(),
        );
        return None;
    };
    Some(GitHubApp {
        id: id?,
        key: Arc::new(rsa::pkcs1v15::SigningKey::new(private)),
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

/// Whether `url`'s host is `localhost` or a loopback address.
fn is_loopback_url(url: &str) -> bool {
    let shown = crate::primitives::url::show(url);
    let after = shown.split_once("://").map_or("", |(_, r)| r);
    let host = after.split('/').next().unwrap_or_default();
    // `[::1]:8080`, `127.0.0.1:8080`, `localhost`.
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use rsa::traits::PrivateKeyParts;
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
        assert_eq!(r.grace, Duration::from_secs(600));
        assert!(!format!("{c:?}").contains("rk_live_secret_123"));

        let e = load("[sources.v.reconcile]\napi_key = \"k\"\n").unwrap_err();
        assert!(
            e.contains("`sources.v.reconcile`") && e.contains("stripe, github and paypal"),
            "{e}"
        );
        let e = load("[sources.g.reconcile]\napi_key = \"k\"\n").unwrap_err();
        assert!(e.contains("sources.g.reconcile.hook"), "{e}");
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
    fn grace_defaults_per_provider_and_must_leave_a_run_inside_the_window() {
        let c = load(
            "[sources.g.reconcile]\napi_key = \"k\"\nhook = \"orgs/o/hooks/1\"\n\
             [sources.s.reconcile]\napi_key = \"k\"\ngrace = \"30m\"\n",
        )
        .unwrap();
        assert_eq!(c.reconcile["g"].grace, Duration::ZERO);
        assert_eq!(c.reconcile["s"].grace, Duration::from_secs(1800));
        // 20m + 10m > 25m: an event 19 minutes old at one run is 29
        // minutes old, out of the window, at the next.
        let e =
            load("[sources.s.reconcile]\napi_key = \"k\"\ngrace = \"20m\"\nlookback = \"25m\"\n")
                .unwrap_err();
        assert!(
            e.contains("sources.s.reconcile.grace") && e.contains("exceeds lookback"),
            "{e}"
        );
        assert!(
            load("[sources.s.reconcile]\napi_key = \"k\"\ngrace = \"15m\"\nlookback = \"25m\"\n")
                .is_ok()
        );
    }

    const APP_KEY: &str = "file:tests/fixtures/github-app/app-key.pem";
    const APP_PEM: &str = include_str!("../../tests/fixtures/github-app/app-key.pem");

    /// A base64 line of the test key's body: text that must never show.
    fn key_line() -> &'static str {
        APP_PEM.lines().find(|l| l.len() == 64).unwrap()
    }

    fn app_table(api_key: &str, app_id: Option<&str>) -> String {
        let id = app_id
            .map(|i| format!("app_id = \"{i}\"\n"))
            .unwrap_or_default();
        format!("[sources.g.reconcile]\napi_key = '''{api_key}'''\nhook = \"app/hook\"\n{id}")
    }

    #[test]
    fn an_app_hook_takes_the_apps_private_key_and_id() {
        // PKCS#1, as GitHub hands the key out, from a file.
        let c = load(&app_table(APP_KEY, Some("Iv23liTestClient0"))).unwrap();
        let r = &c.reconcile["g"];
        let app = r.app.as_ref().expect("an App hook has its App");
        assert_eq!(app.id, "Iv23liTestClient0");
        assert_eq!(r.hook.as_deref(), Some("app/hook"));
        // Debug shows neither the PEM nor the key's private numbers.
        let shown = format!("{c:?}");
        assert!(shown.contains("key: \"[redacted]\""), "{shown}");
        let private = rsa::PrivateKey::from_pkcs1_pem(APP_PEM).unwrap();
        let prime = private.primes()[0].to_string();
        assert!(!shown.contains(key_line()) && !shown.contains(&prime[..30]));

        // PKCS#8 too, here as a literal; a numeric app id.
        use rsa::pkcs8::EncodePrivateKey;
        let pkcs8 = rsa::PrivateKey::from_pkcs1_pem(APP_PEM)
            .unwrap()
            .to_pkcs8_pem(rsa::pkcs8::LineEnding::LF)
            .unwrap();
        assert!(pkcs8.starts_with("-----BEGIN PRIVATE KEY-----"));
        let c = load(&app_table(&pkcs8, Some("1234567"))).unwrap();
        assert_eq!(c.reconcile["g"].app.as_ref().unwrap().id, "1234567");
    }

    #[test]
    fn an_app_hook_without_a_valid_key_or_id_is_refused_and_the_key_never_shown() {
        let e = load(&app_table(APP_KEY, None)).unwrap_err();
        assert!(
            e.contains("sources.g.reconcile.app_id") && e.contains("client id"),
            "{e}"
        );
        let e = load(&app_table(APP_KEY, Some("12 34"))).unwrap_err();
        assert!(e.contains("sources.g.reconcile.app_id"), "{e}");

        // A token is no RSA private key, nor is a damaged PEM.
        let token = "ghp_notAKey_never_print_me_01";
        let e = load(&app_table(token, Some("1"))).unwrap_err();
        assert!(
            e.contains("sources.g.reconcile.api_key") && e.contains("RSA private key"),
            "{e}"
        );
        assert!(!e.contains(token), "{e}");
        let line = key_line();
        let damaged = APP_PEM.replacen(line, &line.replace(['A', 'g'], "Q"), 1);
        assert_ne!(damaged, APP_PEM);
        let e = load(&app_table(&damaged, Some("1"))).unwrap_err();
        assert!(e.contains("RSA private key"), "{e}");
        for l in damaged.lines().filter(|l| l.len() == 64) {
            assert!(!e.contains(l), "{e}");
        }

        // app_id belongs to App hooks only.
        let e = load(
            "[sources.g.reconcile]\napi_key = \"k\"\nhook = \"orgs/o/hooks/1\"\napp_id = \"1\"\n",
        )
        .unwrap_err();
        assert!(e.contains("sources.g.reconcile.app_id"), "{e}");
        let e = load("[sources.s.reconcile]\napi_key = \"k\"\napp_id = \"1\"\n").unwrap_err();
        assert!(e.contains("sources.s.reconcile.app_id"), "{e}");
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
