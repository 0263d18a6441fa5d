//! Reading only the wanted part of a JSON body.
//!
//! Rule: code that may run before the signature is checked (Adyen's items,
//! T-Bank's root fields, templates such as Linear's timestamp, event-id
//! fallbacks such as Mercado Pago's) never builds a `serde_json::Value` of
//! the whole body. It describes the paths it needs as a [`Want`], and
//! [`subset`] walks the body once with serde, materialising those paths and
//! skipping everything else with `IgnoredAny` (which allocates nothing).
//! The result keeps the body's shape along the wanted paths, so a JSON
//! pointer read on it gives what it gives on the whole document.
//!
//! The whole body is still checked: it must be UTF-8, valid JSON, and
//! nested at most [`MAX_JSON_DEPTH`] levels, or [`subset`] returns `None`.

use super::json_depth::{MAX_JSON_DEPTH, json_depth_within};
use super::json_pointer::index;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// The part of a JSON value wanted at one position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// The value if it is a scalar (string, number, bool); `null` for a
    /// container, whose contents are skipped.
    Leaf,
    /// Only these members of an object (or, for names that are array
    /// indices, these elements of an array; earlier ones become `null`).
    Keys(Vec<(String, Want)>),
    /// Each element of an array, up to `limit` (the rest is skipped).
    Items { each: Box<Want>, limit: usize },
    /// Every member of an object.
    EveryKey(Box<Want>),
}

impl Want {
    /// The subset a JSON pointer (`/a/0/b`, with `*` segments for every
    /// array element, as `fields::Fields` reads them) needs. `None` when no
    /// document can match it (a segment starting with `*` but longer).
    pub fn pointer(pointer: &str, limit: usize) -> Option<Self> {
        if pointer.is_empty() {
            return Some(Self::Leaf);
        }
        let rest = pointer.strip_prefix('/')?;
        let (head, tail) = match rest.split_once('/') {
            Some((h, t)) => (h, Some(t)),
            None => (rest, None),
        };
        let inner = match tail {
            Some(t) => Self::pointer(&format!("/{t}"), limit)?,
            None => Self::Leaf,
        };
        if head == "*" {
            return Some(Self::Items {
                each: Box::new(inner),
                limit,
            });
        }
        if head.starts_with('*') {
            return None;
        }
        let name = head.replace("~1", "/").replace("~0", "~");
        Some(Self::Keys(vec![(name, inner)]))
    }

    /// Only whether the body is an object.
    pub fn shape() -> Self {
        Self::Keys(Vec::new())
    }

    /// One want covering both, so one walk of a body serves the pointers
    /// of each: any pointer reads the same value from the merged subset as
    /// from its own. `None` when the two ask for a position in ways one
    /// walk cannot serve both (member names and every-item at once).
    pub fn merge(self, other: Want) -> Option<Want> {
        Some(match (self, other) {
            // A leaf reads scalars, which every want keeps.
            (Want::Leaf, w) | (w, Want::Leaf) => w,
            (Want::Keys(mut a), Want::Keys(b)) => {
                for (name, want) in b {
                    match a.iter().position(|(n, _)| *n == name) {
                        Some(i) => {
                            let mine = std::mem::replace(&mut a[i].1, Want::Leaf);
                            a[i].1 = mine.merge(want)?;
                        }
                        None => a.push((name, want)),
                    }
                }
                Want::Keys(a)
            }
            (Want::Items { each: a, limit: la }, Want::Items { each: b, limit: lb }) => {
                Want::Items {
                    each: Box::new(a.merge(*b)?),
                    limit: la.max(lb),
                }
            }
            (Want::EveryKey(a), Want::EveryKey(b)) => Want::EveryKey(Box::new(a.merge(*b)?)),
            _ => return None,
        })
    }
}

/// The wanted part of `body`, or `None` when the body is not UTF-8 JSON
/// nested at most [`MAX_JSON_DEPTH`] levels.
pub fn subset(body: &[u8], want: &Want) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?;
    if !json_depth_within(body, MAX_JSON_DEPTH) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let v = Seed(want).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(v)
}

struct Seed<'w>(&'w Want);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Walk(self.0))
    }
}

/// Which wanted key (by position) an object member's name is, without
/// allocating the name.
struct KeyOf<'w>(&'w [(String, Want)]);

impl<'de> DeserializeSeed<'de> for KeyOf<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyOf<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|(k, _)| k == s))
    }
}

struct Walk<'w>(&'w Want);

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(n.into())
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(n.into())
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        match self.0 {
            Want::Items { each, limit } => {
                while out.len() < *limit {
                    match seq.next_element_seed(Seed(each))? {
                        Some(v) => out.push(v),
                        None => return Ok(Value::Array(out)),
                    }
                }
            }
            Want::Keys(keys) => {
                let last = keys.iter().filter_map(|(k, _)| index(k)).max();
                let mut i = 0;
                while last.is_some_and(|last| i <= last) {
                    let want = keys.iter().rev().find(|(k, _)| index(k) == Some(i));
                    let next = match want {
                        Some((_, w)) => seq.next_element_seed(Seed(w))?,
                        None => seq.next_element::<IgnoredAny>()?.map(|_| Value::Null),
                    };
                    match next {
                        Some(v) => out.push(v),
                        None => return Ok(Value::Array(out)),
                    }
                    i += 1;
                }
            }
            Want::Leaf | Want::EveryKey(_) => {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(Value::Null);
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        match self.0 {
            Want::Keys(keys) => {
                while let Some(at) = map.next_key_seed(KeyOf(keys))? {
                    match at {
                        // A wanted name given twice: which one counts would
                        // depend on the reader (hookgate, or a consumer
                        // that keeps the first), so the body is refused.
                        Some(i) if out.contains_key(&keys[i].0) => {
                            return Err(serde::de::Error::custom("duplicate key"));
                        }
                        Some(i) => {
                            let v = map.next_value_seed(Seed(&keys[i].1))?;
                            out.insert(keys[i].0.clone(), v);
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
            }
            Want::EveryKey(each) => {
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom("duplicate key"));
                    }
                    let v = map.next_value_seed(Seed(each))?;
                    out.insert(k, v);
                }
            }
            Want::Leaf | Want::Items { .. } => {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Value::Null);
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::json_pointer::scalar;
    use serde_json::json;

    fn pick(body: &str, pointer: &str) -> Option<Value> {
        subset(body.as_bytes(), &Want::pointer(pointer, 1000).unwrap())
    }

    #[test]
    fn a_pointer_reads_the_same_value_from_the_subset_as_from_the_whole_body() {
        let body = r#"{"a":{"b":[10,{"c":"x~/y"},true],"n":1.5},"z":null,"a~b":{"c/d":7}}"#;
        let whole: Value = serde_json::from_str(body).unwrap();
        for p in [
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/2",
            "/a/b/3",
            "/a/b/01",
            "/a/n",
            "/z",
            "/nope",
            "/a~0b/c~1d",
            "/a/b",
            "",
        ] {
            let part = pick(body, p).unwrap();
            let read = |v: &Value| v.pointer(p).and_then(scalar);
            assert_eq!(read(&part), read(&whole), "{p}");
        }
    }

    #[test]
    fn a_merged_want_reads_each_pointer_as_its_own_walk_does() {
        let body = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1",
            "lines":[{"id":"l1"},{"id":"l2"}],"currency":"eur"}},"created":17,"n":[1,2,3]}"#;
        let pointers = [
            "/id",
            "/type",
            "/data/object/id",
            "/data/object/currency",
            "/data/object/lines/*/id",
            "/data/object",
            "/created",
            "/n/1",
            "/missing",
        ];
        let merged = pointers
            .iter()
            .map(|p| Want::pointer(p, 10).unwrap())
            .try_fold(Want::Leaf, Want::merge)
            .unwrap();
        let together = subset(body, &merged).unwrap();
        for p in pointers {
            let alone = subset(body, &Want::pointer(p, 10).unwrap()).unwrap();
            let (a, b) = (
                alone.pointer(p).and_then(scalar),
                together.pointer(p).and_then(scalar),
            );
            assert_eq!(a, b, "{p}");
        }
        let mut out = Vec::new();
        for item in together
            .pointer("/data/object/lines")
            .unwrap()
            .as_array()
            .unwrap()
        {
            out.push(item.pointer("/id").and_then(scalar).unwrap());
        }
        assert_eq!(out, ["l1", "l2"]);
        // Names and every-item at one position cannot share a walk.
        let items = Want::pointer("/a/*", 10).unwrap();
        let name = Want::pointer("/a/b", 10).unwrap();
        assert_eq!(items.merge(name), None);
    }

    #[test]
    fn wildcards_keep_every_item_up_to_the_limit() {
        let body = r#"{"events":[{"id":"a","x":[1,2]},{"id":"b"},{"n":1}]}"#;
        let part = pick(body, "/events/*/id").unwrap();
        assert_eq!(part, json!({"events":[{"id":"a"},{"id":"b"},{}]}));
        let two = subset(body.as_bytes(), &Want::pointer("/events/*/id", 2).unwrap()).unwrap();
        assert_eq!(two["events"].as_array().unwrap().len(), 2);
        assert_eq!(Want::pointer("/events/*x/id", 2), None);
    }

    /// Issue #32: a wanted name given twice is refused (readers disagree
    /// on which counts); a repeated name nobody wants is skipped.
    #[test]
    fn a_repeated_wanted_name_gives_nothing_and_others_are_skipped() {
        assert_eq!(pick(r#"{"id":"a","id":"b"}"#, "/id"), None);
        assert_eq!(pick(r#"{"d":{"id":"a","id":"b"}}"#, "/d/id"), None);
        assert_eq!(
            pick(r#"{"id":"a","x":1,"x":2}"#, "/id").unwrap(),
            json!({"id":"a"})
        );
    }

    #[test]
    fn invalid_too_deep_or_non_utf8_bodies_give_nothing() {
        assert_eq!(pick(r#"{"id":"a"} x"#, "/id"), None);
        assert_eq!(pick(r#"{"id":"a""#, "/id"), None);
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(40), "]".repeat(40));
        assert_eq!(pick(&deep, "/id"), None);
        assert_eq!(
            subset(b"{\"a\":\"\xff\"}", &Want::pointer("/id", 1).unwrap()),
            None
        );
    }

    #[test]
    fn a_hundred_thousand_irrelevant_keys_are_skipped_not_kept() {
        let mut body = String::from("{");
        for i in 0..100_000 {
            body.push_str(&format!("\"k{i}\":{{\"deep\":[1,2,{{\"x\":\"y\"}}]}},"));
        }
        body.push_str("\"id\":\"evt_1\"}");
        let part = pick(&body, "/id").unwrap();
        assert_eq!(
            part,
            json!({"id":"evt_1"}),
            "only the wanted member is materialised"
        );
        let shape = subset(body.as_bytes(), &Want::shape()).unwrap();
        assert_eq!(shape, json!({}));
    }

    #[test]
    fn every_key_keeps_root_scalars_and_drops_containers() {
        let body = r#"{"a":"x","b":2,"c":{"d":1},"e":[1],"f":null,"g":true}"#;
        let part = subset(body.as_bytes(), &Want::EveryKey(Box::new(Want::Leaf))).unwrap();
        assert_eq!(
            part,
            json!({"a":"x","b":2,"c":null,"e":null,"f":null,"g":true})
        );
        assert_eq!(
            subset(b"[1,2]", &Want::EveryKey(Box::new(Want::Leaf))),
            Some(Value::Null)
        );
    }
}
