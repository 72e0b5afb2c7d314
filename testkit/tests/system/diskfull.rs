//! Full disks, on small tmpfs file systems the tests mount (they need root,
//! and say so and stop where they cannot mount). Under the server's data
//! dir: ingest answers 507 with a clear message, never a 2xx it cannot
//! keep; health still answers; once space returns ingest resumes, and after
//! a `kill -9` and a restart every acknowledged point is there once and the
//! database passes its integrity check. Under a job's working dir on an
//! agent: DISK_LOW, a failure explained as a full disk, and a retry that
//! succeeds once space returns.

use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::{Agent, Cluster, sh};
use gpuplane_testkit::process::ServerProcess;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

const STEPS_PER_BATCH: i64 = 2000;

/// Mounts a tmpfs of `size` at `dir`; false where this process may not mount.
fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn remount(dir: &Path, size: &str) {
    let status = Command::new("mount")
        .args(["-o", &format!("remount,size={size}")])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success(), "remount {size}");
}

/// Unmounts the tmpfs when the test ends, however it ends.
struct Mounted<'a>(&'a Path);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

/// A batch of noise (it does not compress) at steps `batch * 2000 ..`.
fn batch(batch: i64, rng: &mut StdRng) -> Value {
    let points: Vec<Value> = (batch * STEPS_PER_BATCH..(batch + 1) * STEPS_PER_BATCH)
        .map(|step| json!({"key": "train/loss", "step": step, "wall_time": 1.7e9 + step as f64, "value": rng.random::<f64>()}))
        .collect();
    json!({"batch_id": format!("b{batch}"), "points": points})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_answers_507_keeps_everything_acknowledged_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if !mount_tmpfs(&data, "6m") {
        println!(
            "diskfull: skipped: this process cannot mount a tmpfs (run the tests as root to include it)"
        );
        return;
    }
    let _mounted = Mounted(&data);
    let (data, token, _) = ServerProcess::bootstrap(dir.path(), 0).await;
    let mut server = ServerProcess::start(&data, &[]).await;
    let api = server.api(&token);
    let (status, run) = api
        .post("/runs", &json!({"name": "fills-the-disk"}))
        .await
        .unwrap();
    assert_eq!(status, 201, "{run}");
    let run_id = run["id"].as_str().unwrap().to_string();
    let ingest = format!("/runs/{run_id}/metrics");

    // Ingest until the disk is full: then 507, again and again, never a 2xx.
    let mut rng = StdRng::seed_from_u64(16);
    let mut acknowledged = 0;
    let mut refused = Vec::new();
    let mut n = 0;
    while refused.len() < 5 {
        assert!(n < 2000, "6 MiB never filled up");
        let body = batch(n, &mut rng);
        let (status, answer) = api.post(&ingest, &body).await.unwrap();
        match status {
            200..=299 if refused.is_empty() => acknowledged = n + 1,
            507 => {
                assert_eq!(answer["error"]["code"], "insufficient_storage", "{answer}");
                assert!(
                    answer["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("disk is full"),
                    "{answer}"
                );
                refused.push(body);
            }
            other => panic!(
                "batch {n} while the disk is full: {other} {answer}\n{}",
                server.log()
            ),
        }
        n += 1;
    }
    let (status, _) = api.get("/health").await.unwrap();
    assert_eq!(status, 200, "health answers on a full disk");
    let (status, job) = api
        .post("/jobs", &json!({"name": "full", "command": ["true"]}))
        .await
        .unwrap();
    assert!(
        status == 507 || status == 201,
        "a submit is kept or refused with 507: {status} {job}"
    );

    // Space returns: the refused batches go in, in order, as the SDK resends them.
    remount(&data, "64m");
    for body in &refused {
        let (status, answer) = api.post(&ingest, body).await.unwrap();
        assert!(
            (200..300).contains(&status),
            "after space returned: {status} {answer}"
        );
    }
    let total = acknowledged + refused.len() as i64;

    server.kill();
    assert_eq!(server.integrity_check().await, "ok");
    server.restart().await;
    let path = format!("{ingest}?key=train/loss&max_points=1000000&format=columns");
    let (status, series) = api.get(&path).await.unwrap();
    assert_eq!(status, 200, "{series}");
    let steps: Vec<i64> = serde_json::from_value(series["steps"].clone()).unwrap();
    assert_eq!(
        steps,
        (0..total * STEPS_PER_BATCH).collect::<Vec<_>>(),
        "every acknowledged point once"
    );
    println!(
        "diskfull: {acknowledged} batches of {STEPS_PER_BATCH} points acknowledged on a 6 MiB tmpfs, then 507 ({} refused); \
         after a remount to 64 MiB they went in, and after kill -9 all {} points were there once",
        refused.len(),
        total * STEPS_PER_BATCH
    );
}

/// The agent's side: a job whose working dir (and the agent's jobs dir) is
/// a 4 MiB tmpfs fills it with a checkpoint and fails. DISK_LOW is raised
/// for it, its failure is explained as a full disk, the agent keeps its
/// files, and once space returns the job's retry succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_on_the_agent_is_disk_low_then_a_clear_failure_and_a_retry_succeeds() {
    let cluster = Cluster::start().await;
    let disk = cluster.dir.path().join("agent-disk");
    if !mount_tmpfs(&disk, "4m") {
        println!(
            "diskfull: skipped: this process cannot mount a tmpfs (run the tests as root to include it)"
        );
        return;
    }
    let _mounted = Mounted(&disk);
    let jobs_dir = disk.join("jobs");
    // No --disk-free-percent-override: the agent reads the tmpfs itself.
    let mut command = cluster.agent_command("small-disk", 1, &jobs_dir);
    command.args(["--token", &cluster.agent_token("small-disk")]);
    let _agent = Agent {
        child: command.spawn().unwrap(),
        jobs_dir: jobs_dir.clone(),
    };
    cluster.wait_for_nodes(1).await;
    let work = disk.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let job = cluster
        .submit(json!({
            "name": "fills-its-disk", "working_dir": work, "max_attempts": 1,
            "command": sh("echo saving; dd if=/dev/zero of=checkpoint.bin bs=64k count=1000 2>/dev/null || exit 3"),
        }))
        .await;
    let failed = cluster.wait_for(&job.id, JobStatus::Failed).await;
    assert_eq!(
        failed.attempts[0].exit_code,
        Some(3),
        "{}",
        serde_json::to_string_pretty(&failed).unwrap()
    );
    let disk_low = cluster.events(&format!("job_id={}&kind=DISK_LOW", job.id)).await;
    assert_eq!(disk_low.len(), 1, "one DISK_LOW for the attempt");
    let run_id = failed.run_id.clone();
    let (status, explanation) = cluster.get(&format!("/runs/{run_id}/failure")).await;
    assert_eq!(status, 200, "{explanation}");
    assert_eq!(explanation["category"], "disk full", "{explanation}");
    assert!(
        jobs_dir.join(&job.id).join("attempt-1").is_dir(),
        "the agent keeps the attempt's files"
    );

    // Space returns: the same job, retried, runs to its end.
    remount(&disk, "64m");
    let (status, body) = cluster.post(&format!("/jobs/{}/retry", job.id), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(done.attempts.len(), 2);
    println!(
        "diskfull: the agent's 4 MiB disk filled: DISK_LOW, failure explained as `disk full`; after a remount the retry succeeded"
    );
}
