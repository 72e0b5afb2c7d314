//! Token management for their owners: list, create, revoke. Used by the API
//! and by the console alike.

use crate::identity::access::{self, Principal};
use crate::identity::credentials::{NewToken, create_token};
use crate::store::Error;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Tx};
use gpuplane_api::auth::{CreateToken, CreatedToken, Scope, TokenInfo};
use gpuplane_api::error::FieldError;
use gpuplane_api::project::Role;

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: String,
    name: String,
    scope: String,
    project: Option<String>,
    run_id: Option<String>,
    created_at: i64,
    expires_at: Option<i64>,
    last_used_at: Option<i64>,
    revoked_at: Option<i64>,
}

fn info(row: TokenRow) -> TokenInfo {
    TokenInfo {
        scope: row.scope.parse().unwrap_or(Scope::Read),
        id: row.id,
        name: row.name,
        project: row.project,
        run_id: row.run_id,
        created_at: rfc3339(row.created_at),
        expires_at: row.expires_at.map(rfc3339),
        last_used_at: row.last_used_at.map(rfc3339),
        revoked_at: row.revoked_at.map(rfc3339),
    }
}

const COLUMNS: &str = "id, name, scope, project, run_id, created_at, expires_at, last_used_at, revoked_at";

/// The user's own tokens, newest first (jobs' sdk tokens included, so they can be seen and revoked).
pub async fn list(db: &Db, user_id: &str) -> Result<Vec<TokenInfo>, Error> {
    let rows: Vec<TokenRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC, id DESC"
        ))
        .bind(user_id)
        .fetch_all(pool)
        .await
    })?;
    Ok(rows.into_iter().map(info).collect())
}

/// Creates a token for the user. `ceiling` is what the creator itself may
/// do (a session may create anything the user may; a read token cannot
/// mint a write token), and `expires_ceiling` when the creator itself
/// expires: a token never outlives the token that made it.
pub async fn create(
    db: &Db,
    principal: &Principal,
    ceiling: Scope,
    expires_ceiling: Option<i64>,
    request: &CreateToken,
) -> Result<CreatedToken, Error> {
    let user_id = principal
        .user_id
        .as_deref()
        .ok_or_else(|| Error::Forbidden("only users have tokens".into()))?;
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: String| {
        errors.push(FieldError {
            field: field.into(),
            message,
        })
    };
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        bad("name", "must be 1-100 characters".into());
    }
    if request.scope == Scope::Agent {
        bad(
            "scope",
            "agent tokens are made with `gpuplane-server admin create-agent-token`".into(),
        );
    } else if request.scope == Scope::Metrics {
        // What `/metrics` shows spans every project: a server admin's to give.
        if !(principal.is_server_admin() && ceiling == Scope::Write) {
            bad(
                "scope",
                "metrics tokens are made by a server admin with a write token".into(),
            );
        } else if request.project.is_some() {
            bad(
                "project",
                "a metrics token covers the whole server; it takes no project".into(),
            );
        }
    } else if !ceiling.grants(request.scope) && request.scope != Scope::Sdk {
        bad(
            "scope",
            format!("a {ceiling} token cannot create a {} token", request.scope),
        );
    }
    if request
        .expires_in_days
        .is_some_and(|days| !(1..=3650).contains(&days))
    {
        bad("expires_in_days", "must be between 1 and 3650".into());
    }
    // A token limited to a project makes only tokens limited to that project.
    let project = match (&principal.project, &request.project) {
        (Some(limit), Some(asked)) if limit != asked => {
            bad(
                "project",
                format!("this token is limited to project `{limit}`; its tokens are too"),
            );
            None
        }
        (Some(limit), _) => Some(limit.clone()),
        (None, asked) => asked.clone(),
    };
    if let Some(project) = &request.project {
        // An admin has a role in every project name, even one that does not exist.
        let exists = sql!(db, |pool| {
            sqlx::query_scalar::<_, i32>("SELECT 1 FROM projects WHERE name = $1")
                .bind(project)
                .fetch_optional(pool)
                .await
        })?
        .is_some();
        let allowed = exists
            && access::role_in(db, principal, project)
                .await?
                .is_some_and(|role| role >= Role::Viewer);
        if !allowed {
            bad(
                "project",
                format!("no project named `{project}` that you belong to"),
            );
        }
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let asked = request
        .expires_in_days
        .map(|days| now_ms() + days * 24 * 3600 * 1000);
    let expires_at = match (asked, expires_ceiling) {
        (Some(asked), Some(ceiling)) => Some(asked.min(ceiling)),
        (asked, ceiling) => asked.or(ceiling),
    };
    let (id, secret) = create_token(
        db,
        NewToken {
            user_id: Some(user_id),
            name,
            scope: request.scope,
            expires_at,
            project: project.as_deref(),
            node: None,
        },
    )
    .await?;
    let row: TokenRow = sql!(db, |pool| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM api_tokens WHERE id = $1"))
            .bind(&id)
            .fetch_one(pool)
            .await
    })?;
    Ok(CreatedToken {
        token: info(row),
        secret,
    })
}

/// Revokes one of the user's tokens (at once: the next request with it gets 401).
pub async fn revoke(db: &Db, user_id: &str, token_id: &str) -> Result<TokenInfo, Error> {
    sql!(db, |pool| {
        sqlx::query(
            "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2 AND user_id = $3",
        )
        .bind(now_ms())
        .bind(token_id)
        .bind(user_id)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    let row: Option<TokenRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM api_tokens WHERE id = $1 AND user_id = $2"
        ))
        .bind(token_id)
        .bind(user_id)
        .fetch_optional(pool)
        .await
    })?;
    row.map(info)
        .ok_or_else(|| Error::NotFound(format!("no token {token_id}")))
}

/// Binds an agent token to the node it speaks for: the node named at its
/// creation, else the first node it says hello as. A token speaks for one
/// node only, and a node has one token (until that token is revoked).
pub async fn bind_to_node(conn: &mut Tx, token_id: &str, name: &str) -> Result<(), Error> {
    // Read again inside the transaction: two first hellos of one token
    // with different names must not both bind it.
    let bound: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT node_name FROM api_tokens WHERE id = $1")
            .bind(token_id)
            .fetch_one(conn)
            .await
    })?;
    if let Some(bound) = &bound {
        if bound != name {
            return Err(Error::Forbidden(format!(
                "this agent token speaks only for node `{bound}`, not `{name}`: \
                 each node needs its own token (`gpuplane-server admin create-agent-token --node {name}`)"
            )));
        }
        return Ok(());
    }
    let holder: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar(
        "SELECT id FROM api_tokens WHERE node_name = $1 AND scope = 'agent' AND revoked_at IS NULL AND id <> $2",
    )
    .bind(name)
    .bind(token_id)
    .fetch_optional(conn)
    .await
    })?;
    if let Some(holder) = holder {
        return Err(Error::Forbidden(format!(
            "node `{name}` belongs to another agent token ({holder}); an agent token speaks only for its own node \
             (revoke the other one with `gpuplane-server admin revoke-agent-token {holder}` to move the node)"
        )));
    }
    sql!(conn, |conn| {
        sqlx::query("UPDATE api_tokens SET node_name = $1 WHERE id = $2 AND node_name IS NULL")
            .bind(name)
            .bind(token_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tracing::info!(token_id, node = name, "agent token bound to its node");
    Ok(())
}
