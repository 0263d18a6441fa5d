//! Signed canonical requests (`canonical` scheme: Contentful, HubSpot v3)
//! and HubSpot's older v1/v2 signatures (`hmac` templates). Vectors:
//! HubSpot's own v1 and v2 examples from its docs pages; the others made as
//! the docs describe, the canonical text written out here by hand (Contentful's
//! node-apps-toolkit `verifyRequest` and @hubspot/api-client's
//! `Signature.isValid` check them offline).

use super::payments::{NOW, pairs};
use super::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

const HUBSPOT_SECRET: &str = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy";
const HUBSPOT_BODY: &str = r#"[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]"#;
const CF_SECRET: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn with_url(provider: &str, secret: &str, url: &str) -> Arc<Source> {
    source_with(provider, &[secret], |s| s.public_url = Some(url.into()))
}

fn hmac_hex(key: &str, text: &str) -> String {
    hex::encode(crypto::Algorithm::HmacSha256.mac(key.as_bytes(), &[text.as_bytes()]))
}

#[test]
fn hubspot_v1_docs_example_verifies() {
    let src = source("hubspot-v1", &[HUBSPOT_SECRET]);
    let sig = "232db2615f3d666fe21a8ec971ac7b5402d33b9a925784df3ca654d05f4817de";
    let v = check(&src, &[("X-HubSpot-Signature", sig)], HUBSPOT_BODY, NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "1");
    let other = source("hubspot-v1", &["zzzzzzzz-yyyy-yyyy-yyyy-yyyyyyyyyyyy"]);
    assert_eq!(
        check(&other, &[("X-HubSpot-Signature", sig)], HUBSPOT_BODY, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn hubspot_v2_docs_example_and_a_post_made_as_described() {
    // The page's example is a GET; events arrive by POST, so the provider
    // file signs `POST`. The GET example goes through the same engine with
    // the method overridden by a source.
    let base = Registry::builtin().get("hubspot-v2").unwrap();
    let get = Arc::new(
        base.customized(&crate::verify::provider::SourceOverrides {
            signature: Some(&spec::SignatureOverrides {
                signed_content: Some("{secret}GET{url}{body}".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap(),
    );
    let key = get.signing_key(&Secret::new(HUBSPOT_SECRET)).unwrap();
    let src = source_with("hubspot-v2", &[], |s| {
        s.provider = get;
        s.keys = vec![key];
        s.public_url = Some("https://www.example.com/webhook_uri".into());
    });
    let sig = "eee2dddcc73c94d699f5e395f4b9d454a069a6855fbfa152e91e88823087200e";
    match check(&src, &[("X-HubSpot-Signature", sig)], "", NOW) {
        Ok(_) => {}
        Err(e) => assert!(!e.is_authenticity(), "the docs' GET vector: {e:?}"),
    }

    let url = "https://www.example.com/webhook_uri";
    let src = with_url("hubspot-v2", HUBSPOT_SECRET, url);
    let text = format!("{HUBSPOT_SECRET}POST{url}{HUBSPOT_BODY}");
    let sig = hex::encode(crypto::Algorithm::Sha256.digest(&[text.as_bytes()]));
    let v = check(&src, &[("X-HubSpot-Signature", &sig)], HUBSPOT_BODY, NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "1");
}

#[test]
fn hubspot_v3_signs_method_decoded_url_body_and_timestamp() {
    let public = "https://hooks.example.com/webhooks/hubspot?portal=62515&cb=a%3Ab%2Fc";
    let src = with_url("hubspot", HUBSPOT_SECRET, public);
    let ts = (NOW * 1000).to_string();
    // HubSpot decodes %3A and %2F before signing.
    let text = format!(
        "POSThttps://hooks.example.com/webhooks/hubspot?portal=62515&cb=a:b/c{HUBSPOT_BODY}{ts}"
    );
    let sig = B64
        .encode(crypto::Algorithm::HmacSha256.mac(HUBSPOT_SECRET.as_bytes(), &[text.as_bytes()]));
    let h = [
        ("X-HubSpot-Signature-v3", sig.as_str()),
        ("X-HubSpot-Request-Timestamp", ts.as_str()),
    ];
    // The request's own query is what is signed (public_url's base + it).
    let mut hm = headers(&h);
    let query = Some("portal=62515&cb=a%3Ab%2Fc");
    let url_src = source_with("hubspot", &[HUBSPOT_SECRET], |s| {
        s.public_url = Some("https://hooks.example.com/webhooks/hubspot".into())
    });
    for (src, q) in [(&src, None), (&url_src, query)] {
        let Checked::Event(v) = run(src, &hm, Bytes::from(HUBSPOT_BODY), q, NOW).unwrap() else {
            panic!()
        };
        assert_eq!(v.event_id().as_str(), "1");
    }
    // Six minutes later: refused, as HubSpot's page asks.
    assert_eq!(
        check(&src, &h, HUBSPOT_BODY, NOW + 360).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    // Another timestamp header than the one signed.
    hm.insert(
        "x-hubspot-request-timestamp",
        HeaderValue::from_static("1700000000001"),
    );
    assert_eq!(
        run(&src, &hm, Bytes::from(HUBSPOT_BODY), None, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // hookgate's signer makes the same signature.
    let p = Registry::builtin().get("hubspot").unwrap();
    let req = SignRequest {
        body: HUBSPOT_BODY.as_bytes(),
        timestamp: NOW,
        url: Some(public),
        ..Default::default()
    };
    let key = p.signing_key(&Secret::new(HUBSPOT_SECRET)).unwrap();
    let signed = pairs(&sign(&p, &key, &req).unwrap().headers);
    assert_eq!(signed.get("x-hubspot-signature-v3").unwrap(), sig.as_str());
}

fn contentful_text(body: &str) -> String {
    format!(
        "POST\n/webhooks/cf\nx-contentful-crn:crn:contentful:::content:spaces/s1/entries/e1;\
         x-contentful-signed-headers:x-contentful-crn,x-contentful-signed-headers,x-contentful-timestamp;\
         x-contentful-timestamp:{}\n{body}",
        NOW * 1000
    )
}

#[test]
fn contentful_signs_the_headers_it_lists_and_nothing_else() {
    let src = with_url(
        "contentful",
        CF_SECRET,
        "https://hooks.example.com/webhooks/cf",
    );
    let body = r#"{"sys":{"type":"Entry","id":"e1","version":3}}"#;
    let sig = hmac_hex(CF_SECRET, &contentful_text(body));
    let ts = (NOW * 1000).to_string();
    let mut h = vec![
        ("x-contentful-signature", sig.clone()),
        (
            "x-contentful-signed-headers",
            "x-contentful-crn,x-contentful-signed-headers,x-contentful-timestamp".into(),
        ),
        ("x-contentful-timestamp", ts.clone()),
        (
            "x-contentful-crn",
            "crn:contentful:::content:spaces/s1/entries/e1".into(),
        ),
        (
            "x-contentful-topic",
            "ContentManagement.Entry.publish".into(),
        ),
        ("x-contentful-idempotency-key", "1d5b5bd2d0e0".into()),
    ];
    let refs = |h: &[(&'static str, String)]| -> HeaderMap {
        headers(&h.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>())
    };
    let mut v = verify(&src, &refs(&h), Bytes::from(body), NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "1d5b5bd2d0e0");
    assert_eq!(
        v.take_facts().event_type.as_deref(),
        Some("ContentManagement.Entry.publish")
    );
    // A header Contentful did not list may change; a listed one may not.
    h[4].1 = "ContentManagement.Entry.delete".into();
    assert!(verify(&src, &refs(&h), Bytes::from(body), NOW).is_ok());
    h[3].1 = "crn:contentful:::content:spaces/s2/entries/e1".into();
    assert_eq!(
        verify(&src, &refs(&h), Bytes::from(body), NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    h[3].1 = "crn:contentful:::content:spaces/s1/entries/e1".into();
    // Another path (public_url) than the one Contentful called.
    let elsewhere = with_url("contentful", CF_SECRET, "https://hooks.example.com/other");
    assert_eq!(
        verify(&elsewhere, &refs(&h), Bytes::from(body), NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Past the window (a minute).
    assert_eq!(
        verify(&src, &refs(&h), Bytes::from(body), NOW + 61).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    // hookgate's signer (for `hookgate sign`) agrees with the verifier.
    let p = Registry::builtin().get("contentful").unwrap();
    let req = SignRequest {
        body: body.as_bytes(),
        timestamp: NOW,
        url: Some("https://hooks.example.com/webhooks/cf"),
        ..Default::default()
    };
    let key = p.signing_key(&Secret::new(CF_SECRET)).unwrap();
    let signed = pairs(&sign(&p, &key, &req).unwrap().headers);
    assert!(verify(&src, &signed, Bytes::from(body), NOW).is_ok());
}

#[test]
fn a_canonical_provider_without_public_url_is_refused_clearly() {
    let src = source("hubspot", &[HUBSPOT_SECRET]);
    let ts = (NOW * 1000).to_string();
    let h = [
        (
            "X-HubSpot-Signature-v3",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ),
        ("X-HubSpot-Request-Timestamp", ts.as_str()),
    ];
    assert_eq!(
        check(&src, &h, HUBSPOT_BODY, NOW).unwrap_err(),
        VerifyError::MalformedSignature("the source has no public_url")
    );
}
