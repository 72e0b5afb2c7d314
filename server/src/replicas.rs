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
//! On PostgreSQL each replica also hears the others' wake-ups ([`listen`])
//! and acts on them as if they had happened here (`wake.rs` sends them).

use crate::state::AppState;
use crate::wake::{CHANNEL, Wake};
use sqlx::postgres::{PgListener, PgPool};
use sqlx::{Connection, PgConnection};
use std::time::Duration;
use tokio::sync::watch;

/// The advisory lock the leader holds, as long as its connection lives.
/// (Writers take turns on another one, [`crate::store::write`].)
const LEADER_LOCK: i64 = 0x4750_4c44; // "GPLD"

/// How often a replica that does not lead tries for the lock, and how
/// often the leader checks that its lock's connection is still there.
pub const LEADER_RETRY: Duration = Duration::from_secs(1);

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
        state.wakes.wake_everything_here();
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
                    if replica == state.wakes.replica_id() {
                        continue;
                    }
                    match Wake::decode(wake) {
                        Some(wake) => state.wakes.wake_here(&wake),
                        None => tracing::debug!(wake, "a wake-up this version does not know"),
                    }
                }
                // Lost and reconnected on the next call.
                Ok(None) => state.wakes.wake_everything_here(),
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
            replica = state.wakes.replica_id(),
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
