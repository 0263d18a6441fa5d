//! The per-client connection cap: each client may hold a share of a
//! listener's `max_connections`.
//!
//! Rule: "client" here is the TCP peer, the only address known before a
//! request is read (grouped as [`client_group`]: an IPv4 address, an IPv6
//! /64). A peer in `trusted_proxies` is exempt: behind a reverse proxy
//! every client arrives from the proxy's address, and capping it would cap
//! everyone; per-client fairness on that path is the proxy's to enforce
//! (docs/operations.md, "Security model").

use crate::primitives::budget::client_group;
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per client group.
pub struct Peers {
    per_client: usize,
    exempt: Vec<IpNet>,
    /// Only groups with an open connection are present. A mutex: one
    /// short update per accept and per close.
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a client; dropped when the connection closes.
pub struct Share {
    group: Option<IpAddr>,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Peers {
    pub fn new(per_client: usize, exempt: Vec<IpNet>) -> Self {
        Self {
            per_client: per_client.max(1),
            exempt,
            open: Arc::default(),
        }
    }

    /// A share for a new connection from `peer`, or `None` when its client
    /// already holds its whole share.
    pub fn admit(&self, peer: IpAddr) -> Option<Share> {
        let group = client_group(peer);
        if self.exempt.iter().any(|n| n.contains(&group)) {
            return Some(Share {
                group: None,
                open: self.open.clone(),
            });
        }
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(group).or_insert(0);
        if *n >= self.per_client {
            return None;
        }
        *n += 1;
        Some(Share {
            group: Some(group),
            open: self.open.clone(),
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let Some(group) = self.group else { return };
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&group) {
            *n -= 1;
            if *n == 0 {
                open.remove(&group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_gets_its_share_and_trusted_proxies_are_exempt() {
        let peers = Peers::new(2, vec!["10.0.0.0/8".parse().unwrap()]);
        let a1 = peers.admit(ip("192.0.2.1")).unwrap();
        let _a2 = peers.admit(ip("192.0.2.1")).unwrap();
        assert!(peers.admit(ip("192.0.2.1")).is_none());
        assert!(peers.admit(ip("192.0.2.2")).is_some());
        let proxies: Vec<_> = (0..5).map(|_| peers.admit(ip("10.1.2.3"))).collect();
        assert!(proxies.iter().all(Option::is_some));
        drop(a1);
        assert!(peers.admit(ip("192.0.2.1")).is_some());
    }

    #[test]
    fn addresses_of_one_ipv6_64_share_one_share() {
        let peers = Peers::new(1, vec![]);
        let _a = peers.admit(ip("2001:db8::1")).unwrap();
        assert!(peers.admit(ip("2001:db8::2")).is_none());
        assert!(peers.admit(ip("2001:db8:0:1::1")).is_some());
    }
}
