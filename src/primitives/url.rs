//! Credentials in URLs (`scheme://user:password@host/…`): found, taken
//! out and hidden the same way for the database, the Redis cache and every
//! broker target.
//!
//! Rule: the userinfo is what stands between `://` and the URL's last `@`;
//! every caller that looks for credentials goes through [`userinfo`].

/// Byte range of the `user[:password]` part: after `://`, before the last
/// `@`. `None` when the URL names no one.
fn userinfo(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let at = url.rfind('@')?;
    (at >= start).then_some(start..at)
}

/// The user and password a URL names, as written (still percent-encoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials<'a> {
    pub user: &'a str,
    pub password: Option<&'a str>,
}

/// The URL without its `user[:password]@`, and the credentials it named.
pub fn split_credentials(url: &str) -> (String, Option<Credentials<'_>>) {
    let Some(range) = userinfo(url) else {
        return (url.to_owned(), None);
    };
    let bare = format!("{}{}", &url[..range.start], &url[range.end + 1..]);
    let info = &url[range];
    let credentials = match info.split_once(':') {
        Some((user, password)) => Credentials {
            user,
            password: Some(password),
        },
        None => Credentials {
            user: info,
            password: None,
        },
    };
    (bare, Some(credentials))
}

/// The URL with its `user:password@` replaced by `***@`, for output.
pub fn redact(url: &str) -> String {
    match userinfo(url) {
        Some(range) => format!("{}***{}", &url[..range.start], &url[range.end..]),
        None => url.to_owned(),
    }
}

/// `text` (an error message, a log line) with `url` redacted wherever it
/// appears, and its password hidden wherever a client printed it alone:
/// as written in the URL or percent-decoded, as it was sent.
pub fn redact_in(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact(url));
    if let (
        _,
        Some(Credentials {
            password: Some(pw), ..
        }),
    ) = split_credentials(url)
        && !pw.is_empty()
    {
        out = out.replace(pw, "***");
        let decoded = percent_decode_lossy(pw);
        if !decoded.is_empty() {
            out = out.replace(&decoded, "***");
        }
    }
    out
}

/// `%XX` escapes decoded; a malformed escape, or bytes that are not UTF-8
/// once decoded, are an error.
pub fn percent_decode(text: &str) -> Result<String, String> {
    let (bytes, clean) = decode_bytes(text);
    if !clean {
        return Err("bad percent-encoding".into());
    }
    String::from_utf8(bytes).map_err(|_| "percent-encoding is not UTF-8".into())
}

/// `%XX` escapes decoded, a malformed escape kept as written.
pub fn percent_decode_lossy(text: &str) -> String {
    String::from_utf8_lossy(&decode_bytes(text).0).into_owned()
}

/// The decoded bytes, and whether every `%` began a valid escape.
fn decode_bytes(text: &str) -> (Vec<u8>, bool) {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut clean = true;
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                clean &= b != b'%';
                out.push(b);
                i += 1;
            }
        }
    }
    (out, clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_out_and_the_rest_stays() {
        let (bare, c) = split_credentials("nats://app:p%40ss@127.0.0.1:4222");
        assert_eq!(bare, "nats://127.0.0.1:4222");
        assert_eq!(
            c,
            Some(Credentials {
                user: "app",
                password: Some("p%40ss")
            })
        );
        let (bare, c) = split_credentials("tls://tok@nats.internal:4222");
        assert_eq!(bare, "tls://nats.internal:4222");
        assert_eq!(c.unwrap().password, None);
        assert_eq!(split_credentials("redis://127.0.0.1").1, None);
        assert_eq!(
            redact("postgres://u:pw@db:5432/x"),
            "postgres://***@db:5432/x"
        );
        assert_eq!(redact("redis://127.0.0.1"), "redis://127.0.0.1");
    }

    #[test]
    fn decoding_is_strict_or_lossy_by_choice() {
        assert_eq!(percent_decode("p%40ss").unwrap(), "p@ss");
        assert!(percent_decode("p%4").is_err());
        assert!(percent_decode("%zz").is_err());
        assert!(percent_decode("%ff").is_err(), "not UTF-8");
        assert_eq!(percent_decode_lossy("a%zz%41"), "a%zzA");
    }

    #[test]
    fn redaction_hides_the_password_in_any_form() {
        let url = "redis://user:s3cret@127.0.0.1:6379/0";
        let out = redact_in(&format!("cannot reach {url}: auth s3cret refused"), url);
        assert!(!out.contains("s3cret"), "{out}");
        assert!(out.contains("redis://***@127.0.0.1:6379/0"), "{out}");
    }

    #[test]
    fn redaction_hides_broker_passwords_written_escaped_or_not() {
        for (url, shown) in [
            (
                "amqp://hookgate:s3cret@127.0.0.1:5672/%2f",
                "amqp://***@127.0.0.1:5672/%2f",
            ),
            (
                "nats://app:s3cret@127.0.0.1:4222",
                "nats://***@127.0.0.1:4222",
            ),
        ] {
            let text = format!("rabbitmq: cannot connect to {url}: PLAIN login s3cret refused");
            let out = redact_in(&text, url);
            assert!(!out.contains("s3cret"), "{out}");
            assert!(out.contains(shown), "{out}");
        }
        // A password with an escaped '@' may be printed decoded.
        let url = "amqp://u:p%40ss@127.0.0.1:5672/%2f";
        let out = redact_in(&format!("{url} refused p@ss and p%40ss"), url);
        assert!(!out.contains("p@ss") && !out.contains("p%40ss"), "{out}");
        assert!(out.contains("amqp://***@127.0.0.1:5672/%2f"), "{out}");
    }
}
