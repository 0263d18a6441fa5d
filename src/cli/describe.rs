//! `hookgate check-config`: what a config resolves to, never a secret.

use crate::config::Config;
use crate::primitives::duration::show;
use crate::primitives::url;
use crate::target::route::Routes;
use std::fmt::Write as _;

/// The `check-config` summary: everything resolved, no secret.
pub fn describe(c: &Config) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "config: {} (ok)", c.origin);
    let _ = writeln!(
        o,
        "server: listen={} max_body_bytes={} admin_token={} log_format={:?}",
        c.server.listen,
        c.server.max_body_bytes,
        if c.server.admin_token.is_some() {
            "set"
        } else {
            "unset (admin endpoints refuse all)"
        },
        c.server.log_format
    );
    for t in &c.server.tokens {
        let scopes: Vec<&str> = t.scopes.iter().map(|s| s.as_str()).collect();
        let _ = writeln!(o, "token: {} scopes=[{}]", t.name, scopes.join(", "));
    }
    let _ = writeln!(o, "ledger: {}", c.storage.database.display());
    let cache = c.storage.cache_display();
    let _ = writeln!(o, "cache: {cache}");
    let _ = writeln!(o, "providers: {}", c.providers.names().join(", "));
    let _ = writeln!(o, "sources:");
    for s in c.sources.values() {
        let _ = writeln!(
            o,
            "  {:<16} POST /webhooks/{:<16} provider={} secrets={} tolerance={} dedup_window={} targets=[{}]{}",
            s.name,
            s.name,
            s.provider.name,
            s.keys.len(),
            if s.provider.timestamp.as_ref().is_some_and(|t| t.checked) {
                show(s.tolerance)
            } else {
                "-".into()
            },
            show(s.dedup_window),
            s.targets.join(", "),
            s.public_url
                .as_deref()
                .map(|u| format!(" public_url={}", url::show(u)))
                .unwrap_or_default()
        );
        // The API key (an App hook's private key) is a secret: only that
        // one is set. The App's id is not.
        if let Some(r) = c.reconcile.get(&s.name) {
            let mut hook = r
                .hook
                .as_deref()
                .map(|h| format!(" hook={h}"))
                .unwrap_or_default();
            if let Some(app) = &r.app {
                hook.push_str(&format!(" app_id={}", app.id));
            }
            let _ = writeln!(
                o,
                "  {:<16} reconcile every {} over {} (grace {}) via {}{hook} (api_key set)",
                "",
                show(r.interval),
                show(r.lookback),
                show(r.grace),
                url::show(&r.api_base),
            );
        }
        describe_handshakes(&mut o, s);
        describe_routes(&mut o, c, s);
    }
    let _ = writeln!(o, "targets:");
    for t in c.targets.values() {
        let _ = writeln!(
            o,
            "  {:<16} {}{} timeout={} concurrency={} signed={}{}\n  {:<16} {}",
            t.name,
            shown_url(t),
            t.kind.describe(),
            show(t.timeout),
            if t.adaptive {
                format!("adaptive(max {})", t.concurrency)
            } else {
                t.concurrency.to_string()
            },
            if t.kind.signs() { "yes" } else { "no" },
            t.order_by
                .as_ref()
                .map(|o| format!(" order_by={}", o.show()))
                .unwrap_or_default(),
            "",
            crate::deliver::retry::describe(&t.retry),
        );
    }
    describe_alerts(&mut o, c);
    describe_apis(&mut o, c);
    o
}

/// A target's URL as `check-config` shows it: without credentials, and
/// only scheme and host for an alert sink or a Slack target (a Slack
/// webhook's path is its credential; a sink URL may be written as one).
fn shown_url(t: &crate::target::Target) -> String {
    let secret_path = t.name.starts_with(crate::config::alerts::TARGET_PREFIX)
        || matches!(t.kind, crate::target::Kind::Slack(_));
    let shown = url::show(&t.url);
    if !secret_path {
        return shown;
    }
    match shown.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split('/').next().unwrap_or_default();
            format!("{scheme}://{host}/***")
        }
        None => "***".to_owned(),
    }
}

/// `[alerts.*]`: each sink, its target and what it watches.
fn describe_alerts(o: &mut String, c: &Config) {
    use crate::config::alerts::{Condition, SinkKind};
    if c.alerts.sinks.is_empty() {
        return;
    }
    let _ = writeln!(o, "alerts: every {}", show(c.alerts.interval));
    for a in c.alerts.sinks.values() {
        let watches: Vec<String> = a
            .conditions
            .iter()
            .map(|cond| match cond {
                Condition::TargetFailing => {
                    format!("target_failing(after {})", show(a.target_failing_after))
                }
                Condition::DeadLetters => format!("dead_letters(above {})", a.dead_letters_above),
                Condition::VerificationFailures => match a.verification {
                    Some((n, w)) => format!("verification_failures(above {n} per {})", show(w)),
                    None => "verification_failures".to_owned(),
                },
                other => other.as_str().to_owned(),
            })
            .collect();
        let _ = writeln!(
            o,
            "  {:<16} {} via target {} [{}]",
            a.name,
            match a.kind {
                SinkKind::Slack => "slack",
                SinkKind::Http => "http (signed)",
            },
            a.target,
            watches.join(", ")
        );
    }
}

/// A source's routes: which events each of its targets receives.
fn describe_routes(o: &mut String, c: &Config, s: &crate::verify::source::Source) {
    // What `events` globs match on (verify::facts::event_type).
    let typed = match (
        &s.provider.event_type,
        s.provider.signature.scheme.type_from(),
    ) {
        (Some(rule), _) => rule
            .parts
            .iter()
            .map(crate::verify::locator::Lookup::show)
            .collect::<Vec<_>>()
            .join(" + \".\" + "),
        (None, Some(from)) => from.to_owned(),
        (None, None) => "none (untyped: a route with `events` never matches)".to_owned(),
    };
    let _ = writeln!(o, "    event type: {typed}");
    // Whether a relay could change the id (dodging dedup) or the type
    // (rerouting) without breaking the signature.
    let signed = crate::verify::signedness::of_source(s);
    let _ = writeln!(o, "    signed: {}", signed.describe());
    let routes = Routes::of(&s.targets, |t| c.targets.get(t).map(|t| &**t));
    if routes.0.is_empty() {
        let _ = writeln!(o, "    routes: none (events are stored, counted unrouted)");
    }
    for r in &routes.0 {
        let rule = r.rule.describe();
        let rule = if rule.is_empty() {
            "every event".to_owned()
        } else {
            rule
        };
        let _ = writeln!(o, "    route → {:<16} {rule}", r.target);
    }
}

/// The `[apis.*]` lines: what each proxied API covers, never a secret.
fn describe_apis(o: &mut String, c: &Config) {
    if !c.apis.is_empty() {
        let _ = writeln!(o, "apis (Idempotency-Key proxy):");
    }
    for a in c.apis.values() {
        let methods: Vec<&str> = a.methods.iter().map(|m| m.as_str()).collect();
        let scope = match &a.scope {
            crate::config::apis::Scope::None => "none".to_owned(),
            crate::config::apis::Scope::Header(h) => format!("header:{h}"),
        };
        let _ = writeln!(
            o,
            "  {:<16} /api/{}/… → {} methods=[{}] key_header={} required={} scope={} ttl={} lock_ttl={} timeout={}",
            a.name,
            a.name,
            url::show(&a.upstream),
            methods.join(", "),
            a.key_header,
            a.required,
            scope,
            show(a.ttl),
            show(a.lock_ttl),
            show(a.timeout),
        );
    }
}

/// What a source answers before any event, and whether it splits batches.
/// Says whether `verify_token` is set, never what it is.
fn describe_handshakes(o: &mut String, s: &crate::verify::source::Source) {
    use crate::verify::spec::ControlMethod;
    let p = &s.provider;
    let mut parts = Vec::new();
    for c in &p.controls {
        if c.method == ControlMethod::Get {
            parts.push("GET challenge");
        } else if c.learn.is_some() {
            parts.push("handshake (secret stored)");
        } else {
            parts.push("POST challenge or ping");
        }
    }
    if p.signature.scheme.handshake().is_some() {
        parts.push("GET challenge");
    }
    parts.dedup();
    if p.wants_verify_token() {
        parts.push(if s.verify_token.is_some() {
            "verify_token set"
        } else {
            "verify_token unset"
        });
    }
    if let Some(split) = &s.split {
        let _ = writeln!(
            o,
            "  {:<16} split: each item of json:{} is an event",
            "", split.items
        );
    }
    if !parts.is_empty() {
        let _ = writeln!(o, "  {:<16} answers: {}", "", parts.join(", "));
    }
}
