//! Many writers at once on the real server process and its SQLite file: 50
//! clients changing job states (submit, priority, hold, release, cancel,
//! retry), all 50 also setting the priority of one shared job, 4 clients
//! ingesting metrics in small batches (so compaction merges chunks under
//! them), and the scheduler writing its reasons. No request may fail with
//! a 5xx ("database is locked" would be one), and no acknowledged write may
//! be lost: each job ends as its own writer's last acknowledged change left
//! it, and each change has its audit entry. `GPUPLANE_CONCURRENCY_JOBS`
//! (jobs per writer, default 4) makes the long version.

use gpuplane_testkit::process::{Api, ServerProcess};
use gpuplane_testkit::sql;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Instant;

const WRITERS: usize = 50;
const METRIC_CLIENTS: usize = 4;
const BATCHES_PER_CLIENT: i64 = 150;
const STEPS_PER_BATCH: i64 = 50;

/// A job as its writer's acknowledged changes left it.
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    status: &'static str,
    priority: i64,
    held: bool,
    cancels: usize,
    retries: usize,
}

/// Jobs each writer takes through its changes.
fn jobs_per_writer() -> usize {
    gpuplane_testkit::size_from_env("GPUPLANE_CONCURRENCY_JOBS", 4)
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_writers_ingest_and_compaction_at_once_lose_nothing_and_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let (data, token, _) = ServerProcess::bootstrap(dir.path(), 0).await;
    let mut server = ServerProcess::start(&data, &[]).await;
    let api = server.api(&token);
    let shared = submit(&api, "shared", 0).await;

    let started = Instant::now();
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        writers.push(tokio::spawn(change_jobs(api.clone(), writer, shared.clone())));
    }
    let mut ingest = Vec::new();
    for client in 0..METRIC_CLIENTS {
        let (status, run) = api
            .post("/runs", &json!({"name": format!("ingest-{client}")}))
            .await
            .unwrap();
        assert_eq!(status, 201, "{run}");
        let run_id = run["id"].as_str().unwrap().to_string();
        ingest.push(tokio::spawn(ingest_metrics(api.clone(), run_id)));
    }
    let mut expected = HashMap::new();
    let mut shared_priorities = Vec::new();
    for writer in writers {
        let (jobs, priority) = writer.await.unwrap();
        expected.extend(jobs);
        shared_priorities.push(priority);
    }
    let mut runs = Vec::new();
    for client in ingest {
        runs.push(client.await.unwrap());
    }
    let seconds = started.elapsed().as_secs_f64();
    let requests = WRITERS * (jobs_per_writer() * 7 + 1) + METRIC_CLIENTS * BATCHES_PER_CLIENT as usize;

    // Every job as its writer left it, with one audit entry per change.
    let audit = api.pages("/audit?").await;
    let mut audited: HashMap<(String, String), usize> = HashMap::new();
    for entry in &audit {
        let key = (
            entry["target"].as_str().unwrap_or_default().to_string(),
            entry["action"].as_str().unwrap().to_string(),
        );
        *audited.entry(key).or_default() += 1;
    }
    let count = |job: &str, action: &str| {
        audited
            .get(&(job.to_string(), action.to_string()))
            .copied()
            .unwrap_or(0)
    };
    for (id, want) in &expected {
        let (status, job) = api.get(&format!("/jobs/{id}")).await.unwrap();
        assert_eq!(status, 200, "{job}");
        let found = Expected {
            status: if job["status"] == "CANCELLED" {
                "CANCELLED"
            } else {
                "QUEUED"
            },
            priority: job["priority"].as_i64().unwrap(),
            held: job["held"].as_bool().unwrap(),
            cancels: count(id, "job.cancel"),
            retries: count(id, "job.retry"),
        };
        assert_eq!(job["status"], found.status, "{job}");
        assert_eq!(&found, want, "job {id}");
        assert_eq!(count(id, "job.priority"), 1, "{id}: one priority change");
        assert_eq!(
            (count(id, "job.hold"), count(id, "job.release")),
            (1, 1),
            "{id}: one hold, one release"
        );
    }
    // The shared job: all 50 changes acknowledged and audited; it has one of them.
    let (_, job) = api.get(&format!("/jobs/{shared}")).await.unwrap();
    assert!(
        shared_priorities.contains(&job["priority"].as_i64().unwrap()),
        "{job}"
    );
    assert_eq!(
        count(&shared, "job.priority"),
        WRITERS,
        "every acknowledged change of the shared job is audited"
    );

    let mut points = 0;
    for run_id in &runs {
        let path = format!("/runs/{run_id}/metrics?key=train/loss&max_points=1000000&format=columns");
        let (status, series) = api.get(&path).await.unwrap();
        assert_eq!(status, 200, "{series}");
        let steps: Vec<i64> = serde_json::from_value(series["steps"].clone()).unwrap();
        assert_eq!(
            steps,
            (0..BATCHES_PER_CLIENT * STEPS_PER_BATCH).collect::<Vec<_>>(),
            "{run_id}: every point once"
        );
        points += steps.len();
    }

    server.terminate();
    let log = server.log();
    assert!(
        !log.contains("database is locked") && !log.contains("SQLITE_BUSY"),
        "the server's log:\n{log}"
    );
    assert_eq!(server.integrity_check().await, "ok");
    let db = gpuplane_testkit::open_store(&data).await;
    let chunks: i64 = sql!(&db, |pool| {
        sqlx::query_scalar(
        "SELECT count(*) FROM metric_chunks m JOIN runs r ON r.id = m.run_id WHERE r.name LIKE 'ingest-%'",
    )
    .fetch_one(pool)
    .await
    })
    .unwrap();
    db.close().await;
    let batches = METRIC_CLIENTS as i64 * BATCHES_PER_CLIENT;
    assert!(
        chunks < batches,
        "compaction ran during the test: {chunks} chunks from {batches} batches"
    );
    println!(
        "concurrency: {requests} writes from {} clients in {seconds:.1} s ({:.0}/s), none failed; {} jobs as their writers left them, \
         {} audit entries; the shared job took {WRITERS} priority changes; {points} points once each, {batches} batches compacted into {chunks} chunks",
        WRITERS + METRIC_CLIENTS,
        requests as f64 / seconds,
        expected.len(),
        audit.len(),
    );
}

/// Submits a job no node can run (there is none); panics unless 201.
async fn submit(api: &Api, name: &str, priority: i64) -> String {
    let spec = json!({"name": name, "priority": priority, "command": ["true"], "resources": {"gpu": 1}});
    let (status, job) = api.post("/jobs", &spec).await.unwrap();
    assert_eq!(status, 201, "{job}");
    job["id"].as_str().unwrap().to_string()
}

/// `POST path` that must answer 200 (never a 5xx, never a conflict: each
/// job has one writer, but the shared one).
async fn change(api: &Api, path: &str, body: Value) -> Value {
    let (status, answer) = api.post(path, &body).await.unwrap();
    assert_eq!(status, 200, "{path}: {answer}");
    answer
}

/// One writer: jobs of its own through every change a user can make, and one
/// priority change of the shared job among them. Returns its jobs as it
/// left them and the priority it gave the shared job.
async fn change_jobs(api: Api, writer: usize, shared: String) -> (Vec<(String, Expected)>, i64) {
    let mut jobs = Vec::new();
    let shared_priority = writer as i64;
    let jobs_per_writer = jobs_per_writer();
    for n in 0..jobs_per_writer {
        let id = submit(&api, &format!("w{writer}-{n}"), 0).await;
        let priority = (writer * 10 + n) as i64 % 50;
        change(
            &api,
            &format!("/jobs/{id}/priority"),
            json!({"priority": priority}),
        )
        .await;
        change(&api, &format!("/jobs/{id}/hold"), json!({})).await;
        if n == jobs_per_writer / 2 {
            change(
                &api,
                &format!("/jobs/{shared}/priority"),
                json!({"priority": shared_priority}),
            )
            .await;
        }
        change(&api, &format!("/jobs/{id}/release"), json!({})).await;
        change(&api, &format!("/jobs/{id}/cancel"), json!({"confirm": true})).await;
        change(&api, &format!("/jobs/{id}/retry"), json!({})).await;
        // Every other job is cancelled again and ends CANCELLED.
        let (status, cancels) = if n % 2 == 0 {
            change(&api, &format!("/jobs/{id}/cancel"), json!({"confirm": true})).await;
            ("CANCELLED", 2)
        } else {
            ("QUEUED", 1)
        };
        jobs.push((
            id,
            Expected {
                status,
                priority,
                held: false,
                cancels,
                retries: 1,
            },
        ));
    }
    (jobs, shared_priority)
}

/// Batches of 50 steps of one key, each a new small chunk for compaction
/// to merge; every one must be acknowledged the first time. Sent over at
/// least 3 s, so the compactor (2 s after the first batch) runs while they
/// still come, however fast the server takes them.
async fn ingest_metrics(api: Api, run_id: String) -> String {
    let pace = std::time::Duration::from_millis(3_000 / BATCHES_PER_CLIENT as u64);
    for batch in 0..BATCHES_PER_CLIENT {
        tokio::time::sleep(pace).await;
        let points: Vec<Value> = (batch * STEPS_PER_BATCH..(batch + 1) * STEPS_PER_BATCH)
            .map(|step| json!({"key": "train/loss", "step": step, "wall_time": 1.7e9 + step as f64, "value": 1.0 / (1.0 + step as f64)}))
            .collect();
        let body = json!({"batch_id": format!("b{batch}"), "points": points});
        let (status, answer) = api.post(&format!("/runs/{run_id}/metrics"), &body).await.unwrap();
        assert!((200..300).contains(&status), "batch {batch}: {status} {answer}");
    }
    run_id
}
