//! What every handler and background task shares.

use crate::config::ServerConfig;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use sqlx::SqlitePool;
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Clone)]
pub struct AppState {
    pub db: SqlitePool,
    pub config: Arc<ServerConfig>,
    pub leptos: LeptosOptions,
    /// Woken when a node connects or sends a heartbeat, so the liveness
    /// monitor recomputes its next deadline.
    pub nodes_changed: Arc<Notify>,
}

impl AppState {
    pub fn new(db: SqlitePool, config: ServerConfig) -> Self {
        let leptos = LeptosOptions::builder()
            .output_name("gpuplane")
            .site_root(config.site_root.to_string_lossy().to_string())
            .site_pkg_dir("pkg")
            .site_addr(config.bind)
            .build();
        AppState {
            db,
            config: Arc::new(config),
            leptos,
            nodes_changed: Arc::new(Notify::new()),
        }
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
