//! Job output kept on the server: the newest lines of each stream of each
//! attempt (the agent has the full files), ingested idempotently by line
//! number, read as a tail or followed after an SSE event id.

use crate::store::Error;
use crate::store::sql;
use crate::store::time::rfc3339;
use crate::store::{Db, Dialect, Tx};
use gpuplane_api::log::{LogLine, LogStream, Logs};
use std::borrow::Cow;

/// Longest line kept on the server; the agent's file has the whole line.
pub use gpuplane_api::log::MAX_LINE_BYTES;

/// Consecutive lines of one stream of one attempt (of one member of a
/// multi-node attempt: its rank), numbered from `first_n`.
pub struct Batch<'a> {
    pub job_id: &'a str,
    pub attempt: i64,
    pub rank: i64,
    pub stream: LogStream,
    pub first_n: i64,
    pub time: i64,
    pub lines: &'a [String],
}

/// Stores a batch, ignoring lines already stored, then drops lines older
/// than the newest `keep` of that stream.
pub async fn ingest(conn: &mut Tx, batch: Batch<'_>, keep: i64) -> Result<(), Error> {
    let Batch {
        job_id,
        attempt,
        rank,
        stream,
        first_n,
        time,
        lines,
    } = batch;
    if lines.is_empty() {
        return Ok(());
    }
    let dialect = conn.dialect();
    let clipped: Vec<Cow<str>> = lines
        .iter()
        .map(|line| match dialect {
            // PostgreSQL's text cannot hold NUL; it becomes U+FFFD there.
            Dialect::Postgres if line.contains('\0') => Cow::Owned(clip(line).replace('\0', "\u{FFFD}")),
            _ => Cow::Borrowed(clip(line)),
        })
        .collect();
    let last_n = first_n + lines.len() as i64 - 1;
    // One statement for the whole batch: the JSON array's index numbers the lines.
    let json = serde_json::to_string(&clipped).map_err(|e| Error::Internal(e.into()))?;
    let insert = match dialect {
        Dialect::Sqlite => {
            "INSERT OR IGNORE INTO log_lines (job_id, attempt, stream, n, time, text, node_rank)
             SELECT $1, $2, $3, $4 + key, $5, value, $7 FROM json_each($6)"
        }
        // ON CONFLICT makes each row a speculative insertion, about 60 %
        // dearer. Writers take turns (`store::write`), so a batch with none
        // of its lines stored yet, the usual case, goes in without it.
        Dialect::Postgres if any_stored(conn, job_id, attempt, rank, stream, first_n..=last_n).await? => {
            "INSERT INTO log_lines (job_id, attempt, stream, n, time, text, node_rank)
             SELECT $1, $2, $3, $4 + line.n - 1, $5, line.text, $7
             FROM jsonb_array_elements_text(CAST($6 AS JSONB)) WITH ORDINALITY AS line(text, n)
             ON CONFLICT DO NOTHING"
        }
        Dialect::Postgres => {
            "INSERT INTO log_lines (job_id, attempt, stream, n, time, text, node_rank)
             SELECT $1, $2, $3, $4 + line.n - 1, $5, line.text, $7
             FROM jsonb_array_elements_text(CAST($6 AS JSONB)) WITH ORDINALITY AS line(text, n)"
        }
    };
    sql!(conn, |conn| {
        sqlx::query(insert)
            .bind(job_id)
            .bind(attempt)
            .bind(stream.as_str())
            .bind(first_n)
            .bind(time)
            .bind(json)
            .bind(rank)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    sql!(conn, |conn| {
        sqlx::query(
            "DELETE FROM log_lines WHERE job_id = $1 AND attempt = $2 AND stream = $3 AND n <= $4 AND node_rank = $5",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(stream.as_str())
        .bind(last_n - keep)
        .bind(rank)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// Is any line numbered in `range` of this stream stored?
async fn any_stored(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    rank: i64,
    stream: LogStream,
    range: std::ops::RangeInclusive<i64>,
) -> Result<bool, Error> {
    let found: Option<i32> = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT 1 FROM log_lines WHERE job_id = $1 AND attempt = $2 AND node_rank = $6 AND stream = $3
             AND n BETWEEN $4 AND $5 LIMIT 1",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(stream.as_str())
        .bind(range.start())
        .bind(range.end())
        .bind(rank)
        .fetch_optional(conn)
        .await
    })?;
    Ok(found.is_some())
}

fn clip(line: &str) -> &str {
    if line.len() <= MAX_LINE_BYTES {
        return line;
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// The highest line number stored for a stream (of one member: `rank`; 0
/// for a one-node attempt), 0 when none: where the agent resumes.
pub async fn last_n(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    rank: Option<i64>,
    stream: LogStream,
) -> Result<i64, Error> {
    let n: Option<i64> = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT max(n) FROM log_lines WHERE job_id = $1 AND attempt = $2 AND stream = $3 AND node_rank = $4",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(stream.as_str())
        .bind(rank.unwrap_or(0))
            .fetch_one(conn)
            .await
    })?;
    Ok(n.unwrap_or(0))
}

#[derive(sqlx::FromRow)]
struct LineRow {
    id: i64,
    attempt: i64,
    node_rank: i64,
    stream: String,
    n: i64,
    time: i64,
    text: String,
}

impl LineRow {
    fn into_line(self) -> (i64, LogLine) {
        let stream = if self.stream == "stderr" {
            LogStream::Stderr
        } else {
            LogStream::Stdout
        };
        (
            self.id,
            LogLine {
                n: self.n,
                stream,
                text: self.text,
                attempt: self.attempt,
                time: rfc3339(self.time),
                rank: self.node_rank,
            },
        )
    }
}

/// The attempt a log request means: the one asked for, else the latest (0 when none yet).
pub async fn resolve_attempt(db: &Db, job_id: &str, attempt: Option<i64>) -> Result<i64, Error> {
    if let Some(attempt) = attempt {
        return Ok(attempt);
    }
    let latest: Option<i64> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT max(n) FROM attempts WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(pool)
            .await
    })?;
    Ok(latest.unwrap_or(0))
}

/// Which lines a reader wants: one stream or both, one member's (rank) or
/// every member's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Only {
    pub stream: Option<LogStream>,
    pub rank: Option<i64>,
}

/// The newest `tail` lines of an attempt, oldest first.
pub async fn tail(
    db: &Db,
    job_id: &str,
    attempt: i64,
    only: Only,
    tail: i64,
) -> Result<(Vec<(i64, LogLine)>, Logs), Error> {
    let mut rows: Vec<LineRow> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT id, attempt, node_rank, stream, n, time, text FROM log_lines
         WHERE job_id = $1 AND attempt = $2 AND ($3 IS NULL OR stream = $3) AND ($5 IS NULL OR node_rank = $5)
         ORDER BY id DESC LIMIT $4",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(only.stream.map(LogStream::as_str))
        .bind(tail)
        .bind(only.rank)
        .fetch_all(pool)
        .await
    })?;
    rows.reverse();
    // Older lines exist when the first kept line of a stream is not line 1.
    let truncated = rows.first().is_some_and(|first| first.n > 1);
    let lines: Vec<(i64, LogLine)> = rows.into_iter().map(LineRow::into_line).collect();
    let logs = Logs {
        lines: lines.iter().map(|(_, line)| line.clone()).collect(),
        truncated,
        source: "server".to_string(),
    };
    Ok((lines, logs))
}

/// Where a follower that found no lines of `attempt` starts: after every
/// line of the earlier attempts, so that lines of `attempt` that arrive
/// meanwhile are not skipped.
pub async fn start_of_attempt(db: &Db, job_id: &str, attempt: i64) -> Result<i64, Error> {
    let id: Option<i64> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT max(id) FROM log_lines WHERE job_id = $1 AND attempt < $2")
            .bind(job_id)
            .bind(attempt)
            .fetch_one(pool)
            .await
    })?;
    Ok(id.unwrap_or(0))
}

/// Lines after SSE event id `after` (of one attempt, or of every attempt
/// so a follower sees retries too), oldest first, at most `limit`.
pub async fn after(
    db: &Db,
    job_id: &str,
    attempt: Option<i64>,
    only: Only,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, LogLine)>, Error> {
    let rows: Vec<LineRow> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT id, attempt, node_rank, stream, n, time, text FROM log_lines
         WHERE job_id = $1 AND ($2 IS NULL OR attempt = $2) AND ($3 IS NULL OR stream = $3) AND id > $4
           AND ($6 IS NULL OR node_rank = $6)
         ORDER BY id LIMIT $5",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(only.stream.map(LogStream::as_str))
        .bind(after)
        .bind(limit)
        .bind(only.rank)
        .fetch_all(pool)
        .await
    })?;
    Ok(rows.into_iter().map(LineRow::into_line).collect())
}

/// When one member of an attempt (rank 0 for a one-node attempt) last
/// printed a line, epoch ms; None before its first.
pub async fn last_line_at(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    rank: i64,
) -> Result<Option<i64>, Error> {
    Ok(sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT max(time) FROM log_lines WHERE job_id = $1 AND attempt = $2 AND node_rank = $3",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(rank)
        .fetch_one(conn)
        .await
    })?)
}

/// The last `limit` lines of both streams of an attempt (of one member
/// when `rank` is given), for failure classification.
pub async fn recent_text(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    rank: Option<i64>,
    limit: i64,
) -> Result<Vec<String>, Error> {
    let mut lines: Vec<String> = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT text FROM log_lines WHERE job_id = $1 AND attempt = $2 AND ($4 IS NULL OR node_rank = $4)
             ORDER BY id DESC LIMIT $3",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(limit)
        .bind(rank)
        .fetch_all(conn)
        .await
    })?;
    lines.reverse();
    Ok(lines)
}
