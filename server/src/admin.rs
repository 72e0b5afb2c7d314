//! `gpuplane-server admin ...`: bootstrap users and tokens on the data dir
//! without a running server. Each command prints only its secret on stdout.

use crate::audit::{self, Actor};
use crate::config::AdminCommand;
use crate::identity::credentials::{NewToken, create_token, hash_password};
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::time::{now_ms, rfc3339};
use anyhow::{Context, bail};
use gpuplane_api::audit::AuditAction;
use gpuplane_api::auth::Scope;
use sqlx::SqlitePool;
use std::io::Read;

/// The shortest password a local account accepts.
pub const MIN_PASSWORD_LEN: usize = 8;

/// Runs one admin command; returns what to print on stdout, if anything.
pub async fn run(db: &SqlitePool, command: AdminCommand) -> anyhow::Result<Option<String>> {
    match command {
        AdminCommand::CreateUser { name, admin, .. } => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("cannot read the password from stdin")?;
            let password = input.strip_suffix('\n').unwrap_or(&input);
            let password = password.strip_suffix('\r').unwrap_or(password);
            create_user(db, &name, password, admin).await?;
            let detail = if admin { "admin" } else { "" };
            audit::record(db, &Actor::server_cli(), AuditAction::UserCreate, &name, detail).await?;
            eprintln!("created user {name}{}", if admin { " (admin)" } else { "" });
            Ok(None)
        }
        AdminCommand::CreateToken {
            user,
            scope,
            name,
            expires_in,
        } => {
            if scope == Scope::Agent {
                bail!("agent tokens belong to no user: use `admin create-agent-token`");
            }
            let user_id: Option<String> = sqlx::query_scalar("SELECT id FROM users WHERE name = ?")
                .bind(&user)
                .fetch_optional(db)
                .await?;
            let user_id = user_id.with_context(|| format!("no user named `{user}`"))?;
            let expires_at = expires_in.map(|lifetime| now_ms() + lifetime.as_millis() as i64);
            let (_, secret) = create_token(
                db,
                NewToken {
                    user_id: Some(&user_id),
                    name: &name,
                    scope,
                    expires_at,
                    project: None,
                    node: None,
                },
            )
            .await?;
            Ok(Some(secret))
        }
        AdminCommand::DisableUser { name } => {
            disable_user(db, &name).await?;
            audit::record(db, &Actor::server_cli(), AuditAction::UserDisable, &name, "").await?;
            eprintln!("disabled user {name}: their sessions and tokens no longer work");
            Ok(None)
        }
        AdminCommand::CreateAgentToken { name, node } => {
            if let Some(node) = &node
                && !crate::api::valid_node_name(node)
            {
                bail!("node names are 1-128 characters of letters, digits, '.', '_' or '-'");
            }
            let new = NewToken {
                user_id: None,
                name: &name,
                scope: Scope::Agent,
                expires_at: None,
                project: None,
                node: node.as_deref(),
            };
            let (token_id, secret) = create_token(db, new).await?;
            let detail = match &node {
                Some(node) => format!("{name}, for node {node}"),
                None => format!("{name}, for the first node it says hello as"),
            };
            audit::record(
                db,
                &Actor::server_cli(),
                AuditAction::AgentTokenCreate,
                &token_id,
                &detail,
            )
            .await?;
            Ok(Some(secret))
        }
        AdminCommand::ListAgentTokens { json } => {
            let tokens = list_agent_tokens(db).await?;
            if json {
                return Ok(Some(serde_json::to_string_pretty(&tokens)?));
            }
            let mut table = format!(
                "{:<30} {:<16} {:<20} {:<25} {:<25} {}\n",
                "ID", "NAME", "NODE", "CREATED", "LAST USED", "REVOKED"
            );
            for token in tokens {
                let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".into());
                table.push_str(&format!(
                    "{:<30} {:<16} {:<20} {:<25} {:<25} {}\n",
                    token.id,
                    token.name,
                    token.node.unwrap_or_else(|| "(not yet bound)".into()),
                    token.created_at,
                    or_dash(token.last_used_at),
                    or_dash(token.revoked_at),
                ));
            }
            Ok(Some(table.trim_end().to_string()))
        }
        AdminCommand::RevokeAgentToken { token_id } => {
            let revoked = sqlx::query(
                "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ? AND scope = 'agent'",
            )
            .bind(now_ms())
            .bind(&token_id)
            .execute(db)
            .await?;
            if revoked.rows_affected() == 0 {
                bail!("no agent token {token_id} (see `gpuplane-server admin list-agent-tokens`)");
            }
            audit::record(
                db,
                &Actor::server_cli(),
                AuditAction::AgentTokenRevoke,
                &token_id,
                "",
            )
            .await?;
            eprintln!("revoked agent token {token_id}: its agent is refused from its next request on");
            Ok(None)
        }
    }
}

/// An agent token as `admin list-agent-tokens` shows it.
#[derive(Debug, serde::Serialize)]
pub struct AgentTokenInfo {
    pub id: String,
    pub name: String,
    /// The node it speaks for; `None` until its first hello.
    pub node: Option<String>,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// Every agent token, oldest first.
pub async fn list_agent_tokens(db: &SqlitePool) -> anyhow::Result<Vec<AgentTokenInfo>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: String,
        name: String,
        node_name: Option<String>,
        created_at: i64,
        last_used_at: Option<i64>,
        revoked_at: Option<i64>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, name, node_name, created_at, last_used_at, revoked_at
         FROM api_tokens WHERE scope = 'agent' ORDER BY created_at, id",
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| AgentTokenInfo {
            id: row.id,
            name: row.name,
            node: row.node_name,
            created_at: rfc3339(row.created_at),
            last_used_at: row.last_used_at.map(rfc3339),
            revoked_at: row.revoked_at.map(rfc3339),
        })
        .collect())
}

/// Disables a user; every check of a session or token sees it at once.
pub async fn disable_user(db: &SqlitePool, name: &str) -> anyhow::Result<()> {
    let updated = sqlx::query("UPDATE users SET disabled_at = coalesce(disabled_at, ?) WHERE name = ?")
        .bind(now_ms())
        .bind(name)
        .execute(db)
        .await?;
    if updated.rows_affected() == 0 {
        bail!("no user named `{name}`");
    }
    Ok(())
}

/// Creates a local user with an argon2-hashed password.
pub async fn create_user(db: &SqlitePool, name: &str, password: &str, admin: bool) -> anyhow::Result<String> {
    if !valid_user_name(name) {
        bail!("user names are 1-64 characters of letters, digits, '.', '_', '-' or '@'");
    }
    if password.chars().count() < MIN_PASSWORD_LEN {
        bail!("the password must have at least {MIN_PASSWORD_LEN} characters");
    }
    let id = new_id("usr");
    let result = sqlx::query(
        "INSERT INTO users (id, name, password_hash, is_admin, created_at) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(&id)
    .bind(name)
    .bind(hash_password(password)?)
    .bind(admin)
    .bind(now_ms())
    .execute(db)
    .await;
    match result.map_err(Error::from) {
        Ok(_) => {
            // Everyone may work in the default project.
            sqlx::query("INSERT INTO project_members (project, user_id, role, added_at) VALUES ('default', ?, 'editor', ?)")
                .bind(&id)
                .bind(now_ms())
                .execute(db)
                .await?;
            Ok(id)
        }
        Err(Error::Conflict(_)) => bail!("a user named `{name}` already exists"),
        Err(other) => Err(other.into()),
    }
}

fn valid_user_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}
