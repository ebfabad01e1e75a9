//! Trusted proxies (`server.trusted_proxies`, issue 18; docs/decisions.md
//! D-506): behind an edge every TCP peer is the edge, so the rate limits of
//! unauthenticated calls (`rl.public_auth`, `rl.step_up_address`) would put
//! every client into one bucket. Only a request whose TCP peer is a trusted
//! proxy has its client address taken from `Forwarded` (RFC 7239, `for=`) or,
//! without it, `X-Forwarded-For`; any other request keeps the TCP peer, so a
//! forged header from an untrusted peer changes nothing.
//!
//! The header is read from the right: the hops a trusted proxy added are
//! skipped, and the first address that is not a trusted proxy is the client.
//! A hop that is no address (`unknown`, an obfuscated identifier, garbage)
//! ends the walk at the trusted hop to its right: the request is counted
//! against that proxy rather than against anything a client wrote.
//!
//! The list is written as CIDRs separated by commas (`10.0.0.0/8,
//! 2001:db8::/32`); a bare address is one host. Default: empty (no proxy is
//! trusted).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use axum::http::HeaderMap;
use axum::http::header::FORWARDED;

/// One network: an address as IPv6 (IPv4 mapped) and a prefix length of 0..=128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Network {
    bits: u128,
    prefix: u32,
}

impl Network {
    fn mask(prefix: u32) -> u128 {
        if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let mask = Network::mask(self.prefix);
        bits(ip) & mask == self.bits & mask
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip.to_canonical() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = IpAddr::V6(Ipv6Addr::from(self.bits)).to_canonical();
        match ip {
            IpAddr::V4(v4) => write!(f, "{v4}/{}", self.prefix.saturating_sub(96)),
            IpAddr::V6(v6) => write!(f, "{v6}/{}", self.prefix),
        }
    }
}

/// The trusted proxies of `server.trusted_proxies`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Network>);

/// A list that is not CIDRs separated by commas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a comma-separated list of IP networks such as 10.0.0.0/8, 2001:db8::/32 or 192.0.2.7")]
pub struct InvalidProxies;

impl FromStr for TrustedProxies {
    type Err = InvalidProxies;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut networks = Vec::new();
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(InvalidProxies);
            }
            let (address, prefix) = match item.split_once('/') {
                Some((address, prefix)) => (address, Some(prefix)),
                None => (item, None),
            };
            let ip: IpAddr = address.parse().map_err(|_| InvalidProxies)?;
            let width = if ip.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                None => width,
                Some(text) => {
                    // Digits only: no sign, no spaces, no leading `+`.
                    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(InvalidProxies);
                    }
                    text.parse::<u32>().map_err(|_| InvalidProxies)?
                }
            };
            if prefix > width {
                return Err(InvalidProxies);
            }
            let prefix = if ip.is_ipv4() { prefix + 96 } else { prefix };
            let bits = bits(ip) & Network::mask(prefix);
            networks.push(Network { bits, prefix });
        }
        Ok(TrustedProxies(networks))
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, network) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{network}")?;
        }
        Ok(())
    }
}

impl TrustedProxies {
    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|network| network.contains(ip))
    }

    /// The client address of a request from `peer` with `headers` (module
    /// docs); IPv4-mapped addresses come back as IPv4.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.contains(peer) {
            return peer;
        }
        let hops = if headers.contains_key(FORWARDED) {
            forwarded_hops(headers)
        } else {
            x_forwarded_for_hops(headers)
        };
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) if self.contains(*ip) => client = *ip,
                Some(ip) => return *ip,
                None => return client,
            }
        }
        client
    }
}

/// The hops of every `X-Forwarded-For` header, left to right.
fn x_forwarded_for_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|value| match value.to_str() {
            Ok(text) => text.split(',').map(|hop| node(hop.trim())).collect(),
            Err(_) => vec![None],
        })
        .collect()
}

/// The `for=` of every element of every `Forwarded` header, left to right;
/// an element without `for=` is a hop of unknown address.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all(FORWARDED)
        .iter()
        .flat_map(|value| match value.to_str() {
            Ok(text) => text
                .split(',')
                .map(|element| {
                    element.split(';').find_map(|pair| {
                        let (name, value) = pair.trim().split_once('=')?;
                        name.trim()
                            .eq_ignore_ascii_case("for")
                            .then(|| value.trim().trim_matches('"'))
                    })
                })
                .map(|value| value.and_then(node))
                .collect(),
            Err(_) => vec![None],
        })
        .collect()
}

/// An address with an optional port: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:80`.
fn node(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return inside
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| IpAddr::V6(ip).to_canonical());
    }
    let (address, port) = text.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    address.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn parses_lists_and_refuses_garbage() {
        let list: TrustedProxies = "10.0.0.0/8, 192.0.2.7,2001:db8::/32".parse().unwrap();
        assert_eq!(list.to_string(), "10.0.0.0/8, 192.0.2.7/32, 2001:db8::/32");
        assert!(list.contains(ip("10.200.0.1")));
        assert!(list.contains(ip("::ffff:10.1.2.3")));
        assert!(list.contains(ip("192.0.2.7")));
        assert!(!list.contains(ip("192.0.2.8")));
        assert!(list.contains(ip("2001:db8:ffff::1")));
        assert!(!list.contains(ip("2001:db9::1")));
        assert!("".parse::<TrustedProxies>().unwrap().is_empty());
        assert!(" ".parse::<TrustedProxies>().unwrap().is_empty());
        for bad in [
            "10.0.0.0/33",
            "2001:db8::/129",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/8,,192.0.2.1",
            "10.0.0.0/8,",
            "example.com",
            "10.0.0.0/8 192.0.2.1",
        ] {
            assert!(bad.parse::<TrustedProxies>().is_err(), "{bad}");
        }
        // Host bits beyond the prefix are dropped.
        let list: TrustedProxies = "10.1.2.3/8".parse().unwrap();
        assert_eq!(list.to_string(), "10.0.0.0/8");
        let all: TrustedProxies = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
    }

    #[test]
    fn an_untrusted_peer_keeps_its_address() {
        let list: TrustedProxies = "127.0.0.1".parse().unwrap();
        let forged = headers(&[("x-forwarded-for", "203.0.113.1")]);
        assert_eq!(list.client(ip("198.51.100.4"), &forged), ip("198.51.100.4"));
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("127.0.0.1"), &forged), ip("127.0.0.1"));
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right() {
        let list: TrustedProxies = "127.0.0.1, 10.0.0.0/8".parse().unwrap();
        let peer = ip("127.0.0.1");
        // A client-written first hop cannot hide behind the edge's hop.
        let h = headers(&[("x-forwarded-for", "198.51.100.1, 203.0.113.5")]);
        assert_eq!(list.client(peer, &h), ip("203.0.113.5"));
        // Hops of trusted proxies are skipped.
        let h = headers(&[("x-forwarded-for", "203.0.113.5, 10.1.1.1")]);
        assert_eq!(list.client(peer, &h), ip("203.0.113.5"));
        // Several headers are one list.
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.5"),
            ("x-forwarded-for", "10.1.1.1"),
        ]);
        assert_eq!(list.client(peer, &h), ip("203.0.113.5"));
        // Garbage ends at the trusted hop to its right.
        let h = headers(&[("x-forwarded-for", "203.0.113.5, garbage, 10.1.1.1")]);
        assert_eq!(list.client(peer, &h), ip("10.1.1.1"));
        // Without a header: the peer.
        assert_eq!(list.client(peer, &HeaderMap::new()), peer);
        // With ports and brackets.
        let h = headers(&[("x-forwarded-for", "[2001:db8::7]:443")]);
        assert_eq!(list.client(peer, &h), ip("2001:db8::7"));
        let h = headers(&[("x-forwarded-for", "203.0.113.5:5000")]);
        assert_eq!(list.client(peer, &h), ip("203.0.113.5"));
    }

    #[test]
    fn forwarded_wins_over_x_forwarded_for() {
        let list: TrustedProxies = "127.0.0.1".parse().unwrap();
        let peer = ip("127.0.0.1");
        let h = headers(&[
            (
                "forwarded",
                r#"for=198.51.100.1;proto=https, For="[2001:db8::9]:8443""#,
            ),
            ("x-forwarded-for", "203.0.113.5"),
        ]);
        assert_eq!(list.client(peer, &h), ip("2001:db8::9"));
        let h = headers(&[("forwarded", "for=unknown")]);
        assert_eq!(list.client(peer, &h), peer);
        let h = headers(&[("forwarded", "proto=https")]);
        assert_eq!(list.client(peer, &h), peer);
    }
}
