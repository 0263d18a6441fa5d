//! `hookgate backup` and `hookgate restore` (issue #33): an online copy of
//! the SQLite ledger taken while a load is being ingested, restored in place
//! of the ledger, holds every event acknowledged before the backup began; a
//! restore refuses a ledger a gateway still has open; a PostgreSQL ledger is
//! pointed at pg_dump.

use crate::helpers::*;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `hookgate --config <config> backup <file>`, with no webhook secret in
/// the environment (the config names one that is unset).
fn backup(config: &Path, file: &Path) -> (bool, String, String) {
    command(config, "backup", file)
}

fn restore(config: &Path, file: &Path) -> (bool, String, String) {
    command(config, "restore", file)
}

fn command(config: &Path, name: &str, file: &Path) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("--config")
        .arg(config)
        .arg(name)
        .arg(file)
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .env_remove("HOOKGATE_T_BACKUP_UNSET")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn config_for(dir: &Path, database_url: &str) -> std::path::PathBuf {
    let path = dir.join("hookgate.toml");
    std::fs::write(
        &path,
        format!(
            "[storage]\ndatabase_url = \"{database_url}\"\n\
             [sources.stripe]\nprovider = \"stripe\"\nsecrets = [\"env:HOOKGATE_T_BACKUP_UNSET\"]\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_ingesting_restores_every_event_acked_before_it() {
    let app = Arc::new(spawn_app(Opts::new(Backend::Embedded)).await);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (app, acked, stop) = (app.clone(), acked.clone(), stop.clone());
        senders.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("evt_backup_{w}_{n}");
                n += 1;
                let r = app.post_stripe(&id).await;
                if r.status() == 200 {
                    acked.lock().unwrap().push(id);
                }
            }
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(dir.path(), &app.db.url);
    let file = dir.path().join("ledger-backup.db");
    let busy = |n: usize| {
        let acked = acked.clone();
        async move {
            let t = Instant::now();
            while acked.lock().unwrap().len() < n {
                assert!(t.elapsed() < Duration::from_secs(60), "load too slow");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    busy(300).await;

    // Acked before the backup began: each answer came after its commit.
    let before: Vec<String> = acked.lock().unwrap().clone();
    let (config2, file2) = (config.clone(), file.clone());
    let (ok, out, err) = tokio::task::spawn_blocking(move || backup(&config2, &file2))
        .await
        .unwrap();
    let during_and_after = acked.lock().unwrap().len();
    busy(during_and_after + 100).await;
    stop.store(true, Ordering::Relaxed);
    while senders.join_next().await.is_some() {}
    assert!(ok, "{err}");
    assert!(out.starts_with("backed up sqlite://"), "{out}");
    assert!(!dir.path().join("ledger-backup.db.partial").exists());
    let total = acked.lock().unwrap().len();
    assert!(
        total > before.len() + 100,
        "the load went on after the backup"
    );

    // A second backup never overwrites the first.
    let (ok, _, err) = backup(&config, &file);
    assert!(!ok && err.contains("already exists"), "{err}");

    // Not while a gateway has the ledger open.
    let (ok, _, err) = restore(&config, &file);
    assert!(!ok && err.contains("in use"), "{err}");

    // The gateway stopped, the backup put in place of its ledger, a gateway
    // started on it.
    let app = Arc::into_inner(app).expect("senders are done");
    let db = app.stop().await;
    let (ok, out, err) = restore(&config, &file);
    assert!(ok, "{err}");
    assert!(out.contains("kept as"), "{out}");
    let kept = std::fs::read_dir(
        Path::new(db.url.trim_start_matches("sqlite://"))
            .parent()
            .unwrap(),
    )
    .unwrap()
    .filter_map(Result::ok)
    .any(|e| e.file_name().to_string_lossy().contains(".before-restore-"));
    assert!(kept, "the replaced ledger is kept");
    let app = spawn_on(Opts::new(Backend::Embedded), db, unique_prefix()).await;
    let mut seen = HashSet::new();
    for id in &before {
        let r = app.post_stripe(id).await;
        assert_eq!(dedup_header(&r), "duplicate", "{id} lost by the backup");
        seen.insert(id.clone());
    }
    assert_eq!(seen.len(), before.len());
    let stored: i64 = {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        sqlx::query_scalar("SELECT COUNT(*) FROM hookgate_events")
            .fetch_one(&mut c)
            .await
            .unwrap()
    };
    assert!(
        stored as usize >= before.len() && (stored as usize) <= total,
        "{stored} events in the copy; {} acked before, {total} in all",
        before.len()
    );
    assert_eq!(
        dedup_header(&app.post_stripe("evt_backup_new").await),
        "new"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_of_a_postgresql_ledger_points_at_pg_dump() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(dir.path(), "postgres://app:pg-secret@127.0.0.1:5432/hooks");
    let (ok, _, err) = backup(&config, &dir.path().join("x.db"));
    assert!(!ok);
    assert!(
        err.contains("pg_dump") && err.contains("PostgreSQL"),
        "{err}"
    );
    assert!(!err.contains("pg-secret"), "{err}");
    assert!(!dir.path().join("x.db").exists());
    std::fs::write(dir.path().join("x.db"), "").unwrap();
    let (ok, _, err) = restore(&config, &dir.path().join("x.db"));
    assert!(
        !ok && err.contains("pg_restore") && !err.contains("pg-secret"),
        "{err}"
    );
}

/// A file that is not a hookgate ledger is refused, and the ledger stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_file_that_is_not_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("hookgate.db");
    let config = config_for(dir.path(), &format!("sqlite://{}", ledger.display()));
    let (ok, _, err) = crate::cli::hookgate(
        &["--config", config.to_str().unwrap(), "migrate"],
        dir.path(),
    );
    assert!(ok, "{err}");
    let before = std::fs::read(&ledger).unwrap();
    for junk in ["not a database", ""] {
        std::fs::write(dir.path().join("notes.txt"), junk).unwrap();
        let (ok, _, err) = restore(&config, &dir.path().join("notes.txt"));
        assert!(!ok, "{err}");
        assert_eq!(std::fs::read(&ledger).unwrap(), before);
        assert!(!dir.path().join("hookgate.db.restoring").exists());
    }
}
