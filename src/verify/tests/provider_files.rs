//! Provider files as written: what a malformed file is refused for, what
//! a source may override, and what a `preset` file inherits.

use crate::primitives::crypto::Algorithm;
use crate::verify::provider::{Provider, SourceOverrides};
use crate::verify::spec::{EventIdSpec, OneOrMany, SignatureOverrides};
const BASE: &str = r#"
    name = "x"
    title = "X"
    [signature]
    header = "x-sig"
    algorithm = "hmac-sha256"
    encoding = "hex"
    signed_content = "{body}"
    [event_id]
    from = "json:/id"
"#;

#[test]
fn bad_provider_files_are_rejected_with_a_reason() {
    assert!(Provider::from_toml(BASE).is_ok());
    let e = Provider::from_toml(&BASE.replace("{body}", "{timestamp}.{body}")).unwrap_err();
    assert!(e.contains("[timestamp] is missing"), "{e}");
    let e = Provider::from_toml(&BASE.replace("hex", "hexx")).unwrap_err();
    assert!(e.contains("unknown variant"), "{e}");
    let e = Provider::from_toml(&BASE.replace("json:/id", "json:id")).unwrap_err();
    assert!(e.contains("must start with `/`"), "{e}");
    let e = Provider::from_toml(&BASE.replace("hmac-sha256", "md5")).unwrap_err();
    assert!(e.contains("hmac-* algorithm"), "{e}");
    let e = Provider::from_toml(&BASE.replace("from = \"json:/id\"", "")).unwrap_err();
    assert!(e.contains("event_id needs"), "{e}");
    let e = Provider::from_toml(&BASE.replace("\"x-sig\"", "\"x-sig-*\"")).unwrap_err();
    assert!(e.contains("every_header"), "{e}");
    let token = BASE.replace(
        "header = \"x-sig\"",
        "scheme = \"basic\"\nfrom = \"json:/s\"",
    );
    let e = Provider::from_toml(&token).unwrap_err();
    assert!(e.contains("signature.from"), "{e}");
    let open_learn = format!(
        "{BASE}\n[[control]]\nwhen = \"header:x-hook-secret\"\nsigned = false\nlearn = \"header:x-hook-secret\"\n"
    );
    let e = Provider::from_toml(&open_learn).unwrap_err();
    assert!(e.contains("`learn` needs a `token`"), "{e}");
    let split = format!("{BASE}\n[split]\nitems = \"json:/a/*\"\n");
    let e = Provider::from_toml(&split).unwrap_err();
    assert!(e.contains("split"), "{e}");
}

#[test]
fn a_preset_is_the_base_of_a_file_and_ids_are_replaced_whole() {
    let file = |preset: &str| {
        format!(
            "preset = \"{preset}\"\nname = \"acme\"\ntitle = \"Acme\"\n\
             [signature]\nheader = \"webhook-signature\"\n\
             [event_id]\ncomposite = [\"json:/a\"]\n"
        )
    };
    let p = Provider::from_toml(&file("standard-webhooks")).unwrap();
    // Kept from the preset: the scheme's layout, key, template, window.
    assert_eq!(p.signature.headers, vec!["webhook-signature"]);
    assert_eq!(p.signature.secret_prefixes, vec!["v1,whsec_", "whsec_"]);
    assert!(p.timestamp.is_some());
    // Not kept: the naming keys, and the preset's id rule.
    assert_eq!((p.name.as_str(), p.docs.as_str()), ("acme", ""));
    assert!(p.event_id.from.is_none() && p.event_id.composite.len() == 1);
    let e = Provider::from_toml(&file("no-such")).unwrap_err();
    assert!(e.contains("not a built-in provider"), "{e}");
    // A preset of a preset is refused (`clerk` is one).
    let e = Provider::from_toml(&file("clerk")).unwrap_err();
    assert!(e.contains("has a preset itself"), "{e}");
}

#[test]
fn overrides_replace_signature_fields_and_are_checked() {
    let p = Provider::from_toml(BASE).unwrap();
    let o = SignatureOverrides {
        header: Some(OneOrMany::One("X-Other".into())),
        algorithm: Some(Algorithm::HmacSha512),
        ..Default::default()
    };
    let c = p
        .customized(&SourceOverrides {
            signature: Some(&o),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(c.signature.headers, vec!["x-other"]);
    assert_eq!(c.signature.algorithm, Algorithm::HmacSha512);
    let bad = SignatureOverrides {
        signed_content: Some("{nope".into()),
        ..Default::default()
    };
    assert!(
        p.customized(&SourceOverrides {
            signature: Some(&bad),
            ..Default::default()
        })
        .is_err()
    );
    let id = EventIdSpec {
        body_hash: true,
        ..Default::default()
    };
    let c = p
        .customized(&SourceOverrides {
            event_id: Some(&id),
            ..Default::default()
        })
        .unwrap();
    assert!(c.event_id.from.is_none() && c.event_id.body_hash);
}
