//! The end of a run's life: archiving (out of the default lists, kept whole)
//! and deleting (the run and its job, with metrics, texts, config, logs,
//! events, checkpoints, evaluations and share links, in one transaction).
//! Neither touches a job that is still queued or running, nor one that a
//! queued job waits for. Housekeeping deletes runs archived longer than
//! `archived_run_retention_days` and kept output older than
//! `log_retention_days`.

use crate::store::Error;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Tx};
use gpuplane_api::experiment::{DeletedRun, ProjectUsage};

/// Refuses (409) when the run's job, or an evaluation of the run, is still
/// queued or running, or a queued job waits for the run's job.
async fn check_finished(conn: &mut Tx, run_id: &str, job_id: Option<&str>) -> Result<(), Error> {
    let active: Option<(String, String)> = sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT id, status FROM jobs
         WHERE (id = $1 OR id IN (SELECT job_id FROM evaluations WHERE run_id = $2))
           AND status IN ('QUEUED', 'DISPATCHING', 'RUNNING') LIMIT 1",
        )
        .bind(job_id)
        .bind(run_id)
        .fetch_optional(conn)
        .await
    })?;
    if let Some((id, status)) = active {
        return Err(Error::Conflict(format!(
            "job {id} is {status}: cancel it or let it end first"
        )));
    }
    if let Some(job_id) = job_id {
        let dependencies = conn.dialect().json_values("after_jobs");
        let waiting: Option<String> = sql!(conn, |conn| {
            sqlx::query_scalar(&format!(
                "SELECT id FROM jobs WHERE status = 'QUEUED' AND after_jobs IS NOT NULL
               AND EXISTS (SELECT 1 FROM {dependencies} WHERE value = $1 OR value LIKE $1 || ':%')
             LIMIT 1"
            ))
            .bind(job_id)
            .fetch_optional(conn)
            .await
        })?;
        if let Some(waiting) = waiting {
            return Err(Error::Conflict(format!(
                "queued job {waiting} waits for job {job_id}"
            )));
        }
    }
    Ok(())
}

/// The job a run belongs to (none for an SDK run); 404 for no such run.
pub(super) async fn job_of(conn: &mut Tx, run_id: &str) -> Result<Option<String>, Error> {
    let job: Option<Option<String>> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT job_id FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(conn)
            .await
    })?;
    job.ok_or_else(|| Error::NotFound(format!("no run {run_id}")))
}

/// Archives a run and its job (`archive = true`), or brings them back.
pub async fn set_archived(db: &Db, run_id: &str, archive: bool, by: Option<&str>) -> Result<(), Error> {
    let mut tx = crate::store::write(db).await?;
    let job_id = job_of(&mut tx, run_id).await?;
    if archive {
        check_finished(&mut tx, run_id, job_id.as_deref()).await?;
    }
    let at = archive.then(now_ms);
    sql!(tx, |conn| {
        sqlx::query("UPDATE runs SET archived_at = $1, archived_by = $2 WHERE id = $3")
            .bind(at)
            .bind(by.filter(|_| archive))
            .bind(run_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    sql!(tx, |conn| {
        sqlx::query("UPDATE jobs SET archived_at = $1 WHERE id = $2")
            .bind(at)
            .bind(&job_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// Deletes a run and its job with everything recorded about them.
pub async fn delete(db: &Db, run_id: &str) -> Result<DeletedRun, Error> {
    let mut tx = crate::store::write(db).await?;
    let job_id = job_of(&mut tx, run_id).await?;
    check_finished(&mut tx, run_id, job_id.as_deref()).await?;
    let metric_points: i64 = sql!(tx, |conn| {
        sqlx::query_scalar(
            "SELECT CAST(coalesce(sum(points), 0) AS BIGINT) FROM metric_series WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_one(conn)
        .await
    })?;
    let run_statements = [
        "DELETE FROM alert_deliveries WHERE event_seq IN (SELECT seq FROM events WHERE run_id = $1)",
        "DELETE FROM events WHERE run_id = $1",
        "DELETE FROM share_views WHERE share_id IN (SELECT id FROM share_links WHERE run_id = $1)",
        "DELETE FROM share_links WHERE run_id = $1",
        "DELETE FROM run_texts WHERE run_id = $1",
        "DELETE FROM run_texts_rewound WHERE run_id = $1",
        "DELETE FROM metric_points_rewound WHERE run_id = $1",
        "DELETE FROM run_config WHERE run_id = $1",
        "DELETE FROM metric_chunks WHERE run_id = $1",
        "DELETE FROM metric_series WHERE run_id = $1",
        "DELETE FROM metric_batches WHERE run_id = $1",
        "DELETE FROM checkpoints WHERE run_id = $1",
        "DELETE FROM evaluations WHERE run_id = $1",
        "DELETE FROM api_tokens WHERE run_id = $1",
        "DELETE FROM runs WHERE id = $1",
    ];
    let mut events = 0;
    for statement in run_statements {
        let done = sql!(tx, |conn| {
            sqlx::query(statement)
                .bind(run_id)
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        if statement.starts_with("DELETE FROM events") {
            events += done as i64;
        }
    }
    let mut log_lines = 0;
    if let Some(job_id) = &job_id {
        // The agents that ran it remove its attempt folders (`nodes`' polls).
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO attempt_cleanups (node_id, job_id, requested_at)
                 SELECT DISTINCT node_id, job_id, $2 FROM attempts WHERE job_id = $1
                 ON CONFLICT (node_id, job_id) DO NOTHING",
            )
            .bind(job_id)
            .bind(now_ms())
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        let job_statements = [
            "DELETE FROM alert_deliveries WHERE event_seq IN (SELECT seq FROM events WHERE job_id = $1)",
            "DELETE FROM events WHERE job_id = $1",
            "DELETE FROM log_lines WHERE job_id = $1",
            "DELETE FROM evaluations WHERE job_id = $1",
            // Its processes' telemetry, kept under each node's id with keys `JOB.ATTEMPT.FIELD`.
            "DELETE FROM metric_chunks WHERE run_id IN (SELECT node_id FROM attempts WHERE job_id = $1)
               AND substr(key, 1, length($1) + 1) = $1 || '.'",
            "DELETE FROM telemetry_series WHERE node_id IN (SELECT node_id FROM attempts WHERE job_id = $1)
               AND substr(key, 1, length($1) + 1) = $1 || '.'",
            "DELETE FROM attempts WHERE job_id = $1",
            "DELETE FROM jobs WHERE id = $1",
        ];
        for statement in job_statements {
            let done = sql!(tx, |conn| {
                sqlx::query(statement)
                    .bind(job_id)
                    .execute(conn)
                    .await
                    .map(|done| done.rows_affected())
            })?;
            match statement {
                s if s.starts_with("DELETE FROM events") => events += done as i64,
                s if s.starts_with("DELETE FROM log_lines") => log_lines = done as i64,
                _ => {}
            }
        }
    }
    tx.commit().await?;
    forget_deleted_pages(db).await?;
    Ok(DeletedRun {
        run_id: run_id.to_string(),
        job_id,
        metric_points,
        log_lines,
        events,
    })
}

/// Deletes the runs archived before `cutoff` (ms), one transaction each;
/// returns how many.
pub async fn delete_archived_before(db: &Db, cutoff: i64) -> Result<usize, Error> {
    let due: Vec<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT id FROM runs WHERE archived_at < $1 ORDER BY archived_at")
            .bind(cutoff)
            .fetch_all(pool)
            .await
    })?;
    let mut deleted = 0;
    for run_id in due {
        match delete(db, &run_id).await {
            Ok(_) => deleted += 1,
            // Retried or unarchived meanwhile: it waits for the next round.
            Err(Error::Conflict(_) | Error::NotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(deleted)
}

/// Deletes the kept output lines of jobs that ended before `cutoff` (ms),
/// at most `batch` lines per statement; returns how many.
pub async fn delete_logs_before(db: &Db, cutoff: i64, batch: i64) -> Result<u64, Error> {
    let mut total = 0;
    loop {
        let done = sql!(db, |pool| {
            sqlx::query(
                "DELETE FROM log_lines WHERE id IN (
                 SELECT l.id FROM log_lines l JOIN jobs j ON j.id = l.job_id
                 WHERE j.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST') AND j.updated_at < $1
                 LIMIT $2)",
            )
            .bind(cutoff)
            .bind(batch)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        total += done;
        if done < batch as u64 {
            return Ok(total);
        }
    }
}

/// What each project keeps: runs, metric chunks, output lines and texts.
/// Reads every chunk's and line's length (not their content), so callers
/// cache it.
pub async fn usage(db: &Db) -> Result<Vec<ProjectUsage>, Error> {
    let rows: Vec<UsageRow> = sql!(db, |pool| {
        sqlx::query_as(
        "SELECT p.name AS project,
            (SELECT count(*) FROM runs r WHERE r.project = p.name) AS runs,
            (SELECT count(*) FROM runs r WHERE r.project = p.name AND r.archived_at IS NOT NULL) AS archived_runs,
            (SELECT CAST(coalesce(sum(s.points), 0) AS BIGINT) FROM metric_series s JOIN runs r ON r.id = s.run_id
              WHERE r.project = p.name) AS metric_points,
            (SELECT coalesce(sum(length(c.summary_coarse) + length(c.summary_mid) + length(c.summary) + length(c.points)), 0) FROM metric_chunks c
              JOIN runs r ON r.id = c.run_id WHERE r.project = p.name)
            + (SELECT coalesce(sum(length(w.points)), 0) FROM metric_points_rewound w
              JOIN runs r ON r.id = w.run_id WHERE r.project = p.name) AS metric_bytes,
            (SELECT count(*) FROM log_lines l JOIN jobs j ON j.id = l.job_id WHERE j.project = p.name) AS log_lines,
            (SELECT coalesce(sum(length(l.text)), 0) FROM log_lines l JOIN jobs j ON j.id = l.job_id
              WHERE j.project = p.name) AS log_bytes,
            (SELECT coalesce(sum(length(t.text)), 0) FROM run_texts t JOIN runs r ON r.id = t.run_id
              WHERE r.project = p.name)
            + (SELECT coalesce(sum(length(t.text)), 0) FROM run_texts_rewound t JOIN runs r ON r.id = t.run_id
              WHERE r.project = p.name) AS text_bytes
         FROM projects p ORDER BY p.name",
    )
    .fetch_all(pool)
    .await
    })?;
    Ok(rows
        .into_iter()
        .map(|row| ProjectUsage {
            project: row.project,
            runs: row.runs,
            archived_runs: row.archived_runs,
            metric_points: row.metric_points,
            metric_bytes: row.metric_bytes,
            log_lines: row.log_lines,
            log_bytes: row.log_bytes,
            text_bytes: row.text_bytes,
        })
        .collect())
}

#[derive(sqlx::FromRow)]
struct UsageRow {
    project: String,
    runs: i64,
    archived_runs: i64,
    metric_points: i64,
    metric_bytes: i64,
    log_lines: i64,
    log_bytes: i64,
    text_bytes: i64,
}

/// Leaves no deleted text behind in the database's files. SQLite zeroes
/// what a delete frees (`secure_delete`, set on every connection), but the
/// write-ahead log still holds the pages as they were until it is
/// checkpointed and truncated, which this does. PostgreSQL keeps deleted
/// rows in its table files until VACUUM reclaims them (autovacuum, or
/// `VACUUM` by hand).
pub async fn forget_deleted_pages(db: &Db) -> Result<(), Error> {
    if let Some(pool) = db.as_sqlite() {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(pool)
            .await
            .map_err(Error::from)?;
    }
    Ok(())
}
