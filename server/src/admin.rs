//! `gpuplane-server admin ...`: bootstrap users and tokens on the data dir
//! without a running server. Each command prints only its secret on stdout.

use crate::audit::{self, Actor};
use crate::config::{AdminCommand, Settings};
use crate::identity::credentials::{NewToken, create_token};
use crate::identity::users;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::now_ms;
use anyhow::{Context, anyhow, bail};
use gpuplane_api::audit::AuditAction;
use gpuplane_api::auth::Scope;
use gpuplane_api::project::Role;
use gpuplane_api::user::{AgentToken, NewAgentToken, NewUser, UserChanges};
use std::io::Read;

/// `admin migrate-to-postgres`: copies the install in `from` into the
/// empty PostgreSQL database at `url`, naming each table as it is done (on
/// stderr), then prints what was copied.
pub async fn migrate_to_postgres(from: &std::path::Path, url: &str, json: bool) -> anyhow::Result<()> {
    let file = from.join(crate::store::DATABASE_FILE);
    if !file.is_file() {
        bail!(
            "{} holds no GPUPlane install ({} is missing)",
            from.display(),
            file.display()
        );
    }
    let db = crate::store::open(from).await?;
    eprintln!("copying {} into PostgreSQL…", file.display());
    let sqlite = db
        .as_sqlite()
        .context("the install to copy is not an SQLite one")?;
    let copied = crate::store::to_postgres::copy(sqlite, url, |table| {
        eprintln!("  {:<24} {:>12} rows", table.table, table.rows);
    })
    .await;
    db.close().await;
    let copied = copied?;
    if json {
        println!("{}", serde_json::to_string_pretty(&copied)?);
    } else {
        println!(
            "copied {} rows of {} tables in {:.1} s; every table's rows were counted on both sides",
            copied.rows,
            copied.tables.len(),
            copied.seconds
        );
    }
    Ok(())
}

/// Runs one admin command; returns what to print on stdout, if anything.
pub async fn run(db: &Db, command: AdminCommand, settings: &Settings) -> anyhow::Result<Option<String>> {
    match command {
        AdminCommand::CreateUser { name, admin, .. } => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("cannot read the password from stdin")?;
            let password = input.strip_suffix('\n').unwrap_or(&input);
            let password = password.strip_suffix('\r').unwrap_or(password);
            let new = NewUser {
                name: name.clone(),
                password: password.to_string(),
                admin,
            };
            let role = crate::config::default_project_role(settings)?;
            users::create(db, &new, role).await.map_err(plain)?;
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
            let user_id: Option<String> = sql!(db, |pool| {
                sqlx::query_scalar("SELECT id FROM users WHERE name = $1")
                    .bind(&user)
                    .fetch_optional(pool)
                    .await
            })?;
            let user_id = user_id.with_context(|| format!("no user named `{user}`"))?;
            let expires_at = expires_in.map(|lifetime| now_ms() + lifetime.as_millis() as i64);
            let (token_id, secret) = create_token(
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
            let lifetime = expires_in.map_or("no expiry".to_string(), |d| {
                format!("expires in {}", humantime::format_duration(d))
            });
            let detail = format!("{token_id} `{name}`, scope {scope}, {lifetime}");
            audit::record(db, &Actor::server_cli(), AuditAction::TokenCreate, &user, &detail).await?;
            Ok(Some(secret))
        }
        AdminCommand::DisableUser { name } => {
            let changes = UserChanges {
                disabled: Some(true),
                ..UserChanges::default()
            };
            users::change(db, &name, &changes, None).await.map_err(plain)?;
            audit::record(db, &Actor::server_cli(), AuditAction::UserDisable, &name, "").await?;
            eprintln!("disabled user {name}: their sessions and tokens no longer work");
            Ok(None)
        }
        AdminCommand::MigrateToPostgres { .. } => {
            bail!("migrate-to-postgres runs through `admin::migrate_to_postgres`")
        }
        AdminCommand::CreateAgentToken { name, node } => {
            let new = NewAgentToken {
                name: Some(name),
                node,
            };
            let created = users::create_agent_token(db, &new).await.map_err(plain)?;
            audit::record(
                db,
                &Actor::server_cli(),
                AuditAction::AgentTokenCreate,
                &created.token.id,
                &agent_token_detail(&created.token),
            )
            .await?;
            Ok(Some(created.secret))
        }
        AdminCommand::ListAgentTokens { json } => {
            let tokens = users::agent_tokens(db).await?;
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
            users::revoke_agent_token(db, &token_id)
                .await
                .map_err(|error| match error {
                    Error::NotFound(_) => {
                        anyhow!("no agent token {token_id} (see `gpuplane-server admin list-agent-tokens`)")
                    }
                    other => plain(other),
                })?;
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

/// What the audit log says about a new agent token.
pub fn agent_token_detail(token: &AgentToken) -> String {
    match &token.node {
        Some(node) => format!("{}, for node {node}", token.name),
        None => format!("{}, for the first node it says hello as", token.name),
    }
}

/// A store error as a message for the terminal, field names included.
fn plain(error: Error) -> anyhow::Error {
    match error {
        Error::Invalid(fields) => anyhow!(
            fields
                .iter()
                .map(|f| format!("{}: {}", f.field, f.message))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Error::Internal(cause) => cause,
        other => anyhow!(other.to_string()),
    }
}

/// Creates a local user, an editor of `default`; answers its id. Tests and
/// benchmarks bootstrap with it.
pub async fn create_user(db: &Db, name: &str, password: &str, admin: bool) -> anyhow::Result<String> {
    let new = NewUser {
        name: name.to_string(),
        password: password.to_string(),
        admin,
    };
    Ok(users::create(db, &new, Some(Role::Editor))
        .await
        .map_err(plain)?
        .id)
}

/// Disables a user; every check of a session or token sees it at once.
pub async fn disable_user(db: &Db, name: &str) -> anyhow::Result<()> {
    let changes = UserChanges {
        disabled: Some(true),
        ..UserChanges::default()
    };
    users::change(db, name, &changes, None).await.map_err(plain)?;
    Ok(())
}
