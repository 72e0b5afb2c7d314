//! A run's config, tags and notes: recorded through the API, checked field by
//! field, changed by editors and the job's own token only, and filtered on.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn ids(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_keep_config_tags_and_notes_and_lists_filter_on_them() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let ada = user_token(&db, "ada", Scope::Write, false).await;
    let run = |name: &str, config: Value, tags: Value| {
        let body = json!({"name": name, "config": config, "tags": tags});
        let f = &f;
        let ada = ada.clone();
        async move {
            let (status, run) = f.call("POST", "/runs", &ada, Some(body)).await;
            assert_eq!(status, StatusCode::CREATED, "{run}");
            run
        }
    };
    let small = run(
        "small-lr",
        json!({"lr": 0.0001, "optimizer": "adam", "amp": true}),
        json!(["sweep"]),
    )
    .await;
    run(
        "big-lr",
        json!({"lr": 0.01, "optimizer": "sgd", "amp": false}),
        json!(["sweep", "baseline"]),
    )
    .await;
    run("no-config", json!({}), json!([])).await;
    assert_eq!(
        small["config"],
        json!({"amp": true, "lr": 0.0001, "optimizer": "adam"})
    );
    assert_eq!(small["tags"], json!(["sweep"]));

    // Bad input names each field; nothing of it is kept.
    let (status, body) = f
        .call(
            "POST",
            "/runs",
            &ada,
            Some(json!({"name": "bad", "config": {"layers": [1, 2], "ok": 1}, "tags": ["has space"]})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["config.layers", "tags"], "{body}");
    let (_, all) = f.get("/runs", &ada).await;
    assert_eq!(ids(&all), ["no-config", "big-lr", "small-lr"], "no half-made run");

    // Updates: config keys merge; tags are added, removed or replaced; notes replaced.
    let id = small["id"].as_str().unwrap();
    let (status, updated) = f
        .call(
            "POST",
            &format!("/runs/{id}/config"),
            &ada,
            Some(json!({"config": {"lr": 0.0002, "warmup": 100}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        updated["config"],
        json!({"amp": true, "lr": 0.0002, "optimizer": "adam", "warmup": 100})
    );
    let (status, updated) = f
        .call(
            "PATCH",
            &format!("/runs/{id}"),
            &ada,
            Some(json!({"add_tags": ["best"], "remove_tags": ["sweep"], "notes": "lr 2e-4 wins"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        (&updated["tags"], &updated["notes"]),
        (&json!(["best"]), &json!("lr 2e-4 wins"))
    );

    // Filters: tag, text, and config comparisons (numbers with numbers, texts with texts).
    for (query, expected) in [
        ("tag=sweep", vec!["big-lr"]),
        ("tag=best", vec!["small-lr"]),
        ("q=WINS", vec!["small-lr"]),
        ("config.lr=%3E0.001", vec!["big-lr"]),
        ("config.lr=%3C%3D0.0002", vec!["small-lr"]),
        ("config.optimizer=adam", vec!["small-lr"]),
        ("config.optimizer=!%3Dadam", vec!["big-lr"]),
        ("config.amp=true", vec!["small-lr"]),
        ("config.amp=false&tag=baseline", vec!["big-lr"]),
        ("config.warmup=100", vec!["small-lr"]),
        ("config.missing=1", vec![]),
    ] {
        let (status, page) = f.get(&format!("/runs?{query}"), &ada).await;
        assert_eq!(status, StatusCode::OK, "{query}: {page}");
        assert_eq!(ids(&page), expected, "{query}");
    }
    for (query, field) in [("config.lr=%3Eadam", "config.lr"), ("colour=red", "colour")] {
        let (status, body) = f.get(&format!("/runs?{query}"), &ada).await;
        assert_eq!(
            (status, body["error"]["details"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{query}: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_tag_their_runs_and_only_editors_and_the_jobs_token_change_them() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let ada = user_token(&db, "ada", Scope::Write, false).await;
    let (status, job) = f
        .call(
            "POST",
            "/jobs",
            &ada,
            Some(json!({"name": "tagged", "command": ["true"], "tags": ["nightly", "resnet"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let run_id = job["run_id"].as_str().unwrap();
    let (_, run) = f.get(&format!("/runs/{run_id}"), &ada).await;
    assert_eq!(run["tags"], json!(["nightly", "resnet"]));
    let (status, body) = f
        .call(
            "POST",
            "/jobs",
            &ada,
            Some(json!({"name": "bad", "command": ["true"], "tags": ["no spaces please"]})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("tags"))
    );

    // The job's sdk token writes to its own run only.
    let (_, other) = f
        .call("POST", "/runs", &ada, Some(json!({"name": "other"})))
        .await;
    let other = other["id"].as_str().unwrap();
    let job_token = user_token(&db, "job-owner", Scope::Sdk, false).await;
    sqlx::query("UPDATE api_tokens SET run_id = ? WHERE token_hash = ?")
        .bind(run_id)
        .bind(gpuplane_server::identity::credentials::hash_token(&job_token))
        .execute(&db)
        .await
        .unwrap();
    let config = json!({"config": {"lr": 0.1}});
    let (status, _) = f
        .call(
            "POST",
            &format!("/runs/{run_id}/config"),
            &job_token,
            Some(config.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = f
        .call(
            "POST",
            &format!("/runs/{other}/config"),
            &job_token,
            Some(config.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A viewer reads but does not change; a read token does not either.
    let vic = user_token(&db, "vic", Scope::Write, false).await;
    let root = user_token(&db, "root", Scope::Write, true).await;
    let (status, _) = f
        .call(
            "POST",
            "/projects/default/members",
            &root,
            Some(json!({"user": "vic", "role": "viewer"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = f
        .call(
            "PATCH",
            &format!("/runs/{run_id}"),
            &vic,
            Some(json!({"notes": "mine"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let reader = user_token(&db, "reader", Scope::Read, false).await;
    let (status, _) = f
        .call(
            "PATCH",
            &format!("/runs/{run_id}"),
            &reader,
            Some(json!({"notes": "mine"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, run) = f.get(&format!("/runs/{run_id}"), &vic).await;
    assert_eq!((&run["config"], &run["notes"]), (&json!({"lr": 0.1}), &json!("")));
}
