//! Byte budgets for memory that requests hold while they are in progress:
//! request bodies read before verification, upstream answers the proxy
//! buffers to store them. A budget has a total and, optionally, a share per
//! client, so one client cannot take all of it.
//!
//! Rule: nothing waits. A reservation that does not fit is refused at once
//! (the caller answers 503 + `Retry-After`), and a [`Lease`] gives back
//! everything it holds when it is dropped, however its request ended.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A total of bytes, shared by every request that holds part of it.
#[derive(Clone)]
pub struct ByteBudget(Arc<Inner>);

struct Inner {
    limit: usize,
    /// Most one client may hold; `limit` when there is no share.
    per_client: usize,
    used: AtomicUsize,
    /// Bytes held per client group ([`client_group`]); only groups holding
    /// something are present, so the map is bounded by the requests in
    /// progress. A mutex: each update is a few instructions and never
    /// spans an await.
    clients: Mutex<HashMap<IpAddr, usize>>,
}

impl std::fmt::Debug for ByteBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBudget")
            .field("limit", &self.0.limit)
            .field("per_client", &self.0.per_client)
            .field("used", &self.used())
            .finish()
    }
}

impl ByteBudget {
    /// `limit` bytes in all, at most `per_client` of them held by one
    /// client group.
    pub fn new(limit: usize, per_client: usize) -> Self {
        Self(Arc::new(Inner {
            limit,
            per_client: per_client.min(limit),
            used: AtomicUsize::new(0),
            clients: Mutex::new(HashMap::new()),
        }))
    }

    /// An empty lease for a request from `client` (`None`: counted in the
    /// total only).
    pub fn lease(&self, client: Option<IpAddr>) -> Lease {
        Lease {
            budget: self.clone(),
            client: client.map(client_group),
            bytes: 0,
        }
    }

    /// Bytes held now, by every lease.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.0.limit
    }

    fn take(&self, client: Option<IpAddr>, n: usize) -> bool {
        let inner = &self.0;
        let fits = inner
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= inner.limit)
            })
            .is_ok();
        if !fits {
            return false;
        }
        let Some(ip) = client else { return true };
        let mut clients = inner
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = clients.entry(ip).or_insert(0);
        if *held + n > inner.per_client {
            if *held == 0 {
                clients.remove(&ip);
            }
            drop(clients);
            inner.used.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        *held += n;
        true
    }

    fn give_back(&self, client: Option<IpAddr>, n: usize) {
        if n == 0 {
            return;
        }
        let inner = &self.0;
        if let Some(ip) = client {
            let mut clients = inner
                .clients
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(held) = clients.get_mut(&ip) {
                *held = held.saturating_sub(n);
                if *held == 0 {
                    clients.remove(&ip);
                }
            }
        }
        inner.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Part of a [`ByteBudget`] held by one request; returned on drop.
pub struct Lease {
    budget: ByteBudget,
    client: Option<IpAddr>,
    bytes: usize,
}

impl Lease {
    /// Takes `n` more bytes; `false` (nothing taken) when the total or the
    /// client's share would be exceeded.
    pub fn grow(&mut self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        if self.budget.take(self.client, n) {
            self.bytes += n;
            true
        } else {
            false
        }
    }

    /// Gives back `n` of the bytes this lease holds.
    pub fn shrink(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.budget.give_back(self.client, n);
        self.bytes -= n;
    }

    /// Bytes this lease holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.budget.give_back(self.client, self.bytes);
    }
}

/// The unit a per-client limit counts in: an IPv4 address, or the /64 an
/// IPv6 address belongs to (one host commonly holds a whole /64, so
/// counting its addresses one by one would give it millions of shares).
/// An IPv4-mapped IPv6 address is its IPv4 address.
pub fn client_group(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(bits.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn the_total_and_each_clients_share_are_held_to_and_given_back_on_drop() {
        let b = ByteBudget::new(100, 60);
        let mut a = b.lease(ip("10.0.0.1"));
        assert!(a.grow(60));
        assert!(!a.grow(1), "over the client's share");
        let mut c = b.lease(ip("10.0.0.2"));
        assert!(c.grow(40));
        assert!(!c.grow(1), "over the total");
        assert_eq!(b.used(), 100);
        drop(a);
        assert_eq!(b.used(), 40);
        assert!(c.grow(20));
        drop(c);
        assert_eq!(b.used(), 0);
        assert!(b.0.clients.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refused_share_takes_nothing_from_the_total() {
        let b = ByteBudget::new(100, 10);
        let mut a = b.lease(ip("10.0.0.1"));
        assert!(!a.grow(11));
        assert_eq!(b.used(), 0);
        let mut anon = b.lease(None);
        assert!(anon.grow(100));
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_one_group() {
        let a = client_group("2001:db8:1:2::1".parse().unwrap());
        let b = client_group("2001:db8:1:2:ffff::9".parse().unwrap());
        let c = client_group("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mapped = client_group("::ffff:1.2.3.4".parse().unwrap());
        assert_eq!(mapped, "1.2.3.4".parse::<IpAddr>().unwrap());
    }
}
