//! The one SQLite pool: opened at start-up with WAL, a busy timeout and
//! foreign keys, migrated before anything else touches it.

pub mod ids;
pub mod time;

use anyhow::Context;
use gpuplane_api::error::FieldError;
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

/// What domain and storage code answers when it cannot do what was asked.
/// It names no HTTP status: the API turns each kind into one, in one place
/// (`impl From<store::Error> for ApiError`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The thing does not exist, or the caller may not know that it does.
    #[error("{0}")]
    NotFound(String),
    /// It exists, but its state does not allow this (or a unique name is taken).
    #[error("{0}")]
    Conflict(String),
    /// The request's fields are wrong, each named.
    #[error("invalid fields")]
    Invalid(Vec<FieldError>),
    /// The caller's role or token does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// Too many at once (streams, attempts); try again later.
    #[error("{0}")]
    Limited(String),
    /// A broken invariant or a storage failure: the cause is logged, not shown.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    /// Invalid input in one field.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid(vec![FieldError {
            field: field.into(),
            message: message.into(),
        }])
    }
}

impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::RowNotFound => Error::NotFound("not found".into()),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Error::Conflict(db.message().to_string())
            }
            _ => Error::Internal(error.into()),
        }
    }
}
