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
fn a_heartbeat_too_long_for_the_delivery_lease_is_refused() {
    let text = format!("[delivery]\nlease = \"6s\"\nheartbeat = \"2001ms\"\n{BASE}");
    refused(
        &text,
        "delivery.heartbeat",
        "at most a third of delivery.lease (6s)",
    );
    let ok = format!("[delivery]\nlease = \"6s\"\nheartbeat = \"2s\"\n{BASE}");
    assert!(problems(&ok).is_empty(), "{:?}", problems(&ok));
    refused(
        &format!("[delivery]\nheartbeat = \"0s\"\n{BASE}"),
        "delivery.heartbeat",
        "greater than 0",
    );
}

#[test]
fn a_target_timeout_may_outlast_the_delivery_lease() {
    // The lease is renewed while an attempt runs (deliver::lease).
    let ok = format!("{BASE}timeout = \"30s\"\n");
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

[targets.other]
url = "http://127.0.0.1:9/c"
forward_credentials = true
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
    // Issue #32: a target `api` does not list (reachable by an operator's
    // redelivery) never gets what `api` stored for `trusting`, even if it
    // forwards credentials for its own sources.
    assert!(c.targets["other"].withholds("api", "authorization"));
    assert!(c.targets["other"].withholds("api", "x-callback-token"));
    // Proxy headers: nobody asked for them.
    assert!(
        c.sources["api"]
            .withheld
            .contains(&"x-forwarded-for".into())
    );
}

/// Issue #32: `secrets = "whsec_…"` (a string where a list belongs) printed
/// the secret in the type error.
#[test]
fn a_type_error_never_prints_the_value() {
    let text = BASE.replace(
        "secrets = [\"whsec_a\"]",
        "secrets = \"whsec_do_not_print_me\"",
    );
    let p = problems(&text);
    assert!(
        p.iter()
            .any(|(k, m)| k == "sources.stripe.secrets" && m.contains("a string")),
        "{p:?}"
    );
    let shown = format!("{p:?}");
    assert!(!shown.contains("whsec_do_not_print_me"), "{shown}");
    let p = problems(&format!(
        "[server]\nmax_body_bytes = \"12345secret\"\n{BASE}"
    ));
    assert!(!format!("{p:?}").contains("12345secret"), "{p:?}");
    let p = problems(&format!("[server]\nlog_format = \"secretish\"\n{BASE}"));
    assert!(!format!("{p:?}").contains("secretish"), "{p:?}");
}

/// Issue #32: risky settings were accepted silently.
#[test]
fn risky_settings_are_refused_by_name() {
    refused(
        &format!("[server]\nadmin_token = \"x\"\n{BASE}"),
        "server.admin_token",
        "at least 16 characters",
    );
    let p = problems(&format!("[server]\nadmin_token = \"short-secret\"\n{BASE}"));
    assert!(!format!("{p:?}").contains("short-secret"), "{p:?}");
    assert!(
        problems(&format!(
            "[server]\nadmin_token = \"{}\"\n{BASE}",
            "a".repeat(16)
        ))
        .is_empty()
    );
    let with = |lines: &str| {
        BASE.replace(
            "secrets = [\"whsec_a\"]",
            &format!("secrets = [\"whsec_a\"]\n{lines}"),
        )
    };
    refused(
        &with("tolerance = \"10m\"\ndedup_window = \"5m\""),
        "sources.stripe.dedup_window",
        "at least `tolerance`",
    );
    refused(
        &with("tolerance = \"100d\""),
        "sources.stripe.tolerance",
        "at most 1d",
    );
    assert!(problems(&with("tolerance = \"1d\"\ndedup_window = \"1d\"")).is_empty());
    // A scheme without a checked timestamp has no window to compare.
    let github = "[sources.gh]\nprovider = \"github\"\nsecrets = [\"s\"]\ndedup_window = \"1m\"\n";
    assert!(
        problems(&format!("{BASE}{github}")).is_empty(),
        "{:?}",
        problems(&format!("{BASE}{github}"))
    );
}

#[test]
fn a_reconciliation_api_base_over_http_must_be_loopback() {
    let with = |base: &str| {
        BASE.replace(
            "targets = [\"billing\"]",
            &format!("targets = [\"billing\"]\n[sources.stripe.reconcile]\napi_key = \"sk_test_x\"\napi_base = \"{base}\""),
        )
    };
    refused(
        &with("http://api.stripe.com"),
        "sources.stripe.reconcile.api_base",
        "loopback",
    );
    refused(
        &with("http://10.0.0.5:8080/v1"),
        "sources.stripe.reconcile.api_base",
        "loopback",
    );
    for ok in [
        "https://api.stripe.com",
        "http://127.0.0.1:9000",
        "http://localhost:9000/",
        "http://[::1]:9000",
    ] {
        assert!(
            problems(&with(ok)).is_empty(),
            "{ok}: {:?}",
            problems(&with(ok))
        );
    }
}

/// Issue #32: a source's own `signed_content` need not sign the body.
#[test]
fn a_source_signed_content_without_the_body_is_refused() {
    let text = BASE.replace(
        "secrets = [\"whsec_a\"]",
        "secrets = [\"whsec_a\"]\nsignature = { signed_content = \"{timestamp}.{json:/id}\" }",
    );
    let p = problems(&text);
    assert!(
        p.iter()
            .any(|(k, m)| k.starts_with("sources.stripe") && m.contains("must contain `{body}`")),
        "{p:?}"
    );
    let ok = BASE.replace(
        "secrets = [\"whsec_a\"]",
        "secrets = [\"whsec_a\"]\nsignature = { signed_content = \"{timestamp}.{body}\" }",
    );
    assert!(problems(&ok).is_empty(), "{:?}", problems(&ok));
}

/// Named tokens: names, scopes, lengths and clashes are checked, and no
/// secret shows in a problem.
#[test]
fn named_tokens_are_checked() {
    let tok = |name: &str, secret: &str, scopes: &str| {
        format!("[server.tokens.{name}]\nsecret = \"{secret}\"\nscopes = {scopes}\n")
    };
    let ok = format!(
        "[server]\nadmin_token = \"{}\"\n{}{}{BASE}",
        "a".repeat(16),
        tok("laptop", &"b".repeat(16), "[\"listen\"]"),
        tok("ops", &"c".repeat(16), "[\"admin\", \"listen\"]"),
    );
    let c = Config::from_toml_str(&ok, Path::new(".")).unwrap();
    let all = c.server.all_tokens();
    assert_eq!(
        all.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["admin", "laptop", "ops"]
    );
    assert!(all[0].allows(Scope::Admin) && all[0].allows(Scope::Listen));
    assert!(!all[1].allows(Scope::Admin) && all[1].allows(Scope::Listen));
    refused(
        &format!("{}{BASE}", tok("laptop", "short-secret", "[\"listen\"]")),
        "server.tokens.laptop.secret",
        "at least 16",
    );
    let p = problems(&format!(
        "{}{BASE}",
        tok("laptop", "short-secret", "[\"listen\"]")
    ));
    assert!(!format!("{p:?}").contains("short-secret"), "{p:?}");
    refused(
        &format!("{}{BASE}", tok("laptop", &"b".repeat(16), "[\"root\"]")),
        "server.tokens.laptop.scopes",
        "unknown scope `root`",
    );
    refused(
        &format!("{}{BASE}", tok("laptop", &"b".repeat(16), "[]")),
        "server.tokens.laptop.scopes",
        "at least one scope",
    );
    refused(
        &format!(
            "{}{}{BASE}",
            tok("a", &"b".repeat(16), "[\"listen\"]"),
            tok("b", &"b".repeat(16), "[\"admin\"]")
        ),
        "server.tokens.b.secret",
        "same as another",
    );
    refused(
        &format!(
            "[server]\nadmin_token = \"{}\"\n{}{BASE}",
            "a".repeat(16),
            tok("admin", &"b".repeat(16), "[\"listen\"]")
        ),
        "server.tokens.admin",
        "name of server.admin_token",
    );
}
