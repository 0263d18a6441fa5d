//! Parsers that run before the signature is checked read only what they
//! need (`verify::json_subset`): a body padded with a large irrelevant
//! subtree verifies as before. What is materialised is shown in
//! `json_subset`'s own tests; here each scheme is shown to still work.

use super::payments::NOW;
use super::*;

/// `"k0":{"deep":[1,{"x":"y"}]},"k1":…` — `n` irrelevant members.
fn padding(n: usize) -> String {
    (0..n)
        .map(|i| format!(r#""k{i}":{{"deep":[1,{{"x":"y"}}]}},"#))
        .collect()
}

fn signed(src: &Arc<Source>, body: &str) -> (HeaderMap, Bytes) {
    let req = SignRequest {
        body: body.as_bytes(),
        timestamp: NOW,
        event_id: Some("evt_hdr_1".into()),
        ..Default::default()
    };
    let s = sign(&src.provider, &src.keys[0], &req).unwrap();
    let body = s.body.unwrap_or_else(|| body.as_bytes().to_vec());
    (super::payments::pairs(&s.headers), Bytes::from(body))
}

#[test]
fn adyen_verifies_a_notification_padded_with_a_hundred_thousand_irrelevant_keys() {
    let key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    let src = source("adyen", &[key]);
    let body = format!(
        r#"{{{}"live":"false","notificationItems":[{{"NotificationRequestItem":{{{}"pspReference":"PSP1","merchantAccountCode":"Acme","merchantReference":"r1","amount":{{"value":1000,"currency":"EUR"}},"eventCode":"AUTHORISATION","success":"true"}}}}]}}"#,
        padding(100_000),
        padding(1_000),
    );
    let (h, body) = signed(&src, &body);
    let v = verify(&src, &h, body.clone(), NOW).unwrap();
    assert!(v.event_id().as_str().contains("PSP1"));
    // Tampering with a signed field inside the padded body is still caught.
    let forged = String::from_utf8(body.to_vec())
        .unwrap()
        .replacen("\"r1\"", "\"r2\"", 1);
    assert_eq!(
        verify(&src, &h, Bytes::from(forged), NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn adyen_refuses_more_items_than_it_reads() {
    let key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    let src = source("adyen", &[key]);
    let items = vec![r#"{"NotificationRequestItem":{}}"#; 100_000].join(",");
    let body = format!(r#"{{"notificationItems":[{items}]}}"#);
    assert!(matches!(
        verify(&src, &HeaderMap::new(), Bytes::from(body), NOW).unwrap_err(),
        VerifyError::BadBody(_)
    ));
}

#[test]
fn tbank_verifies_a_body_whose_nested_data_holds_a_hundred_thousand_keys() {
    let src = source("tbank", &["pw"]);
    let body = format!(
        r#"{{"TerminalKey":"T1","PaymentId":99,"Status":"CONFIRMED","Amount":1000,"Success":true,"OrderId":"o1","Data":{{{}"last":1}}}}"#,
        padding(100_000)
    );
    let (h, body) = signed(&src, &body);
    let v = verify(&src, &h, body.clone(), NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "99:CONFIRMED");
    let forged = String::from_utf8(body.to_vec())
        .unwrap()
        .replacen("\"o1\"", "\"o2\"", 1);
    assert_eq!(
        verify(&src, &h, Bytes::from(forged), NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn robokassa_verifies_a_form_with_a_hundred_thousand_unsigned_fields() {
    let src = source("robokassa", &["pw"]);
    let extra: String = (0..100_000).map(|i| format!("&x{i}=v")).collect();
    let body = format!("OutSum=10.000000&InvId=5&Shp_a=1{extra}");
    let (h, body) = signed(&src, &body);
    assert_eq!(
        verify(&src, &h, body, NOW).unwrap().event_id().as_str(),
        "5"
    );
}

#[test]
fn linear_reads_its_body_timestamp_among_a_hundred_thousand_irrelevant_keys() {
    let src = source("linear", &["lin-secret"]);
    let body = format!(
        r#"{{{}"action":"create","webhookId":"w1","webhookTimestamp":{}}}"#,
        padding(100_000),
        NOW * 1000
    );
    let mac = crypto::Algorithm::HmacSha256.mac(b"lin-secret", &[body.as_bytes()]);
    let h = [
        ("linear-signature", hex::encode(mac)),
        ("linear-delivery", "d-1".to_owned()),
    ];
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        check(&src, &h, &body, NOW).unwrap().event_id().as_str(),
        "d-1"
    );
}
