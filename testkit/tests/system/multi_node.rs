//! Multi-node jobs with real `torchrun` (Debian's `python3-torch`, gloo on
//! CPU): two agents on this host, one per loopback address
//! (`--advertise-addr 127.0.0.1` and `127.0.0.2`), each with one simulated
//! GPU. The members find each other only through the variables GPUPlane
//! sets (`PET_*`, `MASTER_ADDR`, `MASTER_PORT`): `torchrun script.py` is
//! given no other argument. Torch 1.13 on Python 3.11 needs
//! `PET_REDIRECTS=1 PET_TEE=1` (its default of 0 trips an enum check), so
//! each job sets them.

use gpuplane_api::job::{Job, JobStatus};
use gpuplane_testkit::cluster::{Agent, Cluster};
use gpuplane_testkit::{WAIT, eventually};
use serde_json::{Value, json};
use std::time::Duration;

/// The two agents of these tests: `n1` at 127.0.0.1, `n2` at 127.0.0.2.
pub(crate) fn two_agents(cluster: &Cluster) -> (Agent, Agent) {
    let first = cluster.agent("n1", 1, &["--advertise-addr", "127.0.0.1"]);
    let second = cluster.agent("n2", 1, &["--advertise-addr", "127.0.0.2"]);
    (first, second)
}

/// A torchrun job of two members running `script` from `work`.
fn torchrun(name: &str, work: &std::path::Path, script: &str, extra: Value) -> Value {
    std::fs::write(work.join("train.py"), script).unwrap();
    let mut spec = json!({
        "name": name,
        "command": ["torchrun", "train.py"],
        "working_dir": work,
        "resources": {"gpu": 1, "nodes": 2},
        "env": {"PET_REDIRECTS": "1", "PET_TEE": "1", "PYTHONUNBUFFERED": "1"},
    });
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    spec
}

pub(crate) const ALL_REDUCE_PY: &str = r#"
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"rank {rank} of {world} (node {os.environ['GPUCTL_NODE_RANK']} of {os.environ['GPUCTL_NNODES']}, "
      f"nodes {os.environ['GPUCTL_NODE_ADDRS']}): sum {value.item()}")
dist.destroy_process_group()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_two_node_torchrun_job_all_reduces_across_both_agents_with_nothing_but_the_platforms_variables() {
    let cluster = Cluster::start().await;
    let _agents = two_agents(&cluster);
    cluster.wait_for_nodes(2).await;
    let work = cluster.workdir("all-reduce");

    // Three nodes are more than there are: it waits and says why.
    let too_many = cluster
        .submit(json!({"name": "three", "command": ["true"], "resources": {"gpu": 1, "nodes": 3}}))
        .await;
    cluster
        .wait_for_reason(
            &too_many.id,
            "needs 3 nodes with 1 GPU each; only 2 matching nodes have 1 GPU",
        )
        .await;
    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", too_many.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200, "{body}");

    let job = cluster
        .submit(torchrun("all-reduce", &work, ALL_REDUCE_PY, json!({})))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let attempt = &job.attempts[0];
    let members: Vec<MemberSummary> = attempt
        .members
        .iter()
        .map(|m| {
            (
                m.rank,
                m.node.as_str(),
                m.address.as_deref(),
                m.state,
                m.exit_code,
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            (
                0,
                attempt.node.as_str(),
                Some(address_of(&attempt.node)),
                JobStatus::Succeeded,
                Some(0)
            ),
            (
                1,
                other(&attempt.node),
                Some(address_of(other(&attempt.node))),
                JobStatus::Succeeded,
                Some(0)
            ),
        ],
        "{attempt:?}"
    );
    // 1 + 2: only when both ranks joined the group.
    let addresses = format!(
        "{},{}",
        address_of(&attempt.node),
        address_of(other(&attempt.node))
    );
    for rank in 0..2 {
        let (status, logs) = cluster.get(&format!("/jobs/{}/logs?rank={rank}", job.id)).await;
        assert_eq!(status, 200, "{logs}");
        let text: Vec<&str> = logs["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|line| line["text"].as_str().unwrap())
            .collect();
        let expected = format!("rank {rank} of 2 (node {rank} of 2, nodes {addresses}): sum 3.0");
        assert!(
            text.iter().any(|line| line.ends_with(&expected)),
            "rank {rank} printed {text:?}"
        );
        assert!(
            logs["lines"]
                .as_array()
                .unwrap()
                .iter()
                .all(|line| line["rank"].as_i64().unwrap_or(0) == rank),
            "{logs}"
        );
    }
    // A rank the job does not have, or none that can be, is refused.
    let (status, body) = cluster.get(&format!("/jobs/{}/logs?rank=-1", job.id)).await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (422, Some("rank")),
        "{body}"
    );
    let (status, _) = cluster.get(&format!("/jobs/{}/logs/full?rank=7", job.id)).await;
    assert_eq!(status, 404);
}

/// A member's rank, node, address, state and exit code.
type MemberSummary<'a> = (i64, &'a str, Option<&'a str>, JobStatus, Option<i32>);

fn other(node: &str) -> &'static str {
    if node == "n1" { "n2" } else { "n1" }
}

fn address_of(node: &str) -> &'static str {
    if node == "n1" { "127.0.0.1" } else { "127.0.0.2" }
}

/// Rank 1's member (its torchrun, as a lost host or the OOM killer would)
/// is killed after three steps while rank 0 waits outside any collective:
/// only the platform can stop rank 0. (Torch 1.13's torchrun, when only
/// its worker dies, waits up to 300 s at its exit barrier for the other
/// nodes: that member is alive, and the hang monitor is what finds it.)
const KILLED_MEMBER_PY: &str = r#"
import os, signal, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(3):
    value = torch.tensor([1.0])
    dist.all_reduce(value)
    print(f"rank {rank} step {step}")
if rank == 1:
    print("rank 1's member is killed")
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)
time.sleep(600)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_member_killed_mid_run_fails_the_attempt_in_its_name_and_the_other_is_stopped_within_seconds() {
    let cluster = Cluster::start().await;
    let _agents = two_agents(&cluster);
    cluster.wait_for_nodes(2).await;
    let work = cluster.workdir("killed");
    let job = cluster
        .submit(torchrun("killed", &work, KILLED_MEMBER_PY, json!({})))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Failed).await;
    let attempt = &job.attempts[0];
    let rank1 = &attempt.members[1];
    let detail = attempt.failure_detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with(&format!("rank 1 on {}:", rank1.node)),
        "the first member to fail says why: {detail}"
    );
    // Rank 0 was stopped (it would have slept ten minutes).
    let stopped = eventually("rank 0 stopped", WAIT, || {
        let cluster = &cluster;
        let id = job.id.clone();
        async move {
            let job: Job = serde_json::from_value(cluster.get(&format!("/jobs/{id}")).await.1).unwrap();
            let rank0 = job.attempts[0].members[0].clone();
            (!rank0.state.is_active()).then_some(rank0)
        }
    })
    .await;
    assert_eq!(stopped.state, JobStatus::Cancelled, "{stopped:?}");
    let started = attempt.started_at.as_deref().unwrap();
    let ended = stopped.ended_at.as_deref().unwrap();
    assert!(
        seconds_between(started, ended) < 60.0,
        "rank 0 ran {started} to {ended}: no orphan waits for its peer"
    );
    // Both nodes are free again: a two-node job starts and ends at once.
    let next = cluster
        .submit(json!({"name": "after", "command": ["true"], "resources": {"gpu": 1, "nodes": 2}}))
        .await;
    cluster.wait_for(&next.id, JobStatus::Succeeded).await;
}

fn seconds_between(from: &str, to: &str) -> f64 {
    let at = |text: &str| humantime::parse_rfc3339(text).unwrap();
    at(to).duration_since(at(from)).unwrap_or_default().as_secs_f64()
}

/// Rank 0 logs one point a step and saves a checkpoint at step 5; every
/// step is an all-reduce of both ranks. An attempt that resumes starts
/// after the step `GPUCTL_RESUME_STEP` names.
const RESUMABLE_PY: &str = r#"
import json, os, time, urllib.request
import torch
import torch.distributed as dist
def log(step):
    body = {"batch_id": f"a{os.environ['GPUCTL_ATTEMPT']}s{step}", "points": [{"key": "train/loss", "step": step, "wall_time": time.time(), "value": float(step)}]}
    request = urllib.request.Request(os.environ["GPUCTL_SERVER"] + "/api/v1/runs/" + os.environ["GPUCTL_RUN_ID"] + "/metrics",
        data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + os.environ["GPUCTL_TOKEN"], "Content-Type": "application/json"})
    urllib.request.urlopen(request)
dist.init_process_group("gloo")
rank = dist.get_rank()
resumed = os.environ.get("GPUCTL_RESUME_STEP", "")
start = int(resumed) + 1 if resumed else 0
print(f"rank {rank} starts at step {start} from {os.environ.get('GPUCTL_RESUME_FROM', '')!r}")
for step in range(start, 30):
    value = torch.tensor([1.0])
    dist.all_reduce(value)
    if rank == 0:
        log(step)
        if step == 5:
            open(os.path.join(os.environ["GPUCTL_JOB_DIR"], "step_5.pt"), "w").write("weights")
    time.sleep(0.3 if start == 0 else 0.01)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_preempted_two_node_job_stops_on_both_nodes_and_resumes_from_its_checkpoint_as_one_curve() {
    let cluster = Cluster::start_with(|config| {
        config.settings.preempt_priority = Some(100);
        config.settings.preemption_grace_s = 5;
    })
    .await;
    let _agents = two_agents(&cluster);
    cluster.wait_for_nodes(2).await;
    let work = cluster.workdir("resume");
    let job = cluster
        .submit(torchrun("resumable", &work, RESUMABLE_PY, json!({"priority": 0})))
        .await;
    // Once the checkpoint is recorded, an urgent one-GPU job takes a node.
    eventually("the checkpoint at step 5", Duration::from_secs(60), || {
        let cluster = &cluster;
        let run_id = job.run_id.clone();
        async move {
            let (_, body) = cluster.get(&format!("/runs/{run_id}/checkpoints")).await;
            let found = body.to_string().contains("step_5.pt");
            found.then_some(())
        }
    })
    .await;
    let urgent = cluster
        .submit(
            json!({"name": "urgent", "command": ["sleep", "1"], "resources": {"gpu": 1}, "priority": 100}),
        )
        .await;
    cluster.wait_for(&urgent.id, JobStatus::Succeeded).await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let (first, second) = (&job.attempts[0], &job.attempts[1]);
    assert_eq!(
        first.failure_reason.map(|reason| reason.as_str()),
        Some("PREEMPTED"),
        "{first:?}"
    );
    // Both members of the preempted attempt were stopped, none failed.
    assert!(
        first.members.iter().all(|m| m.state == JobStatus::Cancelled),
        "{:?}",
        first.members
    );
    assert_eq!(second.resume_step, Some(5), "{second:?}");
    assert!(
        second
            .resume_from
            .as_deref()
            .unwrap_or_default()
            .ends_with("step_5.pt"),
        "{second:?}"
    );
    assert_eq!(job.preemptions, 1);
    let (status, curve) = cluster
        .get(&format!(
            "/runs/{}/metrics?key=train/loss&max_points=1000&format=columns",
            job.run_id
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(curve["steps"], json!((0..30).collect::<Vec<i64>>()), "one curve");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_whose_node_stops_answering_is_lost_with_its_attempt_and_the_other_is_stopped() {
    let cluster = Cluster::start().await;
    let (mut first, mut second) = two_agents(&cluster);
    cluster.wait_for_nodes(2).await;
    let job = cluster
        .submit(json!({"name": "lost", "command": ["sleep", "20"], "resources": {"gpu": 1, "nodes": 2}}))
        .await;
    let running = eventually("both members running", WAIT, || {
        let cluster = &cluster;
        let id = job.id.clone();
        async move {
            let job: Job = serde_json::from_value(cluster.get(&format!("/jobs/{id}")).await.1).unwrap();
            let members = job.attempts.first()?.members.clone();
            members
                .iter()
                .all(|m| m.state == JobStatus::Running)
                .then_some(members)
        }
    })
    .await;
    // Rank 1's agent dies with its host.
    if running[1].node == "n1" {
        first.kill();
    } else {
        second.kill();
    }
    let job = cluster.wait_for(&job.id, JobStatus::Lost).await;
    let attempt = &job.attempts[0];
    assert_eq!(attempt.members[1].state, JobStatus::Lost, "{attempt:?}");
    let detail = attempt.failure_detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with(&format!(
            "rank 1: node {} has not answered since",
            running[1].node
        )),
        "{detail}"
    );
    let stopped = eventually("rank 0 stopped", WAIT, || {
        let cluster = &cluster;
        let id = job.id.clone();
        async move {
            let job: Job = serde_json::from_value(cluster.get(&format!("/jobs/{id}")).await.1).unwrap();
            let rank0 = job.attempts[0].members[0].clone();
            (!rank0.state.is_active()).then_some(rank0)
        }
    })
    .await;
    assert_eq!(stopped.state, JobStatus::Cancelled, "{stopped:?}");
}

/// Rank 0 logs a step (and says so) every 0.1 s for 3 s, then waits in a
/// collective; rank 1 said one line and went quiet at once (a dead data
/// loader). The second attempt just finishes.
fn hanging_pair_py() -> String {
    super::diagnosis::LOG_STEP_PY.to_string()
        + r#"
rank = int(os.environ["GPUCTL_NODE_RANK"])
if os.environ["GPUCTL_ATTEMPT"] != "1":
    print(f"rank {rank} finishes", flush=True)
    raise SystemExit(0)
if rank == 1:
    print("rank 1 loading shard 3", flush=True)
    time.sleep(600)
for step in range(30):
    log(step)
    print(f"step {step}", flush=True)
    time.sleep(0.1)
print("rank 0 waiting in all_reduce", flush=True)
time.sleep(600)
"#
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_two_node_job_names_the_member_that_went_quiet_first_and_restarts_on_both_nodes() {
    let cluster = Cluster::start_with(|config| {
        config.settings.hang_after_s = 2;
        config.settings.hang_factor = 5;
    })
    .await;
    let _first = cluster.agent(
        "n1",
        1,
        &["--advertise-addr", "127.0.0.1", "--telemetry-interval", "0.2"],
    );
    let _second = cluster.agent(
        "n2",
        1,
        &["--advertise-addr", "127.0.0.2", "--telemetry-interval", "0.2"],
    );
    cluster.wait_for_nodes(2).await;
    let job = super::diagnosis::restarted_after_hanging(
        &cluster,
        json!({"name": "hangs", "command": ["python3", "-c", hanging_pair_py()],
               "resources": {"gpu": 1, "nodes": 2}}),
    )
    .await;
    let first = &job.attempts[0];
    // Both members of the hung attempt were stopped; both ran again.
    assert!(
        first.members.iter().all(|m| !m.state.is_active()),
        "{:?}",
        first.members
    );
    for rank in 0..2 {
        let logs = cluster.logs(&job.id, &format!("attempt=2&rank={rank}")).await;
        let lines: Vec<&str> = logs.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(lines, [format!("rank {rank} finishes")], "{logs:?}");
    }
    let events = cluster.events(&format!("job_id={}&kind=JOB_HUNG", job.id)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let message = &events[0].message;
    let (rank0, rank1) = (&first.members[0].node, &first.members[1].node);
    assert!(
        message.starts_with("attempt 1 has logged no step for ")
            && message.contains("after step 29 (its usual wait")
            && message.contains(&format!(
                "while the processes of its 2 members still run; rank 1 on {rank1} went quiet first, "
            ))
            && message.contains("stopping it to retry from its last checkpoint (on_hang = restart)"),
        "{message}"
    );
    // Each member's own last lines, the first to go quiet first.
    let (one, zero) = (
        message.find(&format!("\nrank 1 on {rank1}")),
        message.find(&format!("\nrank 0 on {rank0}")),
    );
    assert!(one.is_some() && zero.is_some() && one < zero, "{message}");
    assert!(
        message.contains("its last output:\nrank 1 loading shard 3\n")
            && message.ends_with("step 28\nstep 29\nrank 0 waiting in all_reduce"),
        "{message}"
    );
    // The run's telemetry has each member's GPU, on its own node.
    let (status, system) = cluster
        .get(&format!("/runs/{}/system?field=utilization_percent", job.run_id))
        .await;
    assert_eq!(status, 200, "{system}");
    let spans: Vec<(i64, i64, &str)> = system["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|span| {
            (
                span["attempt"].as_i64().unwrap(),
                span["rank"].as_i64().unwrap_or(0),
                span["node"].as_str().unwrap(),
            )
        })
        .filter(|(attempt, ..)| *attempt == 1)
        .collect();
    assert_eq!(
        spans,
        [(1, 0, rank0.as_str()), (1, 1, rank1.as_str())],
        "{system}"
    );
    let rank1_points = system["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|series| series["attempt"] == 1 && series["rank"] == 1)
        .map(|series| series["series"]["points"].as_array().map_or(0, Vec::len))
        .sum::<usize>();
    assert!(rank1_points > 0, "rank 1's GPU readings from its node: {system}");
}
