//! Running hookgate as an operator does (issue #33): a service started from
//! another directory, commands without webhook secrets, the startup line,
//! check-config's warnings, the console at `/`, `sign --source`, attempt
//! numbers across a replay (upgrades: `upgrade.rs`).

use crate::both_backends;
use crate::helpers::process::free_port;
use crate::helpers::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

both_backends!(attempt_numbers_go_on_after_a_replay);

pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Runs the binary in `cwd` with only `env` added (no DATABASE_URL,
/// REDIS_URL or HOOKGATE_* from the test's own environment).
pub(crate) fn run_in(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hookgate"));
    cmd.args(args).current_dir(cwd);
    for (k, _) in std::env::vars() {
        if k.starts_with("HOOKGATE_") || k == "DATABASE_URL" || k == "REDIS_URL" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The config of the service tests: the ledger a relative SQLite path, the
/// webhook secret from the environment, one target that is not running.
fn service_config(port: u16) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:{port}"
admin_token = "{ADMIN_TOKEN}"
[storage]
database_url = "sqlite://hookgate.db"
[sources.stripe]
provider = "stripe"
secrets = ["env:HOOKGATE_T_OPS_STRIPE"]
targets = ["billing"]
[targets.billing]
url = "http://127.0.0.1:9/hook"
max_attempts = 1
"#
    )
}

/// Starts `hookgate serve` in `cwd` with `config` and `env`; returns the
/// child and its startup line (stderr is drained after it).
async fn serve_startup_line(
    config: &str,
    cwd: &Path,
    env: &[(&str, &str)],
) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["--config", config, "serve"])
        .current_dir(cwd)
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let found = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.contains("hookgate listening"));
        // Keep reading so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        found
    })
    .await
    .unwrap()
    .expect("a startup line");
    (child, line)
}

fn terminate(mut child: std::process::Child) {
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(child.wait().unwrap().success());
}

/// The startup line names a PostgreSQL ledger and a Redis cache without
/// their passwords, and the console on the admin port when there is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_line_names_ledger_and_cache_without_credentials() {
    let db = TestDb::create(Backend::Production).await;
    // The test server trusts loopback: it never asks for the password.
    let with_password = db.url.replacen("://postgres@", "://postgres:pg-pass@", 1);
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    std::fs::write(
        dir.path().join("hookgate.toml"),
        format!(
            r#"
[server]
listen = "127.0.0.1:{port}"
admin_listen = "127.0.0.1:{admin}"
admin_token = "{ADMIN_TOKEN}"
[storage]
database_url = "env:DATABASE_URL"
redis_url = "env:REDIS_URL"
"#
        ),
    )
    .unwrap();
    let config = dir.path().join("hookgate.toml");
    let redis = redis_url().replacen("redis://", "redis://:redis-pass@", 1);
    let (child, line) = serve_startup_line(
        config.to_str().unwrap(),
        dir.path(),
        &[("DATABASE_URL", &with_password), ("REDIS_URL", &redis)],
    )
    .await;
    terminate(child);
    assert!(
        !line.contains("pg-pass") && !line.contains("redis-pass"),
        "{line}"
    );
    assert!(line.contains("ledger=postgres://***@127.0.0.1"), "{line}");
    assert!(
        line.contains("cache=redis standalone redis://***@"),
        "{line}"
    );
    assert!(line.contains("sources=none targets=none"), "{line}");
    assert!(
        line.contains(&format!("console=http://127.0.0.1:{admin}/console/")),
        "{line}"
    );
}

/// A service is started from a directory other than its config's: it opens
/// the ledger beside the config (as `file:` secrets are read), says so in its
/// startup line, and the operator commands, run from a third directory with
/// no webhook secret in their environment, find the same ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_started_elsewhere_uses_the_ledger_beside_its_config() {
    let etc = tempfile::tempdir().unwrap();
    let (elsewhere, shell) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let port = free_port();
    let config = etc.path().join("hookgate.toml");
    std::fs::write(&config, service_config(port)).unwrap();
    let config = config.to_str().unwrap().to_owned();

    let (child, line) = serve_startup_line(
        &config,
        elsewhere.path(),
        &[("HOOKGATE_T_OPS_STRIPE", STRIPE_SECRET)],
    )
    .await;
    let ledger = format!("sqlite://{}/hookgate.db", etc.path().display());
    for part in [
        format!("ledger={ledger}"),
        "cache=in-process".to_owned(),
        "sources=stripe".to_owned(),
        "targets=billing".to_owned(),
        format!("console=http://127.0.0.1:{port}/console/"),
    ] {
        assert!(line.contains(&part), "{part} not in: {line}");
    }

    let body = stripe_body("evt_ops_elsewhere");
    let r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/webhooks/stripe"))
        .header("content-type", "application/json")
        .headers(
            signers::stripe(STRIPE_SECRET, now(), &body)
                .into_iter()
                .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                .collect(),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(dedup_header(&r), "new");
    terminate(child);

    assert!(etc.path().join("hookgate.db").exists());
    assert!(!elsewhere.path().join("hookgate.db").exists());
    // No HOOKGATE_T_OPS_STRIPE here: these commands never verify anything.
    let (ok, out, err) = run_in(
        &["--config", &config, "events", "list", "--json"],
        shell.path(),
        &[],
    );
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["items"][0]["event_id"], "evt_ops_elsewhere", "{out}");
    for args in [&["migrate"][..], &["replay"], &["events", "list"]] {
        let all = [&["--config", config.as_str()][..], args].concat();
        let (ok, _, err) = run_in(&all, shell.path(), &[]);
        assert!(ok, "{args:?}: {err}");
    }
    assert!(!shell.path().join("hookgate.db").exists());
    // What needs the secret still says it is missing.
    let (ok, _, err) = run_in(&["--config", &config, "check-config"], shell.path(), &[]);
    assert!(!ok && err.contains("HOOKGATE_T_OPS_STRIPE"), "{err}");
}

/// Settings that load but are probably mistakes are named, once each.
#[test]
fn check_config_warns_about_a_source_without_targets_and_no_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hookgate.toml"),
        "[sources.gh]\nprovider = \"github\"\nsecrets = [\"s\"]\n\
         [sources.st]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\ntargets = [\"t\"]\n\
         [targets.t]\nurl = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    let (ok, _, err) = run_in(&["check-config"], dir.path(), &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: `sources.gh.targets` is empty"),
        "{err}"
    );
    assert!(!err.contains("sources.st.targets"), "{err}");
    assert!(
        err.contains("warning: `server.admin_token` is not set"),
        "{err}"
    );

    std::fs::write(
        dir.path().join("hookgate.toml"),
        "[server]\nadmin_token = \"a-long-admin-token\"\n\
         [sources.st]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\ntargets = [\"t\"]\n\
         [targets.t]\nurl = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    let (ok, _, err) = run_in(&["check-config"], dir.path(), &[]);
    assert!(ok, "{err}");
    assert!(!err.contains("warning"), "{err}");
}

/// `GET /` leads to the console on the listener that serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_url_leads_to_the_console() {
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let r = no_redirects.get(app.url("/")).send().await.unwrap();
    assert!(r.status().is_redirection(), "{}", r.status());
    assert_eq!(r.headers()["location"], "/console/");
    let page = reqwest::get(app.url("/")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));

    // With an admin port, the console is there and not on the public port.
    let mut opts = Opts::new(Backend::Embedded);
    opts.admin_listen = true;
    let app = spawn_app(opts).await;
    let public = no_redirects.get(app.url("/")).send().await.unwrap();
    assert_eq!(public.status(), 404);
    let admin = format!("http://{}/", app.admin_addr.unwrap());
    let r = no_redirects.get(admin).send().await.unwrap();
    assert_eq!(r.headers()["location"], "/console/");
}

/// `sign --source` signs with the configured source's secret, sends to its
/// URL on the listen address, and adds GitHub's and Shopify's event-type
/// headers; the gateway accepts each and stores the type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_with_a_source_takes_its_secret_url_and_event_type_header() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let dir = tempfile::tempdir().unwrap();
    // The gateway's own sources and secrets; its address as `listen`.
    std::fs::write(
        dir.path().join("hookgate.toml"),
        format!(
            "[server]\nlisten = \"{}\"\n\
             [sources.github]\nprovider = \"github\"\nsecrets = [\"env:HOOKGATE_T_GH\"]\n\
             [sources.shopify]\nprovider = \"shopify\"\nsecrets = [\"{SHOPIFY_SECRET}\"]\n",
            app.addr
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("event.json"), br#"{"action":"opened"}"#).unwrap();
    for (source, event_type, header, stored) in [
        (
            "github",
            "pull_request",
            "x-github-event",
            "pull_request.opened",
        ),
        (
            "shopify",
            "orders/create",
            "x-shopify-topic",
            "orders/create",
        ),
    ] {
        let id = format!("ops-sign-{source}");
        let (ok, out, err) = run_in(
            &[
                "sign",
                "--source",
                source,
                "--event-type",
                event_type,
                "--event-id",
                &id,
                "--body",
                "event.json",
            ],
            dir.path(),
            &[("HOOKGATE_T_GH", GITHUB_SECRET)],
        );
        assert!(ok, "{err}");
        assert!(!out.contains(GITHUB_SECRET) && !out.contains(SHOPIFY_SECRET));
        let headers: Vec<(String, String)> = out
            .lines()
            .take_while(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        assert!(
            headers.contains(&(header.to_owned(), event_type.to_owned())),
            "{out}"
        );
        let curl = out.lines().last().unwrap();
        let url = app.url(&format!("/webhooks/{source}"));
        assert!(curl.contains(&format!("'{url}'")), "{curl}");
        let r = app.post(source, &headers, br#"{"action":"opened"}"#).await;
        assert_eq!(r.status(), 200, "{source}: {}", r.text().await.unwrap());
        let rec = admin_json(&app, &format!("/admin/events/{source}/{id}")).await;
        assert_eq!(rec["type"], stored, "{rec}");
    }
    // An unknown source is named with the configured ones.
    let (ok, _, err) = run_in(
        &["sign", "--source", "nope", "--body", "event.json"],
        dir.path(),
        &[("HOOKGATE_T_GH", GITHUB_SECRET)],
    );
    assert!(!ok && err.contains("unknown source `nope`") && err.contains("github"));
}

pub(crate) async fn admin_json(app: &TestApp, path: &str) -> Value {
    serde_json::from_str(&admin_get(&app.client, &app.url(path)).await).unwrap()
}

/// Replays `event_id` through the admin API; the number replayed.
pub(crate) async fn replay(app: &TestApp, event_id: &str) -> Value {
    let r = app
        .client
        .post(app.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(json!({ "event_id": event_id }).to_string())
        .send()
        .await
        .unwrap();
    let doc: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    doc["replayed"].clone()
}

/// The numbers of the attempts recorded for `target`, and those the
/// target saw in `Hookgate-Attempt`.
pub(crate) async fn numbers(
    app: &TestApp,
    path: &str,
    target: &TestTarget,
) -> (Vec<i64>, Vec<String>) {
    let rec = admin_json(app, path).await;
    let recorded = rec["attempts"]["down"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["attempt"].as_i64().unwrap())
        .collect();
    let sent = target
        .received()
        .iter()
        .map(|r| r.headers["hookgate-attempt"].to_str().unwrap().to_owned())
        .collect();
    (recorded, sent)
}

/// A replay gives a dead delivery a fresh retry budget, and its attempts
/// are numbered on from the last one: in the record, and in the
/// `Hookgate-Attempt` header the target sees.
async fn attempt_numbers_go_on_after_a_replay(b: Backend) {
    let down = TestTarget::start().await;
    down.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["down".into()];
    opts.extra = format!("[targets.down]\nurl = \"{}\"\nmax_attempts = 2\n", down.url);
    let app = spawn_app(opts).await;
    assert_eq!(
        dedup_header(&app.post_stripe("evt_ops_attempts").await),
        "new"
    );
    let path = "/admin/events/stripe/evt_ops_attempts";
    let dead = || async { admin_json(&app, path).await["deliveries"][0]["state"] == "dead" };
    assert!(eventually(WAIT, dead).await);
    assert_eq!(down.count(), 2);

    assert_eq!(replay(&app, "evt_ops_attempts").await, 1);
    // Two more attempts (the budget starts again), then dead again.
    assert!(eventually(WAIT, || async { down.count() == 4 }).await);
    assert!(eventually(WAIT, dead).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (recorded, sent) = numbers(&app, path, &down).await;
    assert_eq!(recorded, [1, 2, 3, 4]);
    assert_eq!(sent, ["1", "2", "3", "4"]);
    assert_eq!(down.count(), 4, "dead after the new budget, not before");
}
