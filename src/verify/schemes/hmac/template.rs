//! The signed-content template of an `hmac` provider: the bytes it names
//! for one request, and what of a request it covers (`check-config`'s
//! signedness).

use crate::verify::locator::{Locator, Lookup, Segment};
use crate::verify::provider::Provider;
use crate::verify::schemes::{Cover, Part};
use std::borrow::Cow;

/// The parts of a signed-content template that do not need a lookup.
pub(super) struct Fixed<'a> {
    pub body: &'a [u8],
    pub timestamp: &'a str,
    pub url: &'a str,
    /// The key being tried, for `{secret}` (providers that hash their
    /// secret together with the content).
    pub secret: &'a [u8],
}

/// The signed bytes of `content`, in order, with `value` resolving each
/// lookup. A missing value fails the whole (`None`) unless it sits in an
/// optional group, which is then left out.
pub(super) fn assemble<'a>(
    content: &'a [Segment],
    fixed: &Fixed<'a>,
    value: &mut dyn FnMut(&Lookup) -> Option<Vec<u8>>,
) -> Option<Vec<Cow<'a, [u8]>>> {
    let mut out = Vec::with_capacity(content.len());
    for seg in content {
        match seg {
            Segment::Literal(b) => out.push(Cow::Borrowed(b.as_slice())),
            Segment::Body => out.push(Cow::Borrowed(fixed.body)),
            Segment::Timestamp => out.push(Cow::Borrowed(fixed.timestamp.as_bytes())),
            Segment::Url => out.push(Cow::Borrowed(fixed.url.as_bytes())),
            Segment::Secret => out.push(Cow::Borrowed(fixed.secret)),
            Segment::Value(l) => out.push(Cow::Owned(value(l)?)),
            Segment::Optional(group) => {
                if let Some(parts) = assemble(group, fixed, value) {
                    out.extend(parts);
                }
            }
        }
    }
    Some(out)
}

pub(super) fn as_slices<'p>(parts: &'p [Cow<'_, [u8]>]) -> Vec<&'p [u8]> {
    parts.iter().map(|p| p.as_ref()).collect()
}

pub(super) fn has_lowercase(content: &[Segment]) -> bool {
    content.iter().any(|s| match s {
        Segment::Value(l) => l.lowercase,
        Segment::Optional(g) => has_lowercase(g),
        _ => false,
    })
}


/// Whether the template `content` signs `part`: `{body}` covers every
/// body field, `{url}` the query, `{timestamp}` wherever the timestamp is
/// read, and a `{locator}` its own value.
pub fn template_covers(provider: &Provider, content: &[Segment], part: Part<'_>) -> Cover {
    let has = |want: &dyn Fn(&Segment) -> bool| any_segment(content, want);
    let at = match part {
        Part::Body => return Cover::signed_if(has(&|s| *s == Segment::Body)),
        Part::OwnType => return Cover::Unsigned,
        Part::At(at) => at,
    };
    let named = has(&|s| matches!(s, Segment::Value(l) if l.alternatives.contains(at)));
    let by_whole = match at {
        Locator::Json(_) | Locator::Form(_) => has(&|s| *s == Segment::Body),
        Locator::Query(_) => has(&|s| *s == Segment::Url),
        Locator::Header(_) | Locator::Signature(_) => false,
    };
    let timestamp = provider
        .timestamp
        .as_ref()
        .is_some_and(|t| t.from.alternatives.contains(at))
        && has(&|s| *s == Segment::Timestamp);
    Cover::signed_if(named || by_whole || timestamp)
}

/// Whether any segment of `content`, optional groups included, is `want`.
pub(super) fn any_segment(content: &[Segment], want: &dyn Fn(&Segment) -> bool) -> bool {
    content.iter().any(|s| match s {
        Segment::Optional(group) => any_segment(group, want),
        s => want(s),
    })
}

