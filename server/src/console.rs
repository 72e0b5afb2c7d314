//! The console: Leptos pages rendered here and hydrated in the browser, the
//! static files beside them, and the backend their server functions call.

use crate::api::device_login;
use crate::api::error::ApiError;
use crate::api::extract::ConsoleAction;
use crate::api::in_process::InProcessApi;
use crate::identity::access::Principal;
use crate::identity::tokens;
use crate::state::AppState;
use app::backend::{Backend, BoxFuture, ConsoleBackend, Refused};
use app::{App, shell};
use axum::Router;
use axum::http::{HeaderValue, Method, header};
use gpuplane_api::auth::{
    ClientAddress, CreateToken, CreatedToken, DeviceRequest, Scope, SessionUser, TokenInfo,
};
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, file_and_error_handler_with_context, generate_route_list};
use std::sync::Arc;

/// Page routes, server functions, and a fallback serving files from the site root.
pub fn router(state: &AppState, api: InProcessApi) -> Router<AppState> {
    let backend = Backend(Arc::new(ServerBackend {
        state: state.clone(),
        api,
    }));
    let context = move || {
        provide_context(backend.clone());
        // Leptos gives each page a fresh nonce for its hydration script.
        if let (Some(nonce), Some(response)) = (
            leptos::nonce::use_nonce(),
            leptos::prelude::use_context::<leptos_axum::ResponseOptions>(),
        ) && let Ok(policy) = HeaderValue::from_str(&content_security_policy(Some(&nonce)))
        {
            response.insert_header(header::CONTENT_SECURITY_POLICY, policy);
        }
    };
    let options = state.leptos.clone();
    let router = Router::new()
        .leptos_routes_with_context(state, generate_route_list(App), context.clone(), move || {
            shell(options.clone())
        })
        .fallback(file_and_error_handler_with_context::<AppState, _>(context, shell));
    // The manual's files have their own router (`manual`).
    let files = EMBEDDED.iter().filter(|(path, _)| !path.starts_with("docs/"));
    files.fold(router, |router, &(path, body)| {
        let headers = [(header::CONTENT_TYPE, content_type(path))];
        router.route(
            &format!("/{path}"),
            axum::routing::get(move || async move { (headers, body) }),
        )
    })
}

/// The console's files compiled into this binary (`cargo xtask dist`; see
/// `server/build.rs`), as (path under the site root, contents); empty in
/// other builds, which serve the files of `site_root`.
pub static EMBEDDED: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/embedded_site.rs"));

/// The media type of a console (or manual) file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map_or("", |(_, extension)| extension) {
        "html" => "text/html; charset=utf-8",
        "woff2" => "font/woff2",
        "js" => "text/javascript",
        "wasm" => "application/wasm",
        "css" => "text/css",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "webmanifest" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// What a console page may load: its own scripts (the hydrate bundle, and
/// the inline script that starts it, by nonce), WebAssembly, its own styles,
/// images and streams; nothing from elsewhere, and no framing.
fn content_security_policy(nonce: Option<&str>) -> String {
    let script = match nonce {
        Some(nonce) => format!("'self' 'nonce-{nonce}' 'wasm-unsafe-eval'"),
        None => "'self' 'wasm-unsafe-eval'".to_string(),
    };
    format!(
        "default-src 'none'; script-src {script}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

/// Headers on every console answer (pages, server functions, files): no
/// MIME sniffing, no referrer to other sites, no framing, and a
/// Content-Security-Policy for answers that have none of their own (pages
/// set theirs with their nonce): without a nonce, no inline script runs.
pub fn security_headers<S>(router: Router<S>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    use tower_http::set_header::SetResponseHeaderLayer;
    let policy =
        HeaderValue::from_str(&content_security_policy(None)).expect("the policy is a valid header value");
    let fixed = [
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::REFERRER_POLICY, HeaderValue::from_static("same-origin")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ];
    let router = router.layer(SetResponseHeaderLayer::if_not_present(
        header::CONTENT_SECURITY_POLICY,
        policy,
    ));
    fixed.into_iter().fold(router, |router, (name, value)| {
        router.layer(SetResponseHeaderLayer::overriding(name, value))
    })
}

struct ServerBackend {
    state: AppState,
    /// The API, for what pages read and change.
    api: InProcessApi,
}

impl ServerBackend {
    /// Runs one request through the API, bounded in bytes and time; the
    /// body of a success, or the API's status and error message.
    async fn call(
        &self,
        request: axum::http::Request<axum::body::Body>,
        path: &str,
        max_bytes: usize,
    ) -> Result<String, Refused> {
        let failed = |message: String| Refused {
            status: 500,
            message,
            details: Vec::new(),
        };
        let (status, body) = tokio::time::timeout(PAGE_READ_TIMEOUT, self.api.send(request, max_bytes))
            .await
            .map_err(|_| failed(format!("reading {path} took longer than {PAGE_READ_TIMEOUT:?}")))?;
        let body = body.ok_or_else(|| {
            failed(format!(
                "the answer to {path} is larger than a page may read ({max_bytes} bytes)"
            ))
        })?;
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            Ok(text)
        } else {
            let details = serde_json::from_str::<gpuplane_api::error::ErrorBody>(&text)
                .map(|body| body.error.details)
                .unwrap_or_default();
            Err(Refused {
                status: status.as_u16(),
                message: error_message(status, &text),
                details,
            })
        }
    }
}

/// The largest body a console change may send (a job spec with its environment).
const MAX_SEND_BYTES: usize = 1024 * 1024;

/// How long one read made for a page may take.
const PAGE_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A path on the API as the router will see it: nothing outside
/// `/api/v1/`, no `..`, no fragment, no scheme or host.
fn api_path(path: &str) -> Option<axum::http::Uri> {
    if path.contains('#') || path.contains('\\') {
        return None;
    }
    let uri: axum::http::Uri = path.parse().ok()?;
    if uri.scheme().is_some() || uri.authority().is_some() {
        return None;
    }
    let route = uri.path();
    let inside = route.starts_with("/api/v1/") && !route.contains("..") && !route.contains("//");
    inside.then_some(uri)
}

/// The API paths a page may read: [`api_path`]s that are not streams
/// (they never end). Answers are bounded in bytes and time by the caller.
fn readable_by_pages(path: &str) -> Option<axum::http::Uri> {
    api_path(path).filter(|uri| !uri.path().ends_with("/stream"))
}

fn principal(user: &SessionUser) -> Principal {
    Principal {
        user_id: Some(user.id.clone()),
        user_name: Some(user.name.clone()),
        is_admin: user.is_admin,
        project: None,
    }
}

/// An API error as a message for the console (validation details included).
fn message(error: impl Into<ApiError>) -> String {
    match error.into() {
        ApiError::Validation(details) => details
            .iter()
            .map(|d| format!("{}: {}", d.field, d.message))
            .collect::<Vec<_>>()
            .join("; "),
        ApiError::Internal(cause) => {
            tracing::error!(error = format!("{cause:#}"), "console request failed");
            "internal error; the server log has the cause".into()
        }
        other => other.to_string(),
    }
}

fn lookup_message(error: device_login::LookupError) -> String {
    match error {
        device_login::LookupError::Unknown => {
            "no pending sign-in has this code: check it, or start `gpuctl login` again".to_string()
        }
        device_login::LookupError::Limited(wait) => format!(
            "too many wrong or stale codes: try again in {} minutes",
            wait.as_secs() / 60 + 1
        ),
        device_login::LookupError::Internal(error) => message(error),
    }
}

/// The message of an API error body, with its field details.
fn error_message(status: axum::http::StatusCode, body: &str) -> String {
    match serde_json::from_str::<gpuplane_api::error::ErrorBody>(body) {
        Ok(error) if error.error.details.is_empty() => error.error.message,
        Ok(error) => error
            .error
            .details
            .iter()
            .map(|d| format!("{}: {}", d.field, d.message))
            .collect::<Vec<_>>()
            .join("; "),
        Err(_) => format!("the server answered {status}"),
    }
}

impl ConsoleBackend for ServerBackend {
    fn sso_name(&self) -> Option<String> {
        self.state.config.sso.as_ref().map(|sso| sso.display_name.clone())
    }

    fn public_url(&self) -> String {
        self.state.config.public_url()
    }

    fn device_lookup(
        &self,
        user_code: String,
        user_id: String,
        approver_ip: String,
    ) -> BoxFuture<'_, Result<DeviceRequest, String>> {
        Box::pin(async move {
            device_login::lookup(&self.state, &user_code, &user_id, &approver_ip)
                .await
                .map_err(lookup_message)
        })
    }

    fn device_decide(
        &self,
        user_code: String,
        user_id: String,
        approver_ip: String,
        approve: bool,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match device_login::decide(&self.state, &user_code, &user_id, &approver_ip, approve).await {
                Ok(true) => Ok(()),
                Ok(false) => Err("this request is no longer waiting (expired or already decided)".into()),
                Err(error) => Err(lookup_message(error)),
            }
        })
    }

    fn tokens(&self, user: SessionUser) -> BoxFuture<'_, Result<Vec<TokenInfo>, String>> {
        Box::pin(async move { tokens::list(&self.state.db, &user.id).await.map_err(message) })
    }

    fn create_token(
        &self,
        user: SessionUser,
        request: CreateToken,
    ) -> BoxFuture<'_, Result<CreatedToken, String>> {
        Box::pin(async move {
            tokens::create(&self.state.db, &principal(&user), Scope::Write, None, &request)
                .await
                .map_err(message)
        })
    }

    fn api_get(
        &self,
        user: SessionUser,
        path: String,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<String, Refused>> {
        Box::pin(async move {
            let refuse = |message: String| Refused {
                status: 400,
                message,
                details: Vec::new(),
            };
            let Some(uri) = readable_by_pages(&path) else {
                return Err(refuse(format!("the console does not read {path}")));
            };
            let mut request = InProcessApi::request(Method::GET, uri, None, None);
            request.extensions_mut().insert(user);
            self.call(request, &path, max_bytes).await
        })
    }

    fn api_send(
        &self,
        user: SessionUser,
        method: String,
        path: String,
        body: String,
        address: String,
    ) -> BoxFuture<'_, Result<String, Refused>> {
        Box::pin(async move {
            let refuse = |message: String| Refused {
                status: 400,
                message,
                details: Vec::new(),
            };
            let method = match method.to_ascii_uppercase().as_str() {
                "POST" => Method::POST,
                "PUT" => Method::PUT,
                "PATCH" => Method::PATCH,
                "DELETE" => Method::DELETE,
                other => return Err(refuse(format!("the console does not send {other} requests"))),
            };
            let Some(uri) = api_path(&path) else {
                return Err(refuse(format!("the console does not send to {path}")));
            };
            if body.len() > MAX_SEND_BYTES {
                return Err(refuse(format!(
                    "a console change is at most {MAX_SEND_BYTES} bytes"
                )));
            }
            let json = (!body.is_empty()).then_some(body);
            let address = address.parse().ok().map(ClientAddress);
            let mut request = InProcessApi::request(method, uri, json, address);
            request.extensions_mut().insert(ConsoleAction(user));
            self.call(request, &path, app::backend::MAX_READ_BYTES).await
        })
    }

    fn revoke_token(&self, user: SessionUser, token_id: String) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            tokens::revoke(&self.state.db, &user.id, &token_id)
                .await
                .map(|_| ())
                .map_err(message)
        })
    }
}
