//! Server functions: the console's calls into the server. Each one is a
//! public HTTP endpoint and checks its caller itself.

use gpuplane_api::auth::SessionUser;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// The SSO provider's name for the sign-in page, when SSO is configured (public).
#[server(prefix = "/console/fn", endpoint = "sso_name")]
pub async fn sso_name() -> Result<Option<String>, ServerFnError> {
    Ok(crate::backend::use_backend()?.sso_name())
}

/// The signed-in user, or `None`.
#[server(prefix = "/console/fn", endpoint = "current_user")]
pub async fn current_user() -> Result<Option<SessionUser>, ServerFnError> {
    Ok(session_user().await)
}

/// The user the server resolved from the session cookie for this request.
#[cfg(feature = "ssr")]
pub async fn session_user() -> Option<SessionUser> {
    leptos_axum::extract::<axum::Extension<SessionUser>>()
        .await
        .ok()
        .map(|axum::Extension(user)| user)
}

/// Fails a server function unless someone is signed in.
#[cfg(feature = "ssr")]
pub async fn require_user() -> Result<SessionUser, ServerFnError> {
    session_user()
        .await
        .ok_or_else(|| ServerFnError::new("not signed in: sign in again"))
}

/// The body of `GET path` on the public API, read as the signed-in user.
/// Pages read through this one call, so they show exactly what the API shows.
#[server(prefix = "/console/fn", endpoint = "api_get")]
pub async fn api_get(path: String) -> Result<String, ServerFnError> {
    let user = require_user().await?;
    crate::backend::use_backend()?
        .api_get(user, path, crate::backend::MAX_READ_BYTES)
        .await
        .map_err(refused)
}

/// Several API reads in one call (a page's charts); each answer or its
/// error. At most `MAX_READ_PATHS` paths and `MAX_READ_BYTES` in all.
#[server(prefix = "/console/fn", endpoint = "api_get_many")]
pub async fn api_get_many(paths: Vec<String>) -> Result<Vec<Result<String, String>>, ServerFnError> {
    use crate::backend::{MAX_READ_BYTES, MAX_READ_PATHS};
    let user = require_user().await?;
    if paths.len() > MAX_READ_PATHS {
        return Err(ServerFnError::new(format!(
            "a console read names at most {MAX_READ_PATHS} paths, not {}",
            paths.len()
        )));
    }
    let backend = crate::backend::use_backend()?;
    let mut answers = Vec::with_capacity(paths.len());
    let mut left = MAX_READ_BYTES;
    for path in paths {
        let answer = backend
            .api_get(user.clone(), path, left)
            .await
            .map_err(|refused| refused.message);
        if let Ok(body) = &answer {
            left -= body.len().min(left);
        }
        answers.push(answer);
    }
    Ok(answers)
}

/// An API answer, decoded.
pub async fn fetch<T: serde::de::DeserializeOwned>(path: String) -> Result<T, ServerFnError> {
    let body = api_get(path).await?;
    serde_json::from_str(&body)
        .map_err(|error| ServerFnError::new(format!("unexpected answer from the server: {error}")))
}

/// The pending device sign-in a user code names (wrong codes are rate-limited).
#[server(prefix = "/console/fn", endpoint = "device_request")]
pub async fn device_request(user_code: String) -> Result<gpuplane_api::auth::DeviceRequest, ServerFnError> {
    let user = require_user().await?;
    let backend = crate::backend::use_backend()?;
    backend
        .device_lookup(user_code, user.id, client_address().await)
        .await
        .map_err(ServerFnError::new)
}

/// The caller's address as the server resolved it (trusted proxies included).
#[cfg(feature = "ssr")]
async fn client_address() -> String {
    leptos_axum::extract::<axum::Extension<gpuplane_api::auth::ClientAddress>>()
        .await
        .map(|axum::Extension(address)| address.0.to_string())
        .unwrap_or_default()
}

/// Approves or denies a device sign-in as the signed-in user.
#[server(prefix = "/console/fn", endpoint = "decide_device")]
pub async fn decide_device(user_code: String, approve: bool) -> Result<bool, ServerFnError> {
    let user = require_user().await?;
    let backend = crate::backend::use_backend()?;
    backend
        .device_decide(user_code, user.id, client_address().await, approve)
        .await
        .map_err(ServerFnError::new)?;
    Ok(approve)
}

/// The signed-in user's tokens.
#[server(prefix = "/console/fn", endpoint = "my_tokens")]
pub async fn my_tokens() -> Result<Vec<gpuplane_api::auth::TokenInfo>, ServerFnError> {
    let user = require_user().await?;
    crate::backend::use_backend()?
        .tokens(user)
        .await
        .map_err(ServerFnError::new)
}

/// Creates a token for the signed-in user; the answer holds its secret, once.
#[server(prefix = "/console/fn", endpoint = "create_my_token")]
pub async fn create_my_token(
    name: String,
    scope: String,
    project: String,
    expires_in_days: String,
) -> Result<gpuplane_api::auth::CreatedToken, ServerFnError> {
    let user = require_user().await?;
    let scope = scope.parse().map_err(ServerFnError::new)?;
    let expires_in_days = match expires_in_days.trim() {
        "" => None,
        days => Some(
            days.parse::<i64>()
                .map_err(|_| ServerFnError::new("expiry: give a number of days"))?,
        ),
    };
    let request = gpuplane_api::auth::CreateToken {
        name,
        scope,
        project: Some(project.trim().to_string()).filter(|p| !p.is_empty()),
        expires_in_days,
    };
    crate::backend::use_backend()?
        .create_token(user, request)
        .await
        .map_err(ServerFnError::new)
}

/// A new token for an AI assistant and the configurations that use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantToken {
    pub secret: String,
    /// For assistants that start a local process (`gpuctl mcp`).
    pub stdio_config: String,
    /// For assistants that speak streamable HTTP to `/mcp`.
    pub http_config: String,
}

/// Creates a read or write token for an AI assistant (MCP) and answers the
/// configuration snippets to paste, with the secret in them, once.
#[server(prefix = "/console/fn", endpoint = "create_assistant_token")]
pub async fn create_assistant_token(scope: String, project: String) -> Result<AssistantToken, ServerFnError> {
    let user = require_user().await?;
    let scope: gpuplane_api::auth::Scope = scope.parse().map_err(ServerFnError::new)?;
    if !matches!(
        scope,
        gpuplane_api::auth::Scope::Read | gpuplane_api::auth::Scope::Write
    ) {
        return Err(ServerFnError::new("an assistant token is read or write"));
    }
    let project = Some(project.trim().to_string()).filter(|p| !p.is_empty());
    let request = gpuplane_api::auth::CreateToken {
        name: format!("assistant (MCP, {scope})"),
        scope,
        project,
        expires_in_days: None,
    };
    let backend = crate::backend::use_backend()?;
    let created = backend
        .create_token(user, request)
        .await
        .map_err(ServerFnError::new)?;
    let server = backend.public_url();
    Ok(AssistantToken {
        stdio_config: gpuplane_api::mcp::stdio_config(&server, &created.secret),
        http_config: gpuplane_api::mcp::http_config(&server, &created.secret),
        secret: created.secret,
    })
}

/// A change made through the public API as the signed-in user: `method`
/// (POST, PUT, PATCH or DELETE) on `path` (under `/api/v1/`) with a JSON
/// `body` (may be empty). Answers the API's JSON; an error carries the
/// API's message with its field details. The API's own checks apply:
/// projects' roles, admin-only routes, the audit log.
#[server(prefix = "/console/fn", endpoint = "api_send")]
pub async fn api_send(method: String, path: String, body: String) -> Result<String, ServerFnError> {
    let user = require_user().await?;
    let address = client_address().await;
    crate::backend::use_backend()?
        .api_send(user, method, path, body, address)
        .await
        .map_err(refused)
}

/// A request the API refused, answered with the API's status (404, 422,
/// 403, 409, …): the user's to fix, not a server error in the log.
#[cfg(feature = "ssr")]
fn refused(refused: crate::backend::Refused) -> ServerFnError {
    if let (Some(response), Ok(status)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::StatusCode::from_u16(refused.status),
    ) {
        response.set_status(status);
    }
    ServerFnError::new(refused.message)
}

/// Revokes one of the signed-in user's tokens.
#[server(prefix = "/console/fn", endpoint = "revoke_my_token")]
pub async fn revoke_my_token(token_id: String) -> Result<(), ServerFnError> {
    let user = require_user().await?;
    crate::backend::use_backend()?
        .revoke_token(user, token_id)
        .await
        .map_err(ServerFnError::new)
}

/// What the experiment form shows after a check or a submit: the queued
/// job, or the API's refusal with each field's problem, and what could
/// not be checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentAnswer {
    /// The job queued by a submit.
    pub job_id: Option<String>,
    /// The refusal's message (drift, a field's problem, a role).
    pub refused: Option<String>,
    /// Each refused field (`config.KEY`, `project`, …) and why.
    pub details: Vec<gpuplane_api::error::FieldError>,
    pub warnings: Vec<String>,
    /// What would keep the job waiting if submitted now (a check).
    pub notes: Vec<String>,
}

/// Checks (`submit` false) or submits an experiment's job from the console's
/// form, through the API as the signed-in user: `body` is the
/// `ExperimentJob` JSON. A refusal the user can fix is an answer, not an
/// error, so the form can show each problem beside its field.
#[server(prefix = "/console/fn", endpoint = "send_experiment")]
pub async fn send_experiment(
    name: String,
    version: i64,
    body: String,
    submit: bool,
) -> Result<ExperimentAnswer, ServerFnError> {
    let user = require_user().await?;
    let address = client_address().await;
    let action = if submit { "jobs" } else { "check" };
    let path = gpuplane_api::paths::recipe_action(&name, version, action);
    let mut answer = ExperimentAnswer {
        job_id: None,
        refused: None,
        details: Vec::new(),
        warnings: Vec::new(),
        notes: Vec::new(),
    };
    match crate::backend::use_backend()?
        .api_send(user, "POST".into(), path, body, address)
        .await
    {
        Ok(text) if submit => {
            let job: gpuplane_api::job::Job = serde_json::from_str(&text).map_err(ServerFnError::new)?;
            answer.job_id = Some(job.id);
        }
        Ok(text) => {
            let check: gpuplane_api::recipe::ExperimentCheck =
                serde_json::from_str(&text).map_err(ServerFnError::new)?;
            answer.warnings = check.warnings;
            answer.notes = check.notes;
        }
        Err(refusal) if matches!(refusal.status, 403 | 404 | 409 | 422) => {
            answer.refused = Some(refusal.message);
            answer.details = refusal.details;
        }
        Err(refusal) => return Err(refused(refusal)),
    }
    Ok(answer)
}
