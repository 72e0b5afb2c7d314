//! Command line and configuration: defaults, then the config file, then
//! `GPUPLANE_*` environment variables, then flags (each flag reads its
//! variable through clap, so the last two layers are one).

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use gpuplane_api::auth::Scope;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "gpuplane-server",
    version,
    about = "The GPUPlane server: API, console and scheduler."
)]
pub struct Cli {
    /// Directory holding the SQLite database (default: $XDG_DATA_HOME/gpuplane or ~/.local/share/gpuplane).
    #[arg(long, env = "GPUPLANE_DATA_DIR", global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// TOML configuration file (default: DATA_DIR/gpuplane.toml when it exists).
    #[arg(long, env = "GPUPLANE_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API and the console.
    Serve(Box<ServeArgs>),
    /// Bootstrap users and tokens without a running server.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Configuration helpers.
    #[command(subcommand)]
    Config(ConfigCommand),
}

/// Every field is also a config-file key of the same name (with `_`) and a
/// `GPUPLANE_` variable.
#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "GPUPLANE_BIND", value_name = "HOST:PORT")]
    pub bind: Option<SocketAddr>,

    /// URL users and jobs reach this server at (default: http://BIND).
    #[arg(long, env = "GPUPLANE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,

    /// Directory with the console's static files and wasm bundle (default: ../site next to the binary).
    #[arg(long, env = "GPUPLANE_SITE_ROOT", value_name = "DIR")]
    pub site_root: Option<PathBuf>,

    /// How often agents send a heartbeat, in milliseconds.
    #[arg(long, env = "GPUPLANE_HEARTBEAT_INTERVAL_MS", value_name = "MS")]
    pub heartbeat_interval_ms: Option<u64>,

    /// A node with no heartbeat for this long turns OFFLINE, in milliseconds.
    #[arg(long, env = "GPUPLANE_NODE_TIMEOUT_MS", value_name = "MS")]
    pub node_timeout_ms: Option<u64>,

    /// How long after going OFFLINE a node's running jobs turn LOST, in milliseconds.
    #[arg(long, env = "GPUPLANE_LOST_GRACE_MS", value_name = "MS")]
    pub lost_grace_ms: Option<u64>,

    /// Time between SIGTERM and SIGKILL when a job is cancelled, in milliseconds.
    #[arg(long, env = "GPUPLANE_CANCEL_GRACE_MS", value_name = "MS")]
    pub cancel_grace_ms: Option<u64>,

    /// How many cpu_only-lane (gpu = 0) jobs may run at once on one node.
    #[arg(long, env = "GPUPLANE_CPU_SLOTS_PER_NODE", value_name = "N")]
    pub cpu_slots_per_node: Option<u32>,

    /// Newest output lines kept per stream of each attempt (the agent keeps the whole file).
    #[arg(long, env = "GPUPLANE_LOG_TAIL_LINES", value_name = "N")]
    pub log_tail_lines: Option<i64>,

    /// A console session unused for this long ends, in milliseconds.
    #[arg(long, env = "GPUPLANE_SESSION_IDLE_MS", value_name = "MS")]
    pub session_idle_ms: Option<u64>,

    /// A console session ends this long after sign-in whatever its use, in milliseconds.
    #[arg(long, env = "GPUPLANE_SESSION_MAX_MS", value_name = "MS")]
    pub session_max_ms: Option<u64>,

    /// The polling interval `gpuctl login --device-flow` is asked to keep, in seconds.
    #[arg(long, env = "GPUPLANE_DEVICE_POLL_INTERVAL_S", value_name = "S")]
    pub device_poll_interval_s: Option<u64>,

    /// Metric keys whose first NaN/±Inf raises a LOSS_NAN event (a glob with `*`).
    #[arg(long, env = "GPUPLANE_LOSS_PATTERN")]
    pub loss_pattern: Option<String>,

    /// A running job silent this long gets a NO_OUTPUT finding in its diagnosis, in seconds.
    #[arg(long, env = "GPUPLANE_SILENCE_WARNING_S", value_name = "S")]
    pub silence_warning_s: Option<u64>,

    /// Server-sent event streams end after this long, in seconds; clients reconnect and resume.
    #[arg(long, env = "GPUPLANE_STREAM_MAX_S", value_name = "S")]
    pub stream_max_s: Option<u64>,

    /// A notice shown on the console's dashboard and by `gpuctl status` (planned maintenance).
    #[arg(long, env = "GPUPLANE_MAINTENANCE_MESSAGE", value_name = "TEXT")]
    pub maintenance_message: Option<String>,

    /// SSO: the OpenID Connect issuer URL (enables "Sign in with SSO").
    #[arg(long, env = "GPUPLANE_OIDC_ISSUER", value_name = "URL")]
    pub oidc_issuer: Option<String>,

    /// SSO: this server's client id at the provider.
    #[arg(long, env = "GPUPLANE_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,

    /// SSO: the client secret (prefer the environment or the config file to a flag).
    #[arg(long, env = "GPUPLANE_OIDC_CLIENT_SECRET", hide_env_values = true)]
    pub oidc_client_secret: Option<String>,

    /// SSO: email domains allowed to sign in, comma-separated (default: any).
    #[arg(long, env = "GPUPLANE_OIDC_ALLOWED_DOMAINS", value_delimiter = ',')]
    pub oidc_allowed_domains: Option<Vec<String>>,

    /// SSO: the provider's name on the sign-in button.
    #[arg(long, env = "GPUPLANE_OIDC_NAME")]
    pub oidc_name: Option<String>,

    /// SSO: let anyone the provider knows sign in when no domain is allowed
    /// (without it, SSO with no `oidc_allowed_domains` refuses to start).
    #[arg(long, env = "GPUPLANE_OIDC_ALLOW_ANY_DOMAIN", value_name = "BOOL")]
    pub oidc_allow_any_domain: Option<bool>,

    /// SSO: the role a new SSO user gets in the `default` project: none, viewer or editor (default none).
    #[arg(long, env = "GPUPLANE_OIDC_NEW_USER_ROLE", value_name = "ROLE")]
    pub oidc_new_user_role: Option<String>,

    /// Tokens issued by `gpuctl login` (device login) expire after this many days.
    #[arg(long, env = "GPUPLANE_DEVICE_TOKEN_DAYS", value_name = "DAYS")]
    pub device_token_days: Option<u64>,

    /// Live streams (SSE) one user, and one token, may hold open at once; more answer 429.
    #[arg(long, env = "GPUPLANE_MAX_STREAMS_PER_USER", value_name = "N")]
    pub max_streams_per_user: Option<u32>,

    /// Proxies whose `X-Forwarded-For` is believed for sign-in limits, comma-separated addresses.
    #[arg(
        long,
        env = "GPUPLANE_TRUSTED_PROXIES",
        value_delimiter = ',',
        value_name = "IP"
    )]
    pub trusted_proxies: Option<Vec<IpAddr>>,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create a local user; the password is read from stdin.
    CreateUser {
        name: String,
        /// Make the user an administrator.
        #[arg(long)]
        admin: bool,
        /// Read the password from stdin (the only way: it never appears in argv).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// Create an API token for a user and print it (only) on stdout.
    CreateToken {
        #[arg(long)]
        user: String,
        /// read, write or sdk.
        #[arg(long)]
        scope: Scope,
        /// A label to recognise the token by.
        #[arg(long, default_value = "admin-cli")]
        name: String,
        /// Lifetime such as `30d` or `12h` (default: no expiry).
        #[arg(long, value_parser = humantime::parse_duration)]
        expires_in: Option<Duration>,
    },
    /// Create a token for `gpuplane-agent` and print it (only) on stdout.
    /// The token speaks for one node: the one named here, else the first
    /// node it says hello as.
    CreateAgentToken {
        #[arg(long, default_value = "agent")]
        name: String,
        /// The node (agent `--name`) this token may speak for.
        #[arg(long, value_name = "NODE")]
        node: Option<String>,
    },
    /// List agent tokens: id, name, node, created, last used, revoked.
    ListAgentTokens {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an agent token: its agent is refused from its next request on.
    RevokeAgentToken {
        /// The token's id (`tok_…`, from list-agent-tokens).
        token_id: String,
    },
    /// Disable a user: their sessions and tokens stop working at once.
    DisableUser { name: String },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print an example configuration file with every key and its default.
    Example,
}

/// The config file: every key optional, unknown keys refused by name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub bind: Option<SocketAddr>,
    pub public_url: Option<String>,
    pub site_root: Option<PathBuf>,
    pub heartbeat_interval_ms: Option<u64>,
    pub node_timeout_ms: Option<u64>,
    pub lost_grace_ms: Option<u64>,
    pub cancel_grace_ms: Option<u64>,
    pub cpu_slots_per_node: Option<u32>,
    pub log_tail_lines: Option<i64>,
    pub session_idle_ms: Option<u64>,
    pub session_max_ms: Option<u64>,
    pub device_poll_interval_s: Option<u64>,
    pub loss_pattern: Option<String>,
    pub silence_warning_s: Option<u64>,
    pub stream_max_s: Option<u64>,
    pub maintenance_message: Option<String>,
    pub oidc_issuer: Option<String>,
    pub oidc_client_id: Option<String>,
    pub oidc_client_secret: Option<String>,
    pub oidc_allowed_domains: Option<Vec<String>>,
    pub oidc_name: Option<String>,
    pub oidc_allow_any_domain: Option<bool>,
    pub oidc_new_user_role: Option<String>,
    pub device_token_days: Option<u64>,
    pub max_streams_per_user: Option<u32>,
    pub trusted_proxies: Option<Vec<IpAddr>>,
}

pub const DEFAULT_BIND: &str = "127.0.0.1:8600";
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 2_000;
pub const DEFAULT_NODE_TIMEOUT_MS: u64 = 15_000;
pub const DEFAULT_LOST_GRACE_MS: u64 = 60_000;
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 10_000;
pub const DEFAULT_CPU_SLOTS_PER_NODE: u32 = 4;
pub const DEFAULT_LOG_TAIL_LINES: i64 = 2_000;
pub const DEFAULT_SESSION_IDLE_MS: u64 = 12 * 3600 * 1000;
pub const DEFAULT_LOSS_PATTERN: &str = "*loss*";
pub const DEFAULT_SESSION_MAX_MS: u64 = 7 * 24 * 3600 * 1000;
pub const DEFAULT_SILENCE_WARNING_S: u64 = 15 * 60;
pub const DEFAULT_STREAM_MAX_S: u64 = 30 * 60;
pub const DEFAULT_DEVICE_TOKEN_DAYS: u64 = 30;
pub const DEFAULT_MAX_STREAMS_PER_USER: u32 = 32;
pub const CONFIG_FILE: &str = "gpuplane.toml";

/// Everything `serve` needs, resolved from every layer.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    pub public_url: Option<String>,
    pub site_root: PathBuf,
    pub heartbeat_interval: Duration,
    pub node_timeout: Duration,
    pub lost_grace: Duration,
    pub cancel_grace: Duration,
    pub cpu_slots_per_node: u32,
    pub log_tail_lines: i64,
    pub session_idle: Duration,
    pub session_max: Duration,
    /// The polling interval the device flow asks clients for.
    pub device_poll_interval: Duration,
    /// Single sign-on, when configured.
    pub sso: Option<SsoConfig>,
    /// Metric keys whose first non-finite value raises LOSS_NAN (a glob).
    pub loss_pattern: String,
    /// Output silence of a running job that its diagnosis reports (NO_OUTPUT).
    pub silence_warning: Duration,
    /// How long metric compaction waits after ingest before it looks (not
    /// a setting users need; tests make it long to see chunks before).
    pub compaction_delay: Duration,
    /// How long one server-sent event stream lasts before the client reconnects.
    pub stream_max: Duration,
    /// Shown on the dashboard and by `gpuctl status`.
    pub maintenance_message: Option<String>,
    /// How long a token issued by device login lives.
    pub device_token_lifetime: Duration,
    /// Open live streams allowed per user and per token.
    pub max_streams_per_user: u32,
    /// Peers whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<IpAddr>,
}

impl ServerConfig {
    /// A configuration with every default, for `data_dir`.
    pub fn with_defaults(data_dir: PathBuf) -> Self {
        ServerConfig {
            data_dir,
            bind: DEFAULT_BIND.parse().expect("the default bind address parses"),
            public_url: None,
            site_root: default_site_root(),
            heartbeat_interval: Duration::from_millis(DEFAULT_HEARTBEAT_INTERVAL_MS),
            node_timeout: Duration::from_millis(DEFAULT_NODE_TIMEOUT_MS),
            lost_grace: Duration::from_millis(DEFAULT_LOST_GRACE_MS),
            cancel_grace: Duration::from_millis(DEFAULT_CANCEL_GRACE_MS),
            cpu_slots_per_node: DEFAULT_CPU_SLOTS_PER_NODE,
            log_tail_lines: DEFAULT_LOG_TAIL_LINES,
            session_idle: Duration::from_millis(DEFAULT_SESSION_IDLE_MS),
            session_max: Duration::from_millis(DEFAULT_SESSION_MAX_MS),
            device_poll_interval: Duration::from_secs(5),
            sso: None,
            loss_pattern: DEFAULT_LOSS_PATTERN.to_string(),
            silence_warning: Duration::from_secs(DEFAULT_SILENCE_WARNING_S),
            compaction_delay: Duration::from_secs(2),
            stream_max: Duration::from_secs(DEFAULT_STREAM_MAX_S),
            maintenance_message: None,
            device_token_lifetime: Duration::from_secs(DEFAULT_DEVICE_TOKEN_DAYS * 24 * 3600),
            max_streams_per_user: DEFAULT_MAX_STREAMS_PER_USER,
            trusted_proxies: Vec::new(),
        }
    }

    /// Layers the file and then the flags/environment over the defaults.
    pub fn resolve(data_dir: PathBuf, file: FileConfig, args: ServeArgs) -> anyhow::Result<Self> {
        let mut config = ServerConfig::with_defaults(data_dir);
        let pick = |arg: Option<u64>, file: Option<u64>| arg.or(file).map(Duration::from_millis);
        if let Some(bind) = args.bind.or(file.bind) {
            config.bind = bind;
        }
        config.public_url = args.public_url.or(file.public_url);
        if let Some(root) = args.site_root.or(file.site_root) {
            config.site_root = root;
        }
        if let Some(interval) = pick(args.heartbeat_interval_ms, file.heartbeat_interval_ms) {
            config.heartbeat_interval = interval;
        }
        if let Some(timeout) = pick(args.node_timeout_ms, file.node_timeout_ms) {
            config.node_timeout = timeout;
        }
        if let Some(grace) = pick(args.lost_grace_ms, file.lost_grace_ms) {
            config.lost_grace = grace;
        }
        if let Some(grace) = pick(args.cancel_grace_ms, file.cancel_grace_ms) {
            config.cancel_grace = grace;
        }
        if let Some(slots) = args.cpu_slots_per_node.or(file.cpu_slots_per_node) {
            config.cpu_slots_per_node = slots;
        }
        if let Some(idle) = pick(args.session_idle_ms, file.session_idle_ms) {
            config.session_idle = idle;
        }
        if let Some(max) = pick(args.session_max_ms, file.session_max_ms) {
            config.session_max = max;
        }
        if let Some(seconds) = args.device_poll_interval_s.or(file.device_poll_interval_s) {
            if seconds < 1 {
                bail!("device_poll_interval_s must be at least 1");
            }
            config.device_poll_interval = Duration::from_secs(seconds);
        }
        if let Some(pattern) = args.loss_pattern.or(file.loss_pattern) {
            config.loss_pattern = pattern;
        }
        if let Some(seconds) = args.silence_warning_s.or(file.silence_warning_s) {
            if seconds < 1 {
                bail!("silence_warning_s must be at least 1");
            }
            config.silence_warning = Duration::from_secs(seconds);
        }
        if let Some(seconds) = args.stream_max_s.or(file.stream_max_s) {
            if seconds < 1 {
                bail!("stream_max_s must be at least 1");
            }
            config.stream_max = Duration::from_secs(seconds);
        }
        if let Some(message) = args.maintenance_message.or(file.maintenance_message) {
            config.maintenance_message = Some(message.trim().to_string()).filter(|m| !m.is_empty());
        }
        let issuer = args.oidc_issuer.or(file.oidc_issuer);
        let client_id = args.oidc_client_id.or(file.oidc_client_id);
        let client_secret = args.oidc_client_secret.or(file.oidc_client_secret);
        config.sso = match (issuer, client_id, client_secret) {
            (Some(issuer), Some(client_id), Some(client_secret)) => {
                let allowed_domains: Vec<String> = args
                    .oidc_allowed_domains
                    .or(file.oidc_allowed_domains)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|domain| domain.trim().to_lowercase())
                    .filter(|domain| !domain.is_empty())
                    .collect();
                let any_domain = args
                    .oidc_allow_any_domain
                    .or(file.oidc_allow_any_domain)
                    .unwrap_or(false);
                if allowed_domains.is_empty() && !any_domain {
                    bail!(
                        "SSO is on but oidc_allowed_domains is empty: anyone with an account at {issuer} could \
                         sign in. List the email domains allowed, or set oidc_allow_any_domain = true"
                    );
                }
                let new_user_role = match args
                    .oidc_new_user_role
                    .or(file.oidc_new_user_role)
                    .as_deref()
                    .unwrap_or("none")
                {
                    "none" => None,
                    role @ ("viewer" | "editor") => role.parse().ok(),
                    other => bail!("oidc_new_user_role must be none, viewer or editor, got `{other}`"),
                };
                Some(SsoConfig {
                    issuer,
                    client_id,
                    client_secret,
                    allowed_domains,
                    new_user_role,
                    display_name: args
                        .oidc_name
                        .or(file.oidc_name)
                        .unwrap_or_else(|| "SSO".to_string()),
                })
            }
            (None, None, None) => None,
            _ => bail!("SSO needs all of oidc_issuer, oidc_client_id and oidc_client_secret"),
        };
        if let Some(days) = args.device_token_days.or(file.device_token_days) {
            if !(1..=3650).contains(&days) {
                bail!("device_token_days must be between 1 and 3650");
            }
            config.device_token_lifetime = Duration::from_secs(days * 24 * 3600);
        }
        if let Some(streams) = args.max_streams_per_user.or(file.max_streams_per_user) {
            if streams < 1 {
                bail!("max_streams_per_user must be at least 1");
            }
            config.max_streams_per_user = streams;
        }
        if let Some(proxies) = args.trusted_proxies.or(file.trusted_proxies) {
            config.trusted_proxies = proxies;
        }
        if let Some(lines) = args.log_tail_lines.or(file.log_tail_lines) {
            if lines < 1 {
                bail!("log_tail_lines must be at least 1");
            }
            config.log_tail_lines = lines;
        }
        if config.heartbeat_interval.is_zero() {
            bail!("heartbeat_interval_ms must be at least 1");
        }
        if config.node_timeout <= config.heartbeat_interval {
            bail!("node_timeout_ms must be longer than heartbeat_interval_ms");
        }
        if let Some(url) = &config.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("public_url must start with http:// or https://, got `{url}`");
        }
        Ok(config)
    }

    /// The URL jobs and users reach the server at.
    pub fn public_url(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.bind),
        }
    }
}

/// `$XDG_DATA_HOME/gpuplane`, else `~/.local/share/gpuplane`, else `./gpuplane-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("gpuplane");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/gpuplane"),
        None => PathBuf::from("gpuplane-data"),
    }
}

/// `site/` beside the directory holding the binary: `target/site` for a
/// binary in `target/debug`, `PREFIX/site` for one in `PREFIX/bin`.
fn default_site_root() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("site")))
        .unwrap_or_else(|| PathBuf::from("target/site"))
}

/// Reads the config file: `explicit` must exist; otherwise `DATA_DIR/gpuplane.toml` is optional.
pub fn load_file(explicit: Option<&Path>, data_dir: &Path) -> anyhow::Result<FileConfig> {
    let (path, required) = match explicit {
        Some(path) => (path.to_path_buf(), true),
        None => (data_dir.join(CONFIG_FILE), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if !required && error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileConfig::default());
        }
        Err(error) => {
            return Err(error).with_context(|| format!("cannot read config file {}", path.display()));
        }
    };
    toml::from_str(&text).map_err(|error| {
        let message = error.message().trim().to_string();
        anyhow::anyhow!("config file {}: {message}", path.display())
    })
}

/// Creates the data directory and proves it is writable.
pub fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"")
        .with_context(|| format!("data directory {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

pub fn example_config() -> String {
    format!(
        r#"# GPUPlane server configuration ({CONFIG_FILE} in the data directory, or --config FILE).
# Every key is also a flag (--bind) and an environment variable (GPUPLANE_BIND);
# flags and variables win over this file. Unknown keys are refused.

# Address to listen on.
bind = "{DEFAULT_BIND}"

# URL users, agents and jobs reach this server at (default: http:// + bind).
# public_url = "https://gpuplane.example.com"

# Console static files and wasm bundle (default: ../site next to the binary).
# site_root = "/opt/gpuplane/site"

# How often agents send a heartbeat, and how long a silent node stays ONLINE.
heartbeat_interval_ms = {DEFAULT_HEARTBEAT_INTERVAL_MS}
node_timeout_ms = {DEFAULT_NODE_TIMEOUT_MS}

# After a node goes OFFLINE, how long its running jobs wait for it before they
# turn LOST (and are requeued when attempts remain).
lost_grace_ms = {DEFAULT_LOST_GRACE_MS}

# Between SIGTERM and SIGKILL when a job is cancelled.
cancel_grace_ms = {DEFAULT_CANCEL_GRACE_MS}

# cpu_only-lane jobs (resources.gpu = 0) that may run at once on one node.
cpu_slots_per_node = {DEFAULT_CPU_SLOTS_PER_NODE}

# Newest output lines the server keeps per stream of each attempt; the agent
# keeps the whole files (gpuctl logs -n 0 fetches them).
log_tail_lines = {DEFAULT_LOG_TAIL_LINES}

# Console sessions end after this long unused, and this long after sign-in.
session_idle_ms = {DEFAULT_SESSION_IDLE_MS}
session_max_ms = {DEFAULT_SESSION_MAX_MS}

# How often `gpuctl login --device-flow` polls (RFC 8628 interval), in seconds.
device_poll_interval_s = 5

# Metric keys whose first NaN/Infinity raises a critical LOSS_NAN event.
loss_pattern = "{DEFAULT_LOSS_PATTERN}"

# A running job with no output for this long gets a NO_OUTPUT finding in
# `gpuctl run diagnose` (a hang, a deadlock between ranks), in seconds.
silence_warning_s = {DEFAULT_SILENCE_WARNING_S}

# Server-sent event streams (logs, events, runs) end after this long, in
# seconds; browsers and gpuctl reconnect and resume where they were.
stream_max_s = {DEFAULT_STREAM_MAX_S}

# A notice on the console's dashboard and in `gpuctl status`, e.g.
# maintenance_message = "Drivers upgrade Saturday 10:00-12:00 UTC: jobs will be requeued"

# Single sign-on through an OpenID Connect provider (all three to enable).
# Register {{public_url}}/auth/oidc/callback as the redirect URI there.
# oidc_issuer = "https://login.example.com"
# oidc_client_id = "gpuplane"
# oidc_client_secret = "..."
# oidc_allowed_domains = ["example.com"]
# oidc_name = "Example SSO"
# With no allowed domain, SSO refuses to start unless this is true:
# oidc_allow_any_domain = false
# The role a new SSO user gets in the `default` project (none, viewer, editor);
# with none, an admin adds them to projects.
# oidc_new_user_role = "none"

# Tokens that `gpuctl login` (device login) issues expire after this many days.
device_token_days = {DEFAULT_DEVICE_TOKEN_DAYS}

# Live streams (logs -f, the console's live pages) one user, and one token,
# may hold open at once; more are refused with 429.
max_streams_per_user = {DEFAULT_MAX_STREAMS_PER_USER}

# Reverse proxies in front of this server: their X-Forwarded-For header names
# the client for sign-in limits. From any other peer the header is ignored.
# trusted_proxies = ["127.0.0.1"]
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses_to_the_defaults() {
        let file: FileConfig = toml::from_str(&example_config()).unwrap();
        let config = ServerConfig::resolve("d".into(), file, ServeArgs::default()).unwrap();
        let defaults = ServerConfig::with_defaults("d".into());
        assert_eq!(config.bind, defaults.bind);
        assert_eq!(config.heartbeat_interval, defaults.heartbeat_interval);
        assert_eq!(config.node_timeout, defaults.node_timeout);
        assert_eq!(config.lost_grace, defaults.lost_grace);
        assert_eq!(config.cancel_grace, defaults.cancel_grace);
        assert_eq!(config.cpu_slots_per_node, defaults.cpu_slots_per_node);
        assert_eq!(config.log_tail_lines, defaults.log_tail_lines);
    }

    #[test]
    fn flags_win_over_the_file() {
        let file = FileConfig {
            bind: Some("127.0.0.1:1".parse().unwrap()),
            node_timeout_ms: Some(9_000),
            ..FileConfig::default()
        };
        let args = ServeArgs {
            bind: Some("127.0.0.1:2".parse().unwrap()),
            ..ServeArgs::default()
        };
        let config = ServerConfig::resolve("d".into(), file, args).unwrap();
        assert_eq!(config.bind.port(), 2);
        assert_eq!(config.node_timeout, Duration::from_secs(9));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let error = toml::from_str::<FileConfig>("bnd = \"x\"").unwrap_err();
        assert!(
            error.message().contains("unknown field `bnd`"),
            "{}",
            error.message()
        );
    }
}

/// SSO settings (`oidc_*` config keys).
#[derive(Clone)]
pub struct SsoConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Email domains allowed to sign in; empty: any (only with `oidc_allow_any_domain`).
    pub allowed_domains: Vec<String>,
    /// The role a new SSO user gets in the `default` project; `None`: no project.
    pub new_user_role: Option<gpuplane_api::project::Role>,
    /// What the sign-in button says.
    pub display_name: String,
}

impl std::fmt::Debug for SsoConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"(hidden)")
            .field("allowed_domains", &self.allowed_domains)
            .finish()
    }
}
