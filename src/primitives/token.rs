//! Random tokens and ids: cache claim tokens, lease and run owners,
//! idempotency claim tokens, the ids `hookgate sign` and the tests invent.
//!
//! Rule: every random token in the crate is made here, from 128 bits of
//! `rand`'s thread-local generator (a CSPRNG), so how strong they are is
//! decided in one place.

/// 128 random bits as 32 lower-case hex digits.
pub fn random_hex() -> String {
    hex(&rand::random::<[u8; 16]>())
}

/// 128 random bits shaped as a version 4 UUID (RFC 9562 §5.4:
/// `xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx`, `V` one of 8, 9, a, b), for ids a
/// provider writes as UUIDs (PayPal's transmission ids).
pub fn random_uuid() -> String {
    let mut b = rand::random::<[u8; 16]>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    [&h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]].join("-")
}

/// Lower-case hex of `bytes` (a token, a digest), written in one pass:
/// `hex::encode` collects it a `char` at a time, and dedup runs this for
/// every request.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut out).expect("the output is twice the input");
    String::from_utf8(out).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_of_128_bits_and_differ() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn uuids_carry_version_4_and_the_rfc_variant() {
        for _ in 0..64 {
            let u = random_uuid();
            let parts: Vec<&str> = u.split('-').collect();
            let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
            assert_eq!(lens, [8, 4, 4, 4, 12], "{u}");
            assert!(parts[2].starts_with('4'), "{u}");
            assert!(
                matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
                "{u}"
            );
        }
    }

    #[test]
    fn hex_matches_the_hex_crate() {
        let bytes = [0u8, 1, 0x7f, 0x80, 0xfe, 0xff];
        assert_eq!(hex(&bytes), hex::encode(bytes));
        assert_eq!(hex(&[]), "");
    }
}
