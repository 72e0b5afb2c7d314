//! MLflow's experiments over the store, on SQLite and on PostgreSQL
//! (`scripts/with-postgres.sh`): named experiments inside projects, their
//! tags, renames, deletion with their runs and restoring, and the search.
//! The mlflow client's own tests are in `testkit/mlflow/`.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn mlflow(f: &TestServer, token: &str, method: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let url = f.url(&format!("/api/2.0/mlflow/{path}"));
    let request = match method {
        "GET" => f.http.get(url).query(
            &body
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect::<Vec<_>>(),
        ),
        _ => f.http.post(url).json(&body),
    };
    let response = request.bearer_auth(token).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn named_experiments_keep_their_tags_runs_and_lifecycle() {
    let f = TestServer::start().await;
    let admin = f.user("mlflow-admin", Scope::Write, true).await;
    let (status, created) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/create",
        json!({"name": "Sweep A", "tags": [{"key": "team", "value": "vision"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["experiment_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("0:"), "{id}");
    let (status, again) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/create",
        json!({"name": "Sweep A"}),
    )
    .await;
    assert_eq!(
        (status, again["error_code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("RESOURCE_ALREADY_EXISTS"))
    );

    let (_, run) = mlflow(
        &f,
        &admin,
        "POST",
        "runs/create",
        json!({"experiment_id": id, "start_time": 5}),
    )
    .await;
    let run_id = run["run"]["info"]["run_id"].as_str().unwrap().to_string();
    assert_eq!(run["run"]["info"]["experiment_id"], json!(id));
    assert_eq!(
        run["run"]["info"]["artifact_uri"],
        json!(format!("mlflow-artifacts:/{id}/{run_id}/artifacts"))
    );

    for (path, body) in [
        (
            "experiments/set-experiment-tag",
            json!({"experiment_id": id, "key": "dataset", "value": "birds"}),
        ),
        (
            "experiments/update",
            json!({"experiment_id": id, "new_name": "Sweep B"}),
        ),
    ] {
        let (status, answer) = mlflow(&f, &admin, "POST", path, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
    }
    let (_, found) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/search",
        json!({"filter": "name LIKE 'Sweep%' AND tags.dataset = 'birds'", "order_by": ["creation_time DESC"]}),
    )
    .await;
    let experiments = found["experiments"].as_array().unwrap();
    assert_eq!(experiments.len(), 1, "{found}");
    assert_eq!(experiments[0]["name"], json!("Sweep B"));
    let tags: Vec<&str> = experiments[0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(tags, ["dataset", "team"]);

    // Deleting it archives its run; restoring brings both back.
    let (status, _) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/delete",
        json!({"experiment_id": id}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, got) = mlflow(&f, &admin, "GET", "runs/get", json!({"run_id": run_id})).await;
    assert_eq!(got["run"]["info"]["lifecycle_stage"], json!("deleted"));
    let (_, listed) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/search",
        json!({"view_type": "DELETED_ONLY"}),
    )
    .await;
    assert_eq!(listed["experiments"].as_array().unwrap().len(), 1, "{listed}");
    let (status, refused) = mlflow(&f, &admin, "POST", "runs/create", json!({"experiment_id": id})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, _) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/restore",
        json!({"experiment_id": id}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, got) = mlflow(&f, &admin, "GET", "runs/get", json!({"run_id": run_id})).await;
    assert_eq!(got["run"]["info"]["lifecycle_stage"], json!("active"));
    let (_, runs) = mlflow(&f, &admin, "POST", "runs/search", json!({"experiment_ids": [id]})).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    let (_, own) = mlflow(
        &f,
        &admin,
        "POST",
        "runs/search",
        json!({"experiment_ids": ["0"]}),
    )
    .await;
    assert!(
        own.get("runs")
            .is_none_or(|runs| runs.as_array().unwrap().is_empty()),
        "{own}"
    );

    // The project's own experiment is the project.
    let (status, refused) = mlflow(
        &f,
        &admin,
        "POST",
        "experiments/delete",
        json!({"experiment_id": "0"}),
    )
    .await;
    assert_eq!(
        (status, refused["error_code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("INVALID_PARAMETER_VALUE"))
    );
    let (_, default) = mlflow(
        &f,
        &admin,
        "GET",
        "experiments/get-by-name",
        json!({"experiment_name": "Default"}),
    )
    .await;
    assert_eq!(default["experiment"]["experiment_id"], json!("0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_keeps_any_number_of_mlflow_tags_and_shows_those_that_fit() {
    let f = TestServer::start().await;
    let admin = f.user("mlflow-tagger", Scope::Write, true).await;
    let (status, created) = mlflow(&f, &admin, "POST", "runs/create", json!({"experiment_id": "0"})).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let run_id = created["run"]["info"]["run_id"].as_str().unwrap().to_string();
    // MLflow sets no limit on a run's tags: 120, in two batches of its 100.
    for chunk in [0..100, 100..120] {
        let tags: Vec<Value> = chunk
            .map(|i| json!({"key": format!("t{i}"), "value": "v"}))
            .collect();
        let (status, answer) = mlflow(
            &f,
            &admin,
            "POST",
            "runs/log-batch",
            json!({"run_id": run_id, "tags": tags}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let (_, got) = mlflow(&f, &admin, "GET", "runs/get", json!({"run_id": run_id})).await;
    let kept = got["run"]["data"]["tags"].as_array().unwrap();
    assert_eq!(
        kept.iter()
            .filter(|tag| tag["key"].as_str().unwrap().starts_with('t'))
            .count(),
        120
    );
    let (_, run) = f.get(&format!("/runs/{run_id}"), &admin).await;
    assert_eq!(
        run["tags"].as_array().unwrap().len(),
        gpuplane_api::experiment::MAX_TAGS,
        "as many as a run shows: {run}"
    );
}
