//! Heartbeats written in groups. Every agent polls every couple of seconds,
//! and each poll was two write statements, each its own commit waiting for
//! the disk: with 1,000 agents, 1,000 commits a second and most of a core.
//! A poll now leaves its node's time and GPU readings here and goes on; one
//! task writes all the readings waiting, in one transaction, at most every
//! [`Heartbeats::flush_every`]. The liveness check writes what is waiting
//! before it judges, so no node is marked OFFLINE on a stale time.
//! A node that was OFFLINE comes back (AGENT_RECONNECTED) when its reading
//! is written.

use super::{record_reconnect, write_gpus};
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use crate::wake::{Wake, Wakes};
use gpuplane_api::node::Gpu;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// The readings waiting to be written, a node's latest only.
pub struct Heartbeats {
    db: Db,
    wakes: Wakes,
    waiting: Mutex<HashMap<String, Reading>>,
    arrived: Notify,
    /// Held while readings are written, so a flush waits for one in progress.
    writing: tokio::sync::Mutex<()>,
}

struct Reading {
    at: i64,
    gpus: Vec<Gpu>,
}

impl Heartbeats {
    pub fn new(db: Db, wakes: Wakes) -> Self {
        Heartbeats {
            db,
            wakes,
            waiting: Mutex::default(),
            arrived: Notify::new(),
            writing: tokio::sync::Mutex::default(),
        }
    }

    /// How often readings are written at most: a quarter of the heartbeat
    /// interval, and at least every 250 ms (a node's last-seen time in the
    /// database is that much behind at most; the node timeout is many
    /// heartbeats).
    pub fn flush_every(heartbeat_interval: Duration) -> Duration {
        (heartbeat_interval / 4).min(Duration::from_millis(250))
    }

    /// A node's heartbeat: its time now and its GPUs' readings.
    pub fn record(&self, node_id: &str, gpus: Vec<Gpu>) {
        let reading = Reading { at: now_ms(), gpus };
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node_id.to_string(), reading);
        self.arrived.notify_one();
    }

    /// Writes every waiting reading in one transaction. A node that was
    /// OFFLINE is ONLINE again, with its AGENT_RECONNECTED event; then the
    /// liveness monitor and the scheduler are woken.
    pub async fn flush(&self) -> Result<(), Error> {
        let _writing = self.writing.lock().await;
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        if waiting.is_empty() {
            return Ok(());
        }
        let mut tx = crate::store::write(&self.db).await?;
        // Most nodes are ONLINE: their times are written in one statement.
        let times: Vec<(&str, i64)> = waiting.iter().map(|(id, r)| (id.as_str(), r.at)).collect();
        let dialect = tx.dialect();
        let seen_at = dialect.greatest("last_seen_at", "CAST(reading.value ->> 1 AS BIGINT)");
        let readings = dialect.json_elements("$1", "reading");
        let online: HashSet<String> = sql!(tx, |conn| {
            sqlx::query_scalar(&format!(
                "UPDATE nodes SET last_seen_at = {seen_at} FROM {readings}
             WHERE nodes.id = reading.value ->> 0 AND nodes.status = 'ONLINE'
             RETURNING nodes.id"
            ))
            .bind(serde_json::to_string(&times).map_err(anyhow::Error::from)?)
            .fetch_all(conn)
            .await
        })?
        .into_iter()
        .collect();
        let mut reconnected = false;
        let mut gpus = Vec::with_capacity(waiting.len());
        for (node_id, reading) in &waiting {
            if !online.contains(node_id) {
                let Some((status, name)) = sql!(tx, |conn| {
                    sqlx::query_as::<_, (String, String)>("SELECT status, name FROM nodes WHERE id = $1")
                        .bind(node_id)
                        .fetch_optional(conn)
                        .await
                })?
                else {
                    continue; // deleted since it polled
                };
                let seen_at = dialect.greatest("last_seen_at", "$1");
                sql!(tx, |conn| {
                    sqlx::query(&format!(
                        "UPDATE nodes SET status = 'ONLINE', last_seen_at = {seen_at} WHERE id = $2"
                    ))
                    .bind(reading.at)
                    .bind(node_id)
                    .execute(conn)
                    .await
                    .map(|_| ())
                })?;
                if status == "OFFLINE" {
                    record_reconnect(&mut tx, node_id, &name, reading.at).await?;
                    reconnected = true;
                }
            }
            gpus.push((node_id.as_str(), &reading.gpus[..]));
        }
        write_gpus(&mut tx, &gpus).await?;
        tx.commit().await?;
        if reconnected {
            self.wakes.wake(Wake::Nodes);
            self.wakes.jobs_changed();
        }
        Ok(())
    }
}

/// Runs until shutdown: writes the waiting readings when some arrive, at
/// most every [`Heartbeats::flush_every`].
pub async fn writer(
    heartbeats: Arc<Heartbeats>,
    heartbeat_interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let every = Heartbeats::flush_every(heartbeat_interval);
    loop {
        tokio::select! {
            () = heartbeats.arrived.notified() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        if let Err(error) = heartbeats.flush().await {
            tracing::warn!(%error, "writing heartbeats failed; will try again");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}
