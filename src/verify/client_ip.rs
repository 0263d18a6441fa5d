//! The client address and the per-source `allow_ips` list.
//!
//! Rule: the address is the TCP peer. `X-Forwarded-For` is consulted only
//! when the peer is one of the configured `trusted_proxies`, and then the
//! rightmost entry that is not itself a trusted proxy is the client (entries
//! further left were written by the client and prove nothing).

use super::VerifyError;
use http::HeaderMap;
use ipnet::IpNet;
use std::net::IpAddr;

/// Most `X-Forwarded-For` entries walked.
const MAX_HOPS: usize = 16;

/// Parses `"77.75.153.0/25"` or a single address (`"185.59.216.65"`).
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    let t = text.trim();
    t.parse::<IpNet>()
        .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is not an IP address or CIDR block"))
}

/// The client address of a request that arrived from `peer`.
pub fn client_ip(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let peer = peer.map(canonical)?;
    if !trusted.iter().any(|n| n.contains(&peer)) {
        return Some(peer);
    }
    let mut client = peer;
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect::<Vec<_>>();
    for hop in hops.iter().rev().take(MAX_HOPS) {
        let Ok(ip) = hop.parse::<IpAddr>().map(canonical) else {
            // Garbage in the chain: stop at the last address we could trust.
            break;
        };
        client = ip;
        if !trusted.iter().any(|n| n.contains(&ip)) {
            break;
        }
    }
    Some(client)
}

/// `::ffff:1.2.3.4` is `1.2.3.4` (dual-stack listeners report it so).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// An empty list allows everyone; otherwise the client must be inside one
/// block (an unknown client address is refused).
pub fn check(allow: &[IpNet], client: Option<IpAddr>) -> Result<(), VerifyError> {
    if allow.is_empty() {
        return Ok(());
    }
    match client {
        Some(ip) if allow.iter().any(|n| n.contains(&ip)) => Ok(()),
        _ => Err(VerifyError::IpNotAllowed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| parse_net(n).unwrap()).collect()
    }

    #[test]
    fn allowlist_accepts_blocks_and_single_addresses() {
        let allow = nets(&[
            "77.75.153.0/25",
            "185.71.76.0/27",
            "2a02:5180:0:1509::/64",
            "185.59.216.65",
        ]);
        for ok in [
            "77.75.153.5",
            "185.71.76.31",
            "2a02:5180:0:1509::1",
            "185.59.216.65",
        ] {
            assert!(check(&allow, Some(ok.parse().unwrap())).is_ok(), "{ok}");
        }
        for bad in ["77.75.153.200", "10.0.0.1", "2a02:5180:0:1510::1"] {
            assert_eq!(
                check(&allow, Some(bad.parse().unwrap())),
                Err(VerifyError::IpNotAllowed)
            );
        }
        assert_eq!(check(&allow, None), Err(VerifyError::IpNotAllowed));
        assert!(check(&[], None).is_ok());
        assert!(parse_net("300.1.1.1").is_err());
        assert!(parse_net("1.2.3.0/33").is_err());
    }

    #[test]
    fn forwarded_for_is_only_trusted_from_trusted_proxies() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 1.2.3.4, 10.0.0.2"),
        );
        let trusted = nets(&["10.0.0.0/8"]);
        let from_proxy = client_ip(Some("10.0.0.1".parse().unwrap()), &h, &trusted);
        assert_eq!(from_proxy, Some("1.2.3.4".parse().unwrap()));
        let direct = client_ip(Some("5.5.5.5".parse().unwrap()), &h, &trusted);
        assert_eq!(direct, Some("5.5.5.5".parse().unwrap()));
        let none_trusted = client_ip(Some("10.0.0.1".parse().unwrap()), &h, &[]);
        assert_eq!(none_trusted, Some("10.0.0.1".parse().unwrap()));
        let mapped = client_ip(Some("::ffff:1.2.3.4".parse().unwrap()), &h, &[]);
        assert_eq!(mapped, Some("1.2.3.4".parse().unwrap()));
    }
}
