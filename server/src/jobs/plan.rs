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

use crate::jobs::node_access::NodeAccess;
use crate::jobs::windows::WindowState;
use gpuplane_api::job::Runner;
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
}

/// The quotas of one pass, keyed by project name and by user id.
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    pub projects: HashMap<String, Quota>,
    pub users: HashMap<String, Quota>,
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
        if let Some(max) = self.max_gpus
            && job.gpus > 0
            && self.gpus_in_use + job.gpus > max
        {
            return Some(if job.gpus > max {
                format!(
                    "quota: this job needs {} but {} may use at most {max}",
                    gpus(job.gpus as usize),
                    self.label
                )
            } else if self.gpus_in_use >= max {
                format!("quota: {} uses {} of {max} GPUs", self.label, self.gpus_in_use)
            } else {
                format!(
                    "quota: {} uses {} of {max} GPUs; this job needs {}",
                    self.label, self.gpus_in_use, job.gpus
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
        self.gpus_in_use += job.gpus;
        self.running_jobs += 1;
    }
}

impl Quotas {
    /// Why `job` may not start now under these quotas, if it may not.
    pub fn refuses(&self, job: &QueuedJob) -> Option<String> {
        let project = self.projects.get(&job.project);
        let user = job.user.as_ref().and_then(|user| self.users.get(user));
        project
            .into_iter()
            .chain(user)
            .find_map(|quota| quota.refuses(job))
    }

    fn charge(&mut self, job: &QueuedJob) {
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub job_id: String,
    pub node_id: String,
    pub gpus: Vec<u32>,
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
    let cpu_slots_per_node = rules.cpu_slots_per_node;
    let mut quotas = quotas.clone();
    let mut free: Vec<Vec<u32>> = nodes
        .iter()
        .map(|node| {
            node.gpus
                .iter()
                .copied()
                .filter(|gpu| !node.busy_gpus.contains(gpu))
                .collect()
        })
        .collect();
    let mut cpu_jobs: Vec<u32> = nodes.iter().map(|node| node.cpu_jobs).collect();
    // Node index -> index in `queue` of the job holding it.
    let mut held: Vec<Option<usize>> = vec![None; nodes.len()];
    let mut groups: Vec<Group> = Vec::new();
    // (node_selector, whose node policy, runner) -> its group.
    type GroupKey<'a> = (&'a BTreeMap<String, String>, Option<&'a str>, Runner);
    let mut group_of: HashMap<GroupKey, usize> = HashMap::new();
    let reserved: Vec<bool> = nodes.iter().map(|node| access.reserved(&node.labels)).collect();
    // Node index -> the groups it belongs to (to update them when it is held).
    let mut groups_of_node: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut stopping = Stopping::new(nodes, rules.preempt_priority.is_some());
    let mut plan = Plan::default();

    for (position, job) in queue.iter().enumerate() {
        if let Some(not_before) = job.not_before.filter(|t| *t > now_ms) {
            plan.wake_at = Some(plan.wake_at.map_or(not_before, |t| t.min(not_before)));
            plan.reasons.push((
                job.id.clone(),
                format!(
                    "retry cooldown: attempt {} of {} starts at {}",
                    job.next_attempt,
                    job.max_attempts,
                    crate::store::time::rfc3339(not_before)
                ),
            ));
            continue;
        }
        let key = (&job.node_selector, access.key(&job.project), job.runner);
        let g = *group_of.entry(key).or_insert_with(|| {
            let matching: Vec<usize> = (0..nodes.len())
                .filter(|&i| {
                    let node = &nodes[i];
                    selects(&job.node_selector, node)
                        && access.admits(
                            &job.project,
                            job.runner,
                            &node.labels,
                            node.runners.as_deref(),
                            reserved[i],
                        )
                })
                .collect();
            for &i in &matching {
                groups_of_node[i].push(groups.len());
            }
            let top_holder = matching.iter().filter_map(|&i| held[i]).min();
            let why_empty = matching
                .is_empty()
                .then(|| why_no_node(job, nodes, &reserved, access));
            groups.push(Group {
                why_empty,
                largest_total: matching.iter().map(|&i| nodes[i].gpus.len()).max().unwrap_or(0),
                unheld: matching.iter().filter(|&&i| held[i].is_none()).count(),
                top_holder,
                cpu_full: false,
                nodes: matching,
            });
            groups.len() - 1
        });
        let group = &groups[g];
        if let Some((reason, unmatched)) = &group.why_empty {
            plan.reasons.push((job.id.clone(), reason.clone()));
            if *unmatched {
                plan.unmatched.push(job.id.clone());
            }
            continue;
        }
        if let Some(reason) = quotas.refuses(job) {
            plan.reasons.push((job.id.clone(), reason));
            continue;
        }

        if job.gpus == 0 {
            let mut windowed = None;
            let best = if group.cpu_full {
                None
            } else {
                group
                    .nodes
                    .iter()
                    .copied()
                    .filter(|&i| cpu_jobs[i] < cpu_slots_per_node)
                    .filter(|&i| match window_refusal(&nodes[i], job, now_ms) {
                        Some(refusal) => {
                            windowed.get_or_insert(refusal);
                            false
                        }
                        None => true,
                    })
                    .min_by_key(|&i| (cpu_jobs[i], &nodes[i].name))
            };
            if best.is_none()
                && let Some((reason, opens)) = windowed
            {
                plan.wake_at = Some(plan.wake_at.map_or(opens, |t| t.min(opens)));
                plan.reasons.push((job.id.clone(), reason));
                continue;
            }
            match best {
                Some(i) => {
                    cpu_jobs[i] += 1;
                    quotas.charge(job);
                    plan.placements.push(Placement {
                        job_id: job.id.clone(),
                        node_id: nodes[i].id.clone(),
                        gpus: Vec::new(),
                    });
                }
                None => {
                    groups[g].cpu_full = true;
                    let group = &groups[g];
                    let reason = if group.nodes.len() == 1 {
                        format!(
                            "cpu lane full ({cpu_slots_per_node}/{cpu_slots_per_node}) on {}",
                            nodes[group.nodes[0]].name
                        )
                    } else {
                        format!(
                            "cpu lane full on all {} matching nodes ({cpu_slots_per_node}/{cpu_slots_per_node} each)",
                            group.nodes.len()
                        )
                    };
                    plan.reasons
                        .push((job.id.clone(), with_fair_share_note(job, reason)));
                }
            }
            continue;
        }

        let need = job.gpus as usize;
        if need > group.largest_total {
            let reason = if group.largest_total == 0 {
                format!("needs {} but no matching node has GPUs", gpus(need))
            } else {
                format!(
                    "no node can ever fit {} (the largest matching node has {})",
                    gpus(need),
                    group.largest_total
                )
            };
            plan.reasons.push((job.id.clone(), reason));
            continue;
        }
        // One scan over the unheld nodes: the tightest fit, the largest free
        // count, and the node to hold if nothing fits.
        let mut best: Option<usize> = None;
        let mut largest_free = 0;
        let mut to_hold: Option<usize> = None;
        // The first matching node whose scheduling window keeps the job out.
        let mut windowed: Option<(String, i64)> = None;
        if group.unheld > 0 {
            for &i in &group.nodes {
                if held[i].is_some() {
                    continue;
                }
                if let Some(refusal) = window_refusal(&nodes[i], job, now_ms) {
                    windowed.get_or_insert(refusal);
                    continue;
                }
                let available = free[i].len();
                largest_free = largest_free.max(available);
                if available >= need
                    && best.is_none_or(|b| (available, &nodes[i].name) < (free[b].len(), &nodes[b].name))
                {
                    best = Some(i);
                }
                if nodes[i].gpus.len() >= need
                    && to_hold.is_none_or(|h| {
                        available > free[h].len()
                            || (available == free[h].len() && nodes[i].name < nodes[h].name)
                    })
                {
                    to_hold = Some(i);
                }
            }
        }
        if let Some(i) = best {
            let taken: Vec<u32> = free[i].drain(..need).collect();
            quotas.charge(job);
            plan.placements.push(Placement {
                job_id: job.id.clone(),
                node_id: nodes[i].id.clone(),
                gpus: taken,
            });
            continue;
        }
        if let Some(min) = rules.preempt_priority
            && job.priority >= min
            && groups[g].unheld > 0
            && let Some(target) =
                preemption_target(job, nodes, &groups[g].nodes, &held, &free, &stopping, now_ms)
        {
            let i = target.node;
            hold(i, position, &mut held, &mut groups, &groups_of_node);
            let node = &nodes[i];
            let reason = if target.victims.is_empty() {
                let names: Vec<&str> = node
                    .running
                    .iter()
                    .zip(&stopping.attempts[i])
                    .filter(|(_, stopping)| **stopping)
                    .map(|(attempt, _)| attempt.job_id.as_str())
                    .collect();
                format!(
                    "needs {}; waiting for preempted jobs on {} to stop ({}), then it starts there",
                    gpus(need),
                    node.name,
                    names.join(", ")
                )
            } else {
                let mut names = Vec::new();
                for &v in &target.victims {
                    stopping.mark(nodes, i, v);
                    let victim = &node.running[v];
                    names.push(format!("{} (priority {})", victim.job_id, victim.priority));
                    plan.preemptions.push(Preemption {
                        job_id: victim.job_id.clone(),
                        attempt: victim.attempt,
                        node_id: node.id.clone(),
                        for_job: job.id.clone(),
                        for_priority: job.priority,
                    });
                }
                format!(
                    "needs {}; preempting {} on {}: it starts there when they stop",
                    gpus(need),
                    names.join(", "),
                    node.name
                )
            };
            plan.reasons.push((job.id.clone(), reason));
            continue;
        }
        if to_hold.is_none()
            && let Some((reason, opens)) = windowed
        {
            plan.wake_at = Some(plan.wake_at.map_or(opens, |t| t.min(opens)));
            plan.reasons.push((job.id.clone(), reason));
            continue;
        }
        let reason = match to_hold {
            Some(i) => {
                hold(i, position, &mut held, &mut groups, &groups_of_node);
                format!(
                    "needs {}; the largest free on a matching node is {largest_free}; holding {} ({} of {} free) until running jobs there finish",
                    gpus(need),
                    nodes[i].name,
                    free[i].len(),
                    nodes[i].gpus.len()
                )
            }
            None => {
                // Earlier in the queue means higher priority (or same priority, earlier).
                let holder = groups[g].top_holder.map(|h| &queue[h]);
                format!(
                    "needs {}; the largest free on a matching node is {largest_free}, and matching nodes are held for earlier jobs (e.g. {}, priority {}, needs {})",
                    gpus(need),
                    holder.map_or("?", |h| h.id.as_str()),
                    holder.map_or(0, |h| h.priority),
                    gpus(holder.map_or(0, |h| h.gpus as usize))
                )
            }
        };
        plan.reasons
            .push((job.id.clone(), with_fair_share_note(job, reason)));
    }
    plan
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

/// Node `i` is held for the job at `position`: lower jobs may not take its GPUs.
fn hold(
    i: usize,
    position: usize,
    held: &mut [Option<usize>],
    groups: &mut [Group],
    groups_of_node: &[Vec<usize>],
) {
    held[i] = Some(position);
    for &other in &groups_of_node[i] {
        groups[other].unheld -= 1;
        groups[other].top_holder = Some(groups[other].top_holder.map_or(position, |h| h.min(position)));
    }
}

/// Where a job that fits nowhere gets its GPUs by preemption.
struct PreemptionTarget {
    node: usize,
    /// Indices into the node's `running` to stop now; empty when attempts
    /// stopping already free enough.
    victims: Vec<usize>,
}

/// What preemption knows of each node's running GPU attempts during a pass.
struct Stopping {
    /// Node index -> which of its running attempts are stopping (preempted).
    attempts: Vec<Vec<bool>>,
    /// Node index -> GPUs its stopping attempts will free.
    gpus: Vec<u32>,
    /// Node index -> its running attempts in the order preemption takes
    /// them: lowest priority first, among equals the newest (least work lost).
    order: Vec<Vec<usize>>,
}

impl Stopping {
    /// Empty orders when preemption is off (nothing to sort).
    fn new(nodes: &[NodeCapacity], preemption: bool) -> Stopping {
        let attempts: Vec<Vec<bool>> = nodes
            .iter()
            .map(|node| node.running.iter().map(|attempt| attempt.preempted).collect())
            .collect();
        let gpus = nodes
            .iter()
            .map(|node| node.running.iter().filter(|a| a.preempted).map(|a| a.gpus).sum())
            .collect();
        let order = nodes
            .iter()
            .map(|node| {
                let mut order: Vec<usize> = if preemption {
                    (0..node.running.len()).collect()
                } else {
                    Vec::new()
                };
                order.sort_by_key(|&v| {
                    (
                        node.running[v].priority,
                        std::cmp::Reverse(node.running[v].started_at),
                    )
                });
                order
            })
            .collect();
        Stopping {
            attempts,
            gpus,
            order,
        }
    }

    fn mark(&mut self, nodes: &[NodeCapacity], i: usize, v: usize) {
        self.attempts[i][v] = true;
        self.gpus[i] += nodes[i].running[v].gpus;
    }
}

/// The unheld matching node where the job's GPUs come free by stopping the
/// fewest running attempts of lower priority (attempts already stopping
/// count as free): fewest new victims, then fewest GPUs taken from them,
/// then the node's name (nodes come in name order).
fn preemption_target(
    job: &QueuedJob,
    nodes: &[NodeCapacity],
    matching: &[usize],
    held: &[Option<usize>],
    free: &[Vec<u32>],
    stopping: &Stopping,
    now_ms: i64,
) -> Option<PreemptionTarget> {
    let need = job.gpus;
    let mut best: Option<(PreemptionTarget, (usize, u32))> = None;
    for &i in matching {
        let node = &nodes[i];
        if held[i].is_some() || (node.gpus.len() as u32) < need || window_refusal(node, job, now_ms).is_some()
        {
            continue;
        }
        let mut soon = free[i].len() as u32 + stopping.gpus[i];
        if soon >= need {
            // Nothing to stop: no node can do better.
            return Some(PreemptionTarget {
                node: i,
                victims: Vec::new(),
            });
        }
        let mut victims = Vec::new();
        let mut taken = 0;
        for &v in &stopping.order[i] {
            let attempt = &node.running[v];
            if attempt.priority >= job.priority || soon >= need {
                break;
            }
            if stopping.attempts[i][v] || !attempt.started {
                continue;
            }
            soon += attempt.gpus;
            taken += attempt.gpus;
            victims.push(v);
        }
        if soon < need {
            continue;
        }
        let key = (victims.len(), taken);
        if best.as_ref().is_none_or(|(_, best_key)| key < *best_key) {
            best = Some((PreemptionTarget { node: i, victims }, key));
        }
    }
    best.map(|(target, _)| target)
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
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn node(name: &str, gpus: u32, busy: &[u32], labels: &[(&str, &str)]) -> NodeCapacity {
        NodeCapacity {
            id: format!("node_{name}"),
            name: name.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            runners: Some(vec![Runner::Process]),
            gpus: (0..gpus).collect(),
            busy_gpus: busy.iter().copied().collect(),
            cpu_jobs: 0,
            running: Vec::new(),
            window: None,
        }
    }

    fn rules(cpu_slots: u32) -> Rules {
        Rules {
            cpu_slots_per_node: cpu_slots,
            preempt_priority: None,
        }
    }

    fn job(id: &str, gpus: u32, priority: i64) -> QueuedJob {
        QueuedJob {
            id: id.to_string(),
            gpus,
            priority,
            node_selector: BTreeMap::new(),
            runner: Runner::Process,
            not_before: None,
            next_attempt: 1,
            max_attempts: 1,
            project: "default".to_string(),
            user: None,
            after: Vec::new(),
            queued_at: 0,
            fair_share_note: None,
            time_limit_ms: None,
        }
    }

    fn check(queue: &[QueuedJob], nodes: &[NodeCapacity], cpu_slots: u32, expected: Expect) {
        check_with(queue, nodes, &Quotas::default(), cpu_slots, expected);
    }

    /// Renders a plan as `job -> node [gpus]` and `job: reason` lines.
    fn check_with(
        queue: &[QueuedJob],
        nodes: &[NodeCapacity],
        quotas: &Quotas,
        cpu_slots: u32,
        expected: Expect,
    ) {
        let plan = plan(
            queue,
            nodes,
            quotas,
            &NodeAccess::default(),
            rules(cpu_slots),
            1_000_000,
        );
        expected.assert_eq(&render(&plan));
    }

    #[test]
    fn jobs_see_only_the_nodes_their_projects_node_policy_opens() {
        use gpuplane_api::project::NodePolicy;
        let access = NodeAccess::new(HashMap::from([
            (
                "vision".to_string(),
                NodePolicy {
                    labels: BTreeMap::from([("team".to_string(), "vision".to_string())]),
                    runners: vec![Runner::Process, Runner::Docker],
                },
            ),
            (
                "hpc".to_string(),
                NodePolicy {
                    labels: BTreeMap::new(),
                    runners: vec![Runner::Slurm],
                },
            ),
        ]));
        let mut vision_host = node("n1", 2, &[], &[("team", "vision")]);
        vision_host.runners = Some(vec![Runner::Process, Runner::Docker]);
        let plain = node("n2", 2, &[], &[]);
        let mut slurm_host = node("n3", 2, &[], &[]);
        slurm_host.runners = Some(vec![Runner::Slurm]);
        let mut old_agent = node("n4", 2, &[], &[]);
        old_agent.runners = None;
        let of = |id: &str, project: &str, runner: Runner, selector: &[(&str, &str)]| {
            let mut job = job(id, 1, 0);
            job.project = project.to_string();
            job.runner = runner;
            job.node_selector = selector
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            job
        };
        let queue = [
            of("a", "default", Runner::Process, &[]),
            of("b", "default", Runner::Process, &[("team", "vision")]),
            of("c", "vision", Runner::Docker, &[]),
            of("d", "hpc", Runner::Process, &[]),
            of("e", "default", Runner::Docker, &[]),
            of("f", "vision", Runner::Process, &[("team", "nlp")]),
        ];
        let nodes = [vision_host, plain, slurm_host, old_agent];
        let plan = plan(&queue, &nodes, &Quotas::default(), &access, rules(4), 1_000_000);
        expect![[r#"
            a -> n2 [0]
            c -> n1 [0]
            d -> n3 [0]
            b: node policy: the one online node its node_selector matches is not open to a process job of project default (it may use nodes no policy reserves; runners: process; the nodes offer: n1 (process, docker, reserved))
            e: node policy: none of the 4 online nodes is open to a docker job of project default (it may use nodes no policy reserves; runners: process; the nodes offer: n1 (process, docker, reserved), n2 (process), n3 (slurm), n4 (its agent does not say: upgrade it))
            f: node_selector team=nlp matches no online node
        "#]]
        .assert_eq(&render(&plan));
        assert_eq!(
            plan.unmatched,
            ["f"],
            "only a selector matching no node counts as unmatched"
        );
    }

    /// A plan as `job -> node [gpus]`, `stop job#attempt on node for job`
    /// and `job: reason` lines.
    fn render(plan: &Plan) -> String {
        let mut out = String::new();
        for p in &plan.placements {
            out.push_str(&format!(
                "{} -> {} {:?}\n",
                p.job_id,
                p.node_id.trim_start_matches("node_"),
                p.gpus
            ));
        }
        for p in &plan.preemptions {
            out.push_str(&format!(
                "stop {}#{} on {} for {} (priority {})\n",
                p.job_id,
                p.attempt,
                p.node_id.trim_start_matches("node_"),
                p.for_job,
                p.for_priority
            ));
        }
        for (job, reason) in &plan.reasons {
            out.push_str(&format!("{job}: {reason}\n"));
        }
        out
    }

    #[test]
    fn everything_that_fits_is_placed_in_one_pass() {
        check(
            &[job("a", 1, 0), job("b", 2, 0), job("c", 0, 0), job("d", 1, 0)],
            &[node("n1", 4, &[], &[])],
            4,
            expect![[r#"
                a -> n1 [0]
                b -> n1 [1, 2]
                c -> n1 []
                d -> n1 [3]
            "#]],
        );
    }

    #[test]
    fn a_blocked_multi_gpu_head_holds_one_node_and_smaller_jobs_backfill_elsewhere() {
        // n1 has 2 free of 4, n2 has 1 free of 2. The 4-GPU head holds n1;
        // the 1-GPU job backfills onto n2; the cpu job runs anyway.
        check(
            &[
                job("big", 4, 10),
                job("small", 1, 0),
                job("cpu", 0, 0),
                job("small2", 1, 0),
            ],
            &[node("n1", 4, &[0, 1], &[]), node("n2", 2, &[0], &[])],
            4,
            expect![[r#"
                small -> n2 [1]
                cpu -> n1 []
                big: needs 4 GPUs; the largest free on a matching node is 2; holding n1 (2 of 4 free) until running jobs there finish
                small2: needs 1 GPU; the largest free on a matching node is 0; holding n2 (0 of 2 free) until running jobs there finish
            "#]],
        );
    }

    #[test]
    fn the_held_job_starts_once_its_node_frees_up() {
        check(
            &[job("big", 4, 10), job("small", 1, 0)],
            &[node("n1", 4, &[], &[]), node("n2", 2, &[0, 1], &[])],
            4,
            expect![[r#"
                big -> n1 [0, 1, 2, 3]
                small: needs 1 GPU; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
            "#]],
        );
    }

    #[test]
    fn queued_reasons_name_what_is_missing() {
        let mut selective = job("sel", 1, 0);
        selective.node_selector.insert("gpu".into(), "a100".into());
        let mut cooling = job("cool", 1, 0);
        cooling.not_before = Some(1_004_500);
        cooling.next_attempt = 2;
        cooling.max_attempts = 3;
        check(
            &[
                selective,
                job("huge", 16, 0),
                cooling,
                job("cpu1", 0, 0),
                job("cpu2", 0, 0),
            ],
            &[node("n1", 8, &[], &[("gpu", "h100")])],
            1,
            expect![[r#"
                cpu1 -> n1 []
                sel: node_selector gpu=a100 matches no online node
                huge: no node can ever fit 16 GPUs (the largest matching node has 8)
                cool: retry cooldown: attempt 2 of 3 starts at 1970-01-01T00:16:44.500Z
                cpu2: cpu lane full (1/1) on n1
            "#]],
        );
        check(
            &[job("any", 1, 0)],
            &[],
            4,
            expect![[r#"
                any: no node is online: start gpuplane-agent on a GPU host
            "#]],
        );
    }

    #[test]
    fn gpu_jobs_pack_tightly() {
        // The 1-GPU job goes where only 1 is free, keeping n1's 4 for the 4-GPU job.
        check(
            &[job("one", 1, 0), job("four", 4, 0)],
            &[node("n1", 4, &[], &[]), node("n2", 2, &[0], &[])],
            4,
            expect![[r#"
                one -> n2 [1]
                four -> n1 [0, 1, 2, 3]
            "#]],
        );
    }

    #[test]
    fn the_earliest_cooldown_end_is_the_next_wake_up() {
        let mut a = job("a", 1, 0);
        a.not_before = Some(1_009_000);
        let mut b = job("b", 1, 0);
        b.not_before = Some(1_003_000);
        let plan = plan(
            &[a, b],
            &[node("n1", 1, &[], &[])],
            &Quotas::default(),
            &NodeAccess::default(),
            rules(4),
            1_000_000,
        );
        assert_eq!(plan.wake_at, Some(1_003_000));
        assert!(plan.placements.is_empty());
    }

    #[test]
    fn over_quota_jobs_wait_without_holding_anything_and_others_still_start() {
        let in_project = |id: &str, gpus: u32, project: &str, user: &str| QueuedJob {
            project: project.to_string(),
            user: Some(user.to_string()),
            ..job(id, gpus, 0)
        };
        let quota = |label: &str,
                     max_gpus: Option<u32>,
                     max_jobs: Option<u32>,
                     gpus_in_use: u32,
                     running_jobs: u32| Quota {
            label: label.to_string(),
            max_gpus,
            max_running_jobs: max_jobs,
            gpus_in_use,
            running_jobs,
        };
        let quotas = Quotas {
            projects: HashMap::from([
                ("vision".to_string(), quota("project vision", Some(8), None, 6, 2)),
                ("nlp".to_string(), quota("project nlp", None, Some(1), 0, 0)),
            ]),
            users: HashMap::from([("usr_bob".to_string(), quota("user bob", Some(1), None, 1, 1))]),
        };
        check_with(
            &[
                in_project("v1", 2, "vision", "usr_alice"),
                in_project("v2", 1, "vision", "usr_alice"),
                in_project("v-big", 16, "vision", "usr_alice"),
                in_project("n1", 1, "nlp", "usr_alice"),
                in_project("n2", 0, "nlp", "usr_alice"),
                in_project("bob", 1, "default", "usr_bob"),
                in_project("bob-cpu", 0, "default", "usr_bob"),
                in_project("free", 4, "default", "usr_alice"),
            ],
            &[node("n1", 8, &[], &[])],
            &quotas,
            4,
            expect![[r#"
                v1 -> n1 [0, 1]
                n1 -> n1 [2]
                bob-cpu -> n1 []
                free -> n1 [3, 4, 5, 6]
                v2: quota: project vision uses 8 of 8 GPUs
                v-big: quota: this job needs 16 GPUs but project vision may use at most 8
                n2: quota: project nlp runs 1 of 1 jobs
                bob: quota: user bob uses 1 of 1 GPUs
            "#]],
        );
        // Partly used: the reason says what the job needs.
        let quotas = Quotas {
            projects: HashMap::from([("vision".to_string(), quota("project vision", Some(8), None, 6, 2))]),
            users: HashMap::new(),
        };
        check_with(
            &[in_project("v4", 4, "vision", "usr_alice")],
            &[node("n1", 8, &[], &[])],
            &quotas,
            4,
            expect![[r#"
                v4: quota: project vision uses 6 of 8 GPUs; this job needs 4
            "#]],
        );
    }

    /// A node of 4 GPUs with attempts running on it: (job, priority, gpus,
    /// started_at, already preempted).
    fn busy_node(name: &str, running: &[(&str, i64, u32, i64, bool)]) -> NodeCapacity {
        let mut node = node(name, 4, &[], &[]);
        let mut next_gpu = 0;
        for &(job_id, priority, gpus, started_at, preempted) in running {
            node.busy_gpus.extend(next_gpu..next_gpu + gpus);
            next_gpu += gpus;
            node.running.push(RunningAttempt {
                job_id: job_id.to_string(),
                attempt: 1,
                priority,
                gpus,
                started_at,
                preempted,
                started: true,
            });
        }
        node
    }

    fn check_preempting(queue: &[QueuedJob], nodes: &[NodeCapacity], expected: Expect) {
        let rules = Rules {
            cpu_slots_per_node: 4,
            preempt_priority: Some(100),
        };
        let access = NodeAccess::default();
        expected.assert_eq(&render(&plan(
            queue,
            nodes,
            &Quotas::default(),
            &access,
            rules,
            1_000_000,
        )));
    }

    #[test]
    fn an_urgent_job_preempts_the_fewest_lowest_newest_jobs_and_holds_their_node() {
        check_preempting(
            &[job("urgent", 2, 100), job("small", 1, 0)],
            &[
                // n1: two jobs would have to stop (the priority-50 one is
                // taken last, so a and b); n2: one is enough, and of its two
                // priority-0 jobs the newest loses least work.
                busy_node(
                    "n1",
                    &[
                        ("a", 0, 1, 10, false),
                        ("b", 0, 1, 20, false),
                        ("c", 50, 2, 30, false),
                    ],
                ),
                busy_node("n2", &[("old", 0, 2, 10, false), ("new", 0, 2, 50, false)]),
            ],
            expect![[r#"
                stop new#1 on n2 for urgent (priority 100)
                urgent: needs 2 GPUs; preempting new (priority 0) on n2: it starts there when they stop
                small: needs 1 GPU; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
            "#]],
        );
    }

    #[test]
    fn jobs_already_stopping_are_waited_for_not_stopped_again() {
        check_preempting(
            &[job("urgent", 2, 100)],
            &[busy_node("n1", &[("a", 0, 2, 10, true), ("b", 0, 2, 20, false)])],
            expect![[r#"
                urgent: needs 2 GPUs; waiting for preempted jobs on n1 to stop (a), then it starts there
            "#]],
        );
    }

    #[test]
    fn no_preemption_below_the_threshold_of_equal_priorities_or_when_it_would_not_free_enough() {
        let n1 = || {
            [busy_node(
                "n1",
                &[("low", 0, 2, 10, false), ("same", 150, 2, 20, false)],
            )]
        };
        // 99 is below preempt_priority: it waits as any job does.
        check_preempting(
            &[job("below", 2, 99)],
            &n1(),
            expect![[r#"
                below: needs 2 GPUs; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
            "#]],
        );
        // Stopping "low" frees 2, and "same" has the job's own priority.
        check_preempting(
            &[job("peer", 4, 150)],
            &n1(),
            expect![[r#"
                peer: needs 4 GPUs; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
            "#]],
        );
        // The node a preempting job holds is nobody else's to preempt on.
        check_preempting(
            &[job("peer", 2, 150), job("urgent", 2, 120)],
            &n1(),
            expect![[r#"
                stop low#1 on n1 for peer (priority 150)
                peer: needs 2 GPUs; preempting low (priority 0) on n1: it starts there when they stop
                urgent: needs 2 GPUs; the largest free on a matching node is 0, and matching nodes are held for earlier jobs (e.g. peer, priority 150, needs 2 GPUs)
            "#]],
        );
    }

    #[test]
    fn a_job_passed_by_fair_share_says_so_in_its_capacity_reason() {
        let passed = QueuedJob {
            fair_share_note: Some("fair share: …".to_string()),
            ..job("passed", 1, 0)
        };
        check(
            &[job("light", 1, 0), passed],
            &[node("n1", 1, &[], &[])],
            4,
            expect![[r#"
                light -> n1 [0]
                passed: needs 1 GPU; the largest free on a matching node is 0; holding n1 (0 of 1 free) until running jobs there finish; fair share: …
            "#]],
        );
    }

    #[test]
    fn scheduling_windows_keep_out_jobs_that_would_not_end_inside_them() {
        use crate::jobs::windows::Window;
        let day = 1_796_083_200_000; // 2026-12-01T00:00:00Z
        let now = day + 5 * 3_600_000 + 30 * 60_000; // 05:30, half an hour before the night ends
        let mut night = node("night-1", 2, &[], &[("pool", "night")]);
        night.window = Some(Window::parse("pool=night 20:00-06:00").unwrap().at(now));
        let day_node = node("day-1", 1, &[], &[("pool", "day")]);
        let with_limit = |id: &str, minutes: Option<i64>, pool: &str| QueuedJob {
            time_limit_ms: minutes.map(|m| m * 60_000),
            node_selector: BTreeMap::from([("pool".to_string(), pool.to_string())]),
            runner: Runner::Process,
            ..job(id, 1, 0)
        };
        let queue = [
            with_limit("two-hours", Some(120), "night"),
            with_limit("ten-minutes", Some(10), "night"),
            with_limit("no-limit", None, "night"),
            with_limit("daytime", Some(120), "day"),
        ];
        let plan = plan(
            &queue,
            &[night, day_node],
            &Quotas::default(),
            &NodeAccess::default(),
            rules(4),
            now,
        );
        expect![[r#"
            ten-minutes -> night-1 [0]
            no-limit -> night-1 [1]
            daytime -> day-1 [0]
            two-hours: its time limit 2h does not fit in what is left of scheduling window pool=night 20:00-06:00 UTC (30m): it starts when the window opens at 2026-12-01T20:00:00.000Z (in 14h30m)
        "#]]
        .assert_eq(&render(&plan));
        assert_eq!(
            plan.wake_at,
            Some(day + 20 * 3_600_000),
            "planned again when the window opens"
        );
    }
}
