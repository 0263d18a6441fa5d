//! The `hookgate` binary's commands, run as a user would.

use crate::helpers::*;
use std::process::Command;

/// Runs the binary in `dir`: (success, stdout, stderr).
pub(crate) fn hookgate(args: &[&str], dir: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_prints_the_resolved_config_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret.txt"), "whsec_from_a_file\n").unwrap();
    std::fs::write(
        dir.path().join("hookgate.toml"),
        r#"
[server]
admin_token = "super-secret-admin"
admin_listen = "127.0.0.1:9090"
[storage]
database_url = "postgres://app:pg-password@db.internal:5432/hooks"
[sources.stripe]
provider = "stripe"
secrets = ["whsec_literal_secret", "file:secret.txt"]
targets = ["billing"]
[targets.billing]
url = "http://billing.internal/hook?token=qs-token-secret"
signing_secret = "whsec_c2lnbmluZw=="
events = ["invoice.*", "customer.subscription.updated"]
filter = { "json:/data/object/currency" = "eur" }
[apis.payments]
upstream = "http://payments:s3cr3t-upstream@payments.internal:8000"
scope = "header:X-User-ID"
"#,
    )
    .unwrap();
    let (ok, out, err) = hookgate(&["check-config"], dir.path());
    assert!(ok, "{err}");
    assert!(out.contains("POST /webhooks/stripe"), "{out}");
    assert!(out.contains("/api/payments/"), "{out}");
    // Issue #32: URLs are shown as scheme, host, port and path only.
    assert!(out.contains("http://billing.internal/hook "), "{out}");
    assert!(
        !out.contains("qs-token-secret") && !out.contains("?token"),
        "{out}"
    );
    assert!(out.contains("scope=header:x-user-id"), "{out}");
    assert!(out.contains("secrets=2"));
    assert!(
        out.contains(
            r#"route → billing          events=[invoice.*, customer.subscription.updated] filter={json:/data/object/currency = "eur"}"#
        ),
        "{out}"
    );
    assert!(out.contains("    event type: json:/type\n"), "{out}");
    assert!(
        out.contains("    signed: event id signed; event type signed\n"),
        "{out}"
    );
    assert!(out.contains("postgres://***@db.internal:5432/hooks"));
    // Each target's retry window, the default one here.
    assert!(
        out.contains("retry_for=3days (retries: 12 doubling from 1s to 1h, then every <= 1h; at least 83 retries; dead at once on HTTP 410)"),
        "{out}"
    );
    for secret in [
        "super-secret-admin",
        "pg-password",
        "whsec_literal",
        "whsec_from_a_file",
        "c2lnbmluZw",
        "s3cr3t-upstream",
    ] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} leaked"
        );
    }
}

#[test]
fn check_config_says_which_sources_sign_their_event_id_and_type() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hookgate.toml"),
        r#"
[sources.gh]
provider = "github"
secrets = ["s"]
[sources.mp]
provider = "mercadopago"
secrets = ["s"]
[sources.rk]
provider = "robokassa"
secrets = ["s"]
"#,
    )
    .unwrap();
    let (ok, out, err) = hookgate(&["check-config"], dir.path());
    assert!(ok, "{err}");
    let line = |source: &str| {
        let at = out.find(&format!("  {source} ")).unwrap();
        out[at..]
            .lines()
            .find(|l| l.starts_with("    signed: "))
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        line("gh"),
        "    signed: event id unsigned (header:x-github-delivery); event type unsigned (header:x-github-event)"
    );
    // Mercado Pago signs a manifest, not the body.
    assert_eq!(
        line("mp"),
        "    signed: event id unsigned (json:/id); event type unsigned (json:/action, json:/type)"
    );
    assert_eq!(line("rk"), "    signed: event id signed; event type none");
}

#[test]
fn check_config_names_the_file_and_key_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[sources.a]\nprovider = \"nope\"\nsecrets = [\"x\"]\n",
            "sources.a.provider",
        ),
        (
            "[sources.a]\nprovider = \"github\"\nsecrets = [\"env:HOOKGATE_T_UNSET_VAR\"]\n",
            "sources.a.secrets[0]",
        ),
        (
            "[sources.a]\nprovider = \"github\"\nsecrets = [\"x\"]\ntargets = [\"t\"]\n",
            "sources.a.targets",
        ),
        ("[dedup]\nclaim_ttl = \"soon\"\n", "dedup.claim_ttl"),
        ("[server]\nlisten_on = \"x\"\n", "server.listen_on"),
        (
            "[sources.a]\nprovider = \"github\"\nsecrets = [\"file:missing.txt\"]\n",
            "sources.a.secrets[0]",
        ),
        (
            "[sources.a]\nprovider = \"github\"\nsecrets = [\"x\"]\ntargets = [\"t\", \"t\"]\n\
             [targets.t]\nurl = \"http://127.0.0.1:9/\"\n",
            "sources.a.targets",
        ),
        ("[dedup]\ncache_ttl = \"0s\"\n", "dedup.cache_ttl"),
        (
            "[delivery]\npoll_interval = \"0s\"\n",
            "delivery.poll_interval",
        ),
        (
            "[delivery]\nlease = \"6s\"\nheartbeat = \"3s\"\n",
            "delivery.heartbeat",
        ),
    ];
    for (text, key) in cases {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let (ok, _, err) = hookgate(&["--config", "bad.toml", "check-config"], dir.path());
        assert!(!ok, "{text}");
        assert!(
            err.contains("bad.toml") && err.contains(key),
            "{key}: {err}"
        );
    }
}

#[test]
fn check_config_shows_the_redis_topology_redacted_and_refuses_unknown_schemes() {
    let dir = tempfile::tempdir().unwrap();
    let config = |url: &str| format!("[storage]\nredis_url = \"{url}\"\n");
    for (url, shown) in [
        (
            "redis+sentinel://app:redis-pass@10.0.0.1:26379,10.0.0.2:26379/main?db=2",
            "redis sentinel redis+sentinel://***@10.0.0.1:26379,10.0.0.2:26379/main (key prefix",
        ),
        (
            "redis+cluster://:redis-pass@10.0.0.1:7000,10.0.0.2:7001",
            "redis cluster redis+cluster://***@10.0.0.1:7000,10.0.0.2:7001",
        ),
        (
            "rediss://app:redis-pass@cache.internal:6380",
            "redis standalone rediss://***@cache.internal:6380",
        ),
    ] {
        std::fs::write(dir.path().join("hookgate.toml"), config(url)).unwrap();
        let (ok, out, err) = hookgate(&["check-config"], dir.path());
        assert!(ok, "{url}: {err}");
        assert!(out.contains(shown), "{out}");
        assert!(!out.contains("redis-pass") && !err.contains("redis-pass"));
    }
    for url in [
        "memcached://app:redis-pass@cache:11211",
        "redis-sentinel://app:redis-pass@h:26379/main",
        "redis+sentinel://app:redis-pass@h:26379",
    ] {
        std::fs::write(dir.path().join("hookgate.toml"), config(url)).unwrap();
        let (ok, out, err) = hookgate(&["check-config"], dir.path());
        assert!(!ok, "{url} accepted: {out}");
        assert!(err.contains("storage.redis_url"), "{err}");
        assert!(
            !out.contains("redis-pass") && !err.contains("redis-pass"),
            "{err}"
        );
    }
}

#[test]
fn check_config_shows_broker_targets_with_their_kind_and_redacted_url() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hookgate.toml"),
        r#"
[sources.stripe]
provider = "stripe"
secrets = ["whsec_x"]
targets = ["bus", "amqp"]
[targets.bus]
kind = "nats"
url = "nats://app:nats-pass@127.0.0.1:4222"
subject = "hooks.{source}.{type}"
[targets.amqp]
kind = "rabbitmq"
url = "amqp://hookgate:amqp-pass@127.0.0.1:5672/%2f"
exchange = ""
routing_key = "hooks.{source}"
"#,
    )
    .unwrap();
    let (ok, out, err) = hookgate(&["check-config"], dir.path());
    assert!(ok, "{err}");
    assert!(
        out.contains("nats://***@127.0.0.1:4222 kind=nats subject=hooks.{source}.{type}"),
        "{out}"
    );
    assert!(
        out.contains(
            r#"amqp://***@127.0.0.1:5672/%2f kind=rabbitmq exchange="" routing_key=hooks.{source}"#
        ),
        "{out}"
    );
    for secret in ["nats-pass", "amqp-pass"] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} leaked"
        );
    }

    // A wrong scheme is refused, naming the key, without the password.
    std::fs::write(
        dir.path().join("hookgate.toml"),
        "[targets.amqp]\nkind = \"rabbitmq\"\nurl = \"amqps://u:amqp-pass@h:5671/%2f\"\n\
         exchange = \"\"\nrouting_key = \"k\"\n",
    )
    .unwrap();
    let (ok, out, err) = hookgate(&["check-config"], dir.path());
    assert!(!ok, "{out}");
    assert!(err.contains("targets.amqp.url"), "{err}");
    assert!(
        !out.contains("amqp-pass") && !err.contains("amqp-pass"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_produces_a_request_the_gateway_accepts() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("event.json"), stripe_body("evt_cli_sign")).unwrap();
    for (provider, source, secret) in [
        ("stripe", "stripe", STRIPE_SECRET),
        ("github", "github", GITHUB_SECRET),
        ("standard-webhooks", "svix", SW_SECRET),
        ("shopify", "shopify", SHOPIFY_SECRET),
    ] {
        let to = app.url(&format!("/webhooks/{source}"));
        let (ok, out, err) = hookgate(
            &[
                "sign",
                "--provider",
                provider,
                "--secret",
                secret,
                "--body",
                "event.json",
                "--to",
                &to,
            ],
            dir.path(),
        );
        assert!(ok, "{err}");
        assert!(!out.contains(secret), "sign printed the secret");
        let curl = out.lines().last().unwrap();
        assert!(curl.starts_with("curl ") && curl.contains(&to), "{curl}");
        let headers: Vec<(String, String)> = out
            .lines()
            .take_while(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        let body = std::fs::read(dir.path().join("event.json")).unwrap();
        let r = app.post(source, &headers, &body).await;
        assert_eq!(r.status(), 200, "{provider}: {}", r.text().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_applies_the_schema_on_both_backends() {
    for backend in [Backend::Production, Backend::Embedded] {
        let db = TestDb::create(backend).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("hookgate.toml"),
            format!("[storage]\ndatabase_url = \"{}\"\n", db.url),
        )
        .unwrap();
        let (ok, out, err) = hookgate(&["migrate"], dir.path());
        assert!(ok, "{err}");
        assert!(out.starts_with("migrated"), "{out}");
        // Idempotent.
        assert!(hookgate(&["migrate"], dir.path()).0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_plaid_with_a_test_key_and_the_printed_jwk_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let body = br#"{"webhook_type":"ITEM","webhook_code":"ERROR","item_id":"it-cli"}"#;
    std::fs::write(dir.path().join("event.json"), body).unwrap();
    let key = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/plaid/test-key.pem"
    );
    let args = ["sign", "--provider", "plaid", "--body", "event.json"];
    let (ok, _, err) = hookgate(&args, dir.path());
    assert!(!ok && err.contains("--private-key"), "{err}");
    let with_key = [&args[..], &["--private-key", key, "--key-id", "kid-cli"]].concat();
    let (ok, out, err) = hookgate(&with_key, dir.path());
    assert!(ok, "{err}");
    let jwk = err
        .lines()
        .find_map(|l| l.split_once("keys: ").map(|(_, j)| j.to_owned()))
        .expect("the JWK to pin");
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra =
        format!("[sources.plaid]\nprovider = \"plaid\"\n[sources.plaid.plaid]\nkeys = ['{jwk}']\n");
    let app = spawn_app(opts).await;
    let (name, value) = out.lines().next().unwrap().split_once(": ").unwrap();
    let r = app
        .post("plaid", &[(name.to_owned(), value.to_owned())], body)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// `hookgate providers` prints the catalogue; `--update` rewrites only the
/// generated part of a document, which for the shipped docs/providers.md is
/// already what the binary writes (the unit test keeps it so).
#[test]
fn providers_prints_the_catalogue_and_updates_a_document() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out, err) = hookgate(&["providers"], dir.path());
    assert!(ok, "{err}");
    assert!(out.contains("### Developer tools"), "{out}");
    assert!(out.contains(") `box` |"), "{out}");

    let shipped = include_str!("../../docs/providers.md");
    let begin = shipped.find("<!-- generated:").unwrap();
    let end = shipped.find("<!-- generated: end -->").unwrap();
    let marker_end = begin + shipped[begin..].find('\n').unwrap();
    let stale = format!(
        "{}\n\nstale table\n\n{}",
        &shipped[..marker_end],
        &shipped[end..]
    );
    let doc = dir.path().join("providers.md");
    std::fs::write(&doc, stale).unwrap();
    let (ok, _, err) = hookgate(&["providers", "--update", "providers.md"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(std::fs::read_to_string(&doc).unwrap(), shipped);

    std::fs::write(&doc, "no markers here").unwrap();
    let (ok, _, err) = hookgate(&["providers", "--update", "providers.md"], dir.path());
    assert!(!ok);
    assert!(err.contains("has no"), "{err}");
}

/// A gateway whose log is a file or a pipe writes plain text: colour codes
/// are for a terminal, and around every field in journald or a log shipper
/// they are noise.
#[test]
fn serve_logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let port = crate::helpers::process::free_port();
    std::fs::write(
        dir.path().join("hookgate.toml"),
        format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[storage]\ndatabase_url = \"sqlite://hg.db\"\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["--config", "hookgate.toml", "serve"])
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.contains("hookgate listening");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    assert!(text.contains("hookgate listening"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a piped log:\n{text:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_public_key_providers_with_a_test_key_and_the_printed_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = |f: &str| format!("{}/tests/fixtures/schemes/{f}", env!("CARGO_MANIFEST_DIR"));
    let cases = [
        ("discord", "ed25519-key.pem", br#"{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_CREATE","data":{}}}"#.to_vec()),
        ("telnyx", "ed25519-key.pem", br#"{"data":{"event_type":"message.sent","id":"tx-cli-1"}}"#.to_vec()),
        ("sendgrid", "p256-key.pem", br#"[{"event":"delivered","sg_event_id":"sg-cli-1"}]"#.to_vec()),
        ("wise", "rsa-key.pem", br#"{"data":{},"event_type":"balances#credit"}"#.to_vec()),
    ];
    let mut extra = String::new();
    let mut signed = Vec::new();
    for (provider, key, body) in &cases {
        let file = format!("{provider}.json");
        std::fs::write(dir.path().join(&file), body).unwrap();
        let args = ["sign", "--provider", provider, "--body", &file];
        let (ok, _, err) = hookgate(&args, dir.path());
        assert!(!ok && err.contains("--private-key"), "{provider}: {err}");
        let key = fixture(key);
        let with_key = [&args[..], &["--private-key", &key]].concat();
        let (ok, out, err) = hookgate(&with_key, dir.path());
        assert!(ok, "{provider}: {err}");
        let public = err
            .lines()
            .find_map(|l| l.split_once("source's secret: ").map(|(_, k)| k.to_owned()))
            .expect("the public key to configure");
        extra.push_str(&format!(
            "[sources.{provider}]\nprovider = \"{provider}\"\nsecrets = [\"{public}\"]\n"
        ));
        let headers: Vec<(String, String)> = out
            .lines()
            .take_while(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        signed.push((*provider, headers, body.clone()));
    }
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = extra;
    let app = spawn_app(opts).await;
    for (provider, headers, body) in signed {
        let r = app.post(provider, &headers, &body).await;
        let status = r.status().as_u16();
        assert!(
            (200..300).contains(&status),
            "{provider}: {status} {}",
            r.text().await.unwrap()
        );
    }
}
