//! `hookgate events list|show|redeliver` and `hookgate replay` with filters,
//! run as a user would, on the ledger a gateway wrote.

use crate::helpers::*;
use std::time::Duration;

/// `hookgate --config <config> <args…>`.
fn hookgate(args: &[&str], config: &std::path::Path) -> (bool, String, String) {
    let dir = config.parent().unwrap_or(std::path::Path::new("."));
    let mut all = vec!["--config", config.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    crate::cli::hookgate(&all, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_shows_redelivers_and_replays_with_filters() {
    let down = TestTarget::start().await;
    down.always(Some(500));
    let mut opts = Opts::new(Backend::Embedded);
    opts.stripe_targets = vec!["down".into()];
    opts.extra = format!("[targets.down]\nurl = \"{}\"\nmax_attempts = 1\n", down.url);
    let app = spawn_app(opts).await;
    for id in ["evt_cli_a1", "evt_cli_a2", "evt_cli_b1"] {
        app.post_stripe(id).await;
    }
    assert!(eventually(Duration::from_secs(15), || async { down.count() == 3 }).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let db = app.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookgate.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ndatabase_url = \"{}\"\n[sources.stripe]\nprovider = \"stripe\"\n\
             secrets = [\"{STRIPE_SECRET}\"]\ntargets = [\"down\"]\n\
             [targets.down]\nurl = \"{}\"\n",
            db.url, down.url
        ),
    )
    .unwrap();

    let (ok, out, err) = hookgate(&["events", "list", "--q", "evt_cli_a", "--json"], &config);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["items"].as_array().unwrap().len(), 2, "{out}");
    // Relative times: all three arrived within the last hour, none before it.
    let (ok, out, err) = hookgate(&["events", "list", "--since", "1h", "--json"], &config);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["items"].as_array().unwrap().len(), 3, "{out}");
    let (ok, out, err) = hookgate(&["events", "list", "--until", "1h", "--json"], &config);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["items"].as_array().unwrap().len(), 0, "{out}");
    let (ok, out, _) = hookgate(&["events", "list", "--state", "dead"], &config);
    assert!(
        ok && out.contains("evt_cli_b1") && out.contains("down=dead(1)"),
        "{out}"
    );
    let (ok, out, _) = hookgate(&["events", "list", "--state", "lost"], &config);
    assert!(!ok, "{out}");

    let (ok, out, err) = hookgate(&["events", "show", "stripe", "evt_cli_a1"], &config);
    assert!(ok, "{err}");
    assert!(
        out.contains("\"[redacted]\"") && !out.contains("v1="),
        "{out}"
    );
    let (ok, _, err) = hookgate(&["events", "show", "stripe", "evt_nope"], &config);
    assert!(!ok && err.contains("unknown event"), "{err}");

    let (ok, out, err) = hookgate(&["replay", "--q", "evt_cli_a"], &config);
    assert!(ok, "{err}");
    assert!(out.contains("replayed 2 dead deliveries"), "{out}");
    let (ok, out, err) = hookgate(
        &[
            "events",
            "redeliver",
            "stripe",
            "evt_cli_b1",
            "--target",
            "down",
        ],
        &config,
    );
    assert!(ok, "{err}");
    assert!(out.contains("queued 1"), "{out}");
    let (ok, out, _) = hookgate(&["events", "list", "--state", "dead"], &config);
    assert!(
        ok && !out.contains("evt_cli"),
        "nothing dead any more: {out}"
    );
}
