//! A run's config, tags and notes: stored, read back and filtered on
//! (`GET /runs?tag=&q=&config.KEY=>VALUE`). The limits are the shared
//! ones in `gpuplane_api::experiment`.

use crate::store::sql;
use crate::store::{Db, Dialect, Error, Tx};
use gpuplane_api::experiment::{self, Comparison, ConfigFilter, RunChanges};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Tags as stored: a sorted JSON array without repeats.
pub fn tags_json(tags: &[String]) -> String {
    let sorted: BTreeSet<&String> = tags.iter().collect();
    serde_json::to_string(&sorted).unwrap_or_else(|_| "[]".into())
}

/// Sets config keys (others stay), after checking every key and value.
pub async fn update_config(
    conn: &mut Tx,
    run_id: &str,
    config: &BTreeMap<String, Value>,
) -> Result<(), Error> {
    let errors = experiment::check_config(config);
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    for (key, value) in config {
        // SQLite keeps the value itself (a number, text or NULL: the column
        // has no type); PostgreSQL keeps it as JSONB, read from `json`.
        match conn.dialect() {
            Dialect::Sqlite => sql!(conn, |conn| {
                let stored = sqlx::query(
                    "INSERT INTO run_config (run_id, key, value, json) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, json = excluded.json",
                )
                .bind(run_id)
                .bind(key);
                bind_value(stored, value)
                    .bind(value.to_string())
                    .execute(conn)
                    .await
                    .map(|_| ())
            })?,
            Dialect::Postgres => sql!(conn, |conn| {
                sqlx::query(
                    "INSERT INTO run_config (run_id, key, value, json) VALUES ($1, $2, CAST($3 AS JSONB), $3)
                     ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, json = excluded.json",
                )
                .bind(run_id)
                .bind(key)
                .bind(value.to_string())
                .execute(conn)
                .await
                .map(|_| ())
            })?,
        }
    }
    let keys: i64 = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT count(*) FROM run_config WHERE run_id = $1")
            .bind(run_id)
            .fetch_one(conn)
            .await
    })?;
    if keys as usize > experiment::MAX_CONFIG_KEYS {
        return Err(Error::field(
            "config",
            format!("a run keeps at most {} config keys", experiment::MAX_CONFIG_KEYS),
        ));
    }
    Ok(())
}

/// Binds a config value as SQLite compares it: numbers as numbers, booleans as 0/1.
fn bind_value<'q, D: sqlx::Database>(
    query: sqlx::query::Query<'q, D, D::Arguments<'q>>,
    value: &Value,
) -> sqlx::query::Query<'q, D, D::Arguments<'q>>
where
    Option<String>: sqlx::Encode<'q, D> + sqlx::Type<D>,
    String: sqlx::Encode<'q, D> + sqlx::Type<D>,
    i64: sqlx::Encode<'q, D> + sqlx::Type<D>,
    Option<f64>: sqlx::Encode<'q, D> + sqlx::Type<D>,
{
    match value {
        Value::Null => query.bind(None::<String>),
        Value::Bool(flag) => query.bind(i64::from(*flag)),
        Value::Number(number) => match number.as_i64() {
            Some(whole) => query.bind(whole),
            None => query.bind(number.as_f64()),
        },
        Value::String(text) => query.bind(text.clone()),
        other => query.bind(other.to_string()),
    }
}

/// Adds as many of `tags` as the run has room for (`MAX_TAGS` in all), in
/// order; the rest are left out. MLflow's tags are shown as run tags this
/// way, where they fit: MLflow keeps any number.
pub async fn add_tags_that_fit(conn: &mut Tx, run_id: &str, tags: Vec<String>) -> Result<(), Error> {
    if tags.is_empty() {
        return Ok(());
    }
    let mut kept = tags_of(conn, run_id).await?;
    let mut added = Vec::new();
    for tag in tags {
        if kept.len() >= experiment::MAX_TAGS {
            break;
        }
        if kept.insert(tag.clone()) {
            added.push(tag);
        }
    }
    if added.is_empty() {
        return Ok(());
    }
    let add = RunChanges {
        add_tags: added,
        ..RunChanges::default()
    };
    change(conn, run_id, &add).await
}

/// A run's tags as they are.
async fn tags_of(conn: &mut Tx, run_id: &str) -> Result<BTreeSet<String>, Error> {
    let current: String = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT tags FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_one(conn)
            .await
    })?;
    Ok(serde_json::from_str(&current).unwrap_or_default())
}

/// Changes tags, notes and the name; answers nothing when nothing was asked.
pub async fn change(conn: &mut Tx, run_id: &str, changes: &RunChanges) -> Result<(), Error> {
    let mut errors = Vec::new();
    if let Some(tags) = &changes.tags {
        errors.extend(experiment::check_tags("tags", tags));
    }
    errors.extend(experiment::check_tags("add_tags", &changes.add_tags));
    if let Some(notes) = &changes.notes {
        errors.extend(experiment::check_notes(notes));
    }
    if let Some(name) = &changes.name {
        errors.extend(experiment::check_run_name(name));
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let mut tags: BTreeSet<String> = match &changes.tags {
        Some(replaced) => replaced.iter().cloned().collect(),
        None => tags_of(conn, run_id).await?,
    };
    tags.extend(changes.add_tags.iter().cloned());
    for tag in &changes.remove_tags {
        tags.remove(tag);
    }
    if tags.len() > experiment::MAX_TAGS {
        return Err(Error::field(
            "tags",
            format!("at most {} tags", experiment::MAX_TAGS),
        ));
    }
    let tags: Vec<String> = tags.into_iter().collect();
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE runs SET tags = $1, notes = coalesce($2, notes), name = coalesce($3, name) WHERE id = $4",
        )
        .bind(tags_json(&tags))
        .bind(&changes.notes)
        .bind(changes.name.as_deref().map(str::trim))
        .bind(run_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// The config of each of these runs, by key: one row per run, its config
/// gathered into one JSON object by the database (rows cost more than bytes here).
pub async fn configs(db: &Db, run_ids: &[&str]) -> Result<HashMap<String, BTreeMap<String, Value>>, Error> {
    let dialect = db.dialect();
    let object = dialect.pick(
        "json_group_object(key, json(json))",
        "CAST(json_object_agg(key, value) AS TEXT)",
    );
    let rows: Vec<(String, String)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT run_id, {object} FROM run_config
         WHERE run_id IN (SELECT value FROM {}) GROUP BY run_id",
            dialect.json_values("$1")
        ))
        .bind(serde_json::to_string(run_ids).unwrap_or_else(|_| "[]".into()))
        .fetch_all(pool)
        .await
    })?;
    Ok(rows
        .into_iter()
        .map(|(run_id, object)| (run_id, serde_json::from_str(&object).unwrap_or_default()))
        .collect())
}

/// A config value (`value`: `run_config.value`) as a number, NULL when it
/// is not one.
pub fn config_number(dialect: Dialect, value: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!("CASE WHEN typeof({value}) IN ('integer', 'real') THEN {value} END"),
        Dialect::Postgres => {
            format!("CASE WHEN jsonb_typeof({value}) = 'number' THEN CAST({value} AS DOUBLE PRECISION) END")
        }
    }
}

/// A config value as text, NULL when it is not a string.
fn config_text(dialect: Dialect, value: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!("CASE WHEN typeof({value}) = 'text' THEN {value} END"),
        Dialect::Postgres => {
            format!("CASE WHEN jsonb_typeof({value}) = 'string' THEN {value} #>> '{{}}' END")
        }
    }
}

/// A boolean config value of `run_config` row `row` as 1 or 0, NULL when it
/// is not a boolean (SQLite keeps booleans as 1 and 0: its `json` tells).
fn config_flag(dialect: Dialect, row: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!("CASE WHEN {row}.json IN ('true', 'false') THEN {row}.value END"),
        Dialect::Postgres => format!(
            "CASE WHEN jsonb_typeof({row}.value) = 'boolean' THEN CAST(CAST({row}.value AS BOOLEAN) AS INTEGER) END"
        ),
    }
}

/// What a config column sorts by: SQLite's own order (numbers, booleans
/// among them as 1 and 0, before texts, texts by bytes); NULL for a JSON
/// null or no value.
pub fn config_sort_key(dialect: Dialect, value: &str) -> String {
    match dialect {
        Dialect::Sqlite => value.to_string(),
        Dialect::Postgres => format!(
            "CASE jsonb_typeof({value})
                 WHEN 'number' THEN ROW(0, CAST({value} AS DOUBLE PRECISION), NULL::TEXT)
                 WHEN 'boolean' THEN ROW(0, CAST(CAST({value} AS BOOLEAN) AS INTEGER)::DOUBLE PRECISION, NULL::TEXT)
                 WHEN 'string' THEN ROW(1, NULL::DOUBLE PRECISION, ({value} #>> '{{}}') COLLATE \"C\")
             END"
        ),
    }
}

/// The SQL condition (over runs `r`) and its values for the list filters:
/// a tag, text in the name, notes or tags, and config comparisons.
pub struct Filters {
    pub tag: Option<String>,
    pub text: Option<String>,
    pub config: Vec<ConfigFilter>,
    /// Archived runs only, else only the others.
    pub archived: bool,
}

impl Filters {
    /// `AND …` clauses with numbered placeholders from `${first}` on, in
    /// the order [`Filters::bind`] fills them.
    pub fn sql(&self, dialect: Dialect, first: usize) -> String {
        let mut next = first;
        let mut number = || {
            next += 1;
            next - 1
        };
        let mut sql = String::from(if self.archived {
            " AND r.archived_at IS NOT NULL"
        } else {
            " AND r.archived_at IS NULL"
        });
        if self.tag.is_some() {
            let tag = number();
            // Tags are plain words (no quotes or backslashes), so the quoted
            // tag appears in the stored JSON array exactly when it is an element.
            sql.push_str(&format!(
                " AND {}",
                dialect.contains("r.tags", &format!("${tag}"))
            ));
        }
        if self.text.is_some() {
            let text = format!("${}", number());
            let found_in = |column: &str| dialect.contains(&format!("lower({column})"), &text);
            sql.push_str(&format!(
                " AND ({} OR {} OR {})",
                found_in("r.name"),
                found_in("r.notes"),
                found_in("r.tags")
            ));
        }
        for filter in &self.config {
            let key = number();
            let op = filter.op.sql();
            let clause = match (&filter.value, filter.op) {
                (Value::Null, Comparison::Equal) => format!(
                    " AND EXISTS (SELECT 1 FROM run_config c WHERE c.run_id = r.id AND c.key = ${key} AND c.json = 'null')"
                ),
                (Value::Null, _) => format!(
                    " AND EXISTS (SELECT 1 FROM run_config c WHERE c.run_id = r.id AND c.key = ${key} AND c.json <> 'null')"
                ),
                // A number compares with numbers only, a text with texts, a boolean with booleans.
                (value, _) => {
                    let typed = match value {
                        Value::Number(_) => config_number(dialect, "c.value"),
                        Value::Bool(_) => config_flag(dialect, "c"),
                        _ => config_text(dialect, "c.value"),
                    };
                    let compared = number();
                    format!(
                        " AND EXISTS (SELECT 1 FROM run_config c WHERE c.run_id = r.id AND c.key = ${key}
                                      AND {typed} {op} ${compared})"
                    )
                }
            };
            sql.push_str(&clause);
        }
        sql
    }

    /// Binds the values of [`Filters::sql`]'s placeholders.
    pub fn bind<'q, D: sqlx::Database, O>(
        &'q self,
        mut query: sqlx::query::QueryAs<'q, D, O, D::Arguments<'q>>,
    ) -> sqlx::query::QueryAs<'q, D, O, D::Arguments<'q>>
    where
        String: sqlx::Encode<'q, D> + sqlx::Type<D>,
        &'q String: sqlx::Encode<'q, D> + sqlx::Type<D>,
        i64: sqlx::Encode<'q, D> + sqlx::Type<D>,
        Option<f64>: sqlx::Encode<'q, D> + sqlx::Type<D>,
    {
        if let Some(tag) = &self.tag {
            query = query.bind(serde_json::to_string(tag).unwrap_or_default());
        }
        if let Some(text) = &self.text {
            query = query.bind(text.to_lowercase());
        }
        for filter in &self.config {
            query = query.bind(&filter.key);
            query = match &filter.value {
                Value::Null => query,
                Value::Bool(flag) => query.bind(i64::from(*flag)),
                Value::Number(number) => query.bind(number.as_f64()),
                Value::String(text) => query.bind(text),
                other => query.bind(other.to_string()),
            };
        }
        query
    }
}
