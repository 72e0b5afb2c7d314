//! Checkpoint files recorded from jobs' watch dirs, and which paths more
//! than one run wrote.

use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Tx};
use gpuplane_api::metric::Checkpoint;

/// Records (or refreshes) a checkpoint of a run.
pub async fn record(
    conn: &mut Tx,
    run_id: &str,
    node_id: &str,
    path: &str,
    size: u64,
    modified: i64,
    step: Option<i64>,
) -> Result<(), Error> {
    sql!(conn, |conn| {
        sqlx::query(
            "INSERT INTO checkpoints (id, run_id, node_id, path, size, modified_at, step, recorded_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (run_id, path) DO UPDATE SET size = excluded.size, modified_at = excluded.modified_at,
             step = coalesce(excluded.step, checkpoints.step), recorded_at = excluded.recorded_at",
        )
        .bind(new_id("ckpt"))
        .bind(run_id)
        .bind(node_id)
        .bind(path)
        .bind(size as i64)
        .bind(modified)
        .bind(step)
        .bind(now_ms())
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// Where a job's next attempt picks up: the run's checkpoint with the
/// highest step (a checkpoint whose step is unknown counts below any
/// step; among equals the newest file), as its path, step and the node
/// that recorded it.
pub async fn latest(
    conn: &mut Tx,
    run_id: &str,
) -> Result<Option<(String, Option<i64>, Option<String>)>, Error> {
    Ok(sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT path, step, node_id FROM checkpoints WHERE run_id = $1
             ORDER BY (step IS NULL), step DESC, modified_at DESC LIMIT 1",
        )
        .bind(run_id)
        .fetch_optional(conn)
        .await
    })?)
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    run_id: String,
    path: String,
    size: i64,
    modified_at: i64,
    step: Option<i64>,
    shared_with: Option<String>,
}

/// A run's checkpoints, newest step first, each with the other runs that wrote its path.
pub async fn of_run(db: &Db, run_id: &str) -> Result<Vec<Checkpoint>, Error> {
    let shared_with = db.dialect().json_array_agg("o.run_id");
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT c.id, c.run_id, c.path, c.size, c.modified_at, c.step,
                (SELECT {shared_with} FROM checkpoints o WHERE o.path = c.path AND o.run_id != c.run_id)
                    AS shared_with
         FROM checkpoints c WHERE c.run_id = $1 ORDER BY c.step DESC, c.modified_at DESC"
        ))
        .bind(run_id)
        .fetch_all(pool)
        .await
    })?;
    Ok(rows
        .into_iter()
        .map(|row| Checkpoint {
            id: row.id,
            run_id: row.run_id,
            path: row.path,
            size: row.size as u64,
            modified_at: rfc3339(row.modified_at),
            step: row.step,
            shared_with: row
                .shared_with
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default(),
            primary_value: None,
            best: false,
        })
        .collect())
}
