//! Several servers on one PostgreSQL: which one leads, and the wake-ups
//! that cross between them.
//!
//! Every replica serves the API, the console and agents. One of them, the
//! leader, also runs the background work that must run once: the
//! scheduler, the liveness monitor, metric compaction, alert delivery and
//! housekeeping. It leads while it holds a session-level advisory lock on
//! a connection of its own ([`LEADER_LOCK`]); the others try for it every
//! [`LEADER_RETRY`], so when the leader dies (its connection, and the lock,
//! go with it) another leads within about a second. On SQLite there is
//! one server, and it always leads.
//!
//! A [`Wake`] is what one part of a server tells another: the scheduler
//! that the queue changed, an agent's long poll that it has commands, an
//! SSE follower that events or lines arrived. [`AppState::wake`] acts on
//! it here at once and, on PostgreSQL, also sends it to the other
//! replicas (`NOTIFY gpuplane`, a batch at a time, from one task), which
//! act on it as if it had happened there ([`listen`]).

use crate::state::AppState;
use sqlx::postgres::{PgListener, PgPool};
use sqlx::{Connection, PgConnection};
use std::collections::HashSet;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The channel replicas notify each other on.
const CHANNEL: &str = "gpuplane";

/// The advisory lock the leader holds, as long as its connection lives.
/// (Writers take turns on another one, [`crate::store::write`].)
const LEADER_LOCK: i64 = 0x4750_4c44; // "GPLD"

/// How often a replica that does not lead tries for the lock, and how
/// often the leader checks that its lock's connection is still there.
pub const LEADER_RETRY: Duration = Duration::from_secs(1);

/// Something changed that another part of the server waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Wake {
    /// The queue or the nodes changed: a scheduling pass may place something.
    Scheduler,
    /// Something was recorded in `events`.
    Events,
    /// A node said hello or came back: the liveness monitor's deadlines moved.
    Nodes,
    /// The node with this id has commands waiting (its agent's long poll ends).
    Agent(String),
    /// The job with this id has new output lines.
    Log(String),
    /// The node with this id has a full-log fetch waiting in the database
    /// (`nodes::log_relay`): whichever replica its agent polls hands it over.
    Fetch(String),
}

impl Wake {
    fn encode(&self) -> String {
        match self {
            Wake::Scheduler => "scheduler".to_string(),
            Wake::Events => "events".to_string(),
            Wake::Nodes => "nodes".to_string(),
            Wake::Agent(node_id) => format!("agent {node_id}"),
            Wake::Log(job_id) => format!("log {job_id}"),
            Wake::Fetch(node_id) => format!("fetch {node_id}"),
        }
    }

    fn decode(text: &str) -> Option<Wake> {
        match text.split_once(' ') {
            None => match text {
                "scheduler" => Some(Wake::Scheduler),
                "events" => Some(Wake::Events),
                "nodes" => Some(Wake::Nodes),
                _ => None,
            },
            Some(("agent", node_id)) => Some(Wake::Agent(node_id.to_string())),
            Some(("log", job_id)) => Some(Wake::Log(job_id.to_string())),
            Some(("fetch", node_id)) => Some(Wake::Fetch(node_id.to_string())),
            Some(_) => None,
        }
    }
}

/// How often at most this replica notifies the others: ingest wakes event
/// followers with every batch, hundreds a second, and each notifying
/// commit takes PostgreSQL's notify lock; what arrives meanwhile goes in
/// the next statement, its repeats once.
const SEND_EVERY: Duration = Duration::from_millis(10);

/// Sends this replica's wake-ups to the others: each batch waiting is one
/// statement (`pg_notify` over an array), its repeats sent once, at most
/// every [`SEND_EVERY`]. A payload is `REPLICA WAKE`, so a replica knows
/// its own and skips them.
pub async fn send(pool: PgPool, replica: String, mut outbox: mpsc::UnboundedReceiver<Wake>) {
    let mut batch = Vec::new();
    while outbox.recv_many(&mut batch, 1024).await > 0 {
        tokio::time::sleep(SEND_EVERY).await;
        while let Ok(wake) = outbox.try_recv() {
            batch.push(wake);
        }
        let unique: HashSet<Wake> = batch.drain(..).collect();
        let payloads: Vec<String> = unique
            .iter()
            .map(|wake| format!("{replica} {}", wake.encode()))
            .collect();
        let sent = sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&pool)
            .await;
        if let Err(error) = sent {
            // The other replicas' timers still run; each wake is a shortcut.
            tracing::warn!(%error, "could not tell the other replicas what changed");
        }
    }
}

/// Acts on the other replicas' wake-ups until shutdown. When the listening
/// connection is lost, whatever was sent meanwhile is gone: everything is
/// woken once, and the loops look again.
pub async fn listen(state: AppState, pool: PgPool) {
    let mut shutdown = state.shutdown.clone();
    loop {
        let mut listener = match connect_listener(&pool).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(%error, "cannot listen to the other replicas; trying again");
                tokio::select! {
                    () = tokio::time::sleep(LEADER_RETRY) => continue,
                    _ = shutdown.wait_for(|stop| *stop) => return,
                }
            }
        };
        state.wake_everything_here();
        loop {
            let notification = tokio::select! {
                notification = listener.try_recv() => notification,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            match notification {
                Ok(Some(notification)) => {
                    let Some((replica, wake)) = notification.payload().split_once(' ') else {
                        continue;
                    };
                    if replica == state.replica_id {
                        continue;
                    }
                    match Wake::decode(wake) {
                        Some(wake) => state.wake_here(&wake),
                        None => tracing::debug!(wake, "a wake-up this version does not know"),
                    }
                }
                // Lost and reconnected on the next call.
                Ok(None) => state.wake_everything_here(),
                Err(error) => {
                    tracing::warn!(%error, "lost the other replicas' wake-ups; listening again");
                    break;
                }
            }
        }
    }
}

async fn connect_listener(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Runs `work` while this server leads, until shutdown. `work` gets a
/// receiver that turns true when it must stop: at shutdown, or when the
/// lock was lost (another replica may lead by then). Writes stay correct
/// even while two replicas believe they lead for a moment: writers take
/// turns, and every claim is conditional (`WHERE status = 'QUEUED'`).
pub async fn lead<F, Fut>(state: AppState, work: F)
where
    F: Fn(AppState, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut shutdown = state.shutdown.clone();
    let pool = match &state.db {
        crate::store::Db::Sqlite(_) => {
            state.set_leading(true);
            work(state.clone(), shutdown).await;
            return;
        }
        crate::store::Db::Postgres(pool) => pool.clone(),
    };
    loop {
        let Some(mut lock) = take_lock(&state, &pool).await else {
            return;
        };
        tracing::info!(
            replica = state.replica_id,
            "leading: this server runs the scheduler and the liveness monitor"
        );
        state.set_leading(true);
        let (stop, stopped) = watch::channel(false);
        let running = tokio::spawn(work(state.clone(), stopped));
        let ends_with_shutdown = hold_lock(&mut lock, &mut shutdown).await;
        let _ = stop.send(true);
        let _ = running.await;
        state.set_leading(false);
        if ends_with_shutdown {
            // Given back only now: no other replica leads while this one finishes.
            let _ = lock.close().await;
            return;
        }
        tracing::warn!("lost the leader lock's connection; another replica may lead now");
    }
}

/// Waits until this replica holds the leader lock, on a connection of its
/// own; `None` at shutdown.
async fn take_lock(state: &AppState, pool: &PgPool) -> Option<PgConnection> {
    let mut shutdown = state.shutdown.clone();
    loop {
        match try_lock(pool).await {
            Ok(Some(lock)) => return Some(lock),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "cannot ask for the leader lock; trying again"),
        }
        tokio::select! {
            () = tokio::time::sleep(LEADER_RETRY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return None,
        }
    }
}

/// The connection that holds the lock, if it was free.
async fn try_lock(pool: &PgPool) -> Result<Option<PgConnection>, sqlx::Error> {
    let mut conn = pool.acquire().await?.detach();
    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK)
        .fetch_one(&mut conn)
        .await?;
    if taken { Ok(Some(conn)) } else { Ok(None) }
}

/// Checks the lock's connection until shutdown (`true`) or until the
/// connection fails (`false`).
async fn hold_lock(lock: &mut PgConnection, shutdown: &mut watch::Receiver<bool>) -> bool {
    loop {
        tokio::select! {
            () = tokio::time::sleep(LEADER_RETRY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return true,
        }
        let alive = tokio::time::timeout(LEADER_RETRY * 2, lock.ping()).await;
        if !matches!(alive, Ok(Ok(()))) {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wake_reads_back_as_itself() {
        for wake in [
            Wake::Scheduler,
            Wake::Events,
            Wake::Nodes,
            Wake::Agent("node_01".into()),
            Wake::Log("job_01".into()),
            Wake::Fetch("node_01".into()),
        ] {
            assert_eq!(Wake::decode(&wake.encode()), Some(wake));
        }
        assert_eq!(Wake::decode("reboot"), None);
        assert_eq!(Wake::decode("reboot now"), None);
    }
}
