//! A full disk under the server's data dir (a small tmpfs the test mounts;
//! it needs root, and says so and stops where it cannot mount): ingest
//! answers 507 with a clear message, never a 2xx it cannot keep; health
//! still answers; once space returns ingest resumes, and after a `kill -9`
//! and a restart every acknowledged point is there once and the database
//! passes its integrity check.

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
