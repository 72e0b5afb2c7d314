//! The pass itself: its state as it goes down the queue (what is free,
//! what is held, the groups of nodes met so far) and each job's turn — a
//! cpu job to the emptiest lane, a GPU job to the tightest fit, else
//! preemption, a hold, or a wait with its reason.

use super::preemption::{Stopping, preemption_target};
use super::{Group, NodeCapacity, Placement, Plan, Preemption, QueuedJob, Quotas, Rules};
use super::{gpus, selects, why_no_node, window_refusal, with_fair_share_note};
use crate::jobs::node_access::NodeAccess;
use gpuplane_api::job::Runner;
use std::collections::{BTreeMap, HashMap};

/// (node_selector, whose node policy, runner): jobs alike in these see the same nodes.
pub(super) type GroupKey<'a> = (&'a BTreeMap<String, String>, Option<&'a str>, Runner);

/// One pass's state as it goes down the queue: what is still free, what is
/// held, the groups of nodes met so far, and the plan made.
pub(super) struct Pass<'a> {
    pub(super) queue: &'a [QueuedJob],
    pub(super) nodes: &'a [NodeCapacity],
    pub(super) access: &'a NodeAccess,
    pub(super) rules: Rules,
    pub(super) now_ms: i64,
    pub(super) quotas: Quotas,
    /// Node index -> its free GPUs.
    pub(super) free: Vec<Vec<u32>>,
    /// Node index -> cpu jobs in its lane.
    pub(super) cpu_jobs: Vec<u32>,
    /// Node index -> index in `queue` of the job holding it.
    pub(super) held: Vec<Option<usize>>,
    /// Node index -> whether a node policy reserves it.
    pub(super) reserved: Vec<bool>,
    /// Node index -> whether it is a Slurm login host (never a gang member).
    pub(super) slurm_host: Vec<bool>,
    pub(super) groups: Vec<Group>,
    pub(super) group_index: HashMap<GroupKey<'a>, usize>,
    /// Node index -> the groups it belongs to (to update them when it is held).
    pub(super) groups_of_node: Vec<Vec<usize>>,
    pub(super) stopping: Stopping,
    pub(super) plan: Plan,
}

/// One scan of a group's unheld nodes for a GPU job.
pub(super) struct Scan {
    /// The tightest fit.
    pub(super) best: Option<usize>,
    /// The most free GPUs on one node.
    pub(super) largest_free: usize,
    /// The node to hold if nothing fits.
    pub(super) to_hold: Option<usize>,
    /// The first node whose scheduling window keeps the job out, and when it opens.
    pub(super) windowed: Option<(String, i64)>,
}

impl<'a> Pass<'a> {
    pub(super) fn new(
        queue: &'a [QueuedJob],
        nodes: &'a [NodeCapacity],
        quotas: &Quotas,
        access: &'a NodeAccess,
        rules: Rules,
        now_ms: i64,
    ) -> Pass<'a> {
        let free = nodes
            .iter()
            .map(|node| {
                node.gpus
                    .iter()
                    .copied()
                    .filter(|gpu| !node.busy_gpus.contains(gpu))
                    .collect()
            })
            .collect();
        Pass {
            queue,
            nodes,
            access,
            rules,
            now_ms,
            quotas: quotas.clone(),
            free,
            cpu_jobs: nodes.iter().map(|node| node.cpu_jobs).collect(),
            held: vec![None; nodes.len()],
            reserved: nodes.iter().map(|node| access.reserved(&node.labels)).collect(),
            slurm_host: nodes
                .iter()
                .map(|node| {
                    node.runners
                        .as_deref()
                        .is_some_and(|r| r.contains(&Runner::Slurm))
                })
                .collect(),
            groups: Vec::new(),
            group_index: HashMap::new(),
            groups_of_node: vec![Vec::new(); nodes.len()],
            stopping: Stopping::new(nodes, rules.preempt_priority.is_some()),
            plan: Plan::default(),
        }
    }

    /// `job` waits for `reason`.
    pub(super) fn wait(&mut self, job: &QueuedJob, reason: String) {
        self.plan.reasons.push((job.id.clone(), reason));
    }

    /// Plan again at `at` at the latest.
    pub(super) fn wake_at(&mut self, at: i64) {
        self.plan.wake_at = Some(self.plan.wake_at.map_or(at, |t| t.min(at)));
    }

    pub(super) fn place(&mut self, job: &QueuedJob, node: usize, gpus: Vec<u32>) {
        self.quotas.charge(job);
        self.plan.placements.push(Placement {
            job_id: job.id.clone(),
            node_id: self.nodes[node].id.clone(),
            gpus,
            others: Vec::new(),
        });
    }

    /// A job in its retry cooldown waits until `not_before`.
    pub(super) fn cooling_down(&mut self, job: &QueuedJob, not_before: i64) {
        self.wake_at(not_before);
        let reason = format!(
            "retry cooldown: attempt {} of {} starts at {}",
            job.next_attempt,
            job.max_attempts,
            crate::store::time::rfc3339(not_before)
        );
        self.wait(job, reason);
    }

    /// The group of the nodes `job` may use, made on its first job.
    pub(super) fn group_of(&mut self, job: &'a QueuedJob) -> usize {
        let key = (&job.node_selector, self.access.key(&job.project), job.runner);
        if let Some(&g) = self.group_index.get(&key) {
            return g;
        }
        let nodes = self.nodes;
        let matching: Vec<usize> = (0..nodes.len())
            .filter(|&i| {
                let node = &nodes[i];
                selects(&job.node_selector, node)
                    && self.access.admits(
                        &job.project,
                        job.runner,
                        &node.labels,
                        node.runners.as_deref(),
                        self.reserved[i],
                    )
            })
            .collect();
        let g = self.groups.len();
        for &i in &matching {
            self.groups_of_node[i].push(g);
        }
        let why_empty = matching
            .is_empty()
            .then(|| why_no_node(job, nodes, &self.reserved, self.access));
        self.groups.push(Group {
            why_empty,
            largest_total: matching.iter().map(|&i| nodes[i].gpus.len()).max().unwrap_or(0),
            unheld: matching.iter().filter(|&&i| self.held[i].is_none()).count(),
            top_holder: matching.iter().filter_map(|&i| self.held[i]).min(),
            cpu_full: false,
            nodes: matching,
        });
        self.group_index.insert(key, g);
        g
    }

    /// A cpu job (gpu = 0): the matching node with the emptiest cpu lane.
    pub(super) fn place_cpu_job(&mut self, job: &QueuedJob, g: usize) {
        let slots = self.rules.cpu_slots_per_node;
        let mut windowed = None;
        let best = if self.groups[g].cpu_full {
            None
        } else {
            self.groups[g]
                .nodes
                .iter()
                .copied()
                .filter(|&i| self.cpu_jobs[i] < slots)
                .filter(|&i| match window_refusal(&self.nodes[i], job, self.now_ms) {
                    Some(refusal) => {
                        windowed.get_or_insert(refusal);
                        false
                    }
                    None => true,
                })
                .min_by_key(|&i| (self.cpu_jobs[i], &self.nodes[i].name))
        };
        if let Some(i) = best {
            self.cpu_jobs[i] += 1;
            self.place(job, i, Vec::new());
            return;
        }
        if let Some((reason, opens)) = windowed {
            self.wake_at(opens);
            self.wait(job, reason);
            return;
        }
        self.groups[g].cpu_full = true;
        let group = &self.groups[g];
        let reason = if group.nodes.len() == 1 {
            format!(
                "cpu lane full ({slots}/{slots}) on {}",
                self.nodes[group.nodes[0]].name
            )
        } else {
            format!(
                "cpu lane full on all {} matching nodes ({slots}/{slots} each)",
                group.nodes.len()
            )
        };
        self.wait(job, with_fair_share_note(job, reason));
    }

    /// A GPU job: the tightest fit; else preemption where allowed; else it
    /// holds the matching node with the most free GPUs, or waits for the
    /// jobs holding them.
    pub(super) fn place_gpu_job(&mut self, position: usize, job: &QueuedJob, g: usize) {
        let need = job.gpus as usize;
        let largest_total = self.groups[g].largest_total;
        if need > largest_total {
            let reason = if largest_total == 0 {
                format!("needs {} but no matching node has GPUs", gpus(need))
            } else {
                format!(
                    "no node can ever fit {} (the largest matching node has {largest_total})",
                    gpus(need)
                )
            };
            self.wait(job, reason);
            return;
        }
        let scan = self.scan(job, g, need);
        if let Some(i) = scan.best {
            let taken: Vec<u32> = self.free[i].drain(..need).collect();
            self.place(job, i, taken);
            return;
        }
        if self.preempt_for(position, job, g) {
            return;
        }
        if scan.to_hold.is_none()
            && let Some((reason, opens)) = scan.windowed
        {
            self.wake_at(opens);
            self.wait(job, reason);
            return;
        }
        let largest_free = scan.largest_free;
        let reason = match scan.to_hold {
            Some(i) => {
                self.hold(i, position);
                let node = &self.nodes[i];
                format!(
                    "needs {}; the largest free on a matching node is {largest_free}; holding {} ({} of {} free) until running jobs there finish",
                    gpus(need),
                    node.name,
                    self.free[i].len(),
                    node.gpus.len()
                )
            }
            None => {
                // Earlier in the queue means higher priority (or same priority, earlier).
                let holder = self.groups[g].top_holder.map(|h| &self.queue[h]);
                format!(
                    "needs {}; the largest free on a matching node is {largest_free}, and matching nodes are held for earlier jobs (e.g. {}, priority {}, needs {})",
                    gpus(need),
                    holder.map_or("?", |h| h.id.as_str()),
                    holder.map_or(0, |h| h.priority),
                    gpus(holder.map_or(0, |h| h.gpus as usize))
                )
            }
        };
        self.wait(job, with_fair_share_note(job, reason));
    }

    /// One look at the group's unheld nodes for a job needing `need` GPUs.
    pub(super) fn scan(&self, job: &QueuedJob, g: usize, need: usize) -> Scan {
        let mut scan = Scan {
            best: None,
            largest_free: 0,
            to_hold: None,
            windowed: None,
        };
        let group = &self.groups[g];
        if group.unheld == 0 {
            return scan;
        }
        let (nodes, free) = (self.nodes, &self.free);
        for &i in &group.nodes {
            if self.held[i].is_some() {
                continue;
            }
            if let Some(refusal) = window_refusal(&nodes[i], job, self.now_ms) {
                scan.windowed.get_or_insert(refusal);
                continue;
            }
            let available = free[i].len();
            scan.largest_free = scan.largest_free.max(available);
            // Best fit (the fewest free GPUs that do), but the node holding
            // the checkpoint a resumed job picks up from before any other.
            let elsewhere = |n: usize| job.resume_node.as_ref() != Some(&nodes[n].id);
            if available >= need
                && scan.best.is_none_or(|b| {
                    (elsewhere(i), available, &nodes[i].name) < (elsewhere(b), free[b].len(), &nodes[b].name)
                })
            {
                scan.best = Some(i);
            }
            if nodes[i].gpus.len() >= need
                && scan.to_hold.is_none_or(|h| {
                    available > free[h].len() || (available == free[h].len() && nodes[i].name < nodes[h].name)
                })
            {
                scan.to_hold = Some(i);
            }
        }
        scan
    }

    /// Preempts for `job` where the rules allow it and stopping lower jobs
    /// frees enough somewhere: holds that node and says so. False: no
    /// preemption for this job.
    pub(super) fn preempt_for(&mut self, position: usize, job: &QueuedJob, g: usize) -> bool {
        let allowed = self.rules.preempt_priority.is_some_and(|min| job.priority >= min);
        if !allowed || self.groups[g].unheld == 0 {
            return false;
        }
        let Some(target) = preemption_target(
            job,
            self.nodes,
            &self.groups[g].nodes,
            &self.held,
            &self.free,
            &self.stopping,
            self.now_ms,
        ) else {
            return false;
        };
        let i = target.node;
        self.hold(i, position);
        let node = &self.nodes[i];
        let need = gpus(job.gpus as usize);
        let reason = if target.victims.is_empty() {
            let names: Vec<&str> = node
                .running
                .iter()
                .zip(&self.stopping.attempts[i])
                .filter(|(_, stopping)| **stopping)
                .map(|(attempt, _)| attempt.job_id.as_str())
                .collect();
            format!(
                "needs {need}; waiting for preempted jobs on {} to stop ({}), then it starts there",
                node.name,
                names.join(", ")
            )
        } else {
            let mut names = Vec::new();
            for &v in &target.victims {
                self.stopping.mark(self.nodes, i, v);
                let victim = &node.running[v];
                names.push(format!("{} (priority {})", victim.job_id, victim.priority));
                self.plan.preemptions.push(Preemption {
                    job_id: victim.job_id.clone(),
                    attempt: victim.attempt,
                    node_id: node.id.clone(),
                    for_job: job.id.clone(),
                    for_priority: job.priority,
                });
            }
            format!(
                "needs {need}; preempting {} on {}: it starts there when they stop",
                names.join(", "),
                node.name
            )
        };
        self.wait(job, reason);
        true
    }

    /// Node `i` is held for the job at `position`: lower jobs may not take its GPUs.
    pub(super) fn hold(&mut self, i: usize, position: usize) {
        self.held[i] = Some(position);
        for &other in &self.groups_of_node[i] {
            let group = &mut self.groups[other];
            group.unheld -= 1;
            group.top_holder = Some(group.top_holder.map_or(position, |h| h.min(position)));
        }
    }
}
