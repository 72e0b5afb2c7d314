//! One scheduling pass as a pure function: given the queue (highest priority
//! first, FIFO within a priority) and the online nodes, decide every job that
//! can start now and why each other job waits.
//!
//! - Every job that fits is placed in the same pass.
//! - GPU jobs go to the node where they fit most tightly (keeping large holes
//!   for large jobs); cpu jobs (gpu = 0) to the matching node with the
//!   emptiest cpu lane.
//! - Backfill without starvation: a GPU job that cannot fit *holds* the
//!   matching node with the most free GPUs. Lower jobs may use any other
//!   node, but not the held node's GPUs, so they accumulate there as jobs
//!   finish until the held job fits. cpu jobs need no GPUs and are never held up.
//! - Gangs (`nodes > 1`, `gang`): all members at once on distinct nodes
//!   (sharing a `colocate` label value) or none; a gang that waits holds
//!   every node it needs or none, so gangs never deadlock each other.
//! - Quotas: a job that would take its project or its user past a quota
//!   waits (and holds nothing); jobs behind it still start.
//! - Preemption (when `preempt_priority` is set): a GPU job of at least that
//!   priority that fits nowhere picks the node where stopping the fewest
//!   running jobs of lower priority frees enough GPUs, marks them to stop
//!   (lowest priority, then most recently started, first) and holds the
//!   node until they have. Jobs already stopping count as freed, so later
//!   passes wait for them instead of stopping more.
//! - The queue's order within a priority is fair share's (`fair_share`);
//!   a job it passed carries a note that capacity reasons end with.
//! - Node policies (`node_access`): a job only ever sees the nodes its
//!   project may use with its runner; its `node_selector` chooses among them.

mod gang;
mod pass;
mod preemption;

use crate::config::windows::WindowState;
use crate::jobs::node_access::NodeAccess;
use gpuplane_api::job::Runner;
use pass::Pass;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Debug, Clone)]
pub struct QueuedJob {
    pub id: String,
    pub gpus: u32,
    pub priority: i64,
    pub node_selector: BTreeMap<String, String>,
    pub runner: Runner,
    /// Automatic retry cooldown: not before this time (epoch ms).
    pub not_before: Option<i64>,
    /// The attempt it would start, and its limit (for the cooldown reason).
    pub next_attempt: i64,
    pub max_attempts: i64,
    pub project: String,
    /// The id of the user who submitted it.
    pub user: Option<String>,
    /// Jobs it waits for; the pass holds it back until they end as it needs
    /// (`dependencies`), so `plan` never sees it before.
    pub after: Vec<gpuplane_api::job::Dependency>,
    /// When it entered the queue (epoch ms): fair share's tie-break and aging.
    pub queued_at: i64,
    /// Why jobs submitted after it go first (`fair_share::order`), if they do.
    pub fair_share_note: Option<String>,
    /// Its `time_limit_s` in ms: whether it ends inside a scheduling window.
    pub time_limit_ms: Option<i64>,
    /// The node that recorded the checkpoint it resumes from (`resume`):
    /// placed there when that node fits it, else wherever fits best.
    pub resume_node: Option<String>,
    /// How many nodes it runs on at once (`resources.nodes`), each with
    /// `gpus`: more than one makes it a gang, placed whole or not at all.
    pub nodes: u32,
    /// A gang's members share this node label's value (`resources.colocate`).
    pub colocate: Option<String>,
    /// The job array it is a task of: its `%` limit is in [`Quotas::arrays`].
    pub array: Option<String>,
}

/// The GPUs per node and the nodes the pass plans a job with. A Slurm job
/// on several nodes is one sbatch allocation from one login host, whose
/// GPUs stand for the cluster's: one node with all of its GPUs, no gang.
pub fn shape(runner: Runner, gpus: u32, nodes: u32) -> (u32, u32) {
    match runner {
        Runner::Slurm => (gpus.saturating_mul(nodes.max(1)), 1),
        _ => (gpus, nodes.max(1)),
    }
}

impl QueuedJob {
    /// The GPUs it takes in all: `gpus` on each of its nodes.
    pub fn total_gpus(&self) -> u32 {
        self.gpus.saturating_mul(self.nodes.max(1))
    }
}

/// The quotas of one pass, keyed by project name and by user id, and the
/// `%` limits of the job arrays in the queue, keyed by array id.
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    pub projects: HashMap<String, Quota>,
    pub users: HashMap<String, Quota>,
    pub arrays: HashMap<String, ArrayLimit>,
}

/// A job array's `%` limit and how many of its tasks hold a node now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayLimit {
    pub max_running: u32,
    pub running: u32,
}

/// One project's or user's limits and what it has running.
#[derive(Debug, Clone)]
pub struct Quota {
    /// `project vision`, `user alice`: how reasons name it.
    pub label: String,
    pub max_gpus: Option<u32>,
    pub max_running_jobs: Option<u32>,
    pub gpus_in_use: u32,
    pub running_jobs: u32,
}

impl Quota {
    /// Why `job` may not start under this quota, if it may not.
    fn refuses(&self, job: &QueuedJob) -> Option<String> {
        let need = job.total_gpus();
        if let Some(max) = self.max_gpus
            && need > 0
            && self.gpus_in_use + need > max
        {
            return Some(if need > max {
                format!(
                    "quota: this job needs {} but {} may use at most {max}",
                    gpus(need as usize),
                    self.label
                )
            } else if self.gpus_in_use >= max {
                format!("quota: {} uses {} of {max} GPUs", self.label, self.gpus_in_use)
            } else {
                format!(
                    "quota: {} uses {} of {max} GPUs; this job needs {need}",
                    self.label, self.gpus_in_use
                )
            });
        }
        match self.max_running_jobs {
            Some(max) if self.running_jobs >= max => Some(format!(
                "quota: {} runs {} of {max} jobs",
                self.label, self.running_jobs
            )),
            _ => None,
        }
    }

    fn charge(&mut self, job: &QueuedJob) {
        self.gpus_in_use += job.total_gpus();
        self.running_jobs += 1;
    }
}

impl Quotas {
    /// Why `job` may not start now under these quotas, if it may not.
    pub fn refuses(&self, job: &QueuedJob) -> Option<String> {
        let project = self.projects.get(&job.project);
        let user = job.user.as_ref().and_then(|user| self.users.get(user));
        let quota = project
            .into_iter()
            .chain(user)
            .find_map(|quota| quota.refuses(job));
        quota.or_else(|| {
            let id = job.array.as_ref()?;
            let limit = self.arrays.get(id)?;
            (limit.running >= limit.max_running).then(|| {
                format!(
                    "array {id}: {} of its tasks run, at most {} at once (%{})",
                    limit.running, limit.max_running, limit.max_running
                )
            })
        })
    }

    fn charge(&mut self, job: &QueuedJob) {
        if let Some(limit) = job.array.as_ref().and_then(|id| self.arrays.get_mut(id)) {
            limit.running += 1;
        }
        if let Some(quota) = self.projects.get_mut(&job.project) {
            quota.charge(job);
        }
        if let Some(quota) = job.user.as_ref().and_then(|user| self.users.get_mut(user)) {
            quota.charge(job);
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeCapacity {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The runners its agent offers (`None`: it does not say; it gets no jobs).
    pub runners: Option<Vec<Runner>>,
    /// Indices of every GPU on the node.
    pub gpus: Vec<u32>,
    /// Indices held by DISPATCHING or RUNNING attempts.
    pub busy_gpus: BTreeSet<u32>,
    /// cpu_only-lane attempts running on the node.
    pub cpu_jobs: u32,
    /// The GPU attempts running on it (what preemption may stop).
    pub running: Vec<RunningAttempt>,
    /// Its pool's scheduling window now, if its pool has one (`windows`).
    pub window: Option<WindowState>,
}

/// A DISPATCHING or RUNNING attempt holding GPUs.
#[derive(Debug, Clone)]
pub struct RunningAttempt {
    pub job_id: String,
    pub attempt: i64,
    pub priority: i64,
    pub gpus: u32,
    /// Started (else dispatched) at, epoch ms: the newest loses least work.
    pub started_at: i64,
    /// Already told to stop for another job.
    pub preempted: bool,
    /// RUNNING, not still DISPATCHING (only a started job can be stopped).
    pub started: bool,
}

/// A running attempt the pass stops so that `for_job` can take its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    pub job_id: String,
    pub attempt: i64,
    pub node_id: String,
    pub for_job: String,
    pub for_priority: i64,
}

/// Where a job starts: its node and GPUs (rank 0's, for a gang), and a
/// gang's other members' in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub job_id: String,
    pub node_id: String,
    pub gpus: Vec<u32>,
    pub others: Vec<(String, Vec<u32>)>,
}

#[derive(Debug, Default)]
pub struct Plan {
    pub placements: Vec<Placement>,
    /// Why each job that stays QUEUED waits.
    pub reasons: Vec<(String, String)>,
    /// The earliest cooldown end among waiting jobs: plan again then.
    pub wake_at: Option<i64>,
    /// Jobs whose node_selector matches no node of this pass.
    pub unmatched: Vec<String>,
    /// Running attempts to stop for higher-priority jobs.
    pub preemptions: Vec<Preemption>,
}

/// Nodes matching one node_selector that one node policy allows for one
/// runner, and what this pass learned about them.
/// Within a pass free GPUs only shrink and holds only grow, which is what
/// lets a group answer later jobs without scanning its nodes again.
struct Group {
    nodes: Vec<usize>,
    largest_total: usize,
    /// Matching nodes nobody holds yet.
    unheld: usize,
    /// The highest-priority job holding one of the matching nodes.
    top_holder: Option<usize>,
    /// No matching node has a free cpu slot left.
    cpu_full: bool,
    /// With no node: why, and whether the selector alone matches none.
    why_empty: Option<(String, bool)>,
}

/// What a pass may do besides placing jobs in free GPUs.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub cpu_slots_per_node: u32,
    /// Jobs with at least this priority may preempt; `None`: no preemption.
    pub preempt_priority: Option<i64>,
}

/// Plans one pass. `queue` must be in dispatch order.
pub fn plan(
    queue: &[QueuedJob],
    nodes: &[NodeCapacity],
    quotas: &Quotas,
    access: &NodeAccess,
    rules: Rules,
    now_ms: i64,
) -> Plan {
    let mut pass = Pass::new(queue, nodes, quotas, access, rules, now_ms);
    for (position, job) in queue.iter().enumerate() {
        if let Some(not_before) = job.not_before.filter(|t| *t > now_ms) {
            pass.cooling_down(job, not_before);
            continue;
        }
        let g = pass.group_of(job);
        if let Some((reason, unmatched)) = pass.groups[g].why_empty.clone() {
            if unmatched {
                pass.plan.unmatched.push(job.id.clone());
            }
            pass.wait(job, reason);
            continue;
        }
        if let Some(reason) = pass.quotas.refuses(job) {
            pass.wait(job, reason);
            continue;
        }
        if job.nodes > 1 {
            pass.place_gang(position, job, g);
        } else if job.gpus == 0 {
            pass.place_cpu_job(job, g);
        } else {
            pass.place_gpu_job(position, job, g);
        }
    }
    pass.plan
}

/// Whether `node` carries every label of `selector`.
fn selects(selector: &BTreeMap<String, String>, node: &NodeCapacity) -> bool {
    selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
}

/// Why no node is there for `job` (`reserved`: which nodes a policy
/// reserves), and whether its node_selector alone
/// matches none (rather than its node policy keeping it off those that do).
fn why_no_node(
    job: &QueuedJob,
    nodes: &[NodeCapacity],
    reserved: &[bool],
    access: &NodeAccess,
) -> (String, bool) {
    let offers: Vec<(&str, Option<&[Runner]>, bool)> = nodes
        .iter()
        .zip(reserved)
        .filter(|(node, _)| selects(&job.node_selector, node))
        .map(|(node, &reserved)| (node.name.as_str(), node.runners.as_deref(), reserved))
        .collect();
    if offers.is_empty() {
        return (no_matching_node(&job.node_selector, nodes.is_empty()), true);
    }
    (
        access.waiting_reason(&job.project, job.runner, !job.node_selector.is_empty(), &offers),
        false,
    )
}

/// Why `job` may not start on `node` now because of the node's scheduling
/// window, and when the window next opens.
fn window_refusal(node: &NodeCapacity, job: &QueuedJob, now_ms: i64) -> Option<(String, i64)> {
    let window = node.window.as_ref()?;
    Some((window.refuses(job.time_limit_ms, now_ms)?, window.next_open))
}

/// A capacity reason, with fair share's note when later jobs passed this one.
fn with_fair_share_note(job: &QueuedJob, reason: String) -> String {
    match &job.fair_share_note {
        Some(note) => format!("{reason}; {note}"),
        None => reason,
    }
}

fn gpus(n: usize) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}

fn no_matching_node(selector: &BTreeMap<String, String>, no_nodes: bool) -> String {
    if selector.is_empty() || no_nodes {
        return "no node is online: start gpuplane-agent on a GPU host".to_string();
    }
    let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("node_selector {} matches no online node", pairs.join(","))
}

#[cfg(test)]
mod tests;
