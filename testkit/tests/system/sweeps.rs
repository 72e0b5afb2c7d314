//! A sweep with the real server binary, the real agent and the real Python
//! SDK: trials of a script with a known optimum log their loss, ASHA stops
//! the poor ones (CANCELLED, SWEEP_PRUNED) while they run, the server is
//! killed mid-sweep and comes back, and the sweep still runs each grid
//! value exactly once and names the optimum as its best trial, in the API
//! and in `gpuctl sweep show`. Also: the manual's example as written, a
//! sweep going on past failed trials, and trials that are two-node
//! `torchrun` jobs, one preempted and resumed with its rungs kept.

use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::Cluster;
use gpuplane_testkit::gpuctl;
use gpuplane_testkit::process::{AgentProcess, ServerProcess};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Loss `(lr - 0.3)² + 1/step` for 30 steps: lr 0.3 is best at every step.
const TRIAL: &str = r#"
import json, os, sys, time
import gpuplane
params = json.loads(os.environ["GPUCTL_SWEEP_PARAMS"])
lr = float(sys.argv[1].split("=", 1)[1])
assert lr == params["lr"], (lr, params)
run = gpuplane.init()
for step in range(1, 31):
    run.log({"loss": (lr - 0.3) ** 2 + 1.0 / step}, step=step)
    time.sleep(0.1)
run.finish()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_grid_sweep_prunes_poor_trials_survives_a_server_kill_and_finds_the_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let (data, token, agent_tokens) = ServerProcess::bootstrap(dir.path(), 1).await;
    let mut server = ServerProcess::start(&data, &[]).await;
    let api = server.api(&token);
    let _agent = AgentProcess::start(dir.path(), &server.url, "box", &agent_tokens[0]);
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("trial.py"), TRIAL).unwrap();
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/python");
    let lrs: Vec<f64> = (0..10).map(|i| i as f64 / 10.0).collect();
    let file = json!({
        "name": "lr-grid",
        "method": "grid",
        "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"lr": {"values": lrs}},
        "max_concurrent": 4,
        "early_terminate": {"type": "asha", "min_step": 3, "eta": 3},
        "job": {
            "command": ["python3", "trial.py", "--lr=${lr}"],
            "working_dir": work,
            "env": {"PYTHONPATH": sdk},
            "resources": {"gpu": 1},
        },
    });
    let home = tempfile::tempdir().unwrap();
    let sweep_file = home.path().join("sweep.json");
    std::fs::write(&sweep_file, file.to_string()).unwrap();
    let created = gpuctl::json(&gpuctl::succeeds(
        home.path(),
        (&server.url, &token),
        &["sweep", "create", "--json", "-f", sweep_file.to_str().unwrap()],
    ));
    let id = created["id"].as_str().unwrap().to_string();

    // Killed once a few trials have started; started again on the same data.
    let started = Instant::now();
    loop {
        let (_, shown) = api.get(&format!("/sweeps/{id}")).await.unwrap();
        if shown["trials"].as_array().is_some_and(|t| t.len() >= 5) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{shown}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.kill();
    assert_eq!(server.integrity_check().await, "ok");
    server.restart().await;

    let finished = loop {
        let (_, shown) = api.get(&format!("/sweeps/{id}")).await.unwrap();
        if shown["state"] == "FINISHED" {
            break shown;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{shown:#}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let trials = finished["trials"].as_array().unwrap();
    // Each grid value once: nothing proposed twice, nothing lost.
    let numbers: Vec<u64> = trials.iter().map(|t| t["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (0..10).collect::<Vec<u64>>(), "{finished:#}");
    let tried: BTreeSet<String> = trials.iter().map(|t| t["params"]["lr"].to_string()).collect();
    assert_eq!(tried.len(), 10, "{finished:#}");
    assert_eq!(finished["reason"], "all 10 trials ended");
    // The best finished, at lr 0.3; the worst were stopped early, as
    // CANCELLED with SWEEP_PRUNED, before their last step.
    let best = &finished["best"];
    assert_eq!(best["params"]["lr"], json!(0.3), "{finished:#}");
    assert_eq!(best["state"], "SUCCEEDED");
    assert_eq!(best["step"], json!(30));
    let pruned: Vec<&Value> = trials
        .iter()
        .filter(|t| t["failure_reason"] == "SWEEP_PRUNED")
        .collect();
    assert!(!pruned.is_empty(), "{finished:#}");
    for trial in &pruned {
        assert_eq!(trial["state"], "CANCELLED");
        assert!(trial["step"].as_u64().unwrap() < 30, "{trial}");
        assert!(!trial["rungs"].as_array().unwrap().is_empty(), "{trial}");
        let job_id = trial["job_id"].as_str().unwrap();
        let (_, job) = api.get(&format!("/jobs/{job_id}")).await.unwrap();
        assert!(
            job["failure_detail"]
                .as_str()
                .unwrap()
                .starts_with("stopped early at step"),
            "{job}"
        );
    }
    let worst = trials.iter().find(|t| t["params"]["lr"] == json!(0.9)).unwrap();
    assert_eq!(worst["failure_reason"], "SWEEP_PRUNED", "{finished:#}");
    assert_eq!(
        finished["trial_states"]["PRUNED"].as_u64(),
        Some(pruned.len() as u64)
    );

    let shown = gpuctl::stdout(&gpuctl::succeeds(
        home.path(),
        (&server.url, &token),
        &["sweep", "show", &id],
    ));
    assert!(shown.contains("FINISHED (all 10 trials ended)"), "{shown}");
    assert!(shown.contains("lr=0.3"), "{shown}");
    assert!(shown.contains("PRUNED"), "{shown}");
}

/// The manual's example sweep (docs/src/use/sweep), as a new user runs it:
/// `gpuctl sweep create -f sweep.yaml` in the folder of `train.py`.
#[tokio::test(flavor = "multi_thread")]
async fn the_manuals_example_sweep_runs_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let (data, token, agent_tokens) = ServerProcess::bootstrap(dir.path(), 1).await;
    let server = ServerProcess::start(&data, &[]).await;
    let api = server.api(&token);
    let _agent = AgentProcess::start(dir.path(), &server.url, "box", &agent_tokens[0]);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/use/sweep");
    let folder = dir.path().join("sweep");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::copy(format!("{example}/train.py"), folder.join("train.py")).unwrap();
    // The SDK from this checkout, where a user has it installed.
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/python");
    let file = std::fs::read_to_string(format!("{example}/sweep.yaml")).unwrap();
    assert!(
        file.trim_end().ends_with("gpu: 1"),
        "job: is the file's last section"
    );
    let file = format!("{}\n  env:\n    PYTHONPATH: {sdk}\n", file.trim_end());
    std::fs::write(folder.join("sweep.yaml"), file).unwrap();

    let home = tempfile::tempdir().unwrap();
    let created = gpuctl::stdout(&gpuctl::succeeds(
        home.path(),
        (&server.url, &token),
        &[
            "sweep",
            "create",
            "-f",
            folder.join("sweep.yaml").to_str().unwrap(),
            "--max-trials",
            "6",
        ],
    ));
    assert!(
        created.contains(&format!("Trials run train.py in {}", folder.display())),
        "{created}"
    );
    let id = created.split_whitespace().nth(2).unwrap().to_string();
    assert!(id.starts_with("swp_"), "{created}");
    let started = Instant::now();
    let finished = loop {
        let (_, shown) = api.get(&format!("/sweeps/{id}")).await.unwrap();
        if shown["state"] == "FINISHED" {
            break shown;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{shown:#}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let trials = finished["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 6, "{finished:#}");
    for trial in trials {
        assert!(
            ["SUCCEEDED", "CANCELLED"].contains(&trial["state"].as_str().unwrap()),
            "{trial}"
        );
    }
    let best = &finished["best"];
    assert_eq!(best["state"], "SUCCEEDED", "{finished:#}");
    let shown = gpuctl::stdout(&gpuctl::succeeds(
        home.path(),
        (&server.url, &token),
        &["sweep", "list"],
    ));
    assert!(shown.contains(&id) && shown.contains("FINISHED"), "{shown}");
}

/// Failed trials are recorded and the sweep goes on, until `max_failures`
/// of them have failed.
#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_goes_on_past_failed_trials_until_max_failures() {
    let dir = tempfile::tempdir().unwrap();
    let (data, token, agent_tokens) = ServerProcess::bootstrap(dir.path(), 1).await;
    let server = ServerProcess::start(&data, &[]).await;
    let api = server.api(&token);
    let _agent = AgentProcess::start(dir.path(), &server.url, "box", &agent_tokens[0]);
    // Odd values fail, even ones succeed: in grid order 1, 2, 3, 4, 5, 6.
    let file = json!({
        "method": "grid",
        "metric": {"name": "loss"},
        "parameters": {"n": {"values": [1, 2, 3, 4, 5, 6]}},
        "max_failures": 3,
        "job": {"command": ["sh", "-c", "exit $(( ${n} % 2 ))"]},
    });
    let (status, created) = api.post("/sweeps", &file).await.unwrap();
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let started = Instant::now();
    let failed = loop {
        let (_, shown) = api.get(&format!("/sweeps/{id}")).await.unwrap();
        if shown["state"] == "FAILED" {
            break shown;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{shown:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(failed["reason"], "3 trials failed (max_failures 3)");
    assert_eq!(failed["trial_states"]["FAILED"], json!(3), "{failed:#}");
    // The sweep went on past the first two failures: the even trials ran.
    assert!(
        failed["trial_states"]["SUCCEEDED"].as_u64().unwrap() >= 2,
        "{failed:#}"
    );
    for trial in failed["trials"].as_array().unwrap() {
        let odd = trial["params"]["n"].as_i64().unwrap() % 2 == 1;
        if trial["state"] == "FAILED" {
            assert!(odd, "{trial}");
            assert_eq!(trial["failure_reason"], "EXIT_CODE");
        }
    }
}

/// A trial that is a two-node torchrun job (Debian's torch, gloo): every
/// step is an all-reduce of both ranks, rank 0 logs `loss` with the SDK and
/// saves a checkpoint at step 5; an attempt that resumes goes on after the
/// step `gpuplane.resume_step()` names.
const TWO_NODE_TRIAL_PY: &str = r#"
import os, sys, time
import torch
import torch.distributed as dist
import gpuplane
lr = float(sys.argv[1].split("=", 1)[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
resumed = gpuplane.resume_step()
start = resumed + 1 if resumed is not None else 0
run = gpuplane.init() if rank == 0 else None
for step in range(start, 20):
    value = torch.tensor([1.0])
    dist.all_reduce(value)
    assert value.item() == 2.0, value
    if rank == 0:
        run.log({"loss": (lr - 0.3) ** 2 + 1.0 / (step + 1)}, step=step)
        if step == 5:
            open(os.path.join(os.environ["GPUCTL_JOB_DIR"], "step_5.pt"), "w").write("weights")
    time.sleep(0.5 if start == 0 else 0.1)
if rank == 0:
    run.finish()
    time.sleep(2)
dist.barrier()
"#;

/// A sweep's trials may be jobs across several hosts, and a trial that is
/// preempted keeps its rung history: the first trial (lr 0.3) runs on both
/// agents, is preempted after its checkpoint, resumes from it on both and
/// reaches every rung with the values it logged; the second (lr 0.9) is
/// judged against those rungs and stopped early on both nodes at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_two_node_trial_preempted_and_resumed_keeps_its_rungs_and_the_next_is_pruned_on_both_nodes() {
    let cluster = Cluster::start_with(|config| {
        config.settings.preempt_priority = Some(100);
        config.settings.preemption_grace_s = 5;
    })
    .await;
    let _agents = crate::multi_node::two_agents(&cluster);
    cluster.wait_for_nodes(2).await;
    let work = cluster.workdir("two-node-sweep");
    std::fs::write(work.join("train.py"), TWO_NODE_TRIAL_PY).unwrap();
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/python");
    let (status, created) = cluster
        .post(
            "/sweeps",
            json!({
                "name": "two-node",
                "method": "grid",
                "metric": {"name": "loss", "goal": "minimize"},
                "parameters": {"lr": {"values": [0.3, 0.9]}},
                "max_concurrent": 1,
                "early_terminate": {"type": "asha", "min_step": 2, "reduction_factor": 2},
                "job": {
                    "command": ["torchrun", "train.py", "--lr=${lr}"],
                    "working_dir": work,
                    "resources": {"gpu": 1, "nodes": 2},
                    "env": {"PET_REDIRECTS": "1", "PET_TEE": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": sdk},
                },
            }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let first = gpuplane_testkit::eventually("the first trial", Duration::from_secs(30), || {
        let (cluster, id) = (&cluster, &id);
        async move {
            let shown = sweep_of(cluster, id).await;
            shown["trials"][0]["job_id"].as_str().map(str::to_string)
        }
    })
    .await;
    let job = cluster.job(&first).await;
    eventually_checkpoint(&cluster, &job.run_id).await;
    let urgent = cluster
        .submit(
            json!({"name": "urgent", "command": ["sleep", "1"], "resources": {"gpu": 1}, "priority": 100}),
        )
        .await;
    // The rungs it reached before it was preempted.
    let preempted = cluster
        .wait_until(&first, "its first attempt preempted", |job| {
            job.attempts.first().is_some_and(|a| a.ended_at.is_some())
        })
        .await;
    assert_eq!(
        preempted.attempts[0].failure_reason.map(|r| r.as_str()),
        Some("PREEMPTED"),
        "{preempted:?}"
    );
    let shown = sweep_of(&cluster, &id).await;
    let before: Vec<f64> = serde_json::from_value(shown["trials"][0]["rungs"].clone()).unwrap();
    assert!(!before.is_empty(), "{shown:#}");
    cluster.wait_for(&urgent.id, JobStatus::Succeeded).await;

    let finished = gpuplane_testkit::eventually("the sweep to finish", Duration::from_secs(120), || {
        let (cluster, id) = (&cluster, &id);
        async move {
            let shown = sweep_of(cluster, id).await;
            (shown["state"] == "FINISHED").then_some(shown)
        }
    })
    .await;
    let trials = finished["trials"].as_array().unwrap();
    let (resumed, pruned) = (&trials[0], &trials[1]);
    let job = cluster.job(&first).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    assert_eq!((job.preemptions, job.attempts.len()), (1, 2), "{job:?}");
    assert_eq!(job.attempts[1].resume_step, Some(5), "{job:?}");
    // Every rung (2, 4, 8, 16) once, with the value logged at its step; the
    // rungs from before the preemption kept as they were.
    let expected: Vec<f64> = [2.0, 4.0, 8.0, 16.0].iter().map(|s| 1.0 / (s + 1.0)).collect();
    let rungs: Vec<f64> = serde_json::from_value(resumed["rungs"].clone()).unwrap();
    assert_eq!(rungs, expected, "{finished:#}");
    assert_eq!(rungs[..before.len()], before[..], "{finished:#}");
    assert_eq!(resumed["step"], json!(19), "{finished:#}");
    // The second trial is stopped at its first rung, on both nodes.
    assert_eq!(pruned["failure_reason"], "SWEEP_PRUNED", "{finished:#}");
    // The job ends with its first member's exit; the other follows within seconds.
    let job = cluster
        .wait_until(
            pruned["job_id"].as_str().unwrap(),
            "both members stopped",
            |job| {
                job.attempts
                    .last()
                    .is_some_and(|a| a.members.iter().all(|m| m.ended_at.is_some()))
            },
        )
        .await;
    assert_eq!(job.status, JobStatus::Cancelled, "{job:?}");
    assert!(
        job.failure_detail
            .as_deref()
            .unwrap_or_default()
            .starts_with("stopped early at step 2"),
        "{job:?}"
    );
    let members = &job.attempts.last().unwrap().members;
    assert_eq!(members.len(), 2, "{job:?}");
    assert!(
        members.iter().all(|m| m.state == JobStatus::Cancelled),
        "{members:?}"
    );
    assert_eq!(finished["best"]["params"]["lr"], json!(0.3), "{finished:#}");
}

async fn sweep_of(cluster: &Cluster, id: &str) -> Value {
    cluster.get(&format!("/sweeps/{id}")).await.1
}

/// Waits until the run has the checkpoint of step 5.
async fn eventually_checkpoint(cluster: &Cluster, run_id: &str) {
    gpuplane_testkit::eventually(
        "the checkpoint at step 5",
        Duration::from_secs(60),
        || async move {
            let (_, body) = cluster.get(&format!("/runs/{run_id}/checkpoints")).await;
            body.to_string().contains("step_5.pt").then_some(())
        },
    )
    .await;
}
