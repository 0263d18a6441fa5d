//! How deep a JSON body nests, found without parsing it.
//!
//! Rule: every JSON read of a body that may run before the signature is
//! checked ([`json_subset`](super::json_subset), and through it the
//! request's fields) refuses a body nested deeper than [`MAX_JSON_DEPTH`]
//! first: a deep body costs far more to parse than its size suggests, and
//! `max_body_bytes` bounds only the size.

/// Deepest JSON nesting hookgate parses (real webhooks nest a handful of
/// levels; serde_json's own recursion limit is 128).
pub const MAX_JSON_DEPTH: usize = 32;

/// Whether `body`'s `[`/`{` nesting (outside strings) stays within `max`:
/// one pass over the bytes, no allocation. The inside of a string (most of
/// a webhook's bytes) is skipped with `memchr` to its next quote or
/// backslash instead of byte by byte.
pub fn json_depth_within(body: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // Past the string: its closing quote (a backslash escapes
                // the byte after it). Unterminated: nothing nests further.
                i += 1;
                loop {
                    let Some(k) = body.get(i..).and_then(|r| memchr::memchr2(b'"', b'\\', r))
                    else {
                        return true;
                    };
                    i += k;
                    if body[i] == b'"' {
                        break;
                    }
                    i += 2;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-by-byte scan the `memchr` one replaced: both must agree.
    fn depth_within_bytewise(body: &[u8], max: usize) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for &b in body {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return false;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        true
    }

    #[test]
    fn the_depth_scan_agrees_with_a_bytewise_scan_on_random_bodies() {
        // Bodies over the bytes that matter (quotes, escapes, brackets),
        // with a fixed-seed xorshift so a failure reproduces.
        let alphabet = b"\"\\[]{}a:,";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut body = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for _ in 0..(x % 40) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                body.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            for max in [0, 1, 2, 3] {
                assert_eq!(
                    json_depth_within(&body, max),
                    depth_within_bytewise(&body, max),
                    "{:?} max {max}",
                    String::from_utf8_lossy(&body)
                );
            }
        }
    }
}
