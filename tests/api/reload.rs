//! Reload without a restart (issue #33): SIGHUP and `POST /admin/reload` on
//! the real binary, under load; a refused config; a removed target; native
//! TLS with a certificate replaced on reload.

use crate::helpers::process::Gateway;
use crate::helpers::{
    ADMIN_TOKEN, Backend, Opts, STRIPE_SECRET, TestDb, TestTarget, eventually, signers, stripe_body,
};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const ROTATED: &str = "whsec_rotated_after_reload";

/// A gateway process for `opts`, and the config text it was started with.
async fn gateway(opts: &Opts, db: &TestDb, prefix: &str) -> (Gateway, String) {
    let mut text = String::new();
    let g = Gateway::start_in(
        tempfile::tempdir().unwrap(),
        |addr| {
            text = opts.toml(db, prefix, addr);
            text.clone()
        },
        &reqwest::Client::new(),
        "http",
    )
    .await;
    (g, text)
}

/// Posts Stripe event `id` signed with `secret`.
async fn post_signed(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    id: &str,
) -> reqwest::Result<reqwest::Response> {
    let body = stripe_body(id);
    let mut req = client.post(url).body(body.clone());
    for (k, v) in &signers::stripe(secret, crate::helpers::now(), &body) {
        req = req.header(k.as_str(), v.as_str());
    }
    req.send().await
}

async fn stats(g: &Gateway) -> Value {
    serde_json::from_str(&g.admin_text("/stats").await).unwrap()
}

async fn digest(g: &Gateway) -> String {
    stats(g).await["config"]["digest"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Ids a target received (from the forwarded bodies).
fn received_ids(t: &TestTarget) -> Vec<String> {
    t.received()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_under_load_adds_a_rotated_secret_and_a_target() {
    let (t1, t2) = (TestTarget::start().await, TestTarget::start().await);
    let opts = Opts::forwarding_to(Backend::Production, "t1", &t1, "");
    let db = TestDb::create(Backend::Production).await;
    let prefix = format!("reload-load-{}", crate::helpers::now());
    let (mut g, text) = gateway(&opts, &db, &prefix).await;
    let before = digest(&g).await;

    // 64 connections sending signed events until told to stop.
    let url = g.url("/webhooks/stripe");
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut senders = Vec::new();
    for c in 0..64 {
        let (url, stop, sent, failed) = (url.clone(), stop.clone(), sent.clone(), failed.clone());
        senders.push(tokio::spawn(async move {
            // One client per sender: 64 connections of their own.
            let client = reqwest::Client::new();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("evt_load_{c}_{i}");
                match post_signed(&client, &url, STRIPE_SECRET, &id).await {
                    Ok(r) if r.status() == 200 => {}
                    Ok(r) => {
                        eprintln!("{id}: {}", r.status());
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        eprintln!("{id}: {e}");
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
                sent.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The rotated secret is added beside the old one, and a second target.
    let new_text = text
        .replace(
            &format!("secrets = [\"{STRIPE_SECRET}\"]\ntargets = [\"t1\"]"),
            &format!("secrets = [\"{ROTATED}\", \"{STRIPE_SECRET}\"]\ntargets = [\"t1\", \"t2\"]"),
        )
        .replace(
            "[targets.t1]",
            &format!("[targets.t2]\nurl = \"{}\"\n\n[targets.t1]", t2.url),
        );
    assert_ne!(new_text, text, "the test's config edit applies");
    g.rewrite_config(&new_text);
    let sent_before = sent.load(Ordering::SeqCst);
    g.hangup();
    let reloaded = eventually(Duration::from_secs(10), || async {
        digest(&g).await != before
    })
    .await;
    assert!(reloaded, "the reload was applied");

    // After it: events signed with the new secret are accepted and reach
    // the new target, while the load goes on.
    let client = reqwest::Client::new();
    for i in 0..10 {
        let r = post_signed(&client, &url, ROTATED, &format!("evt_rotated_{i}"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "signed with the rotated secret");
        assert_eq!(crate::helpers::dedup_header(&r), "new");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.await.unwrap();
    }
    let total = sent.load(Ordering::SeqCst);
    assert!(
        total > sent_before,
        "load kept flowing across the reload ({sent_before} then {total})"
    );
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "every one of {total} requests was answered 200"
    );
    assert!(g.is_running(), "SIGHUP did not end the process");

    let arrived = eventually(Duration::from_secs(15), || async {
        let ids = received_ids(&t2);
        (0..10).all(|i| ids.contains(&format!("evt_rotated_{i}")))
    })
    .await;
    assert!(
        arrived,
        "the added target receives the events after the reload"
    );
    let s = stats(&g).await;
    assert_eq!(s["config"]["reloads"], 1);
    assert_eq!(s["config"]["last_reload_error"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_reload_keeps_the_loaded_config_and_shows_the_error() {
    let opts = Opts::new(Backend::Embedded);
    let db = TestDb::create(Backend::Embedded).await;
    let (mut g, text) = gateway(&opts, &db, "reload-invalid").await;
    let before = digest(&g).await;
    let client = reqwest::Client::new();
    let url = g.url("/webhooks/stripe");

    // A secret that cannot be resolved.
    let broken = text.replace(
        &format!("secrets = [\"{STRIPE_SECRET}\"]"),
        "secrets = [\"env:HOOKGATE_TEST_NOT_SET_ANYWHERE\"]",
    );
    assert_ne!(broken, text);
    g.rewrite_config(&broken);
    let r = client
        .post(g.url("/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let answer: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(answer["status"], "refused");
    assert!(
        answer["error"].as_str().unwrap().contains("sources.stripe"),
        "{answer}"
    );
    // Without the token, nobody may reload.
    let anon = client.post(g.url("/admin/reload")).send().await.unwrap();
    assert_eq!(anon.status(), 401);

    // The old config keeps serving: the old secret still verifies.
    let r = post_signed(&client, &url, STRIPE_SECRET, "evt_after_refusal")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let s = stats(&g).await;
    assert_eq!(s["config"]["digest"], before.as_str());
    assert_eq!(s["config"]["reload_failures"], 1);
    assert!(
        s["config"]["last_reload_error"]
            .as_str()
            .is_some_and(|e| e.contains("HOOKGATE_TEST_NOT_SET_ANYWHERE")),
        "{s}"
    );
    let ready = client.get(g.url("/readyz")).send().await.unwrap();
    let ready: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
    assert!(ready["config"]["last_reload_error"].is_string(), "{ready}");

    // A SIGHUP with the same broken file: refused again, never fatal.
    g.hangup();
    let counted = eventually(Duration::from_secs(5), || async {
        stats(&g).await["config"]["reload_failures"] == 2
    })
    .await;
    assert!(counted, "the second refusal is counted");
    assert!(
        g.is_running(),
        "a refused SIGHUP reload does not end the process"
    );

    // Fixed, the next reload applies and clears the error; a setting bound
    // at start is named and keeps its running value.
    let fixed = text
        .replace("max_body_bytes = 65536", "max_body_bytes = 65537")
        .replace("shutdown_grace = \"5s\"", "shutdown_grace = \"9s\"");
    assert_ne!(fixed, text);
    g.rewrite_config(&fixed);
    let r = client
        .post(g.url("/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        answer["needs_restart"],
        serde_json::json!(["server.shutdown_grace"])
    );
    let s = stats(&g).await;
    assert_ne!(s["config"]["digest"], before.as_str());
    assert_eq!(s["config"]["last_reload_error"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_target_stops_and_its_deliveries_stay_pending() {
    let (t1, keep) = (TestTarget::start().await, TestTarget::start().await);
    t1.always(Some(503));
    let mut opts = Opts::forwarding_to(Backend::Production, "t1", &t1, "");
    opts.stripe_targets.push("keep".into());
    opts.extra += &format!("[targets.keep]\nurl = \"{}\"\n", keep.url);
    let db = TestDb::create(Backend::Production).await;
    let prefix = format!("reload-removed-{}", crate::helpers::now());
    let (g, text) = gateway(&opts, &db, &prefix).await;
    let client = reqwest::Client::new();
    let url = g.url("/webhooks/stripe");
    for i in 0..3 {
        let r = post_signed(&client, &url, STRIPE_SECRET, &format!("evt_rm_{i}"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // t1 fails every attempt: its rows are retrying.
    let failing = eventually(Duration::from_secs(10), || async { t1.count() >= 6 }).await;
    assert!(failing, "t1 is being retried");

    let without = text
        .replace("targets = [\"t1\", \"keep\"]", "targets = [\"keep\"]")
        .replace(&format!("[targets.t1]\nurl = \"{}\"\n", t1.url), "");
    assert!(!without.contains("targets.t1"), "{without}");
    g.rewrite_config(&without);
    let r = client
        .post(g.url("/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    // The answer comes once the old loop has stopped: no attempt after it.
    let attempts = t1.count();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(t1.count(), attempts, "the removed target's loop stopped");
    let states: Vec<(String, i64)> = sqlx::query_as(
        "SELECT state, count(*) FROM hookgate_deliveries WHERE target = 't1' GROUP BY state",
    )
    .fetch_all(
        &mut <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        states,
        vec![("pending".to_owned(), 3)],
        "never dead-lettered"
    );
    let s = stats(&g).await;
    assert_eq!(
        s["unconfigured_targets"]["t1"]["retrying"], 3,
        "reported in /stats: {s}"
    );
    // The kept target delivered everything meanwhile.
    assert_eq!(keep.count(), 3);
}

/// A certificate for 127.0.0.1 (and `localhost`) written as `cert.pem` /
/// `key.pem` in `dir`, issued by a new throwaway CA (a self-signed leaf is
/// refused as its own trust anchor by webpki); the CA's PEM to trust. Made
/// with the openssl CLI (scripts/test.sh installs it).
fn issue_cert(dir: &std::path::Path, cn: &str) -> Vec<u8> {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let ca_subject = format!("/CN={cn} test CA");
    run(&[
        &["req", "-x509"],
        &ec[..],
        &[
            "-days",
            "1",
            "-subj",
            &ca_subject,
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    ]
    .concat());
    let subject = format!("/CN={cn}");
    run(&[
        &["req"],
        &ec[..],
        &["-subj", &subject, "-keyout", "key.pem", "-out", "leaf.csr"],
    ]
    .concat());
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "leaf.ext",
        "-out",
        "cert.pem",
    ]);
    std::fs::read(dir.join("ca.pem")).unwrap()
}

/// A client that trusts only `cert` (no pooled connection is shared
/// between two of them).
fn trusting(cert: &[u8]) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(cert).unwrap()])
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_https_and_a_reload_rereads_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = issue_cert(dir.path(), "hookgate-first");
    let mut opts = Opts::new(Backend::Embedded);
    // Relative to the config file, like every path in it.
    opts.server_extra = "tls_cert = \"cert.pem\"\ntls_key = \"key.pem\"".into();
    let db = TestDb::create(Backend::Embedded).await;
    let mut g = Gateway::start_in(
        dir,
        |addr| opts.toml(&db, "reload-tls", addr),
        &trusting(&first),
        "https",
    )
    .await;
    let url = g.url("/webhooks/stripe");
    assert!(url.starts_with("https://"));
    let r = post_signed(&trusting(&first), &url, STRIPE_SECRET, "evt_tls_1")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(crate::helpers::dedup_header(&r), "new");
    let r = post_signed(&trusting(&first), &url, STRIPE_SECRET, "evt_tls_1")
        .await
        .unwrap();
    assert_eq!(crate::helpers::dedup_header(&r), "duplicate");
    // Plain HTTP is not served on a TLS listener.
    let plain = url.replacen("https://", "http://", 1);
    let r = post_signed(
        &reqwest::Client::new(),
        &plain,
        STRIPE_SECRET,
        "evt_tls_plain",
    )
    .await;
    assert!(r.is_err() || !r.unwrap().status().is_success());

    // A renewed certificate: new files, then a reload.
    let second = issue_cert(g.dir(), "hookgate-second");
    assert_ne!(first, second);
    g.hangup();
    let renewed = eventually(Duration::from_secs(10), || async {
        trusting(&second)
            .get(g.url("/healthz"))
            .send()
            .await
            .is_ok()
    })
    .await;
    assert!(renewed, "new connections get the renewed certificate");
    assert!(
        trusting(&first)
            .get(g.url("/healthz"))
            .send()
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    let r = post_signed(&trusting(&second), &url, STRIPE_SECRET, "evt_tls_2")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // A key that does not load refuses the reload; the served pair stays.
    std::fs::write(g.dir().join("key.pem"), "not a key").unwrap();
    let r = trusting(&second)
        .post(g.url("/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let err: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert!(err["error"].as_str().unwrap().contains("tls_key"), "{err}");
    assert!(
        trusting(&second)
            .get(g.url("/healthz"))
            .send()
            .await
            .is_ok()
    );
    assert!(g.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_the_log_level() {
    // The binary without RUST_LOG (which would override `log_level`), its
    // log in a file.
    let dir = tempfile::tempdir().unwrap();
    let port = crate::helpers::process::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "log_level = \"warn\"".into();
    let db = TestDb::create(Backend::Embedded).await;
    let text = opts.toml(&db, "reload-log", &addr);
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, &text).unwrap();
    let log_path = dir.path().join("log.txt");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    let up = eventually(Duration::from_secs(20), || async {
        client.get(format!("{base}/healthz")).send().await.is_ok()
    })
    .await;
    assert!(up);
    let url = format!("{base}/webhooks/stripe");
    let webhook_lines = || {
        std::fs::read_to_string(&log_path)
            .unwrap()
            .lines()
            .filter(|l| l.contains(" webhook ") || l.contains("webhook source="))
            .count()
    };
    let r = post_signed(&client, &url, STRIPE_SECRET, "evt_quiet")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(webhook_lines(), 0, "INFO lines are off at `warn`");

    std::fs::write(
        &path,
        text.replace("log_level = \"warn\"", "log_level = \"info\""),
    )
    .unwrap();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let on = eventually(Duration::from_secs(10), || async {
        let id = format!("evt_loud_{}", crate::helpers::now());
        post_signed(&client, &url, STRIPE_SECRET, &id)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        webhook_lines() > 0
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        on,
        "INFO lines after the reload: {}",
        std::fs::read_to_string(&log_path).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_a_source_and_an_api_and_removes_a_source() {
    let upstream = TestTarget::start().await;
    let base_url = upstream.url.trim_end_matches("/hook").to_owned();
    // An API needs the admin routes on their own listener (a restart-only
    // setting): it is there from the start, on a port found free.
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin = |path: &str| format!("http://127.0.0.1:{admin_port}{path}");
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = format!("admin_listen = \"127.0.0.1:{admin_port}\"\n");
    let db = TestDb::create(Backend::Embedded).await;
    let (g, text) = gateway(&opts, &db, "reload-sources").await;
    let client = reqwest::Client::new();
    let extra = g.url("/webhooks/extra");
    let api = g.url("/api/pay/hook");
    let post_api = || {
        client
            .post(&api)
            .header("Idempotency-Key", "key-1")
            .body("{}")
            .send()
    };
    let r = post_signed(&client, &extra, STRIPE_SECRET, "evt_extra_0")
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "no such source yet");
    assert_eq!(post_api().await.unwrap().status(), 404, "no such API yet");

    let added = text.replace("[sources.github]", "[sources.removed_later]")
        + &format!(
            "\n[sources.extra]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
             \n[apis.pay]\nupstream = \"{base_url}\"\n"
        );
    // `github` is renamed away: that source is gone after the reload.
    g.rewrite_config(&added);
    let r = client
        .post(admin("/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let r = post_signed(&client, &extra, STRIPE_SECRET, "evt_extra_1")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(crate::helpers::dedup_header(&r), "new");
    let r = post_api().await.unwrap();
    assert_eq!(r.status(), 200, "the added API proxies");
    assert_eq!(upstream.count(), 1);
    let r = client
        .post(g.url("/webhooks/github"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "the removed source is gone");
    // The added source is counted in /stats.
    let s: Value = client
        .get(admin("/stats"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    assert_eq!(s["sources"]["extra"]["unique"], 1, "{s}");
    assert!(s["sources"].get("github").is_none());
}
