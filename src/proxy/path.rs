//! The path a proxied request names after `/api/<name>`, checked before it is
//! joined to the upstream's base URL.
//!
//! The rest of the path is appended to `upstream` as text, and both the URL
//! parser on our side and the upstream's router resolve dot segments and
//! may decode `%2F` or `\` into separators. So a segment that is, in any
//! encoding, `.` or `..`, or that hides a separator, is refused (400) rather
//! than normalised: no client of a JSON API needs one, and refusing leaves
//! nothing for two parsers to disagree about. The joined URL is then parsed
//! once more and must still lie under the base path, on the same origin.
//!
//! Rule: pure functions of text; no I/O.

use reqwest::Url;

/// How many rounds of percent-decoding a segment is checked through: an
/// upstream behind another proxy may decode twice, and `%25252e` takes three.
const DECODE_ROUNDS: usize = 4;

/// Why a path is refused: 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path segments `.` and `..` are refused, in any encoding")]
    DotSegment,
    #[error("an encoded `/` or a `\\` in the path is refused")]
    Separator,
    #[error("the path has a percent-encoding that is not valid UTF-8 text")]
    Encoding,
    #[error("the path does not stay under the API's base path")]
    OutsideBase,
}

/// Checks `rest` (the raw, still percent-encoded path after `/api/<name>`,
/// starting with `/`) segment by segment.
pub fn check(rest: &str) -> Result<(), PathError> {
    for segment in rest.split('/') {
        check_segment(segment.as_bytes())?;
    }
    Ok(())
}

fn check_segment(raw: &[u8]) -> Result<(), PathError> {
    let mut current = raw.to_vec();
    for round in 0..=DECODE_ROUNDS {
        if current == b"." || current == b".." {
            return Err(PathError::DotSegment);
        }
        // A literal `\` is a separator to some servers (and to the WHATWG
        // URL parser for special schemes); a decoded `/` is one to any
        // upstream that decodes before routing.
        if current.contains(&b'\\') || (round > 0 && current.contains(&b'/')) {
            return Err(PathError::Separator);
        }
        // Overlong or otherwise invalid UTF-8 (`%c0%ae` for `.`) is how
        // dots and slashes hide from a decoder that checks bytes.
        if current.contains(&0) || std::str::from_utf8(&current).is_err() {
            return Err(PathError::Encoding);
        }
        if !current.contains(&b'%') {
            return Ok(());
        }
        let decoded = percent_decode(&current);
        if decoded == current {
            return Ok(());
        }
        current = decoded;
    }
    // Still changing after every round: nobody sends this in good faith.
    Err(PathError::Encoding)
}

/// `%XX` → the byte; anything else (including a stray `%`) as is.
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && let (Some(h), Some(l)) = (
                s.get(i + 1).and_then(|c| hex_val(*c)),
                s.get(i + 2).and_then(|c| hex_val(*c)),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// The upstream URL for `rest` (checked with [`check`]) and `query`: the
/// base URL plus the path, verified to stay under the base path on the
/// same scheme, host and port.
pub fn join(upstream: &str, rest: &str, query: Option<&str>) -> Result<Url, PathError> {
    check(rest)?;
    let base = Url::parse(upstream).map_err(|_| PathError::OutsideBase)?;
    let text = match query {
        Some(q) => format!("{upstream}{rest}?{q}"),
        None => format!("{upstream}{rest}"),
    };
    let url = Url::parse(&text).map_err(|_| PathError::OutsideBase)?;
    let base_path = base.path().trim_end_matches('/');
    let under = url
        .path()
        .strip_prefix(base_path)
        .is_some_and(|tail| tail.is_empty() || tail.starts_with('/'));
    if url.origin() != base.origin() || !under {
        return Err(PathError::OutsideBase);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_in_every_encoding_are_refused() {
        for p in [
            "/../secret",
            "/a/./b",
            "/%2e%2e/secret",
            "/%2E%2E/secret",
            "/.%2e/secret",
            "/%2e./secret",
            "/%2e",
            "/%252e%252e/secret",
            "/%25252e%25252e/x",
            "/a/..",
        ] {
            assert_eq!(check(p), Err(PathError::DotSegment), "{p}");
        }
    }

    #[test]
    fn encoded_separators_and_backslashes_are_refused() {
        for p in [
            "/a%2fb",
            "/a%2F..",
            "/a%5cb",
            "/a\\b",
            "/%252f",
            "/x%5C%2e%2e",
        ] {
            assert_eq!(check(p), Err(PathError::Separator), "{p}");
        }
        for p in ["/%c0%ae%c0%ae/x", "/a%00b", "/%ff"] {
            assert_eq!(check(p), Err(PathError::Encoding), "{p}");
        }
    }

    #[test]
    fn ordinary_paths_pass_and_keep_their_encoding() {
        for p in [
            "/charges",
            "/v1/orders/42",
            "/a%20b",
            "/...",
            "/.well-known/x",
            "/a..b",
            "/%",
            "/100%",
            "/caf%C3%A9",
            "//double",
        ] {
            assert_eq!(check(p), Ok(()), "{p}");
        }
        let u = join("http://up:8/v1", "/a%20b/c", Some("x=1&y=%2F")).unwrap();
        assert_eq!(u.as_str(), "http://up:8/v1/a%20b/c?x=1&y=%2F");
    }

    #[test]
    fn the_joined_url_stays_under_the_base_path_and_origin() {
        assert_eq!(
            join("http://up/v1", "/../v2", None),
            Err(PathError::DotSegment)
        );
        // Text that would change the authority or sit beside the base path.
        assert_eq!(
            join("http://up/v1", "x/../../y", None),
            Err(PathError::DotSegment)
        );
        assert_eq!(join("http://up/v1", "1", None), Err(PathError::OutsideBase));
        assert_eq!(
            join("http://up", "@evil/x", None),
            Err(PathError::OutsideBase)
        );
        assert!(join("http://up", "/x", None).is_ok());
    }
}
