//! The API called from inside the server: the console's pages and MCP's
//! tools send requests through this one adapter, into the same router as
//! HTTP clients, so scopes, checks, errors and the audit log are the API's.
//! Each caller puts its own credentials on the request (the console its
//! signed-in user, MCP the assistant's bearer token).

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use gpuplane_api::auth::ClientAddress;
use tower::ServiceExt;

/// The API router, with its state, cloned for each call.
#[derive(Clone)]
pub struct InProcessApi(Router);

impl InProcessApi {
    pub fn new(api: Router) -> Self {
        InProcessApi(api)
    }

    /// A request to `uri` with `json` as its body when there is one, made
    /// for a client at `address` when it is known (the audit log names it).
    pub fn request(
        method: Method,
        uri: Uri,
        json: Option<String>,
        address: Option<ClientAddress>,
    ) -> Request<Body> {
        let is_json = json.is_some();
        let mut request = Request::new(json.map_or_else(Body::empty, Body::from));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        if is_json {
            request
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(address) = address {
            request.extensions_mut().insert(address);
        }
        request
    }

    /// Runs the request through the API: its status and body, or `None`
    /// for a body longer than `max_bytes`.
    pub async fn send(&self, request: Request<Body>, max_bytes: usize) -> (StatusCode, Option<Bytes>) {
        let response = match self.0.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        (
            status,
            axum::body::to_bytes(response.into_body(), max_bytes).await.ok(),
        )
    }
}
