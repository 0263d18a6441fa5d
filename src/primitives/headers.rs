//! The provider headers an event is stored and forwarded with.
//!
//! Rule: typed in memory, from the request that brought the event to the
//! target that receives it; JSON text (`[[name, value], …]`) only in the
//! ledger row, written when the row is written and read once when a row is
//! read. Every value is UTF-8 text, so the stored text and the forwarded
//! bytes are the same whichever way a delivery reached its target.

use http::{HeaderName, HeaderValue};

/// Header names and values in request order, repeated names kept.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoredHeaders(Vec<(HeaderName, HeaderValue)>);

impl StoredHeaders {
    pub fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    /// Appends a header. A value that is not UTF-8 is read as ISO-8859-1
    /// (RFC 9110 §5.5's `obs-text`) and kept as the UTF-8 text of that.
    pub fn push(&mut self, name: HeaderName, value: HeaderValue) {
        let value = if std::str::from_utf8(value.as_bytes()).is_ok() {
            value
        } else {
            let text: String = value.as_bytes().iter().map(|&b| char::from(b)).collect();
            // Every char is U+0020..=U+00FF minus DEL, valid in a value.
            match HeaderValue::from_str(&text) {
                Ok(v) => v,
                Err(_) => return,
            }
        };
        self.0.push((name, value));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Names and values, typed (for an HTTP request).
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.0.iter().map(|(n, v)| (n, v))
    }

    /// Names and values as text (for a broker message).
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().filter_map(|(n, v)| {
            let v = std::str::from_utf8(v.as_bytes()).ok()?;
            Some((n.as_str(), v))
        })
    }

    /// The row's text: a JSON array of `[name, value]` pairs.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// Appends the row's text to `out`.
    fn write_json(&self, out: &mut Vec<u8>) {
        struct Pairs<'a>(&'a StoredHeaders);
        impl serde::Serialize for Pairs<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.pairs())
            }
        }
        serde_json::to_writer(out, &Pairs(self)).expect("strings always serialize");
    }

    /// Reads a row's text. A pair that is not a valid header is skipped;
    /// text that is not such an array holds no headers.
    pub fn from_json(text: &str) -> Self {
        // Borrowed where no text needed unescaping (the usual case).
        match serde_json::from_str::<Vec<(&str, &str)>>(text) {
            Ok(pairs) => Self::from_text(pairs),
            Err(_) => Self::from_text(
                serde_json::from_str::<Vec<(String, String)>>(text).unwrap_or_default(),
            ),
        }
    }

    fn from_text<N: AsRef<str>, V: AsRef<str>>(pairs: Vec<(N, V)>) -> Self {
        let mut out = Self::with_capacity(pairs.len());
        for (name, value) in pairs {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_ref().as_bytes()),
                HeaderValue::from_str(value.as_ref()),
            ) {
                out.0.push((n, v));
            }
        }
        out
    }
}

/// The row texts of several header lists in one buffer: a batch of rows
/// costs one allocation for its headers' text, not one per row.
pub struct JsonRows {
    text: String,
    ends: Vec<usize>,
}

impl JsonRows {
    pub fn of<'a>(lists: impl ExactSizeIterator<Item = &'a StoredHeaders>) -> Self {
        let mut ends = Vec::with_capacity(lists.len());
        let mut text = Vec::new();
        for h in lists {
            h.write_json(&mut text);
            ends.push(text.len());
        }
        Self {
            text: String::from_utf8(text).expect("JSON is UTF-8"),
            ends,
        }
    }

    /// Each list's text, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.text[a..b])
    }
}

/// Names only: a value may be a provider's signature.
impl std::fmt::Debug for StoredHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, _)| n))
            .finish()
    }
}

/// Parts of header names that carry credentials.
const SECRET_PARTS: &[&str] = &[
    "authorization",
    "cookie",
    "token",
    "signature",
    "secret",
    "password",
    "hmac",
    "key",
    "credential",
    "session",
    "auth",
];

/// `[redacted]` for any header that may carry a credential or signature.
pub fn redact(name: &str, value: &str) -> String {
    let n = name.to_ascii_lowercase();
    if SECRET_PARTS.iter().any(|p| n.contains(p)) {
        "[redacted]".to_owned()
    } else {
        value.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &[u8])]) -> StoredHeaders {
        let mut h = StoredHeaders::default();
        for (n, v) in pairs {
            h.push(
                HeaderName::from_static(n),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_row_text_reads_back_as_the_same_headers() {
        let h = headers(&[
            ("x-name", b"a \"q\""),
            ("x-twice", b"1"),
            ("x-twice", b"2"),
            ("x-utf8", "Zoë".as_bytes()),
            ("x-latin1", b"caf\xe9"),
        ]);
        let text = h.to_json();
        assert_eq!(
            text,
            r#"[["x-name","a \"q\""],["x-twice","1"],["x-twice","2"],["x-utf8","Zoë"],["x-latin1","café"]]"#
        );
        assert_eq!(StoredHeaders::from_json(&text), h);
        assert_eq!(StoredHeaders::default().to_json(), "[]");
        let none = StoredHeaders::default();
        let rows = JsonRows::of([&h, &none, &h].into_iter());
        assert_eq!(rows.iter().collect::<Vec<_>>(), [&text, "[]", &text]);
    }

    #[test]
    fn text_that_is_not_a_header_list_holds_no_headers() {
        assert!(StoredHeaders::from_json("not json").is_empty());
        let h = StoredHeaders::from_json(r#"[["bad name","x"],["x-ok","1"]]"#);
        assert_eq!(h.pairs().collect::<Vec<_>>(), [("x-ok", "1")]);
    }
}
