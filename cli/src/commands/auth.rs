//! `gpuctl login`, `logout`, `whoami`.

use crate::Output;
use crate::client::{CliError, Client, DEFAULT_SERVER};
use crate::credentials::{self, Credentials};
use crate::exit::Failure;
use gpuplane_api::auth::WhoAmI;
use serde_json::json;

pub async fn login(server: Option<String>, token: Option<String>, out: &Output) -> Result<(), CliError> {
    let Some(token) = token else {
        return Err(CliError::new(
            Failure::Invalid,
            "missing_token",
            "pass --token TOKEN (browser and device-code sign-in are not available yet)",
        ));
    };
    let server = server.unwrap_or_else(|| DEFAULT_SERVER.to_string());
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
