//! The database: SQLite in the data directory by default (WAL, a busy
//! timeout, foreign keys), or PostgreSQL; migrated before anything else
//! touches it. Every query goes through [`sql!`], which compiles it once
//! for each dialect's native driver.

pub mod group;
pub mod ids;
pub mod time;
pub mod to_postgres;

use anyhow::Context;
use gpuplane_api::error::FieldError;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use std::path::Path;
use std::time::Duration;

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "gpuplane.db";

/// Which SQL the database speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The text for this dialect, where the two differ.
    pub fn pick<'a>(self, sqlite: &'a str, postgres: &'a str) -> &'a str {
        match self {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        }
    }

    /// A FROM item with the elements of the JSON array in `array` (an SQL
    /// expression holding JSON text) as rows of one column, `value`. On
    /// PostgreSQL every value is text: compare numbers through
    /// `CAST(value AS BIGINT)`, which both dialects read.
    pub fn json_values(self, array: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_each({array})"),
            Dialect::Postgres => format!("jsonb_array_elements_text(CAST({array} AS JSONB)) AS value"),
        }
    }

    /// Field `field` of the JSON object in text column `column`, as text
    /// (a string unquoted, an array or object as JSON); cast it for a number.
    pub fn json_field(self, column: &str, field: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{field}')"),
            Dialect::Postgres => format!("(CAST({column} AS JSONB) ->> '{field}')"),
        }
    }

    /// Text column `column` read as JSON, to nest in a JSON value built by the query.
    pub fn json_of(self, column: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json({column})"),
            Dialect::Postgres => format!("CAST({column} AS JSON)"),
        }
    }

    /// JSON object `patch` merged into JSON object `base` (RFC 7396: a key
    /// with a null value in `patch` is removed), as text; both are text.
    pub fn json_merge(self, base: &str, patch: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_patch({base}, {patch})"),
            Dialect::Postgres => {
                format!("CAST(jsonb_strip_nulls(CAST({base} AS JSONB) || CAST({patch} AS JSONB)) AS TEXT)")
            }
        }
    }

    /// The larger of two values (SQL expressions; NULL when either is on SQLite).
    pub fn greatest(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Sqlite => format!("max({a}, {b})"),
            Dialect::Postgres => format!("GREATEST({a}, {b})"),
        }
    }

    /// The smaller of two values, as [`Dialect::greatest`].
    pub fn least(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Sqlite => format!("min({a}, {b})"),
            Dialect::Postgres => format!("LEAST({a}, {b})"),
        }
    }

    /// A FROM item with the elements of the JSON array in `array` as rows
    /// named `alias`, each element (itself JSON) in `alias.value`: read a
    /// field with `alias.value ->> 0`, which is text on PostgreSQL (cast
    /// it for a number column).
    pub fn json_elements(self, array: &str, alias: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_each({array}) AS {alias}"),
            Dialect::Postgres => format!("jsonb_array_elements(CAST({array} AS JSONB)) AS {alias}(value)"),
        }
    }

    /// An aggregate: the values of `expr` over the group as a JSON array
    /// in text (`[]` for none).
    pub fn json_array_agg(self, expr: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_group_array({expr})"),
            Dialect::Postgres => format!("CAST(coalesce(json_agg({expr}), '[]') AS TEXT)"),
        }
    }

    /// The length of the JSON array in text column `column`.
    pub fn json_length(self, column: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_array_length({column})"),
            Dialect::Postgres => format!("json_array_length(CAST({column} AS JSON))"),
        }
    }

    /// Whether text `haystack` holds text `needle` (SQL expressions), as a condition.
    pub fn contains(self, haystack: &str, needle: &str) -> String {
        match self {
            Dialect::Sqlite => format!("instr({haystack}, {needle}) > 0"),
            Dialect::Postgres => format!("strpos({haystack}, {needle}) > 0"),
        }
    }
}

/// The pool of the server's database, in its own driver: SQLite keeps its
/// connection hooks and speed, PostgreSQL its own types. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Either dialect's native pool or connection; what [`sql!`] matches on.
pub enum Native<S, P> {
    Sqlite(S),
    Postgres(P),
}

/// Runs `$body` with `$native` bound to the native pool (for a [`Db`]) or
/// connection (for a [`Tx`]) of `$on`'s dialect. The body is compiled once
/// per dialect, so one query text serves both where they agree; where they
/// differ, [`Dialect::pick`] chooses the text.
///
/// ```ignore
/// let name: Option<String> = sql!(db, |pool| {
///     sqlx::query_scalar("SELECT name FROM projects WHERE name = $1").bind(name).fetch_optional(pool).await
/// })?;
/// ```
macro_rules! sql {
    ($on:expr, |$native:ident| $body:expr) => {
        match $on.native() {
            $crate::store::Native::Sqlite($native) => $body,
            $crate::store::Native::Postgres($native) => $body,
        }
    };
}
pub(crate) use sql;

impl Db {
    pub fn native(&self) -> Native<&SqlitePool, &PgPool> {
        match self {
            Db::Sqlite(pool) => Native::Sqlite(pool),
            Db::Postgres(pool) => Native::Postgres(pool),
        }
    }

    /// One round trip to the database.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sql!(self, |pool| sqlx::query("SELECT 1")
            .execute(pool)
            .await
            .map(|_| ()))
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite pool, for what only SQLite has (the file, its tests).
    pub fn as_sqlite(&self) -> Option<&SqlitePool> {
        match self {
            Db::Sqlite(pool) => Some(pool),
            Db::Postgres(_) => None,
        }
    }

    /// Closes every connection; queries after this fail.
    pub async fn close(&self) {
        match self {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }

    pub fn is_closed(&self) -> bool {
        match self {
            Db::Sqlite(pool) => pool.is_closed(),
            Db::Postgres(pool) => pool.is_closed(),
        }
    }
}

/// A `database_url` must name PostgreSQL: SQLite needs no URL (it is the
/// file in the data dir).
pub fn check_database_url(url: &str) -> anyhow::Result<()> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(())
    } else {
        anyhow::bail!(
            "database_url must start with postgres:// (leave it unset for the SQLite file in the data dir)"
        )
    }
}

/// The configured store: PostgreSQL at `database_url` when there is one,
/// else the SQLite file in `data_dir`.
pub async fn open_configured(data_dir: &Path, database_url: Option<&str>) -> anyhow::Result<Db> {
    match database_url {
        Some(url) => {
            check_database_url(url)?;
            open_postgres(url).await
        }
        None => open(data_dir).await,
    }
}

/// Opens (creating if needed) and migrates the SQLite database in `data_dir`.
pub async fn open(data_dir: &Path) -> anyhow::Result<Db> {
    let path = data_dir.join(DATABASE_FILE);
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a transaction that returned is on disk, even across power loss.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10))
        // What a delete frees is zeroed, so a deleted run's text does not
        // linger in free pages (`runs::lifecycle::forget_deleted_pages`).
        .pragma("secure_delete", "on")
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
    Ok(Db::Sqlite(pool))
}

/// Connects to the PostgreSQL database at `url` and migrates it.
pub async fn open_postgres(url: &str) -> anyhow::Result<Db> {
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .context("cannot connect to the PostgreSQL database")?;
    sqlx::migrate!("../migrations/postgres")
        .run(&pool)
        .await
        .context("cannot migrate the PostgreSQL database")?;
    Ok(Db::Postgres(pool))
}

/// Whether a connection coming back to the pool may be reused: not if it is
/// still inside a transaction. sqlx leaves one open when the future that
/// begins it is cancelled after the BEGIN ran (a request whose client hung
/// up), and that transaction would hold SQLite's write lock for good.
/// Closing the connection rolls it back. A transaction dropped the normal
/// way has its rollback queued; the ping lets it run before the check.
async fn no_transaction_left_open(conn: &mut SqliteConnection) -> Result<bool, sqlx::Error> {
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

/// A transaction of either dialect: a write transaction from [`write`] or a
/// read snapshot from [`read`]. Dropped without [`Tx::commit`], it rolls
/// back.
pub enum Tx {
    Sqlite {
        tx: sqlx::Transaction<'static, sqlx::Sqlite>,
        /// A writer's place in this process's queue (see [`write`]).
        _turn: Option<tokio::sync::OwnedSemaphorePermit>,
    },
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Tx {
    pub fn native(&mut self) -> Native<&mut SqliteConnection, &mut PgConnection> {
        match self {
            Tx::Sqlite { tx, .. } => Native::Sqlite(&mut **tx),
            Tx::Postgres(tx) => Native::Postgres(&mut **tx),
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Tx::Sqlite { .. } => Dialect::Sqlite,
            Tx::Postgres(_) => Dialect::Postgres,
        }
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite { tx, .. } => tx.commit().await,
            Tx::Postgres(tx) => tx.commit().await,
        }
    }
}

/// The key of the PostgreSQL advisory lock that every write transaction
/// holds until it ends ("GPUP" in ASCII).
const WRITE_LOCK: i64 = 0x4750_5550;

/// Begins a write transaction when it is this writer's turn. Writers take
/// turns, one at a time, on both dialects, so the code above reads and
/// then writes without racing another writer (as SQLite's one write lock
/// always made it).
///
/// SQLite (`BEGIN IMMEDIATE`): one connection may write to a database file
/// at a time, and a connection that finds the lock taken polls for it,
/// sleeping longer each time (up to 100 ms): under load a writer slept on
/// while the lock sat free, and writers overtook one another. So this
/// process's writers queue here, in order, and begin only when the lock is
/// theirs. PostgreSQL: the transaction takes one advisory lock, shared by
/// every server on the database, which it holds until commit or rollback.
pub async fn write(db: &Db) -> Result<Tx, sqlx::Error> {
    match db {
        Db::Sqlite(pool) => {
            let turn = writers_of(pool)
                .acquire_owned()
                .await
                .expect("the writers' queue is never closed");
            let tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            Ok(Tx::Sqlite {
                tx,
                _turn: Some(turn),
            })
        }
        Db::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(WRITE_LOCK)
                .execute(&mut *tx)
                .await?;
            Ok(Tx::Postgres(tx))
        }
    }
}

/// Begins a read-only transaction: its queries all see one snapshot.
pub async fn read(db: &Db) -> Result<Tx, sqlx::Error> {
    match db {
        Db::Sqlite(pool) => Ok(Tx::Sqlite {
            tx: pool.begin().await?,
            _turn: None,
        }),
        Db::Postgres(pool) => Ok(Tx::Postgres(
            pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await?,
        )),
    }
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
        let db = open(dir.path()).await.unwrap();
        let pool = db.as_sqlite().unwrap();
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
        let db = open(dir.path()).await.unwrap();
        let holder = write(&db).await.unwrap();
        // Waiting behind the holder, then cancelled.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), write(&db))
                .await
                .is_err()
        );
        drop(holder);
        for round in 0..200u64 {
            let _ = tokio::time::timeout(Duration::from_micros(round % 40 * 5), write(&db)).await;
            let started = std::time::Instant::now();
            let mut tx = tokio::time::timeout(Duration::from_secs(5), write(&db))
                .await
                .unwrap_or_else(|_| panic!("round {round}: the turn was never given up"))
                .unwrap();
            sql!(tx, |conn| sqlx::query(
                "CREATE TABLE IF NOT EXISTS turns (n INTEGER)"
            )
            .execute(conn)
            .await
            .map(|_| ())
            .unwrap());
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
