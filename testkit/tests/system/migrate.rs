//! `gpuplane-server admin migrate-to-postgres` on a real install: a server
//! and agent fill every table through the product's own routes (jobs,
//! output, metrics, telemetry, checkpoints, an evaluation, a two-node job, a job array, a sweep, users, a
//! session, a device login, quotas, maintenance, alerts, a share link), the
//! real binary copies it into a real PostgreSQL (`gpuplane_testkit::postgres`)
//! once while the server still runs and once after it stopped, and the
//! second copy holds every row of every table, value for value.

use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::postgres::Postgres;
use gpuplane_testkit::{WAIT, binary, eventually};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, Row};

#[tokio::test(flavor = "multi_thread")]
async fn every_row_of_every_table_reaches_postgresql() {
    let postgres = Postgres::start();
    // Its alert channel points at this host (nobody there): allowed here.
    let cluster = Cluster::start_with(|config| config.settings.alert_private_hosts = true).await;
    let mut agent = cluster.agent("box", 1, &["--telemetry-interval", "0.2"]);
    cluster.wait_for_nodes(1).await;
    fill_every_table(&cluster).await;
    let data_dir = cluster.dir.path().join("server");
    let sqlite_url = format!("sqlite://{}?mode=ro", data_dir.join("gpuplane.db").display());

    // A live install: the server and agent keep writing meanwhile.
    let live = postgres.fresh_database().await;
    let output = migrate(&data_dir, &live, &["--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let copied: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(copied["tables"].as_array().unwrap().len(), 48, "{copied}");

    // Stopped: the copy must equal the install, table by table.
    agent.kill();
    let _dir = cluster.stop_server().await;
    let target = postgres.fresh_database().await;
    let output = migrate(&data_dir, &target, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("metric_chunks"),
        "progress names each table: {stderr}"
    );
    let mut sqlite = sqlx::SqliteConnection::connect(&sqlite_url).await.unwrap();
    let mut pg = sqlx::PgConnection::connect(&target).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%'",
    )
    .fetch_all(&mut sqlite)
    .await
    .unwrap();
    assert_eq!(tables.len(), 48);
    for table in &tables {
        let columns = columns(&mut pg, table).await;
        let from = rows_of_sqlite(&mut sqlite, table, &columns).await;
        let to = rows_of_postgres(&mut pg, table, &columns).await;
        // A fetch relayed between replicas lives seconds; one server never writes it.
        let transient = ["log_fetches", "log_fetch_parts"].contains(&table.as_str());
        assert!(
            !from.is_empty() || transient,
            "{table} has no rows: the test must fill every table"
        );
        assert_eq!(from, to, "{table} differs");
    }
    // Every identity sequence moved past the copied ids: new rows get new ones.
    let identities: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND is_identity = 'YES'",
    )
    .fetch_all(&mut pg)
    .await
    .unwrap();
    assert_eq!(identities.len(), 13, "{identities:?}");
    for (table, column) in identities {
        let (next, max): (i64, i64) = sqlx::query_as(&format!(
            "SELECT nextval(pg_get_serial_sequence('{table}', '{column}')), (SELECT max({column}) FROM {table})"
        ))
        .fetch_one(&mut pg)
        .await
        .unwrap();
        assert!(next > max, "{table}.{column}: next {next} <= max {max}");
    }

    // A second copy into a database that holds data is refused, and changes nothing.
    let output = migrate(&data_dir, &target, &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not empty"), "{stderr}");
}

fn migrate(data_dir: &std::path::Path, url: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(binary("gpuplane-server"))
        .args(["admin", "migrate-to-postgres", "--from"])
        .arg(data_dir)
        .args(["--to", url])
        .args(extra)
        .output()
        .unwrap()
}

/// Everything an install records, through the routes users and agents use.
async fn fill_every_table(cluster: &Cluster) {
    let work = cluster.workdir("migrate");
    // A project with a member, a password user and a console session.
    let (status, body) = cluster
        .post(
            "/users",
            json!({"name": "ada", "password": "correct horse battery", "admin": false}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = cluster.post("/projects", json!({"name": "vision"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = cluster
        .post(
            "/projects/vision/members",
            json!({"user": "ada", "role": "editor"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(format!("{}/login", cluster.server.url))
        .header("origin", &cluster.server.url)
        .form(&[
            ("username", "ada"),
            ("password", "correct horse battery"),
            ("next", "/"),
        ])
        .send()
        .await
        .unwrap();
    assert!(signed_in.headers().contains_key("set-cookie"), "{signed_in:?}");
    let device = http
        .post(format!("{}/oauth/device_authorization", cluster.server.url))
        .form(&[
            ("client_id", "gpuctl"),
            ("client_name", "gpuctl"),
            ("client_host", "box"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(device.status(), 200);
    // An MCP session.
    let mcp = http
        .post(format!("{}/mcp", cluster.server.url))
        .bearer_auth(&cluster.token)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "migrate-test", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 200);

    // Alerts on every event, to a receiver that is not there (a delivery that retries).
    let (status, body) = cluster
        .post("/alerts/channels", json!({"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook", "secret": "s3cret-s3cret-s3cret"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = cluster
        .post("/alerts/subscriptions", json!({"channel": "hook", "all": true}))
        .await;
    assert_eq!(status, 201, "{body}");

    // A job that prints, logs metrics, a text and config, writes checkpoints,
    // and fails twice (its second attempt resumes from step 40: what it
    // logged past that step is set aside).
    let code = r#"
import json, os, sys, urllib.request
print("step 1", flush=True)
body = {"batch_id": "b" + os.environ["GPUCTL_ATTEMPT"], "points": [{"key": "train/loss", "step": s, "wall_time": 1.7e9 + s, "value": 1.0 / (s + 1)} for s in range(50)],
        "texts": [{"key": "sample", "step": 49, "wall_time": 1.7e9, "text": "hello"}]}
request = urllib.request.Request(os.environ["GPUCTL_SERVER"] + "/api/v1/runs/" + os.environ["GPUCTL_RUN_ID"] + "/metrics",
    data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + os.environ["GPUCTL_TOKEN"], "Content-Type": "application/json"})
urllib.request.urlopen(request)
os.makedirs("ckpt", exist_ok=True)
open("ckpt/step_40.pt", "w").write("weights")
print("giving up", file=sys.stderr, flush=True)
sys.exit(3)
"#;
    let job = cluster
        .submit(json!({"name": "train", "command": ["python3", "-c", code], "working_dir": work, "watch_dirs": ["ckpt"], "resources": {"gpu": 1},
                      "max_attempts": 2, "retry_cooldown_s": 0}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Failed).await;
    let (status, body) = cluster
        .post(
            &format!("/runs/{}/config", job.run_id),
            json!({"config": {"lr": 0.001, "optimizer": "adam", "amp": true, "seed": 7}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, created) = cluster
        .post(
            "/evaluations",
            json!({"run_id": job.run_id, "checkpoint": work.join("ckpt/step_40.pt"),
                   "command": sh("printf '{\"metrics\": {\"accuracy\": 0.5}}' > \"$GPUCTL_EVAL_OUTPUT\"")}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    cluster
        .wait_for(created["job_id"].as_str().unwrap(), JobStatus::Succeeded)
        .await;
    // A job on two nodes: its members, one per node. The second agent stays
    // up to the end: a job placed on it after a kill would wait out the
    // server's heartbeat and end LOST.
    let _second = cluster.agent("box2", 1, &[]);
    cluster.wait_for_nodes(2).await;
    let pair = cluster
        .submit(json!({"name": "pair", "command": sh("echo rank $GPUCTL_NODE_RANK"), "resources": {"gpu": 1, "nodes": 2}}))
        .await;
    cluster.wait_for(&pair.id, JobStatus::Succeeded).await;
    // A job array of two tasks.
    let array = cluster
        .submit(json!({"name": "tasks", "command": sh("echo task $GPUCTL_ARRAY_INDEX"), "array": "0-1%1"}))
        .await;
    cluster.wait_for(&array.id, JobStatus::Succeeded).await;
    // A sweep of one trial that logs its metric.
    let (status, sweep) = cluster
        .post(
            "/sweeps",
            json!({"method": "grid", "metric": {"name": "loss"}, "parameters": {"n": {"values": [1]}},
                   "job": {"command": sh("sleep 1; echo trial ${n}")}}),
        )
        .await;
    assert_eq!(status, 201, "{sweep}");
    let sweep_id = sweep["id"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let trial = loop {
        assert!(started.elapsed() < gpuplane_testkit::WAIT, "no trial: {sweep}");
        let (_, shown) = cluster.get(&format!("/sweeps/{sweep_id}")).await;
        if let Some(trial) = shown["trials"].get(0) {
            break trial.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let points = json!({"batch_id": "trial", "points": [{"key": "loss", "step": 1, "wall_time": 1.7e9, "value": 0.25}]});
    let (status, body) = cluster
        .post(
            &format!("/runs/{}/metrics", trial["run_id"].as_str().unwrap()),
            points,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    cluster
        .wait_for(trial["job_id"].as_str().unwrap(), JobStatus::Succeeded)
        .await;
    loop {
        let (_, shown) = cluster.get(&format!("/sweeps/{sweep_id}")).await;
        if shown["trials"][0]["value"] == json!(0.25) && shown["state"] == "FINISHED" {
            break;
        }
        assert!(started.elapsed() < gpuplane_testkit::WAIT * 2, "{shown:#}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, shared) = cluster
        .post(&format!("/runs/{}/shares", job.run_id), json!({}))
        .await;
    assert_eq!(status, 201, "{shared}");
    let viewed = http.get(shared["url"].as_str().unwrap()).send().await.unwrap();
    assert_eq!(viewed.status(), 200);

    // Cluster policy: a quota and maintenance mode (both audited).
    let (status, body) = cluster
        .call(
            Method::PUT,
            "/quotas/project/vision",
            Some(json!({"max_gpus": 2})),
            &cluster.token,
        )
        .await;
    assert!(status < 300, "{body}");
    let (status, body) = cluster
        .call(
            Method::PUT,
            "/maintenance",
            Some(json!({"message": "moving to PostgreSQL"})),
            &cluster.token,
        )
        .await;
    assert!(status < 300, "{body}");

    // A recipe, deprecated (a flag that is 0/1 in SQLite, BOOLEAN in PostgreSQL).
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../recipe/tests/fixtures/sft.v1.toml"
    ))
    .unwrap();
    let (status, body) = cluster.post("/recipes", json!({"source": source})).await;
    assert_eq!(status, 201, "{body}");
    // An experiment's job with its shipped folder.
    let experiment = json!({
        "contract": body["contract"],
        "config": {"base_model": "org/model"},
        "files": [{"path": "train.sh", "executable": true, "content": "ZWNobyBoaQo="}],
    });
    let (status, job) = cluster.post("/recipes/sft/1/jobs", experiment).await;
    assert_eq!(status, 201, "{job}");
    let (status, body) = cluster.post("/recipes/sft/1/deprecate", json!(null)).await;
    assert_eq!(status, 200, "{body}");
    // A run the mlflow client made in an experiment of its own, with its
    // status and tags (MLflow's API).
    let mlflow = |path: &str, body: Value| {
        reqwest::Client::new()
            .post(format!("{}/api/2.0/mlflow/{path}", cluster.server.url))
            .bearer_auth(&cluster.token)
            .json(&body)
            .send()
    };
    let experiment: Value = mlflow(
        "experiments/create",
        json!({"name": "My Sweep", "tags": [{"key": "dataset", "value": "birds"}]}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let created: Value = mlflow(
        "runs/create",
        json!({"experiment_id": experiment["experiment_id"], "tags": [{"key": "team", "value": "a"}]}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let run_id = created["run"]["info"]["run_id"].as_str().unwrap().to_string();
    let ended = mlflow("runs/update", json!({"run_id": run_id, "status": "KILLED"}))
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    // A user's Hub token (sealed; unverified: these tests have no Hub).
    let (status, body) = cluster
        .call(
            Method::PUT,
            "/hf/token",
            Some(json!({"token": "hf_migrated"})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");

    // A cleanup an agent has not acknowledged yet: its node is gone for good.
    sqlx::query(
        "INSERT INTO attempt_cleanups (node_id, job_id, requested_at) VALUES ('node_gone', 'job_gone', 1)",
    )
    .execute(cluster.server.state.db.as_sqlite().unwrap())
    .await
    .unwrap();

    // Telemetry samples and the alert's delivery attempts arrive on their own.
    eventually("telemetry and an alert delivery", WAIT, || async {
        let db = cluster.server.state.db.as_sqlite().unwrap();
        let series: i64 = sqlx::query_scalar("SELECT count(*) FROM telemetry_series")
            .fetch_one(db)
            .await
            .unwrap();
        let deliveries: i64 = sqlx::query_scalar("SELECT count(*) FROM alert_deliveries")
            .fetch_one(db)
            .await
            .unwrap();
        (series > 0 && deliveries > 0).then_some(())
    })
    .await;
}

/// A target column's name and PostgreSQL type.
async fn columns(pg: &mut sqlx::PgConnection, table: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT column_name::text, data_type::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(pg)
    .await
    .unwrap()
}

/// Each row as text, value by value, sorted: integers and flags as
/// numbers, reals by their bits, bytes in hex, JSON re-serialised.
async fn rows_of_sqlite(
    db: &mut sqlx::SqliteConnection,
    table: &str,
    columns: &[(String, String)],
) -> Vec<Vec<String>> {
    let selected: Vec<String> = columns
        .iter()
        .map(|(name, kind)| match kind.as_str() {
            "timestamp with time zone" => format!("CAST(strftime('%s', {name}) AS INTEGER)"),
            // PostgreSQL's runs.seq is SQLite's rowid, copied.
            _ if table == "runs" && name == "seq" => "rowid".to_string(),
            _ => name.clone(),
        })
        .collect();
    let rows = sqlx::query(&format!("SELECT {} FROM {table}", selected.join(", ")))
        .fetch_all(db)
        .await
        .unwrap();
    let mut texts: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| match kind.as_str() {
                    // Times compare in whole seconds since the epoch.
                    "bigint" | "boolean" | "timestamp with time zone" => show(row.get::<Option<i64>, _>(i)),
                    "double precision" => show(row.get::<Option<f64>, _>(i).map(f64::to_bits)),
                    "bytea" => show(row.get::<Option<Vec<u8>>, _>(i).map(hex)),
                    // SQLite's ANY keeps a boolean as 0/1: compare the row's JSON of it.
                    "jsonb" => show(
                        row.get::<Option<String>, _>("json")
                            .filter(|_| {
                                row.try_get_raw(i)
                                    .map(|v| !sqlx::ValueRef::is_null(&v))
                                    .unwrap_or(false)
                            })
                            .map(|json| json_text(&json)),
                    ),
                    _ => show(row.get::<Option<String>, _>(i)),
                })
                .collect()
        })
        .collect();
    texts.sort();
    texts
}

async fn rows_of_postgres(
    db: &mut sqlx::PgConnection,
    table: &str,
    columns: &[(String, String)],
) -> Vec<Vec<String>> {
    let selected: Vec<String> = columns
        .iter()
        .map(|(name, kind)| match kind.as_str() {
            "jsonb" => format!("{name}::text"),
            "timestamp with time zone" => format!("floor(extract(epoch FROM {name}))::bigint"),
            _ => name.clone(),
        })
        .collect();
    let rows = sqlx::query(&format!("SELECT {} FROM {table}", selected.join(", ")))
        .fetch_all(db)
        .await
        .unwrap();
    let mut texts: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| match kind.as_str() {
                    "bigint" | "timestamp with time zone" => show(row.get::<Option<i64>, _>(i)),
                    "boolean" => show(row.get::<Option<bool>, _>(i).map(i64::from)),
                    "double precision" => show(row.get::<Option<f64>, _>(i).map(f64::to_bits)),
                    "bytea" => show(row.get::<Option<Vec<u8>>, _>(i).map(hex)),
                    "jsonb" => show(row.get::<Option<String>, _>(i).map(|json| json_text(&json))),
                    _ => show(row.get::<Option<String>, _>(i)),
                })
                .collect()
        })
        .collect();
    texts.sort();
    texts
}

fn show<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "NULL".to_string(), |v| v.to_string())
}

fn hex(bytes: Vec<u8>) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn json_text(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .unwrap()
        .to_string()
}
