//! `[sources.*]`: each source's provider, keys, window, targets and
//! settings, and which headers its events keep (see `withhold`).

use super::{Validator, raw, valid_name};
use crate::primitives::crypto::SigningKey;
use crate::target::Target;
use crate::target::route::Routes;
use crate::verify::client_ip::parse_net;
use crate::verify::forwarded_headers::{Keep, withheld};
use crate::verify::provider::{Provider, SourceOverrides, Split};
use crate::verify::registry::Registry;
use crate::verify::source::{Resolve, Source, settings_from};
use crate::verify::spec::SplitSetting;
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Longest timestamp `tolerance` accepted.
const MAX_TOLERANCE: Duration = Duration::from_secs(86_400);

/// Which of each source's stored headers each target does not get. Every
/// (source, target) pair is computed, not only the listed ones: an
/// operator may redeliver an event to any target (`POST …/redeliver`), and
/// a target the source does not list never gets the credentials or proxy
/// headers the source stored for a target that does.
pub(super) fn withhold(
    sources: &BTreeMap<String, Arc<Source>>,
    targets: &mut BTreeMap<String, Target>,
) {
    for source in sources.values() {
        for (name, t) in targets.iter_mut() {
            {
                let keep = if source.targets.contains(name) {
                    Keep {
                        credentials: t.forward_credentials,
                        proxy_headers: t.forward_proxy_headers,
                    }
                } else {
                    Keep::default()
                };
                let w: Vec<String> = withheld(&source.provider, keep)
                    .into_iter()
                    .filter(|h| !source.withheld.contains(h))
                    .collect();
                if !w.is_empty() {
                    t.withheld.insert(source.name.clone(), w);
                }
            }
        }
    }
}

pub(super) fn sources(
    raw: BTreeMap<String, raw::RawSource>,
    providers: &Registry,
    targets: &BTreeMap<String, Target>,
    v: &mut Validator<'_>,
) -> BTreeMap<String, Arc<Source>> {
    let mut sources = BTreeMap::new();
    for (name, s) in raw {
        let key = format!("sources.{name}");
        if let Some(source) = source(name.clone(), s, &key, providers, targets, v) {
            sources.insert(name, Arc::new(source));
        }
    }
    sources
}

/// One source; `None` when its provider could not be resolved (the rest of
/// the source cannot be checked without it).
fn source(
    name: String,
    s: raw::RawSource,
    key: &str,
    providers: &Registry,
    targets: &BTreeMap<String, Target>,
    v: &mut Validator<'_>,
) -> Option<Source> {
    if !valid_name(&name) {
        v.problem(key, "source names use letters, digits, `-` and `_`".into());
    }
    let provider = source_provider(&s, key, providers, v)?;
    if let Some(why) = &provider.incomplete {
        v.problem(&format!("{key}.signature"), why.clone());
    }
    if s.secrets.is_empty() && provider.needs_secret() && !provider.learns() {
        v.problem(
            &format!("{key}.secrets"),
            "at least one secret is required".into(),
        );
    }
    let keys = keys(&s.secrets, &provider, key, v);
    check_targets(&s.targets, targets, key, v);
    let keep = s
        .targets
        .iter()
        .filter_map(|t| targets.get(t))
        .fold(Keep::default(), |k, t| Keep {
            credentials: k.credentials || t.forward_credentials,
            proxy_headers: k.proxy_headers || t.forward_proxy_headers,
        });
    if let Some(t) = s.tolerance
        && t.0.is_zero()
    {
        v.problem(&format!("{key}.tolerance"), "must be greater than 0".into());
    }
    v.positive(&format!("{key}.dedup_window"), s.dedup_window.0);
    if let Some(d) = &s.silent_after {
        v.positive(&format!("{key}.silent_after"), d.0);
    }
    let tolerance = s.tolerance.map_or(provider.default_tolerance(), |d| d.0);
    if provider.timestamp.as_ref().is_some_and(|t| t.checked) {
        if tolerance > MAX_TOLERANCE {
            v.problem(
                &format!("{key}.tolerance"),
                "must be at most 1d: a captured request stays replayable for the whole window"
                    .into(),
            );
        }
        if s.dedup_window.0 < tolerance {
            v.problem(
                &format!("{key}.dedup_window"),
                "must be at least `tolerance`: a replay inside the timestamp window but after \
                 the dedup window would be accepted as a new event"
                    .into(),
            );
        }
    }
    if provider.needs_public_url() && s.public_url.is_none() {
        v.problem(
            &format!("{key}.public_url"),
            format!("provider `{}` signs the URL: set public_url", provider.name),
        );
    }
    let allow_ips = nets(&s.allow_ips, &format!("{key}.allow_ips"), v);
    if provider.needs_allow_ips() && s.allow_ips.is_empty() {
        v.problem(
            &format!("{key}.allow_ips"),
            format!(
                "provider `{}` sends unsigned requests: list the provider's addresses in allow_ips",
                provider.name
            ),
        );
    }
    // Every scheme's table, in file order; at most one matches the scheme.
    let settings = [
        settings_from(s.paypal.as_ref(), &provider, key, v),
        settings_from(s.plaid.as_ref(), &provider, key, v),
        settings_from(s.braintree.as_ref(), &provider, key, v),
        settings_from(s.sns.as_ref(), &provider, key, v),
    ]
    .into_iter()
    .flatten()
    .next();
    let verify_token = match &s.verify_token {
        Some(r) => v.secret(&format!("{key}.verify_token"), r),
        None => {
            if provider.wants_verify_token() {
                v.problem(
                    &format!("{key}.verify_token"),
                    format!(
                        "provider `{}` verifies the URL with a token you choose: set verify_token",
                        provider.name
                    ),
                );
            }
            None
        }
    };
    let split = match (&s.split, &provider.split) {
        (None, Some(p)) if p.default => Some(p.clone()),
        (Some(SplitSetting::On(true)), Some(p)) => Some(p.clone()),
        (Some(SplitSetting::On(true)), None) => {
            v.problem(
                &format!("{key}.split"),
                format!(
                    "provider `{}` names no batch items: give the array, split = \"json:/…\"",
                    provider.name
                ),
            );
            None
        }
        (Some(SplitSetting::At(at)), p) => match Split::at(at, p.as_ref()) {
            Ok(s) => Some(s),
            Err(e) => {
                v.problem(&format!("{key}.split"), e);
                None
            }
        },
        _ => None,
    };
    if split.is_some() && s.dedup_by_body {
        v.problem(
            &format!("{key}.split"),
            "split and dedup_by_body do not combine: each item is deduplicated by its own id"
                .into(),
        );
    }
    Some(Source {
        verify_token,
        split,
        withheld: withheld(&provider, keep),
        allow_ips,
        settings,
        tolerance,
        name,
        provider,
        keys,
        dedup_window: s.dedup_window.0,
        routes: Arc::new(Routes::of(&s.targets, |t| targets.get(t))),
        dedup_by_body: s.dedup_by_body,
        silent_after: s.silent_after.map(|d| d.0),
        targets: s.targets,
        public_url: s.public_url,
    })
}

/// The source's decoded keys, one per `secrets` entry.
fn keys(
    secrets: &[String],
    provider: &Provider,
    key: &str,
    v: &mut Validator<'_>,
) -> Vec<SigningKey> {
    let mut keys = Vec::new();
    for (i, r) in secrets.iter().enumerate() {
        let k = format!("{key}.secrets[{i}]");
        if let Some(secret) = v.secret(&k, r) {
            match provider.signing_key(&secret) {
                Ok(sk) => keys.push(sk),
                Err(e) => v.problem(&k, e),
            }
        }
    }
    keys
}

/// Every listed target exists, and none is listed twice.
fn check_targets(
    list: &[String],
    targets: &BTreeMap<String, Target>,
    key: &str,
    v: &mut Validator<'_>,
) {
    for (i, t) in list.iter().enumerate() {
        if !targets.contains_key(t) {
            v.problem(
                &format!("{key}.targets"),
                format!("unknown target `{t}` (define it under [targets.{t}])"),
            );
        }
        // Each (event, target) is one delivery row: a repeated name would
        // violate that key in every batch the event is written with.
        if list[..i].contains(t) {
            v.problem(
                &format!("{key}.targets"),
                format!("duplicate target `{t}`: list each target once"),
            );
        }
    }
}

/// The source's provider, with its `[signature]` / `[event_id]` / `event_type` overrides
/// applied and checked.
fn source_provider(
    s: &raw::RawSource,
    key: &str,
    providers: &Registry,
    v: &mut Validator<'_>,
) -> Option<Arc<Provider>> {
    let Some(base) = providers.get(&s.provider) else {
        v.problem(
            &format!("{key}.provider"),
            format!(
                "unknown provider `{}` (known: {})",
                s.provider,
                providers.names().join(", ")
            ),
        );
        return None;
    };
    if s.signature.is_none()
        && s.event_id.is_none()
        && s.event_type.is_none()
        && s.object_id.is_none()
    {
        return Some(base);
    }
    let overrides = SourceOverrides {
        signature: s.signature.as_ref(),
        event_id: s.event_id.as_ref(),
        event_type: s.event_type.as_ref(),
        object_id: s.object_id.as_deref(),
    };
    match base.customized(&overrides) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            // The error names what it is about (`event_type: …`); the key is
            // the first override the source wrote.
            let k = if e.starts_with("event_type") {
                "event_type"
            } else if e.starts_with("object_id") {
                "object_id"
            } else if s.signature.is_some() {
                "signature"
            } else {
                "event_id"
            };
            v.problem(&format!("{key}.{k}"), e);
            None
        }
    }
}

/// Addresses or CIDR blocks listed under `key`; each bad entry is a
/// problem at `key[i]`.
pub(super) fn nets(list: &[String], key: &str, v: &mut Validator<'_>) -> Vec<IpNet> {
    let mut out = Vec::new();
    for (i, a) in list.iter().enumerate() {
        match parse_net(a) {
            Ok(n) => out.push(n),
            Err(e) => v.problem(&format!("{key}[{i}]"), e),
        }
    }
    out
}
