//! A source as verification sees it: one provider endpoint
//! (`POST /webhooks/<name>`) with its keys and settings. Config validation
//! builds it; the scheme-specific part of that work is done here, by the
//! scheme that owns the settings, through [`settings_from`].
//!
//! Rule: no secret reaches `Debug` output; problems are reported with the
//! key path they came from, never with a secret value.

use super::provider::{Provider, Split};
use super::schemes::{Scheme, SchemeSettings};
use crate::primitives::crypto::SigningKey;
use crate::primitives::secret::Secret;
use ipnet::IpNet;
use std::sync::Arc;
use std::time::Duration;

/// One provider endpoint: `POST /webhooks/<name>`.
#[derive(Debug)]
pub struct Source {
    pub name: String,
    pub provider: Arc<Provider>,
    /// Decoded verification keys; several = rotation.
    pub keys: Vec<SigningKey>,
    pub tolerance: Duration,
    pub dedup_window: Duration,
    /// `dedup_by_body`: a body already seen under another id within the
    /// window is a duplicate (`store::body_hashes`).
    pub dedup_by_body: bool,
    /// `silent_after`: how long without an accepted event before the source
    /// counts as silent (alerts, `/metrics`); `None`: never.
    pub silent_after: Option<Duration>,
    pub targets: Vec<String>,
    /// Which of `targets` want an event (each target's rule, in the same
    /// order; built by `target::route`).
    pub routes: Arc<dyn super::router::Router>,
    pub public_url: Option<String>,
    /// Client address allowlist; empty = everyone.
    pub allow_ips: Vec<IpNet>,
    /// The scheme's own settings: PayPal's webhook id and certificate
    /// handling, Plaid's key fetching or pinned keys, Braintree's public key.
    pub settings: Option<SchemeSettings>,
    /// Header names never stored for this source: credentials and proxy
    /// headers, unless one of its targets forwards them
    /// (`forward_credentials`, `forward_proxy_headers`); see
    /// `forwarded_headers::withheld`.
    pub withheld: Vec<String>,
    /// What a handshake's verify token must be (Meta's `hub.verify_token`).
    pub verify_token: Option<Secret>,
    /// Where a batch body's items are when they are admitted one by one
    /// (`split`); `None`: the request is one event.
    pub split: Option<Split>,
}

impl Source {
    /// This source with `learned` keys after its configured ones (secrets
    /// a handshake handed over; `verify::learned`). Only `hmac` sources
    /// learn keys, and they have no scheme settings to copy.
    pub fn with_learned(&self, learned: Vec<SigningKey>) -> Self {
        debug_assert!(
            self.settings.is_none(),
            "learning sources have no scheme settings"
        );
        let mut keys = self.keys.clone();
        keys.extend(learned);
        Self {
            name: self.name.clone(),
            provider: self.provider.clone(),
            keys,
            tolerance: self.tolerance,
            dedup_window: self.dedup_window,
            dedup_by_body: self.dedup_by_body,
            silent_after: self.silent_after,
            targets: self.targets.clone(),
            routes: self.routes.clone(),
            public_url: self.public_url.clone(),
            allow_ips: self.allow_ips.clone(),
            settings: None,
            withheld: self.withheld.clone(),
            verify_token: self.verify_token.clone(),
            split: self.split.clone(),
        }
    }
}

/// What building a scheme's settings needs from config validation:
/// secret resolution and somewhere to report findings by key path.
pub trait Resolve {
    /// Resolves an `env:` / `file:` / literal reference; a failure is
    /// reported under `key` and gives `None`.
    fn secret(&mut self, key: &str, reference: &str) -> Option<Secret>;
    /// A problem that makes the config invalid.
    fn problem(&mut self, key: &str, msg: String);
    /// A finding that does not stop the config from loading.
    fn warning(&mut self, msg: String);
}

/// A scheme's `[sources.<name>.<TABLE>]` table as written in the config.
pub trait SettingsTable {
    /// The scheme that reads this table.
    const SCHEME: Scheme;
    /// The table's name under `[sources.<name>]`.
    const TABLE: &'static str;
    /// The provider family, for "provider `x` is not …".
    const TITLE: &'static str;

    /// Checks the table and builds the settings; problems go to `cx`
    /// under `key` (`sources.<name>.<TABLE>`) or a key below it.
    fn build(&self, key: &str, cx: &mut dyn Resolve) -> Option<SchemeSettings>;

    /// The source uses [`Self::SCHEME`] but has no table.
    fn missing(key: &str, cx: &mut dyn Resolve);
}

/// The settings one table contributes to a source whose key path is
/// `source_key`: built when the provider uses the table's scheme, reported
/// as missing (per the scheme) when it is absent, and refused when the
/// provider uses another scheme.
pub fn settings_from<T: SettingsTable>(
    raw: Option<&T>,
    provider: &Provider,
    source_key: &str,
    cx: &mut dyn Resolve,
) -> Option<SchemeSettings> {
    let key = format!("{source_key}.{}", T::TABLE);
    match (raw, provider.signature.scheme == T::SCHEME) {
        (Some(raw), true) => raw.build(&key, cx),
        (None, true) => {
            T::missing(&key, cx);
            None
        }
        (Some(_), false) => {
            cx.problem(
                &key,
                format!("provider `{}` is not {}", provider.name, T::TITLE),
            );
            None
        }
        (None, false) => None,
    }
}
