//! `gpuctl login`, `logout`, `whoami`, and `token list|create|revoke`.
//!
//! `login` without `--token` uses the OAuth device authorization grant
//! (RFC 8628) through the oauth2 crate: it shows a short code and a URL to
//! open on any device, opens it in a browser when this machine has one, and
//! polls at the server's interval (slowing down when told to).

use crate::Output;
use crate::client::{CliError, Client, DEFAULT_SERVER};
use crate::credentials::{self, Credentials};
use crate::exit::Failure;
use gpuplane_api::Page;
use gpuplane_api::auth::{CreateToken, CreatedToken, Scope, TokenInfo, WhoAmI};
use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, ClientId, DeviceAuthorizationUrl, RequestTokenError, StandardDeviceAuthorizationResponse,
    TokenResponse, TokenUrl,
};
use serde_json::json;
use std::fmt::Write;

/// The OAuth client id gpuctl uses.
const CLIENT_ID: &str = "gpuctl";

#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// Sign in with a short code on any device (for SSH sessions); never opens a browser here.
    #[arg(long)]
    device_flow: bool,
}

pub async fn login(
    server: Option<String>,
    token: Option<String>,
    args: LoginArgs,
    out: &Output,
) -> Result<(), CliError> {
    let server = server
        .or_else(|| credentials::load().map(|c| c.server))
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let token = match token {
        Some(token) => token,
        None => device_flow(&server, !args.device_flow && browser_available(), out).await?,
    };
    let client = Client::new(Some(server.clone()), Some(token.clone()))?;
    let me: WhoAmI = client.get("auth/whoami").await?;
    let path = credentials::save(&Credentials {
        server: client.server.clone(),
        token,
    })?;
    out.emit(
        &json!({"server": client.server, "whoami": me, "credentials": path}),
        |_| {
            format!(
                "Signed in to {} as {} (scope {}). Credentials saved in {}.",
                client.server,
                me.user.as_deref().unwrap_or("an agent"),
                me.scope,
                path.display()
            )
        },
    );
    Ok(())
}

fn login_error(message: impl Into<String>) -> CliError {
    CliError::new(Failure::Unauthenticated, "login_failed", message)
}

/// Runs the device flow against `server`; returns the new access token.
async fn device_flow(server: &str, open_browser: bool, out: &Output) -> Result<String, CliError> {
    let server = server.trim_end_matches('/');
    let metadata: serde_json::Value = Client::new(Some(server.to_string()), None)?
        .get_absolute("/.well-known/oauth-authorization-server")
        .await?;
    let endpoint = |key: &str| {
        metadata[key]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| login_error(format!("the server does not offer `{key}`")))
    };
    let device_url = DeviceAuthorizationUrl::new(endpoint("device_authorization_endpoint")?)
        .map_err(|e| login_error(format!("bad device authorization URL: {e}")))?;
    let token_url =
        TokenUrl::new(endpoint("token_endpoint")?).map_err(|e| login_error(format!("bad token URL: {e}")))?;
    let oauth = BasicClient::new(ClientId::new(CLIENT_ID.to_string()))
        .set_auth_type(AuthType::RequestBody)
        .set_device_authorization_url(device_url)
        .set_token_uri(token_url);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| login_error(e.to_string()))?;
    let host = hostname();
    let details: StandardDeviceAuthorizationResponse = oauth
        .exchange_device_code()
        .add_extra_param("client_name", "gpuctl")
        .add_extra_param("client_host", host)
        .request_async(&http)
        .await
        .map_err(|e| login_error(format!("cannot start the sign-in: {}", describe(&e))))?;
    let complete = details
        .verification_uri_complete()
        .map(|uri| uri.secret().to_string());
    let code = details.user_code().secret();
    if out.json {
        let pending = json!({
            "verification_uri": details.verification_uri().as_str(),
            "verification_uri_complete": complete,
            "user_code": code,
            "expires_in": details.expires_in().as_secs(),
        });
        println!("{pending}");
    }
    eprintln!(
        "To sign in, open {} on any device and enter the code {code}",
        details.verification_uri().as_str()
    );
    if let Some(complete) = &complete {
        eprintln!("(or open {complete})");
        if open_browser && open_in_browser(complete) {
            eprintln!("A browser window was opened for you.");
        }
    }
    eprintln!("Waiting for approval…");
    let token = oauth
        .exchange_device_access_token(&details)
        .request_async(&http, tokio::time::sleep, None)
        .await
        .map_err(|error| match &error {
            RequestTokenError::ServerResponse(response) => match response.error().as_ref() {
                "access_denied" => login_error("the sign-in was denied in the browser"),
                "expired_token" => {
                    login_error("the code expired before it was approved: run `gpuctl login` again")
                }
                other => login_error(format!("the sign-in failed: {other}")),
            },
            _ => login_error(format!("the sign-in failed: {}", describe(&error))),
        })?;
    Ok(token.access_token().secret().to_string())
}

fn describe<E: std::error::Error>(error: &E) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown host".into())
}

/// A graphical session this process could open a browser in (not over SSH).
fn browser_available() -> bool {
    let ssh = std::env::var_os("SSH_CONNECTION").is_some() || std::env::var_os("SSH_TTY").is_some();
    let display = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    (display || cfg!(target_os = "macos")) && !ssh
}

fn open_in_browser(url: &str) -> bool {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

pub fn logout(out: &Output) -> Result<(), CliError> {
    let removed = credentials::remove()?;
    out.emit(&json!({"removed": removed}), |_| {
        if removed {
            "Signed out: stored credentials removed."
        } else {
            "No stored credentials."
        }
        .to_string()
    });
    Ok(())
}

pub async fn whoami(client: &Client, out: &Output) -> Result<(), CliError> {
    let me: WhoAmI = client.get("auth/whoami").await?;
    out.emit(&me, |me| {
        let who = match &me.user {
            Some(user) if me.is_admin => format!("{user} (admin)"),
            Some(user) => user.clone(),
            None => "an agent".to_string(),
        };
        format!(
            "{who} on {}\ntoken {} ({}), scope {}, expires {}",
            client.server,
            me.token_name,
            me.token_id,
            me.scope,
            me.expires_at.as_deref().unwrap_or("never")
        )
    });
    Ok(())
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Your tokens: name, scope, project, last use.
    List,
    /// Create a token; its secret is printed this once.
    Create {
        #[arg(long)]
        name: String,
        /// read, write or sdk; metrics (a server admin's, for Prometheus's scrape).
        #[arg(long)]
        scope: Scope,
        /// Limit it to one project.
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        expires_in_days: Option<i64>,
    },
    /// Revoke a token: it stops working at once.
    Revoke { token_id: String },
}

pub async fn token(client: &Client, command: TokenCommand, out: &Output) -> Result<(), CliError> {
    match command {
        TokenCommand::List => {
            let page: Page<TokenInfo> = client.get("tokens").await?;
            out.emit(&page, |page| {
                let mut text = format!(
                    "{:<30} {:<24} {:<6} {:<12} {}\n",
                    "ID", "NAME", "SCOPE", "PROJECT", "LAST USED"
                );
                for token in &page.items {
                    let _ = writeln!(
                        text,
                        "{:<30} {:<24} {:<6} {:<12} {}{}",
                        token.id,
                        token.name,
                        token.scope.as_str(),
                        token.project.as_deref().unwrap_or("all"),
                        token.last_used_at.as_deref().unwrap_or("never"),
                        if token.revoked_at.is_some() {
                            "  (revoked)"
                        } else {
                            ""
                        }
                    );
                }
                text
            });
        }
        TokenCommand::Create {
            name,
            scope,
            project,
            expires_in_days,
        } => {
            let request = CreateToken {
                name,
                scope,
                project,
                expires_in_days,
            };
            let created: CreatedToken = client.post("tokens", &request).await?;
            if !out.json {
                eprintln!(
                    "Created {} ({}). Copy the secret now; it is not shown again:",
                    created.token.id, created.token.scope
                );
            }
            out.emit(&created, |created| created.secret.clone());
        }
        TokenCommand::Revoke { token_id } => {
            let revoked: TokenInfo = client.delete(&format!("tokens/{token_id}")).await?;
            out.emit(&revoked, |token| {
                format!("Revoked {} ({}).", token.id, token.name)
            });
        }
    }
    Ok(())
}
