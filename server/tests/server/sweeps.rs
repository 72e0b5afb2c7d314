//! Sweeps through the API: a W&B-style file makes trials that are jobs of
//! its project with their values in argv, variables and run config; pause,
//! resume and stop; hostile files refused with nothing stored; and nobody
//! outside the project (nor a viewer, nor a job's sdk token) reads,
//! creates or changes one.

use crate::People;
use gpuplane_testkit::{TestServer, agent_token, eventually, simulated_gpu};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn sweep_file(project: &str) -> Value {
    json!({
        "name": "lr-search",
        "method": "random",
        "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {
            "lr": {"distribution": "log_uniform_values", "min": 0.0001, "max": 0.1},
            "opt": {"values": ["adam", "sgd; rm -rf /", "$(reboot)"]},
            "layers": {"min": 1, "max": 4},
        },
        "run_cap": 5,
        "max_concurrent": 3,
        "early_terminate": {"type": "asha", "min_step": 2},
        "job": {"project": project, "command": ["python3", "train.py", "--lr=${lr}", "--opt=${opt}", "${layers}"]},
    })
}

async fn sweep(f: &TestServer, token: &str, id: &str) -> Value {
    let (status, body) = f.get(&format!("/sweeps/{id}"), token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_makes_its_trials_as_jobs_with_their_values_and_is_paused_resumed_and_stopped() {
    let f = TestServer::start().await;
    let People { admin, .. } = People::of_vision(&f).await;
    let (status, created) = f.post("/sweeps", &admin, sweep_file("vision")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("swp_"), "{created}");
    assert_eq!(
        (
            &created["state"],
            &created["method"],
            &created["max_trials"],
            &created["project"]
        ),
        (&json!("RUNNING"), &json!("random"), &json!(5), &json!("vision"))
    );
    assert_eq!(
        created["early_terminate"],
        json!({"type": "asha", "min_step": 2, "reduction_factor": 3, "min_early_stopping_rate": 0, "bootstrap_count": 0})
    );
    // Three at once (max_concurrent), none more while they wait for a GPU.
    let trials = eventually("three trials", WAIT, || async {
        let shown = sweep(&f, &admin, &id).await;
        let trials = shown["trials"].as_array().cloned().unwrap_or_default();
        (trials.len() == 3).then_some(trials)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        sweep(&f, &admin, &id).await["trials"].as_array().unwrap().len(),
        3
    );
    for (number, trial) in trials.iter().enumerate() {
        assert_eq!(trial["number"], json!(number));
        assert_eq!(trial["state"], "QUEUED");
        let params = &trial["params"];
        let lr = params["lr"].as_f64().unwrap();
        assert!((0.0001..=0.1).contains(&lr), "{params}");
        let (status, job) = f
            .get(&format!("/jobs/{}", trial["job_id"].as_str().unwrap()), &admin)
            .await;
        assert_eq!(status, StatusCode::OK, "{job}");
        assert_eq!(job["project"], "vision");
        assert_eq!(job["name"], format!("lr-search-{number}"));
        // Each value is one argv element, whatever it holds: no shell reads it.
        assert_eq!(
            job["spec"]["command"],
            json!([
                "python3",
                "train.py",
                format!("--lr={lr}"),
                format!("--opt={}", params["opt"].as_str().unwrap()),
                params["layers"].to_string()
            ])
        );
        let env = &job["spec"]["env"];
        assert_eq!(env["GPUCTL_SWEEP_ID"], json!(id));
        assert_eq!(env["GPUCTL_SWEEP_TRIAL"], json!(number.to_string()));
        let sent: Value = serde_json::from_str(env["GPUCTL_SWEEP_PARAMS"].as_str().unwrap()).unwrap();
        assert_eq!(&sent, params);
        // The run records the parameters as its config.
        let (_, run) = f
            .get(&format!("/runs/{}", trial["run_id"].as_str().unwrap()), &admin)
            .await;
        assert_eq!(&run["config"], params, "{run}");
    }

    // Paused: no new trial when one ends; resumed: the next comes.
    let (status, paused) = f.post(&format!("/sweeps/{id}/pause"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(
        (&paused["state"], &paused["reason"]),
        (&json!("PAUSED"), &json!("paused by ada"))
    );
    let first_job = trials[0]["job_id"].as_str().unwrap();
    let (status, body) = f
        .post(
            &format!("/jobs/{first_job}/cancel"),
            &admin,
            json!({"confirm": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        sweep(&f, &admin, &id).await["trials"].as_array().unwrap().len(),
        3
    );
    let (status, resumed) = f.post(&format!("/sweeps/{id}/resume"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["state"], "RUNNING");
    eventually("a fourth trial after resume", WAIT, || async {
        let shown = sweep(&f, &admin, &id).await;
        (shown["trials"].as_array().unwrap().len() == 4).then_some(())
    })
    .await;

    // Stopping needs a confirmation, then cancels every open trial.
    let (status, body) = f.post(&format!("/sweeps/{id}/stop"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "confirm");
    let (status, stopped) = f
        .post(&format!("/sweeps/{id}/stop"), &admin, json!({"confirm": true}))
        .await;
    assert_eq!(status, StatusCode::OK, "{stopped}");
    assert_eq!(stopped["state"], "STOPPED");
    assert_eq!(stopped["trial_states"], json!({"CANCELLED": 4}), "{stopped}");
    assert!(stopped["ended_at"].is_string());
    let (status, body) = f.post(&format!("/sweeps/{id}/resume"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = f.post(&format!("/sweeps/{id}/explode"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        sweep(&f, &admin, &id).await["trials"].as_array().unwrap().len(),
        4
    );

    // Listed, newest first, without trials.
    let (status, page) = f.get("/sweeps?project=vision", &admin).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["items"][0].get("trials").is_none(), "{page}");
    let (_, audit) = f.get("/audit?limit=50", &admin).await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == json!(id))
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["sweep.stop", "sweep.resume", "sweep.pause", "sweep.create"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_sweep_files_are_refused_naming_the_field_with_nothing_stored() {
    let f = TestServer::start().await;
    let People { admin, .. } = People::of_vision(&f).await;
    let with = |path: &[&str], value: Value| {
        let mut file = sweep_file("vision");
        let mut at = &mut file;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = value;
        file
    };
    let cases = [
        (
            with(&["parameters", "x\u{1b}[31m"], json!({"value": 1})),
            "parameters.x\u{1b}[31m",
        ),
        (
            with(&["parameters", "${HOME}"], json!({"value": 1})),
            "parameters.${HOME}",
        ),
        (with(&["parameters", "lr", "min"], json!(-1)), "parameters.lr.min"),
        (with(&["run_cap"], json!(1_000_000)), "max_trials"),
        (with(&["max_concurrent"], json!(0)), "max_concurrent"),
        (
            with(&["job", "secret_env"], json!({"KEY": "hunter2"})),
            "job.secret_env",
        ),
        (with(&["job", "array"], json!("0-9")), "job.array"),
        (with(&["job", "command"], json!([])), "job.command"),
        (
            with(&["job", "working_dir"], json!("relative/dir")),
            "job.working_dir",
        ),
        (
            with(&["job", "resources"], json!({"gpu": -1})),
            "job.resources.gpu",
        ),
        (
            with(&["early_terminate"], json!({"type": "asha", "eta": 1})),
            "early_terminate.reduction_factor",
        ),
        (with(&["project"], json!("speech")), "project"),
        (with(&["job", "project"], json!("nowhere")), "project"),
    ];
    for (file, field) in cases {
        let (status, body) = f.post("/sweeps", &admin, file).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {body}");
        let fields: Vec<&str> = body["error"]["details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["field"].as_str().unwrap())
            .collect();
        assert!(fields.contains(&field), "{field}: {body}");
    }
    let (status, body) = f
        .post("/sweeps", &admin, json!({"method": "random", "paramters": {}}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let count: i64 = gpuplane_testkit::sql!(&f.server.state.db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM sweeps")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(count, 0);
    let (_, jobs) = f.get("/jobs", &admin).await;
    assert_eq!(jobs["items"], json!([]), "no trial was made");
}

/// Another project's editor, a viewer, a token limited to another project
/// and a job's own sdk token try a sweep's routes.
#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_stays_inside_its_project() {
    let f = TestServer::start().await;
    let people = People::of_vision(&f).await;
    let People {
        admin,
        viewer,
        outsider,
        limited,
    } = people.clone();
    let mut file = sweep_file("vision");
    file["max_concurrent"] = json!(1);
    file["job"]["resources"] = json!({"gpu": 1});
    let (status, created) = f.post("/sweeps", &admin, file.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    // A node takes the first trial: its attempt's sdk token exists.
    let node_token = agent_token(&f.server.state.db).await;
    let gpu = serde_json::to_value(simulated_gpu(0)).unwrap();
    let hello = json!({"name": "n1", "hostname": "n1", "gpus": [gpu], "agent_version": "test", "runners": ["process"]});
    let (status, body) = f.post("/agent/hello", &node_token, hello).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let trial_job = eventually("the first trial dispatched", WAIT, || async {
        let shown = sweep(&f, &admin, &id).await;
        let trial = shown["trials"].get(0)?.clone();
        (trial["state"] == "DISPATCHING").then(|| trial["job_id"].as_str().unwrap().to_string())
    })
    .await;
    let sdk = f.server.state.secret.attempt_token(&trial_job, 1);

    // The viewer reads it; nobody else does, nor finds it in a list.
    assert_eq!(sweep(&f, &viewer, &id).await["id"], json!(id));
    for token in [&outsider, &limited] {
        let (status, _) = f.get(&format!("/sweeps/{id}"), token).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, page) = f.get("/sweeps", token).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(page["items"], json!([]), "the list hides another project's sweep");
    }
    let (status, _) = f.get(&format!("/sweeps/{id}"), &sdk).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a job's sdk token reads no sweep");
    for action in ["stop", "pause", "resume"] {
        people
            .cannot_cancel(&f, &format!("/sweeps/{id}/{action}"), &sdk)
            .await;
    }
    // Nor may they create one in vision.
    for token in [&viewer, &outsider, &limited, &sdk] {
        let (status, body) = f.post("/sweeps", token, file.clone()).await;
        assert!(
            [StatusCode::FORBIDDEN, StatusCode::UNPROCESSABLE_ENTITY].contains(&status),
            "{status} {body}"
        );
    }
    let count: i64 = gpuplane_testkit::sql!(&f.server.state.db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM sweeps")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(count, 1, "only the admin's sweep is stored");
    assert_eq!(
        sweep(&f, &admin, &id).await["state"],
        "RUNNING",
        "nobody paused or stopped it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_whose_creator_is_no_longer_an_editor_makes_no_more_trials() {
    let f = TestServer::start().await;
    let People { admin, .. } = People::of_vision(&f).await;
    let eve =
        gpuplane_testkit::user_token(&f.server.state.db, "eve", gpuplane_api::auth::Scope::Write, false)
            .await;
    let member = |role: &str| json!({"user": "eve", "role": role});
    let (status, body) = f.post("/projects/vision/members", &admin, member("editor")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut file = sweep_file("vision");
    file["max_concurrent"] = json!(1);
    let (status, created) = f.post("/sweeps", &eve, file).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["created_by"], "eve");
    let first = eventually("the first trial", WAIT, || async {
        let shown = sweep(&f, &admin, &id).await;
        Some(shown["trials"].get(0)?["job_id"].as_str()?.to_string())
    })
    .await;
    let (_, job) = f.get(&format!("/jobs/{first}"), &admin).await;
    assert_eq!(job["submitted_by"], "eve", "trials are the creator's jobs");
    let (status, body) = f.post("/projects/vision/members", &admin, member("viewer")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = f
        .post(&format!("/jobs/{first}/cancel"), &admin, json!({"confirm": true}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let failed = eventually("the sweep fails", WAIT, || async {
        let shown = sweep(&f, &admin, &id).await;
        (shown["state"] == "FAILED").then_some(shown)
    })
    .await;
    assert_eq!(
        failed["reason"],
        "its creator is no longer an editor of project vision: no more trials"
    );
    assert_eq!(failed["trials"].as_array().unwrap().len(), 1);
}
