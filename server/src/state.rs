//! What every handler and background task shares.

use crate::config::ServerConfig;
use crate::identity::ratelimit::Limiter;
use crate::identity::secrets::SecretKey;
use crate::identity::session_store::HashedIdStore;
use crate::nodes::agent_link::AgentLink;
use crate::store::Db;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, broadcast, watch};

/// What each project keeps, and when it was measured.
pub type MeasuredUsage = (std::time::Instant, Vec<gpuplane_api::experiment::ProjectUsage>);

/// Cloned for every request and task: one pointer to the shared [`Shared`].
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub db: Db,
    pub config: Arc<ServerConfig>,
    pub leptos: LeptosOptions,
    pub secret: SecretKey,
    /// Woken when a node connects or sends a heartbeat, so the liveness
    /// monitor recomputes its next deadline.
    pub nodes_changed: Arc<Notify>,
    /// Woken whenever a scheduling pass could place something new.
    pub scheduler_wake: Arc<Notify>,
    /// Long polls, one-shot commands and log uploads of connected agents.
    pub agents: Arc<AgentLink>,
    /// The id of a job with new output lines (for SSE followers).
    pub log_appended: broadcast::Sender<String>,
    /// Agents' heartbeats waiting to be written, all in one transaction.
    pub heartbeats: Arc<crate::nodes::heartbeats::Heartbeats>,
    /// Stores metric batches sent to the API, several per transaction.
    pub metric_writer: crate::metrics::group::MetricWriter,
    /// Stores agents' telemetry batches, several per transaction.
    pub telemetry_writer: crate::nodes::telemetry::TelemetryWriter,
    /// Something was recorded in `events` (for SSE followers).
    pub event_recorded: broadcast::Sender<()>,
    /// Console sessions.
    pub sessions: HashedIdStore,
    /// Failed sign-ins per account, and per client address.
    pub sign_in_limiter: Arc<Limiter>,
    pub sign_in_limiter_ip: Arc<Limiter>,
    /// Wrong device user codes per client address.
    pub user_code_limiter: Arc<Limiter>,
    /// Device authorizations started per client address.
    pub device_authorize_limiter: Arc<Limiter>,
    /// Live streams open per user and token.
    pub streams: Arc<crate::identity::streams::StreamCounts>,
    /// What each project keeps, and when it was measured (`GET /projects/usage`).
    pub usage: Arc<tokio::sync::Mutex<Option<MeasuredUsage>>>,
    /// Added to the time scheduling windows are judged at (ms). Always 0 in
    /// service; tests move it to see a window open or close.
    pub window_clock_offset_ms: Arc<std::sync::atomic::AtomicI64>,
    /// Turns true when the server shuts down: long-lived responses end.
    pub shutdown: watch::Receiver<bool>,
    shutdown_sender: Arc<watch::Sender<bool>>,
}

impl AppState {
    pub fn new(db: Db, config: ServerConfig, secret: SecretKey) -> Self {
        let leptos = LeptosOptions::builder()
            .output_name("gpuplane")
            .site_root(config.site_root.to_string_lossy().to_string())
            .site_pkg_dir("pkg")
            .site_addr(config.settings.bind)
            .build();
        let (shutdown_sender, shutdown) = watch::channel(false);
        AppState(Arc::new(Shared {
            sessions: HashedIdStore::new(&db),
            sign_in_limiter: Arc::new(Limiter::new(5, Duration::from_secs(15 * 60))),
            sign_in_limiter_ip: Arc::new(Limiter::new(30, Duration::from_secs(15 * 60))),
            user_code_limiter: Arc::new(Limiter::new(10, Duration::from_secs(10 * 60))),
            device_authorize_limiter: Arc::new(Limiter::new(30, Duration::from_secs(10 * 60))),
            streams: Arc::default(),
            heartbeats: Arc::default(),
            telemetry_writer: crate::nodes::telemetry::start_writer(db.clone()),
            metric_writer: crate::metrics::group::start(db.clone(), config.settings.loss_pattern.clone()),
            db,
            config: Arc::new(config),
            leptos,
            secret,
            nodes_changed: Arc::new(Notify::new()),
            scheduler_wake: Arc::new(Notify::new()),
            agents: Arc::new(AgentLink::default()),
            log_appended: broadcast::channel(1024).0,
            event_recorded: broadcast::channel(64).0,
            window_clock_offset_ms: Arc::default(),
            usage: Arc::default(),
            shutdown,
            shutdown_sender: Arc::new(shutdown_sender),
        }))
    }

    /// After a commit that changed jobs or recorded events: a scheduling
    /// pass may place something new, and event followers have news.
    pub fn jobs_changed(&self) {
        self.scheduler_wake.notify_one();
        let _ = self.event_recorded.send(());
    }

    /// Tells background tasks and long-lived responses to finish.
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown_sender.send(true);
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
