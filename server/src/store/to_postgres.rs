//! `gpuplane-server admin migrate-to-postgres`: copies an SQLite install,
//! every row of every table, into an empty PostgreSQL database that gets
//! the PostgreSQL schema (`migrations/postgres/`) first.
//!
//! The reads are one SQLite read transaction, so a server still writing
//! meanwhile does not tear the copy: it is the install as it was when the
//! copy began. The writes are one PostgreSQL transaction: a copy that fails
//! leaves the target empty. Before it commits, each table's rows are
//! counted on both sides. Values follow the target's column types (the
//! two schemas are compared by `schema::both_dialects_describe_the_same_tables`):
//! SQLite's 0/1 flags become BOOLEAN, a JSONB column is filled from its
//! row's `json` column (the value as JSON, which SQLite's ANY cannot tell
//! apart for booleans), the session store's RFC 3339 times become
//! TIMESTAMPTZ, and identity columns keep their values, their sequences
//! moved past the largest.

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Postgres, QueryBuilder, Row, SqlitePool};
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

/// Parameters PostgreSQL takes in one statement, and bytes per insert.
const MAX_PARAMETERS: usize = 60_000;
const MAX_BATCH_BYTES: usize = 8 << 20;

/// How many rows of each table were copied, in copy order.
#[derive(Debug, serde::Serialize)]
pub struct Copied {
    pub tables: Vec<CopiedTable>,
    pub rows: u64,
    pub seconds: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct CopiedTable {
    pub table: String,
    pub rows: u64,
}

/// A target column: its name, type, and whether it is an identity column.
struct Column {
    name: String,
    kind: Kind,
    identity: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Integer,
    Boolean,
    Real,
    Bytes,
    Text,
    Json,
    Timestamp,
}

/// One value on its way to PostgreSQL.
enum Value {
    Integer(Option<i64>),
    Boolean(Option<bool>),
    Real(Option<f64>),
    Bytes(Option<Vec<u8>>),
    Text(Option<String>),
    Json(Option<String>),
    /// RFC 3339 text (SQLite keeps the session store's times so).
    Timestamp(Option<String>),
}

impl Value {
    fn size(&self) -> usize {
        match self {
            Value::Bytes(Some(bytes)) => bytes.len(),
            Value::Text(Some(text)) | Value::Json(Some(text)) | Value::Timestamp(Some(text)) => text.len(),
            _ => 8,
        }
    }
}

/// Copies every table of `sqlite` into the empty database at `url`,
/// telling `progress` about each table as it is done.
pub async fn copy(sqlite: &SqlitePool, url: &str, progress: impl Fn(&CopiedTable)) -> anyhow::Result<Copied> {
    let started = std::time::Instant::now();
    let options = PgConnectOptions::from_str(url).context("the PostgreSQL URL is not valid")?;
    let target = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .context("cannot connect to PostgreSQL")?;
    sqlx::migrate!("../migrations/postgres")
        .run(&target)
        .await
        .context("cannot create the PostgreSQL schema")?;
    let mut source = sqlite.acquire().await?;
    // One snapshot for every read: a server writing meanwhile cannot tear it.
    let mut snapshot = source.begin().await?;
    let tables = copy_order(&mut snapshot).await?;
    let mut pg = target.begin().await?;
    for table in &tables {
        // A new schema's own first rows (migrations/postgres/0003_first_rows.sql) do not count.
        let first_rows = match table.as_str() {
            "projects" => "WHERE NOT (name = 'default' AND created_at = 0)",
            "alert_cursor" => "WHERE seq <> 0",
            _ => "",
        };
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table} {first_rows}"))
            .fetch_one(&mut *pg)
            .await
            .with_context(|| {
                format!("PostgreSQL has no table {table}: is the schema older than this server?")
            })?;
        if rows > 0 {
            bail!("the target database is not empty ({table} holds {rows} rows): give an empty database");
        }
    }
    // Empty but for those: the copy brings the install's own.
    sqlx::query("DELETE FROM alert_cursor").execute(&mut *pg).await?;
    sqlx::query("DELETE FROM projects").execute(&mut *pg).await?;
    let mut copied = Copied {
        tables: Vec::new(),
        rows: 0,
        seconds: 0.0,
    };
    for table in &tables {
        let columns = target_columns(&mut pg, table).await?;
        let rows = copy_table(&mut snapshot, &mut pg, table, &columns).await?;
        let counted: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&mut *pg)
            .await?;
        if counted as u64 != rows {
            bail!("{table}: {rows} rows read from SQLite but {counted} in PostgreSQL; nothing was kept");
        }
        for column in columns.iter().filter(|c| c.identity) {
            // The next row made in PostgreSQL gets an id past every copied one.
            sqlx::query(&format!(
                "SELECT setval(pg_get_serial_sequence('{table}', '{name}'), coalesce((SELECT max({name}) FROM {table}), 0) + 1, false)",
                name = column.name
            ))
            .execute(&mut *pg)
            .await?;
        }
        let done = CopiedTable {
            table: table.clone(),
            rows,
        };
        progress(&done);
        copied.rows += rows;
        copied.tables.push(done);
    }
    pg.commit()
        .await
        .context("cannot commit the copy in PostgreSQL")?;
    snapshot.commit().await?;
    target.close().await;
    copied.seconds = started.elapsed().as_secs_f64();
    Ok(copied)
}

/// SQLite's tables (not sqlx's bookkeeping), each after the tables its
/// foreign keys point at.
async fn copy_order(sqlite: &mut sqlx::SqliteConnection) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
           AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%' ORDER BY name",
    )
    .fetch_all(&mut *sqlite)
    .await?;
    let mut parents: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for name in &names {
        let referenced: Vec<String> = sqlx::query_scalar("SELECT \"table\" FROM pragma_foreign_key_list($1)")
            .bind(name)
            .fetch_all(&mut *sqlite)
            .await?;
        parents.insert(
            name.clone(),
            referenced.into_iter().filter(|parent| parent != name).collect(),
        );
    }
    let mut order: Vec<String> = Vec::new();
    while order.len() < names.len() {
        let ready: Vec<String> = names
            .iter()
            .filter(|name| !order.contains(name))
            .filter(|name| parents[*name].iter().all(|parent| order.contains(parent)))
            .cloned()
            .collect();
        if ready.is_empty() {
            bail!("the foreign keys of the SQLite tables form a cycle");
        }
        order.extend(ready);
    }
    Ok(order)
}

/// The target table's columns, in order, with the kind of value each takes.
async fn target_columns(pg: &mut sqlx::PgConnection, table: &str) -> anyhow::Result<Vec<Column>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text, is_identity::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(&mut *pg)
    .await?;
    rows.into_iter()
        .map(|(name, data_type, identity)| {
            let kind = match data_type.as_str() {
                "bigint" | "integer" | "smallint" => Kind::Integer,
                "boolean" => Kind::Boolean,
                "double precision" | "real" => Kind::Real,
                "bytea" => Kind::Bytes,
                "text" => Kind::Text,
                "jsonb" => Kind::Json,
                "timestamp with time zone" => Kind::Timestamp,
                other => bail!("{table}.{name} has type {other}, which this copy does not know"),
            };
            Ok(Column {
                name,
                kind,
                identity: identity == "YES",
            })
        })
        .collect()
}

/// Copies one table in batches; returns the rows copied.
async fn copy_table(
    sqlite: &mut sqlx::SqliteConnection,
    pg: &mut sqlx::PgConnection,
    table: &str,
    columns: &[Column],
) -> anyhow::Result<u64> {
    use futures_util::TryStreamExt;
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    // A JSONB column reads its row's `json` column: the value as JSON.
    let selected: Vec<String> = columns
        .iter()
        .map(|column| match column.kind {
            Kind::Json => format!("CASE WHEN {0} IS NULL THEN NULL ELSE json END", column.name),
            // PostgreSQL's runs.seq is SQLite's rowid (migrations/postgres/0002_run_seq.sql).
            _ if table == "runs" && column.name == "seq" => "rowid".to_string(),
            _ => column.name.clone(),
        })
        .collect();
    let query = format!("SELECT {} FROM {table}", selected.join(", "));
    let max_rows = (MAX_PARAMETERS / columns.len().max(1)).max(1);
    let mut batch: Vec<Vec<Value>> = Vec::new();
    let mut batch_bytes = 0;
    let mut copied = 0u64;
    {
        let mut rows = sqlx::query(&query).fetch(&mut *sqlite);
        while let Some(row) = rows.try_next().await? {
            let mut values = Vec::with_capacity(columns.len());
            for (i, column) in columns.iter().enumerate() {
                let value = read_value(&row, i, column.kind)
                    .with_context(|| format!("{table}.{} of a row cannot be read", column.name))?;
                batch_bytes += value.size();
                values.push(value);
            }
            batch.push(values);
            if batch.len() >= max_rows || batch_bytes >= MAX_BATCH_BYTES {
                copied += insert(pg, table, &names, std::mem::take(&mut batch)).await?;
                batch_bytes = 0;
            }
        }
    }
    if !batch.is_empty() {
        copied += insert(pg, table, &names, batch).await?;
    }
    Ok(copied)
}

fn read_value(row: &sqlx::sqlite::SqliteRow, i: usize, kind: Kind) -> Result<Value, sqlx::Error> {
    Ok(match kind {
        Kind::Integer => Value::Integer(row.try_get(i)?),
        Kind::Boolean => Value::Boolean(row.try_get::<Option<i64>, _>(i)?.map(|flag| flag != 0)),
        Kind::Real => Value::Real(row.try_get(i)?),
        Kind::Bytes => Value::Bytes(row.try_get(i)?),
        Kind::Text => Value::Text(row.try_get(i)?),
        Kind::Json => Value::Json(row.try_get(i)?),
        Kind::Timestamp => Value::Timestamp(row.try_get(i)?),
    })
}

async fn insert(
    pg: &mut sqlx::PgConnection,
    table: &str,
    names: &[&str],
    rows: Vec<Vec<Value>>,
) -> anyhow::Result<u64> {
    let count = rows.len() as u64;
    let mut insert: QueryBuilder<Postgres> =
        QueryBuilder::new(format!("INSERT INTO {table} ({}) ", names.join(", ")));
    insert.push_values(rows, |mut row, values| {
        for value in values {
            match value {
                Value::Integer(v) => row.push_bind(v),
                Value::Boolean(v) => row.push_bind(v),
                Value::Real(v) => row.push_bind(v),
                Value::Bytes(v) => row.push_bind(v),
                Value::Text(v) => row.push_bind(v),
                Value::Json(v) => row.push_bind(v).push_unseparated("::jsonb"),
                Value::Timestamp(v) => row.push_bind(v).push_unseparated("::timestamptz"),
            };
        }
    });
    insert
        .build()
        .execute(&mut *pg)
        .await
        .with_context(|| format!("cannot insert into {table}"))?;
    Ok(count)
}
