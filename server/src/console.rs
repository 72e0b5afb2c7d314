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
use gpuplane_api::health::Health;
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, file_and_error_handler_with_context, generate_route_list};
use std::sync::Arc;

/// Page routes, server functions, and a fallback serving files from the site root.
pub fn router(state: &AppState) -> Router<AppState> {
    let backend = Backend(Arc::new(ServerBackend { state: state.clone() }));
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

impl ConsoleBackend for ServerBackend {
    fn health(&self) -> BoxFuture<'_, Result<Health, String>> {
        Box::pin(async move { crate::api::health::check(&self.state).await.map_err(message) })
    }

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

    fn revoke_token(&self, user: SessionUser, token_id: String) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            tokens::revoke(&self.state.db, &user.id, &token_id)
                .await
                .map(|_| ())
                .map_err(message)
        })
    }
}
