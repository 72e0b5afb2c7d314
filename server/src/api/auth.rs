//! `GET /api/v1/auth/whoami`.

use crate::api::extract::{AnyScope, Authed};
use crate::store::time::rfc3339;
use axum::Json;
use gpuplane_api::auth::WhoAmI;
use gpuplane_api::error::ErrorBody;

/// Who the presented token belongs to and what it may do.
#[utoipa::path(get, path = "/auth/whoami", tag = "auth",
    security(("bearer" = [])),
    responses((status = 200, body = WhoAmI), (status = 401, body = ErrorBody)))]
pub async fn whoami(auth: Authed<AnyScope>) -> Json<WhoAmI> {
    let caller = auth.caller;
    let is_admin = caller.is_server_admin();
    Json(WhoAmI {
        user: caller.user_name,
        is_admin,
        token_id: caller.token_id,
        token_name: caller.token_name,
        scope: caller.scope,
        expires_at: caller.expires_at.map(rfc3339),
    })
}
