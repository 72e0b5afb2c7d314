//! The two dialects' migrations (`migrations/sqlite`, `migrations/postgres`)
//! describe the same tables: the same columns with corresponding types, the
//! same nullability and primary keys, and the same named indexes. Both are
//! applied for real: SQLite by the server's own `store::open`, PostgreSQL on
//! a real server (testkit's `Postgres`).

use gpuplane_testkit::postgres::Postgres;
use std::collections::BTreeMap;

/// One column as both sides can describe it: (type, nullable, position in the primary key).
type Column = (String, bool, i64);
type Tables = BTreeMap<String, BTreeMap<String, Column>>;

/// The PostgreSQL types an SQLite column type may become (see the header of
/// `migrations/postgres/0001_schema.sql`).
fn corresponds(sqlite: &str, postgres: &str) -> bool {
    matches!(
        (sqlite, postgres),
        ("INTEGER", "bigint" | "boolean")
            | ("REAL", "double precision")
            | ("TEXT", "text")
            | ("BLOB", "bytea")
            | ("ANY", "jsonb")
            // tower_sessions.expiry_date only: sessions expire at a time.
            | ("INTEGER", "timestamp with time zone")
    )
}

async fn sqlite_tables() -> (Tables, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let db = gpuplane_server::store::open(dir.path()).await.unwrap();
    let pool = db.as_sqlite().unwrap().clone();
    let rows: Vec<(String, String, String, bool, i64)> = sqlx::query_as(
        "SELECT m.name, c.name, c.type, c.\"notnull\" = 0 AND c.pk = 0, c.pk
         FROM sqlite_master m JOIN pragma_table_info(m.name) c
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    (collect(rows), indexes)
}

async fn postgres_tables(url: &str) -> (Tables, Vec<String>) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::migrate!("../migrations/postgres").run(&pool).await.unwrap();
    let rows: Vec<(String, String, String, bool, i64)> = sqlx::query_as(
        "SELECT c.table_name::text, c.column_name::text, c.data_type::text, c.is_nullable = 'YES',
                COALESCE(k.ordinal_position, 0)::bigint
         FROM information_schema.columns c
         LEFT JOIN information_schema.table_constraints t
           ON t.table_schema = c.table_schema AND t.table_name = c.table_name
          AND t.constraint_type = 'PRIMARY KEY'
         LEFT JOIN information_schema.key_column_usage k
           ON k.constraint_name = t.constraint_name AND k.table_schema = c.table_schema
          AND k.table_name = c.table_name AND k.column_name = c.column_name
         WHERE c.table_schema = 'public' AND c.table_name <> '_sqlx_migrations'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    // Named indexes: not those PostgreSQL makes for PRIMARY KEY and UNIQUE constraints.
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT i.indexname::text FROM pg_indexes i
         WHERE i.schemaname = 'public'
           AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    (collect(rows), indexes)
}

fn collect(rows: Vec<(String, String, String, bool, i64)>) -> Tables {
    let mut tables = Tables::new();
    for (table, column, kind, nullable, key) in rows {
        tables
            .entry(table)
            .or_default()
            .insert(column, (kind, nullable, key));
    }
    tables
}

#[tokio::test(flavor = "multi_thread")]
async fn both_dialects_describe_the_same_tables() {
    let postgres = Postgres::start();
    let (sqlite, sqlite_indexes) = sqlite_tables().await;
    let (mut pg, mut pg_indexes) = postgres_tables(&postgres.fresh_database().await).await;
    // SQLite's rowid stands in for these (migrations/postgres/0002_run_seq.sql).
    let runs_seq = pg.get_mut("runs").and_then(|columns| columns.remove("seq"));
    assert_eq!(
        runs_seq,
        Some(("bigint".to_string(), false, 0)),
        "runs.seq on PostgreSQL"
    );
    pg_indexes.retain(|index| index != "runs_seq");

    assert!(
        sqlite.len() >= 30,
        "the SQLite schema has {} tables",
        sqlite.len()
    );
    assert_eq!(
        sqlite.keys().collect::<Vec<_>>(),
        pg.keys().collect::<Vec<_>>(),
        "the same tables"
    );
    let mut differences = Vec::new();
    for (table, columns) in &sqlite {
        let pg_columns = &pg[table];
        if columns.keys().ne(pg_columns.keys()) {
            differences.push(format!(
                "{table}: columns {:?} (SQLite) vs {:?} (PostgreSQL)",
                columns.keys().collect::<Vec<_>>(),
                pg_columns.keys().collect::<Vec<_>>()
            ));
            continue;
        }
        for (column, (sqlite_type, sqlite_nullable, sqlite_key)) in columns {
            let (pg_type, pg_nullable, pg_key) = &pg_columns[column];
            if !corresponds(sqlite_type, pg_type) {
                differences.push(format!("{table}.{column}: {sqlite_type} vs {pg_type}"));
            }
            if sqlite_nullable != pg_nullable {
                differences.push(format!(
                    "{table}.{column}: nullable {sqlite_nullable} (SQLite) vs {pg_nullable} (PostgreSQL)"
                ));
            }
            if sqlite_key != pg_key {
                differences.push(format!(
                    "{table}.{column}: primary key position {sqlite_key} (SQLite) vs {pg_key} (PostgreSQL)"
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "the dialects differ:\n{}",
        differences.join("\n")
    );
    assert_eq!(sqlite_indexes, pg_indexes, "the same named indexes");
}
