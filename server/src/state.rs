//! What every handler and background task shares.

use crate::config::ServerConfig;
use crate::identity::ratelimit::Limiter;
use crate::identity::secrets::SecretKey;
use crate::identity::session_store::HashedIdStore;
use crate::nodes::agent_link::AgentLink;
use crate::nodes::heartbeats::Heartbeats;
use crate::store::Db;
use crate::wake::Wakes;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

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
    /// Wake-ups between the parts of this server, and to the other replicas.
    pub wakes: Wakes,
    /// Long polls, one-shot commands and log uploads of connected agents.
    pub agents: Arc<AgentLink>,
    /// Agents' heartbeats waiting to be written, all in one transaction.
    pub heartbeats: Arc<Heartbeats>,
    /// Stores metric batches sent to the API, several per transaction.
    pub metric_writer: crate::metrics::group::MetricWriter,
    /// Stores agents' telemetry batches, several per transaction.
    pub telemetry_writer: crate::nodes::telemetry::TelemetryWriter,
    /// Console sessions.
    pub sessions: HashedIdStore,
    /// Failed sign-ins per account, and per client address.
    pub sign_in_limiter: Arc<Limiter>,
    pub sign_in_limiter_ip: Arc<Limiter>,
    /// Wrong device user codes per client address.
    pub user_code_limiter: Arc<Limiter>,
    /// Device authorizations started per client address.
    pub device_authorize_limiter: Arc<Limiter>,
    /// Alerts a run raises (`POST /runs/{id}/alerts`) per run.
    pub run_alert_limiter: Arc<Limiter>,
    /// Requests through share links per client address.
    pub share_view_limiter: Arc<Limiter>,
    /// What this server counts and times, for `GET /metrics`.
    pub observed: Arc<crate::observe::Observed>,
    /// Live streams open per user and token.
    pub streams: Arc<crate::identity::streams::StreamCounts>,
    /// The Hugging Face Hub that experiments' ids are checked against.
    pub hub: Arc<crate::recipes::hub::Hub>,
    /// MLflow artifacts: a folder or S3-compatible object storage.
    pub artifacts: Arc<crate::mlflow::artifacts::ArtifactStore>,
    /// What each project keeps, and when it was measured (`GET /projects/usage`).
    pub usage: Arc<tokio::sync::Mutex<Option<MeasuredUsage>>>,
    /// Added to the time scheduling windows are judged at (ms). Always 0 in
    /// service; tests move it to see a window open or close.
    pub window_clock_offset_ms: Arc<std::sync::atomic::AtomicI64>,
    /// Whether this server runs the scheduler and the other work only one
    /// server may run (always, on SQLite; see `replicas::lead`).
    leading: AtomicBool,
    /// Turns true when the server shuts down: long-lived responses end.
    pub shutdown: watch::Receiver<bool>,
    shutdown_sender: Arc<watch::Sender<bool>>,
}

impl AppState {
    pub fn new(
        db: Db,
        config: ServerConfig,
        secret: SecretKey,
        artifacts: crate::mlflow::artifacts::ArtifactStore,
    ) -> Self {
        let leptos = LeptosOptions::builder()
            .output_name("gpuplane")
            .site_root(config.site_root.to_string_lossy().to_string())
            .site_pkg_dir("pkg")
            .site_addr(config.settings.bind)
            .build();
        let (shutdown_sender, shutdown) = watch::channel(false);
        let wakes = Wakes::new(&db);
        AppState(Arc::new(Shared {
            sessions: HashedIdStore::new(&db),
            sign_in_limiter: Arc::new(Limiter::new(&db, "sign_in", 5, Duration::from_secs(15 * 60))),
            sign_in_limiter_ip: Arc::new(Limiter::new(&db, "sign_in_ip", 30, Duration::from_secs(15 * 60))),
            user_code_limiter: Arc::new(Limiter::new(&db, "user_code", 10, Duration::from_secs(10 * 60))),
            device_authorize_limiter: Arc::new(Limiter::new(
                &db,
                "device_authorize",
                30,
                Duration::from_secs(10 * 60),
            )),
            run_alert_limiter: Arc::new(Limiter::new(&db, "run_alert", 30, Duration::from_secs(60))),
            share_view_limiter: Arc::new(Limiter::new(&db, "share_view", 300, Duration::from_secs(60))),
            streams: Arc::default(),
            observed: Arc::default(),
            heartbeats: Arc::new(Heartbeats::new(db.clone(), wakes.clone())),
            telemetry_writer: crate::nodes::telemetry::start_writer(db.clone()),
            metric_writer: crate::metrics::group::start(db.clone(), config.settings.loss_pattern.clone()),
            db,
            hub: Arc::new(crate::recipes::hub::Hub::new(&config.settings.hf_endpoint)),
            artifacts: Arc::new(artifacts),
            config: Arc::new(config),
            leptos,
            secret,
            agents: Arc::new(AgentLink::new(wakes.clone())),
            wakes,
            window_clock_offset_ms: Arc::default(),
            usage: Arc::default(),
            leading: AtomicBool::new(false),
            shutdown,
            shutdown_sender: Arc::new(shutdown_sender),
        }))
    }

    /// What the job code needs of this server (a handler takes it with
    /// `State<jobs::Handles>`).
    pub fn jobs(&self) -> crate::jobs::Handles {
        crate::jobs::Handles {
            db: self.db.clone(),
            config: self.config.clone(),
            secret: self.secret.clone(),
            wakes: self.wakes.clone(),
            agents: self.agents.clone(),
            observed: self.observed.clone(),
            window_clock_offset_ms: self.window_clock_offset_ms.clone(),
        }
    }

    /// Does this server run the scheduler now?
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }

    pub(crate) fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Relaxed);
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

impl FromRef<AppState> for Arc<crate::observe::Observed> {
    fn from_ref(state: &AppState) -> Self {
        state.observed.clone()
    }
}

impl FromRef<AppState> for crate::jobs::Handles {
    fn from_ref(state: &AppState) -> Self {
        state.jobs()
    }
}
