//! `/api/v1/hf`: the caller's own Hugging Face Hub token (`gpuctl hf
//! link | unlink | status`, the console's Hugging Face page). A secret that
//! belongs to the user: only they set or remove it, through a token of
//! theirs not limited to a project (it reaches every project's jobs), and
//! it is never shown back.

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::identity::access::Caller;
use crate::identity::hub_tokens;
use crate::state::AppState;
use crate::store::time::rfc3339;
use axum::Json;
use axum::extract::State;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::recipe::{HubLink, HubStatus};

/// The longest token taken.
const MAX_TOKEN_LEN: usize = 512;

fn user_of(caller: &Caller) -> Result<&str, ApiError> {
    caller
        .user_id
        .as_deref()
        .ok_or_else(|| ApiError::Forbidden("a Hub token belongs to a user: use a user's token".into()))
}

fn owner_of(caller: &Caller) -> Result<&str, ApiError> {
    if let Some(project) = &caller.project {
        return Err(ApiError::Forbidden(format!(
            "this token is limited to project {project}, and your Hub token reaches every project's jobs: \
             link it with a token that is not limited, or in the console"
        )));
    }
    user_of(caller)
}

async fn status(state: &AppState, user_id: &str, warnings: Vec<String>) -> Result<HubStatus, ApiError> {
    let linked = hub_tokens::linked(&state.db, user_id).await?;
    Ok(HubStatus {
        linked: linked.is_some(),
        linked_at: linked.as_ref().map(|(at, _)| rfc3339(*at)),
        hub_user: linked.and_then(|(_, user)| user),
        endpoint: state.hub.endpoint().map(String::from),
        warnings,
    })
}

/// Whether the caller has linked a Hub token (never the token).
#[utoipa::path(get, path = "/hf", tag = "recipes",
    security(("bearer" = ["read"])),
    responses((status = 200, body = HubStatus), AuthErrors))]
pub async fn hub_status(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<HubStatus>, ApiError> {
    let user_id = user_of(&auth.caller)?;
    Ok(Json(status(&state, user_id, Vec::new()).await?))
}

/// Links (or replaces) the caller's Hub token, after asking the Hub whose
/// it is: a token the Hub refuses is a 422; a Hub that does not answer
/// leaves it linked, unverified, with a warning.
#[utoipa::path(put, path = "/hf/token", tag = "recipes",
    security(("bearer" = ["write"])),
    request_body = HubLink,
    responses((status = 200, body = HubStatus), AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn link_hub_token(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(link): ApiJson<HubLink>,
) -> Result<Json<HubStatus>, ApiError> {
    let user_id = owner_of(&auth.caller)?;
    let token = link.token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_LEN || !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::field(
            "token",
            format!("a Hub token is 1-{MAX_TOKEN_LEN} printable characters without spaces (hf_…)"),
        ));
    }
    let mut warnings = Vec::new();
    let hub_user = match state.hub.whoami(token).await {
        Ok(Some(name)) => Some(name),
        Ok(None) => {
            return Err(ApiError::field(
                "token",
                format!(
                    "the Hub ({}) does not accept this token: make one at {}/settings/tokens",
                    state.hub.endpoint().unwrap_or_default(),
                    state.hub.endpoint().unwrap_or_default()
                ),
            ));
        }
        Err(why) => {
            warnings.push(format!("linked without checking it: {why}"));
            None
        }
    };
    hub_tokens::link(&state.db, &state.secret, user_id, token, hub_user.as_deref()).await?;
    Ok(Json(status(&state, user_id, warnings).await?))
}

/// Forgets the caller's Hub token.
#[utoipa::path(delete, path = "/hf/token", tag = "recipes",
    security(("bearer" = ["write"])),
    responses((status = 200, body = HubStatus), AuthErrors))]
pub async fn unlink_hub_token(
    auth: Authed<Write>,
    State(state): State<AppState>,
) -> Result<Json<HubStatus>, ApiError> {
    let user_id = owner_of(&auth.caller)?;
    hub_tokens::unlink(&state.db, user_id).await?;
    Ok(Json(status(&state, user_id, Vec::new()).await?))
}
