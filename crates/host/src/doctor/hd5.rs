//! HD5 (spec 2.3): whether this host runs the server, from the server URL
//! of the pairing and the peer of the control connection.

use std::net::IpAddr;
use std::time::Duration;

/// How long HD5 waits for the name of the server to resolve.
const HD5_LOOKUP_BOUND: Duration = Duration::from_secs(5);

/// HD5 (2.3): the host of `server_url` (of `pairing.json`) resolves to an address of an own
/// interface or to loopback, or `control_peer` (of the control connection) is local.
pub(super) async fn hd5(control_peer: Option<IpAddr>, server_url: Option<&str>) -> bool {
    if control_peer.is_some_and(is_own_address) {
        return true;
    }
    let Some((host, port)) = server_url.and_then(url_host_port) else {
        return false;
    };
    let lookup = tokio::task::spawn_blocking(move || {
        use std::net::ToSocketAddrs;
        (host.as_str(), port)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>())
            .unwrap_or_default()
    });
    match tokio::time::timeout(HD5_LOOKUP_BOUND, lookup).await {
        Ok(Ok(addrs)) => addrs.into_iter().any(is_own_address),
        _ => false,
    }
}

/// Whether `ip` is loopback or an address of one of this host's interfaces.
pub fn is_own_address(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    interfaces.into_iter().any(|interface| {
        interface.address.is_some_and(|address| {
            address
                .as_sockaddr_in()
                .map(|a| IpAddr::V4(a.ip()))
                .or_else(|| address.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
                == Some(ip)
        })
    })
}

/// Host and port of an `https://` (or `http://`, `wss://`, `ws://`) URL.
pub fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme {
        "https" | "wss" => 443,
        "http" | "ws" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port,
    };
    Some((host.to_owned(), port))
}
