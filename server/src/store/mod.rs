//! The one SQLite pool: opened at start-up with WAL, a busy timeout and
//! foreign keys, migrated before anything else touches it.

pub mod group;
pub mod ids;
pub mod time;
pub mod to_postgres;

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
        // sqlx pings a connection before lending it, by default, to find
        // network connections that died. A SQLite connection is a file and
        // a thread of this process: the ping is a second round trip to that
        // thread for every query, and half of the server's work at rest.
        .test_before_acquire(false)
        .after_release(|conn, _| Box::pin(async move { no_transaction_left_open(conn).await }))
        .connect_with(options)
        .await
        .with_context(|| format!("cannot open database {}", path.display()))?;
    sqlx::migrate!("../migrations/sqlite")
        .run(&pool)
        .await
        .with_context(|| format!("cannot migrate database {}", path.display()))?;
    Ok(pool)
}

/// Whether a connection coming back to the pool may be reused: not if it is
/// still inside a transaction. sqlx leaves one open when the future that
/// begins it is cancelled after the BEGIN ran (a request whose client hung
/// up), and that transaction would hold SQLite's write lock for good.
/// Closing the connection rolls it back. A transaction dropped the normal
/// way has its rollback queued; the ping lets it run before the check.
async fn no_transaction_left_open(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!("a connection came back inside a transaction (its request was cancelled); closing it");
        return Ok(false);
    }
    Ok(true)
}

/// A write transaction (`BEGIN IMMEDIATE`), begun in its turn. SQLite lets
/// one connection write to a database file at a time, and a connection that
/// finds the lock taken polls for it, sleeping longer each time (up to
/// 100 ms): under load a writer slept on while the lock sat free, and
/// writers overtook one another. So this process's writers queue here, in
/// order, and begin only when the lock is theirs. It derefs to the
/// connection, like sqlx's transaction; dropped without
/// [`WriteTx::commit`], it rolls back.
pub struct WriteTx {
    tx: sqlx::Transaction<'static, sqlx::Sqlite>,
    _turn: tokio::sync::OwnedSemaphorePermit,
}

impl WriteTx {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

impl std::ops::Deref for WriteTx {
    type Target = sqlx::SqliteConnection;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// Begins a write transaction on `db` when it is this writer's turn (see [`WriteTx`]).
pub async fn write(db: &SqlitePool) -> Result<WriteTx, sqlx::Error> {
    let turn = writers_of(db)
        .acquire_owned()
        .await
        .expect("the writers' queue is never closed");
    let tx = db.begin_with("BEGIN IMMEDIATE").await?;
    Ok(WriteTx { tx, _turn: turn })
}

/// The queue of writers to `db`'s file in this process: one per file, as
/// SQLite's write lock is (tests run several servers in one process).
fn writers_of(db: &SqlitePool) -> std::sync::Arc<tokio::sync::Semaphore> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    static QUEUES: Mutex<Option<HashMap<std::path::PathBuf, Arc<tokio::sync::Semaphore>>>> = Mutex::new(None);
    let file = db.connect_options().get_filename().to_path_buf();
    let mut queues = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
    queues
        .get_or_insert_default()
        .entry(file)
        .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1)))
        .clone()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request cancelled while its transaction begins (a client that
    /// hangs up) must not leave that transaction open on a pooled
    /// connection: it would hold SQLite's write lock and every later write
    /// would wait out the busy timeout and fail.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_transaction_cancelled_while_it_begins_never_holds_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let pool = open(dir.path()).await.unwrap();
        for round in 0..1000u64 {
            let begin = pool.begin_with("BEGIN IMMEDIATE");
            // Cancelled at a different point each round, sometimes after the BEGIN ran.
            let _ = tokio::time::timeout(Duration::from_micros(round % 40 * 5), begin).await;
            let mut other = pool.acquire().await.unwrap();
            let started = std::time::Instant::now();
            sqlx::query("BEGIN IMMEDIATE; ROLLBACK")
                .execute(&mut *other)
                .await
                .unwrap_or_else(|error| panic!("round {round}: the write lock is held: {error}"));
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "round {round}: waited for the write lock"
            );
        }
    }

    /// A writer cancelled while it waits for its turn or while it begins
    /// gives the turn up: the next writer begins at once.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_cancelled_writer_gives_its_turn_up() {
        let dir = tempfile::tempdir().unwrap();
        let pool = open(dir.path()).await.unwrap();
        let holder = write(&pool).await.unwrap();
        // Waiting behind the holder, then cancelled.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), write(&pool))
                .await
                .is_err()
        );
        drop(holder);
        for round in 0..200u64 {
            let _ = tokio::time::timeout(Duration::from_micros(round % 40 * 5), write(&pool)).await;
            let started = std::time::Instant::now();
            let mut tx = tokio::time::timeout(Duration::from_secs(5), write(&pool))
                .await
                .unwrap_or_else(|_| panic!("round {round}: the turn was never given up"))
                .unwrap();
            sqlx::query("CREATE TABLE IF NOT EXISTS turns (n INTEGER)")
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "round {round}: waited for the turn"
            );
        }
    }

    /// The migration that rebuilds `metric_chunks` (0023) keeps every chunk
    /// stored before it, bit for bit.
    #[tokio::test(flavor = "multi_thread")]
    async fn metric_chunks_survive_the_summary_levels_migration() {
        let dir = tempfile::tempdir().unwrap();
        let pool = SqlitePool::connect(&format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("old.db").display()
        ))
        .await
        .unwrap();
        let mut before = sqlx::migrate!("../migrations/sqlite");
        before.migrations = before
            .migrations
            .iter()
            .filter(|migration| migration.version < 23)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        before.run(&pool).await.unwrap();
        let summary: Vec<u8> = (0..72).collect();
        let points: Vec<u8> = (0..48).map(|b| b * 3).collect();
        sqlx::query(
            "INSERT INTO metric_chunks (id, run_id, key, step_min, step_max, time_min, time_max, count, summary, points)
             VALUES (7, 'run_1', 'train/loss', 1, 2, 10.5, 11.5, 2, $1, $2)",
        )
        .bind(&summary)
        .bind(&points)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::migrate!("../migrations/sqlite").run(&pool).await.unwrap();
        let blobs: (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) = sqlx::query_as(
            "SELECT summary_coarse, summary_mid, summary, points FROM metric_chunks WHERE id = 7",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(blobs, (vec![], vec![], summary, points));
        let described: String = sqlx::query_scalar(
            "SELECT json_array(run_id, key, step_min, step_max, time_min, time_max, count) FROM metric_chunks",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(described, r#"["run_1","train/loss",1,2,10.5,11.5,2]"#);
    }
}
