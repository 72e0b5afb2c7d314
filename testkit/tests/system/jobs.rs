//! Jobs on real agents running real child processes: every way a job ends,
//! what the job sees, and what the server keeps of its output.

use gpuplane_api::event::EventKind;
use gpuplane_api::job::{FailureReason, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_job_runs_with_its_gpus_env_and_argv_and_succeeds() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 4, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("ok");
    let job = cluster
        .submit(json!({
            "name": "env-check",
            "command": ["sh", "-c", "pwd; echo \"$CUDA_VISIBLE_DEVICES|$GPUCTL_JOB_ID|$GPUCTL_RUN_ID|$GPUCTL_ATTEMPT|$MY_VAR\"; printf '%s\\n' \"$1\"", "sh", "$HOME; rm -rf /tmp/nothing"],
            "working_dir": work,
            "env": {"MY_VAR": "hello"},
            "resources": {"gpu": 2},
        }))
        .await;
    assert!(job.run_id.starts_with("run_"));
    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let attempt = &done.attempts[0];
    assert_eq!(attempt.gpus.len(), 2);
    assert_eq!(attempt.exit_code, Some(0));
    let visible: Vec<String> = attempt.gpus.iter().map(u32::to_string).collect();
    let output = cluster.output(&job.id, "stdout").await;
    assert_eq!(
        output,
        vec![
            work.display().to_string(),
            format!("{}|{}|{}|1|hello", visible.join(","), job.id, job.run_id),
            // An argument is passed as is: no shell ever sees it.
            "$HOME; rm -rf /tmp/nothing".to_string(),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_commit_a_job_ran_at_is_kept_with_its_attempt() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 0, &[]);
    cluster.wait_for_nodes(1).await;
    // A checkout as git leaves it: HEAD names a branch whose file holds the hash.
    let repo = cluster.workdir("repo");
    let hash = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    std::fs::create_dir_all(repo.join(".git/refs/heads")).unwrap();
    std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(repo.join(".git/refs/heads/main"), format!("{hash}\n")).unwrap();
    let inside = repo.join("experiments");
    std::fs::create_dir_all(&inside).unwrap();
    let job = cluster
        .submit(json!({"name": "versioned", "working_dir": inside, "command": ["true"]}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(job.attempts[0].git_commit.as_deref(), Some(hash));

    // Outside a checkout: nothing.
    let plain = cluster
        .submit(json!({"name": "plain", "working_dir": cluster.workdir("plain"), "command": ["true"]}))
        .await;
    let plain = cluster.wait_for(&plain.id, JobStatus::Succeeded).await;
    assert_eq!(plain.attempts[0].git_commit, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_token_is_an_sdk_token_limited_to_its_run_and_revoked_at_the_end() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "token", "command": sh("echo \"$GPUCTL_TOKEN\"; sleep 30")}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Running).await;
    let token = common_eventually_line(&cluster, &job.id).await;
    let whoami = cluster
        .http
        .get(format!("{}/api/v1/auth/whoami", cluster.server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(whoami.status(), 200);
    let me: serde_json::Value = whoami.json().await.unwrap();
    assert_eq!(me["scope"], "sdk");
    assert_eq!(me["user"], "tester");
    // sdk tokens cannot read jobs.
    let jobs = cluster
        .http
        .get(format!("{}/api/v1/jobs", cluster.server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(jobs.status(), 403);

    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", job.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    cluster.wait_for(&job.id, JobStatus::Cancelled).await;
    let after = cluster
        .http
        .get(format!("{}/api/v1/auth/whoami", cluster.server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 401, "the job's token dies with the job");
}

async fn common_eventually_line(cluster: &Cluster, job_id: &str) -> String {
    gpuplane_testkit::eventually("the job's first line", gpuplane_testkit::WAIT, || async {
        cluster.output(job_id, "stdout").await.into_iter().next()
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn each_failure_reason_is_precise() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 2, &[]);
    cluster.wait_for_nodes(1).await;
    let exit = cluster
        .submit(json!({"name": "exit", "command": sh("echo boom >&2; exit 3")}))
        .await;
    let segv = cluster
        .submit(json!({"name": "segv", "command": sh("kill -SEGV $$")}))
        .await;
    let oom = cluster
        .submit(json!({
            "name": "oom",
            "resources": {"gpu": 1},
            "command": sh("echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.1 GiB total capacity)' >&2; exit 1"),
        }))
        .await;

    let exit = cluster.wait_for(&exit.id, JobStatus::Failed).await;
    assert_eq!(exit.failure_reason, Some(FailureReason::ExitCode));
    assert_eq!(exit.failure_detail.as_deref(), Some("exited with code 3"));
    assert_eq!(exit.attempts[0].exit_code, Some(3));

    let segv = cluster.wait_for(&segv.id, JobStatus::Failed).await;
    assert_eq!(segv.failure_reason, Some(FailureReason::Signal));
    assert_eq!(segv.attempts[0].signal, Some(11));
    assert_eq!(segv.attempts[0].signal_name.as_deref(), Some("SIGSEGV"));
    assert_eq!(
        segv.failure_detail.as_deref(),
        Some("killed by SIGSEGV (signal 11)")
    );

    let oom = cluster.wait_for(&oom.id, JobStatus::Failed).await;
    assert_eq!(oom.failure_reason, Some(FailureReason::Oom));
    assert!(
        oom.failure_detail
            .unwrap()
            .contains("Tried to allocate 20.00 GiB")
    );
    let events = cluster.events(&format!("job_id={}&kind=OOM", oom.id)).await;
    assert_eq!(events.len(), 1, "one critical OOM event");
    assert_eq!(events[0].severity, gpuplane_api::event::Severity::Critical);
    assert_eq!(events[0].run_id.as_deref(), Some(oom.run_id.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn dispatch_failures_name_what_is_missing() {
    let cluster = Cluster::start().await;
    cluster
        .set_node_policy("default", json!({"runners": ["process", "docker"]}))
        .await;
    let _agent = cluster.agent("box", 1, &["--docker"]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("dispatch");
    let script = work.join("train.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap(); // not executable
    let cases = [
        (
            json!({"name": "no-dir", "command": ["true"], "working_dir": "/nonexistent/gpuplane/dir"}),
            "working_dir /nonexistent/gpuplane/dir does not exist on box",
        ),
        (
            json!({"name": "no-cmd", "command": ["no-such-program-xyz"], "working_dir": work}),
            "command[0] `no-such-program-xyz` was not found on this host's PATH",
        ),
        (
            json!({"name": "not-exec", "command": ["./train.sh"], "working_dir": work}),
            "is not executable (chmod +x it)",
        ),
        (
            json!({"name": "docker", "command": ["nvidia-smi"], "runner": "docker", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", "working_dir": work}),
            "runner docker: ",
        ),
    ];
    let mut ids = Vec::new();
    for (spec, _) in &cases {
        ids.push(cluster.submit(spec.clone()).await.id);
    }
    for (id, (_, expected)) in ids.iter().zip(&cases) {
        let job = cluster.wait_for(id, JobStatus::Failed).await;
        assert_eq!(job.failure_reason, Some(FailureReason::DispatchFailed), "{id}");
        let detail = job.failure_detail.unwrap();
        assert!(detail.contains(expected), "`{expected}` not in `{detail}`");
        assert_eq!(job.attempts.len(), 1, "DISPATCH_FAILED is not retried");
    }
    // Without a Docker engine the message says which of client, engine or image is missing.
    let docker = cluster.job(&ids[3]).await.failure_detail.unwrap();
    assert!(
        docker.contains("not installed")
            || docker.contains("no Docker engine")
            || docker.contains("is not on box"),
        "{docker}"
    );
    let events = cluster.events("kind=DISPATCH_FAILED").await;
    assert_eq!(events.len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_reading_stdin_gets_end_of_file_instead_of_hanging() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "stdin", "command": sh("if read line; then echo \"got $line\"; else echo eof; fi; cat; echo after-cat")}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(cluster.output(&job.id, "stdout").await, vec!["eof", "after-cat"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_keeps_the_newest_lines_and_the_agent_has_them_all() {
    let cluster = Cluster::start_with(|config| config.settings.log_tail_lines = 50).await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "chatty", "command": sh("seq 1 500; echo warn >&2")}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let kept = cluster.logs(&job.id, "stream=stdout&tail=10000").await;
    assert!(kept.truncated);
    let numbers: Vec<String> = kept.lines.iter().map(|l| l.text.clone()).collect();
    let expected: Vec<String> = (451..=500).map(|n| n.to_string()).collect();
    assert_eq!(numbers, expected, "the newest 50 stdout lines");
    assert_eq!(kept.lines[0].n, 451);
    assert_eq!(
        cluster.output(&job.id, "stderr").await,
        vec!["warn"],
        "streams are kept separately"
    );

    let full = cluster
        .http
        .get(format!(
            "{}/api/v1/jobs/{}/logs/full?stream=stdout",
            cluster.server.url, job.id
        ))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap();
    assert_eq!(full.status(), 200);
    let text = full.text().await.unwrap();
    assert_eq!(text.lines().count(), 500);
    assert!(text.starts_with("1\n2\n3\n"));

    // The full file is also where the README says, on the agent host.
    let on_disk = _agent.jobs_dir.join(&job.id).join("attempt-1").join("stdout.log");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), text);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_full_log_of_an_offline_agent_is_a_clear_503() {
    let cluster = Cluster::start().await;
    let mut agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "short", "command": sh("echo only-line")}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    agent.kill();
    gpuplane_testkit::eventually("the node to go OFFLINE", gpuplane_testkit::WAIT, || async {
        let (_, nodes) = cluster.get("/nodes").await;
        (nodes["items"][0]["status"] == "OFFLINE").then_some(())
    })
    .await;
    let (status, body) = cluster.get(&format!("/jobs/{}/logs/full", job.id)).await;
    assert_eq!(status, 503);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("the agent on box is offline"), "{message}");
    assert!(
        message.contains(&format!("~/.gpuctl/jobs/{}/attempt-1/stdout.log", job.id)),
        "{message}"
    );
    // The kept lines are still there.
    assert_eq!(cluster.output(&job.id, "stdout").await, vec!["only-line"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn disk_low_is_a_critical_event_once_per_attempt() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &["--disk-free-percent-override", "3.5"]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "disk", "command": sh("sleep 1")}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let events = cluster.events("kind=DISK_LOW").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, EventKind::DiskLow);
    assert_eq!(events[0].severity, gpuplane_api::event::Severity::Critical);
    assert!(
        events[0].message.contains("3.5% free (below 5%)"),
        "{}",
        events[0].message
    );
    assert_eq!(events[0].job_id.as_deref(), Some(job.id.as_str()));
}

/// Reads server-sent events until `count` `line` events (or `end`) arrive.
async fn read_events(response: reqwest::Response, count: usize) -> Vec<(String, String, String)> {
    use futures_util::StreamExt;
    let mut events = Vec::new();
    let mut buffer = String::new();
    let (mut kind, mut id, mut data) = (String::new(), String::new(), String::new());
    let mut body = response.bytes_stream();
    while let Some(Ok(chunk)) = body.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(at) = buffer.find('\n') {
            let line: String = buffer.drain(..=at).collect();
            let line = line.trim_end();
            if line.is_empty() {
                if !kind.is_empty() {
                    events.push((
                        std::mem::take(&mut kind),
                        std::mem::take(&mut id),
                        std::mem::take(&mut data),
                    ));
                    let lines = events.iter().filter(|e| e.0 == "line").count();
                    if lines >= count || events.last().is_some_and(|e| e.0 == "end") {
                        return events;
                    }
                }
            } else if let Some(v) = line.strip_prefix("event:") {
                kind = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data = v.trim().to_string();
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_follower_resumes_after_a_dropped_connection_without_gaps_or_repeats() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "ticker", "command": sh("i=1; while [ $i -le 40 ]; do echo $i; i=$((i+1)); sleep 0.02; done")}))
        .await;
    let url = format!("{}/api/v1/jobs/{}/logs/stream", cluster.server.url, job.id);
    let first = cluster
        .http
        .get(&url)
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap();
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let events = read_events(first, 10).await; // then the connection is dropped
    let last_id = events.iter().rev().find(|e| e.0 == "line").unwrap().1.clone();
    let second = cluster
        .http
        .get(&url)
        .bearer_auth(&cluster.token)
        .header("Last-Event-ID", &last_id)
        .send()
        .await
        .unwrap();
    let rest = read_events(second, usize::MAX).await;
    assert_eq!(rest.last().map(|e| e.0.as_str()), Some("end"));
    assert_eq!(rest.last().map(|e| e.2.as_str()), Some("SUCCEEDED"));
    let texts: Vec<String> = events
        .iter()
        .chain(&rest)
        .filter(|e| e.0 == "line")
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(&e.2).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let expected: Vec<String> = (1..=40).map(|n| n.to_string()).collect();
    assert_eq!(texts, expected);
}
