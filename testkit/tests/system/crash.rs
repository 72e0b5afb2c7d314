//! Server crashes: `kill -9` of the real server process at seeded random
//! moments while clients ingest metrics, real agents run and stream jobs,
//! a client submits and cancels jobs, and an SSE client follows the events.
//! After every kill SQLite's integrity check passes; at the end every
//! acknowledged point, log line, job and cancel is there exactly once, no
//! job ran twice, the waiting queue is as it was before each kill, and the
//! resumed event stream has no gap and no repeat, and the agents came back
//! each time before their node timed out.
//!
//! `GPUPLANE_CRASH_ROUNDS` (default 6) and `GPUPLANE_CRASH_SEED` (default a
//! fixed seed; empty: a new one, printed) make the long version; see
//! RELIABILITY.md.

use futures_util::StreamExt;
use gpuplane_testkit::eventually;
use gpuplane_testkit::process::{AgentProcess, Api, ServerProcess};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const METRIC_CLIENTS: usize = 3;
/// Steps per metric batch; each batch carries two keys.
const STEPS_PER_BATCH: i64 = 100;
const KEYS: [&str; 2] = ["train/loss", "train/lr"];
const AGENTS: [&str; 2] = ["crash-a", "crash-b"];

/// What the clients sent and what the server acknowledged (2xx).
#[derive(Default)]
struct Sent {
    /// Per run: batches acknowledged (each retried until it was).
    batches: Vec<(String, i64)>,
    /// Batches that got no answer at least once (the server was down).
    batches_retried: usize,
    /// Jobs acknowledged: name → (id, lines it prints).
    jobs: BTreeMap<String, (String, u32)>,
    /// Job submits that got no answer: the job may or may not exist.
    jobs_unanswered: Vec<String>,
    /// Jobs whose cancel was acknowledged.
    cancels: Vec<String>,
    /// Event ids received over SSE, in order, and how often it resumed.
    events: Vec<String>,
    resumes: usize,
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_killed_at_random_moments_loses_and_repeats_nothing_acknowledged() {
    let rounds = gpuplane_testkit::size_from_env("GPUPLANE_CRASH_ROUNDS", 6);
    let seed = gpuplane_testkit::seed_from_env("GPUPLANE_CRASH_SEED", 20261202);
    println!("crash: {rounds} rounds, seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let dir = tempfile::tempdir().unwrap();
    let (data, token, agent_tokens) = ServerProcess::bootstrap(dir.path(), AGENTS.len()).await;
    // An agent reconnects within the node timeout of 3 s (it did not: its
    // backoff doubled with every restart); were it late, its jobs are still
    // not LOST: the grace is a minute.
    let flags = [
        "--heartbeat-interval-ms",
        "200",
        "--node-timeout-ms",
        "3000",
        "--lost-grace-ms",
        "60000",
    ];
    let mut server = ServerProcess::start(&data, &flags).await;
    let api = server.api(&token);
    let _agents: Vec<AgentProcess> = AGENTS
        .iter()
        .zip(&agent_tokens)
        .map(|(name, token)| AgentProcess::start(dir.path(), &server.url, name, token))
        .collect();
    wait_for_agents(&api).await;

    // Jobs no node can take (more GPUs than any has): the queue that must
    // come back from every crash in the same order, with the same reasons.
    for (n, priority) in [0, 5, -3, 5].into_iter().enumerate() {
        let spec = json!({"name": format!("waiting-{n}"), "priority": priority,
            "resources": {"gpu": 8}, "command": ["true"]});
        let (status, body) = api.post("/jobs", &spec).await.unwrap();
        assert_eq!(status, 201, "{body}");
    }
    let queue_before = eventually("the waiting jobs' reasons", gpuplane_testkit::WAIT, || async {
        let queue = waiting_queue(&api).await.ok()?;
        queue
            .iter()
            .all(|(_, _, reason)| reason.contains("no node can ever fit"))
            .then_some(queue)
    })
    .await;

    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut metric_writers = Vec::new();
    for client in 0..METRIC_CLIENTS {
        let (status, run) = api
            .post("/runs", &json!({"name": format!("crash-{client}")}))
            .await
            .unwrap();
        assert_eq!(status, 201, "{run}");
        let run_id = run["id"].as_str().unwrap().to_string();
        metric_writers.push(tokio::spawn(write_metrics(api.clone(), run_id, stop.clone())));
    }
    let churn = tokio::spawn(churn_jobs(api.clone(), work.clone(), rng.random(), stop.clone()));
    let follower = tokio::spawn(follow_events(api.clone(), stop.clone()));

    let started = Instant::now();
    let mut restarts = Vec::new();
    for round in 1..=rounds {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..2000))).await;
        server.kill();
        let integrity = server.integrity_check().await;
        assert_eq!(integrity, "ok", "round {round}: the database after kill -9");
        restarts.push(server.restart().await);
        let queue = waiting_queue(&api).await.unwrap();
        assert_eq!(
            queue, queue_before,
            "round {round}: the waiting queue after the restart"
        );
    }
    let load_seconds = started.elapsed().as_secs_f64();
    // An agent that backed off too long after the last restart shows here:
    // its node times out (an AGENT_DISCONNECTED event, checked below).
    wait_for_agents(&api).await;

    // Drain: the clients stop sending; every job they got acknowledged ends.
    stop.store(true, Ordering::SeqCst);
    let mut sent = Sent::default();
    for writer in metric_writers {
        let (run_id, batches, retried) = writer.await.unwrap();
        sent.batches.push((run_id, batches));
        sent.batches_retried += retried;
    }
    let (jobs, unanswered, cancels) = churn.await.unwrap();
    (sent.jobs, sent.jobs_unanswered, sent.cancels) = (jobs, unanswered, cancels);
    let deadline = Instant::now() + Duration::from_secs(120);
    for (name, (id, _)) in &sent.jobs {
        loop {
            let (status, job) = api.get(&format!("/jobs/{id}")).await.unwrap();
            if ["SUCCEEDED", "FAILED", "CANCELLED", "LOST"]
                .contains(&job["status"].as_str().unwrap_or_default())
            {
                break;
            }
            if Instant::now() > deadline {
                let logs: String = AGENTS
                    .iter()
                    .map(|agent| {
                        std::fs::read_to_string(dir.path().join(format!("agent-{agent}.log")))
                            .unwrap_or_default()
                    })
                    .map(|log| {
                        log.lines()
                            .rev()
                            .take(40)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .collect::<Vec<_>>()
                    .join("\n---\n");
                panic!(
                    "{name} ({id}) never ended: {status} {job:#}\nthe agents' last log lines:\n{logs}\nserver log:\n{}",
                    server.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // The last job's events reach the follower before it stops.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let follower_stop = follower.abort_handle();
    let (events, resumes) = tokio::select! {
        done = follower => done.unwrap(),
        () = tokio::time::sleep(Duration::from_secs(30)) => { follower_stop.abort(); panic!("the event follower did not stop") }
    };
    (sent.events, sent.resumes) = (events, resumes);

    let (_, disconnected) = api.get("/events?kind=AGENT_DISCONNECTED").await.unwrap();
    assert_eq!(
        disconnected["items"],
        json!([]),
        "the agents came back within the node timeout after every restart"
    );
    let points = check_metrics(&api, &sent).await;
    let (lines, launched) = check_jobs(&api, &sent, &work).await;
    check_events(&api, &sent).await;
    server.terminate();
    assert_eq!(
        server.integrity_check().await,
        "ok",
        "the database after the last shutdown"
    );

    let restart_ms: Vec<f64> = restarts.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    println!(
        "crash: {rounds} kill -9 rounds over {load_seconds:.1} s (seed {seed}), integrity_check ok {} times; \
         restart to healthy mean {:.0} ms, max {:.0} ms",
        rounds + 1,
        restart_ms.iter().sum::<f64>() / restart_ms.len().max(1) as f64,
        restart_ms.iter().cloned().fold(0.0, f64::max),
    );
    println!(
        "crash: metric points acknowledged {points}, found {points}, duplicated 0 ({} batches, {} resent after no answer)",
        sent.batches.iter().map(|(_, b)| b).sum::<i64>(),
        sent.batches_retried
    );
    println!(
        "crash: jobs acknowledged {}, unanswered submits {}, cancels acknowledged {}, launched {launched}, none twice; \
         log lines found {lines}, none lost or repeated",
        sent.jobs.len(),
        sent.jobs_unanswered.len(),
        sent.cancels.len()
    );
    println!(
        "crash: events received over SSE {}, resumed {} times with Last-Event-ID, no gap, no repeat; waiting queue unchanged {rounds} times",
        sent.events.len(),
        sent.resumes
    );
}

/// Every acknowledged batch's points once: steps 0..n of both keys, no
/// other, each value its step. Returns the points found.
async fn check_metrics(api: &Api, sent: &Sent) -> usize {
    let mut found = 0;
    for (run_id, batches) in &sent.batches {
        for key in KEYS {
            let path = format!("/runs/{run_id}/metrics?key={key}&max_points=1000000&format=columns");
            let (status, series) = api.get(&path).await.unwrap();
            assert_eq!(status, 200, "{series}");
            let steps: Vec<i64> = serde_json::from_value(series["steps"].clone()).unwrap_or_default();
            let values: Vec<f64> = serde_json::from_value(series["values"].clone()).unwrap_or_default();
            let expected: Vec<i64> = (0..batches * STEPS_PER_BATCH).collect();
            assert!(
                steps == expected,
                "{run_id} {key}: {} points for {} acknowledged (first difference at {:?})",
                steps.len(),
                expected.len(),
                steps.iter().zip(&expected).position(|(a, b)| a != b)
            );
            assert!(
                values.iter().zip(&steps).all(|(v, s)| *v == value(key, *s)),
                "{run_id} {key}: values"
            );
            found += steps.len();
        }
    }
    found
}

/// Every acknowledged job once, no unanswered one twice, none launched
/// twice, cancels kept, and each job's lines once, in order. Returns the
/// lines found and the jobs launched.
async fn check_jobs(api: &Api, sent: &Sent, work: &Path) -> (usize, usize) {
    let launches = std::fs::read_to_string(work.join("launches")).unwrap_or_default();
    let mut launched: HashMap<&str, usize> = HashMap::new();
    for name in launches.lines() {
        *launched.entry(name).or_default() += 1;
    }
    assert!(
        launched.values().all(|&n| n == 1),
        "jobs launched twice: {:?}",
        launched.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    let jobs = api.pages("/jobs?q=churn-").await;
    let mut by_name: HashMap<String, Vec<&Value>> = HashMap::new();
    for job in &jobs {
        by_name
            .entry(job["name"].as_str().unwrap().to_string())
            .or_default()
            .push(job);
    }
    for name in &sent.jobs_unanswered {
        assert!(
            by_name.get(name).is_none_or(|jobs| jobs.len() == 1),
            "{name} twice"
        );
    }
    let mut lines_found = 0;
    for (name, (id, lines)) in &sent.jobs {
        let jobs = by_name.get(name).map(Vec::as_slice).unwrap_or_default();
        assert!(
            jobs.len() == 1 && jobs[0]["id"] == id.as_str(),
            "the acknowledged job {name} ({id}) is there once: {jobs:?}"
        );
        let job = jobs[0];
        let status = job["status"].as_str().unwrap();
        let attempts = job["attempts"].as_array().unwrap().len();
        assert!(attempts <= 1, "{name}: {attempts} attempts: {job}");
        let cancelled = sent.cancels.contains(id);
        match status {
            "SUCCEEDED" => assert!(!cancelled, "{name}: cancelled, yet it succeeded"),
            "CANCELLED" => {}
            other => panic!("{name} ended {other} (a crash of the server must not fail a job): {job}"),
        }
        let (status_code, logs) = api
            .get(&format!("/jobs/{id}/logs?stream=stdout&tail=10000"))
            .await
            .unwrap();
        assert_eq!(status_code, 200, "{logs}");
        let text: Vec<&str> = logs["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["text"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = (1..=*lines).map(|i| i.to_string()).collect();
        if status == "SUCCEEDED" {
            assert_eq!(text, expected, "{name}: every line once, in order");
            assert_eq!(
                launched.get(name.as_str()),
                Some(&1),
                "{name} ran, so it launched once"
            );
        } else {
            assert_eq!(
                text,
                expected[..text.len()],
                "{name}: the lines before the cancel, once, in order"
            );
        }
        lines_found += text.len();
    }
    (lines_found, launched.len())
}

/// The events received over SSE are exactly the events recorded from the
/// first received to the last: none missing, none twice, in order.
async fn check_events(api: &Api, sent: &Sent) {
    let received = &sent.events;
    assert!(!received.is_empty(), "the follower received events");
    let mut recorded: Vec<String> = api
        .pages("/events?")
        .await
        .iter()
        .map(|event| event["id"].as_str().unwrap().to_string())
        .collect();
    recorded.reverse();
    let first = recorded
        .iter()
        .position(|id| *id == received[0])
        .expect("the first received event is recorded");
    let last = recorded
        .iter()
        .position(|id| *id == received[received.len() - 1])
        .unwrap();
    assert!(
        recorded[first..=last] == received[..],
        "the stream had gaps or repeats: {} received, {} recorded in that span",
        received.len(),
        last + 1 - first
    );
}

/// The value of `key` at `step`: checkable after the fact.
fn value(key: &str, step: i64) -> f64 {
    if key == KEYS[0] {
        1.0 / (1.0 + step as f64)
    } else {
        step as f64 * 0.5
    }
}

/// Sends batches of both keys until told to stop, each retried (same batch
/// id) until it is acknowledged, as the SDK does. Returns the run, the
/// batches acknowledged and how many needed more than one try.
async fn write_metrics(api: Api, run_id: String, stop: Arc<AtomicBool>) -> (String, i64, usize) {
    let (mut batch, mut retried) = (0, 0);
    while !stop.load(Ordering::SeqCst) {
        let mut points = Vec::new();
        for step in batch * STEPS_PER_BATCH..(batch + 1) * STEPS_PER_BATCH {
            for key in KEYS {
                points.push(json!({"key": key, "step": step, "wall_time": 1.7e9 + step as f64, "value": value(key, step)}));
            }
        }
        let body = json!({"batch_id": format!("b{batch}"), "points": points});
        let mut tries = 0;
        loop {
            tries += 1;
            match api.post(&format!("/runs/{run_id}/metrics"), &body).await {
                Ok((status, _)) if (200..300).contains(&status) => break,
                Ok((status, answer)) if status < 500 => panic!("batch {batch} refused: {status} {answer}"),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        if tries > 1 {
            retried += 1;
        }
        batch += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (run_id, batch, retried)
}

/// Submits short jobs on 1 GPU (each appends its name to `launches`, then
/// prints 1..n) and cancels every fourth. Returns the acknowledged jobs,
/// the submits that got no answer and the acknowledged cancels.
async fn churn_jobs(
    api: Api,
    work: PathBuf,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (BTreeMap<String, (String, u32)>, Vec<String>, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut acknowledged, mut unanswered, mut cancels) = (BTreeMap::new(), Vec::new(), Vec::new());
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let name = format!("churn-{n}");
        let lines: u32 = rng.random_range(5..30);
        let script = format!(
            "echo {name} >> launches; i=1; while [ $i -le {lines} ]; do echo $i; i=$((i+1)); sleep 0.02; done"
        );
        let spec = json!({"name": name, "command": ["sh", "-c", script], "working_dir": work,
            "max_attempts": 1, "resources": {"gpu": 1}});
        match api.post("/jobs", &spec).await {
            Ok((201, job)) => {
                let id = job["id"].as_str().unwrap().to_string();
                if n % 4 == 0 {
                    tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
                    let answer = api
                        .post(&format!("/jobs/{id}/cancel"), &json!({"confirm": true}))
                        .await;
                    if answer.is_ok_and(|(status, _)| status == 200) {
                        cancels.push(id.clone());
                    }
                }
                acknowledged.insert(name, (id, lines));
            }
            Ok((status, answer)) if status < 500 => panic!("{name} refused: {status} {answer}"),
            _ => unanswered.push(name),
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..200))).await;
    }
    (acknowledged, unanswered, cancels)
}

/// Follows `/events/stream` until told to stop, resuming with
/// `Last-Event-ID` whenever the stream ends. Returns the event ids in the
/// order received and the number of resumes.
async fn follow_events(api: Api, stop: Arc<AtomicBool>) -> (Vec<String>, usize) {
    let (mut received, mut resumes) = (Vec::new(), 0usize);
    let mut last_seq: Option<String> = None;
    let http = reqwest::Client::new(); // no overall timeout: a stream lasts
    while !stop.load(Ordering::SeqCst) {
        let mut request = http
            .get(format!("{}/events/stream", api.url))
            .bearer_auth(&api.token);
        if let Some(seq) = &last_seq {
            request = request.header("last-event-id", seq);
        }
        if let Ok(answer) = request.send().await
            && answer.status() == 200
        {
            let mut body = answer.bytes_stream();
            let mut text = String::new();
            loop {
                let chunk = tokio::select! {
                    chunk = body.next() => chunk,
                    () = tokio::time::sleep(Duration::from_millis(200)) => {
                        if stop.load(Ordering::SeqCst) { break } else { continue }
                    }
                };
                let Some(Ok(chunk)) = chunk else { break };
                text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = text.find("\n\n") {
                    let message: String = text.drain(..end + 2).collect();
                    let field = |name: &str| {
                        message
                            .lines()
                            .find_map(|line| line.strip_prefix(name).map(|v| v.trim().to_string()))
                    };
                    if let (Some(seq), Some(data)) = (field("id:"), field("data:")) {
                        let event: Value = serde_json::from_str(&data).unwrap();
                        received.push(event["id"].as_str().unwrap().to_string());
                        last_seq = Some(seq);
                    }
                }
            }
            resumes += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (received, resumes.saturating_sub(1))
}

/// Waits until every agent's node is ONLINE.
async fn wait_for_agents(api: &Api) {
    eventually("every agent online", gpuplane_testkit::WAIT, || async {
        let (_, nodes) = api.get("/nodes").await.ok()?;
        let online = nodes["items"]
            .as_array()?
            .iter()
            .filter(|n| n["status"] == "ONLINE")
            .count();
        (online == AGENTS.len()).then_some(())
    })
    .await;
}

/// The queued `waiting-` jobs: id, priority and reason, in list order.
async fn waiting_queue(api: &Api) -> reqwest::Result<Vec<(String, i64, String)>> {
    let (_, page) = api.get("/jobs?status=QUEUED&q=waiting-&limit=500").await?;
    Ok(page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|job| {
            (
                job["id"].as_str().unwrap_or_default().to_string(),
                job["priority"].as_i64().unwrap_or_default(),
                job["queued_reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}
