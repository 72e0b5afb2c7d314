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

use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Debug, Clone)]
pub struct QueuedJob {
    pub id: String,
    pub gpus: u32,
    pub priority: i64,
    pub node_selector: BTreeMap<String, String>,
    /// Automatic retry cooldown: not before this time (epoch ms).
    pub not_before: Option<i64>,
    /// The attempt it would start, and its limit (for the cooldown reason).
    pub next_attempt: i64,
    pub max_attempts: i64,
}

#[derive(Debug, Clone)]
pub struct NodeCapacity {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Indices of every GPU on the node.
    pub gpus: Vec<u32>,
    /// Indices held by DISPATCHING or RUNNING attempts.
    pub busy_gpus: BTreeSet<u32>,
    /// cpu_only-lane attempts running on the node.
    pub cpu_jobs: u32,
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
}

/// Plans one pass. `queue` must be in dispatch order.
pub fn plan(queue: &[QueuedJob], nodes: &[NodeCapacity], cpu_slots_per_node: u32, now_ms: i64) -> Plan {
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
    // Node index -> the job holding it (id, GPUs needed, priority).
    let mut held: HashMap<usize, (&str, u32, i64)> = HashMap::new();
    let mut matching_cache: HashMap<&BTreeMap<String, String>, Vec<usize>> = HashMap::new();
    let mut plan = Plan::default();

    for job in queue {
        if let Some(not_before) = job.not_before.filter(|t| *t > now_ms) {
            plan.wake_at = Some(plan.wake_at.map_or(not_before, |t| t.min(not_before)));
            let wait_s = (not_before - now_ms + 999) / 1000;
            plan.reasons.push((
                job.id.clone(),
                format!(
                    "retry cooldown: attempt {} of {} starts in {wait_s}s",
                    job.next_attempt, job.max_attempts
                ),
            ));
            continue;
        }
        let matching = matching_cache.entry(&job.node_selector).or_insert_with(|| {
            (0..nodes.len())
                .filter(|&i| {
                    job.node_selector
                        .iter()
                        .all(|(k, v)| nodes[i].labels.get(k) == Some(v))
                })
                .collect()
        });
        if matching.is_empty() {
            plan.reasons.push((
                job.id.clone(),
                no_matching_node(&job.node_selector, nodes.is_empty()),
            ));
            continue;
        }

        if job.gpus == 0 {
            let best = matching
                .iter()
                .copied()
                .filter(|&i| cpu_jobs[i] < cpu_slots_per_node)
                .min_by_key(|&i| (cpu_jobs[i], &nodes[i].name));
            match best {
                Some(i) => {
                    cpu_jobs[i] += 1;
                    plan.placements.push(Placement {
                        job_id: job.id.clone(),
                        node_id: nodes[i].id.clone(),
                        gpus: Vec::new(),
                    });
                }
                None => {
                    let reason = if matching.len() == 1 {
                        format!(
                            "cpu lane full ({cpu_slots_per_node}/{cpu_slots_per_node}) on {}",
                            nodes[matching[0]].name
                        )
                    } else {
                        format!(
                            "cpu lane full on all {} matching nodes ({cpu_slots_per_node}/{cpu_slots_per_node} each)",
                            matching.len()
                        )
                    };
                    plan.reasons.push((job.id.clone(), reason));
                }
            }
            continue;
        }

        let need = job.gpus as usize;
        let largest_total = matching.iter().map(|&i| nodes[i].gpus.len()).max().unwrap_or(0);
        if need > largest_total {
            let reason = if largest_total == 0 {
                format!("needs {} but no matching node has GPUs", gpus(need))
            } else {
                format!(
                    "no node can ever fit {} (the largest matching node has {largest_total})",
                    gpus(need)
                )
            };
            plan.reasons.push((job.id.clone(), reason));
            continue;
        }
        // Tightest fit among nodes nobody holds.
        let best = matching
            .iter()
            .copied()
            .filter(|&i| !held.contains_key(&i) && free[i].len() >= need)
            .min_by_key(|&i| (free[i].len(), &nodes[i].name));
        if let Some(i) = best {
            let taken: Vec<u32> = free[i].drain(..need).collect();
            plan.placements.push(Placement {
                job_id: job.id.clone(),
                node_id: nodes[i].id.clone(),
                gpus: taken,
            });
            continue;
        }
        // Free GPUs another job holds are not on offer.
        let largest_free = matching
            .iter()
            .filter(|i| !held.contains_key(i))
            .map(|&i| free[i].len())
            .max()
            .unwrap_or(0);
        // Hold the unheld node (big enough) with the most free GPUs.
        let to_hold = matching
            .iter()
            .copied()
            .filter(|&i| !held.contains_key(&i) && nodes[i].gpus.len() >= need)
            .max_by_key(|&i| (free[i].len(), std::cmp::Reverse(&nodes[i].name)));
        let reason = match to_hold {
            Some(i) => {
                held.insert(i, (&job.id, job.gpus, job.priority));
                format!(
                    "needs {}; the largest free on a matching node is {largest_free}; holding {} ({} of {} free) until running jobs there finish",
                    gpus(need),
                    nodes[i].name,
                    free[i].len(),
                    nodes[i].gpus.len()
                )
            }
            None => {
                let (holder, holder_needs, holder_priority) = matching
                    .iter()
                    .filter_map(|i| held.get(i))
                    .max_by_key(|(_, _, priority)| *priority)
                    .copied()
                    .unwrap_or(("?", 0, 0));
                format!(
                    "needs {}; the largest free on a matching node is {largest_free}, and matching nodes are held for earlier jobs (e.g. {holder}, priority {holder_priority}, needs {})",
                    gpus(need),
                    gpus(holder_needs as usize)
                )
            }
        };
        plan.reasons.push((job.id.clone(), reason));
    }
    plan
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
            gpus: (0..gpus).collect(),
            busy_gpus: busy.iter().copied().collect(),
            cpu_jobs: 0,
        }
    }

    fn job(id: &str, gpus: u32, priority: i64) -> QueuedJob {
        QueuedJob {
            id: id.to_string(),
            gpus,
            priority,
            node_selector: BTreeMap::new(),
            not_before: None,
            next_attempt: 1,
            max_attempts: 1,
        }
    }

    /// Renders a plan as `job -> node [gpus]` and `job: reason` lines.
    fn check(queue: &[QueuedJob], nodes: &[NodeCapacity], cpu_slots: u32, expected: Expect) {
        let plan = plan(queue, nodes, cpu_slots, 1_000_000);
        let mut out = String::new();
        for p in &plan.placements {
            out.push_str(&format!(
                "{} -> {} {:?}\n",
                p.job_id,
                p.node_id.trim_start_matches("node_"),
                p.gpus
            ));
        }
        for (job, reason) in &plan.reasons {
            out.push_str(&format!("{job}: {reason}\n"));
        }
        expected.assert_eq(&out);
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
                cool: retry cooldown: attempt 2 of 3 starts in 5s
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
        let plan = plan(&[a, b], &[node("n1", 1, &[], &[])], 4, 1_000_000);
        assert_eq!(plan.wake_at, Some(1_003_000));
        assert!(plan.placements.is_empty());
    }
}
