//! An alert as its sinks receive it: the JSON body stored in the event log
//! (an HTTP sink gets it as is, signed; the slack kind turns it into one
//! line, `target::slack`).
//!
//! ```json
//! {"type": "alert.fired", "alert": "ops", "state": "firing",
//!  "key": "ops/target_failing/billing", "episode": 3,
//!  "condition": "target_failing", "subject": "billing",
//!  "summary": "target billing failing for 5m 2s: …",
//!  "details": {…}, "at": "2026-01-01T00:00:00.000Z"}
//! ```

use super::conditions::Finding;
use crate::primitives::time::Millis;
use serde_json::json;

/// One change of one condition.
pub struct Alert<'a> {
    pub sink: &'a str,
    /// `<sink>/<condition>/<subject>`.
    pub key: &'a str,
    /// The episode: the fire's number, which its clear repeats.
    pub episode: i64,
    pub firing: bool,
    pub finding: &'a Finding,
    pub at: Millis,
}

impl Alert<'_> {
    /// `alert.fired` or `alert.cleared`.
    pub fn event_type(&self) -> &'static str {
        if self.firing {
            "alert.fired"
        } else {
            "alert.cleared"
        }
    }

    /// The same for every replica that sees this change, so the ledger
    /// keeps one: `<key>#<episode>#fired|cleared`.
    pub fn event_id(&self) -> String {
        let what = if self.firing { "fired" } else { "cleared" };
        format!("{}#{}#{what}", self.key, self.episode)
    }

    pub fn body(&self) -> Vec<u8> {
        let f = self.finding;
        serde_json::to_vec(&json!({
            "type": self.event_type(),
            "alert": self.sink,
            "state": if self.firing { "firing" } else { "cleared" },
            "key": self.key,
            "episode": self.episode,
            "condition": f.condition.as_str(),
            "subject": f.subject,
            "summary": f.summary,
            "details": f.details,
            "at": self.at.rfc3339(),
        }))
        .expect("JSON values serialize")
    }
}
