//! Attacks through real agent processes and real jobs that must fail: a job
//! reading the agent's credential, a token file others can read, one huge
//! output line stalling a node, and attempts of another server being
//! reported here. (Server-only holes: `server/tests/server/security.rs`.)

use gpuplane_api::event::EventKind;
use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::eventually;
use gpuplane_testkit::sql;
use gpuplane_testkit::{WAIT, binary};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Hole 2: the agent's environment (its token first) never reaches a job;
/// a job gets the host's environment, its spec's variables, its secrets
/// (masked in what is shipped) and GPUPlane's own `GPUCTL_*`.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_sees_nothing_of_the_agents_own_environment() {
    let cluster = Cluster::start().await;
    let jobs_dir = cluster.dir.path().join("agents").join("box");
    let token = cluster.agent_token("box");
    let user_cli_token = "gpp_the-users-own-cli-token";
    let _agent = gpuplane_testkit::cluster::Agent {
        child: cluster
            .agent_command("box", 1, &jobs_dir)
            .env("GPUPLANE_AGENT_TOKEN", &token)
            .env("GPUPLANE_SOMETHING_ELSE", "agent-setting")
            .env("GPUCTL_TOKEN", user_cli_token)
            .env("GPUCTL_PROFILE", "someone")
            .spawn()
            .unwrap(),
        jobs_dir: jobs_dir.clone(),
    };
    cluster.wait_for_nodes(1).await;
    let secret = "s3cr3t-value-9f2";
    let job = cluster
        .submit(json!({
            "name": "env", "resources": {"gpu": 1},
            "env": {"PLAIN": "visible"},
            "secret_env": {"API_KEY": secret},
            "command": sh("env; echo key=$API_KEY"),
        }))
        .await;
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let output = cluster.output(&job.id, "stdout").await;
    let text = output.join("\n");
    assert!(!text.contains(&token), "the agent token reached the job");
    assert!(
        !text.contains("GPUPLANE_"),
        "a GPUPLANE_ variable reached the job:\n{text}"
    );
    assert!(
        !text.contains(user_cli_token) && !text.contains("GPUCTL_PROFILE"),
        "{text}"
    );
    assert!(!text.contains(secret), "the secret was shipped unmasked:\n{text}");
    assert!(output.iter().any(|l| l == "key=***"), "{text}");
    assert!(
        output.iter().any(|l| l == "API_KEY=***"),
        "the job had its secret: {text}"
    );
    assert!(output.iter().any(|l| l == "PLAIN=visible"));
    assert!(output.iter().any(|l| l == "CUDA_VISIBLE_DEVICES=0"));
    assert!(output.iter().any(|l| *l == format!("GPUCTL_JOB_ID={}", job.id)));
    let job_token = output
        .iter()
        .find_map(|l| l.strip_prefix("GPUCTL_TOKEN="))
        .expect("the job's own sdk token");
    assert!(job_token.starts_with("gpp_") && job_token != user_cli_token);
    assert!(
        output.iter().any(|l| l.starts_with("PATH=")),
        "the host's environment stays"
    );
    // The whole file, fetched from the agent, is masked too.
    let full = cluster.get_text(&format!("/jobs/{}/logs/full", job.id)).await;
    assert!(full.contains("key=***\n") && !full.contains(secret), "{full}");

    // Nobody else on the host can read the attempt's files (its output may hold anything).
    let attempt = jobs_dir.join(&job.id).join("attempt-1");
    for dir in [&jobs_dir, &jobs_dir.join(&job.id), &attempt] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    for file in [
        "dispatch.json",
        "owner.json",
        "stdout.log",
        "stderr.log",
        "exit.json",
        "shim.json",
    ] {
        assert_eq!(mode(&attempt.join(file)), 0o600, "{file}");
    }
}

/// `--token-file`: refused when group or others can read it, used when private.
#[tokio::test(flavor = "multi_thread")]
async fn the_token_file_must_be_private() {
    let cluster = Cluster::start().await;
    let file = cluster.dir.path().join("agent-token");
    std::fs::write(&file, format!("{}\n", cluster.agent_token("box"))).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let jobs_dir = cluster.dir.path().join("agents").join("box");
    let refused = std::process::Command::new(binary("gpuplane-agent"))
        .args(["--server", &cluster.server.url, "--name", "box", "--token-file"])
        .arg(&file)
        .arg("--jobs-dir")
        .arg(&jobs_dir)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("group or others can read it (mode 0644)") && stderr.contains("chmod 600"),
        "{stderr}"
    );

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut command = cluster.agent_command("box", 1, &jobs_dir);
    command.arg("--token-file").arg(&file);
    let _agent = gpuplane_testkit::cluster::Agent {
        child: command.spawn().unwrap(),
        jobs_dir,
    };
    cluster.wait_for_nodes(1).await;
}

/// A job printing `bytes` of control characters on one line, then `done`.
fn huge_line_job(bytes: usize) -> serde_json::Value {
    json!({"name": "huge-line", "resources": {"gpu": 1},
           "command": sh(&format!("head -c {bytes} /dev/zero | tr '\\000' '\\001'; echo; echo done"))})
}

/// Runs the huge-line job and then a small one on the same one-GPU node
/// (agent flags `extra`); both must succeed. Returns the cluster, its agent
/// (killed when dropped) and the huge job.
async fn huge_line_then_another_job(
    bytes: usize,
    extra: &[&str],
) -> (Cluster, gpuplane_testkit::cluster::Agent, gpuplane_api::job::Job) {
    let cluster = Cluster::start().await;
    let agent = cluster.agent("box", 1, extra);
    cluster.wait_for_nodes(1).await;
    let huge = cluster.submit(huge_line_job(bytes)).await;
    let next = cluster
        .submit(json!({"name": "next", "resources": {"gpu": 1}, "command": ["echo", "after"]}))
        .await;
    cluster.wait_for(&huge.id, JobStatus::Succeeded).await;
    cluster.wait_for(&next.id, JobStatus::Succeeded).await;
    assert_eq!(cluster.output(&next.id, "stdout").await, ["after"]);
    (cluster, agent, huge)
}

/// Hole 4: one huge line is cut, the job ends, and the next job on the node
/// runs. 3 MB: more than the agent reads at once, and written faster than it
/// looks, so most of it is still unread when the job exits.
#[tokio::test(flavor = "multi_thread")]
async fn one_huge_line_is_cut_and_never_stalls_the_node() {
    let (cluster, _agent, huge) = huge_line_then_another_job(3_000_000, &[]).await;
    let output = cluster.output(&huge.id, "stdout").await;
    assert_eq!(output.len(), 2, "line numbers follow the file's newlines");
    assert!(output[0].starts_with("\u{1}\u{1}"));
    assert!(
        output[0].len() <= gpuplane_api::log::MAX_LINE_BYTES,
        "kept whole by the server"
    );
    assert!(
        output[0].ends_with("more bytes cut; the whole line is in stdout.log on the agent host]"),
        "{:?}",
        &output[0][output[0].len() - 120..]
    );
    assert_eq!(output[1], "done");
}

/// Hole 4, when a line does get through uncut (here: the agent's cut is
/// raised past the server's body limit): the server refuses that item, the
/// agent drops it with a REPORT_DROPPED event naming the job and what was
/// dropped, and everything else still arrives. 1.5 MB of `\u0001` is 9 MB
/// of JSON, over the 8 MB limit.
#[tokio::test(flavor = "multi_thread")]
async fn an_item_the_server_refuses_is_dropped_with_an_event_and_blocks_nothing() {
    let (cluster, _agent, huge) =
        huge_line_then_another_job(1_500_000, &["--max-line-bytes", "4000000"]).await;
    let output = cluster.logs(&huge.id, "stream=stdout").await.lines;
    assert_eq!(
        output.len(),
        1,
        "{:?}",
        output.iter().map(|l| (l.n, l.text.len())).collect::<Vec<_>>()
    );
    assert_eq!((output[0].n, output[0].text.as_str()), (2, "done"));
    let dropped: Vec<_> = cluster
        .events("kind=REPORT_DROPPED")
        .await
        .into_iter()
        .filter(|e| e.job_id.as_deref() == Some(huge.id.as_str()))
        .collect();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0].kind, EventKind::ReportDropped);
    assert!(
        dropped[0].message.contains(&huge.id) && dropped[0].message.contains("stdout line(s) 1-1"),
        "{}",
        dropped[0].message
    );
}

/// Hole 7: attempt directories left by an agent of another server (an
/// earlier install on the same host) are never reported to this one: they
/// stay on disk untouched, are named once in the agent's log, and this
/// server's own jobs run.
#[tokio::test(flavor = "multi_thread")]
async fn attempts_of_another_server_are_never_reported() {
    let first = Cluster::start().await;
    let shared_jobs = first.dir.path().join("shared-jobs");
    let mut agent = first.agent_in("box", 1, &shared_jobs, &[]);
    first.wait_for_nodes(1).await;
    let old = first
        .submit(json!({"name": "old", "resources": {"gpu": 1},
                       "command": sh("echo secret-of-the-first-cluster; sleep 1; echo more-secrets")}))
        .await;
    eventually("the first line", WAIT, || async {
        (!first.output(&old.id, "stdout").await.is_empty()).then_some(())
    })
    .await;
    agent.kill();
    let attempt = shared_jobs.join(&old.id).join("attempt-1");
    eventually("the old job to end without its agent", WAIT, || async {
        attempt.join("exit.json").exists().then_some(())
    })
    .await;
    let before: Vec<_> = ["stdout.log", "exit.json", "owner.json", "dispatch.json"]
        .iter()
        .map(|f| std::fs::read(attempt.join(f)).unwrap())
        .collect();

    // A second cluster, its agent on the same host and jobs directory.
    let second = Cluster::start().await;
    let _agent = second.agent_in("box", 1, &shared_jobs, &[]);
    second.wait_for_nodes(1).await;
    let mine = second
        .submit(json!({"name": "mine", "resources": {"gpu": 1}, "command": ["echo", "hello"]}))
        .await;
    second.wait_for(&mine.id, JobStatus::Succeeded).await;
    assert_eq!(second.output(&mine.id, "stdout").await, ["hello"]);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let db = &second.server.state.db;
    let leaked: i64 = sql!(db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM log_lines WHERE job_id = $1")
            .bind(&old.id)
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(
        leaked, 0,
        "lines of the first cluster's job reached the second server"
    );
    let events: i64 = sql!(db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM events WHERE job_id = $1 OR message LIKE $2")
            .bind(&old.id)
            .bind(format!("%{}%", old.id))
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(events, 0);
    let after: Vec<_> = ["stdout.log", "exit.json", "owner.json", "dispatch.json"]
        .iter()
        .map(|f| std::fs::read(attempt.join(f)).unwrap())
        .collect();
    assert_eq!(before, after, "the directory is left untouched");
    assert!(!attempt.join("reported").exists());
    let log = second.agent_log("box");
    assert_eq!(
        log.matches("never dispatched here").count(),
        1,
        "named once in the agent's log:\n{log}"
    );
}

/// A secret belongs to whoever set it. Another editor's retry with
/// changes (their own command) used to run with the submitter's secrets,
/// identity and priority; now it becomes a new job of theirs, without the
/// secrets, its priority checked as their own submission would be (an
/// admin's preempting priority is refused to them). The submitter's own
/// retry with changes stays their job, secrets and all.
#[tokio::test(flavor = "multi_thread")]
async fn another_editors_retry_with_changes_runs_as_their_own_job_without_the_secrets() {
    let cluster = Cluster::start_with(|config| config.settings.preempt_priority = Some(100)).await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let db = cluster.server.state.db.clone();
    let ada = gpuplane_testkit::user_token(&db, "ada", gpuplane_api::auth::Scope::Write, false).await;
    let bob = gpuplane_testkit::user_token(&db, "bob", gpuplane_api::auth::Scope::Write, false).await;
    let post = |path: String, body: serde_json::Value, token: String| {
        let cluster = &cluster;
        async move {
            cluster
                .call(reqwest::Method::POST, &path, Some(body), &token)
                .await
        }
    };
    let secret = "ada-private-key-77";
    let (status, job) = post(
        "/jobs".into(),
        json!({"name": "ada-job", "secret_env": {"API_KEY": secret}, "command": sh("exit 3")}),
        ada.clone(),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let ada_job = job["id"].as_str().unwrap().to_string();
    cluster.wait_for(&ada_job, JobStatus::Failed).await;

    let print_key = json!({"set": {"command": r#"["sh", "-c", "echo key=[$API_KEY]"]"#}});
    let (status, retried) = post(format!("/jobs/{ada_job}/retry"), print_key.clone(), bob.clone()).await;
    assert_eq!(status, 200, "{retried}");
    let bobs = retried["id"].as_str().unwrap().to_string();
    assert_ne!(bobs, ada_job, "a new job");
    assert_eq!(
        (&retried["submitted_by"], &retried["secret_env"]),
        (&json!("bob"), &json!([]))
    );
    cluster.wait_for(&bobs, JobStatus::Succeeded).await;
    let output = cluster.output(&bobs, "stdout").await;
    assert_eq!(output, ["key=[]"], "the secret stayed with its owner");
    let original = cluster.job(&ada_job).await;
    assert_eq!(
        (original.status, original.attempts.len()),
        (JobStatus::Failed, 1),
        "untouched"
    );

    // The admin's job at a preempting priority: Bob's changed retry is his
    // own submission, refused at that priority, taken below it.
    let urgent = cluster
        .submit(json!({"name": "urgent", "priority": 100, "command": sh("exit 1")}))
        .await;
    cluster.wait_for(&urgent.id, JobStatus::Failed).await;
    let (status, refused) = post(
        format!("/jobs/{}/retry", urgent.id),
        json!({"set": {"env.X": "1"}}),
        bob.clone(),
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    let (status, lowered) = post(
        format!("/jobs/{}/retry", urgent.id),
        json!({"set": {"env.X": "1", "priority": "0"}}),
        bob.clone(),
    )
    .await;
    assert_eq!(status, 200, "{lowered}");
    assert_eq!(
        (&lowered["priority"], &lowered["submitted_by"]),
        (&json!(0), &json!("bob"))
    );

    // Ada's own changed retry stays her job, with her secret (masked in what is shipped).
    let (status, hers) = post(format!("/jobs/{ada_job}/retry"), print_key, ada.clone()).await;
    assert_eq!(status, 200, "{hers}");
    assert_eq!(hers["id"], json!(ada_job));
    cluster.wait_for(&ada_job, JobStatus::Succeeded).await;
    assert_eq!(cluster.output(&ada_job, "stdout").await, ["key=[***]"]);
}

/// Upgrades in place: a package upgrade replaces the agent's binary on
/// disk (a new file renamed over the old one) while the agent runs. The
/// next dispatch still starts its shim (the running image, not the path),
/// and a job already running reports to its end.
#[tokio::test(flavor = "multi_thread")]
async fn replacing_the_agents_binary_while_it_runs_breaks_no_dispatch() {
    let cluster = Cluster::start().await;
    let installed = cluster.dir.path().join("opt").join("gpuplane-agent");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(binary("gpuplane-agent"), &installed).unwrap();
    let jobs_dir = cluster.dir.path().join("agents").join("box");
    let mut command = cluster.agent_command_from(&installed, &cluster.server.url, "box", 1, &jobs_dir);
    command.args(["--token", &cluster.agent_token("box")]);
    let _agent = gpuplane_testkit::cluster::Agent {
        child: command.spawn().unwrap(),
        jobs_dir,
    };
    cluster.wait_for_nodes(1).await;
    let before = cluster
        .submit(json!({"name": "before", "command": sh("sleep 2; echo done-before")}))
        .await;
    cluster.wait_for(&before.id, JobStatus::Running).await;

    // dpkg's way: the new file beside the old, then renamed over it.
    let staged = installed.with_extension("dpkg-new");
    std::fs::copy(binary("gpuplane-agent"), &staged).unwrap();
    std::fs::rename(&staged, &installed).unwrap();

    let after = cluster
        .submit(json!({"name": "after", "command": sh("echo started-after")}))
        .await;
    let ended = cluster.wait_for(&after.id, JobStatus::Succeeded).await;
    assert_eq!(ended.failure_reason, None);
    assert_eq!(cluster.output(&after.id, "stdout").await, ["started-after"]);
    cluster.wait_for(&before.id, JobStatus::Succeeded).await;
    assert_eq!(cluster.output(&before.id, "stdout").await, ["done-before"]);
}

/// Every file under `dir` whose bytes contain `needle` (to prove a secret
/// rests nowhere on the host).
fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
        {
            found.push(path);
        }
    }
    found
}

/// #43: a job's secrets and its token never rest in clear on the agent's
/// host (another job there could read the agent user's files): the shim
/// gets them on a pipe, and an agent restarted mid-job gets them back from
/// the server, so what it ships after the restart is still masked.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_rest_on_the_agents_host() {
    let cluster = Cluster::start().await;
    let mut agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let secret = "rest-nowhere-7c1e";
    let flag = cluster.dir.path().join("go-on");
    let job = cluster
        .submit(json!({
            "name": "secret-holder",
            "secret_env": {"API_KEY": secret},
            "command": sh(&format!(
                "echo started; while [ ! -e {} ]; do sleep 0.1; done; echo key=$API_KEY",
                flag.display()
            )),
        }))
        .await;
    eventually("the first line", WAIT, || async {
        (cluster.output(&job.id, "stdout").await.len() == 1).then_some(())
    })
    .await;
    let job_token = cluster.server.state.secret.attempt_token(&job.id, 1);
    for needle in [secret, job_token.as_str()] {
        assert_eq!(
            files_containing(&agent.jobs_dir, needle),
            Vec::<std::path::PathBuf>::new(),
            "a secret rests on the host while the job runs"
        );
    }

    // The agent restarts while the job runs; the job then prints its secret.
    agent.kill();
    let _agent = cluster.agent_in("box", 1, &agent.jobs_dir.clone(), &[]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::write(&flag, "").unwrap();
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let output = cluster.output(&job.id, "stdout").await;
    assert_eq!(output, ["started", "key=***"], "masked after the restart");
    let full = cluster.get_text(&format!("/jobs/{}/logs/full", job.id)).await;
    assert!(full.contains("key=***\n") && !full.contains(secret), "{full}");
    let holders = files_containing(&agent.jobs_dir, secret);
    assert!(
        holders.len() == 1 && holders[0].ends_with("stdout.log"),
        "only what the job itself wrote holds it: {holders:?}"
    );
}

/// Projects are bound to nodes. Any editor used to aim a job at any node
/// with `node_selector` and run there as its agent's user, next to the
/// attempt folders of the team that node serves. Under a node policy the
/// node labelled for vision serves vision alone: another project's job
/// aimed at it by name waits with the reason and never starts, vision's
/// jobs run there and nowhere else, and a docker agent serves only
/// projects granted docker — until an admin grants it.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_labelled_for_a_project_serves_only_that_project() {
    let cluster = Cluster::start().await;
    let (status, body) = cluster.post("/projects", json!({"name": "vision"})).await;
    assert_eq!(status, 201, "{body}");
    cluster
        .set_node_policy("vision", json!({"labels": {"team": "vision"}}))
        .await;
    let vision_box = cluster.agent("vision-box", 1, &["--labels", "team=vision"]);
    let _shared = cluster.agent("shared", 1, &[]);
    let _docker_box = cluster.agent("docker-box", 1, &["--docker"]);
    cluster.wait_for_nodes(3).await;

    // The attack: a default-project job aimed at vision's node, reading its
    // attempt folders.
    let vision_jobs = vision_box.jobs_dir.display().to_string();
    let aimed = cluster
        .submit(json!({
            "name": "peek",
            "command": ["ls", "-R", vision_jobs],
            "node_selector": {"gpuplane.node": "vision-box"},
        }))
        .await;
    let waiting = cluster.wait_for_reason(&aimed.id, "node policy: ").await;
    let reason = waiting.queued_reason.unwrap_or_default();
    assert!(reason.contains("vision-box (process, reserved)"), "{reason}");

    // Vision's jobs run on its node, and wait rather than go elsewhere. A
    // job's own sdk token cannot widen its project's policy.
    let widen = r#"import json, os, urllib.request, urllib.error
body = json.dumps({"runners": ["process", "docker", "slurm"]}).encode()
request = urllib.request.Request(os.environ["GPUCTL_SERVER"] + "/api/v1/projects/vision/node-policy", data=body,
    method="PUT", headers={"Authorization": "Bearer " + os.environ["GPUCTL_TOKEN"], "Content-Type": "application/json"})
try:
    print("status", urllib.request.urlopen(request).status)
except urllib.error.HTTPError as error:
    print("status", error.code)"#;
    let own = cluster
        .submit(json!({"name": "own", "project": "vision", "command": ["python3", "-c", widen], "resources": {"gpu": 1}}))
        .await;
    let own = cluster.wait_for(&own.id, JobStatus::Succeeded).await;
    assert_eq!(own.attempts[0].node, "vision-box");
    assert_eq!(cluster.output(&own.id, "stdout").await, ["status 403"]);
    let (_, policies) = cluster.get("/node-policies").await;
    assert_eq!(
        policies["items"][0]["policy"]["runners"],
        json!(["process"]),
        "{policies}"
    );
    let elsewhere = cluster
        .submit(
            json!({"name": "elsewhere", "project": "vision", "command": ["true"],
                       "node_selector": {"gpuplane.node": "shared"}}),
        )
        .await;
    cluster.wait_for_reason(&elsewhere.id, "node policy: ").await;

    // Default's jobs go only to the node no policy reserves and that runs
    // no docker: never vision's, never the docker host.
    let mut placed = Vec::new();
    for n in 0..3 {
        let job = cluster
            .submit(json!({"name": format!("cpu-{n}"), "command": ["true"], "resources": {"gpu": 0}}))
            .await;
        placed.push(job.id);
    }
    for id in &placed {
        let job = cluster.wait_for(id, JobStatus::Succeeded).await;
        assert_eq!(job.attempts[0].node, "shared", "{id}");
    }
    assert_eq!(
        cluster.job(&aimed.id).await.status,
        JobStatus::Queued,
        "never started"
    );
    assert!(cluster.job(&aimed.id).await.attempts.is_empty());

    // Granted docker, default may use the docker host too.
    cluster
        .set_node_policy("default", json!({"runners": ["process", "docker"]}))
        .await;
    let there = cluster
        .submit(
            json!({"name": "there", "command": ["true"], "node_selector": {"gpuplane.node": "docker-box"}}),
        )
        .await;
    let there = cluster.wait_for(&there.id, JobStatus::Succeeded).await;
    assert_eq!(there.attempts[0].node, "docker-box");
    // Its policy never covered vision's node: the aimed job still waits.
    assert_eq!(cluster.job(&aimed.id).await.status, JobStatus::Queued);
}

/// GPUs assigned are GPUs enforced. `CUDA_VISIBLE_DEVICES` is advisory: a
/// job can unset it and open every GPU. Where the agent runs as root, each
/// job runs in a cgroup whose device rules allow only its own
/// `/dev/nvidiaN`: on cgroup v2 an eBPF program, on cgroup v1 the devices
/// controller, each checked here. Checked without a GPU on character
/// devices with NVIDIA's major number in a temporary folder, which a job
/// opens with ENXIO (allowed, no driver) for its own GPU and EPERM for the
/// other, while outside the job both give ENXIO. Where the machine cannot,
/// the node says its isolation is advisory and why, and so does this test.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_opens_only_its_own_gpus_devices_on_cgroup_v2() {
    a_job_opens_only_its_own_gpus_devices("v2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_opens_only_its_own_gpus_devices_on_cgroup_v1() {
    a_job_opens_only_its_own_gpus_devices("v1").await;
}

async fn a_job_opens_only_its_own_gpus_devices(device_cgroup: &str) {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 2, &["--device-cgroup", device_cgroup]);
    cluster.wait_for_nodes(1).await;
    let (_, nodes) = cluster.get("/nodes").await;
    let isolation = nodes["items"][0]["isolation"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !isolation.starts_with("cgroup: ") {
        assert!(isolation.starts_with("advisory: "), "{nodes}");
        println!(
            "cgroup {device_cgroup} device isolation not checked on this machine: the node says {isolation}"
        );
        return;
    }
    assert!(
        isolation.contains(&format!("cgroup {device_cgroup}")),
        "{isolation}"
    );
    let devices = cluster.dir.path().join("dev");
    std::fs::create_dir_all(&devices).unwrap();
    for minor in 0..2 {
        let path = std::ffi::CString::new(devices.join(format!("nvidia{minor}")).to_str().unwrap()).unwrap();
        let device = libc::makedev(gpuplane_agent::isolation::NVIDIA_MAJOR, minor);
        // SAFETY: a valid path; mknod only creates the node.
        let made = unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, device) };
        assert_eq!(made, 0, "mknod: {}", std::io::Error::last_os_error());
    }
    let job = cluster
        .submit(json!({
            "name": "reach",
            "command": sh(&format!(
                "cat /proc/self/cgroup; unset CUDA_VISIBLE_DEVICES; for n in 0 1; do cat {}/nvidia$n; done; true",
                devices.display()
            )),
            "resources": {"gpu": 1},
        }))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let own = job.attempts[0].gpus[0];
    let other = 1 - own;
    let errors = cluster.output(&job.id, "stderr").await.join("\n");
    assert!(
        errors.contains(&format!("nvidia{own}: No such device or address")),
        "{errors}"
    );
    assert!(
        errors.contains(&format!("nvidia{other}: Operation not permitted")),
        "{errors}"
    );
    let outside = std::fs::File::open(devices.join(format!("nvidia{other}"))).unwrap_err();
    assert_eq!(
        outside.raw_os_error(),
        Some(libc::ENXIO),
        "outside the job: {outside}"
    );
    // It ran in its own cgroup, which goes with it.
    let joined = cluster.output(&job.id, "stdout").await;
    let cgroup = format!("/gpuplane/{}-1", job.id);
    let (hierarchy, mount) = match device_cgroup {
        "v2" => ("0::", gpuplane_agent::isolation::cgroup2_mount_point()),
        _ => (":devices:", gpuplane_agent::isolation::devices_mount_point()),
    };
    assert!(
        joined
            .iter()
            .any(|line| line.contains(hierarchy) && line.ends_with(&format!(":{cgroup}"))),
        "{joined:?}"
    );
    let cgroups = mount
        .expect("the hierarchy's mount")
        .join(cgroup.trim_start_matches('/'));
    eventually("the job's cgroup is removed", Duration::from_secs(15), || {
        let gone = !cgroups.exists();
        async move { gone.then_some(()) }
    })
    .await;
}
