//! `storage.redis_url`: the URL scheme picks the Redis topology.
//!
//! - `redis://…` / `rediss://…`: one server, as the redis crate parses it.
//! - `redis+sentinel://[user:pass@]host:26379[,host:26379…]/<master>[?db=N]`:
//!   ask the sentinels for the master; the credentials are the master's.
//! - `redis+cluster://[user:pass@]host:7000[,host:7001…]`: seed nodes of a
//!   Redis Cluster; the rest of the cluster is discovered from them.
//!
//! The `redis+…` spelling follows the crate's own `redis+unix://`.

use crate::primitives::url::percent_decode;

/// A validated Redis target.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTopology {
    Standalone(String),
    Sentinel {
        sentinels: Vec<(String, u16)>,
        master: String,
        db: i64,
        auth: Auth,
    },
    Cluster {
        nodes: Vec<(String, u16)>,
        auth: Auth,
    },
}

/// `user:password@` of a `redis+…` URL, percent-decoded.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Auth {
    pub username: Option<String>,
    pub password: Option<String>,
}

impl RedisTopology {
    pub fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        match scheme {
            "redis" | "rediss" => Ok(Self::Standalone(url.to_owned())),
            "redis+sentinel" => {
                let (auth, hosts, path, query) = split(rest)?;
                let master = path.trim_matches('/');
                if master.is_empty() || master.contains('/') {
                    return Err(
                        "give the master name as the path: redis+sentinel://host:26379/<master>"
                            .into(),
                    );
                }
                Ok(Self::Sentinel {
                    sentinels: host_list(hosts, 26379)?,
                    master: percent_decode(master)?,
                    db: db(query)?,
                    auth,
                })
            }
            "redis+cluster" => {
                let (auth, hosts, path, query) = split(rest)?;
                if !path.trim_matches('/').is_empty() || !query.is_empty() {
                    return Err(
                        "a cluster URL takes no path or query (cluster has only db 0)".into(),
                    );
                }
                Ok(Self::Cluster {
                    nodes: host_list(hosts, 6379)?,
                    auth,
                })
            }
            _ => Err(format!(
                "unsupported scheme `{scheme}://` (use redis://, rediss://, redis+sentinel:// or redis+cluster://)"
            )),
        }
    }

    /// `standalone`, `sentinel` or `cluster`, for output.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Standalone(_) => "standalone",
            Self::Sentinel { .. } => "sentinel",
            Self::Cluster { .. } => "cluster",
        }
    }
}

/// `[userinfo@]hosts[/path][?query]` → (auth, hosts, path, query).
fn split(rest: &str) -> Result<(Auth, &str, &str, &str), String> {
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (hosts, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let auth = match userinfo {
        None => Auth::default(),
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let opt = |s: &str| (!s.is_empty()).then(|| percent_decode(s)).transpose();
            Auth {
                username: opt(user)?,
                password: opt(pass)?,
            }
        }
    };
    Ok((auth, hosts, path, query))
}

fn host_list(hosts: &str, default_port: u16) -> Result<Vec<(String, u16)>, String> {
    let list = hosts
        .split(',')
        .map(|h| {
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) => {
                    let port = port.parse().map_err(|_| format!("bad port in `{h}`"))?;
                    (host, port)
                }
                None => (h, default_port),
            };
            if host.is_empty() {
                return Err(format!("missing host in `{hosts}`"));
            }
            Ok((host.to_owned(), port))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(list)
}

fn db(query: &str) -> Result<i64, String> {
    let mut db = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("db", n)) => db = n.parse().map_err(|_| format!("bad db `{n}`"))?,
            _ => return Err(format!("unknown query parameter `{pair}` (only db=N)")),
        }
    }
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standalone_urls_pass_through() {
        for u in ["redis://127.0.0.1:6379/2", "rediss://u:p@h:6380"] {
            assert!(RedisTopology::parse(u) == Ok(RedisTopology::Standalone(u.into())));
        }
    }

    #[test]
    fn sentinel_url_names_sentinels_master_db_and_credentials() {
        let t = RedisTopology::parse("redis+sentinel://app:p%40ss@a:26380,b/mymaster?db=3");
        let Ok(RedisTopology::Sentinel {
            sentinels,
            master,
            db,
            auth,
        }) = t
        else {
            panic!("not a sentinel URL");
        };
        assert_eq!(sentinels, [("a".into(), 26380), ("b".into(), 26379)]);
        assert_eq!((master.as_str(), db), ("mymaster", 3));
        assert_eq!(auth.username.as_deref(), Some("app"));
        assert_eq!(auth.password.as_deref(), Some("p@ss"));
    }

    #[test]
    fn cluster_url_lists_seed_nodes() {
        let t = RedisTopology::parse("redis+cluster://:secret@h1:7000,h2:7001");
        let Ok(RedisTopology::Cluster { nodes, auth }) = t else {
            panic!("not a cluster URL");
        };
        assert_eq!(nodes, [("h1".into(), 7000), ("h2".into(), 7001)]);
        assert_eq!(
            (auth.username, auth.password.as_deref()),
            (None, Some("secret"))
        );
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_the_password() {
        for (url, want) in [
            ("memcached://h:1", "unsupported scheme `memcached://`"),
            ("127.0.0.1:6379", "unsupported scheme"),
            ("redis+sentinel://h:26379", "master name"),
            ("redis+sentinel://h:26379/m?db=x", "bad db"),
            (
                "redis+sentinel://h:26379/m?timeout=1",
                "unknown query parameter",
            ),
            ("redis+cluster://u:hunter2@h:7000/1", "no path"),
            ("redis+cluster://u:hunter2@h:port", "bad port"),
            ("redis+cluster://u:hunter2@h:1,,h:2", "missing host"),
        ] {
            let Err(e) = RedisTopology::parse(url) else {
                panic!("{url} accepted");
            };
            assert!(e.contains(want), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{url}: {e}");
        }
    }
}
