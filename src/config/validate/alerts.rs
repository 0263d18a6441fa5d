//! `[alerts.<name>]` and `[alerting]` (`config/alerts.rs`): each sink is
//! checked and turned into its internal target `alert.<name>`.

use super::{Validator, valid_name};
use crate::config::Delivery;
use crate::config::alerts::{
    AlertSink, Alerts, Condition, RawAlert, RawAlerting, SinkKind, target_name,
};
use crate::primitives::crypto::SigningKey;
use crate::target::route::parse_order_by;
use crate::target::{Kind, KindDef, RetryPolicy, Target, http, slack};
use crate::verify::source::Resolve;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Default deadline of one attempt to a sink.
const SINK_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `target_failing_after`.
const FAILING_AFTER: Duration = Duration::from_secs(300);
/// Default `verification_window`.
const VERIFICATION_WINDOW: Duration = Duration::from_secs(300);

/// The sinks, and their targets added to `targets`.
pub(super) fn alerts(
    raw: BTreeMap<String, RawAlert>,
    alerting: RawAlerting,
    delivery: &Delivery,
    targets: &mut BTreeMap<String, Target>,
    v: &mut Validator<'_>,
) -> Alerts {
    v.positive("alerting.interval", alerting.interval.0);
    let mut sinks = BTreeMap::new();
    for (name, a) in raw {
        let key = format!("alerts.{name}");
        if !valid_name(&name) {
            v.problem(&key, "alert names use letters, digits, `-` and `_`".into());
        }
        if let Some((sink, target)) = sink(&name, &key, a, delivery, v) {
            targets.insert(target.name.clone(), target);
            sinks.insert(name, Arc::new(sink));
        }
    }
    Alerts {
        interval: alerting.interval.0,
        sinks,
    }
}

fn sink(
    name: &str,
    key: &str,
    a: RawAlert,
    delivery: &Delivery,
    v: &mut Validator<'_>,
) -> Option<(AlertSink, Target)> {
    let (kind, field, reference) = match (&a.slack, &a.url) {
        (Some(s), None) => (SinkKind::Slack, "slack", s.as_str()),
        (None, Some(u)) => (SinkKind::Http, "url", u.as_str()),
        _ => {
            v.problem(
                key,
                "set exactly one of `slack` (a Slack incoming-webhook URL) and `url` (an HTTP endpoint)"
                    .into(),
            );
            return None;
        }
    };
    // The URL is a credential (Slack's is the whole authorisation): it
    // resolves like any secret and is never shown in a message.
    let url = v.secret(&format!("{key}.{field}"), reference)?;
    let url = url.expose().to_owned();
    if let Err(e) = http::HttpKind::check_url(&url) {
        v.problem(&format!("{key}.{field}"), e);
    }
    let signing_key = match (kind, &a.signing_secret) {
        (SinkKind::Http, Some(r)) => v
            .secret(&format!("{key}.signing_secret"), r)
            .map(|s| SigningKey::standard_webhooks(&s)),
        (SinkKind::Http, None) => {
            v.problem(
                &format!("{key}.signing_secret"),
                "required with `url`: the receiver verifies each alert's Standard Webhooks signature"
                    .into(),
            );
            None
        }
        (SinkKind::Slack, Some(_)) => {
            v.problem(
                &format!("{key}.signing_secret"),
                "only a `url` sink is signed (Slack does not verify signatures)".into(),
            );
            None
        }
        (SinkKind::Slack, None) => None,
    };
    let timeout = a.timeout.map_or(SINK_TIMEOUT, |d| d.0);
    v.positive(&format!("{key}.timeout"), timeout);
    let target_failing_after = a.target_failing_after.map_or(FAILING_AFTER, |d| d.0);
    v.positive(&format!("{key}.target_failing_after"), target_failing_after);
    let dead_letters_above = a.dead_letters_above.unwrap_or(0);
    if dead_letters_above < 0 {
        v.problem(
            &format!("{key}.dead_letters_above"),
            "must be 0 or more".into(),
        );
    }
    let window = a.verification_window.map_or(VERIFICATION_WINDOW, |d| d.0);
    v.positive(&format!("{key}.verification_window"), window);
    if a.verification_failures.is_some_and(|n| n < 0) {
        v.problem(
            &format!("{key}.verification_failures"),
            "must be 0 or more".into(),
        );
    }
    let verification = a.verification_failures.map(|n| (n, window));
    let conditions = match a.conditions {
        None => Condition::ALL
            .into_iter()
            .filter(|c| *c != Condition::VerificationFailures || verification.is_some())
            .collect(),
        Some(list) => {
            let mut out = Vec::new();
            for c in list {
                match Condition::parse(&c) {
                    Some(c) if !out.contains(&c) => out.push(c),
                    Some(_) => v.problem(
                        &format!("{key}.conditions"),
                        format!("`{c}` is listed twice"),
                    ),
                    None => v.problem(
                        &format!("{key}.conditions"),
                        format!(
                            "unknown condition `{c}` (one of: {})",
                            Condition::ALL.map(Condition::as_str).join(", ")
                        ),
                    ),
                }
            }
            if out.contains(&Condition::VerificationFailures) && verification.is_none() {
                v.problem(
                    &format!("{key}.verification_failures"),
                    "required when `conditions` lists verification_failures (the most failures per window)"
                        .into(),
                );
            }
            out
        }
    };
    let target = Target {
        name: target_name(name),
        url,
        timeout,
        retry: RetryPolicy {
            retry_for: delivery.retry_for,
            permanent_statuses: delivery.permanent_statuses.clone(),
            max_attempts: None,
            backoff_base: delivery.backoff_base,
            backoff_max: delivery.backoff_max,
        },
        // One at a time, fixed: alerts are few, and in order per condition.
        concurrency: 1,
        adaptive: false,
        forward_credentials: false,
        forward_proxy_headers: false,
        withheld: BTreeMap::new(),
        rule: Default::default(),
        kind: match kind {
            SinkKind::Slack => Kind::Slack(slack::Spec),
            SinkKind::Http => Kind::Http(http::Spec { signing_key }),
        },
        rate: None,
        // One condition's alerts in order: a clear never overtakes the
        // fire it clears while that one is retried.
        order_by: parse_order_by(ORDER_BY).ok(),
    };
    let sink = AlertSink {
        name: name.to_owned(),
        kind,
        target: target.name.clone(),
        conditions,
        target_failing_after,
        dead_letters_above,
        verification,
    };
    Some((sink, target))
}

/// Where an alert's ordering key is: its condition key (`src/alerts/`).
pub const ORDER_BY: &str = "json:/key";

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::alerts::{Condition, SinkKind};
    use crate::target::Kind;
    use std::path::Path;

    const BASE: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_token = "tok-0123456789abcdef"

[sources.stripe]
provider = "stripe"
secrets = ["whsec_a"]
targets = ["billing"]

[targets.billing]
url = "http://127.0.0.1:9/hook"
"#;

    const SLACK: &str = "https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX";

    fn load(extra: &str) -> Result<Config, Vec<(String, String)>> {
        Config::from_toml_str(&format!("{BASE}\n{extra}"), Path::new(".")).map_err(|e| e.problems)
    }

    #[test]
    fn each_sink_is_an_internal_target_that_no_source_can_name() {
        let c = load(&format!(
            "[alerting]\ninterval = \"5s\"\n[alerts.team]\nslack = \"{SLACK}\"\n\
             [alerts.pager]\nurl = \"https://ops.example/alerts\"\nsigning_secret = \"whsec_aGVsbG8=\"\n\
             verification_failures = 20\n"
        ))
        .unwrap();
        assert_eq!(c.alerts.interval.as_secs(), 5);
        let team = &c.alerts.sinks["team"];
        assert_eq!(team.kind, SinkKind::Slack);
        assert!(
            !team.watches(Condition::VerificationFailures),
            "off unless set"
        );
        assert!(c.alerts.sinks["pager"].watches(Condition::VerificationFailures));
        assert!(matches!(c.targets["alert.team"].kind, Kind::Slack(_)));
        assert!(c.targets["alert.pager"].kind.signs());
        assert!(c.targets["alert.pager"].order_by.is_some());
        let text = format!("{BASE}\n[alerts.team]\nslack = \"{SLACK}\"\n").replace(
            "targets = [\"billing\"]",
            "targets = [\"billing\", \"alert.team\"]",
        );
        let p = Config::from_toml_str(&text, Path::new("."))
            .unwrap_err()
            .problems;
        assert!(
            p.iter()
                .any(|(k, m)| k == "sources.stripe.targets" && m.contains("alert.team")),
            "{p:?}"
        );
    }

    #[test]
    fn a_sink_needs_one_url_a_signature_and_known_conditions() {
        let p = load("[alerts.a]\ntimeout = \"1s\"\n").unwrap_err();
        assert_eq!(p[0].0, "alerts.a");
        let p = load("[alerts.a]\nurl = \"https://x.example/\"\n").unwrap_err();
        assert_eq!(p[0].0, "alerts.a.signing_secret");
        let p = load(&format!(
            "[alerts.a]\nslack = \"{SLACK}\"\nconditions = [\"bogus\", \"verification_failures\"]\n"
        ))
        .unwrap_err();
        let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["alerts.a.conditions", "alerts.a.verification_failures"],
            "{p:?}"
        );
        let p = load("[alerts.a]\nslack = \"ftp://x\"\n").unwrap_err();
        assert_eq!(p[0].0, "alerts.a.slack");
        assert!(!p[0].1.contains("ftp://x"), "the URL is a secret: {p:?}");
        let p = load("[alerts.a]\nslack = \"env:HOOKGATE_TEST_UNSET_SLACK_URL\"\n").unwrap_err();
        assert_eq!(p[0].0, "alerts.a.slack");
    }

    #[test]
    fn check_config_never_shows_a_sink_url_path() {
        let c = load(&format!("[alerts.team]\nslack = \"{SLACK}\"\n")).unwrap();
        let text = crate::cli::describe::describe(&c);
        assert!(!text.contains("XXXXSECRETXXXX"), "{text}");
        assert!(!text.contains("/services/"), "{text}");
        assert!(text.contains("https://hooks.slack.com/***"), "{text}");
        assert!(
            text.contains("team             slack via target alert.team"),
            "{text}"
        );
    }
}
