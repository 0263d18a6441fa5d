//! Human durations in config (`"500ms"`, `"5m"`, `"7d"`), parsed by `humantime`.

use serde::{Deserialize, Deserializer};
use std::time::Duration;

/// A duration written as text in the config file or environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map(Dur).map_err(serde::de::Error::custom)
    }
}

/// Parses `"30s"`, `"5m"`, `"7d"`, `"1h 30m"`; rejects an empty or unitless value.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration `{text}` ({e}); write e.g. \"30s\", \"5m\", \"7d\""))
}

/// Formats for `check-config` output.
pub fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_units_and_rejects_garbage() {
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse("5x").is_err());
        assert!(parse("").is_err());
        assert!(parse("10").is_err());
    }
}
