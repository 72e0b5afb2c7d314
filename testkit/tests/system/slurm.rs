//! Jobs through a real Slurm (`gpuplane_testkit::slurm`: Debian's
//! slurmctld, slurmd and munged on this host): an agent with `--runner
//! slurm` turns each job into an `sbatch` job, follows it through
//! `scontrol`, ships its output files and ends it as Slurm says.

use gpuplane_api::job::{FailureReason, JobStatus};
use gpuplane_testkit::cluster::{Agent, Cluster};
use gpuplane_testkit::slurm::{self, Slurm};
use serde_json::json;

/// An agent named `login` that submits to `slurm`, offering `gpus` GPUs
/// (default: as many as sinfo counts); started again, it adopts its jobs.
fn slurm_agent(cluster: &Cluster, slurm: &Slurm, gpus: Option<u32>) -> Agent {
    let jobs_dir = cluster.dir.path().join("agents/login");
    let mut command = cluster.agent_command("login", 0, &jobs_dir);
    let (name, value) = slurm.env();
    command
        .args(["--token", &cluster.agent_token("login")])
        .args(["--runner", "slurm", "--disk-free-percent-override", "50"])
        .env(name, value);
    if let Some(gpus) = gpus {
        command.args(["--slurm-gpus", &gpus.to_string()]);
    }
    Agent {
        child: command.spawn().unwrap(),
        jobs_dir,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_run_as_sbatch_jobs_with_their_argv_gpus_exit_codes_logs_and_sdk_metrics() {
    let slurm = Slurm::start();
    let cluster = Cluster::start().await;
    // A Slurm login host serves only projects granted slurm.
    cluster
        .set_node_policy("default", json!({"runners": ["process", "slurm"]}))
        .await;
    // The GPUs offered are counted from sinfo when not given: check that path.
    let mut agent = slurm_agent(&cluster, &slurm, None);
    cluster.wait_for_nodes(1).await;
    let (_, nodes) = cluster.get("/nodes").await;
    assert_eq!(
        nodes["items"][0]["gpus"].as_array().map(Vec::len),
        Some(slurm::GPUS as usize),
        "the agent offers the cluster's GPUs: {nodes}"
    );
    let work = cluster.workdir("slurm");

    let ok = cluster
        .submit(json!({
            "name": "through-slurm",
            "command": ["sh", "-c", "echo \"slurm job $SLURM_JOB_ID on $CUDA_VISIBLE_DEVICES|$GPUCTL_JOB_ID\"; printf '%s\\n' \"$1\"", "sh", "$HOME; echo pwned"],
            "working_dir": work,
            "resources": {"gpu": 1},
        }))
        .await;
    let done = cluster.wait_for(&ok.id, JobStatus::Succeeded).await;
    assert_eq!(done.attempts[0].exit_code, Some(0));
    let output = cluster.output(&ok.id, "stdout").await;
    assert_eq!(output.len(), 2, "{output:?}\n{}", slurm.logs());
    // Slurm's own job id and GPU, and the server's variables.
    let first = output[0]
        .strip_prefix("slurm job ")
        .unwrap_or_else(|| panic!("{output:?}"));
    let (slurm_job, rest) = first.split_once(" on ").unwrap();
    assert!(slurm_job.parse::<u64>().is_ok(), "{output:?}");
    assert_eq!(rest, format!("0|{}", ok.id));
    // An argument reaches the program as is: no shell reads it.
    assert_eq!(output[1], "$HOME; echo pwned");

    let failing = cluster
        .submit(json!({
            "name": "exit-3",
            "command": ["sh", "-c", "echo 'something broke' >&2; exit 3"],
            "working_dir": work,
        }))
        .await;
    let failed = cluster.wait_for(&failing.id, JobStatus::Failed).await;
    assert_eq!(failed.failure_reason, Some(FailureReason::ExitCode));
    assert_eq!(failed.attempts[0].exit_code, Some(3));
    assert_eq!(
        cluster.output(&failing.id, "stderr").await,
        vec!["something broke"]
    );

    // The Python SDK inside a Slurm job reaches the server as in any job.
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/python");
    let script = "import gpuplane\nrun = gpuplane.init()\nfor step in range(5):\n    run.log({'train/loss': 1.0 / (step + 1)}, step=step)\nrun.finish()\n";
    let metrics = cluster
        .submit(json!({
            "name": "sdk-in-slurm",
            "command": ["python3", "-c", script],
            "working_dir": work,
            "env": {"PYTHONPATH": sdk},
            "resources": {"gpu": 2},
        }))
        .await;
    cluster.wait_for(&metrics.id, JobStatus::Succeeded).await;
    let series = cluster.series(&metrics.run_id, "train/loss").await;
    let steps: Vec<i64> = series.iter().map(|(step, _)| *step).collect();
    assert_eq!(steps, vec![0, 1, 2, 3, 4], "{series:?}");

    // The agent dies while Slurm runs the job; the next agent adopts the
    // Slurm job from the attempt directory and reports its output and end.
    let long = cluster
        .submit(json!({
            "name": "outlives-its-agent",
            "command": ["sh", "-c", "echo before; sleep 3; echo after"],
            "working_dir": work,
        }))
        .await;
    cluster.wait_for(&long.id, JobStatus::Running).await;
    agent.kill();
    let _agent = slurm_agent(&cluster, &slurm, None);
    let adopted = cluster.wait_for(&long.id, JobStatus::Succeeded).await;
    assert_eq!(adopted.attempts.len(), 1, "{adopted:?}");
    assert_eq!(cluster.output(&long.id, "stdout").await, vec!["before", "after"]);

    // TensorBoard files a Slurm job writes into its watch dir become metrics.
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tfevents/tests/fixtures/tb-simple/events.out.tfevents.simple"
    );
    let tensorboard = cluster
        .submit(json!({
            "name": "tensorboard-in-slurm",
            "command": ["sh", "-c", "mkdir -p tb && cp \"$1\" tb/", "sh", fixture],
            "working_dir": cluster.workdir("slurm-tb"),
            "watch_dirs": ["tb"],
        }))
        .await;
    let done = cluster.wait_for(&tensorboard.id, JobStatus::Succeeded).await;
    assert_eq!(cluster.series(&done.run_id, "train/loss").await.len(), 50);

    // A docker job cannot go through Slurm (nor is docker granted here); a
    // Slurm job never goes to a plain agent.
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "container", "command": ["true"], "working_dir": work, "runner": "docker", "image": "python:3.12"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "runner", "{body}");
    let _plain = cluster.agent("plain", 1, &[]);
    cluster.wait_for_nodes(2).await;
    let misplaced = cluster
        .submit(json!({
            "name": "slurm-on-plain",
            "command": ["true"],
            "working_dir": work,
            "runner": "slurm",
            "node_selector": {"gpuplane.node": "plain"},
        }))
        .await;
    let waiting = cluster.wait_for_reason(&misplaced.id, "node policy: ").await;
    let reason = waiting.queued_reason.unwrap_or_default();
    assert!(
        reason.contains("a slurm job") && reason.contains("plain (process)"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn slurm_reasons_show_while_queued_and_cancel_and_time_limit_reach_slurm() {
    let slurm = Slurm::start();
    let cluster = Cluster::start().await;
    // A Slurm login host serves only projects granted slurm.
    cluster
        .set_node_policy("default", json!({"runners": ["process", "slurm"]}))
        .await;
    // More GPUs than Slurm has, so GPUPlane dispatches what Slurm must queue.
    let _agent = slurm_agent(&cluster, &slurm, Some(2 * slurm::GPUS));
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("slurm");
    let all_gpus = slurm::GPUS;
    let holder = cluster
        .submit(json!({"name": "holder", "command": ["sleep", "300"], "working_dir": work, "resources": {"gpu": all_gpus}}))
        .await;
    cluster.wait_for(&holder.id, JobStatus::Running).await;

    let behind = cluster
        .submit(json!({"name": "behind", "command": ["true"], "working_dir": work, "resources": {"gpu": all_gpus}}))
        .await;
    let waiting = cluster.wait_for_reason(&behind.id, "Resources").await;
    assert_eq!(waiting.status, JobStatus::Dispatching);
    let reason = waiting.queued_reason.unwrap();
    assert!(
        reason.starts_with("Slurm job ") && reason.ends_with("is pending: Resources"),
        "{reason}"
    );
    let slurm_job = reason.split_whitespace().nth(2).unwrap().to_string();
    let squeue = slurm
        .command("squeue")
        .args(["--noheader", "--format=%T %r", "--jobs", &slurm_job])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&squeue.stdout).trim(),
        "PENDING Resources"
    );

    // Cancelled while Slurm holds it queued: scancel, and it never runs.
    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", behind.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200, "{body}");
    let cancelled = cluster.wait_for(&behind.id, JobStatus::Cancelled).await;
    assert!(cancelled.attempts[0].started_at.is_none(), "{cancelled:?}");
    let state = slurm
        .command("scontrol")
        .args(["show", "job", "--oneliner", &slurm_job])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&state.stdout).contains("JobState=CANCELLED"),
        "{}",
        String::from_utf8_lossy(&state.stdout)
    );

    // Cancelled while running: SIGTERM through scancel.
    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", holder.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200, "{body}");
    cluster.wait_for(&holder.id, JobStatus::Cancelled).await;

    // Its time limit: stopped by the agent through scancel, failed as TIMEOUT.
    let slow = cluster
        .submit(json!({
            "name": "slow",
            "command": ["sh", "-c", "echo started; exec sleep 300"],
            "working_dir": work,
            "time_limit_s": 2,
        }))
        .await;
    let timed_out = cluster.wait_for(&slow.id, JobStatus::Failed).await;
    assert_eq!(
        timed_out.failure_reason,
        Some(FailureReason::Timeout),
        "{timed_out:?}"
    );
    assert_eq!(cluster.output(&slow.id, "stdout").await, vec!["started"]);
}

/// A Slurm job cannot configure the agent's own `sbatch`. Its `PATH` puts
/// a fake `sbatch` first (it would run as the agent's user), and its
/// `SBATCH_*` variables ask for 2 GPUs and another job name: the agent
/// still runs the real sbatch found at its start, allocates no GPU for a
/// `gpu: 0` job and names the job itself; the job still gets its own
/// variables, its secrets included, none of them on sbatch's command line.
#[tokio::test(flavor = "multi_thread")]
async fn a_slurm_job_cannot_configure_the_agents_sbatch() {
    let slurm = Slurm::start();
    let cluster = Cluster::start().await;
    // A Slurm login host serves only projects granted slurm.
    cluster
        .set_node_policy("default", json!({"runners": ["process", "slurm"]}))
        .await;
    let _agent = slurm_agent(&cluster, &slurm, None);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("slurm-env");
    let evil = cluster.dir.path().join("evil-bin");
    std::fs::create_dir_all(&evil).unwrap();
    let marker = cluster.dir.path().join("fake-sbatch-ran");
    let fake = evil.join("sbatch");
    std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display())).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let job = cluster
        .submit(json!({
            "name": "hijack",
            "command": ["sh", "-c", "echo \"gpus=[$CUDA_VISIBLE_DEVICES] id=$SLURM_JOB_ID path=$PATH gres=$SBATCH_GRES key=$API_KEY\""],
            "working_dir": work,
            "env": {
                "PATH": format!("{}:/usr/local/bin:/usr/bin:/bin", evil.display()),
                "SBATCH_GRES": "gpu:2",
                "SBATCH_JOB_NAME": "hijacked",
            },
            "secret_env": {"API_KEY": "slurm-secret-5150"},
        }))
        .await;
    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert!(!marker.exists(), "the job's PATH chose the agent's sbatch");
    let output = cluster.output(&done.id, "stdout").await;
    let line = output
        .first()
        .unwrap_or_else(|| panic!("{output:?}\n{}", slurm.logs()));
    assert!(line.starts_with("gpus=[] "), "no GPU for a gpu: 0 job: {line}");
    // Slurm's own record: the agent's name for the job, no GPU asked for.
    let slurm_id = line
        .split(" id=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    let (name, value) = slurm.env();
    let shown = std::process::Command::new("scontrol")
        .args(["show", "job", "--oneliner", slurm_id])
        .env(name, value)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        shown.contains(&format!("JobName=gpuplane-{}-1 ", done.id.to_lowercase())),
        "the agent named the job: {shown}"
    );
    assert!(!shown.contains("gres/gpu"), "no GPU was allocated: {shown}");
    assert!(
        line.contains(&format!("path={}:", evil.display())),
        "the job's own PATH reached it: {line}"
    );
    assert!(
        line.contains("gres=gpu:2 ") && line.ends_with("key=***"),
        "its variables reach the job: {line}"
    );
}

/// An experiment on a recipe whose jobs go through Slurm: the folder
/// `gpuctl job submit --exp` ships lands in the login host's jobs folder,
/// and the batch job runs in it with the config and `GPUCTL_EXP_DIR`.
#[tokio::test(flavor = "multi_thread")]
async fn an_experiment_ships_its_folder_to_a_slurm_job() {
    use gpuplane_testkit::gpuctl;
    let slurm = Slurm::start();
    let cluster = Cluster::start().await;
    cluster
        .set_node_policy("default", json!({"runners": ["process", "slurm"]}))
        .await;
    let agent = slurm_agent(&cluster, &slurm, Some(2));
    cluster.wait_for_nodes(1).await;
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| gpuctl::succeeds(home.path(), (&cluster.server.url, &cluster.token), args);
    let recipe = std::fs::read_to_string(format!(
        "{}/../recipe/tests/fixtures/sft.v1.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .replace("[template]\n", "[template]\nrunner = \"slurm\"\n");
    std::fs::write(home.path().join("sft.toml"), recipe).unwrap();
    run(&["recipe", "publish", "sft.toml"]);
    run(&["exp", "init", "exp", "--recipe", "sft"]);
    let exp = home.path().join("exp");
    std::fs::write(
        exp.join("config.yaml"),
        "base_model: org/model\nglobal_batch_size: 64\n",
    )
    .unwrap();
    std::fs::write(
        exp.join("train.sh"),
        "echo \"slurm=${SLURM_JOB_ID:+yes} exp=$GPUCTL_EXP_DIR pwd=$(pwd) model=$BASE_MODEL\"\n\
         grep '^base_model' config.yaml\n",
    )
    .unwrap();
    let submitted = run(&["--json", "job", "submit", "--exp", "exp"]);
    let job = gpuctl::json(&submitted);
    let id = job["id"].as_str().unwrap();
    cluster.wait_for(id, JobStatus::Succeeded).await;
    let shipped = agent.jobs_dir.join(id).join("exp").display().to_string();
    assert_eq!(
        cluster.output(id, "stdout").await,
        vec![
            format!("slurm=yes exp={shipped} pwd={shipped} model=org/model"),
            "base_model: org/model".to_string(),
        ],
        "{}",
        slurm.logs()
    );
}

/// A job on two Slurm nodes (two slurmd on this host, at 127.0.0.1 and
/// 127.0.0.2) is one `sbatch --nodes 2` allocation from one login host:
/// one task per node with its rank and the rendezvous, real torchrun
/// all-reduces across them, a failing task stops the other, and a gang of
/// `process` members never uses the login host.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_on_two_slurm_nodes_is_one_allocation_with_a_task_and_rank_on_each() {
    let slurm = Slurm::start_nodes(2);
    let cluster = Cluster::start().await;
    cluster
        .set_node_policy("default", json!({"runners": ["process", "slurm"]}))
        .await;
    let _agent = slurm_agent(&cluster, &slurm, None);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("slurm-two-nodes");

    let variables = cluster
        .submit(json!({
            "name": "rendezvous",
            "command": ["sh", "-c", "echo \"$GPUCTL_NODE_RANK/$GPUCTL_NNODES $GPUCTL_NODE_ADDRS $MASTER_ADDR $PET_MASTER_PORT=$MASTER_PORT $PET_NPROC_PER_NODE $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES\""],
            "working_dir": work,
            "runner": "slurm",
            "env": {"MASTER_ADDR": "10.9.9.9", "GPUCTL_NODE_RANK": "7"},
            "resources": {"gpu": 1, "nodes": 2},
        }))
        .await;
    let done = cluster.wait_for(&variables.id, JobStatus::Succeeded).await;
    // The login host's GPUs stand for the cluster's: one on each node.
    assert_eq!(done.attempts[0].gpus.len(), 2, "{done:?}");
    assert!(
        done.attempts[0].members.is_empty(),
        "Slurm runs the tasks: {done:?}"
    );
    let mut lines = cluster.output(&variables.id, "stdout").await;
    lines.sort();
    assert_eq!(lines.len(), 2, "{lines:?}\n{}", slurm.logs());
    for (rank, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[0], format!("{rank}/2"), "{line}");
        assert_eq!(words[1], "127.0.0.1,127.0.0.2", "{line}");
        assert_eq!(
            words[2], "127.0.0.1",
            "the job's own MASTER_ADDR is not used: {line}"
        );
        let (pet_port, port) = words[3].split_once('=').unwrap();
        assert!(
            port.parse::<u16>().is_ok_and(|p| p >= 20000) && pet_port == port,
            "{line}"
        );
        assert_eq!(words[4], "1", "{line}");
        assert_eq!(words[5], format!("gpuplane-node{}", rank + 1), "{line}");
        assert_eq!(words[6], "gpus=0", "Slurm gives each task its node's GPU: {line}");
    }

    // Real torchrun, given nothing but the script: 1 + 2 on both ranks.
    std::fs::write(work.join("train.py"), super::multi_node::ALL_REDUCE_PY).unwrap();
    let torch = cluster
        .submit(json!({
            "name": "all-reduce",
            "command": ["torchrun", "train.py"],
            "working_dir": work,
            "runner": "slurm",
            "env": {"PET_REDIRECTS": "1", "PET_TEE": "1", "PYTHONUNBUFFERED": "1"},
            "resources": {"gpu": 1, "nodes": 2},
        }))
        .await;
    cluster.wait_for(&torch.id, JobStatus::Succeeded).await;
    let output = cluster.output(&torch.id, "stdout").await;
    for rank in 0..2 {
        let expected = format!("rank {rank} of 2 (node {rank} of 2, nodes 127.0.0.1,127.0.0.2): sum 3.0");
        assert!(
            output.iter().any(|line| line.ends_with(&expected)),
            "{expected:?} in {output:?}\n{}",
            slurm.logs()
        );
    }

    // The first task that fails stops the other, which would sleep 300 s.
    let began = std::time::Instant::now();
    let failing = cluster
        .submit(json!({
            "name": "rank-1-fails",
            "command": ["sh", "-c", "if [ \"$GPUCTL_NODE_RANK\" = 1 ]; then echo 'rank 1 gives up' >&2; exit 3; fi; sleep 300"],
            "working_dir": work,
            "runner": "slurm",
            "resources": {"gpu": 1, "nodes": 2},
        }))
        .await;
    let failed = cluster.wait_for(&failing.id, JobStatus::Failed).await;
    assert!(
        began.elapsed() < std::time::Duration::from_secs(120),
        "rank 0 was stopped, not waited out: {failed:?}"
    );
    assert!(
        cluster
            .output(&failing.id, "stderr")
            .await
            .iter()
            .any(|line| line.contains("rank 1 gives up")),
        "{failed:?}"
    );

    // A `process` job on two nodes is a gang of agents' nodes: never the
    // login host, so with one plain agent it waits and says why.
    let _plain = cluster.agent("plain", 1, &[]);
    cluster.wait_for_nodes(2).await;
    let gang = cluster
        .submit(json!({"name": "gang", "command": ["true"], "resources": {"gpu": 1, "nodes": 2}}))
        .await;
    cluster
        .wait_for_reason(
            &gang.id,
            "needs 2 nodes with 1 GPU each; only 1 matching node has 1 GPU",
        )
        .await;
    // colocate names agents' labels: Slurm chooses a Slurm job's nodes.
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "colocated", "command": ["true"], "runner": "slurm",
                   "resources": {"gpu": 1, "nodes": 2, "colocate": "rack"}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["details"][0]["field"], "resources.colocate",
        "{body}"
    );
}
