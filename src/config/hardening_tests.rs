//! Configs that must be refused (issue #14), each with its key path.

use super::*;

const BASE: &str = r#"
[sources.stripe]
provider = "stripe"
secrets = ["whsec_a"]
targets = ["billing"]

[targets.billing]
url = "http://127.0.0.1:9/hook"
"#;

fn problems(text: &str) -> Vec<(String, String)> {
    match Config::from_toml_str(text, Path::new(".")) {
        Ok(_) => Vec::new(),
        Err(e) => e.problems,
    }
}

fn refused(text: &str, key: &str, says: &str) {
    let p = problems(text);
    assert!(
        p.iter().any(|(k, m)| k == key && m.contains(says)),
        "{key}: {p:?}"
    );
}

#[test]
fn a_source_listing_one_target_twice_is_refused() {
    refused(
        &BASE.replace(r#"["billing"]"#, r#"["billing", "billing"]"#),
        "sources.stripe.targets",
        "duplicate target `billing`",
    );
}

#[test]
fn zero_durations_that_mean_nothing_are_refused() {
    for (section, key) in [
        ("dedup", "cache_ttl"),
        ("dedup", "purge_interval"),
        ("dedup", "stats_flush_interval"),
        ("delivery", "poll_interval"),
        ("delivery", "backoff_base"),
        ("delivery", "lease"),
        ("server", "request_timeout"),
        ("server", "header_read_timeout"),
        ("server", "idle_timeout"),
        ("storage", "statement_timeout"),
    ] {
        let text = format!("[{section}]\n{key} = \"0s\"\n{BASE}");
        refused(&text, &format!("{section}.{key}"), "greater than 0");
    }
    refused(
        &BASE.replace(
            "secrets = [\"whsec_a\"]",
            "secrets = [\"whsec_a\"]\ntolerance = \"0s\"",
        ),
        "sources.stripe.tolerance",
        "greater than 0",
    );
    refused(
        &BASE.replace(
            "secrets = [\"whsec_a\"]",
            "secrets = [\"whsec_a\"]\ndedup_window = \"0s\"",
        ),
        "sources.stripe.dedup_window",
        "greater than 0",
    );
    refused(
        &format!("{BASE}timeout = \"0s\"\n"),
        "targets.billing.timeout",
        "greater than 0",
    );
    refused(
        &format!("[server]\nmax_connections = 0\n{BASE}"),
        "server.max_connections",
        "at least 1",
    );
}

#[test]
fn a_target_timeout_that_could_outlive_the_delivery_lease_is_refused() {
    let text = format!("[delivery]\nlease = \"30s\"\n{BASE}timeout = \"26s\"\n");
    refused(
        &text,
        "targets.billing.timeout",
        "shorter than delivery.lease",
    );
    let ok = format!("[delivery]\nlease = \"30s\"\n{BASE}timeout = \"25s\"\n");
    assert!(problems(&ok).is_empty(), "{:?}", problems(&ok));
}

#[test]
fn admin_listen_is_an_address() {
    refused(
        &format!("[server]\nadmin_listen = \"nope\"\n{BASE}"),
        "server.admin_listen",
        "not an address",
    );
    let c = Config::from_toml_str(
        &format!("[server]\nadmin_listen = \"127.0.0.1:9090\"\n{BASE}"),
        Path::new("."),
    )
    .unwrap();
    assert_eq!(
        c.server.admin_listen,
        Some("127.0.0.1:9090".parse().unwrap())
    );
}

#[test]
fn credentials_are_withheld_unless_a_target_forwards_them() {
    let text = r#"
[sources.api]
provider = "xendit"
secrets = ["tok"]
targets = ["trusting", "plain"]

[sources.api_plain]
provider = "xendit"
secrets = ["tok"]
targets = ["plain"]

[targets.trusting]
url = "http://127.0.0.1:9/a"
forward_credentials = true

[targets.plain]
url = "http://127.0.0.1:9/b"
"#;
    let c = Config::from_toml_str(text, Path::new(".")).unwrap();
    // Stored for `api` (a target wants them), never for `api_plain`.
    assert!(
        !c.sources["api"]
            .withheld
            .contains(&"x-callback-token".into())
    );
    assert!(
        c.sources["api_plain"]
            .withheld
            .contains(&"x-callback-token".into())
    );
    assert!(
        c.sources["api_plain"]
            .withheld
            .contains(&"authorization".into())
    );
    // `plain` still does not get what `api` stored for `trusting`.
    assert!(c.targets["plain"].withholds("api", "X-Callback-Token"));
    assert!(!c.targets["trusting"].withholds("api", "x-callback-token"));
    // Proxy headers: nobody asked for them.
    assert!(
        c.sources["api"]
            .withheld
            .contains(&"x-forwarded-for".into())
    );
}
