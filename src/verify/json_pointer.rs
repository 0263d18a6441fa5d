//! JSON pointers (RFC 6901) read on a parsed value: the array index rule
//! and the scalar-as-text rule every locator shares.
//!
//! Rule: one reading of a pointer for the whole crate, so a pointer reads
//! the same value from a body's wanted part (`json_subset`) as from the
//! whole document.

use serde_json::Value;
use std::borrow::Cow;

/// An array index as JSON pointers read one (no sign, no leading zero).
pub fn index(s: &str) -> Option<usize> {
    if s.starts_with('+') || (s.starts_with('0') && s.len() != 1) {
        return None;
    }
    s.parse().ok()
}

/// A JSON scalar as text (`true`, `12`, `abc`); objects, arrays and null are
/// not values.
pub fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `Value::pointer` (RFC 6901) without an allocation per segment: a
/// segment is unescaped (`~1` to `/`, `~0` to `~`) only when it holds a
/// `~`; an array index is read by [`index`], as `json_subset` reads one.
pub fn at_pointer<'v>(v: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(v);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(v, |v, segment| {
            let segment = if segment.contains('~') {
                Cow::Owned(segment.replace("~1", "/").replace("~0", "~"))
            } else {
                Cow::Borrowed(segment)
            };
            match v {
                Value::Object(members) => members.get(&*segment),
                Value::Array(items) => items.get(index(&segment)?),
                _ => None,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `at_pointer` reads what serde_json's `Value::pointer` reads, escapes
    /// and array indices included.
    #[test]
    fn at_pointer_agrees_with_serde_json() {
        let doc: Value = serde_json::from_str(
            r#"{"id":"evt_1","a/b":{"m~n":[10,{"x":true}]},"":{"":"empty"},"list":[0,1,2]}"#,
        )
        .unwrap();
        for p in [
            "",
            "/id",
            "/a~1b",
            "/a~1b/m~0n",
            "/a~1b/m~0n/0",
            "/a~1b/m~0n/1/x",
            "/a~1b/m~0n/2",
            "/list/01",
            "/list/+1",
            "/list/2",
            "/list/-",
            "/",
            "//",
            "/id/0",
            "id",
            "/missing/x",
            "/a~1b/m~n",
        ] {
            assert_eq!(at_pointer(&doc, p), doc.pointer(p), "{p:?}");
        }
    }
}
