//! Catalogue providers through a running gateway, one of each kind the
//! hmac model gained: several signature headers (Box, DocuSign), a signature
//! inside the body (Mailgun), a named preset (Clerk on Standard Webhooks,
//! Postmark on basic) and a bare token (GitLab). Signatures are computed
//! here from the providers' docs, not by hookgate.

use super::{Headers, h, hex256, send};
use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

const EXTRA: &str = r#"
[sources.box]
provider = "box"
secrets = ["box-secondary"]

[sources.docusign]
provider = "docusign"
secrets = ["ds-new"]

[sources.mailgun]
provider = "mailgun"
secrets = ["mg-key"]

[sources.clerk]
provider = "clerk"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]

[sources.postmark]
provider = "postmark"
secrets = ["hook:pm-pass"]

[sources.gitlab]
provider = "gitlab"
secrets = ["gl-token"]
"#;

fn status_dedup(r: (u16, String, String)) -> (u16, String) {
    (r.0, r.2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogue_presets_verify_and_dedup_over_http() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = EXTRA.into();
    let app = spawn_app(opts).await;
    let new = (200, "new".to_owned());
    let dup = (200, "duplicate".to_owned());

    // Box: only the secondary key configured; a retry has a new
    // BOX-DELIVERY-ID and the same body `id`, so it is a duplicate.
    let body = br#"{"type":"webhook_event","id":"box-evt-1","trigger":"FILE.UPLOADED"}"#;
    let ts = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let sig = |key: &[u8]| B64.encode(signers::hmac256(key, &[&body[..], ts.as_bytes()].concat()));
    let box_req = |delivery: &str| -> Headers {
        h(&[
            ("BOX-DELIVERY-ID", delivery),
            ("BOX-DELIVERY-TIMESTAMP", &ts),
            ("BOX-SIGNATURE-PRIMARY", &sig(b"box-primary")),
            ("BOX-SIGNATURE-SECONDARY", &sig(b"box-secondary")),
        ])
    };
    assert_eq!(
        status_dedup(send(&app, "box", &box_req("d-1"), body).await),
        new
    );
    assert_eq!(
        status_dedup(send(&app, "box", &box_req("d-2"), body).await),
        dup
    );
    assert_eq!(app.rows("box", "box-evt-1").await, 1);

    // DocuSign: the configured key signed the second numbered header.
    let body = br#"{"event":"envelope-sent","configurationId":1,"generatedDateTime":"2024-01-01T00:00:00Z","data":{"envelopeId":"E-HTTP"}}"#;
    let ds = |key: &[u8]| B64.encode(signers::hmac256(key, body));
    let hdr = h(&[
        ("X-DocuSign-Signature-1", &ds(b"ds-old")),
        ("X-DocuSign-Signature-2", &ds(b"ds-new")),
    ]);
    assert_eq!(status_dedup(send(&app, "docusign", &hdr, body).await), new);
    let only_old = h(&[("X-DocuSign-Signature-1", &ds(b"ds-old"))]);
    assert_eq!(send(&app, "docusign", &only_old, body).await.0, 401);

    // Mailgun: the signature is in the JSON body.
    let (t, token) = (now().to_string(), "tok-http-1");
    let mg = hex256(b"mg-key", format!("{t}{token}").as_bytes());
    let body = format!(
        r#"{{"signature":{{"timestamp":"{t}","token":"{token}","signature":"{mg}"}},"event-data":{{"id":"mg-http-1","event":"delivered"}}}}"#
    );
    assert_eq!(
        status_dedup(send(&app, "mailgun", &vec![], body.as_bytes()).await),
        new
    );
    let forged = body.replace(token, "tok-http-2");
    assert_eq!(
        send(&app, "mailgun", &vec![], forged.as_bytes()).await.0,
        401
    );
    assert_eq!(app.rows("mailgun", "mg-http-1").await, 1);

    // Clerk: Standard Webhooks under Svix's header names.
    let key = B64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let body = br#"{"type":"user.created","data":{"id":"user_1"}}"#;
    let t = now().to_string();
    let msg = [format!("msg_http_1.{t}.").as_bytes(), &body[..]].concat();
    let sig = format!("v1,{}", B64.encode(signers::hmac256(&key, &msg)));
    let hdr = h(&[
        ("svix-id", "msg_http_1"),
        ("svix-timestamp", &t),
        ("svix-signature", &sig),
    ]);
    assert_eq!(status_dedup(send(&app, "clerk", &hdr, body).await), new);
    assert_eq!(status_dedup(send(&app, "clerk", &hdr, body).await), dup);

    // Postmark: unsigned; Basic credentials from the registered URL.
    let body = br#"{"RecordType":"Bounce","MessageID":"pm-1","ID":42}"#;
    let auth = |c: &str| h(&[("Authorization", &format!("Basic {}", B64.encode(c)))]);
    assert_eq!(
        status_dedup(send(&app, "postmark", &auth("hook:pm-pass"), body).await),
        new
    );
    assert_eq!(
        send(&app, "postmark", &auth("hook:nope"), body).await.0,
        401
    );
    assert_eq!(app.rows("postmark", "Bounce:pm-1:42").await, 1);

    // GitLab: the token itself; Idempotency-Key is the id across retries.
    let body = br#"{"object_kind":"push"}"#;
    let hdr = h(&[
        ("X-Gitlab-Token", "gl-token"),
        ("Idempotency-Key", "gl-idem-1"),
    ]);
    assert_eq!(status_dedup(send(&app, "gitlab", &hdr, body).await), new);
    assert_eq!(status_dedup(send(&app, "gitlab", &hdr, body).await), dup);
    let bad = h(&[
        ("X-Gitlab-Token", "gl-tokeN"),
        ("Idempotency-Key", "gl-idem-2"),
    ]);
    assert_eq!(send(&app, "gitlab", &bad, body).await.0, 401);
}
