//! The live side of the agent protocol, in memory: one-shot commands
//! waiting for a node's next poll (waking it, `wake.rs`), and full-log fetches
//! relayed from an agent's upload to the user who asked; and the name of
//! each node id seen, which never changes (nodes are neither renamed nor
//! deleted), so an agent's poll checks its node without a query.

use crate::store::Db;
use crate::store::sql;
use crate::wake::{Wake, Wakes};
use axum::body::Body;
use gpuplane_api::agent::AgentCommand;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// An agent's upload and a signal to send when its reader has finished with it.
pub type Upload = (Body, oneshot::Sender<()>);

pub struct AgentLink {
    wakes: Wakes,
    pending: Mutex<HashMap<String, Vec<AgentCommand>>>,
    /// Fetches waiting for an upload: the node asked (by name) and the reader.
    fetches: Mutex<HashMap<String, (String, oneshot::Sender<Upload>)>>,
    /// Node id → node name, for the nodes looked up so far.
    names: Mutex<HashMap<String, String>>,
}

impl AgentLink {
    pub fn new(wakes: Wakes) -> Self {
        AgentLink {
            wakes,
            pending: Mutex::default(),
            fetches: Mutex::default(),
            names: Mutex::default(),
        }
    }

    /// The name of the node with id `node_id`, or `None` if no such node
    /// is registered.
    pub async fn node_name(&self, db: &Db, node_id: &str) -> Result<Option<String>, sqlx::Error> {
        if let Some(name) = self.names.lock().unwrap_or_else(|e| e.into_inner()).get(node_id) {
            return Ok(Some(name.clone()));
        }
        let name: Option<String> = sql!(db, |pool| {
            sqlx::query_scalar("SELECT name FROM nodes WHERE id = $1")
                .bind(node_id)
                .fetch_optional(pool)
                .await
        })?;
        if let Some(name) = &name {
            let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            names.insert(node_id.to_string(), name.clone());
        }
        Ok(name)
    }

    /// Queues a command for the node's next poll.
    pub fn push(&self, node_id: &str, command: AgentCommand) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.entry(node_id.to_string()).or_default().push(command);
        drop(pending);
        self.wakes.wake_here(&Wake::Agent(node_id.to_string()));
    }

    pub fn take_pending(&self, node_id: &str) -> Vec<AgentCommand> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(node_id).unwrap_or_default()
    }

    /// Registers a fetch from the node named `node`; the receiver gets its upload.
    pub fn expect_upload(&self, request_id: &str, node: &str) -> oneshot::Receiver<Upload> {
        let (sender, receiver) = oneshot::channel();
        let mut fetches = self.fetches.lock().unwrap_or_else(|e| e.into_inner());
        fetches.insert(request_id.to_string(), (node.to_string(), sender));
        receiver
    }

    /// Forgets a fetch nobody will answer.
    pub fn abandon_upload(&self, request_id: &str) {
        let mut fetches = self.fetches.lock().unwrap_or_else(|e| e.into_inner());
        fetches.remove(request_id);
    }

    /// The reader waiting here for fetch `request_id` from the node named
    /// `node`, taken; `None` when nobody here waits for it.
    pub fn take_upload(&self, request_id: &str, node: &str) -> Option<oneshot::Sender<Upload>> {
        let mut fetches = self.fetches.lock().unwrap_or_else(|e| e.into_inner());
        if fetches.get(request_id).is_none_or(|(asked, _)| asked != node) {
            return None;
        }
        fetches.remove(request_id).map(|(_, reader)| reader)
    }
}

/// Hands an upload to its reader; the receiver hears when the reader has
/// finished with it (`None`: the reader is gone).
pub fn hand_over(reader: oneshot::Sender<Upload>, body: Body) -> Option<oneshot::Receiver<()>> {
    let (done_sender, done) = oneshot::channel();
    reader.send((body, done_sender)).ok()?;
    Some(done)
}
