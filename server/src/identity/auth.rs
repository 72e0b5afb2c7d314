//! Who is calling: a bearer token looked up by its hash, or a signed-in
//! console user, as a [`Caller`]. The HTTP extractor that applies it to
//! each request is `api/extract.rs`.

use crate::identity::access::{Caller, SESSION_TOKEN_ID};
use crate::identity::credentials::hash_token;
use crate::store;
use crate::store::Db;
use crate::store::sql;
use crate::store::time::now_ms;
use gpuplane_api::auth::{Scope, SessionUser};

/// `last_used_at` is refreshed at most this often, to keep reads from writing.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// Why a presented token does not name a caller.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Unknown, revoked, expired, or its user is disabled (401).
    #[error("{0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Store(#[from] store::Error),
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: String,
    name: String,
    scope: String,
    expires_at: Option<i64>,
    revoked_at: Option<i64>,
    last_used_at: Option<i64>,
    user_id: Option<String>,
    user_name: Option<String>,
    is_admin: Option<bool>,
    disabled_at: Option<i64>,
    project: Option<String>,
    run_id: Option<String>,
    node_name: Option<String>,
}

/// Resolves a presented token, or says why it is not valid.
pub async fn authenticate(db: &Db, token: &str) -> Result<Caller, TokenError> {
    let row: Option<TokenRow> = sql!(db, |pool| { sqlx::query_as(
        "SELECT t.id, t.name, t.scope, t.expires_at, t.revoked_at, t.last_used_at, t.project, t.run_id, t.node_name,
                u.id AS user_id, u.name AS user_name, u.is_admin, u.disabled_at
         FROM api_tokens t LEFT JOIN users u ON u.id = t.user_id
         WHERE t.token_hash = $1",
    )
    .bind(hash_token(token))
    .fetch_optional(pool)
    .await })
    .map_err(store::Error::from)?;
    let row = row.ok_or(TokenError::Invalid("the token is not known"))?;
    let now = now_ms();
    if row.revoked_at.is_some() {
        return Err(TokenError::Invalid("the token was revoked"));
    }
    if row.expires_at.is_some_and(|expires| expires <= now) {
        return Err(TokenError::Invalid("the token has expired"));
    }
    if row.disabled_at.is_some() {
        return Err(TokenError::Invalid("the token's user is disabled"));
    }
    let scope: Scope = row
        .scope
        .parse()
        .map_err(|error: String| store::Error::Internal(anyhow::anyhow!(error)))?;
    if row
        .last_used_at
        .is_none_or(|used| now - used > LAST_USED_RESOLUTION_MS)
    {
        sql!(db, |pool| {
            sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
                .bind(now)
                .bind(&row.id)
                .execute(pool)
                .await
                .map(|_| ())
        })
        .map_err(store::Error::from)?;
    }
    Ok(Caller {
        token_id: row.id,
        token_name: row.name,
        scope,
        expires_at: row.expires_at,
        user_id: row.user_id,
        user_name: row.user_name,
        is_admin: row.is_admin.unwrap_or(false),
        project: row.project,
        run_id: row.run_id,
        node: row.node_name,
        address: None,
    })
}

/// A signed-in console user as a caller with `scope`.
pub fn session_caller(user: &SessionUser, token_name: &str, scope: Scope) -> Caller {
    Caller {
        token_id: SESSION_TOKEN_ID.into(),
        token_name: token_name.into(),
        scope,
        expires_at: None,
        user_id: Some(user.id.clone()),
        user_name: Some(user.name.clone()),
        is_admin: user.is_admin,
        project: None,
        run_id: None,
        node: None,
        address: None,
    }
}
