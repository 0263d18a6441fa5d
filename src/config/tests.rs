//! Config loading and validation; no test touches the process environment
//! except through figment's `Jail`.

use super::*;

const GOOD: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_token = "tok"

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
    assert!(c.targets["billing"].signing_key.is_some());
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
    assert!(!dbg.contains("\"tok\""));
}

#[test]
fn redact_url_hides_credentials() {
    assert_eq!(
        redact_url("postgres://u:pw@db:5432/x"),
        "postgres://***@db:5432/x"
    );
    assert_eq!(redact_url("redis://127.0.0.1"), "redis://127.0.0.1");
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment::Jail's closure returns figment::Error"
)]
fn file_and_environment_layers_with_errors_naming_the_file() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("hookgate.toml", GOOD)?;
        jail.set_env("HOOKGATE_SERVER__MAX_BODY_BYTES", "2048");
        jail.set_env("HOOKGATE_ADMIN_TOKEN", "used-by-env-reference");
        let c = Config::load(Some(Path::new("hookgate.toml"))).unwrap();
        assert_eq!(c.server.max_body_bytes, 2048);

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
