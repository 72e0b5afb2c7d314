//! A gang's turn: a job on several nodes (`nodes > 1`, `gpus` on each)
//! starts on all of them at once or not at all. Its members go to distinct
//! matching nodes, the tightest fits first (the node holding its checkpoint
//! before any other), all sharing one value of the `colocate` label when
//! it names one. A gang that cannot start holds *all* the nodes it will
//! need, or none: two gangs never each hold part of what the other needs,
//! so neither waits forever, and no later job backfills into a held node,
//! so none delays it. Gangs do not preempt. Slurm login hosts are never
//! members: a multi-node `runner = "slurm"` job is one allocation there
//! (the scheduler plans it as one node with all its GPUs).

use super::pass::Pass;
use super::{Placement, QueuedJob, gpus, window_refusal, with_fair_share_note};
use std::collections::BTreeMap;

impl Pass<'_> {
    pub(super) fn place_gang(&mut self, position: usize, job: &QueuedJob, g: usize) {
        let (need, count) = (job.gpus as usize, job.nodes as usize);
        let wanted = format!("{count} nodes with {} each", gpus(need));
        let wanted_free = match need {
            1 => format!("{count} nodes with 1 free GPU"),
            _ => format!("{count} nodes with {need} free GPUs"),
        };
        if need == 0 {
            self.wait(
                job,
                format!("needs {count} nodes: a multi-node job needs GPUs on each"),
            );
            return;
        }
        // The matching nodes large enough for a member, by colocate value
        // (one set of all of them when it names no label).
        let mut sets: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
        for &i in &self.groups[g].nodes {
            // A Slurm login host runs its jobs through Slurm, one node each:
            // members are agents' own nodes (a Slurm job asks Slurm for nodes).
            let node = &self.nodes[i];
            if self.slurm_host[i] || node.gpus.len() < need {
                continue;
            }
            let value = match &job.colocate {
                Some(label) => match node.labels.get(label) {
                    Some(value) => Some(value.as_str()),
                    None => continue,
                },
                None => None,
            };
            sets.entry(value).or_default().push(i);
        }
        let largest_set = sets.values().map(Vec::len).max().unwrap_or(0);
        if largest_set < count {
            let reason = match &job.colocate {
                Some(label) => format!(
                    "needs {wanted} sharing one value of label {label}; at most {largest_set} matching nodes do"
                ),
                None => match largest_set {
                    0 => format!("needs {wanted}; no matching node has {}", gpus(need)),
                    1 => format!("needs {wanted}; only 1 matching node has {}", gpus(need)),
                    n => format!("needs {wanted}; only {n} matching nodes have {}", gpus(need)),
                },
            };
            self.wait(job, reason);
            return;
        }
        // Where it fits now: in each set, the unheld nodes with enough free
        // GPUs and an open window, tightest first; the first set with enough.
        let mut windowed = None;
        let mut free_now = 0;
        for members in sets.values() {
            let mut fits: Vec<usize> = Vec::new();
            for &i in members {
                if self.held[i].is_some() || self.free[i].len() < need {
                    continue;
                }
                if let Some(refusal) = window_refusal(&self.nodes[i], job, self.now_ms) {
                    windowed.get_or_insert(refusal);
                    continue;
                }
                fits.push(i);
            }
            free_now = free_now.max(fits.len());
            if fits.len() < count {
                continue;
            }
            let (nodes, free) = (self.nodes, &self.free);
            let elsewhere = |i: usize| job.resume_node.as_ref() != Some(&nodes[i].id);
            fits.sort_by(|&a, &b| {
                (elsewhere(a), free[a].len(), &nodes[a].name).cmp(&(
                    elsewhere(b),
                    free[b].len(),
                    &nodes[b].name,
                ))
            });
            let mut members = Vec::with_capacity(count);
            for &i in &fits[..count] {
                let taken: Vec<u32> = self.free[i].drain(..need).collect();
                members.push((self.nodes[i].id.clone(), taken));
            }
            let others = members.split_off(1);
            let (node_id, first) = members.pop().expect("a gang has members");
            self.quotas.charge(job);
            self.plan.placements.push(Placement {
                job_id: job.id.clone(),
                node_id,
                gpus: first,
                others,
            });
            return;
        }
        if free_now == 0
            && let Some((reason, opens)) = windowed
        {
            self.wake_at(opens);
            self.wait(job, reason);
            return;
        }
        // It waits: it holds every node it needs, in one set, the ones with
        // the most free GPUs first, when enough of them are unheld.
        let to_hold = sets.values().find_map(|members| {
            let mut unheld: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&i| self.held[i].is_none())
                .collect();
            if unheld.len() < count {
                return None;
            }
            unheld.sort_by_key(|&i| (std::cmp::Reverse(self.free[i].len()), &self.nodes[i].name));
            unheld.truncate(count);
            Some(unheld)
        });
        let have = format!("{free_now} {} them", if free_now == 1 { "has" } else { "have" });
        let reason = match to_hold {
            Some(nodes) => {
                let names: Vec<&str> = nodes.iter().map(|&i| self.nodes[i].name.as_str()).collect();
                for &i in &nodes {
                    self.hold(i, position);
                }
                format!(
                    "needs {wanted_free}; {have}; holding {} until running jobs there finish",
                    names.join(", ")
                )
            }
            None => {
                let holder = self.groups[g].top_holder.map(|h| &self.queue[h]);
                format!(
                    "needs {wanted_free}; {have}, and matching nodes are held for earlier jobs (e.g. {}, priority {})",
                    holder.map_or("?", |h| h.id.as_str()),
                    holder.map_or(0, |h| h.priority),
                )
            }
        };
        self.wait(job, with_fair_share_note(job, reason));
    }
}
