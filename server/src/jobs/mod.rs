//! Jobs from submit to end. Pure parts (specs are validated by
//! `gpuplane_api::spec`, shared with gpuctl): `plan` (one scheduling pass), `failure` (how an attempt ended),
//! `dependencies` (whether a job's `after` jobs let it run), `node_access`
//! (which nodes a project's node policy opens to a job), `fair_share`'s
//! `order` (who goes first among equal priorities; its `usage` reads the
//! database), `windows` (a node pool's daily scheduling window).
//! Storage and transactions: `store` (submit, read, list, cancel, retry),
//! `scheduler` (its loop and the transaction that applies a plan),
//! `dispatch` (what agents are told on hello and poll), `reports` (applying
//! what agents report), `lifecycle` (ending attempts and jobs, retries,
//! lost attempts), `maintenance` (maintenance mode: a pause of all
//! dispatch), `quotas` (per project and per user, read by each pass),
//! `node_policies` (projects' node policies, read by each pass and submit),
//! `priorities` (who may give which priority). The
//! pure parts use no other module; of the rest, each uses only the pure
//! parts and those listed after it.

pub mod dependencies;
pub mod dispatch;
pub mod failure;
pub mod fair_share;
pub mod lifecycle;
pub mod maintenance;
pub mod node_access;
pub mod node_policies;
pub mod plan;
pub mod priorities;
pub mod quotas;
pub mod reports;
pub mod scheduler;
pub mod store;
pub mod windows;
