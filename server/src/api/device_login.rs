//! The OAuth 2.0 device authorization grant (RFC 8628) for `gpuctl login
//! --device-flow`: the CLI gets a device code and a short user code, the user
//! approves it on the console's `/device` page, and the CLI's polling of the
//! token endpoint then yields a token (once). Device and user codes are
//! stored only as hashes. Errors follow RFC 6749 §5.2.

use crate::identity::credentials::{NewToken, create_token};
use crate::identity::device_codes::{self, NewAuthorization, Poll};
use crate::state::AppState;
use crate::store;
use crate::store::time::{now_ms, rfc3339};
use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use gpuplane_api::auth::{ClientAddress, DeviceRequest, Scope};
use rand::Rng;
use serde::Deserialize;
use serde_json::json;

/// The grant type the token endpoint serves.
pub const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";
/// The public client ids that may use the device flow.
pub const CLIENTS: &[&str] = &["gpuctl"];
/// Consonants only: no vowels, so no words, and none of 0/O or 1/I to confuse.
const USER_CODE_ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LEN: usize = 8;
/// How long a device code is valid.
pub const EXPIRES_IN_S: i64 = 600;

/// An RFC 6749 §5.2 error answer.
fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

/// A form body (`application/x-www-form-urlencoded`, as RFC 6749 §4.1.3
/// and RFC 8628 §3.1 require). A body of another type or one missing a
/// field answers RFC 6749's 400 `invalid_request`, never axum's 415 or 422.
pub struct OAuthForm<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for OAuthForm<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let invalid =
            |description: String| oauth_error(StatusCode::BAD_REQUEST, "invalid_request", &description);
        let form = request
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/x-www-form-urlencoded"));
        if !form {
            return Err(invalid(
                "send the parameters as a form (Content-Type: application/x-www-form-urlencoded)".into(),
            ));
        }
        let body = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| invalid(format!("cannot read the request body: {rejection}")))?;
        serde_urlencoded::from_bytes(&body)
            .map(OAuthForm)
            .map_err(|error| invalid(error.to_string()))
    }
}

/// `XXXXXXXX` from what a user typed: case, dashes and spaces do not matter.
pub fn normalise_user_code(input: &str) -> String {
    input
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .flat_map(char::to_uppercase)
        .collect()
}

fn format_user_code(code: &str) -> String {
    format!("{}-{}", &code[..4], &code[4..])
}

fn new_user_code() -> String {
    let mut rng = rand::rng();
    (0..USER_CODE_LEN)
        .map(|_| USER_CODE_ALPHABET[rng.random_range(0..USER_CODE_ALPHABET.len())] as char)
        .collect()
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AuthorizationRequest {
    client_id: String,
    #[serde(default)]
    scope: Option<String>,
    /// Extensions: what the console shows the approving user.
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    client_host: Option<String>,
}

/// `POST /oauth/device_authorization` (RFC 8628 §3.1): a device code, a user
/// code and where to enter it. Form fields `client_id` (gpuctl), `scope`,
/// and the extensions `client_name` and `client_host` shown to the approver.
#[utoipa::path(post, path = "/oauth/device_authorization", tag = "oauth",
    request_body(content = AuthorizationRequest, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "device_code, user_code, verification_uri(_complete), expires_in, interval"),
        (status = 400, description = "RFC 6749 error"), (status = 401, description = "invalid_client"),
        (status = 429, description = "slow_down: too many requests from this address"),
        (status = 500, description = "server_error")))]
pub async fn authorize(
    State(state): State<AppState>,
    Extension(ClientAddress(client)): Extension<ClientAddress>,
    OAuthForm(request): OAuthForm<AuthorizationRequest>,
) -> Response {
    let limiter_key = client.to_string();
    if state.device_authorize_limiter.check(&limiter_key).await.is_err() {
        return oauth_error(
            StatusCode::TOO_MANY_REQUESTS,
            "slow_down",
            "too many sign-in requests from this address; try again in a few minutes",
        );
    }
    state.device_authorize_limiter.fail(&limiter_key).await;
    if !CLIENTS.contains(&request.client_id.as_str()) {
        return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "unknown client_id");
    }
    if request
        .scope
        .as_deref()
        .is_some_and(|scope| !scope.split(' ').all(|s| s.is_empty() || s == "write"))
    {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            "the only scope is `write`",
        );
    }
    let mut device_code = [0u8; 32];
    rand::rng().fill(&mut device_code);
    let device_code = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(device_code);
    let user_code = new_user_code();
    let now = now_ms();
    let interval = state.config.device_poll_interval.as_secs().max(1) as i64;
    let clip = |text: Option<String>, default: &str| -> String {
        text.filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| default.to_string())
            .chars()
            .take(100)
            .collect()
    };
    let client_name = clip(request.client_name, &request.client_id);
    let client_host = clip(request.client_host, "unknown host");
    let inserted = device_codes::insert(
        &state.db,
        &NewAuthorization {
            device_code: &device_code,
            user_code: &user_code,
            client_id: &request.client_id,
            client_name: &client_name,
            client_host: &client_host,
            client_ip: &client.to_string(),
            interval_s: interval,
            created_at: now,
            expires_at: now + EXPIRES_IN_S * 1000,
        },
    )
    .await;
    if let Err(error) = inserted {
        tracing::error!(%error, "cannot store a device authorization");
        return oauth_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "try again");
    }
    let verification_uri = format!("{}/device", state.config.public_url());
    let shown = format_user_code(&user_code);
    Json(json!({
        "device_code": device_code,
        "user_code": shown,
        "verification_uri": verification_uri,
        "verification_uri_complete": format!("{verification_uri}?user_code={shown}"),
        "expires_in": EXPIRES_IN_S,
        "interval": interval,
    }))
    .into_response()
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct TokenRequest {
    grant_type: String,
    #[serde(default)]
    device_code: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
}

/// `POST /oauth/token` with the device code grant (RFC 8628 §3.4, §3.5):
/// `authorization_pending`, `slow_down`, `access_denied`, `expired_token`,
/// or the access token (once).
#[utoipa::path(post, path = "/oauth/token", tag = "oauth",
    request_body(content = TokenRequest, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "access_token, token_type, scope"), (status = 400, description = "RFC 6749 / 8628 error"),
        (status = 500, description = "server_error")))]
pub async fn token(State(state): State<AppState>, OAuthForm(request): OAuthForm<TokenRequest>) -> Response {
    if request.grant_type != DEVICE_GRANT {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only the device code grant is served",
        );
    }
    let Some(device_code) = request.device_code else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "device_code is missing",
        );
    };
    match redeem(&state, &device_code, request.client_id.as_deref()).await {
        Ok(response) => response,
        Err(error) => {
            tracing::error!(%error, "device token request failed");
            oauth_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "try again")
        }
    }
}

async fn redeem(
    state: &AppState,
    device_code: &str,
    client_id: Option<&str>,
) -> Result<Response, store::Error> {
    let invalid = |error: &str, description: &str| oauth_error(StatusCode::BAD_REQUEST, error, description);
    let answer = match device_codes::poll(&state.db, device_code, client_id, now_ms()).await? {
        Poll::Unknown => invalid("invalid_grant", "unknown device_code"),
        Poll::OtherClient => invalid("invalid_grant", "the device_code belongs to another client"),
        Poll::Consumed => invalid("invalid_grant", "the device_code was already used"),
        Poll::Expired => invalid("expired_token", "the device_code has expired; start again"),
        // Polling faster than the interval: the interval grows by 5 s (§3.5).
        Poll::SlowDown => invalid("slow_down", "poll less often"),
        Poll::Denied => invalid("access_denied", "the request was denied"),
        Poll::Pending => invalid("authorization_pending", "waiting for the user to approve"),
        Poll::Approved {
            user_id,
            client_id,
            client_host,
        } => {
            let name = format!("{client_id} on {client_host}");
            let lifetime = state.config.device_token_lifetime;
            let new = NewToken {
                user_id: Some(&user_id),
                name: &name,
                scope: Scope::Write,
                expires_at: Some(now_ms() + lifetime.as_millis() as i64),
                project: None,
                node: None,
            };
            let (_, secret) = create_token(&state.db, new).await?;
            Json(json!({
                "access_token": secret,
                "token_type": "Bearer",
                "scope": "write",
                "expires_in": lifetime.as_secs(),
            }))
            .into_response()
        }
    };
    Ok(answer)
}

/// `GET /.well-known/oauth-authorization-server` (RFC 8414): the endpoints above.
#[utoipa::path(get, path = "/.well-known/oauth-authorization-server", tag = "oauth",
    responses((status = 200, description = "Authorization server metadata")))]
pub async fn metadata(State(state): State<AppState>) -> Json<serde_json::Value> {
    let base = state.config.public_url();
    Json(json!({
        "issuer": base,
        "device_authorization_endpoint": format!("{base}/oauth/device_authorization"),
        "token_endpoint": format!("{base}/oauth/token"),
        "grant_types_supported": [DEVICE_GRANT],
        "response_types_supported": [],
        "token_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": ["write"],
    }))
}

/// Why a user code lookup on the console failed.
#[derive(Debug)]
pub enum LookupError {
    /// No pending request has this code (counted against the rate limit).
    Unknown,
    /// Too many wrong codes recently.
    Limited(std::time::Duration),
    Internal(store::Error),
}

/// The key wrong user codes count against: the approving user at their address.
fn limiter_key(user_id: &str, approver_ip: &str) -> String {
    format!("{approver_ip}/{user_id}")
}

/// The pending request a user code names, for the approving user to check.
/// Wrong codes count against the user at their address.
pub async fn lookup(
    state: &AppState,
    user_code: &str,
    user_id: &str,
    approver_ip: &str,
) -> Result<DeviceRequest, LookupError> {
    let limiter_key = &limiter_key(user_id, approver_ip);
    if let Err(wait) = state.user_code_limiter.check(limiter_key).await {
        return Err(LookupError::Limited(wait));
    }
    let code = normalise_user_code(user_code);
    let row = device_codes::by_user_code(&state.db, &code)
        .await
        .map_err(LookupError::Internal)?;
    match row {
        Some(row) if row.expires_at > now_ms() && code.len() == USER_CODE_LEN => Ok(DeviceRequest {
            user_code: format_user_code(&code),
            client_name: row.client_name,
            client_host: row.client_host,
            client_ip: row.client_ip,
            approver_ip: approver_ip.to_string(),
            requested_at: rfc3339(row.created_at),
            expires_at: rfc3339(row.expires_at),
            status: row.status,
        }),
        _ => {
            state.user_code_limiter.fail(limiter_key).await;
            Err(LookupError::Unknown)
        }
    }
}

/// Approves or denies a pending request for `user_id`; false when it is no
/// longer pending (or expired), which counts like a wrong code.
pub async fn decide(
    state: &AppState,
    user_code: &str,
    user_id: &str,
    approver_ip: &str,
    approve: bool,
) -> Result<bool, LookupError> {
    let limiter_key = &limiter_key(user_id, approver_ip);
    if let Err(wait) = state.user_code_limiter.check(limiter_key).await {
        return Err(LookupError::Limited(wait));
    }
    let code = normalise_user_code(user_code);
    let decided = device_codes::decide(&state.db, &code, user_id, approve)
        .await
        .map_err(LookupError::Internal)?;
    if !decided {
        state.user_code_limiter.fail(limiter_key).await;
    }
    Ok(decided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_codes_use_the_alphabet_and_match_loosely() {
        let code = new_user_code();
        assert_eq!(code.len(), 8);
        assert!(code.bytes().all(|b| USER_CODE_ALPHABET.contains(&b)));
        let shown = format_user_code(&code);
        assert_eq!(normalise_user_code(&shown.to_lowercase()), code);
        assert_eq!(normalise_user_code(" wdjb-mjht "), "WDJBMJHT");
    }
}
