//! The GPUPlane server as a library: `main.rs` parses arguments and calls
//! [`run`]; tests call [`start`] to get a real server on a free port.

// The layers, lowest first: a module uses only those above its line here
// (`cargo xtask layers` checks every path; see ARCHITECTURE.md).
pub mod store;
pub mod paging;
pub mod http;
pub mod wake;
pub mod observe;
pub mod config;
// The domain.
pub mod events;
pub mod logs;
pub mod identity;
pub mod audit;
pub mod alerts;
pub mod metrics;
pub mod runs;
pub mod nodes;
pub mod jobs;
pub mod diagnosis;
pub mod projects;
pub mod recipes;
pub mod mlflow;
pub mod sweeps;
// What the server shares, and which replica leads.
pub mod state;
pub mod replicas;
pub mod scrape;
// The ways in: the admin commands, the HTTP API, the console, MCP, the manual.
pub mod admin;
pub mod api;
pub mod console;
pub mod mcp;
pub mod manual;

use anyhow::Context;
use axum::Router;
use axum::extract::{MatchedPath, Request};
use config::{AdminCommand, Cli, Command, ConfigCommand, ServerConfig};
use state::AppState;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower_http::trace::TraceLayer;

/// How long open connections may take to finish after a shutdown signal.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The whole HTTP surface: API, console pages and static files.
pub fn app(state: AppState) -> Router {
    let (api, doc) = api::router();
    let in_process = api::in_process::InProcessApi::new(api.clone().with_state(state.clone()));
    let mcp = mcp::router(&state, in_process.clone(), &doc).expect("every MCP tool names an API operation");
    let app = api
        .merge(console::router(&state, in_process))
        .merge(manual::router(&state.config.site_root))
        .merge(api::shared::router())
        .route("/metrics", axum::routing::get(api::scrape::with_token))
        .merge(api::mlflow::router())
        .merge(api::mlflow_artifacts::router())
        .route("/login", axum::routing::post(api::sessions::login))
        .route("/logout", axum::routing::post(api::sessions::logout))
        .route("/auth/oidc/start", axum::routing::get(api::sso::begin))
        .route("/auth/oidc/callback", axum::routing::get(api::sso::callback))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::sessions::resolve_user,
        ))
        .layer(api::sessions::layer(&state))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::origin::check_origin,
        ))
        // MCP takes bearer tokens only: no session or cookie layer.
        .merge(mcp);
    let body_timeout = state.config.http_limits.body_timeout;
    console::security_headers(app)
        .layer(axum::middleware::from_fn(api::error::log_internal_errors))
        .layer(axum::middleware::from_fn(move |request, next| {
            http::limit_body_time(body_timeout, request, next)
        }))
        .layer(axum::middleware::from_fn_with_state(
            state.observed.clone(),
            observe::time_request,
        ))
        .layer(TraceLayer::new_for_http().make_span_with(|request: &Request| {
            let route = request
                .extensions()
                .get::<MatchedPath>()
                .map(|path| path.as_str().to_owned())
                .unwrap_or_else(|| request.uri().path().to_owned());
            tracing::info_span!("request", method = %request.method(), route)
        }))
        .with_state(state)
}

/// Where the server listens: `bind`, and `metrics_bind` when it is set.
pub struct Listeners {
    pub main: TcpListener,
    /// Serves `GET /metrics` only, without a token (`scrape_app`).
    pub metrics: Option<TcpListener>,
}

/// The separate listener's whole surface: `GET /metrics`, nothing else.
fn scrape_app(state: AppState) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(api::scrape::unauthenticated))
        .with_state(state)
}

/// Serves until `shutdown` completes, then drains connections for at most
/// [`DRAIN_TIMEOUT`] and stops the background tasks.
pub async fn serve(
    listeners: Listeners,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let heartbeats = tokio::spawn(nodes::heartbeats::writer(
        state.heartbeats.clone(),
        state.config.heartbeat_interval,
        state.shutdown.clone(),
    ));
    let wakes_from_replicas = match &state.db {
        store::Db::Postgres(pool) => Some(tokio::spawn(replicas::listen(state.clone(), pool.clone()))),
        store::Db::Sqlite(_) => None,
    };
    let leader = tokio::spawn(replicas::lead(state.clone(), run_once_per_database));
    let stopper = state.clone();
    let (limits, stop) = (state.config.http_limits, state.shutdown.clone());
    let scraped = listeners.metrics.map(|listener| {
        tokio::spawn(http::serve(
            listener,
            scrape_app(state.clone()),
            limits,
            stop.clone(),
        ))
    });
    let server = http::serve(listeners.main, app(state), limits, stop);
    tokio::pin!(server);
    tokio::select! {
        () = &mut server => {},
        () = shutdown => {
            tracing::info!("shutting down");
            stopper.begin_shutdown();
            if tokio::time::timeout(DRAIN_TIMEOUT, &mut server).await.is_err() {
                tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
            }
        }
    }
    stopper.begin_shutdown();
    if let Some(scraped) = scraped {
        let _ = scraped.await;
    }
    let _ = leader.await;
    let _ = heartbeats.await;
    if let Some(listener) = wakes_from_replicas {
        let _ = listener.await;
    }
    Ok(())
}

/// The background work only one server may run (`replicas::lead` runs it
/// while this server leads): the scheduler, the liveness monitor, the hang
/// and idle-GPU monitors, the sweep controller, compaction, alert delivery and housekeeping; until
/// `stop` turns true.
async fn run_once_per_database(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let monitor = tokio::spawn(jobs::liveness::monitor(
        state.db.clone(),
        state.config.clone(),
        state.heartbeats.clone(),
        state.wakes.clone(),
        stop.clone(),
    ));
    let scheduler = tokio::spawn(jobs::scheduler::run(state.jobs(), stop.clone()));
    let hang_rule = jobs::hangs::Rule {
        after_ms: state.config.settings.hang_after_s.saturating_mul(1000) as i64,
        factor: state.config.settings.hang_factor as i64,
    };
    let hangs = tokio::spawn(jobs::hangs::monitor(
        state.db.clone(),
        hang_rule,
        state.wakes.clone(),
        stop.clone(),
    ));
    let idle_rule = jobs::idle::Rule {
        threshold_percent: state.config.settings.gpu_idle_threshold_percent,
        after_ms: state.config.settings.gpu_idle_after_s.saturating_mul(1000) as i64,
    };
    let idle = tokio::spawn(jobs::idle::monitor(
        state.db.clone(),
        idle_rule,
        state.wakes.clone(),
        stop.clone(),
    ));
    let compactor = tokio::spawn(metrics::compact::run(
        state.db.clone(),
        state.config.compaction_delay,
        state.wakes.clone(),
        stop.clone(),
    ));
    let sweeps = tokio::spawn(sweeps::controller::run(state.jobs(), stop.clone()));
    let sweeper = tokio::spawn(housekeeping(state.clone()));
    // A try cut short is made again later: aborting it loses nothing.
    let alerter = tokio::spawn(alerts::run(
        state.db.clone(),
        state.config.clone(),
        state.secret.clone(),
        state.wakes.clone(),
        stop.clone(),
    ));
    let _ = stop.wait_for(|stop| *stop).await;
    let _ = monitor.await;
    let _ = scheduler.await;
    let _ = hangs.await;
    let _ = idle.await;
    let _ = compactor.await;
    let _ = sweeps.await;
    sweeper.abort();
    alerter.abort();
}

/// Every hour: deletes expired console sessions and device authorizations,
/// downsamples and expires telemetry, and applies the retention of output
/// lines and archived runs.
async fn housekeeping(state: AppState) {
    let settings = &state.config.settings;
    let retention = nodes::telemetry::Retention {
        full_resolution: Duration::from_secs(settings.telemetry_full_resolution_h * 3600),
        keep: Duration::from_secs(settings.telemetry_retention_days * 24 * 3600),
    };
    loop {
        state.sessions.delete_expired().await;
        identity::device_codes::delete_expired(&state.db).await;
        if let Err(error) = nodes::log_relay::delete_stale(&state.db).await {
            tracing::warn!(%error, "deleting stale log fetches failed; will try again");
        }
        if let Err(error) = mcp::sessions::delete_expired(&state.db).await {
            tracing::warn!(%error, "deleting old MCP sessions failed; will try again");
        }
        // Every window is shorter than an hour.
        if let Err(error) =
            identity::ratelimit::delete_ended(&state.db, store::time::now_ms() - 3600 * 1000).await
        {
            tracing::warn!(%error, "deleting ended rate-limit windows failed; will try again");
        }
        match nodes::telemetry::maintain(&state.db, store::time::now_ms(), retention).await {
            Ok(done) => tracing::debug!(?done, "telemetry maintained"),
            Err(error) => tracing::warn!(%error, "telemetry maintenance failed; will try again"),
        }
        if let Err(error) = apply_retention(&state).await {
            tracing::warn!(%error, "retention failed; will try again");
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// Deletes what the retention settings say has been kept long enough.
pub async fn apply_retention(state: &AppState) -> Result<(), store::Error> {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let settings = &state.config.settings;
    let now = store::time::now_ms();
    if settings.log_retention_days > 0 {
        let cutoff = now - settings.log_retention_days as i64 * DAY_MS;
        let lines = runs::lifecycle::delete_logs_before(&state.db, cutoff, 10_000).await?;
        if lines > 0 {
            tracing::info!(lines, "deleted output lines past log_retention_days");
        }
    }
    if settings.archived_run_retention_days > 0 {
        let cutoff = now - settings.archived_run_retention_days as i64 * DAY_MS;
        let runs = runs::lifecycle::delete_archived_before(&state.db, cutoff).await?;
        if runs > 0 {
            tracing::info!(runs, "deleted archived runs past archived_run_retention_days");
        }
    }
    let folders = state.artifacts.sweep(&state.db).await?;
    if folders > 0 {
        tracing::info!(folders, "removed the MLflow artifacts of deleted runs");
    }
    Ok(())
}

/// A server started by [`start`]: its URL and state, and a way to stop it.
pub struct RunningServer {
    pub url: String,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.context("the server task panicked")?
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `config.settings.bind` (port 0 picks a free one), opens the database and
/// serves in the background.
pub async fn start(config: ServerConfig) -> anyhow::Result<RunningServer> {
    config::prepare_data_dir(&config.data_dir)?;
    let (listeners, state) = bind_and_open(config).await?;
    let url = state.config.public_url();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listeners, state.clone(), async move {
        let _ = stop_rx.await;
    }));
    Ok(RunningServer {
        url,
        state,
        stop: Some(stop_tx),
        task,
    })
}

/// Binds the listeners (recording the real ports) and opens the database.
async fn bind_and_open(mut config: ServerConfig) -> anyhow::Result<(Listeners, AppState)> {
    let listener = TcpListener::bind(config.settings.bind)
        .await
        .with_context(|| format!("cannot listen on {}", config.settings.bind))?;
    config.settings.bind = listener.local_addr()?;
    let metrics = match config.settings.metrics_bind {
        Some(address) => {
            let listener = TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen on metrics_bind {address}"))?;
            config.settings.metrics_bind = Some(listener.local_addr()?);
            Some(listener)
        }
        None => None,
    };
    let db = store::open_configured(&config.data_dir, config.settings.database_url.as_deref()).await?;
    let secret = identity::secrets::SecretKey::load_or_create(&config.data_dir)?;
    let artifacts = mlflow::artifacts::ArtifactStore::open(&config.artifact_location)
        .with_context(|| format!("cannot open the artifact store {}", config.artifact_location))?;
    let listeners = Listeners {
        main: listener,
        metrics,
    };
    Ok((listeners, AppState::new(db, config, secret, artifacts)))
}

/// What `gpuplane-server` does with its command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let data_dir = cli.data_dir.clone().unwrap_or_else(config::default_data_dir);
    match cli.command {
        Command::Config(ConfigCommand::Example) => {
            print!("{}", config::EXAMPLE_CONFIG);
            Ok(())
        }
        Command::Admin(AdminCommand::MigrateToPostgres { from, to, json }) => {
            let from = from.unwrap_or(data_dir);
            admin::migrate_to_postgres(&from, &to, json).await
        }
        Command::Admin(command) => {
            config::prepare_data_dir(&data_dir)?;
            let file = config::load_file(cli.config.as_deref(), &data_dir)?;
            let database_url = std::env::var("GPUPLANE_DATABASE_URL")
                .ok()
                .filter(|url| !url.is_empty())
                .or(file.database_url.clone());
            let db = store::open_configured(&data_dir, database_url.as_deref()).await?;
            if let Some(secret) = admin::run(&db, command, &file).await? {
                println!("{secret}");
            }
            db.close().await;
            Ok(())
        }
        Command::Serve(args) => {
            let shutdown = shutdown_signal()?;
            config::prepare_data_dir(&data_dir)?;
            let file = config::load_file(cli.config.as_deref(), &data_dir)?;
            let config = ServerConfig::resolve(data_dir, file.overlaid(*args)?)?;
            let (listeners, state) = bind_and_open(config).await?;
            let limits = state.config.http_limits;
            match http::raise_open_file_limit() {
                Some(files) if (files as usize) < limits.max_connections + 256 => tracing::warn!(
                    files,
                    max_connections = limits.max_connections,
                    "the open-file limit is below max_connections (and some to spare): clients beyond it wait"
                ),
                _ => {}
            }
            tracing::info!(
                url = state.config.public_url(),
                data_dir = %state.config.data_dir.display(),
                site_root = %state.config.site_root.display(),
                "GPUPlane server listening on http://{}",
                state.config.settings.bind
            );
            if let Some(address) = state.config.settings.metrics_bind {
                tracing::info!(
                    "serving GET /metrics without a token on http://{address}/metrics (metrics_bind)"
                );
            }
            if !console::EMBEDDED.is_empty() {
                tracing::info!(
                    files = console::EMBEDDED.len(),
                    "the console's files are built into this binary"
                );
            } else if !state.config.site_root.join("pkg").exists() {
                tracing::warn!(
                    site_root = %state.config.site_root.display(),
                    "no console bundle found: pages render but stay non-interactive (build it with `cargo xtask site`)"
                );
            } else {
                tracing::info!(site_root = %state.config.site_root.display(), "serving the console's files from the site root");
            }
            serve(listeners, state, shutdown).await
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled, so no early signal is lost.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}
