//! The provider catalogue: the tables of `docs/providers.md`, written from
//! the compiled-in provider files (`hookgate providers`), so the
//! documentation says what hookgate verifies and nothing else.
//!
//! Rule: every cell comes from a provider file: its texts as written
//! (header names keep their case) and the checked [`Provider`] for what
//! the file leaves to defaults (the scheme's algorithm, the tolerance, the
//! settings a source must add). Prose lives around the generated part, in
//! the file, between [`BEGIN`] and [`END`].

use super::provider::Provider;
use super::registry::BUILTIN;
use super::spec::{Category, HeaderFormat, OneOrMany, ProviderFile};
use crate::primitives::duration::show;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Opens the generated part of `docs/providers.md`.
pub const BEGIN: &str =
    "<!-- generated: `hookgate providers --update docs/providers.md` writes what follows -->";
/// Closes it.
pub const END: &str = "<!-- generated: end -->";

/// One table per category, in [`Category`] order, providers by name.
pub fn markdown() -> String {
    let mut by_category: BTreeMap<Category, Vec<String>> = BTreeMap::new();
    for (file, text) in BUILTIN {
        let p = Provider::from_toml(text).unwrap_or_else(|e| panic!("provider {file}: {e}"));
        let raw = ProviderFile::parse(text).expect("parsed above");
        let preset = text
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get("preset")?.as_str().map(str::to_owned));
        by_category
            .entry(p.category)
            .or_default()
            .push(row(&p, &raw, preset.as_deref()));
    }
    let mut out = String::new();
    for (category, rows) in by_category {
        let _ = writeln!(out, "### {}\n", category.title());
        out.push_str(
            "| provider (`provider =`) | signature | algorithm → encoding, signed content \
             | event id (dedup key) | event type | tolerance | answer, handshake \
             | secret in the provider's dashboard | when registering the URL |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|---|---|\n");
        for r in rows {
            out.push_str(&r);
        }
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// `doc` with the text between [`BEGIN`] and [`END`] replaced by `generated`.
pub fn splice(doc: &str, generated: &str) -> Result<String, String> {
    let begin = doc
        .find(BEGIN)
        .ok_or_else(|| format!("the file has no `{BEGIN}` line"))?;
    let after = begin + BEGIN.len();
    let end = doc[after..]
        .find(END)
        .map(|e| after + e)
        .ok_or_else(|| format!("the file has no `{END}` line after the first marker"))?;
    Ok(format!("{}\n\n{generated}\n{}", &doc[..after], &doc[end..]))
}

fn row(p: &Provider, raw: &ProviderFile, preset: Option<&str>) -> String {
    let title = match p.docs.as_str() {
        "" => p.title.clone(),
        docs => format!("[{}]({docs})", p.title),
    };
    let mut sig = signature(p, raw);
    if let Some(preset) = preset {
        sig.push_str(&format!(" (preset `{preset}`)"));
    }
    let cells = [
        format!("{title} `{}`", p.name),
        sig,
        algorithm(p, raw),
        event_id(p, raw),
        event_type(p, raw),
        tolerance(p, raw),
        answer(p, raw),
        p.dashboard.clone(),
        register(p),
    ];
    let cells: Vec<String> = cells
        .iter()
        .map(|c| if c.is_empty() { "—".into() } else { cell(c) })
        .collect();
    format!("| {} |\n", cells.join(" | "))
}

/// A table cell: pipes escaped, one line.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn names(v: &Option<OneOrMany>) -> Vec<String> {
    match v {
        None => vec![],
        Some(OneOrMany::One(s)) => vec![s.clone()],
        Some(OneOrMany::Many(v)) => v.clone(),
    }
}

/// Where the signature is and how its value is laid out.
fn signature(p: &Provider, raw: &ProviderFile) -> String {
    use super::schemes::Scheme;
    let s = &raw.signature;
    if p.incomplete.is_some() {
        return "the source's `[sources.<name>.signature]` `header`".into();
    }
    if let Some(from) = &s.from {
        return format!("{} (in the request, no header)", place(from));
    }
    let sig = &p.signature;
    let layout = match sig.format {
        HeaderFormat::Value if sig.prefix.is_empty() => String::new(),
        HeaderFormat::Value => format!(" `{}…`", sig.prefix),
        HeaderFormat::Pairs => {
            let ts = raw
                .timestamp
                .as_ref()
                .and_then(|t| t.from.strip_prefix("signature:"))
                .map(|k| format!("{k}=…{}", sig.separator))
                .unwrap_or_default();
            let keys: Vec<String> = sig.keys.iter().map(|k| format!("{k}=…")).collect();
            format!(" `{ts}{}`", keys.join(&sig.separator))
        }
        HeaderFormat::Tagged => {
            let keys: Vec<String> = sig.keys.iter().map(|k| format!("{k},…")).collect();
            format!(" `{}`", keys.join(&sig.separator))
        }
        HeaderFormat::List => {
            let first = match raw.timestamp.as_ref().map(|t| t.from.as_str()) {
                Some("signature:0") => "timestamp",
                _ => "value",
            };
            let sep = &sig.separator;
            format!(" `{first}{sep}sig[{sep}sig…]`")
        }
    };
    let headers = names(&s.header);
    let mut out = match (headers.is_empty(), &sig.query) {
        (true, Some(q)) => format!("query `{q}`"),
        (true, None) if sig.scheme == Scheme::None => "none (unsigned)".into(),
        (true, None) => "in the body".into(),
        (false, _) => {
            let list: Vec<String> = headers.iter().map(|h| format!("`{h}`")).collect();
            let joined = list.join(if sig.every_header { " and " } else { " or " });
            format!("{joined}{layout}")
        }
    };
    if sig.every_header {
        out.push_str(" (every one present is tried)");
    }
    out
}

/// The algorithm and signed content (`hmac`), or the scheme's summary.
fn algorithm(p: &Provider, raw: &ProviderFile) -> String {
    use super::schemes::Scheme;
    use crate::primitives::crypto::{Encoding, SecretEncoding};
    let sig = &p.signature;
    if sig.scheme != Scheme::Hmac {
        return sig.scheme.summary().to_owned();
    }
    if p.incomplete.is_some() {
        return "HMAC-SHA1/256/512 → hex or base64, over the source's `signed_content` \
                (default `{body}`)"
            .into();
    }
    // `HmacSha256` → `HMAC-SHA256`, `Md5` → `MD5` (a plain digest, keyed
    // by `{secret}` in the content).
    let name = format!("{:?}", sig.algorithm);
    let alg = match name.strip_prefix("Hmac") {
        Some(d) => format!("HMAC-{}", d.to_uppercase()),
        None => name.to_uppercase(),
    };
    let enc = match sig.encoding {
        Encoding::Hex => "hex",
        Encoding::Base64 => "base64",
        Encoding::Base64url => "base64url",
    };
    let content = raw
        .signature
        .signed_content
        .clone()
        .unwrap_or_else(|| "{body}".into());
    let key = match sig.secret_encoding {
        SecretEncoding::Raw => String::new(),
        SecretEncoding::Base64 if sig.secret_prefixes.is_empty() => "; key: base64".into(),
        SecretEncoding::Base64 => format!(
            "; key: base64 after `{}`",
            sig.secret_prefixes.last().cloned().unwrap_or_default()
        ),
        SecretEncoding::Hex => "; key: hex".into(),
        SecretEncoding::Sha1 => "; key: SHA-1 of the secret".into(),
    };
    format!("{alg} → {enc}, `{content}`{key}")
}

fn event_id(p: &Provider, raw: &ProviderFile) -> String {
    let whole = id_rule(&raw.event_id);
    let Some(split) = &p.split else {
        return whole;
    };
    let items = format!(
        "body `{}`",
        split.items.trim_start_matches('/').replace('/', ".")
    );
    let item_id = match raw.split.as_ref().and_then(|s| s.event_id.as_ref()) {
        Some(e) => format!("{} within it", id_rule(e)),
        None => "the item's hash".into(),
    };
    let when = if split.default {
        "split (default): each item of"
    } else {
        "with `split = true`: each item of"
    };
    format!("{when} {items}, id {item_id}; unsplit: {whole}")
}

fn id_rule(e: &super::spec::EventIdSpec) -> String {
    let mut parts = Vec::new();
    if let Some(from) = &e.from {
        parts.push(place(from));
    }
    if !e.composite.is_empty() {
        let joined: Vec<String> = e.composite.iter().map(|c| place(c)).collect();
        let hashed = if e.digest { " (hashed)" } else { "" };
        parts.push(format!("{}{hashed}", joined.join(" + ")));
    }
    if e.body_hash {
        parts.push("body hash".into());
    }
    parts.join(", else ")
}

fn event_type(p: &Provider, raw: &ProviderFile) -> String {
    let parts = names(&raw.event_type);
    if parts.is_empty() {
        return p
            .signature
            .scheme
            .type_from()
            .unwrap_or_default()
            .to_owned();
    }
    let parts: Vec<String> = parts.iter().map(|t| place(t)).collect();
    parts.join(" `.` ")
}

fn tolerance(p: &Provider, raw: &ProviderFile) -> String {
    match (&p.timestamp, &raw.timestamp) {
        (Some(t), Some(r)) if !t.checked => format!("signed, age not checked ({})", place(&r.from)),
        (Some(t), Some(r)) => {
            let both = if t.reject_future { "" } else { ", age only" };
            format!("{} ({}{both})", show(t.tolerance), place(&r.from))
        }
        _ => "none".into(),
    }
}

/// The answer to a verified event, and the exchanges answered without
/// storing anything.
fn answer(p: &Provider, raw: &ProviderFile) -> String {
    let mut out = Vec::new();
    let r = &raw.response;
    if !r.body.is_empty() {
        out.push(format!("answers `{}`", r.body));
    }
    if let Some(s) = r.reject_status {
        out.push(format!("{s} on a bad signature"));
    }
    for (c, checked) in raw.control.iter().zip(&p.controls) {
        let when = match (&c.equals, c.absent) {
            (_, true) => format!("{} absent", place(&c.when)),
            (Some(v), _) => format!("{} = `{v}`", place(&c.when)),
            (None, _) => format!("{} present", place(&c.when)),
        };
        let reply = if c.reply.is_empty() {
            format!("{}", c.status)
        } else {
            format!("`{}`", c.reply)
        };
        let get = checked.method == super::spec::ControlMethod::Get;
        let order = match (checked.signed, &c.token) {
            (_, Some(t)) => format!("{} must equal `verify_token`", place(t)),
            (true, None) if get => "its headers checked like an event's".to_owned(),
            (true, None) => "after the signature".to_owned(),
            (false, None) if get => "unauthenticated".to_owned(),
            (false, None) => "when unsigned".to_owned(),
        };
        let method = if get { "GET " } else { "" };
        let learn = match &c.learn {
            Some(l) => format!(", {} stored as a secret of the source", place(l)),
            None => String::new(),
        };
        out.push(format!(
            "{method}{when} → {reply} ({order}){learn}; no event stored"
        ));
    }
    if let Some(h) = p.signature.scheme.handshake() {
        out.push(h.to_owned());
    }
    out.join("; ")
}

/// What the source needs beyond `https://<your host>/webhooks/<source>`.
fn register(p: &Provider) -> String {
    let mut out = Vec::new();
    if p.needs_public_url() {
        out.push("set `public_url` to exactly the URL registered".to_owned());
    }
    if p.needs_allow_ips() {
        out.push("`allow_ips` is required".to_owned());
    }
    if !p.note.is_empty() {
        out.push(p.note.clone());
    }
    out.join("; ")
}

/// A locator as a reader says it: `header:X-Id|json:/data/id` →
/// "`X-Id` header or body `data.id`".
fn place(text: &str) -> String {
    let text = text
        .trim()
        .trim_start_matches("lower:")
        .trim_start_matches("trimlf:");
    let alternatives: Vec<String> = text
        .split('|')
        .map(|alt| {
            let (kind, arg) = alt.trim().split_once(':').unwrap_or(("", alt));
            match kind {
                "header" => format!("`{arg}` header"),
                "json" => {
                    let path = arg
                        .trim_start_matches('/')
                        .replace("/*", "[]")
                        .replace('/', ".");
                    format!("body `{path}`")
                }
                "form" => format!("form `{arg}`"),
                "query" => format!("query `{arg}`"),
                "signature" => format!("signature `{arg}`"),
                _ => format!("`{alt}`"),
            }
        })
        .collect();
    alternatives.join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md");

    /// CI fails when a provider file changed and the catalogue did not.
    #[test]
    fn docs_providers_md_is_up_to_date() {
        let doc = std::fs::read_to_string(DOC).expect("docs/providers.md is readable");
        let want = splice(&doc, &markdown()).expect("docs/providers.md has the markers");
        assert!(
            doc == want,
            "docs/providers.md is out of date with providers/*.toml: \
             run `cargo run -- providers --update docs/providers.md` and commit the result"
        );
    }

    #[test]
    fn every_named_provider_has_a_row_under_its_category() {
        let md = markdown();
        for (file, text) in BUILTIN {
            let p = Provider::from_toml(text).unwrap();
            assert!(md.contains(&format!(" `{file}` |")), "{file} has no row");
            assert!(
                md.contains(&format!("### {}", p.category.title())),
                "{file}"
            );
        }
    }

    #[test]
    fn splice_replaces_only_the_generated_part() {
        let doc = format!("intro\n{BEGIN}\nold table\n{END}\noutro\n");
        let new = splice(&doc, "new table\n").unwrap();
        assert_eq!(
            new,
            format!("intro\n{BEGIN}\n\nnew table\n\n{END}\noutro\n")
        );
        assert_eq!(splice(&new, "new table\n").unwrap(), new, "idempotent");
        assert!(splice("no markers", "x").is_err());
    }

    #[test]
    fn places_read_like_prose() {
        assert_eq!(
            place("header:X-Id|json:/data/id"),
            "`X-Id` header or body `data.id`"
        );
        assert_eq!(place("json:/events/*/id"), "body `events[].id`");
        assert_eq!(place("lower:query:data.id"), "query `data.id`");
        assert_eq!(cell("a|b"), "a\\|b");
    }
}
