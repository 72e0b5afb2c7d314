//! User accounts and agent tokens as server admins manage them: the API,
//! the console (through the API) and `gpuplane-server admin` on the host all
//! call these functions.

use crate::identity::credentials::{NewToken, create_token, hash_password};
use crate::store::Db;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::auth::Scope;
use gpuplane_api::project::Role;
use gpuplane_api::user::{AgentToken, CreatedAgentToken, NewAgentToken, NewUser, User, UserChanges};

/// The shortest password a local account accepts.
pub const MIN_PASSWORD_LEN: usize = 8;

#[derive(sqlx::FromRow)]
struct UserRow {
    id: String,
    name: String,
    is_admin: bool,
    disabled_at: Option<i64>,
    local: bool,
    created_at: i64,
}

const USER_COLUMNS: &str = "id, name, is_admin, disabled_at, password_hash IS NOT NULL AS local, created_at";

fn user(row: UserRow) -> User {
    User {
        id: row.id,
        name: row.name,
        is_admin: row.is_admin,
        disabled_at: row.disabled_at.map(rfc3339),
        local: row.local,
        created_at: rfc3339(row.created_at),
    }
}

/// Every user, by name.
pub async fn list(db: &Db) -> Result<Vec<User>, Error> {
    let rows: Vec<UserRow> = sql!(db, |pool| {
        sqlx::query_as(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY name"))
            .fetch_all(pool)
            .await
    })?;
    Ok(rows.into_iter().map(user).collect())
}

/// The user named `name`.
pub async fn get(db: &Db, name: &str) -> Result<User, Error> {
    let row: Option<UserRow> = sql!(db, |pool| {
        sqlx::query_as(&format!("SELECT {USER_COLUMNS} FROM users WHERE name = $1"))
            .bind(name)
            .fetch_optional(pool)
            .await
    })?;
    row.map(user)
        .ok_or_else(|| Error::NotFound(format!("no user named `{name}`")))
}

/// Creates a local account with an argon2-hashed password, with `role` in
/// the `default` project (the `default_project_role` setting; None: none).
pub async fn create(db: &Db, new: &NewUser, role: Option<Role>) -> Result<User, Error> {
    if !valid_name(&new.name) {
        return Err(Error::field(
            "name",
            "must be 1-64 characters of letters, digits, '.', '_', '-' or '@'",
        ));
    }
    if new.password.chars().count() < MIN_PASSWORD_LEN {
        return Err(Error::field(
            "password",
            format!("must have at least {MIN_PASSWORD_LEN} characters"),
        ));
    }
    let id = new_id("usr");
    let password_hash = hash_password(&new.password)?;
    let mut tx = crate::store::write(db).await?;
    let inserted = sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO users (id, name, password_hash, is_admin, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&id)
        .bind(&new.name)
        .bind(password_hash)
        .bind(new.admin)
        .bind(now_ms())
        .execute(conn)
        .await
        .map(|_| ())
    });
    match inserted.map_err(Error::from) {
        Ok(_) => {}
        Err(Error::Conflict(_)) => {
            return Err(Error::Conflict(format!(
                "a user named `{}` already exists",
                new.name
            )));
        }
        Err(other) => return Err(other),
    }
    if let Some(role) = role {
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO project_members (project, user_id, role, added_at) VALUES ('default', $1, $2, $3)",
            )
            .bind(&id)
            .bind(role.as_str())
            .bind(now_ms())
            .execute(conn)
            .await
            .map(|_| ())
        })?;
    }
    tx.commit().await?;
    get(db, &new.name).await
}

/// Changes a user's admin flag or disables (enables) them. `acting` is the
/// admin's own user id: nobody disables themselves or drops their own admin
/// flag, so a cluster never locks out the person at the keyboard.
pub async fn change(db: &Db, name: &str, changes: &UserChanges, acting: Option<&str>) -> Result<User, Error> {
    let before = get(db, name).await?;
    let themselves = acting == Some(before.id.as_str());
    if themselves && changes.admin == Some(false) {
        return Err(Error::Conflict(
            "you cannot remove your own admin flag: ask another admin".into(),
        ));
    }
    if themselves && changes.disabled == Some(true) {
        return Err(Error::Conflict(
            "you cannot disable your own account: ask another admin".into(),
        ));
    }
    // One statement: both changes land, or neither.
    sql!(db, |pool| {
        sqlx::query(
        "UPDATE users SET is_admin = coalesce($1, is_admin),
                disabled_at = CASE $2 WHEN TRUE THEN coalesce(disabled_at, $3) WHEN FALSE THEN NULL ELSE disabled_at END
         WHERE id = $4",
    )
    .bind(changes.admin)
    .bind(changes.disabled)
    .bind(now_ms())
    .bind(&before.id)
    .execute(pool)
    .await.map(|_| ())
    })?;
    get(db, name).await
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

#[derive(sqlx::FromRow)]
struct AgentTokenRow {
    id: String,
    name: String,
    node_name: Option<String>,
    created_at: i64,
    last_used_at: Option<i64>,
    revoked_at: Option<i64>,
}

fn agent_token(row: AgentTokenRow) -> AgentToken {
    AgentToken {
        id: row.id,
        name: row.name,
        node: row.node_name,
        created_at: rfc3339(row.created_at),
        last_used_at: row.last_used_at.map(rfc3339),
        revoked_at: row.revoked_at.map(rfc3339),
    }
}

const AGENT_TOKEN_COLUMNS: &str = "id, name, node_name, created_at, last_used_at, revoked_at";

/// Every agent token, oldest first.
pub async fn agent_tokens(db: &Db) -> Result<Vec<AgentToken>, Error> {
    let rows: Vec<AgentTokenRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {AGENT_TOKEN_COLUMNS} FROM api_tokens WHERE scope = 'agent' ORDER BY created_at, id"
        ))
        .fetch_all(pool)
        .await
    })?;
    Ok(rows.into_iter().map(agent_token).collect())
}

async fn agent_token_by_id(db: &Db, token_id: &str) -> Result<AgentToken, Error> {
    let row: Option<AgentTokenRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {AGENT_TOKEN_COLUMNS} FROM api_tokens WHERE scope = 'agent' AND id = $1"
        ))
        .bind(token_id)
        .fetch_optional(pool)
        .await
    })?;
    row.map(agent_token)
        .ok_or_else(|| Error::NotFound(format!("no agent token {token_id}")))
}

/// A new agent token, bound to `node` now or to the first node it says hello as.
pub async fn create_agent_token(db: &Db, new: &NewAgentToken) -> Result<CreatedAgentToken, Error> {
    let name = new.name.as_deref().map(str::trim).unwrap_or("agent");
    if name.is_empty() || name.chars().count() > 100 {
        return Err(Error::field("name", "must be 1-100 characters"));
    }
    if let Some(node) = &new.node
        && !gpuplane_api::node::valid_name(node)
    {
        return Err(Error::field(
            "node",
            "must be 1-128 characters of letters, digits, '.', '_' or '-'",
        ));
    }
    let (id, secret) = create_token(
        db,
        NewToken {
            user_id: None,
            name,
            scope: Scope::Agent,
            expires_at: None,
            project: None,
            node: new.node.as_deref(),
        },
    )
    .await?;
    Ok(CreatedAgentToken {
        token: agent_token_by_id(db, &id).await?,
        secret,
    })
}

/// Revokes an agent token: its agent is refused from its next request on.
pub async fn revoke_agent_token(db: &Db, token_id: &str) -> Result<AgentToken, Error> {
    let revoked = sql!(db, |pool| {
        sqlx::query(
            "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2 AND scope = 'agent'",
        )
        .bind(now_ms())
        .bind(token_id)
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
    })?;
    if revoked == 0 {
        return Err(Error::NotFound(format!("no agent token {token_id}")));
    }
    agent_token_by_id(db, token_id).await
}

/// A user who may sign in: not disabled. Their id, name and whether they
/// are a server admin.
pub async fn active(db: &Db, user_id: &str) -> Result<Option<(String, String, bool)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as("SELECT id, name, is_admin FROM users WHERE id = $1 AND disabled_at IS NULL")
            .bind(user_id)
            .fetch_optional(pool)
            .await
    })?)
}

/// The id and password hash (none for SSO accounts) of the user named
/// `name`, unless disabled.
pub async fn password_of(db: &Db, name: &str) -> Result<Option<(String, Option<String>)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as("SELECT id, password_hash FROM users WHERE name = $1 AND disabled_at IS NULL")
            .bind(name)
            .fetch_optional(pool)
            .await
    })?)
}

/// The user an identity provider's subject (`ISSUER|SUB`) signed in as
/// before: their id, and when they were disabled, if they were.
pub async fn by_oidc_subject(db: &Db, subject: &str) -> Result<Option<(String, Option<i64>)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as("SELECT id, disabled_at FROM users WHERE oidc_subject = $1")
            .bind(subject)
            .fetch_optional(pool)
            .await
    })?)
}

/// A user an identity provider vouches for, as `id` and `name`, with
/// `role` in the default project: both or neither. `false` when the name
/// is taken (the caller tries another).
pub async fn create_from_sso(
    db: &Db,
    id: &str,
    name: &str,
    email: Option<&str>,
    subject: &str,
    role: Option<Role>,
) -> Result<bool, Error> {
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    let inserted = sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO users (id, name, email, oidc_subject, is_admin, created_at) VALUES ($1, $2, $3, $4, FALSE, $5)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(id)
        .bind(name)
        .bind(email)
        .bind(subject)
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    if inserted != 1 {
        return Ok(false);
    }
    if let Some(role) = role {
        sql!(tx, |conn| {
            sqlx::query("INSERT INTO project_members (project, user_id, role, added_at) VALUES ('default', $1, $2, $3)")
                .bind(id)
                .bind(role.as_str())
                .bind(now)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Every user's name by id.
pub async fn names_by_id(db: &Db) -> Result<std::collections::HashMap<String, String>, Error> {
    let rows: Vec<(String, String)> = sql!(db, |pool| {
        sqlx::query_as("SELECT id, name FROM users").fetch_all(pool).await
    })?;
    Ok(rows.into_iter().collect())
}
