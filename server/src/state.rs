//! What every handler and background task shares.

use crate::config::ServerConfig;
use crate::identity::ratelimit::Limiter;
use crate::identity::secrets::SecretKey;
use crate::identity::session_store::HashedIdStore;
use crate::nodes::agent_link::AgentLink;
use crate::replicas::Wake;
use crate::store::Db;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc, watch};

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
    /// Alerts a run raises (`POST /runs/{id}/alerts`) per run.
    pub run_alert_limiter: Arc<Limiter>,
    /// Requests through share links per client address.
    pub share_view_limiter: Arc<Limiter>,
    /// Live streams open per user and token.
    pub streams: Arc<crate::identity::streams::StreamCounts>,
    /// What each project keeps, and when it was measured (`GET /projects/usage`).
    pub usage: Arc<tokio::sync::Mutex<Option<MeasuredUsage>>>,
    /// Added to the time scheduling windows are judged at (ms). Always 0 in
    /// service; tests move it to see a window open or close.
    pub window_clock_offset_ms: Arc<std::sync::atomic::AtomicI64>,
    /// This process among the replicas on one database (a new id each start).
    pub replica_id: String,
    /// On PostgreSQL: wake-ups for the other replicas (`replicas::send`).
    replica_outbox: Option<mpsc::UnboundedSender<Wake>>,
    /// Whether this server runs the scheduler and the other work only one
    /// server may run (always, on SQLite; see `replicas::lead`).
    leading: AtomicBool,
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
        let replica_id = crate::store::ids::new_id("replica");
        let replica_outbox = match &db {
            Db::Sqlite(_) => None,
            Db::Postgres(pool) => {
                let (outbox, waiting) = mpsc::unbounded_channel();
                tokio::spawn(crate::replicas::send(pool.clone(), replica_id.clone(), waiting));
                Some(outbox)
            }
        };
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
            replica_id,
            replica_outbox,
            leading: AtomicBool::new(false),
            shutdown,
            shutdown_sender: Arc::new(shutdown_sender),
        }))
    }

    /// After a commit that changed jobs or recorded events: a scheduling
    /// pass may place something new, and event followers have news.
    pub fn jobs_changed(&self) {
        self.wake(Wake::Scheduler);
        self.wake(Wake::Events);
    }

    /// Wakes whatever waits for `wake`, here and on the other replicas.
    pub fn wake(&self, wake: Wake) {
        self.wake_here(&wake);
        if let Some(outbox) = &self.replica_outbox {
            let _ = outbox.send(wake);
        }
    }

    /// Wakes whatever waits for `wake` in this process only.
    pub fn wake_here(&self, wake: &Wake) {
        match wake {
            Wake::Scheduler => self.scheduler_wake.notify_one(),
            Wake::Events => {
                let _ = self.event_recorded.send(());
            }
            Wake::Nodes => self.nodes_changed.notify_one(),
            Wake::Agent(node_id) => self.agents.wake(node_id),
            Wake::Log(job_id) => {
                let _ = self.log_appended.send(job_id.clone());
            }
            Wake::Fetch(node_id) => self.agents.fetch_waiting(node_id),
        }
    }

    /// After wake-ups may have been missed: every loop and long poll here
    /// looks again.
    pub fn wake_everything_here(&self) {
        self.wake_here(&Wake::Scheduler);
        self.wake_here(&Wake::Events);
        self.wake_here(&Wake::Nodes);
        self.agents.wake_all();
    }

    /// May other servers share this database (is it PostgreSQL)? Then what
    /// one process kept in memory goes through the database instead.
    pub fn may_have_replicas(&self) -> bool {
        self.replica_outbox.is_some()
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
