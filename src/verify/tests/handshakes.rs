//! The providers with handshakes and batches (Meta, Twitch, Okta, Dropbox,
//! Asana, X, Microsoft Graph, Xero, monday.com, Notion, Mailchimp): each
//! one's signature vector, its handshake answered (or refused), and its
//! batch split into items. Vectors are made the way each provider's page
//! (cited in its file) describes, with Python's `hmac` module as the
//! independent implementation; the Meta and X ones are published: the
//! Elixir `whatsapp_sdk` doc's `compute_signature("test", "secret")`, and
//! the consumer secret and token of X's CRC sample
//! (gist.github.com/jcipriano/46c4b3f379d214d57a9ddfa70dba49fe).

use super::*;
use crate::primitives::crypto::Algorithm;
use crate::verify::{GetAnswer, answer_get};

fn answer(src: &Arc<Source>, h: &[(&str, &str)], body: &str, query: &str, now: i64) -> Reply {
    match run(
        src,
        &headers(h),
        Bytes::from(body.to_owned()),
        Some(query),
        now,
    ) {
        Ok(Checked::Answer(r)) => r,
        other => panic!("expected an answer, got {other:?}"),
    }
}

fn get(src: &Source, h: &[(&str, &str)], query: &str) -> GetAnswer {
    answer_get(src, &headers(h), Some(query), 1_700_000_000)
}

fn split(src: &Arc<Source>, h: &[(&str, &str)], body: &str, now: i64) -> Vec<Verified> {
    match run(src, &headers(h), Bytes::from(body.to_owned()), None, now) {
        Ok(Checked::Split { events, .. }) => events,
        other => panic!("expected a split batch, got {other:?}"),
    }
}

fn with_token(provider: &str, secrets: &[&str], token: &str) -> Arc<Source> {
    let p = Registry::builtin().get(provider).unwrap();
    source_with(provider, secrets, |s| {
        s.verify_token = Some(Secret::new(token));
        s.split = p.split.clone().filter(|sp| sp.default);
    })
}

fn unsplit(provider: &str, secrets: &[&str]) -> Arc<Source> {
    source_with(provider, secrets, |s| s.split = None)
}

const WA: &str = r#"{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"messages":[{"from":"16505551234","id":"wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=","timestamp":"1749416383","type":"text","text":{"body":"Does it come in another color?"}}]},"field":"messages"}]}]}"#;

#[test]
fn meta_signature_vectors_and_the_verify_token_handshake() {
    // whatsapp_sdk: compute_signature("test", "secret").
    let id = vector(
        "whatsapp",
        &["secret"],
        &[(
            "x-hub-signature-256",
            "sha256=0329a06b62cd16b33eb6792be8c60b158d89a2ee3a876fce9a881ebb488c0914",
        )],
        "test",
        0,
    );
    assert!(id.starts_with("sha256:"), "unsplit: the body's hash, {id}");
    for provider in ["whatsapp", "messenger", "instagram"] {
        let src = with_token(provider, &["meta-app-secret"], "meatyhamhock");
        let sig = "sha256=9b4e4c5dd7147814ed4d5d3e4a976a95714c4c43bdd5268cd6c2b3808bb16f76";
        let items = split(&src, &[("x-hub-signature-256", sig)], WA, 0);
        assert_eq!(items.len(), 1, "{provider}");
        assert!(items[0].body().starts_with(br#"{"id":"102290129340398""#));
        let tampered = WA.replace("color", "colour");
        let e = run(
            &src,
            &headers(&[("x-hub-signature-256", sig)]),
            tampered.into(),
            None,
            0,
        );
        assert_eq!(e.unwrap_err(), VerifyError::InvalidSignature, "{provider}");
        // The dashboard's GET: the challenge echoed only with our token.
        let q = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock";
        let GetAnswer::Reply(r) = get(&src, &[], q) else {
            panic!("{provider}: challenge not answered")
        };
        assert_eq!((r.status, r.body.as_str()), (200, "1158201444"));
        let wrong = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=other";
        assert_eq!(
            get(&src, &[], wrong),
            GetAnswer::Refused(VerifyError::WrongVerifyToken)
        );
        let none = "hub.mode=subscribe&hub.challenge=1158201444";
        assert_eq!(
            get(&src, &[], none),
            GetAnswer::Refused(VerifyError::WrongVerifyToken)
        );
        assert!(matches!(
            get(&src, &[], "hub.mode=unsubscribe"),
            GetAnswer::Bad(_)
        ));
    }
    let mut item_type = unsplit("whatsapp", &["s"]).provider.split.clone().unwrap();
    item_type.default = true;
    let src = source_with("whatsapp", &["meta-app-secret"], |s| {
        s.split = Some(item_type)
    });
    let sig = "sha256=9b4e4c5dd7147814ed4d5d3e4a976a95714c4c43bdd5268cd6c2b3808bb16f76";
    let mut items = split(&src, &[("x-hub-signature-256", sig)], WA, 0);
    assert_eq!(
        items[0].take_facts().event_type.as_deref(),
        Some("messages")
    );
}

const TWITCH_BODY: &str = r#"{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"enabled","type":"channel.follow","version":"2","cost":0,"condition":{"broadcaster_user_id":"12826","moderator_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"},"event":{"user_id":"1337","user_login":"awesome_user","user_name":"Awesome_User","broadcaster_user_id":"12826","broadcaster_user_login":"twitch","broadcaster_user_name":"Twitch","followed_at":"2020-07-15T18:16:11.17106713Z"}}"#;
const TWITCH_CHALLENGE: &str = r#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2","cost":0,"condition":{"broadcaster_user_id":"12826","moderator_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}"#;
const TWITCH_TS: &str = "2019-11-16T10:11:12.634234626Z";
/// TWITCH_TS in unix seconds.
const TWITCH_NOW: i64 = 1_573_899_072;

#[test]
fn twitch_message_id_is_the_event_id_within_ten_minutes_and_the_challenge_is_echoed() {
    let h = [
        (
            "twitch-eventsub-message-id",
            "e76c6bd4-55c9-4987-8304-da1588d8988b",
        ),
        ("twitch-eventsub-message-timestamp", TWITCH_TS),
        ("twitch-eventsub-message-type", "notification"),
        (
            "twitch-eventsub-message-signature",
            "sha256=793ade9441ed45af0af7c117eb093af69d6b041d4a53c874ebe400520342229a",
        ),
    ];
    let id = vector(
        "twitch",
        &["s3cre7-twitch-secret"],
        &h,
        TWITCH_BODY,
        TWITCH_NOW + 599,
    );
    assert_eq!(id, "e76c6bd4-55c9-4987-8304-da1588d8988b");
    let src = source("twitch", &["s3cre7-twitch-secret"]);
    let late = check(&src, &h, TWITCH_BODY, TWITCH_NOW + 601).unwrap_err();
    assert_eq!(
        late,
        VerifyError::TimestampOutOfTolerance,
        "older than 10 minutes"
    );

    let c = [
        (
            "twitch-eventsub-message-id",
            "a2b3c4d5-0000-4000-8000-000000000001",
        ),
        ("twitch-eventsub-message-timestamp", TWITCH_TS),
        (
            "twitch-eventsub-message-type",
            "webhook_callback_verification",
        ),
        (
            "twitch-eventsub-message-signature",
            "sha256=f6d7edf86566039c8671951725f91df6fb4dc0416e7f3be512f62fb66da1495f",
        ),
    ];
    let r = answer(&src, &c, TWITCH_CHALLENGE, "", TWITCH_NOW);
    assert_eq!(
        (r.status, r.body.as_str(), r.content_type.as_deref()),
        (200, "pogchamp-kappa-360noscope-vohiyo", Some("text/plain"))
    );
    // The challenge is signed: a forged one is refused, not answered.
    let forged = TWITCH_CHALLENGE.replace("pogchamp", "evil");
    let e = run(&src, &headers(&c), forged.into(), None, TWITCH_NOW).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
}

#[test]
fn okta_authorization_secret_split_events_and_the_verification_get() {
    let src = with_token("okta", &["okta-shared-secret"], "unused");
    let body = r#"{"eventType":"com.okta.event_hook","eventTypeVersion":"1.0","cloudEventsVersion":"0.1","source":"https://example.okta.com/api/v1/eventHooks/whoql0HfiLGPWc8Jx0g3","eventId":"b5a188b9-5ece-4636-b041-482ffda96311","data":{"events":[{"uuid":"5b7ef0b7-e8a1-11ea-9b12-a1d5d4a4b2c1","eventType":"user.session.start","version":"0"},{"uuid":"6c8ff1c8-e8a1-11ea-9b12-a1d5d4a4b2c1","eventType":"user.lifecycle.create","version":"0"}]},"eventTime":"2020-08-27T19:00:00.000Z","contentType":"application/json"}"#;
    let mut items = split(&src, &[("authorization", "okta-shared-secret")], body, 0);
    let ids: Vec<&str> = items.iter().map(|v| v.event_id().as_str()).collect();
    assert_eq!(
        ids,
        [
            "5b7ef0b7-e8a1-11ea-9b12-a1d5d4a4b2c1",
            "6c8ff1c8-e8a1-11ea-9b12-a1d5d4a4b2c1"
        ]
    );
    let facts = items[1].take_facts();
    assert_eq!(facts.event_type.as_deref(), Some("user.lifecycle.create"));
    assert!(
        facts.headers.iter().all(|(n, _)| n != "authorization"),
        "the secret is not kept"
    );
    let wrong = run(
        &src,
        &headers(&[("authorization", "nope")]),
        body.into(),
        None,
        0,
    );
    assert_eq!(wrong.unwrap_err(), VerifyError::InvalidSignature);
    let unsplit_id = vector(
        "okta",
        &["okta-shared-secret"],
        &[("authorization", "okta-shared-secret")],
        body,
        0,
    );
    assert_eq!(unsplit_id, "b5a188b9-5ece-4636-b041-482ffda96311");

    // Support article's one-time verification request.
    let challenge = (
        "x-okta-verification-challenge",
        "Me_rShK8JHsTnbyYrWXCEoMGbM_zsZ6k0hLPZ_Pg",
    );
    let GetAnswer::Reply(r) = get(
        &src,
        &[challenge, ("authorization", "okta-shared-secret")],
        "",
    ) else {
        panic!("not answered")
    };
    assert_eq!(
        r.body,
        r#"{"verification":"Me_rShK8JHsTnbyYrWXCEoMGbM_zsZ6k0hLPZ_Pg"}"#
    );
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    let refused = get(&src, &[challenge, ("authorization", "wrong")], "");
    assert_eq!(refused, GetAnswer::Refused(VerifyError::InvalidSignature));
    let refused = get(&src, &[challenge], "");
    assert_eq!(refused, GetAnswer::Refused(VerifyError::MissingSignature));
}

#[test]
fn dropbox_signature_and_the_challenge_echo_with_nosniff() {
    let body = r#"{"list_folder": {"accounts": ["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"]}, "delta": {"users": [12345678]}}"#;
    let h = [(
        "x-dropbox-signature",
        "2bc2b96598b80c2f2083a056de14d73ef9555deb6d554f2332327d06a70734fc",
    )];
    let id = vector("dropbox", &["dropbox-app-secret"], &h, body, 0);
    assert!(id.starts_with("sha256:"), "{id}");
    let src = source("dropbox", &["dropbox-app-secret"]);
    let GetAnswer::Reply(r) = get(&src, &[], "challenge=abc123") else {
        panic!("not answered")
    };
    assert_eq!(
        (r.body.as_str(), r.content_type.as_deref()),
        ("abc123", Some("text/plain"))
    );
    assert_eq!(r.headers.len(), 1);
    assert_eq!(
        (r.headers[0].0.as_str(), r.headers[0].1.as_str()),
        ("x-content-type-options", "nosniff")
    );
    assert!(matches!(get(&src, &[], ""), GetAnswer::Bad(_)));
}

#[test]
fn asana_handshake_hands_over_its_secret_only_with_the_verify_token() {
    let secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
    let src = with_token("asana", &[], "our-token");
    let r = answer(
        &src,
        &[("x-hook-secret", secret)],
        "",
        "verify_token=our-token",
        0,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.learn,
        Some(Secret::new(secret)),
        "the secret is to be stored"
    );
    assert_eq!(r.headers[0].0.as_str(), "x-hook-secret");
    assert_eq!(r.headers[0].1, secret, "echoed");
    for q in ["verify_token=other", ""] {
        let e = run(
            &src,
            &headers(&[("x-hook-secret", secret)]),
            Bytes::new(),
            Some(q),
            0,
        );
        assert_eq!(e.unwrap_err(), VerifyError::WrongVerifyToken, "{q}");
    }
    // Once learned, the secret verifies the webhook's events (one per item).
    let body = r#"{"events":[{"user":{"gid":"1199","resource_type":"user"},"created_at":"2024-02-01T12:00:00.000Z","action":"changed","resource":{"gid":"1201","resource_type":"task"},"parent":null,"change":{"field":"name","action":"changed"}}]}"#;
    let h = [(
        "x-hook-signature",
        "c001c2710396e60356aeee589961714da1f89c702ede506b32d2c333e191074d",
    )];
    let learned = Arc::new(src.with_learned(vec![
        src.provider.signing_key(&Secret::new(secret)).unwrap(),
    ]));
    let mut items = split(&learned, &h, body, 0);
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].take_facts().event_type.as_deref(),
        Some("task.changed")
    );
    let e = run(&src, &headers(&h), body.into(), None, 0).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature, "not before the handshake");
    // A heartbeat: no events, nothing to store.
    let beat = r#"{"events":[]}"#;
    let sig = hex::encode(Algorithm::HmacSha256.mac(secret.as_bytes(), &[beat.as_bytes()]));
    assert!(split(&learned, &[("x-hook-signature", &sig)], beat, 0).is_empty());
}

#[test]
fn x_crc_answer_and_signature() {
    let secret = "z3ZX4v7mAAUGykl3EcmkqbartmuW8VFOOzCloLx9Q45P0hLrFu";
    let src = source("twitter", &[secret]);
    let GetAnswer::Reply(r) = get(&src, &[], "crc_token=9b4507b3-9040-4669-9ca3-6b94edb50553")
    else {
        panic!("not answered")
    };
    assert_eq!(
        r.body,
        r#"{"response_token":"sha256=Cytd4Sq+NvEcV3MMrXxWJGJx5A+y/lXzzU2Maartkx8="}"#
    );
    let body = r#"{"for_user_id":"2244994945","tweet_create_events":[{"id_str":"1"}]}"#;
    let h = [(
        "x-twitter-webhooks-signature",
        "sha256=UcccXobOE2mqpCXKFjLgQZLg6MPSAwg0pQWD13UvJwE=",
    )];
    assert!(vector("twitter", &[secret], &h, body, 0).starts_with("sha256:"));
    // The CRC answer MACs an unsigned query value with the key that signs
    // bodies: a token that is a JSON body gets no MAC, so the answer is
    // never a signature of a forged event.
    let forged = "crc_token=%7B%22for_user_id%22%3A%221%22%7D";
    let GetAnswer::Reply(r) = get(&src, &[], forged) else {
        panic!("not answered")
    };
    assert_eq!(r.body, r#"{"response_token":"sha256="}"#);
    // What a CRC answer can sign (a token) is not an event X could send.
    let token = "9b4507b3-9040-4669-9ca3-6b94edb50553";
    let mac = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        Algorithm::HmacSha256.mac(secret.as_bytes(), &[token.as_bytes()]),
    );
    let sig = format!("sha256={mac}");
    let got = check(&src, &[("x-twitter-webhooks-signature", &sig)], token, 0);
    assert!(got.is_err(), "a token body was admitted: {got:?}");
}

#[test]
fn graph_validation_token_echo_and_client_state_in_every_item() {
    let src = with_token("microsoft-graph", &["graph-client-state"], "unused");
    let r = answer(
        &src,
        &[],
        "",
        "validationToken=Validation%3A%20Testing%20client%20application",
        0,
    );
    assert_eq!(
        (r.status, r.body.as_str(), r.content_type.as_deref()),
        (
            200,
            "Validation: Testing client application",
            Some("text/plain")
        )
    );
    let item = |state: &str, id: &str| {
        format!(
            r#"{{"subscriptionId":"7f105c7d-2dc5-4530-97cd-4e7ae6534c07","subscriptionExpirationDateTime":"2019-04-01T02:00:00.000Z","changeType":"created","resource":"Users/ea1f/Messages/{id}","resourceData":{{"id":"{id}"}},"clientState":"{state}","tenantId":"84bd8158-6d4d-4958-8b9f-9d6445542f95"}}"#
        )
    };
    let body = format!(
        r#"{{"value":[{},{}]}}"#,
        item("graph-client-state", "AAA"),
        item("graph-client-state", "BBB")
    );
    let mut items = split(&src, &[], &body, 0);
    assert_eq!(items.len(), 2);
    assert_ne!(items[0].event_id(), items[1].event_id());
    assert_eq!(items[0].take_facts().event_type.as_deref(), Some("created"));
    // One item with another clientState spoils the whole batch.
    let mixed = format!(
        r#"{{"value":[{},{}]}}"#,
        item("graph-client-state", "AAA"),
        item("forged", "BBB")
    );
    let e = run(&src, &HeaderMap::new(), mixed.into(), None, 0).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
    let e = run(
        &src,
        &HeaderMap::new(),
        r#"{"value":[{"x":1}]}"#.into(),
        None,
        0,
    )
    .unwrap_err();
    assert_eq!(e, VerifyError::MissingSignature);
}

const XERO_KEY: &str =
    "OSd0eLlVIY9ZhViEqlDUh4+6n6M+Lo+eDaEJheJ6OCCgWwIz2D3JIAU6jPMipHRbgKTLz2uJ+xiACXGDBLrgdA==";

#[test]
fn xero_intent_to_receive_and_split_events() {
    let src = with_token("xero", &[XERO_KEY], "unused");
    let itr = r#"{"events":[],"firstEventSequence": 0,"lastEventSequence": 0, "entropy": "S0m3r4Nd0mt3xt"}"#;
    let good = [(
        "x-xero-signature",
        "rvoOZBRuH18ZEOiYWvvVGwFrassSNCqtJOfWdAF8+UY=",
    )];
    let r = answer(&src, &good, itr, "", 0);
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    let bad = [(
        "x-xero-signature",
        "0+tSXWgjhEAloDL2A2flHMsAkwtBInUiwZuHWgLAOxg=",
    )];
    let e = run(&src, &headers(&bad), itr.into(), None, 0).unwrap_err();
    assert_eq!(e.status(), 401);

    let body = r#"{"events":[{"resourceUrl":"https://api.xero.com/api.xro/2.0/Contacts/717f2bfc-c6d4-41fd-b238-3f2f0c0cf777","resourceId":"717f2bfc-c6d4-41fd-b238-3f2f0c0cf777","eventDateUtc":"2017-06-21T01:15:39.902","eventType":"UPDATE","eventCategory":"CONTACT","tenantId":"c2cc9b6e-9458-4c7d-93cc-f02b81b0594f","tenantType":"ORGANISATION"}],"lastEventSequence":1,"firstEventSequence":1,"entropy":"S0m3r4Nd0mt3xt"}"#;
    let mut items = split(&src, &bad, body, 0);
    assert_eq!(
        items[0].event_id().as_str(),
        "717f2bfc-c6d4-41fd-b238-3f2f0c0cf777:2017-06-21T01:15:39.902:CONTACT:UPDATE:c2cc9b6e-9458-4c7d-93cc-f02b81b0594f"
    );
    assert_eq!(
        items[0].take_facts().event_type.as_deref(),
        Some("CONTACT.UPDATE")
    );
    let e = run(&src, &headers(&good), body.into(), None, 0).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
}

const MONDAY_JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJhY2NvdW50SWQiOjE4MjU1MjgsInVzZXJJZCI6NDAxMjY4OSwiYXVkIjoiaHR0cHM6Ly9ob29rcy5leGFtcGxlLmNvbS93ZWJob29rcy9tb25kYXkiLCJleHAiOjE2MDY4MDg3NTgsInNob3J0TGl2ZWRUb2tlbiI6IlNMVCIsImlhdCI6MTYwNjgwODQ1OH0.hRwHLuwM4FgL9iSfPviV-2NQv3jOj3ZBX5DKRxugkSA";

#[test]
fn monday_jwt_checks_signature_expiry_and_audience_and_the_challenge_is_echoed() {
    let body = r#"{"event":{"userId":4012689,"originalTriggerUuid":null,"boardId":1771812698,"pulseId":1772099344,"triggerTime":"2021-10-11T09:07:28.210Z","subscriptionId":73759690,"triggerUuid":"b5ed2e17c530f43668de130142445cba","type":"create_pulse"}}"#;
    let h = [("authorization", MONDAY_JWT)];
    let exp = 1_606_808_758;
    let id = vector("monday", &["monday-signing-secret"], &h, body, exp);
    assert_eq!(id, "b5ed2e17c530f43668de130142445cba");
    let src = source("monday", &["monday-signing-secret"]);
    let late = check(&src, &h, body, exp + 301).unwrap_err();
    assert_eq!(late, VerifyError::TimestampOutOfTolerance);
    let bearer = [("authorization", &*format!("Bearer {MONDAY_JWT}"))];
    assert!(check(&src, &bearer, body, exp).is_ok());
    let aud = |url: &str| {
        let url = url.to_owned();
        source_with("monday", &["monday-signing-secret"], move |s| {
            s.public_url = Some(url)
        })
    };
    assert!(
        check(
            &aud("https://hooks.example.com/webhooks/monday"),
            &h,
            body,
            exp
        )
        .is_ok()
    );
    let e = check(
        &aud("https://elsewhere.example/webhooks/monday"),
        &h,
        body,
        exp,
    )
    .unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature, "another audience");
    let none = MONDAY_JWT.replacen(
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
        "eyJhbGciOiJub25lIn0",
        1,
    );
    let e = check(&src, &[("authorization", &none)], body, exp).unwrap_err();
    assert!(matches!(e, VerifyError::MalformedSignature(_)), "{e:?}");

    let challenge = r#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#;
    let want = challenge;
    let r = answer(&src, &[], challenge, "", exp);
    assert_eq!(
        (r.body.as_str(), r.content_type.as_deref()),
        (want, Some("application/json"))
    );
    let r = answer(&src, &h, challenge, "", exp);
    assert_eq!(r.body, want, "with the app's token too");
    let e = run(
        &src,
        &headers(&[("authorization", "x.y.z")]),
        challenge.into(),
        None,
        exp,
    );
    assert!(e.is_err(), "a bad token is not answered");
}

#[test]
fn notion_verification_token_is_learned_and_then_verifies_events() {
    let token = "secret_tMrlL1qK5vuQAh1b6cZGhFChZTSYJlce98V0pYn7yBl";
    let src = with_token("notion", &[], "our-token");
    let body = format!(r#"{{"verification_token":"{token}"}}"#);
    let r = answer(&src, &[], &body, "verify_token=our-token", 0);
    assert_eq!(
        (r.status, r.learn.as_ref()),
        (200, Some(&Secret::new(token)))
    );
    let e = run(
        &src,
        &HeaderMap::new(),
        body.clone().into(),
        Some("verify_token=x"),
        0,
    );
    assert_eq!(e.unwrap_err(), VerifyError::WrongVerifyToken);
    let event = r#"{"id":"367cba44-b6f3-4c92-81e7-6a2e9659efd4","timestamp":"2024-12-05T23:55:34.285Z","workspace_id":"13950b26-c203-4f3b-b97d-93ec06319565","workspace_name":"Quantify Labs","subscription_id":"29d75c0d-5546-4414-8459-7b7a92f1fc4b","integration_id":"0ef2e755-4912-8096-91c1-00376a88a5ca","type":"page.created","authors":[{"id":"c7c11cca-1d73-471d-9b6e-bdef51470190","type":"person"}],"accessible_by":[],"attempt_number":1,"entity":{"id":"153104cd-477e-809d-8dc4-ff2d96ae3090","type":"page"},"data":{"parent":{"id":"13950b26-c203-4f3b-b97d-93ec06319565","type":"space"}}}"#;
    let h = [(
        "x-notion-signature",
        "sha256=c05272871a6aed8b81b77e8260130c6cf8276c5587916d3bd2e8b2dd91cea9c7",
    )];
    assert_eq!(
        vector("notion", &[token], &h, event, 0),
        "367cba44-b6f3-4c92-81e7-6a2e9659efd4"
    );
}

#[test]
fn mailchimp_is_unsigned_and_checked_by_the_url_secret() {
    let src = source("mailchimp", &["mc-url-secret"]);
    let body = "type=subscribe&fired_at=2009-03-26+21%3A35%3A57&data%5Bid%5D=8a25ff1d98&data%5Blist_id%5D=a6b5da1054&data%5Bemail%5D=api%40mailchimp.com";
    let ok = run(
        &src,
        &HeaderMap::new(),
        body.into(),
        Some("secret=mc-url-secret"),
        0,
    );
    let Ok(Checked::Event(v)) = ok else {
        panic!("{ok:?}")
    };
    assert_eq!(
        v.event_id().as_str(),
        "subscribe:2009-03-26 21:35:57:8a25ff1d98"
    );
    let e = run(&src, &HeaderMap::new(), body.into(), Some("secret=nope"), 0).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
    let e = run(&src, &HeaderMap::new(), body.into(), None, 0).unwrap_err();
    assert_eq!(e, VerifyError::MissingSignature);
    let GetAnswer::Reply(r) = get(&src, &[], "secret=mc-url-secret") else {
        panic!("the URL check is answered")
    };
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    assert_eq!(
        get(&src, &[], "secret=nope"),
        GetAnswer::Refused(VerifyError::InvalidSignature)
    );
}

#[test]
fn a_get_to_a_provider_without_one_is_not_offered() {
    let src = source("github", &["s"]);
    assert_eq!(get(&src, &[], "hub.mode=subscribe"), GetAnswer::NotOffered);
}

/// `hookgate sign` makes requests each of these providers' checks accept
/// (unsplit: a batch is then one event), and refuses them tampered, with
/// the wrong secret, or stale. Microsoft Graph is left out: its token is
/// a field of each item the sender writes itself.
#[test]
fn handshake_providers_round_trip_through_the_signer() {
    use super::payments::{Case, round_trips};
    round_trips(&[
        Case {
            timestamped: true,
            ..Case::new(
                "twitch",
                r#"{"subscription":{"type":"channel.follow"},"event":{"user_login":"MARK42"}}"#,
                "",
            )
        },
        Case::new(
            "whatsapp",
            r#"{"object":"whatsapp_business_account","entry":[{"id":"MARK42"}]}"#,
            "sha256:",
        ),
        Case::new(
            "messenger",
            r#"{"object":"page","entry":[{"id":"MARK42","time":1}]}"#,
            "sha256:",
        ),
        Case::new(
            "instagram",
            r#"{"object":"instagram","entry":[{"id":"MARK42","time":1}]}"#,
            "sha256:",
        ),
        Case {
            body_signed: false,
            ..Case::new(
                "okta",
                r#"{"eventId":"okta-evt-1","data":{"events":[{"uuid":"u1","eventType":"MARK42"}]}}"#,
                "okta-evt-1",
            )
        },
        Case::new(
            "dropbox",
            r#"{"list_folder":{"accounts":["dbid:MARK42"]}}"#,
            "sha256:",
        ),
        Case::new(
            "asana",
            r#"{"events":[{"action":"MARK42","resource":{"gid":"1","resource_type":"task"}}]}"#,
            "sha256:",
        ),
        Case::new(
            "twitter",
            r#"{"for_user_id":"MARK42","tweet_create_events":[]}"#,
            "sha256:",
        ),
        Case::new(
            "xero",
            r#"{"events":[{"resourceId":"MARK42","eventType":"UPDATE"}],"firstEventSequence":1}"#,
            "sha256:",
        ),
        Case::new(
            "notion",
            r#"{"id":"notion-evt-1","type":"page.created","x":"MARK42"}"#,
            "notion-evt-1",
        ),
        Case {
            body_signed: false,
            ..Case::new(
                "mailchimp",
                "type=subscribe&fired_at=2009-03-26&data%5Bid%5D=8a25ff1d98&data%5Bmerges%5D=MARK42",
                "subscribe:2009-03-26:8a25ff1d98",
            )
        },
        Case {
            body_signed: false,
            timestamped: true,
            ..Case::new(
                "monday",
                r#"{"event":{"triggerUuid":"mon-1","type":"create_pulse","x":"MARK42"}}"#,
                "mon-1",
            )
        },
    ]);
}

#[test]
fn a_segment_batch_is_an_array_whose_items_are_named_by_message_id() {
    let p = Registry::builtin().get("segment").unwrap();
    assert!(
        !p.split.as_ref().unwrap().default,
        "batching is the mapping's choice"
    );
    let src = source_with("segment", &["segment-shared"], |s| {
        s.split = p.split.clone()
    });
    let body = r#"[{"type":"track","event":"Order Completed","messageId":"m-1"},{"type":"identify","messageId":"m-2"}]"#;
    let sig = hex::encode(Algorithm::HmacSha1.mac(b"segment-shared", &[body.as_bytes()]));
    let mut items = split(&src, &[("x-signature", &sig)], body, 0);
    let ids: Vec<&str> = items.iter().map(|v| v.event_id().as_str()).collect();
    assert_eq!(ids, ["m-1", "m-2"]);
    assert_eq!(
        items[0].take_facts().event_type.as_deref(),
        Some("track.Order Completed")
    );
    let e = run(
        &src,
        &headers(&[("x-signature", &"0".repeat(40))]),
        body.into(),
        None,
        0,
    );
    assert_eq!(e.unwrap_err(), VerifyError::InvalidSignature);
}
