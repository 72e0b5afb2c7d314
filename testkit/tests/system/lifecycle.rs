//! The end of a run's life, with real jobs on a real agent: archiving takes
//! a run and its job out of the lists and back; deleting removes them with
//! everything they recorded (metrics, texts, config, output, events, share
//! links); neither touches a job that still runs or that a queued job waits
//! for; retention deletes old output and old archived runs. Each project's
//! usage is counted.

use gpuplane_api::auth::Scope;
use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::sql;
use gpuplane_testkit::{WAIT, eventually, user_token};
use reqwest::Method;
use serde_json::{Value, json};

/// The ids in a page of runs or jobs.
fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_archived_deleted_and_aged_out_with_everything_they_recorded() {
    let cluster = Cluster::start_with(|config| {
        config.settings.log_retention_days = 1;
        config.settings.archived_run_retention_days = 1;
    })
    .await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let db = cluster.server.state.db.clone();
    let editor = user_token(&db, "eddie", Scope::Write, false).await;

    // A job that prints, sends metrics and a text to its run, and fails.
    let code = r#"
import json, os, sys, urllib.request
print("step 1", flush=True)
body = {"batch_id": "b", "points": [{"key": "train/loss", "step": s, "wall_time": 1.7e9 + s, "value": 1.0} for s in range(50)],
        "texts": [{"key": "sample", "step": 49, "wall_time": 1.7e9, "text": "hello"}]}
request = urllib.request.Request(os.environ["GPUCTL_SERVER"] + "/api/v1/runs/" + os.environ["GPUCTL_RUN_ID"] + "/metrics",
    data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + os.environ["GPUCTL_TOKEN"], "Content-Type": "application/json"})
urllib.request.urlopen(request)
print("giving up", file=sys.stderr, flush=True)
sys.exit(3)
"#;
    let done = cluster
        .submit(json!({"name": "to-delete", "command": ["python3", "-c", code], "max_attempts": 1, "resources": {"gpu": 1}}))
        .await;
    let done = cluster.wait_for(&done.id, JobStatus::Failed).await;
    eventually("both output lines", WAIT, || async {
        (cluster.logs(&done.id, "").await.lines.len() == 2).then_some(())
    })
    .await;
    let run_id = done.run_id.clone();
    let (status, _) = cluster
        .post(&format!("/runs/{run_id}/config"), json!({"config": {"lr": 0.1}}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = cluster.post(&format!("/runs/{run_id}/shares"), json!({})).await;
    assert_eq!(status, 201);

    // A running job cannot be archived or deleted.
    let running = cluster
        .submit(json!({"name": "still-running", "command": sh("echo started; sleep 60"), "resources": {"gpu": 1}}))
        .await;
    let running = cluster.wait_for(&running.id, JobStatus::Running).await;
    // Its line counts in the project's usage below once it has arrived.
    eventually("the running job's line", WAIT, || async {
        (cluster.logs(&running.id, "").await.lines.len() == 1).then_some(())
    })
    .await;
    for (method, path) in [
        (Method::POST, format!("/runs/{}/archive", running.run_id)),
        (Method::DELETE, format!("/runs/{}", running.run_id)),
    ] {
        let (status, body) = cluster.call(method, &path, None, &cluster.token).await;
        assert_eq!(status, 409, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("is RUNNING"),
            "{body}"
        );
    }
    // Editors are not project admins.
    let (status, _) = cluster
        .call(Method::POST, &format!("/runs/{run_id}/archive"), None, &editor)
        .await;
    assert_eq!(status, 403);
    let (status, _) = cluster
        .call(Method::DELETE, &format!("/runs/{run_id}"), None, &editor)
        .await;
    assert_eq!(status, 403);

    // Archived: out of the run and job lists, in the archived ones, and back.
    let (status, archived) = cluster
        .post(&format!("/runs/{run_id}/archive"), json!(null))
        .await;
    assert_eq!(status, 200, "{archived}");
    assert!(archived["archived_at"].is_string());
    assert!(!ids(&cluster.get("/runs").await.1).contains(&run_id));
    assert_eq!(
        ids(&cluster.get("/runs?archived=true").await.1),
        [run_id.as_str()]
    );
    assert!(!ids(&cluster.get("/jobs").await.1).contains(&done.id));
    assert_eq!(
        ids(&cluster.get("/jobs?archived=true").await.1),
        [done.id.as_str()]
    );
    let (status, back) = cluster
        .post(&format!("/runs/{run_id}/unarchive"), json!(null))
        .await;
    assert_eq!(status, 200);
    assert_eq!(back["archived_at"], Value::Null);
    assert!(ids(&cluster.get("/runs").await.1).contains(&run_id));

    // What the project keeps.
    let (_, usage) = cluster.get("/projects/usage").await;
    let default = &usage["items"][0];
    assert_eq!(default["project"], "default");
    assert_eq!(default["runs"], 2);
    assert_eq!(default["metric_points"], 50);
    // Compressed chunks and their summaries: more than nothing, less than raw.
    let metric_bytes = default["metric_bytes"].as_i64().unwrap();
    assert!(metric_bytes > 0 && metric_bytes < 50 * 24 + 3 * 72, "{default}");
    assert!(default["log_lines"].as_i64().unwrap() >= 3, "{default}");
    assert_eq!(default["text_bytes"], 5);

    // A queued job waiting for it keeps it.
    let waiting = cluster
        .submit(
            json!({"name": "waits", "command": sh("true"), "resources": {"gpu": 1},
                       "after": [format!("{}:finished", done.id)]}),
        )
        .await;
    let (status, body) = cluster
        .call(Method::DELETE, &format!("/runs/{run_id}"), None, &cluster.token)
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains(&waiting.id),
        "{body}"
    );
    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", waiting.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);

    // Deleted, with everything recorded about it.
    let (status, deleted) = cluster
        .call(Method::DELETE, &format!("/runs/{run_id}"), None, &cluster.token)
        .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["job_id"], done.id.as_str());
    assert_eq!(deleted["metric_points"], 50);
    assert_eq!(deleted["log_lines"], 2);
    assert!(deleted["events"].as_i64().unwrap() >= 1, "{deleted}");
    assert_eq!(cluster.get(&format!("/runs/{run_id}")).await.0, 404);
    assert_eq!(cluster.get(&format!("/jobs/{}", done.id)).await.0, 404);
    for (table, column, id) in [
        ("metric_chunks", "run_id", &run_id),
        ("metric_series", "run_id", &run_id),
        ("metric_batches", "run_id", &run_id),
        ("run_texts", "run_id", &run_id),
        ("run_config", "run_id", &run_id),
        ("share_links", "run_id", &run_id),
        ("events", "run_id", &run_id),
        ("events", "job_id", &done.id),
        ("log_lines", "job_id", &done.id),
        ("attempts", "job_id", &done.id),
    ] {
        let left: i64 = sql!(&db, |pool| {
            sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE {column} = $1"))
                .bind(id)
                .fetch_one(pool)
                .await
        })
        .unwrap();
        assert_eq!(left, 0, "{table} still holds rows of {id}");
    }
    let (_, audit) = cluster.get("/audit?action=run.delete").await;
    assert_eq!(audit["items"][0]["target"], run_id.as_str());

    // Retention: output of jobs that ended long ago, and old archived runs.
    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", running.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    cluster.wait_for(&running.id, JobStatus::Cancelled).await;
    let two_days_ago = gpuplane_server::store::time::now_ms() - 2 * 24 * 3600 * 1000;
    sql!(&db, |pool| {
        sqlx::query("UPDATE jobs SET updated_at = $1 WHERE id = $2")
            .bind(two_days_ago)
            .bind(&running.id)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (_, sdk_run) = cluster
        .post("/runs", json!({"project": "default", "name": "old"}))
        .await;
    let sdk_run = sdk_run["id"].as_str().unwrap().to_string();
    cluster
        .post(&format!("/runs/{sdk_run}/archive"), json!(null))
        .await;
    sql!(&db, |pool| {
        sqlx::query("UPDATE runs SET archived_at = $1 WHERE id = $2")
            .bind(two_days_ago)
            .bind(&sdk_run)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    // MLflow artifacts of the run retention deletes, and of the job's run that stays.
    let gpuplane_server::config::ArtifactLocation::Folder(root) =
        &cluster.server.state.config.artifact_location
    else {
        panic!("the test server keeps its artifacts in a folder");
    };
    let artifacts = root.join("0");
    for run_id in [&sdk_run, &running.run_id] {
        std::fs::create_dir_all(artifacts.join(run_id).join("artifacts")).unwrap();
        std::fs::write(artifacts.join(run_id).join("artifacts/model.pt"), "weights").unwrap();
    }
    gpuplane_server::apply_retention(&cluster.server.state)
        .await
        .unwrap();
    assert!(
        !artifacts.join(&sdk_run).exists(),
        "a deleted run's artifacts go with it"
    );
    assert!(
        artifacts
            .join(&running.run_id)
            .join("artifacts/model.pt")
            .exists()
    );
    assert!(cluster.logs(&running.id, "").await.lines.is_empty());
    assert_eq!(
        cluster.job(&running.id).await.status,
        JobStatus::Cancelled,
        "the job itself stays"
    );
    assert_eq!(cluster.get(&format!("/runs/{sdk_run}")).await.0, 404);
    assert_eq!(cluster.get(&format!("/runs/{}", running.run_id)).await.0, 200);
}

/// Delete means gone: deleting a run also removes its job's process
/// telemetry, leaves none of its text in the database's files (SQLite
/// zeroes freed pages and the write-ahead log is truncated), and the agent
/// that ran it removes its attempt folders (output, state, spool).
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_run_leaves_no_telemetry_no_text_and_no_attempt_folder() {
    let cluster = Cluster::start().await;
    let agent = cluster.agent("box", 1, &["--telemetry-interval", "0.2"]);
    cluster.wait_for_nodes(1).await;
    let marker = "output-marker-run-delete-4711";
    let job = cluster
        .submit(json!({"name": "doomed", "resources": {"gpu": 1}, "command": sh(&format!("echo {marker}; sleep 1.5"))}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let note = "note-marker-run-delete-8812";
    let (status, body) = cluster
        .call(
            Method::PATCH,
            &format!("/runs/{}", job.run_id),
            Some(json!({"notes": note})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let db = cluster.server.state.db.clone();
    let telemetry = |db: gpuplane_server::store::Db, job_id: String| async move {
        let prefix = format!("{job_id}.");
        let keys: Vec<String> = sql!(&db, |pool| {
            sqlx::query_scalar(
                "SELECT key FROM telemetry_series WHERE substr(key, 1, length($1)) = $1
                 UNION ALL SELECT key FROM metric_chunks WHERE substr(key, 1, length($1)) = $1",
            )
            .bind(&prefix)
            .fetch_all(pool)
            .await
        })
        .unwrap();
        keys
    };
    eventually("the job's process telemetry", WAIT, || async {
        (!telemetry(db.clone(), job.id.clone()).await.is_empty()).then_some(())
    })
    .await;
    let folder = agent.jobs_dir.join(&job.id);
    assert!(folder.join("attempt-1").join("stdout.log").exists());

    let (status, body) = cluster
        .call(
            Method::DELETE,
            &format!("/runs/{}", job.run_id),
            None,
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(telemetry(db.clone(), job.id.clone()).await, Vec::<String>::new());
    let bytes = gpuplane_testkit::postgres::stored_bytes(&cluster.dir.path().join("server")).await;
    for text in [marker, note] {
        assert!(
            !bytes.windows(text.len()).any(|w| w == text.as_bytes()),
            "{text} is still in the database's files"
        );
    }
    eventually("the agent removed the attempt folder", WAIT, || async {
        (!folder.exists()).then_some(())
    })
    .await;
    eventually("the server forgot the cleanup", WAIT, || async {
        let left: i64 = sql!(&db, |pool| {
            sqlx::query_scalar("SELECT count(*) FROM attempt_cleanups")
                .fetch_one(pool)
                .await
        })
        .unwrap();
        (left == 0).then_some(())
    })
    .await;
}
