//! Jobs from submit to end. Pure parts (specs are validated by
//! `gpuplane_api::spec`, shared with gpuctl): `plan` (one scheduling pass), `failure` (how an attempt ended),
//! `dependencies` (whether a job's `after` jobs let it run), `node_access`
//! (which nodes a project's node policy opens to a job), `fair_share`'s
//! `order` (who goes first among equal priorities; its `usage` reads the
//! database); a node pool's daily scheduling window is a setting
//! (`config::windows`), which `plan` judges.
//! Storage and transactions: `usage` (GPU-hours allocated and used),
//! `idle` (GPU_IDLE: running jobs whose GPUs
//! sit idle, stopped when their project says so), `store` (submit, read, list, cancel, retry),
//! `scheduler` (its loop and the transaction that applies a plan),
//! `dispatch` (what agents are told on hello and poll), `reports` (applying
//! what agents report), `hangs` (JOB_HUNG: running jobs whose steps
//! stopped), `liveness` (silent nodes' attempts LOST), `members` (a
//! multi-node attempt's part on each node), `lifecycle`
//! (ending attempts and jobs, retries, lost attempts), `resume` (where a job queued again picks up), `maintenance` (maintenance mode: a pause of all
//! dispatch), `quotas` (per project and per user, read by each pass),
//! `node_policies` (projects' node policies, read by each pass and submit),
//! `priorities` (who may give which priority). The
//! pure parts use no other module; of the rest, each uses only the pure
//! parts and those listed after it.

pub mod arrays;
pub mod cancel;
pub mod dependencies;
pub mod dispatch;
pub mod evaluations;
pub mod failure;
pub mod fair_share;
pub mod hangs;
pub mod idle;
pub mod lifecycle;
pub mod liveness;
pub mod maintenance;
pub mod members;
pub mod node_access;
pub mod node_policies;
pub mod plan;
pub mod priorities;
pub mod quotas;
pub mod reports;
pub mod resume;
pub mod scheduler;
pub mod store;
pub mod usage;

use crate::config::ServerConfig;
use crate::identity::secrets::SecretKey;
use crate::nodes::agent_link::AgentLink;
use crate::store::Db;
use crate::wake::Wakes;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

/// What the scheduler, dispatch and reports need of the server: the
/// database, the settings, the key that signs sdk tokens and opens
/// secrets, wake-ups, and the agents' live link. Handlers get it from the
/// server's state (`FromRef`).
#[derive(Clone)]
pub struct Handles {
    pub db: Db,
    pub config: Arc<ServerConfig>,
    pub secret: SecretKey,
    pub wakes: Wakes,
    pub agents: Arc<AgentLink>,
    /// What `/metrics` shows of passes, dispatches and starts.
    pub observed: Arc<crate::observe::Observed>,
    /// Added to the time scheduling windows are judged at (ms). Always 0 in
    /// service; tests move it to see a window open or close.
    pub window_clock_offset_ms: Arc<AtomicI64>,
}
