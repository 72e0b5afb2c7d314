//! The one middleware every request passes: it records the client's address
//! (believing `X-Forwarded-For` only from trusted proxies) and refuses
//! state-changing requests from other origins, which keeps other sites from
//! posting the console's forms or server functions.

use crate::api::error::ApiError;
use crate::state::AppState;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpuplane_api::auth::ClientAddress;
use std::net::{IpAddr, SocketAddr};

/// The client's address: the peer's, or, when the peer is one of
/// `trusted_proxies`, the nearest address in `X-Forwarded-For` that is not
/// a trusted proxy itself. Requests without a peer (in-process calls) get 0.0.0.0.
fn client_address(request: &Request, trusted_proxies: &[IpAddr]) -> ClientAddress {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip())
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    if trusted_proxies.is_empty() {
        return ClientAddress(peer.to_canonical());
    }
    let forwarded = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    ClientAddress(resolve_client(peer, &forwarded, trusted_proxies))
}

fn resolve_client(peer: IpAddr, forwarded_for: &str, trusted: &[IpAddr]) -> IpAddr {
    // `::ffff:10.0.0.1` (an IPv4 peer on a dual-stack socket) is 10.0.0.1.
    let trusted = |address: IpAddr| trusted.iter().any(|t| t.to_canonical() == address);
    let peer = peer.to_canonical();
    if !trusted(peer) {
        return peer;
    }
    let mut client = peer;
    for hop in forwarded_for.rsplit(',') {
        let hop = hop.trim();
        // An entry may carry a port: `203.0.113.7:4711`, `[2001:db8::1]:4711`.
        let address = hop
            .parse::<IpAddr>()
            .or_else(|_| hop.parse::<SocketAddr>().map(|socket| socket.ip()));
        let Ok(address) = address else {
            break; // Garbage: believe nothing further left.
        };
        client = address.to_canonical();
        if !trusted(client) {
            break;
        }
    }
    client
}

/// Refuses state-changing requests from other origins. Browsers send
/// `Origin` (or at least `Referer`) with every POST; it must name this
/// server. Bearer-token API routes (ours under `/api/`, MLflow's under
/// `/api/` and `/ajax-api/`) and the OAuth endpoints, which never use
/// cookies, are exempt. Also puts the client's [`ClientAddress`] in the
/// request's extensions (for rate limits), so every request pays for one
/// middleware, not two.
pub async fn check_origin(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let client = client_address(&request, &state.config.trusted_proxies);
    request.extensions_mut().insert(client);
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let path = request.uri().path();
    let exempt = path.starts_with("/api/") || path.starts_with("/ajax-api/") || path.starts_with("/oauth/");
    if safe || exempt || same_origin(request.headers(), &state.config.public_url()) {
        return next.run(request).await;
    }
    tracing::warn!(path, origin = ?request.headers().get(header::ORIGIN), "cross-origin request refused");
    ApiError::Forbidden(
        "cross-origin request refused: this form must be sent from the GPUPlane console".into(),
    )
    .into_response()
}

/// Puts the client's [`ClientAddress`] in the request's extensions, for
/// routes outside [`check_origin`] (MCP checks its own origins), so their
/// audit entries carry it too.
pub async fn record_client(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let client = client_address(&request, &state.config.trusted_proxies);
    request.extensions_mut().insert(client);
    next.run(request).await
}

fn same_origin(headers: &HeaderMap, public_url: &str) -> bool {
    let claimed = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|value| value.to_str().ok());
    let Some(claimed) = claimed else { return false };
    let origin_of = |url: &str| -> Option<String> {
        let (scheme, rest) = url.split_once("://")?;
        let authority = rest.split('/').next()?;
        Some(format!("{scheme}://{authority}"))
    };
    let Some(claimed) = origin_of(claimed) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let allowed = [
        origin_of(public_url),
        host.map(|h| format!("http://{h}")),
        host.map(|h| format!("https://{h}")),
    ];
    allowed.into_iter().flatten().any(|origin| origin == claimed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let proxy = ip("10.0.0.1");
        let trusted = [proxy, ip("10.0.0.2")];
        // From an untrusted peer the header is ignored.
        assert_eq!(
            resolve_client(ip("203.0.113.9"), "198.51.100.1", &trusted),
            ip("203.0.113.9")
        );
        // From the proxy: the nearest untrusted hop.
        assert_eq!(
            resolve_client(proxy, "198.51.100.1", &trusted),
            ip("198.51.100.1")
        );
        assert_eq!(
            resolve_client(proxy, "1.1.1.1, 198.51.100.1, 10.0.0.2", &trusted),
            ip("198.51.100.1"),
            "a spoofed left-most entry is not believed"
        );
        assert_eq!(resolve_client(proxy, "", &trusted), proxy);
        assert_eq!(resolve_client(proxy, "garbage", &trusted), proxy);
        // A dual-stack socket shows the proxy as ::ffff:10.0.0.1; entries may carry ports.
        assert_eq!(
            resolve_client(ip("::ffff:10.0.0.1"), "198.51.100.1:4711", &trusted),
            ip("198.51.100.1")
        );
        assert_eq!(
            resolve_client(proxy, "[2001:db8::1]:443", &trusted),
            ip("2001:db8::1")
        );
    }

    #[test]
    fn origins_must_match_the_server() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:8600".parse().unwrap());
        assert!(
            !same_origin(&headers, "http://127.0.0.1:8600"),
            "no Origin, no Referer"
        );
        headers.insert(header::ORIGIN, "http://127.0.0.1:8600".parse().unwrap());
        assert!(same_origin(&headers, "http://gpuplane.example"));
        headers.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&headers, "http://127.0.0.1:8600"));
        headers.insert(header::ORIGIN, "https://gpuplane.example".parse().unwrap());
        assert!(same_origin(&headers, "https://gpuplane.example"));
    }
}
