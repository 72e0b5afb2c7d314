//! Where a webhook may be sent. Alerts go to receivers on the internet; a
//! channel must not turn the server into a relay into its own network
//! (loopback, private and link-local addresses: the database, a cloud's
//! metadata service) unless an admin allows it (`alert_private_hosts`).
//! The check is made on the addresses actually connected to: the resolver
//! the senders use drops every forbidden address a name resolves to, so a
//! name that resolves elsewhere later (DNS rebinding) gains nothing.

use std::net::{IpAddr, SocketAddr};

/// Whether a webhook may connect to `ip` when private hosts are not allowed.
pub fn public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                // Shared address space (carrier-grade NAT), 100.64.0.0/10.
                || (a == 100 && (64..128).contains(&b))
                || a == 0)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local fc00::/7 and link-local fe80::/10.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// Why `ip` may not be a webhook's address, for errors.
pub fn refusal(ip: IpAddr) -> String {
    format!(
        "{ip} is a loopback, private or link-local address; webhooks go there only when an admin sets \
         alert_private_hosts = true"
    )
}

/// The resolver of the alert senders: the system's, with the forbidden
/// addresses taken out of every answer (all of them: the name fails).
pub struct Resolver {
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|address| allow_private || public(address.ip()))
                .collect();
            if allowed.is_empty() {
                let refused = found.first().map_or_else(
                    || format!("{host} resolves to no address"),
                    |address| format!("{host}: {}", refusal(address.ip())),
                );
                return Err(refused.into());
            }
            let addresses: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_inside_is_refused_the_internet_is_not() {
        for inside in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.9",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!public(inside.parse().unwrap()), "{inside}");
        }
        for outside in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(public(outside.parse().unwrap()), "{outside}");
        }
    }
}
