//! Developer tools, content and AI providers of the catalogue: a round trip
//! through `hookgate sign`'s signer for each (valid / tampered / wrong and
//! rotated secret / stale), and the vectors their docs or official SDKs
//! publish (source cited on each).

use super::payments::{Case, NOW, round_trips};
use super::*;

// One table of cases, one per provider: splitting it would only scatter it.
#[test]
fn developer_tools_content_and_ai_round_trip() {
    round_trips(&[
        Case {
            secret: "glpat-token",
            wrong: "other-token",
            body_signed: false,
            ..Case::new("gitlab", r#"{"object_kind":"push","x":"MARK42"}"#, "")
        },
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new(
                "gitlab-signed",
                r#"{"object_kind":"push","x":"MARK42"}"#,
                "",
            )
        },
        Case::new(
            "jira",
            r#"{"webhookEvent":"jira:issue_created","x":"MARK42"}"#,
            "",
        ),
        Case::new("bitbucket", r#"{"repository":{"name":"MARK42"}}"#, ""),
        Case::new(
            "vercel",
            r#"{"id":"evt_v1","type":"deployment.created","x":"MARK42"}"#,
            "evt_v1",
        ),
        Case::new(
            "pagerduty",
            r#"{"event":{"id":"01PD","event_type":"incident.triggered","x":"MARK42"}}"#,
            "01PD",
        ),
        Case::new(
            "sentry",
            r#"{"action":"created","data":{"x":"MARK42"}}"#,
            "",
        ),
        Case::new("gitea", r#"{"action":"opened","x":"MARK42"}"#, ""),
        Case::new(
            "circleci",
            r#"{"id":"cci-1","type":"job-completed","x":"MARK42"}"#,
            "cci-1",
        ),
        Case::new(
            "launchdarkly",
            r#"{"_id":"ld-1","kind":"flag","x":"MARK42"}"#,
            "ld-1",
        ),
        Case::new("snyk", r#"{"project":{"name":"MARK42"}}"#, ""),
        Case::new(
            "heroku",
            r#"{"id":"h-1","resource":"dyno","action":"update","x":"MARK42"}"#,
            "h-1",
        ),
        Case::new(
            "buildkite",
            r#"{"event":"job.finished","job":{"id":"job-1"},"build":{"id":"b-1"},"x":"MARK42"}"#,
            "job.finished:job-1",
        ),
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new("svix", r#"{"type":"user.created","x":"MARK42"}"#, "")
        },
        Case {
            timestamped: true,
            ..Case::new(
                "mux",
                r#"{"id":"mux-1","type":"video.asset.ready","x":"MARK42"}"#,
                "mux-1",
            )
        },
        Case::new("sanity", r#"{"_id":"doc-1","title":"MARK42"}"#, ""),
        Case::new(
            "segment",
            r#"{"messageId":"ajs-1","type":"track","event":"MARK42"}"#,
            "ajs-1",
        ),
        Case {
            timestamped: true,
            ..Case::new(
                "webflow",
                r#"{"triggerType":"form_submission","payload":{"x":"MARK42"}}"#,
                "sha256:",
            )
        },
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new(
                "openai",
                r#"{"id":"evt_1","type":"response.completed","x":"MARK42"}"#,
                "",
            )
        },
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new(
                "replicate",
                r#"{"id":"p-1","status":"succeeded","x":"MARK42"}"#,
                "",
            )
        },
        Case {
            timestamped: true,
            ..Case::new(
                "elevenlabs",
                r#"{"type":"post_call_transcription","x":"MARK42"}"#,
                "sha256:",
            )
        },
    ]);
}

// go-pagerduty webhookv3/webhookv3_test.go (TestVerifySignature): the
// official Go client's fixed secret, body and `v1=` signature. The same
// header with a second, unknown signature still verifies (rotation).
const PD_SECRET: &str = "lDQHScfUeXUKaQRNF+8XIiDKZ7XX3itBAYzwU0TARw8lJqRnkKl2iB1anSb0Z+IK";
const PD_BODY: &str = r#"{"event":{"id":"01BWDWL3NYY7LUFPZCC28QUCMK","event_type":"incident.priority_updated","resource_type":"incident","occurred_at":"2021-04-26T17:36:27.458Z","agent":{"html_url":"https://acme.pagerduty.com/users/PLH1HKV","id":"PLH1HKV","self":"https://api.pagerduty.com/users/PLH1HKV","summary":"Tenex Engineer","type":"user_reference"},"client":null,"data":{"id":"PGR0VU2","type":"incident","self":"https://api.pagerduty.com/incidents/PGR0VU2","html_url":"https://acme.pagerduty.com/incidents/PGR0VU2","number":2,"status":"triggered","title":"A little bump in the road","service":{"html_url":"https://acme.pagerduty.com/services/PF9KMXH","id":"PF9KMXH","self":"https://api.pagerduty.com/services/PF9KMXH","summary":"API Service","type":"service_reference"},"assignees":[{"html_url":"https://acme.pagerduty.com/users/PTUXL6G","id":"PTUXL6G","self":"https://api.pagerduty.com/users/PTUXL6G","summary":"User 123","type":"user_reference"}],"escalation_policy":{"html_url":"https://acme.pagerduty.com/escalation_policies/PUS0KTE","id":"PUS0KTE","self":"https://api.pagerduty.com/escalation_policies/PUS0KTE","summary":"Default","type":"escalation_policy_reference"},"teams":[{"html_url":"https://acme.pagerduty.com/teams/PFCVPS0","id":"PFCVPS0","self":"https://api.pagerduty.com/teams/PFCVPS0","summary":"Engineering","type":"team_reference"}],"priority":{"html_url":"https://acme.pagerduty.com/account/incident_priorities","id":"PSO75BM","self":"https://api.pagerduty.com/priorities/PSO75BM","summary":"P1","type":"priority_reference"},"urgency":"high","conference_bridge":{"conference_number":1000,"conference_url":"https://example.com"},"resolve_reason":null}}}"#;
const PD_SIG: &str = "v1=0c0b9495b893a39e70d1fea2fe11fbe0a825f88b9f67846f6cc07dd2bc5476cd";

#[test]
fn pagerduty_go_client_vector_and_rotation() {
    let src = source("pagerduty", &[PD_SECRET]);
    let v = check(&src, &[("x-pagerduty-signature", PD_SIG)], PD_BODY, NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "01BWDWL3NYY7LUFPZCC28QUCMK");
    let two = format!("v1={},{PD_SIG}", "ab".repeat(32));
    assert!(check(&src, &[("x-pagerduty-signature", &two)], PD_BODY, NOW).is_ok());
    // The Go test's "mismatch" signature.
    let bad = "v1=7020c8a7ec668a9b7012bc3dd82e483394b038f4230acc6785efbf2a7d8bcaf5";
    assert_eq!(
        check(&src, &[("x-pagerduty-signature", bad)], PD_BODY, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

// mux-node-sdk test/unit/webhooks (also mux-ruby, mux-elixir): "generated
// from Mux's backend" with secret SuperSecret123 at t=1565125718.
#[test]
fn mux_sdk_vector_and_window() {
    let src = source("mux", &["SuperSecret123"]);
    let h = [(
        "mux-signature",
        "t=1565125718,v1=854ece4c22acef7c66b57d4e504153bc512595e8e9c772ece2a68150548c19a7",
    )];
    assert!(check(&src, &h, r#"{"test":"body"}"#, 1565125718).is_ok());
    assert_eq!(
        check(&src, &h, r#"{"test":"body"}"#, 1565125718 + 301).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
}

// @sanity/webhook (github.com/sanity-io/webhook-toolkit) test/signature.test.ts:
// secret `test`, body {"_id":"resume"}, base64url signature. The toolkit
// checks no age: a signature from 2021 still verifies, and changing `t`
// breaks it (the timestamp is signed).
#[test]
fn sanity_toolkit_vector_base64url_and_unchecked_age() {
    let src = source("sanity", &["test"]);
    let good = "t=1633519811129,v1=tLa470fx7qkLLEcMOcEUFuBbRSkGujyskxrNXcoh0N0";
    let body = r#"{"_id":"resume"}"#;
    let h = [
        ("sanity-webhook-signature", good),
        ("idempotency-key", "del-1"),
    ];
    assert_eq!(
        check(&src, &h, body, NOW).unwrap().event_id().as_str(),
        "del-1"
    );
    let h = [(
        "sanity-webhook-signature",
        "t=1633519811128,v1=tLa470fx7qkLLEcMOcEUFuBbRSkGujyskxrNXcoh0N0",
    )];
    assert_eq!(
        check(&src, &h, body, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // encodeSignatureHeader's vector (secret `try-me`).
    let src = source("sanity", &["try-me"]);
    let h = [(
        "sanity-webhook-signature",
        "t=1633518820676,v1=e7C9h2sfbFfc4V7TEz7PSOp4IoNzl0UdVsBV-1wgdeA",
    )];
    assert!(check(&src, &h, r#"{"title":"GROQ-Hooks are neat"}"#, NOW).is_ok());
}

// openai-python tests/api_resources/test_webhooks.py (the same constants in
// the Node, Go, Java and Ruby SDKs).
#[test]
fn openai_sdk_vector() {
    let secret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c=";
    let body = r#"{"id": "evt_685c059ae3a481909bdc86819b066fb6", "object": "event", "created_at": 1750861210, "type": "response.completed", "data": {"id": "resp_123"}}"#;
    let h = [
        ("webhook-id", "wh_685c059ae39c8190af8c71ed1022a24d"),
        ("webhook-timestamp", "1750861210"),
        (
            "webhook-signature",
            "v1,gUAg4R2hWouRZqRQG4uJypNS8YK885G838+EHb4nKBY=",
        ),
    ];
    assert_eq!(
        vector("openai", &[secret], &h, body, 1750861210),
        "wh_685c059ae39c8190af8c71ed1022a24d"
    );
}

// V3 (standard-webhooks libraries/python/tests::test_sign_function) under
// Svix's header names, which Svix, Clerk and Resend send; the unbranded
// names verify for Svix too.
#[test]
fn svix_branded_presets_verify_the_standard_vector() {
    let body = r#"{"test": 2432232314}"#;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    for p in ["svix", "clerk", "resend"] {
        let h = [
            ("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("svix-timestamp", "1614265330"),
            ("svix-signature", sig),
        ];
        let v = check(&source(p, &[secret]), &h, body, 1614265330).unwrap();
        assert_eq!(v.event_id().as_str(), "msg_p5jXN8AQM9LWM0D4loKWxJek", "{p}");
    }
    for p in ["svix", "gitlab-signed", "openai", "replicate", "loops"] {
        let h = [
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", sig),
        ];
        assert!(
            check(&source(p, &[secret]), &h, body, 1614265330).is_ok(),
            "{p}"
        );
    }
}

#[test]
fn gitlab_token_is_compared_and_the_body_is_not_signed() {
    let src = source("gitlab", &["my-token"]);
    let body = r#"{"object_kind":"merge_request","object_attributes":{"action":"open"}}"#;
    let h = [("x-gitlab-token", "my-token"), ("idempotency-key", "f5e5")];
    let v = check(&src, &h, body, NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "f5e5");
    let e = check(&src, &[("x-gitlab-token", "my-tokeN")], body, NOW).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
    // GitLab before 17.4 sends no Idempotency-Key: the body hash.
    let v = check(&src, &[("x-gitlab-token", "my-token")], body, NOW).unwrap();
    assert!(v.event_id().as_str().starts_with("sha256:"));
}
