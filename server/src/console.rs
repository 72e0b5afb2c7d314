//! The console: Leptos pages rendered here and hydrated in the browser, the
//! static files beside them, and the backend their server functions call.

use crate::state::AppState;
use app::backend::{Backend, BoxFuture, ConsoleBackend};
use app::{App, shell};
use axum::Router;
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

impl ConsoleBackend for ServerBackend {
    fn health(&self) -> BoxFuture<'_, Result<Health, String>> {
        Box::pin(async move {
            crate::api::health::check(&self.state)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
