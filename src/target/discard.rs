//! `kind = "discard"` (a toy kind proving the recipe): every attempt is
//! delivered at once and the message is dropped.
//!
//! Rule: nothing is sent anywhere.

use super::kind::{Check, Endpoint, KindDef, Message, RawKeys, Sent};
use serde::de::MapAccess;

/// `kind = "discard"`.
pub struct DiscardKind;

/// The keys only a discard target takes.
#[derive(Debug, Default)]
pub struct Raw {
    /// A note shown by `check-config`. Required.
    pub note: Option<String>,
}

impl RawKeys for Raw {
    const KEYS: &'static [&'static str] = &["note"];

    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "note" => self.note = Some(map.next_value()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn set(&self) -> Vec<&'static str> {
        self.note.iter().map(|_| "note").collect()
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub note: String,
}

impl KindDef for DiscardKind {
    const NAME: &'static str = "discard";
    type Raw = Raw;
    type Spec = Spec;
    type Sink = ();

    fn check_url(url: &str) -> Result<(), String> {
        super::kind::needs_scheme(Self::NAME, &["discard://"], url)
    }

    fn validate(raw: Raw, check: &mut Check<'_>) -> Spec {
        if raw.note.is_none() {
            check.problem("note", "a discard target needs `note`".into());
        }
        Spec {
            note: raw.note.unwrap_or_default(),
        }
    }

    fn describe(spec: &Spec) -> String {
        format!(" kind=discard note={}", spec.note)
    }

    fn sink(_: &Spec, _: &reqwest::Client) {}

    async fn send(_: &(), _: &Endpoint<'_>, _: &Message<'_>) -> Sent {
        Sent::Delivered { status: None }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    const CONFIG: &str = r#"
[sources.stripe]
provider = "stripe"
secrets = ["whsec_a"]
targets = ["bin"]

[targets.bin]
kind = "discard"
url = "discard://"
note = "toy"
"#;

    #[tokio::test]
    async fn a_discard_target_loads_describes_itself_and_delivers() {
        let c = Config::from_toml_str(CONFIG, Path::new(".")).unwrap();
        let t = &c.targets["bin"];
        assert!(crate::cli::describe::describe(&c).contains(" kind=discard note=toy"));
        let body = bytes::Bytes::from_static(b"{}");
        let headers = crate::primitives::headers::StoredHeaders::default();
        let event = crate::target::Event {
            source: "stripe",
            event_id: "evt_1",
            event_type: None,
            body: &body,
            headers: &headers,
        };
        let sent = t
            .kind
            .sink(&reqwest::Client::new())
            .send(&t.endpoint(), &t.message(event, 1, 0))
            .await;
        assert_eq!(sent, crate::target::Sent::Delivered { status: None });

        let p = Config::from_toml_str(&CONFIG.replace("note = \"toy\"", ""), Path::new("."))
            .unwrap_err()
            .problems;
        assert_eq!(p[0].0, "targets.bin.note", "{p:?}");
        let http = CONFIG
            .replace("kind = \"discard\"\nurl = \"discard://\"", "url = \"http://127.0.0.1:9/\"");
        let p = Config::from_toml_str(&http, Path::new(".")).unwrap_err().problems;
        assert!(p[0].1.contains("only a discard target takes `note`"), "{p:?}");
    }
}
