//! The one SQLite pool: opened at start-up with WAL, a busy timeout and
//! foreign keys, migrated before anything else touches it.

pub mod ids;
pub mod time;

use anyhow::Context;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::path::Path;
use std::time::Duration;

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "gpuplane.db";

/// Opens (creating if needed) and migrates the database in `data_dir`.
pub async fn open(data_dir: &Path) -> anyhow::Result<SqlitePool> {
    let path = data_dir.join(DATABASE_FILE);
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a transaction that returned is on disk, even across power loss.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot open database {}", path.display()))?;
    sqlx::migrate!("../migrations")
        .run(&pool)
        .await
        .with_context(|| format!("cannot migrate database {}", path.display()))?;
    Ok(pool)
}

/// Storage failures the API turns into status codes.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Other(sqlx::Error),
}

impl From<sqlx::Error> for DbError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::RowNotFound => DbError::NotFound,
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                DbError::Conflict(db.message().to_string())
            }
            _ => DbError::Other(error),
        }
    }
}
