//! Config loading and validation; no test touches the process environment
//! except through figment's `Jail`.

use super::*;
use crate::target::Kind;
use crate::verify::schemes::SchemeSettings;

const GOOD: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_token = "tok-0123456789abcdef"

[sources.stripe]
provider = "stripe"
secrets = ["whsec_a", "whsec_b"]
tolerance = "2m"
targets = ["billing"]

[targets.billing]
url = "http://127.0.0.1:9/hook"
signing_secret = "whsec_aGVsbG8="
"#;

fn problems(text: &str) -> Vec<(String, String)> {
    Config::from_toml_str(text, Path::new("."))
        .unwrap_err()
        .problems
}

#[test]
fn a_good_config_resolves_everything() {
    let c = Config::from_toml_str(GOOD, Path::new(".")).unwrap();
    let s = &c.sources["stripe"];
    assert_eq!(s.keys.len(), 2);
    assert_eq!(s.tolerance, Duration::from_secs(120));
    assert_eq!(s.dedup_window, Duration::from_secs(7 * 86_400));
    assert!(matches!(c.storage.database, Database::Sqlite(_)));
    assert!(c.targets["billing"].kind.signs());
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    let p = problems(&GOOD.replace("tolerance = \"2m\"", "tolerence = \"2m\""));
    assert_eq!(p[0].0, "sources.stripe.tolerence");
    assert!(p[0].1.contains("unknown key"), "{p:?}");
    assert!(p[0].1.contains("tolerance"), "lists the valid keys: {p:?}");
}

#[test]
fn bad_duration_names_the_key() {
    let p = problems(&GOOD.replace("\"2m\"", "\"2 fortnights\""));
    assert_eq!(p[0].0, "sources.stripe.tolerance");
    assert!(p[0].1.contains("invalid duration"), "{p:?}");
}

#[test]
fn unknown_provider_and_target_are_errors() {
    let p = problems(&GOOD.replace("provider = \"stripe\"", "provider = \"strype\""));
    assert_eq!(p[0].0, "sources.stripe.provider");
    assert!(p[0].1.contains("unknown provider `strype`"));
    let p = problems(&GOOD.replace("targets = [\"billing\"]", "targets = [\"nope\"]"));
    assert_eq!(p[0].0, "sources.stripe.targets");
}

#[test]
fn routes_follow_the_targets_events_and_filter_and_bad_ones_are_named() {
    let text = GOOD.replace(
        "signing_secret = \"whsec_aGVsbG8=\"",
        "events = [\"invoice.*\"]\nfilter = { \"json:/data/object/livemode\" = false, \"header:X-N\" = 3 }",
    );
    let c = Config::from_toml_str(&text, Path::new(".")).unwrap();
    let routes = &crate::target::route::Routes::of(&c.sources["stripe"].targets, |t| {
        c.targets.get(t).map(|t| &**t)
    })
    .0;
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0].target, "billing");
    assert_eq!(routes[0].rule.events, Some(vec!["invoice.*".to_owned()]));
    let values: Vec<&str> = routes[0]
        .rule
        .filter
        .iter()
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(values, ["3", "false"]);

    let p = problems(&GOOD.replace(
        "signing_secret = \"whsec_aGVsbG8=\"",
        "filter = { \"data.currency\" = \"eur\" }",
    ));
    assert_eq!(p[0].0, "targets.billing.filter", "{p:?}");
    assert!(p[0].1.contains("header:NAME"), "{p:?}");
    let p = problems(&GOOD.replace("signing_secret = \"whsec_aGVsbG8=\"", "events = [\"\"]"));
    assert_eq!(p[0].0, "targets.billing.events", "{p:?}");
}

#[test]
fn order_by_takes_any_routing_locator_and_a_bad_one_is_named() {
    let with = |o: &str| {
        GOOD.replace(
            "signing_secret = \"whsec_aGVsbG8=\"",
            &format!("order_by = {o:?}"),
        )
    };
    let c = Config::from_toml_str(&with("json:/data/object/id"), Path::new(".")).unwrap();
    let order_by = c.targets["billing"]
        .order_by
        .clone()
        .expect("order_by parsed");
    assert_eq!(
        order_by.alternatives,
        [crate::verify::locator::Locator::Json(
            "/data/object/id".into()
        )]
    );
    let routes = crate::target::route::Routes::of(&c.sources["stripe"].targets, |t| {
        c.targets.get(t).map(|t| &**t)
    });
    assert_eq!(routes.0[0].order_by, Some(order_by));
    assert!(
        crate::cli::describe::describe(&c).contains("order_by=json:/data/object/id"),
        "check-config prints it"
    );
    let c = Config::from_toml_str(&with("header:X-Object|query:obj"), Path::new(".")).unwrap();
    assert_eq!(
        c.targets["billing"]
            .order_by
            .as_ref()
            .unwrap()
            .alternatives
            .len(),
        2
    );
    assert!(
        Config::from_toml_str(GOOD, Path::new(".")).unwrap().targets["billing"]
            .order_by
            .is_none()
    );
    for bad in ["data.object.id", "signature:t", "json:"] {
        let p = problems(&with(bad));
        assert_eq!(p[0].0, "targets.billing.order_by", "{bad}: {p:?}");
    }
}

#[test]
fn a_redis_stream_target_needs_its_keys_and_refuses_other_kinds_keys() {
    let stream = |keys: &str| {
        GOOD.replace(
            "url = \"http://127.0.0.1:9/hook\"\nsigning_secret = \"whsec_aGVsbG8=\"",
            &format!("kind = \"redis-stream\"\nurl = \"redis://127.0.0.1:6379/0\"\n{keys}"),
        )
    };
    let c = Config::from_toml_str(
        &stream("stream = \"hooks:{source}\"\nmaxlen = 5"),
        Path::new("."),
    )
    .unwrap();
    let Kind::RedisStream(spec) = &c.targets["billing"].kind else {
        panic!("redis-stream kind");
    };
    assert_eq!(
        (spec.stream.as_str(), spec.maxlen),
        ("hooks:{source}", Some(5))
    );

    let p = problems(&stream(""));
    assert_eq!(p[0].0, "targets.billing.stream", "{p:?}");
    let p = problems(&stream("stream = \"hooks:{id}\""));
    assert!(p[0].1.contains("{source} and {type}"), "{p:?}");
    let p = problems(&stream(
        "stream = \"s\"\nsigning_secret = \"whsec_aGVsbG8=\"",
    ));
    assert_eq!(p[0].0, "targets.billing.signing_secret", "{p:?}");
    let p = problems(&stream("stream = \"s\"\nduplicate_window = \"5s\""));
    assert_eq!(p[0].0, "targets.billing.duplicate_window", "{p:?}");
    let p = problems(&stream("stream = \"s\"").replace("redis://", "http://"));
    assert_eq!(p[0].0, "targets.billing.url", "{p:?}");
    let p = problems(&GOOD.replace("signing_secret", "stream = \"s\"\nsigning_secret"));
    assert_eq!(p[0].0, "targets.billing.stream", "{p:?}");
    let p = problems(&stream("").replace("redis-stream", "kafka"));
    assert_eq!(p[0].0, "targets.billing.kind", "{p:?}");
}

/// `GOOD` with its `billing` target replaced by `kind` at `url` plus `keys`.
fn broker(kind: &str, url: &str, keys: &str) -> String {
    GOOD.replace(
        "url = \"http://127.0.0.1:9/hook\"\nsigning_secret = \"whsec_aGVsbG8=\"",
        &format!("kind = \"{kind}\"\nurl = \"{url}\"\n{keys}"),
    )
}

#[test]
fn a_nats_target_needs_a_subject_and_a_nats_url_and_refuses_other_kinds_keys() {
    let nats = |keys: &str| broker("nats", "nats://127.0.0.1:4222", keys);
    let c = Config::from_toml_str(&nats("subject = \"hooks.{source}.{type}\""), Path::new("."))
        .unwrap();
    let Kind::Nats(spec) = &c.targets["billing"].kind else {
        panic!("nats kind");
    };
    assert_eq!(spec.subject, "hooks.{source}.{type}");

    let p = problems(&nats(""));
    assert_eq!(p[0].0, "targets.billing.subject", "{p:?}");
    assert!(p[0].1.contains("needs `subject`"), "{p:?}");
    for bad in ["hooks.{id}", "hooks.*", "hooks..x", "hooks.>", "a b", ""] {
        let p = problems(&nats(&format!("subject = \"{bad}\"")));
        assert_eq!(p[0].0, "targets.billing.subject", "{bad}: {p:?}");
    }
    let p = problems(&broker("nats", "amqp://127.0.0.1:5672", "subject = \"s\""));
    assert_eq!(p[0].0, "targets.billing.url", "{p:?}");
    assert!(p[0].1.contains("nats:// or tls://"), "{p:?}");
    for (key, owner) in [
        ("stream = \"s\"", "redis-stream"),
        ("exchange = \"x\"", "rabbitmq"),
        ("routing_key = \"k\"", "rabbitmq"),
        ("signing_secret = \"whsec_aGVsbG8=\"", "http"),
    ] {
        let p = problems(&nats(&format!("subject = \"s\"\n{key}")));
        assert!(p[0].1.contains(&format!("only a {owner} target")), "{p:?}");
    }
    // The other way round: an http target refuses `subject`.
    let p = problems(&GOOD.replace("signing_secret", "subject = \"s\"\nsigning_secret"));
    assert_eq!(p[0].0, "targets.billing.subject", "{p:?}");
    assert!(p[0].1.contains("only a nats target"), "{p:?}");
}

#[test]
fn a_rabbitmq_target_needs_an_exchange_a_routing_key_and_an_amqp_url() {
    let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let rabbit = |keys: &str| broker("rabbitmq", url, keys);
    let c = Config::from_toml_str(
        &rabbit("exchange = \"\"\nrouting_key = \"hooks.{source}\""),
        Path::new("."),
    )
    .unwrap();
    let Kind::RabbitMq(spec) = &c.targets["billing"].kind else {
        panic!("rabbitmq kind");
    };
    assert_eq!(
        (spec.exchange.as_str(), spec.routing_key.as_str()),
        ("", "hooks.{source}")
    );
    // A named (fanout) exchange may take an empty key; the default one may not.
    assert!(
        Config::from_toml_str(
            &rabbit("exchange = \"fan\"\nrouting_key = \"\""),
            Path::new(".")
        )
        .is_ok()
    );
    let p = problems(&rabbit("exchange = \"\"\nrouting_key = \"\""));
    assert_eq!(p[0].0, "targets.billing.routing_key", "{p:?}");

    let p = problems(&rabbit("routing_key = \"k\""));
    assert_eq!(p[0].0, "targets.billing.exchange", "{p:?}");
    assert!(p[0].1.contains("needs `exchange`"), "{p:?}");
    let p = problems(&rabbit("exchange = \"x\""));
    assert_eq!(p[0].0, "targets.billing.routing_key", "{p:?}");
    let p = problems(&rabbit("exchange = \"x\"\nrouting_key = \"k.{id}\""));
    assert!(p[0].1.contains("{source} and {type}"), "{p:?}");
    let p = problems(&rabbit(
        "exchange = \"x\"\nrouting_key = \"k\"\nsubject = \"s\"",
    ));
    assert_eq!(p[0].0, "targets.billing.subject", "{p:?}");
    assert!(p[0].1.contains("only a nats target"), "{p:?}");
    let keys = "exchange = \"x\"\nrouting_key = \"k\"";
    for (bad, says) in [
        ("http://127.0.0.1:5672", "needs an amqp:// URL"),
        ("amqps://u:pw@127.0.0.1:5671/%2f", "not supported yet"),
        ("nats://127.0.0.1:4222", "needs an amqp:// URL"),
    ] {
        let p = problems(&broker("rabbitmq", bad, keys));
        assert_eq!(p[0].0, "targets.billing.url", "{p:?}");
        assert!(p[0].1.contains(says), "{bad}: {p:?}");
        assert!(!p[0].1.contains("pw"), "no URL in the message: {p:?}");
    }
    let p = problems(&GOOD.replace("signing_secret", "exchange = \"x\"\nsigning_secret"));
    assert!(p[0].1.contains("only a rabbitmq target"), "{p:?}");
}

#[test]
fn a_rate_is_per_second_or_per_minute() {
    let with = |r: &str| GOOD.replace("signing_secret", &format!("rate = \"{r}\"\nsigning_secret"));
    let c = Config::from_toml_str(&with("200/s"), Path::new(".")).unwrap();
    assert_eq!(c.targets["billing"].rate, Some(200.0));
    let c = Config::from_toml_str(&with("30/m"), Path::new(".")).unwrap();
    assert_eq!(c.targets["billing"].rate, Some(0.5));
    for bad in ["200", "0/s", "5/h", "x/s"] {
        let p = problems(&with(bad));
        assert_eq!(p[0].0, "targets.billing.rate", "{bad}: {p:?}");
    }
}

#[test]
fn missing_env_and_file_secrets_are_errors_without_values() {
    let text = GOOD.replace(
        "secrets = [\"whsec_a\", \"whsec_b\"]",
        "secrets = [\"env:HOOKGATE_TEST_NOT_SET_ANYWHERE\", \"file:/nonexistent/x\"]",
    );
    let p = problems(&text);
    assert_eq!(p[0].0, "sources.stripe.secrets[0]");
    assert!(p[0].1.contains("HOOKGATE_TEST_NOT_SET_ANYWHERE"));
    assert_eq!(p[1].0, "sources.stripe.secrets[1]");
}

#[test]
fn unknown_database_scheme_is_rejected() {
    let p = problems(&format!(
        "{GOOD}\n[storage]\ndatabase_url = \"mysql://x\"\n"
    ));
    assert_eq!(p[0].0, "storage.database_url");
    assert!(p[0].1.contains("mysql"));
}

#[test]
fn debug_output_of_a_config_has_no_secret() {
    let c = Config::from_toml_str(GOOD, Path::new(".")).unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("whsec_a"), "{dbg}");
    assert!(!dbg.contains("tok-0123456789abcdef"));
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment's Jail API returns its own Error"
)]
fn file_and_environment_layers_with_errors_naming_the_file() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("hookgate.toml", GOOD)?;
        jail.set_env("HOOKGATE_SERVER__MAX_BODY_BYTES", "2048");
        jail.set_env("HOOKGATE_ADMIN_TOKEN", "used-by-env-reference");
        let c = Config::load(Some(Path::new("hookgate.toml"))).unwrap();
        assert_eq!(c.server.max_body_bytes, 2048);
        // Nothing references HOOKGATE_ADMIN_TOKEN: probably a mistake, said once.
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("HOOKGATE_ADMIN_TOKEN")),
            "{:?}",
            c.warnings
        );
        assert!(!c.warnings.iter().any(|w| w.contains("MAX_BODY_BYTES")));

        jail.create_file(
            "bad.toml",
            &GOOD.replace("[server]", "[server]\nlisten2 = 1"),
        )?;
        let e = Config::load(Some(Path::new("bad.toml"))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("bad.toml: `server.listen2`: unknown key"),
            "{e}"
        );
        Ok(())
    });
}

#[test]
fn provider_specific_source_settings_are_validated_with_their_keys() {
    let p = problems(
        r#"
[server]
trusted_proxies = ["10.0.0.0/8", "nope"]

[sources.yk]
provider = "yookassa"

[sources.generic]
provider = "hmac"
secrets = ["k"]

[sources.pp]
provider = "paypal"

[sources.gh]
provider = "github"
secrets = ["k"]
allow_ips = ["1.2.3.4/40"]
[sources.gh.paypal]
webhook_id = "WH"

[sources.tw]
provider = "twilio"
secrets = ["k"]

[sources.ad]
provider = "adyen"
secrets = ["not-hex"]
"#,
    );
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    for want in [
        "server.trusted_proxies[1]",
        "sources.yk.allow_ips",
        "sources.generic.signature",
        "sources.pp.paypal",
        "sources.gh.allow_ips[0]",
        "sources.gh.paypal",
        "sources.tw.public_url",
        "sources.ad.secrets[0]",
    ] {
        assert!(keys.contains(&want), "{want} not in {p:?}");
    }
}

#[test]
fn generic_and_paypal_sources_resolve() {
    let c = Config::from_toml_str(
        r#"
[sources.acme]
provider = "hmac"
secrets = ["k"]
allow_ips = ["192.0.2.0/24", "2001:db8::1"]
[sources.acme.signature]
header = "X-Sig"
algorithm = "hmac-sha1"
encoding = "base64"

[sources.pp]
provider = "paypal"
[sources.pp.paypal]
webhook_id = "WH-1"
cert = "file:tests/fixtures/paypal/test-cert.pem"
"#,
        // Not ".": figment's Jail moves the working directory in other tests.
        Path::new(env!("CARGO_MANIFEST_DIR")),
    )
    .unwrap();
    let acme = &c.sources["acme"];
    assert_eq!(acme.provider.signature.headers, vec!["x-sig"]);
    assert_eq!(acme.allow_ips.len(), 2);
    assert!(matches!(
        c.sources["pp"].settings,
        Some(SchemeSettings::Paypal(_))
    ));
    assert!(c.sources["pp"].keys.is_empty());
}

#[test]
fn plaid_settings_are_validated_and_never_printed() {
    let p = problems(
        r#"
[sources.none]
provider = "plaid"

[sources.half]
provider = "plaid"
[sources.half.plaid]
client_id = "id"

[sources.env]
provider = "plaid"
[sources.env.plaid]
client_id = "id"
secret = "s"
environment = "development"

[sources.far]
provider = "plaid"
[sources.far.plaid]
client_id = "id"
secret = "s"
api_base = "https://plaid.evil.example"

[sources.badkey]
provider = "plaid"
[sources.badkey.plaid]
keys = ['{"kty":"RSA"}']

[sources.gh]
provider = "github"
secrets = ["k"]
[sources.gh.plaid]
client_id = "id"
secret = "s"
"#,
    );
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    for want in [
        "sources.none.plaid",
        "sources.half.plaid.secret",
        "sources.env.plaid.environment",
        "sources.far.plaid",
        "sources.badkey.plaid",
        "sources.gh.plaid",
    ] {
        assert!(keys.contains(&want), "{want} not in {p:?}");
    }
    let c = Config::from_toml_str(
        r#"
[sources.pl]
provider = "plaid"
[sources.pl.plaid]
client_id = "client-id-1"
secret = "plaid-secret-value"
environment = "sandbox"
"#,
        Path::new(env!("CARGO_MANIFEST_DIR")),
    )
    .unwrap();
    let shown = format!("{:?}", c.sources["pl"]);
    assert!(shown.contains("sandbox.plaid.com"), "{shown}");
    assert!(!shown.contains("plaid-secret-value") && !shown.contains("client-id-1"));
}

#[test]
fn braintree_public_key_is_validated_and_its_absence_warned_about() {
    let p = problems(
        r#"
[sources.bad]
provider = "braintree"
secrets = ["k"]
[sources.bad.braintree]
public_key = "a|b"

[sources.gh]
provider = "github"
secrets = ["k"]
[sources.gh.braintree]
public_key = "pub"
"#,
    );
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    for want in ["sources.bad.braintree.public_key", "sources.gh.braintree"] {
        assert!(keys.contains(&want), "{want} not in {p:?}");
    }
    let c = Config::from_toml_str(
        "[sources.bt]\nprovider = \"braintree\"\nsecrets = [\"k\"]\n",
        Path::new(env!("CARGO_MANIFEST_DIR")),
    )
    .unwrap();
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("bt.braintree.public_key"))
    );
}

#[test]
fn a_source_may_say_where_its_event_type_is() {
    let text = GOOD.replace(
        "tolerance = \"2m\"",
        "tolerance = \"2m\"\nevent_type = [\"json:/data/object/object\", \"json:/type\"]",
    );
    let c = Config::from_toml_str(&text, Path::new(".")).unwrap();
    let rule = c.sources["stripe"].provider.event_type.as_ref().unwrap();
    assert_eq!(rule.parts.len(), 2);
    let p = problems(&GOOD.replace(
        "tolerance = \"2m\"",
        "tolerance = \"2m\"\nevent_type = \"body:/type\"",
    ));
    assert_eq!(p[0].0, "sources.stripe.event_type");
    assert!(p[0].1.contains("unknown locator kind `body`"), "{p:?}");
}

#[test]
fn sns_and_public_key_sources_are_validated_at_load() {
    let p = problems(
        r#"
[sources.none]
provider = "amazon-sns"

[sources.empty]
provider = "amazon-sns"
[sources.empty.sns]
topic_arns = []

[sources.wide]
provider = "amazon-sns"
[sources.wide.sns]
topic_arns = ["arn:aws:sns:us-east-1:1:t"]
cert_hosts = ["evil.example:443"]

[sources.gh]
provider = "github"
secrets = ["k"]
[sources.gh.sns]
topic_arns = ["arn:aws:sns:us-east-1:1:t"]

[sources.discord]
provider = "discord"
secrets = ["not-a-hex-key"]

[sources.sendgrid]
provider = "sendgrid"
secrets = ["bm90IGEga2V5"]
"#,
    );
    let find = |key: &str| {
        p.iter()
            .find(|(k, _)| k == key)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("{key} not in {p:?}"))
    };
    assert!(find("sources.none.sns").contains("topic_arns"));
    assert!(find("sources.empty.sns").contains("topic_arns is empty"));
    assert!(find("sources.wide.sns").contains("tests only"));
    assert!(find("sources.gh.sns").contains("not Amazon SNS"));
    find("sources.discord.secrets[0]");
    find("sources.sendgrid.secrets[0]");
    let ok = Config::from_toml_str(
        r#"
[sources.sns]
provider = "amazon-sns"
[sources.sns.sns]
topic_arns = ["arn:aws:sns:us-east-1:123456789012:orders"]
cert_hosts = ["127.0.0.1:8443"]
"#,
        Path::new("."),
    );
    assert!(ok.is_ok(), "{:?}", ok.err().map(|e| e.problems));
}

#[test]
fn a_relative_sqlite_path_is_taken_from_the_config_files_directory() {
    let base = Path::new("/etc/hook gate");
    for (url, want) in [
        (
            "sqlite://hookgate.db",
            "sqlite:///etc/hook gate/hookgate.db",
        ),
        (
            "sqlite:data/h.db?mode=rwc",
            "sqlite:///etc/hook gate/data/h.db?mode=rwc",
        ),
        ("sqlite:///var/lib/h.db", "sqlite:///var/lib/h.db"),
        ("sqlite::memory:", "sqlite::memory:"),
        ("sqlite://?mode=memory", "sqlite://?mode=memory"),
    ] {
        assert_eq!(sqlite_anchored(url, base), want, "{url}");
    }
    // No config file: the working directory, as before.
    assert_eq!(
        sqlite_anchored("sqlite://hookgate.db", Path::new("")),
        "sqlite://hookgate.db"
    );
    // sqlx decodes `%XX` in the path: a directory's own `%` and `?` survive.
    assert_eq!(
        sqlite_anchored("sqlite://h.db", Path::new("/srv/50%?x")),
        "sqlite:///srv/50%25%3Fx/h.db"
    );
    let c = Config::from_toml_str("", Path::new("/srv/hooks")).unwrap();
    assert_eq!(
        c.storage.database.display(),
        "sqlite:///srv/hooks/hookgate.db"
    );
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment's Jail API returns its own Error"
)]
fn ledger_commands_load_a_config_whose_webhook_secrets_are_not_set() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "hookgate.toml",
            r#"
[server]
admin_token = "env:HOOKGATE_T_UNSET_ADMIN"
[storage]
database_url = "sqlite://ledger.db"
[sources.stripe]
provider = "stripe"
secrets = ["env:HOOKGATE_T_UNSET_STRIPE", "file:missing.txt"]
targets = ["billing"]
[targets.billing]
url = "http://127.0.0.1:9/hook"
signing_secret = "env:HOOKGATE_T_UNSET_SIGNING"
"#,
        )?;
        let path = Path::new("hookgate.toml");
        let e = Config::load(Some(path)).unwrap_err();
        assert_eq!(e.problems.len(), 4, "{e}");
        let c = Config::load_for(Some(path), Needs::Ledger).unwrap();
        assert!(c.sources["stripe"].keys.is_empty());
        assert!(matches!(
            &c.targets["billing"].kind,
            crate::target::Kind::Http(spec) if spec.signing_key.is_none()
        ));
        assert!(c.server.admin_token.is_none());
        // Not told "admin_token is not set": it is, in an unset variable.
        assert!(!c.warnings.iter().any(|w| w.contains("admin_token")));
        let dir = std::env::current_dir().unwrap();
        assert_eq!(
            c.storage.database.display(),
            format!("sqlite://{}/ledger.db", dir.display())
        );
        // The ledger's own URL must still resolve.
        jail.create_file(
            "pg.toml",
            "[storage]\ndatabase_url = \"file:no-such-file\"\n",
        )?;
        let e = Config::load_for(Some(Path::new("pg.toml")), Needs::Ledger).unwrap_err();
        assert!(e.to_string().contains("storage.database_url"), "{e}");
        Ok(())
    });
}

#[test]
fn a_target_refuses_an_unknown_key_with_its_path_and_lists_every_kinds_keys() {
    let p = problems(&GOOD.replace("signing_secret", "sigining_secret"));
    assert_eq!(p[0].0, "targets.billing.sigining_secret", "{p:?}");
    assert!(p[0].1.contains("unknown key"), "{p:?}");
    for key in [
        "url",
        "order_by",
        "signing_secret",
        "stream",
        "subject",
        "routing_key",
    ] {
        assert!(p[0].1.contains(key), "lists `{key}`: {p:?}");
    }
    let p = problems(&GOOD.replace("url = \"http://127.0.0.1:9/hook\"\n", ""));
    assert_eq!(p[0].0, "targets.billing", "{p:?}");
    assert!(p[0].1.contains("url"), "{p:?}");
}

#[test]
fn a_broker_name_by_type_from_an_unsigned_header_is_warned_about() {
    let config = |provider: &str, stream: &str| {
        GOOD.replace(
            "provider = \"stripe\"",
            &format!("provider = \"{provider}\""),
        )
        .replace(
            "url = \"http://127.0.0.1:9/hook\"\nsigning_secret = \"whsec_aGVsbG8=\"",
            &format!(
                "kind = \"redis-stream\"\nurl = \"redis://127.0.0.1:6379/0\"\nstream = \"{stream}\""
            ),
        )
    };
    let warned = |provider: &str, stream: &str| {
        Config::from_toml_str(&config(provider, stream), Path::new("."))
            .unwrap()
            .warnings
            .into_iter()
            .any(|w| w.contains("targets.billing") && w.contains("{type}"))
    };
    // GitHub's type is the unsigned `X-GitHub-Event` header.
    assert!(warned("github", "hooks:{source}:{type}"));
    assert!(!warned("github", "hooks:{source}"));
    // Stripe's type is in the signed body.
    assert!(!warned("stripe", "hooks:{source}:{type}"));
}

#[test]
fn apis_without_an_admin_listener_are_refused() {
    let api = "\n[apis.pay]\nupstream = \"http://127.0.0.1:9/v1\"\n";
    let p = problems(&format!("{GOOD}{api}"));
    assert_eq!(p[0].0, "server.admin_listen", "{p:?}");
    let with_admin = GOOD.replace("[server]\n", "[server]\nadmin_listen = \"127.0.0.1:0\"\n");
    assert!(Config::from_toml_str(&format!("{with_admin}{api}"), Path::new(".")).is_ok());
}

#[test]
fn refused_log_defaults_and_bad_values_name_their_key() {
    let c = Config::from_toml_str(GOOD, Path::new(".")).unwrap();
    assert!(c.refused.enabled && !c.refused.capture_body);
    assert_eq!(c.refused.keep, Duration::from_secs(7 * 86_400));
    assert_eq!((c.refused.max_rows, c.refused.body_cap), (10_000, 65_536));
    let p = problems(&format!(
        "{GOOD}\n[refused]\nkeep = \"0s\"\nmax_rows = 0\nbody_cap = 0\n"
    ));
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        ["refused.keep", "refused.max_rows", "refused.body_cap"],
        "{p:?}"
    );
    let p = problems(&format!("{GOOD}\n[refused]\ncapture = true\n"));
    assert!(p.iter().any(|(_, m)| m.contains("capture")), "{p:?}");
}

#[test]
fn concurrency_is_adaptive_unless_fixed_and_both_keys_are_refused() {
    let adaptive = Config::from_toml_str(GOOD, Path::new(".")).unwrap();
    let t = &adaptive.targets["billing"];
    assert!(t.adaptive);
    assert_eq!(t.concurrency, validate::DEFAULT_MAX_CONCURRENCY);
    let capped =
        Config::from_toml_str(&format!("{GOOD}max_concurrency = 40\n"), Path::new(".")).unwrap();
    let t = &capped.targets["billing"];
    assert!(t.adaptive && t.concurrency == 40);
    let fixed =
        Config::from_toml_str(&format!("{GOOD}concurrency = 12\n"), Path::new(".")).unwrap();
    let t = &fixed.targets["billing"];
    assert!(!t.adaptive && t.concurrency == 12);
    assert!(crate::cli::describe::describe(&fixed).contains("concurrency=12 "));
    let p = problems(&format!("{GOOD}concurrency = 12\nmax_concurrency = 40\n"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "targets.billing.max_concurrency");
}
