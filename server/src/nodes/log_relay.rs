//! A full-log fetch across replicas. One server relays it in memory
//! (`agent_link`): the command waits for the agent's next poll and the
//! upload goes to the reader. With replicas, the user may ask one, the
//! agent poll another and upload to a third, so the fetch goes through the
//! database: the asking replica writes the command ([`ask`]) and wakes
//! every replica's poll for that node ([`Wake::Fetch`]); the one the agent
//! polls hands it over once ([`claim`]); the one the agent uploads to
//! writes the file in parts ([`relay_upload`]), at most [`PARTS_AHEAD`]
//! ahead of the reader; the asking replica streams and deletes them
//! ([`parts`]), and forgets the fetch when its reader is done or gone.

use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use crate::wake::{Wake, Wakes};
use axum::body::{Body, Bytes};
use futures_util::{Stream, StreamExt};
use gpuplane_api::agent::AgentCommand;
use std::time::Duration;

/// The size of a part of a relayed file.
const PART_BYTES: usize = 256 * 1024;

/// How many parts the uploading replica writes ahead of the reader.
const PARTS_AHEAD: i64 = 8;

/// How often a waiting side looks again.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Fetches older than this are deleted by housekeeping (their reader is gone).
pub const KEEP_MS: i64 = 3600 * 1000;

/// Asks the node's agent for a file, through whichever replica it polls.
pub async fn ask(
    db: &Db,
    wakes: &Wakes,
    request_id: &str,
    node_id: &str,
    node_name: &str,
    command: &AgentCommand,
) -> Result<(), Error> {
    let command = serde_json::to_string(command).map_err(anyhow::Error::from)?;
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO log_fetches (request_id, node_id, node_name, command, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(request_id)
        .bind(node_id)
        .bind(node_name)
        .bind(&command)
        .bind(now_ms())
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    wakes.wake(Wake::Fetch(node_id.to_string()));
    Ok(())
}

/// The fetch commands waiting for the node, each handed over once.
pub async fn claim(db: &Db, node_id: &str) -> Result<Vec<AgentCommand>, Error> {
    let mut tx = crate::store::write(db).await?;
    let commands: Vec<String> = sql!(tx, |conn| {
        sqlx::query_scalar(
            "UPDATE log_fetches SET claimed_at = $1 WHERE node_id = $2 AND claimed_at IS NULL RETURNING command",
        )
        .bind(now_ms())
        .bind(node_id)
        .fetch_all(conn)
        .await
    })?;
    tx.commit().await?;
    commands
        .iter()
        .map(|command| Ok(serde_json::from_str(command).map_err(anyhow::Error::from)?))
        .collect()
}

/// Writes an agent's upload in parts for the replica that asked; `false`
/// when no fetch `request_id` waits for the node named `node_name`. Ends
/// early, without error, when the reader went away.
pub async fn relay_upload(db: &Db, request_id: &str, node_name: &str, body: Body) -> Result<bool, Error> {
    let asked: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT node_name FROM log_fetches WHERE request_id = $1")
            .bind(request_id)
            .fetch_optional(pool)
            .await
    })?;
    if asked.as_deref() != Some(node_name) {
        return Ok(false);
    }
    let mut body = body.into_data_stream();
    let (mut part, mut seq) = (Vec::with_capacity(PART_BYTES), 0i64);
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|error| Error::Internal(anyhow::anyhow!("the upload broke off: {error}")))?;
        part.extend_from_slice(&chunk);
        while part.len() >= PART_BYTES {
            let rest = part.split_off(PART_BYTES);
            if !write_part(db, request_id, seq, &part).await? {
                return Ok(true);
            }
            (part, seq) = (rest, seq + 1);
        }
    }
    if !part.is_empty() {
        if !write_part(db, request_id, seq, &part).await? {
            return Ok(true);
        }
        seq += 1;
    }
    write_part(db, request_id, seq, &[]).await?;
    Ok(true)
}

/// Writes one part once the reader is close enough behind; `false` when
/// the fetch is gone (its reader went away).
async fn write_part(db: &Db, request_id: &str, seq: i64, data: &[u8]) -> Result<bool, Error> {
    loop {
        let (asked, unread): (i64, i64) = sql!(db, |pool| {
            sqlx::query_as(
                "SELECT (SELECT count(*) FROM log_fetches WHERE request_id = $1),
                        (SELECT count(*) FROM log_fetch_parts WHERE request_id = $1)",
            )
            .bind(request_id)
            .fetch_one(pool)
            .await
        })?;
        if asked == 0 {
            return Ok(false);
        }
        if unread < PARTS_AHEAD {
            break;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query("INSERT INTO log_fetch_parts (request_id, seq, data) VALUES ($1, $2, $3)")
            .bind(request_id)
            .bind(seq)
            .bind(data)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(true)
}

/// Waits until the first part of the relayed file is there.
pub async fn first_part(db: &Db, request_id: &str) -> Result<(), Error> {
    loop {
        let there: Option<i64> = sql!(db, |pool| {
            sqlx::query_scalar("SELECT seq FROM log_fetch_parts WHERE request_id = $1 AND seq = 0")
                .bind(request_id)
                .fetch_optional(pool)
                .await
        })?;
        if there.is_some() {
            return Ok(());
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The relayed file, part by part, each deleted once read; an error when
/// no next part comes within `stall`. The fetch is forgotten when the
/// stream ends or is dropped.
pub fn parts(
    db: Db,
    request_id: String,
    stall: Duration,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    let reading = Reading { db, request_id };
    // `None` for the part number: the stream failed and ends.
    futures_util::stream::unfold((reading, Some(0i64)), move |(reading, seq)| async move {
        let seq = seq?;
        let started = tokio::time::Instant::now();
        loop {
            match next_part(&reading.db, &reading.request_id, seq).await {
                Ok(Some(data)) if data.is_empty() => return None,
                Ok(Some(data)) => return Some((Ok(Bytes::from(data)), (reading, Some(seq + 1)))),
                Ok(None) if started.elapsed() < stall => tokio::time::sleep(LOOK_EVERY).await,
                Ok(None) => {
                    let error = std::io::Error::other("the agent's upload stalled");
                    return Some((Err(error), (reading, None)));
                }
                Err(error) => return Some((Err(std::io::Error::other(error.to_string())), (reading, None))),
            }
        }
    })
}

/// Reads and deletes part `seq`, if it is there.
async fn next_part(db: &Db, request_id: &str, seq: i64) -> Result<Option<Vec<u8>>, Error> {
    let mut tx = crate::store::write(db).await?;
    let data: Option<Vec<u8>> = sql!(tx, |conn| {
        sqlx::query_scalar("DELETE FROM log_fetch_parts WHERE request_id = $1 AND seq = $2 RETURNING data")
            .bind(request_id)
            .bind(seq)
            .fetch_optional(conn)
            .await
    })?;
    tx.commit().await?;
    Ok(data)
}

/// A relayed fetch being read: forgotten (with any parts left) when dropped.
struct Reading {
    db: Db,
    request_id: String,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let (db, request_id) = (self.db.clone(), std::mem::take(&mut self.request_id));
        tokio::spawn(async move {
            if let Err(error) = forget(&db, &request_id).await {
                tracing::warn!(%error, request_id, "cannot forget a log fetch; housekeeping will");
            }
        });
    }
}

/// Deletes a fetch and its parts.
pub async fn forget(db: &Db, request_id: &str) -> Result<(), Error> {
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query("DELETE FROM log_fetches WHERE request_id = $1")
            .bind(request_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// Deletes the fetches older than [`KEEP_MS`] with their parts (run from
/// time to time); returns how many.
pub async fn delete_stale(db: &Db) -> Result<u64, Error> {
    let mut tx = crate::store::write(db).await?;
    let deleted = sql!(tx, |conn| {
        sqlx::query("DELETE FROM log_fetches WHERE created_at <= $1")
            .bind(now_ms() - KEEP_MS)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })?;
    tx.commit().await?;
    Ok(deleted)
}
