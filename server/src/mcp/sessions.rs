//! MCP sessions in the database, so that any replica serves a session
//! another one began: rmcp keeps each session's worker in memory, and a
//! request naming a session this process does not have is restored from
//! here (the client's `initialize` parameters) instead of failing with 404.
//! Only a hash of each session id is stored. A session id grants nothing
//! by itself: every request still needs its bearer token.

use crate::identity::credentials::hash_token;
use crate::store::Db;
use crate::store::sql;
use crate::store::time::now_ms;
use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};

/// How long a session that was never closed is kept (ms): a week.
pub const KEEP_MS: i64 = 7 * 24 * 3600 * 1000;

pub struct McpSessions(pub Db);

#[async_trait::async_trait]
impl SessionStore for McpSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let state: Option<String> = sql!(&self.0, |pool| {
            sqlx::query_scalar("SELECT state FROM mcp_sessions WHERE id_hash = $1 AND created_at > $2")
                .bind(hash_token(session_id))
                .bind(now_ms() - KEEP_MS)
                .fetch_optional(pool)
                .await
        })?;
        Ok(state.map(|state| serde_json::from_str(&state)).transpose()?)
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let state = serde_json::to_string(state)?;
        let mut tx = crate::store::write(&self.0).await?;
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO mcp_sessions (id_hash, state, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT (id_hash) DO UPDATE SET state = excluded.state",
            )
            .bind(hash_token(session_id))
            .bind(&state)
            .bind(now_ms())
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        sql!(&self.0, |pool| {
            sqlx::query("DELETE FROM mcp_sessions WHERE id_hash = $1")
                .bind(hash_token(session_id))
                .execute(pool)
                .await
                .map(|_| ())
        })?;
        Ok(())
    }
}

/// Deletes the sessions older than [`KEEP_MS`] (run from time to time).
pub async fn delete_expired(db: &Db) -> Result<u64, sqlx::Error> {
    sql!(db, |pool| {
        sqlx::query("DELETE FROM mcp_sessions WHERE created_at <= $1")
            .bind(now_ms() - KEEP_MS)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })
}
