//! Command line and configuration. Every setting is declared once, in
//! [`Settings`]: its clap attributes make it a flag and a `GPUPLANE_*`
//! variable, its serde form a key of the config file. Layers, merged
//! generically ([`Settings::overlaid`]): the defaults (`gpuplane.example.toml`,
//! built into the binary), then the config file, then environment variables
//! and flags (clap reads each flag's variable, so those two are one layer).
//! [`ServerConfig`] is the typed, checked result the server runs with.

mod settings;
pub mod smtp;
pub mod windows;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use gpuplane_api::auth::Scope;
pub use settings::{EXAMPLE_CONFIG, SettingValues, Settings};
use std::net::IpAddr;
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
    Serve(Box<Settings>),
    /// Bootstrap users and tokens without a running server.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Configuration helpers.
    #[command(subcommand)]
    Config(ConfigCommand),
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
    /// Copy an install, every row of every table, into an empty PostgreSQL
    /// database (which gets GPUPlane's PostgreSQL schema first). The copy is
    /// the install as it was when the copy began, even while a server still
    /// writes to it; it is all or nothing.
    MigrateToPostgres {
        /// The data directory to copy (default: --data-dir).
        #[arg(long, value_name = "DATA_DIR")]
        from: Option<PathBuf>,
        /// `postgres://USER@HOST:PORT/DATABASE`. Give the password in
        /// PGPASSWORD or ~/.pgpass rather than in the URL: other users of
        /// this host can read a process's command line.
        #[arg(long, value_name = "URL")]
        to: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print an example configuration file with every key and its default.
    Example,
}

pub const CONFIG_FILE: &str = "gpuplane.toml";

/// Everything `serve` needs: every setting's value, and the forms the
/// server uses derived from them. A new setting needs no field here: its
/// value is in [`ServerConfig::settings`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    /// Where MLflow artifacts are kept.
    pub artifact_location: ArtifactLocation,
    /// Connections, and how long a request's head and body may take.
    pub http_limits: crate::http::Limits,
    pub settings: SettingValues,
    pub site_root: PathBuf,
    pub heartbeat_interval: Duration,
    pub node_timeout: Duration,
    pub lost_grace: Duration,
    pub cancel_grace: Duration,
    pub session_idle: Duration,
    pub session_max: Duration,
    /// The polling interval the device flow asks clients for.
    pub device_poll_interval: Duration,
    /// Single sign-on, when configured.
    pub sso: Option<SsoConfig>,
    /// Output silence of a running job that its diagnosis reports (NO_OUTPUT).
    pub silence_warning: Duration,
    /// How long metric compaction waits after ingest before it looks (not
    /// a setting users need; tests make it long to see chunks before).
    pub compaction_delay: Duration,
    /// How long one server-sent event stream lasts before the client reconnects.
    pub stream_max: Duration,
    /// Node pools' daily scheduling windows (`scheduling_windows`).
    pub scheduling_windows: Vec<crate::config::windows::Window>,
    /// Shown on the dashboard and by `gpuctl status`.
    pub maintenance_message: Option<String>,
    /// How long a token issued by device login lives.
    pub device_token_lifetime: Duration,
    /// Peers whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<IpAddr>,
    /// The role new local users get in `default` (None: no membership).
    pub default_project_role: Option<gpuplane_api::project::Role>,
}

impl ServerConfig {
    /// What this server allows in a job spec beyond its form (`gpuplane_api::spec`).
    pub fn job_policy(&self) -> gpuplane_api::spec::Policy {
        gpuplane_api::spec::Policy {
            allowed_image_registries: self.settings.allowed_image_registries.as_ref().map(|hosts| {
                hosts
                    .iter()
                    .map(|host| host.trim().to_lowercase())
                    .filter(|host| !host.is_empty())
                    .collect()
            }),
        }
    }
    /// A configuration with every default, for `data_dir`.
    pub fn with_defaults(data_dir: PathBuf) -> Self {
        ServerConfig::resolve(data_dir, Settings::default())
            .expect("the built-in defaults are a valid configuration")
    }

    /// Layers `settings` (the file, then flags and environment, already
    /// overlaid) over the defaults, and checks the result.
    pub fn resolve(data_dir: PathBuf, settings: Settings) -> anyhow::Result<Self> {
        let s = SettingValues::resolve(settings)?;
        let millis = Duration::from_millis;
        let seconds = |value: u64, key: &str| -> anyhow::Result<Duration> {
            if value < 1 {
                bail!("{key} must be at least 1");
            }
            Ok(Duration::from_secs(value))
        };
        if s.log_tail_lines < 1 {
            bail!("log_tail_lines must be at least 1");
        }
        if let Some(url) = &s.database_url {
            crate::store::check_database_url(url)?;
        }
        if !(1..=3650).contains(&s.device_token_days) {
            bail!("device_token_days must be between 1 and 3650");
        }
        if s.max_streams_per_user < 1 {
            bail!("max_streams_per_user must be at least 1");
        }
        if s.max_connections < 1 {
            bail!("max_connections must be at least 1");
        }
        if s.heartbeat_interval_ms < 1 {
            bail!("heartbeat_interval_ms must be at least 1");
        }
        if s.node_timeout_ms <= s.heartbeat_interval_ms {
            bail!("node_timeout_ms must be longer than heartbeat_interval_ms");
        }
        if s.alert_retry_initial_s < 1 || s.alert_max_attempts < 1 {
            bail!("alert_retry_initial_s and alert_max_attempts must be at least 1");
        }
        smtp::check(s.smtp_url.as_deref(), &s.smtp_from)?;
        let artifact_location = ArtifactLocation::parse(
            s.artifact_store.as_deref(),
            s.artifact_store_endpoint.as_deref(),
            &data_dir,
        )
        .map_err(|problem| anyhow::anyhow!(problem))?;
        if let Some(url) = &s.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("public_url must start with http:// or https://, got `{url}`");
        }
        Ok(ServerConfig {
            site_root: s.site_root.clone().unwrap_or_else(default_site_root),
            heartbeat_interval: millis(s.heartbeat_interval_ms),
            node_timeout: millis(s.node_timeout_ms),
            lost_grace: millis(s.lost_grace_ms),
            cancel_grace: millis(s.cancel_grace_ms),
            session_idle: millis(s.session_idle_ms),
            session_max: millis(s.session_max_ms),
            device_poll_interval: seconds(s.device_poll_interval_s, "device_poll_interval_s")?,
            sso: sso_config(&s)?,
            silence_warning: seconds(s.silence_warning_s, "silence_warning_s")?,
            compaction_delay: Duration::from_secs(2),
            stream_max: seconds(s.stream_max_s, "stream_max_s")?,
            http_limits: crate::http::Limits {
                max_connections: s.max_connections,
                header_timeout: seconds(s.header_timeout_s, "header_timeout_s")?,
                body_timeout: seconds(s.request_body_timeout_s, "request_body_timeout_s")?,
            },
            scheduling_windows: s
                .scheduling_windows
                .iter()
                .flatten()
                .filter(|text| !text.trim().is_empty())
                .map(|text| crate::config::windows::Window::parse(text))
                .collect::<Result<_, _>>()
                .map_err(|error| anyhow::anyhow!("scheduling_windows: {error}"))?,
            maintenance_message: s
                .maintenance_message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_string),
            default_project_role: new_user_role("default_project_role", &s.default_project_role)?,
            device_token_lifetime: Duration::from_secs(s.device_token_days * 24 * 3600),
            trusted_proxies: s.trusted_proxies.clone().unwrap_or_default(),
            artifact_location,
            settings: s,
            data_dir,
        })
    }

    /// The URL jobs and users reach the server at.
    pub fn public_url(&self) -> String {
        match &self.settings.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.settings.bind),
        }
    }
}

/// Single sign-on from the `oidc_*` settings: all of issuer, client id and
/// secret, or none.
fn sso_config(s: &SettingValues) -> anyhow::Result<Option<SsoConfig>> {
    let (issuer, client_id, client_secret) = match (&s.oidc_issuer, &s.oidc_client_id, &s.oidc_client_secret)
    {
        (Some(issuer), Some(client_id), Some(client_secret)) => (issuer, client_id, client_secret),
        (None, None, None) => return Ok(None),
        _ => bail!("SSO needs all of oidc_issuer, oidc_client_id and oidc_client_secret"),
    };
    let allowed_domains: Vec<String> = s
        .oidc_allowed_domains
        .iter()
        .flatten()
        .map(|domain| domain.trim().to_lowercase())
        .filter(|domain| !domain.is_empty())
        .collect();
    if allowed_domains.is_empty() && !s.oidc_allow_any_domain.unwrap_or(false) {
        bail!(
            "SSO is on but oidc_allowed_domains is empty: anyone with an account at {issuer} could \
             sign in. List the email domains allowed, or set oidc_allow_any_domain = true"
        );
    }
    let new_user_role = new_user_role(
        "oidc_new_user_role",
        s.oidc_new_user_role.as_deref().unwrap_or("none"),
    )?;
    Ok(Some(SsoConfig {
        issuer: issuer.clone(),
        client_id: client_id.clone(),
        client_secret: client_secret.clone(),
        allowed_domains,
        new_user_role,
        display_name: s.oidc_name.clone().unwrap_or_else(|| "SSO".to_string()),
    }))
}

/// The role a setting gives new users in `default`: `none` (no
/// membership), `viewer` or `editor`.
pub fn new_user_role(key: &str, value: &str) -> anyhow::Result<Option<gpuplane_api::project::Role>> {
    match value {
        "none" => Ok(None),
        role @ ("viewer" | "editor") => Ok(role.parse().ok()),
        other => bail!("{key} must be none, viewer or editor, got `{other}`"),
    }
}

/// `default_project_role` as the config file and `GPUPLANE_DEFAULT_PROJECT_ROLE`
/// set it, for the `admin` subcommands, which take no `serve` flags.
pub fn default_project_role(file: &Settings) -> anyhow::Result<Option<gpuplane_api::project::Role>> {
    let from_env = std::env::var("GPUPLANE_DEFAULT_PROJECT_ROLE")
        .ok()
        .filter(|v| !v.is_empty());
    let set = Settings {
        default_project_role: from_env.or_else(|| file.default_project_role.clone()),
        ..Settings::default()
    };
    let value = Settings::defaults()?
        .overlaid(set)?
        .default_project_role
        .unwrap_or_default();
    new_user_role("default_project_role", &value)
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
pub fn load_file(explicit: Option<&Path>, data_dir: &Path) -> anyhow::Result<Settings> {
    let (path, required) = match explicit {
        Some(path) => (path.to_path_buf(), true),
        None => (data_dir.join(CONFIG_FILE), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if !required && error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Settings::default());
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

/// Where MLflow artifacts are kept (`artifact_store`, `artifact_store_endpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactLocation {
    Folder(PathBuf),
    S3 {
        bucket: String,
        prefix: String,
        /// An S3-compatible server's URL (`artifact_store_endpoint`); none: AWS's.
        endpoint: Option<String>,
    },
}

impl ArtifactLocation {
    /// `s3://bucket[/prefix]`, else a folder (a relative one in the data dir).
    pub fn parse(
        setting: Option<&str>,
        endpoint: Option<&str>,
        data_dir: &Path,
    ) -> Result<ArtifactLocation, String> {
        let setting = setting.map(str::trim).filter(|s| !s.is_empty());
        let endpoint = endpoint.map(str::trim).filter(|s| !s.is_empty());
        match setting {
            None => Ok(ArtifactLocation::Folder(data_dir.join("artifacts"))),
            Some(url) if url.starts_with("s3://") => {
                let rest = &url["s3://".len()..];
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(format!(
                        "artifact_store `{url}` names no bucket: s3://BUCKET[/PREFIX]"
                    ));
                }
                if let Some(endpoint) = endpoint
                    && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
                {
                    return Err(format!(
                        "artifact_store_endpoint must start with http:// or https://, got `{endpoint}`"
                    ));
                }
                Ok(ArtifactLocation::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.trim_matches('/').to_string(),
                    endpoint: endpoint.map(str::to_string),
                })
            }
            Some(url) if url.contains("://") => Err(format!(
                "artifact_store must be a folder or s3://BUCKET[/PREFIX] (S3 or an S3-compatible server), got `{url}`"
            )),
            Some(folder) => Ok(ArtifactLocation::Folder(data_dir.join(folder))),
        }
    }
}

impl std::fmt::Display for ArtifactLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArtifactLocation::Folder(folder) => write!(f, "{}", folder.display()),
            ArtifactLocation::S3 { bucket, prefix, .. } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_must_name_postgresql() {
        let with_url = |url: &str| Settings {
            database_url: Some(url.to_string()),
            ..Settings::default()
        };
        for url in [
            "postgres://u:p@db/gpuplane",
            "postgresql://db/gpuplane?sslmode=require",
        ] {
            let config = ServerConfig::resolve("d".into(), with_url(url)).unwrap();
            assert_eq!(config.settings.database_url.as_deref(), Some(url));
        }
        for url in ["sqlite://gpuplane.db", "db.example.com/gpuplane", ""] {
            let error = ServerConfig::resolve("d".into(), with_url(url)).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("database_url must start with postgres://"),
                "{url}: {error}"
            );
        }
        assert_eq!(
            ServerConfig::with_defaults("d".into()).settings.database_url,
            None
        );
    }

    #[test]
    fn the_example_config_parses_to_the_defaults() {
        // Read as a config file, the example changes nothing.
        let file: Settings = toml::from_str(EXAMPLE_CONFIG).unwrap();
        let from_file = ServerConfig::resolve("d".into(), file).unwrap();
        let defaults = ServerConfig::with_defaults("d".into());
        assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
        assert_eq!(defaults.heartbeat_interval, Duration::from_secs(2));
        assert_eq!(defaults.settings.bind.port(), 8600);
    }

    #[test]
    fn every_setting_is_a_key_of_the_example() {
        // Each setting appears in the example, set or commented out.
        let keys = serde_json::to_value(Settings::default()).unwrap();
        for key in keys.as_object().unwrap().keys() {
            let line = format!("{key} = ");
            assert!(
                EXAMPLE_CONFIG
                    .lines()
                    .any(|l| l.trim_start_matches("# ").starts_with(&line)),
                "`{key}` is missing from gpuplane.example.toml"
            );
        }
    }

    #[test]
    fn flags_win_over_the_file() {
        let file = Settings {
            bind: Some("127.0.0.1:1".parse().unwrap()),
            node_timeout_ms: Some(9_000),
            ..Settings::default()
        };
        let flags = Settings {
            bind: Some("127.0.0.1:2".parse().unwrap()),
            ..Settings::default()
        };
        let config = ServerConfig::resolve("d".into(), file.overlaid(flags).unwrap()).unwrap();
        assert_eq!(config.settings.bind.port(), 2);
        assert_eq!(config.node_timeout, Duration::from_secs(9));
    }

    #[test]
    fn list_settings_take_commas_as_flags_and_lists_in_the_file() {
        let cli = Cli::try_parse_from([
            "gpuplane-server",
            "serve",
            "--allowed-image-registries",
            "nvcr.io,ghcr.io",
        ])
        .unwrap();
        let Command::Serve(flags) = cli.command else {
            panic!("serve")
        };
        let file: Settings = toml::from_str("allowed_image_registries = []").unwrap();
        let config = ServerConfig::resolve("d".into(), file.overlaid(*flags).unwrap()).unwrap();
        assert_eq!(
            config.settings.allowed_image_registries,
            Some(vec!["nvcr.io".to_string(), "ghcr.io".to_string()])
        );
        let file: Settings = toml::from_str("allowed_image_registries = []").unwrap();
        let config = ServerConfig::resolve("d".into(), file).unwrap();
        assert_eq!(config.settings.allowed_image_registries, Some(vec![]));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let error = toml::from_str::<Settings>("bnd = \"x\"").unwrap_err();
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
