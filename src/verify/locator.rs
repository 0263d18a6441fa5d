//! Where values live in a request (locators), and the two template kinds
//! that use them: signed content (`{timestamp}.{body}`) and reply bodies
//! (`OK${form:InvId}`). Parsed once at load, evaluated per request.

/// Where a value is found in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    /// A request header (lowercase name).
    Header(String),
    /// A JSON pointer into the body (`/id`, `/event/id`). A `*` segment
    /// walks every element of an array; the values are joined with `,`.
    Json(String),
    /// A field of an `application/x-www-form-urlencoded` body.
    Form(String),
    /// A parameter of the request's query string (`query:data.id`).
    Query(String),
    /// A key of the parsed signature header (`pairs` format), e.g. Stripe's `t`.
    Signature(String),
}

/// Alternatives, tried in order; the first present wins. `lower:` in front
/// lowercases the value (Mercado Pago signs lowercased ids); `trimlf:`
/// drops trailing line feeds (Braintree accepts a signature over the
/// payload with or without one, so both spellings must name one event).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lookup {
    pub alternatives: Vec<Locator>,
    pub lowercase: bool,
    pub trim_line_feeds: bool,
}

impl Lookup {
    /// The locator as written in the config (`check-config`), alternatives
    /// joined with `|`.
    pub fn show(&self) -> String {
        self.alternatives
            .iter()
            .map(|a| match a {
                Locator::Header(h) => format!("header:{h}"),
                Locator::Json(p) => format!("json:{p}"),
                Locator::Form(f) => format!("form:{f}"),
                Locator::Query(q) => format!("query:{q}"),
                Locator::Signature(s) => format!("signature:{s}"),
            })
            .collect::<Vec<_>>()
            .join("|")
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut text = text.trim();
        let (mut lowercase, mut trim_line_feeds) = (false, false);
        loop {
            if let Some(rest) = text.strip_prefix("lower:") {
                (lowercase, text) = (true, rest);
            } else if let Some(rest) = text.strip_prefix("trimlf:") {
                (trim_line_feeds, text) = (true, rest);
            } else {
                break;
            }
        }
        let alternatives = text
            .split('|')
            .map(|s| Locator::parse(s.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            alternatives,
            lowercase,
            trim_line_feeds,
        })
    }

    /// The first header this lookup names, if any (for `hookgate sign`).
    pub fn header(&self) -> Option<&str> {
        self.alternatives.iter().find_map(|l| match l {
            Locator::Header(h) => Some(h.as_str()),
            _ => None,
        })
    }

    pub fn wants_json(&self) -> bool {
        self.alternatives
            .iter()
            .any(|l| matches!(l, Locator::Json(_)))
    }

    pub fn wants_form(&self) -> bool {
        self.alternatives
            .iter()
            .any(|l| matches!(l, Locator::Form(_)))
    }
}

impl Locator {
    fn parse(text: &str) -> Result<Self, String> {
        let (kind, arg) = text
            .split_once(':')
            .ok_or_else(|| format!("locator `{text}` must look like `header:NAME`"))?;
        if arg.is_empty() {
            return Err(format!("locator `{text}` has no name"));
        }
        match kind {
            "header" => Ok(Self::Header(arg.to_ascii_lowercase())),
            "json" if arg.starts_with('/') => Ok(Self::Json(arg.to_owned())),
            "json" => Err(format!("JSON pointer `{arg}` must start with `/`")),
            "form" => Ok(Self::Form(arg.to_owned())),
            "query" => Ok(Self::Query(arg.to_owned())),
            "signature" => Ok(Self::Signature(arg.to_owned())),
            other => Err(format!(
                "unknown locator kind `{other}` (use header, json, form, query or signature)"
            )),
        }
    }
}

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Url,
    /// The configured secret itself, for providers that hash it together
    /// with the content (iyzico, Midtrans, PayU).
    Secret,
    Value(Lookup),
    /// `[…]`: signed only when every value inside is present (Mercado
    /// Pago leaves `id:…;` out of its manifest when there is no `data.id`).
    Optional(Vec<Segment>),
}

/// Parses `"{timestamp}.{body}"` into segments; `[…]` (not nested) marks an
/// optional group.
pub fn parse_template(text: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        out.extend(parse_plain(&rest[..open])?);
        let inner = &rest[open + 1..];
        let close = inner
            .find(']')
            .ok_or_else(|| format!("unclosed `[` in `{text}`"))?;
        let group = parse_plain(&inner[..close])?;
        if group.is_empty() {
            return Err(format!("empty `[]` in `{text}`"));
        }
        out.push(Segment::Optional(group));
        rest = &inner[close + 1..];
    }
    out.extend(parse_plain(rest)?);
    Ok(out)
}

fn parse_plain(text: &str) -> Result<Vec<Segment>, String> {
    if text.contains(']') {
        return Err(format!("`]` without `[` in `{text}`"));
    }
    let mut out = Vec::new();
    for piece in split_placeholders(text, "{")? {
        out.push(match piece {
            Piece::Text(t) => Segment::Literal(t.as_bytes().to_vec()),
            Piece::Name("body") => Segment::Body,
            Piece::Name("timestamp") => Segment::Timestamp,
            Piece::Name("url") => Segment::Url,
            Piece::Name("secret") => Segment::Secret,
            Piece::Name(other) => Segment::Value(Lookup::parse(other)?),
        });
    }
    Ok(out)
}

/// One piece of a reply body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyPart {
    Literal(String),
    /// A value of the request (escaped for JSON replies).
    Value(Lookup),
    /// The provider's MAC of a value with the key that verified the
    /// request (Zoom's `encryptedToken`).
    Mac(Lookup),
}

/// Parses a reply body such as `OK${form:InvId}` or
/// `{"plainToken":"${json:/payload/plainToken}"}`. `${…}` is used so JSON
/// braces stay literal.
pub fn parse_reply(text: &str) -> Result<Vec<ReplyPart>, String> {
    let mut out = Vec::new();
    for piece in split_placeholders(text, "${")? {
        out.push(match piece {
            Piece::Text(t) => ReplyPart::Literal(t.to_owned()),
            Piece::Name(n) => match n.strip_prefix("mac:") {
                Some(rest) => ReplyPart::Mac(Lookup::parse(rest)?),
                None => ReplyPart::Value(Lookup::parse(n)?),
            },
        });
    }
    Ok(out)
}

enum Piece<'a> {
    Text(&'a str),
    Name(&'a str),
}

fn split_placeholders<'a>(text: &'a str, open: &str) -> Result<Vec<Piece<'a>>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        if start > 0 {
            out.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + open.len()..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("unclosed `{open}` in `{text}`"))?;
        out.push(Piece::Name(&after[..close]));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(alts: Vec<Locator>) -> Lookup {
        Lookup {
            alternatives: alts,
            lowercase: false,
            trim_line_feeds: false,
        }
    }

    #[test]
    fn template_parses_into_segments() {
        let t = parse_template("{header:webhook-id|header:svix-id}.{timestamp}.{body}").unwrap();
        assert_eq!(
            t,
            vec![
                Segment::Value(lookup(vec![
                    Locator::Header("webhook-id".into()),
                    Locator::Header("svix-id".into())
                ])),
                Segment::Literal(b".".to_vec()),
                Segment::Timestamp,
                Segment::Literal(b".".to_vec()),
                Segment::Body,
            ]
        );
        assert!(parse_template("{body").is_err());
        assert!(parse_template("{nope:x}").is_err());
        let m = parse_template("id:{lower:query:data.id};").unwrap();
        assert!(matches!(&m[1], Segment::Value(l) if l.lowercase));
        let o = parse_template("[id:{query:data.id};]ts:{timestamp};").unwrap();
        assert!(matches!(&o[0], Segment::Optional(g) if g.len() == 3));
        assert_eq!(o[1], Segment::Literal(b"ts:".to_vec()));
        assert!(parse_template("[id:{query:x}").is_err());
        assert!(parse_template("id]").is_err());
    }

    #[test]
    fn reply_templates_keep_json_braces() {
        let r = parse_reply(r#"{"code":0}"#).unwrap();
        assert_eq!(r, vec![ReplyPart::Literal(r#"{"code":0}"#.into())]);
        let r = parse_reply("OK${form:InvId}").unwrap();
        assert_eq!(
            r,
            vec![
                ReplyPart::Literal("OK".into()),
                ReplyPart::Value(lookup(vec![Locator::Form("InvId".into())]))
            ]
        );
        let r = parse_reply("${mac:json:/t}").unwrap();
        assert!(matches!(&r[0], ReplyPart::Mac(_)));
        assert!(parse_reply("${form:x").is_err());
    }
}
