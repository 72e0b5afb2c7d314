//! The console: Leptos pages rendered here and hydrated in the browser, the
//! static files beside them, and the backend their server functions call.

use crate::access::Principal;
use crate::error::ApiError;
use crate::state::AppState;
use crate::{device, tokens};
use app::backend::{Backend, BoxFuture, ConsoleBackend};
use app::{App, shell};
use axum::Router;
use gpuplane_api::auth::{CreateToken, CreatedToken, DeviceRequest, Scope, SessionUser, TokenInfo};
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, file_and_error_handler_with_context, generate_route_list};
use std::sync::Arc;

/// Page routes, server functions, and a fallback serving files from the site root.
pub fn router(state: &AppState) -> Router<AppState> {
    let backend = Backend(Arc::new(ServerBackend {
        state: state.clone(),
        api: crate::api::router().0.with_state(state.clone()),
    }));
    let context = move || provide_context(backend.clone());
    let options = state.leptos.clone();
    Router::new()
        .leptos_routes_with_context(state, generate_route_list(App), context.clone(), move || {
            shell(options.clone())
        })
        .fallback(file_and_error_handler_with_context::<AppState, _>(context, shell))
}

struct ServerBackend {
    state: AppState,
    /// The API, for reads made on behalf of a page.
    api: Router,
}

/// The largest API answer a page reads (a full log may be bigger: it is downloaded instead).
const MAX_PAGE_READ: usize = 32 * 1024 * 1024;

/// The API paths a page may read: no streams (they never end) and nothing outside `/api/v1/`.
fn readable_by_pages(path: &str) -> bool {
    let route = path.split('?').next().unwrap_or_default();
    route.starts_with("/api/v1/") && !route.contains("..") && !route.ends_with("/stream")
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
fn message(error: ApiError) -> String {
    match error {
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

    fn device_lookup(
        &self,
        user_code: String,
        limiter_key: String,
    ) -> BoxFuture<'_, Result<DeviceRequest, String>> {
        Box::pin(async move {
            device::lookup(&self.state, &user_code, &limiter_key)
                .await
                .map_err(|error| match error {
                    device::LookupError::Unknown => {
                        "no pending sign-in has this code: check it, or start `gpuctl login` again"
                            .to_string()
                    }
                    device::LookupError::Limited(wait) => {
                        format!(
                            "too many wrong codes: try again in {} minutes",
                            wait.as_secs() / 60 + 1
                        )
                    }
                    device::LookupError::Internal(error) => message(error),
                })
        })
    }

    fn device_decide(
        &self,
        user_code: String,
        user_id: String,
        approve: bool,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match device::decide(&self.state, &user_code, &user_id, approve).await {
                Ok(true) => Ok(()),
                Ok(false) => Err("this request is no longer waiting (expired or already decided)".into()),
                Err(error) => Err(message(error)),
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
            tokens::create(&self.state.db, &principal(&user), Scope::Write, &request)
                .await
                .map_err(message)
        })
    }

    fn api_get(&self, user: SessionUser, path: String) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async move {
            use tower::ServiceExt;
            if !readable_by_pages(&path) {
                return Err(format!("the console does not read {path}"));
            }
            let mut request = axum::http::Request::get(&path)
                .body(axum::body::Body::empty())
                .map_err(|error| format!("bad path {path}: {error}"))?;
            request.extensions_mut().insert(user);
            let response = match self.api.clone().oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), MAX_PAGE_READ)
                .await
                .map_err(|error| format!("cannot read the answer to {path}: {error}"))?;
            let text = String::from_utf8_lossy(&body).into_owned();
            if status.is_success() {
                Ok(text)
            } else {
                Err(error_message(status, &text))
            }
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
