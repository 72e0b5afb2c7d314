//! Every setting of `serve`, declared once: its doc comment is its help,
//! its clap attributes make it a flag and a `GPUPLANE_*` variable, its name
//! a key of the config file, and its default is in `gpuplane.example.toml`.

use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// The example config file, which is also the defaults layer.
pub const EXAMPLE_CONFIG: &str = include_str!("../../gpuplane.example.toml");

/// Declares every setting once. `defaulted` settings have their default
/// in `gpuplane.example.toml`; `optional` ones may stay unset. From the list
/// come [`Settings`] (every field optional: one layer, a flag, a
/// `GPUPLANE_` variable and a config-file key each) and [`SettingValues`]
/// (the merged layers, defaulted settings plain).
macro_rules! settings {
    (
        defaulted { $( $(#[$dmeta:meta])* $dname:ident: $dty:ty, )* }
        optional { $( $(#[$ometa:meta])* $oname:ident: $oty:ty, )* }
    ) => {
        /// Every setting of `serve`: a flag (`--heartbeat-interval-ms`), a
        /// `GPUPLANE_` variable and a config-file key of the same name (with `_`).
        /// Every field is optional: a layer sets only what it names.
        #[derive(Debug, Default, Clone, Args, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Settings {
            $( $(#[$dmeta])* pub $dname: Option<$dty>, )*
            $( $(#[$ometa])* pub $oname: Option<$oty>, )*
        }

        /// Every setting after all layers (see [`Settings`] for what each means).
        #[derive(Debug, Clone)]
        pub struct SettingValues {
            $( pub $dname: $dty, )*
            $( pub $oname: Option<$oty>, )*
        }

        impl SettingValues {
            /// The defaults with `settings` overlaid; a defaulted setting
            /// without a value is an error.
            pub fn resolve(settings: Settings) -> anyhow::Result<SettingValues> {
                let s = Settings::defaults()?.overlaid(settings)?;
                Ok(SettingValues {
                    $( $dname: defaulted(s.$dname, stringify!($dname))?, )*
                    $( $oname: s.$oname, )*
                })
            }
        }
    };
}

settings! {
    defaulted {
        /// Address to listen on.
        #[arg(long, env = "GPUPLANE_BIND", value_name = "HOST:PORT")]
        bind: SocketAddr,

        /// How often agents send a heartbeat, in milliseconds.
        #[arg(long, env = "GPUPLANE_HEARTBEAT_INTERVAL_MS", value_name = "MS")]
        heartbeat_interval_ms: u64,

        /// A node with no heartbeat for this long turns OFFLINE, in milliseconds.
        #[arg(long, env = "GPUPLANE_NODE_TIMEOUT_MS", value_name = "MS")]
        node_timeout_ms: u64,

        /// How long after going OFFLINE a node's running jobs turn LOST, in milliseconds.
        #[arg(long, env = "GPUPLANE_LOST_GRACE_MS", value_name = "MS")]
        lost_grace_ms: u64,

        /// Time between SIGTERM and SIGKILL when a job is cancelled, in milliseconds.
        #[arg(long, env = "GPUPLANE_CANCEL_GRACE_MS", value_name = "MS")]
        cancel_grace_ms: u64,

        /// How many cpu_only-lane (gpu = 0) jobs may run at once on one node.
        #[arg(long, env = "GPUPLANE_CPU_SLOTS_PER_NODE", value_name = "N")]
        cpu_slots_per_node: u32,

        /// Newest output lines kept per stream of each attempt (the agent keeps the whole file).
        #[arg(long, env = "GPUPLANE_LOG_TAIL_LINES", value_name = "N")]
        log_tail_lines: i64,

        /// A console session unused for this long ends, in milliseconds.
        #[arg(long, env = "GPUPLANE_SESSION_IDLE_MS", value_name = "MS")]
        session_idle_ms: u64,

        /// A console session ends this long after sign-in whatever its use, in milliseconds.
        #[arg(long, env = "GPUPLANE_SESSION_MAX_MS", value_name = "MS")]
        session_max_ms: u64,

        /// The polling interval `gpuctl login --device-flow` is asked to keep, in seconds.
        #[arg(long, env = "GPUPLANE_DEVICE_POLL_INTERVAL_S", value_name = "S")]
        device_poll_interval_s: u64,

        /// Metric keys whose first NaN/±Inf raises a LOSS_NAN event (a glob with `*`).
        #[arg(long, env = "GPUPLANE_LOSS_PATTERN")]
        loss_pattern: String,

        /// A running job silent this long gets a NO_OUTPUT finding in its diagnosis, in seconds.
        #[arg(long, env = "GPUPLANE_SILENCE_WARNING_S", value_name = "S")]
        silence_warning_s: u64,

        /// A running job whose GPUs average under 10 % utilisation over this long
        /// gets a LOW_GPU_UTILIZATION finding, in seconds.
        #[arg(long, env = "GPUPLANE_GPU_IDLE_WINDOW_S", value_name = "S")]
        gpu_idle_window_s: u64,

        /// GPU and process telemetry is kept at full resolution this long, then
        /// as one mean a minute, in hours.
        #[arg(long, env = "GPUPLANE_TELEMETRY_FULL_RESOLUTION_H", value_name = "HOURS")]
        telemetry_full_resolution_h: u64,

        /// GPU and process telemetry older than this is deleted, in days.
        #[arg(long, env = "GPUPLANE_TELEMETRY_RETENTION_DAYS", value_name = "DAYS")]
        telemetry_retention_days: u64,

        /// Server-sent event streams end after this long, in seconds; clients reconnect and resume.
        #[arg(long, env = "GPUPLANE_STREAM_MAX_S", value_name = "S")]
        stream_max_s: u64,

        /// Tokens issued by `gpuctl login` (device login) expire after this many days.
        #[arg(long, env = "GPUPLANE_DEVICE_TOKEN_DAYS", value_name = "DAYS")]
        device_token_days: u64,

        /// Live streams (SSE) one user, and one token, may hold open at once; more answer 429.
        #[arg(long, env = "GPUPLANE_MAX_STREAMS_PER_USER", value_name = "N")]
        max_streams_per_user: u32,

        /// Open HTTP connections at once; more wait to be accepted.
        #[arg(long, env = "GPUPLANE_MAX_CONNECTIONS", value_name = "N")]
        max_connections: usize,

        /// A connection whose next request head has not fully arrived this long
        /// after it opened or its last answer (idle, or a slow client) is closed, in seconds.
        #[arg(long, env = "GPUPLANE_HEADER_TIMEOUT_S", value_name = "S")]
        header_timeout_s: u64,

        /// A request body not received in full this long after its head answers 408, in seconds.
        #[arg(long, env = "GPUPLANE_REQUEST_BODY_TIMEOUT_S", value_name = "S")]
        request_body_timeout_s: u64,

        /// Fair share: among jobs of equal priority, the project (then the user)
        /// with fewer GPU-hours in this many seconds goes first; 0 turns it off (FIFO).
        #[arg(long, env = "GPUPLANE_FAIR_SHARE_WINDOW_S", value_name = "S")]
        fair_share_window_s: u64,

        /// A job queued this long is no longer passed by fair share (it goes by
        /// submit time among its priority), so nothing starves, in seconds.
        #[arg(long, env = "GPUPLANE_FAIR_SHARE_MAX_WAIT_S", value_name = "S")]
        fair_share_max_wait_s: u64,

        /// Between SIGTERM and SIGKILL when a job is preempted (time to checkpoint), in seconds.
        #[arg(long, env = "GPUPLANE_PREEMPTION_GRACE_S", value_name = "S")]
        preemption_grace_s: u64,

        /// A running job whose steps stop advancing is reported (JOB_HUNG) once
        /// no step came for hang_factor times its usual wait between steps and
        /// for at least this long, in seconds; 0 turns it off.
        #[arg(long, env = "GPUPLANE_HANG_AFTER_S", value_name = "S")]
        hang_after_s: u64,

        /// How many times its usual wait between steps a job may go without
        /// one before it counts as hung (with hang_after_s).
        #[arg(long, env = "GPUPLANE_HANG_FACTOR", value_name = "N")]
        hang_factor: u64,

        /// A GPU under this utilisation (percent) is idle (GPU_IDLE, with gpu_idle_after_s).
        #[arg(long, env = "GPUPLANE_GPU_IDLE_THRESHOLD_PERCENT", value_name = "PERCENT")]
        gpu_idle_threshold_percent: f64,

        /// A running job whose every GPU stayed idle this long raises GPU_IDLE
        /// once (its project's idle_action may stop it), in seconds; 0 turns it off.
        #[arg(long, env = "GPUPLANE_GPU_IDLE_AFTER_S", value_name = "S")]
        gpu_idle_after_s: u64,

        /// The output lines the server keeps of a job are deleted this many days
        /// after it ended (the agent's files are not touched); 0 keeps them.
        #[arg(long, env = "GPUPLANE_LOG_RETENTION_DAYS", value_name = "DAYS")]
        log_retention_days: u64,

        /// An archived run (with its job) is deleted this many days after it
        /// was archived; 0 keeps it.
        #[arg(long, env = "GPUPLANE_ARCHIVED_RUN_RETENTION_DAYS", value_name = "DAYS")]
        archived_run_retention_days: u64,

        /// The role a new local user gets in the `default` project: none,
        /// viewer or editor. Admins give more in the projects they choose.
        #[arg(long, env = "GPUPLANE_DEFAULT_PROJECT_ROLE", value_name = "ROLE")]
        default_project_role: String,

        /// After an alert's failed try, the wait before the next, in seconds;
        /// it doubles with each try, up to an hour.
        #[arg(long, env = "GPUPLANE_ALERT_RETRY_INITIAL_S", value_name = "S")]
        alert_retry_initial_s: u64,

        /// Let webhooks reach loopback, private and link-local addresses
        /// (the server's own network); off, such a channel is refused and
        /// its deliveries fail with the reason.
        #[arg(long, env = "GPUPLANE_ALERT_PRIVATE_HOSTS", value_name = "BOOL")]
        alert_private_hosts: bool,

        /// Tries of one alert message before it is marked failed.
        #[arg(long, env = "GPUPLANE_ALERT_MAX_ATTEMPTS", value_name = "N")]
        alert_max_attempts: u32,

        /// The sender of alert emails (`Name <address>`).
        #[arg(long, env = "GPUPLANE_SMTP_FROM", value_name = "MAILBOX")]
        smtp_from: String,

        /// The Hugging Face Hub (or a mirror) that experiments' model and
        /// dataset ids are checked against before their jobs queue; empty
        /// turns the check off.
        #[arg(long, env = "GPUPLANE_HF_ENDPOINT", value_name = "URL")]
        hf_endpoint: String,
    }
    optional {
        /// PostgreSQL to keep everything in (`postgres://USER:PASSWORD@HOST/DB`);
        /// unset: the SQLite file in the data dir.
        #[arg(long, env = "GPUPLANE_DATABASE_URL", value_name = "URL", hide_env_values = true)]
        database_url: String,

        /// A second address that serves only `GET /metrics`, without a token, for a
        /// Prometheus inside the network (unset: `/metrics` on `bind` with a `metrics` token only).
        #[arg(long, env = "GPUPLANE_METRICS_BIND", value_name = "HOST:PORT")]
        metrics_bind: SocketAddr,

        /// URL users and jobs reach this server at (default: http://BIND).
        #[arg(long, env = "GPUPLANE_PUBLIC_URL", value_name = "URL")]
        public_url: String,

        /// Directory with the console's static files and wasm bundle (default: ../site next to the binary).
        #[arg(long, env = "GPUPLANE_SITE_ROOT", value_name = "DIR")]
        site_root: PathBuf,

        /// Where MLflow artifacts are kept: a folder (default: artifacts/ in the data dir), or
        /// s3://BUCKET[/PREFIX] (credentials and region from the AWS_* variables).
        #[arg(long, env = "GPUPLANE_ARTIFACT_STORE", value_name = "DIR|s3://BUCKET/PREFIX")]
        artifact_store: String,

        /// The URL of an S3-compatible server (MinIO, Ceph, …) for an s3:// artifact_store.
        #[arg(long, env = "GPUPLANE_ARTIFACT_STORE_ENDPOINT", value_name = "URL")]
        artifact_store_endpoint: String,

        /// A notice shown on the console's dashboard and by `gpuctl status` (planned maintenance).
        #[arg(long, env = "GPUPLANE_MAINTENANCE_MESSAGE", value_name = "TEXT")]
        maintenance_message: String,

        /// SSO: the OpenID Connect issuer URL (enables "Sign in with SSO").
        #[arg(long, env = "GPUPLANE_OIDC_ISSUER", value_name = "URL")]
        oidc_issuer: String,

        /// SSO: this server's client id at the provider.
        #[arg(long, env = "GPUPLANE_OIDC_CLIENT_ID")]
        oidc_client_id: String,

        /// SSO: the client secret (prefer the environment or the config file to a flag).
        #[arg(long, env = "GPUPLANE_OIDC_CLIENT_SECRET", hide_env_values = true)]
        oidc_client_secret: String,

        /// SSO: email domains allowed to sign in, comma-separated (default: any).
        #[arg(long, env = "GPUPLANE_OIDC_ALLOWED_DOMAINS", value_delimiter = ',')]
        oidc_allowed_domains: Vec<String>,

        /// SSO: the provider's name on the sign-in button.
        #[arg(long, env = "GPUPLANE_OIDC_NAME")]
        oidc_name: String,

        /// SSO: let anyone the provider knows sign in when no domain is allowed
        /// (without it, SSO with no `oidc_allowed_domains` refuses to start).
        #[arg(long, env = "GPUPLANE_OIDC_ALLOW_ANY_DOMAIN", value_name = "BOOL")]
        oidc_allow_any_domain: bool,

        /// SSO: the role a new SSO user gets in the `default` project: none, viewer or editor (default none).
        #[arg(long, env = "GPUPLANE_OIDC_NEW_USER_ROLE", value_name = "ROLE")]
        oidc_new_user_role: String,

        /// Registries a docker job's image may come from, comma-separated (e.g.
        /// nvcr.io,registry.example.com); Docker Hub is docker.io. Unset: any;
        /// set but empty: no docker images at all.
        #[arg(
            long,
            env = "GPUPLANE_ALLOWED_IMAGE_REGISTRIES",
            value_delimiter = ',',
            value_name = "HOST"
        )]
        allowed_image_registries: Vec<String>,

        /// Proxies whose `X-Forwarded-For` is believed for sign-in limits, comma-separated addresses.
        #[arg(
            long,
            env = "GPUPLANE_TRUSTED_PROXIES",
            value_delimiter = ',',
            value_name = "IP"
        )]
        trusted_proxies: Vec<IpAddr>,

        /// Preemption: a queued job with at least this priority may stop running
        /// jobs of lower priority to take their GPUs; only admins may give a job
        /// such a priority. Unset: no preemption.
        #[arg(long, env = "GPUPLANE_PREEMPT_PRIORITY", value_name = "PRIORITY")]
        preempt_priority: i64,

        /// Daily scheduling windows of node pools, in UTC, comma-separated:
        /// `pool=night 20:00-06:00`. A node with that label starts a job only
        /// inside the window, and only if the job's time limit ends before it closes.
        #[arg(long, env = "GPUPLANE_SCHEDULING_WINDOWS", value_delimiter = ',', value_name = "WINDOW")]
        scheduling_windows: Vec<String>,

        /// The SMTP relay alert emails go through: `smtps://user:password@host`
        /// (TLS), `smtp://host:587?tls=required` (STARTTLS), `smtp://host:25`
        /// (plain, for a relay on this host). Unset: email channels cannot send.
        #[arg(long, env = "GPUPLANE_SMTP_URL", value_name = "URL", hide_env_values = true)]
        smtp_url: String,
    }
}

impl Settings {
    /// The defaults: the keys set in `gpuplane.example.toml`.
    pub fn defaults() -> anyhow::Result<Settings> {
        toml::from_str(EXAMPLE_CONFIG).context("the built-in gpuplane.example.toml does not parse")
    }

    /// `self` with every setting that `over` names replaced by its value.
    pub fn overlaid(self, over: Settings) -> anyhow::Result<Settings> {
        let mut merged = serde_json::to_value(self)?;
        if let (Some(merged), serde_json::Value::Object(over)) =
            (merged.as_object_mut(), serde_json::to_value(over)?)
        {
            merged.extend(over.into_iter().filter(|(_, value)| !value.is_null()));
        }
        Ok(serde_json::from_value(merged)?)
    }
}

/// A setting every layer left unset although the defaults name it.
fn defaulted<T>(value: Option<T>, key: &str) -> anyhow::Result<T> {
    value.with_context(|| format!("`{key}` has no value (gpuplane.example.toml must set its default)"))
}
