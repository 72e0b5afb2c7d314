//! A run's config, tags and notes: recorded through the API, checked field by
//! field, changed by editors and the job's own token only, and filtered on.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::sql;
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

    // Renaming (`gpuplane.init(name=…)` in a job does it): one line of 1-200
    // characters; a hostile name is refused on `name` and changes nothing.
    let (_, found) = f.get("/runs?q=no-config", &ada).await;
    let plain = found["items"][0]["id"].as_str().unwrap().to_string();
    let long = "x".repeat(201);
    for bad in [
        "",
        "   ",
        "line\nbreak",
        "bell\u{7}",
        "\u{1b}]0;title\u{7}",
        long.as_str(),
    ] {
        let (status, body) = f
            .call(
                "PATCH",
                &format!("/runs/{plain}"),
                &ada,
                Some(json!({"name": bad, "notes": "not kept"})),
            )
            .await;
        assert_eq!(
            (status, body["error"]["details"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("name")),
            "{bad:?}: {body}"
        );
    }
    let (status, renamed) = f
        .call(
            "PATCH",
            &format!("/runs/{plain}"),
            &ada,
            Some(json!({"name": "  baseline v2  "})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{renamed}");
    assert_eq!(
        (&renamed["name"], &renamed["notes"]),
        (&json!("baseline v2"), &json!("")),
        "trimmed; the refused changes left nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_lists_sort_by_any_column_missing_values_last_and_page_through_every_match() {
    let f = TestServer::start().await;
    let ada = user_token(f.db(), "ada", Scope::Write, false).await;
    // name, config, latest eval/acc (None: no points; "NaN": a non-finite latest value)
    let runs = [
        ("a", json!({"lr": 0.01, "opt": "sgd"}), Some(json!(0.7))),
        ("b", json!({"lr": 0.001}), Some(json!("NaN"))),
        ("c", json!({"lr": "auto"}), Some(json!(0.9))),
        ("d", json!({}), None),
        ("e", json!({"lr": 0.1, "opt": "adam"}), Some(json!(0.8))),
        ("f", json!({"lr": 3}), Some(json!(0.6))),
    ];
    for (name, config, accuracy) in runs {
        let (status, run) = f
            .call(
                "POST",
                "/runs",
                &ada,
                Some(json!({"name": name, "config": config, "tags": ["sweep"]})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        if let Some(value) = accuracy {
            let id = run["id"].as_str().unwrap();
            let batch = json!({"batch_id": "b1", "points": [
                {"key": "eval/acc", "step": 1, "wall_time": 1764460800.0, "value": value}]});
            let (status, body) = f
                .call("POST", &format!("/runs/{id}/metrics"), &ada, Some(batch))
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    // A run in a project ada cannot see: in no list order and no plot of hers.
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let (status, _) = f
        .call("POST", "/projects", &root, Some(json!({"name": "hidden"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let body = json!({"project": "hidden", "name": "h", "config": {"lr": 0.05}});
    let (status, _) = f.call("POST", "/runs", &root, Some(body)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, all) = f.get("/runs?sort=config.lr", &root).await;
    assert_eq!(
        ids(&all),
        ["b", "a", "h", "e", "f", "c", "d"],
        "an admin sees every project"
    );
    for (sort, expected) in [
        // Numbers, then texts, then runs without the key (newest first among equals).
        ("config.lr", vec!["b", "a", "e", "f", "c", "d"]),
        ("-config.lr", vec!["c", "f", "e", "a", "b", "d"]),
        ("config.opt", vec!["e", "a", "f", "d", "c", "b"]),
        // A NaN latest value sorts with the missing ones.
        ("eval/acc", vec!["f", "a", "e", "c", "d", "b"]),
        ("-metric.eval/acc", vec!["c", "e", "a", "f", "d", "b"]),
        ("-name", vec!["f", "e", "d", "c", "b", "a"]),
        ("newest", vec!["f", "e", "d", "c", "b", "a"]),
        ("created", vec!["a", "b", "c", "d", "e", "f"]),
    ] {
        let (status, page) = f.get(&format!("/runs?sort={sort}"), &ada).await;
        assert_eq!(status, StatusCode::OK, "{sort}: {page}");
        assert_eq!(ids(&page), expected, "sort={sort}");
        // Two at a time, the cursor walks the same order.
        let mut walked = Vec::new();
        let mut cursor = String::new();
        loop {
            let (_, page) = f.get(&format!("/runs?sort={sort}&limit=2{cursor}"), &ada).await;
            walked.extend(ids(&page).into_iter().map(String::from));
            match page["next_before"].as_i64() {
                Some(next) => cursor = format!("&before={next}"),
                None => break,
            }
        }
        assert_eq!(walked, expected, "pages of sort={sort}");
    }
    // Sorting composes with filters.
    let (_, page) = f.get("/runs?sort=-config.lr&config.lr=%3C1", &ada).await;
    assert_eq!(ids(&page), ["e", "a", "b"]);
    // Every run shows how long it has gone (an SDK run: since it was made).
    assert!(
        page["items"][0]["duration_s"].as_i64().is_some_and(|s| s >= 0),
        "{page}"
    );
    let (status, body) = f.get("/runs?sort=config.", &ada).await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("sort")),
        "{body}"
    );

    // The scatter plot: a dot per run with numbers on both axes (a, e, f),
    // the others counted; the same filters as the list.
    let svg = f
        .get_text("/runs/scatter.svg?x=config.lr&y=eval/acc&x_scale=log", &ada)
        .await;
    assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
    assert!(
        svg.contains("eval/acc by config.lr (3 runs, 3 without numbers left out)"),
        "{svg}"
    );
    assert!(svg.contains("config.lr (log scale)"), "{svg}");
    let svg = f
        .get_text("/runs/scatter.svg?x=config.lr&y=eval/acc&config.lr=%3C1", &ada)
        .await;
    assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
    for (query, field) in [
        ("x=name&y=eval/acc", "x"),
        ("x=config.lr&y=eval/acc&y_scale=cubic", "y_scale"),
        ("x=config.lr&y=eval/acc&colour=red", "colour"),
    ] {
        let (status, body) = f.get(&format!("/runs/scatter.svg?{query}"), &ada).await;
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
    sql!(&db, |pool| {
        sqlx::query("UPDATE api_tokens SET run_id = $1 WHERE token_hash = $2")
            .bind(run_id)
            .bind(gpuplane_server::identity::credentials::hash_token(&job_token))
            .execute(pool)
            .await
            .map(|_| ())
    })
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
    // A job's run follows its job: not even an admin reopens or finishes it by hand.
    let (status, body) = f
        .call(
            "PATCH",
            &format!("/runs/{run_id}"),
            &root,
            Some(json!({"finished": false, "notes": "reopen"})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("finished")),
        "{body}"
    );
    let (_, run) = f.get(&format!("/runs/{run_id}"), &vic).await;
    assert_eq!(run["notes"], json!(""), "nothing of a refused change is kept");
}
