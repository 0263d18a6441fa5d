//! `split`: a batch body's items admitted one by one, each an event with
//! its own id (Meta's `entry`, Xero's `events`, Okta's `data.events`).
//!
//! Rule: items are cut from the verified body as the exact bytes the
//! provider sent (never re-serialised), so the same item has the same
//! bytes, and the same id, in whatever batch a retry regroups it into.
//! Called only after the whole body's signature verified.

use super::VerifyError;
use super::json_depth::{MAX_JSON_DEPTH, json_depth_within};
use bytes::Bytes;
use serde_json::value::RawValue;
use std::collections::HashMap;

/// Most items one request may carry (Meta batches up to 1000 updates).
pub const MAX_ITEMS: usize = 1000;

/// The items of the array at `pointer` in `body`, as slices of `body`.
pub fn items(body: &Bytes, pointer: &str) -> Result<Vec<Bytes>, VerifyError> {
    let text =
        std::str::from_utf8(body).map_err(|_| VerifyError::BadBody("body is not UTF-8 JSON"))?;
    if !json_depth_within(body, MAX_JSON_DEPTH) {
        return Err(VerifyError::BadBody("body is not valid JSON"));
    }
    let not_there = VerifyError::BadBody("no array of items where the source splits");
    let mut at: &RawValue =
        serde_json::from_str(text).map_err(|_| VerifyError::BadBody("body is not valid JSON"))?;
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        let inner = at.get();
        at = if inner.trim_start().starts_with('[') {
            let list: Vec<&RawValue> = serde_json::from_str(inner).map_err(|_| not_there)?;
            let i: usize = segment.parse().map_err(|_| not_there)?;
            list.get(i).copied().ok_or(not_there)?
        } else {
            let map: HashMap<String, &RawValue> =
                serde_json::from_str(inner).map_err(|_| not_there)?;
            map.get(&segment).copied().ok_or(not_there)?
        };
    }
    let list: Vec<&RawValue> = serde_json::from_str(at.get()).map_err(|_| not_there)?;
    if list.len() > MAX_ITEMS {
        return Err(VerifyError::BadBody("more items than a batch may hold"));
    }
    Ok(list
        .into_iter()
        .map(|item| body.slice_ref(item.get().as_bytes()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_the_bytes_as_sent() {
        let body =
            Bytes::from_static(br#"{"object":"page","entry":[ {"id":"1", "t" :2},{"id":"2"} ]}"#);
        let items = items(&body, "/entry").unwrap();
        assert_eq!(
            items,
            vec![&br#"{"id":"1", "t" :2}"#[..], &br#"{"id":"2"}"#[..]]
        );
        let nested = Bytes::from_static(br#"{"data":{"events":[{"uuid":"a"}]}}"#);
        assert_eq!(items_of(&nested, "/data/events"), 1);
        let root = Bytes::from_static(br#"[{"messageId":"m1"},{"messageId":"m2"}]"#);
        assert_eq!(items_of(&root, ""), 2, "the body itself is the array");
        let empty = Bytes::from_static(br#"{"events":[]}"#);
        assert_eq!(items_of(&empty, "/events"), 0);
        assert!(super::items(&empty, "/nope").is_err());
        assert!(super::items(&Bytes::from_static(br#"{"events":{}}"#), "/events").is_err());
        assert!(super::items(&Bytes::from_static(b"not json"), "/events").is_err());
    }

    fn items_of(body: &Bytes, p: &str) -> usize {
        super::items(body, p).unwrap().len()
    }
}
