//! Preemption's part of a pass: which running attempts are stopping, in
//! what order it would take them, and the node where stopping the fewest
//! lower-priority jobs frees enough GPUs.

use super::{NodeCapacity, QueuedJob, window_refusal};

/// Where a job that fits nowhere gets its GPUs by preemption.
pub(super) struct PreemptionTarget {
    pub(super) node: usize,
    /// Indices into the node's `running` to stop now; empty when attempts
    /// stopping already free enough.
    pub(super) victims: Vec<usize>,
}

/// What preemption knows of each node's running GPU attempts during a pass.
pub(super) struct Stopping {
    /// Node index -> which of its running attempts are stopping (preempted).
    pub(super) attempts: Vec<Vec<bool>>,
    /// Node index -> GPUs its stopping attempts will free.
    pub(super) gpus: Vec<u32>,
    /// Node index -> its running attempts in the order preemption takes
    /// them: lowest priority first, among equals the newest (least work lost).
    pub(super) order: Vec<Vec<usize>>,
}

impl Stopping {
    /// Empty orders when preemption is off (nothing to sort).
    pub(super) fn new(nodes: &[NodeCapacity], preemption: bool) -> Stopping {
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

    pub(super) fn mark(&mut self, nodes: &[NodeCapacity], i: usize, v: usize) {
        self.attempts[i][v] = true;
        self.gpus[i] += nodes[i].running[v].gpus;
    }
}

/// The unheld matching node where the job's GPUs come free by stopping the
/// fewest running attempts of lower priority (attempts already stopping
/// count as free): fewest new victims, then fewest GPUs taken from them,
/// then the node's name (nodes come in name order).
pub(super) fn preemption_target(
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
