//! What a reload may change live, what needs a restart, and the settings
//! that come with reload (digest, TLS files, log level).

use super::*;

const BASE: &str = r#"
[server]
listen = "127.0.0.1:8080"
admin_token = "tok"
log_level = "info"

[storage]
database_url = "sqlite://one.db"

[sources.stripe]
provider = "stripe"
secrets = ["whsec_a"]
targets = ["billing"]

[targets.billing]
url = "http://127.0.0.1:9/hook"
signing_secret = "whsec_aGVsbG8="
"#;

fn load(text: &str) -> Config {
    Config::from_toml_str(text, Path::new(".")).unwrap()
}

#[test]
fn the_digest_names_the_text() {
    let a = load(BASE);
    assert_eq!(a.digest.len(), 12);
    assert_eq!(a.digest, load(BASE).digest);
    assert_ne!(a.digest, load(&format!("{BASE}\n# edited\n")).digest);
}

#[test]
fn restart_only_settings_keep_their_running_value_and_are_named() {
    let running = load(BASE);
    let edited = BASE
        .replace("127.0.0.1:8080", "0.0.0.0:9000")
        .replace("sqlite://one.db", "sqlite://two.db")
        .replace("whsec_a", "whsec_rotated")
        .replace("log_level = \"info\"", "log_level = \"debug\"");
    let mut new = load(&edited);
    let changed = new.keep_restart_only(&running);
    assert_eq!(changed, vec!["server.listen", "storage.database_url"]);
    // Put back: the running process keeps its listener and ledger.
    assert_eq!(new.server.listen, running.server.listen);
    assert_eq!(
        new.storage.database.display(),
        running.storage.database.display()
    );
    assert!(new.storage.database.display().ends_with("one.db"));
    // Applied: the live settings come from the new file.
    assert_eq!(new.server.log_level, "debug");
    assert_ne!(
        new.sources["stripe"].keys[0].bytes(),
        running.sources["stripe"].keys[0].bytes()
    );
    // The same file again changes nothing that needs a restart.
    assert!(load(BASE).keep_restart_only(&running).is_empty());
}

#[test]
fn a_target_is_the_same_only_when_every_setting_and_its_key_are() {
    let a = load(BASE);
    let same = load(BASE);
    assert!(a.targets["billing"].same_as(&same.targets["billing"]));
    let rekeyed = load(&BASE.replace("whsec_aGVsbG8=", "whsec_d29ybGQ="));
    assert!(!a.targets["billing"].same_as(&rekeyed.targets["billing"]));
    let moved = load(&BASE.replace("127.0.0.1:9/hook", "127.0.0.1:10/hook"));
    assert!(!a.targets["billing"].same_as(&moved.targets["billing"]));
}

#[test]
fn tls_needs_both_files_and_they_must_exist() {
    let with = |lines: &str| BASE.replace("log_level = \"info\"", lines);
    let p = Config::from_toml_str(&with("tls_cert = \"c.pem\""), Path::new("."))
        .unwrap_err()
        .problems;
    assert_eq!(p[0].0, "server.tls_key");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.pem"), "x").unwrap();
    let p = Config::from_toml_str(
        &with("tls_cert = \"c.pem\"\ntls_key = \"k.pem\""),
        dir.path(),
    )
    .unwrap_err()
    .problems;
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, "server.tls_key");
    assert!(p[0].1.contains("not found"), "{p:?}");
    std::fs::write(dir.path().join("k.pem"), "x").unwrap();
    let c = Config::from_toml_str(
        &with("tls_cert = \"c.pem\"\ntls_key = \"k.pem\""),
        dir.path(),
    )
    .unwrap();
    // Relative to the config file's directory.
    assert_eq!(c.server.tls.unwrap().cert, dir.path().join("c.pem"));
}

#[test]
fn a_log_level_that_is_no_filter_is_refused() {
    let p = Config::from_toml_str(
        &BASE.replace("log_level = \"info\"", "log_level = \"info,[\""),
        Path::new("."),
    )
    .unwrap_err()
    .problems;
    assert_eq!(p[0].0, "server.log_level");
}
