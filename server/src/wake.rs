//! Wake-ups: what one part of a server tells another. The scheduler hears
//! that the queue changed, an agent's long poll that it has commands, an
//! SSE follower that events or lines arrived. [`Wakes::wake`] acts on a
//! [`Wake`] here at once and, on PostgreSQL, also sends it to the other
//! replicas (`NOTIFY gpuplane`, a batch at a time, from one task), which
//! act on it as if it had happened there (`replicas::listen`).
//!
//! A leaf: it knows the database pool and nothing else of the server, so
//! the state, the replicas and the domain modules all use it.

use crate::store::Db;
use sqlx::postgres::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc};

/// The channel replicas notify each other on.
pub const CHANNEL: &str = "gpuplane";

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
    pub(crate) fn encode(&self) -> String {
        match self {
            Wake::Scheduler => "scheduler".to_string(),
            Wake::Events => "events".to_string(),
            Wake::Nodes => "nodes".to_string(),
            Wake::Agent(node_id) => format!("agent {node_id}"),
            Wake::Log(job_id) => format!("log {job_id}"),
            Wake::Fetch(node_id) => format!("fetch {node_id}"),
        }
    }

    pub fn decode(text: &str) -> Option<Wake> {
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
async fn send(pool: PgPool, replica: String, mut outbox: mpsc::UnboundedReceiver<Wake>) {
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

/// Where each kind of wake-up lands in this process, and the outbox to the
/// other replicas. Cloned freely: one pointer.
#[derive(Clone)]
pub struct Wakes(Arc<Listeners>);

struct Listeners {
    /// This process among the replicas on one database (a new id each start).
    replica_id: String,
    /// On PostgreSQL: wake-ups for the other replicas ([`send`]).
    outbox: Option<mpsc::UnboundedSender<Wake>>,
    /// Whenever a scheduling pass could place something new.
    scheduler: Notify,
    /// When a node connects or sends a heartbeat: the liveness monitor
    /// recomputes its next deadline.
    nodes: Notify,
    /// Something was recorded in `events` (for SSE followers).
    events: broadcast::Sender<()>,
    /// The id of a job with new output lines (for SSE followers).
    log: broadcast::Sender<String>,
    /// What each connected agent's long poll waits on, by node id.
    agents: Mutex<HashMap<String, Arc<Notify>>>,
    /// Nodes that may have full-log fetches waiting in the database
    /// (`nodes::log_relay`), to claim at their next poll here.
    fetches_waiting: Mutex<HashSet<String>>,
}

impl Wakes {
    /// The wake-ups of a server on `db`; on PostgreSQL this starts the task
    /// that sends them to the other replicas.
    pub fn new(db: &Db) -> Self {
        let replica_id = crate::store::ids::new_id("replica");
        let outbox = match db {
            Db::Sqlite(_) => None,
            Db::Postgres(pool) => {
                let (outbox, waiting) = mpsc::unbounded_channel();
                tokio::spawn(send(pool.clone(), replica_id.clone(), waiting));
                Some(outbox)
            }
        };
        Wakes(Arc::new(Listeners {
            replica_id,
            outbox,
            scheduler: Notify::new(),
            nodes: Notify::new(),
            events: broadcast::channel(64).0,
            log: broadcast::channel(1024).0,
            agents: Mutex::default(),
            fetches_waiting: Mutex::default(),
        }))
    }

    /// This process among the replicas on one database.
    pub fn replica_id(&self) -> &str {
        &self.0.replica_id
    }

    /// May other servers share this database (is it PostgreSQL)? Then what
    /// one process kept in memory goes through the database instead.
    pub fn may_have_replicas(&self) -> bool {
        self.0.outbox.is_some()
    }

    /// After a commit that changed jobs or recorded events: a scheduling
    /// pass may place something new, and event followers have news.
    pub fn jobs_changed(&self) {
        self.wake(Wake::Scheduler);
        self.wake(Wake::Events);
    }

    /// Wakes whatever waits for `wake`, here and on the other replicas.
    pub fn wake(&self, wake: Wake) {
        self.wake_here(&wake);
        if let Some(outbox) = &self.0.outbox {
            let _ = outbox.send(wake);
        }
    }

    /// Wakes whatever waits for `wake` in this process only.
    pub fn wake_here(&self, wake: &Wake) {
        match wake {
            Wake::Scheduler => self.0.scheduler.notify_one(),
            Wake::Events => {
                let _ = self.0.events.send(());
            }
            Wake::Nodes => self.0.nodes.notify_one(),
            Wake::Agent(node_id) => self.agent(node_id).notify_one(),
            Wake::Log(job_id) => {
                let _ = self.0.log.send(job_id.clone());
            }
            Wake::Fetch(node_id) => {
                lock(&self.0.fetches_waiting).insert(node_id.clone());
                self.agent(node_id).notify_one();
            }
        }
    }

    /// After wake-ups may have been missed: every loop and long poll here
    /// looks again, for fetches waiting in the database too.
    pub fn wake_everything_here(&self) {
        self.wake_here(&Wake::Scheduler);
        self.wake_here(&Wake::Events);
        self.wake_here(&Wake::Nodes);
        let agents = lock(&self.0.agents);
        let mut fetches = lock(&self.0.fetches_waiting);
        for (node_id, waker) in agents.iter() {
            fetches.insert(node_id.clone());
            waker.notify_one();
        }
    }

    /// What the scheduler waits on between passes.
    pub fn scheduler(&self) -> &Notify {
        &self.0.scheduler
    }

    /// What the liveness monitor waits on between checks.
    pub fn nodes(&self) -> &Notify {
        &self.0.nodes
    }

    /// Hears of every event recorded from now on.
    pub fn subscribe_events(&self) -> broadcast::Receiver<()> {
        self.0.events.subscribe()
    }

    /// Hears the id of every job with new output lines from now on.
    pub fn subscribe_log(&self) -> broadcast::Receiver<String> {
        self.0.log.subscribe()
    }

    /// The notifier a node's long poll waits on.
    pub fn agent(&self, node_id: &str) -> Arc<Notify> {
        lock(&self.0.agents)
            .entry(node_id.to_string())
            .or_default()
            .clone()
    }

    /// Whether the node's poll should claim fetches from the database (once).
    pub fn take_fetch_waiting(&self, node_id: &str) -> bool {
        lock(&self.0.fetches_waiting).remove(node_id)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
