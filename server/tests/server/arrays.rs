//! Job arrays through the API: one submission queues a task per index with
//! the array's id, the tasks are listed and cancelled together, hostile
//! `array` fields are refused with nothing queued, and nobody outside the
//! project (nor a viewer, nor a job's sdk token) reads or cancels one.

use crate::People;
use gpuplane_testkit::{TestServer, agent_token, eventually, simulated_gpu};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn tasks(f: &TestServer, token: &str, array_id: &str) -> Vec<Value> {
    let (status, page) = f.get(&format!("/jobs?array={array_id}&limit=500"), token).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_array_is_a_task_per_index_listed_and_cancelled_together_or_one_by_one() {
    let f = TestServer::start().await;
    let People { admin, .. } = People::of_vision(&f).await;
    let spec = json!({"name": "shards", "project": "vision", "array": "0-98:2,200%3",
                      "command": ["python", "shard.py", "--index=${GPUCTL_ARRAY_INDEX}", "${HOME}"]});
    let (status, first) = f.post("/jobs", &admin, spec).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let array_id = first["array"]["id"].as_str().unwrap().to_string();
    assert!(array_id.starts_with("arr_"), "{first}");
    assert_eq!(
        first["array"],
        json!({"id": array_id, "index": 0, "tasks": 51, "limit": 3})
    );
    let listed = tasks(&f, &admin, &array_id).await;
    assert_eq!(listed.len(), 51);
    let mut indices: Vec<i64> = listed
        .iter()
        .map(|t| t["array"]["index"].as_i64().unwrap())
        .collect();
    indices.sort();
    let expected: Vec<i64> = (0..=98).step_by(2).chain([200]).collect();
    assert_eq!(indices, expected);
    for task in &listed {
        let index = task["array"]["index"].as_i64().unwrap();
        // Its own index in the command, nothing else replaced; the stored
        // spec is a plain job's (a retry queues that task alone).
        assert_eq!(
            task["spec"]["command"],
            json!(["python", "shard.py", format!("--index={index}"), "${HOME}"])
        );
        assert!(task["spec"].get("array").is_none(), "{task}");
    }
    let runs: std::collections::HashSet<&str> =
        listed.iter().map(|t| t["run_id"].as_str().unwrap()).collect();
    assert_eq!(runs.len(), 51, "a run for each task");
    let (status, array) = f.get(&format!("/arrays/{array_id}"), &admin).await;
    assert_eq!(status, StatusCode::OK, "{array}");
    assert_eq!(
        (
            &array["array"],
            &array["tasks"],
            &array["limit"],
            &array["states"]
        ),
        (
            &json!("0-98:2,200%3"),
            &json!(51),
            &json!(3),
            &json!({"QUEUED": 51})
        )
    );

    // One task alone, then the rest together.
    let one = listed[5]["id"].as_str().unwrap();
    let (status, body) = f
        .post(&format!("/jobs/{one}/cancel"), &admin, json!({"confirm": true}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = f
        .post(&format!("/arrays/{array_id}/cancel"), &admin, json!({}))
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("confirm")),
        "{body}"
    );
    let (status, body) = f
        .post(
            &format!("/arrays/{array_id}/cancel"),
            &admin,
            json!({"confirm": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cancelled"], 50, "{body}");
    assert_eq!(body["array"]["states"], json!({"CANCELLED": 51}), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_arrays_are_refused_naming_the_field_with_nothing_queued() {
    let f = TestServer::start().await;
    let People { admin, .. } = People::of_vision(&f).await;
    for array in [
        "",
        "%2",
        "0-9%0",
        "9-0",
        "0-9:0",
        "-1",
        "0-10000",
        "0-2000000",
        "1,\u{1b}[2J",
        "0-9%",
        "a-b",
        "0-1%99999999999",
    ] {
        let (status, body) = f
            .post(
                "/jobs",
                &admin,
                json!({"name": "bad", "project": "vision", "command": ["true"], "array": array}),
            )
            .await;
        assert_eq!(
            (status, body["error"]["details"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("array")),
            "{array:?}: {body}"
        );
        assert!(
            !body.to_string().contains('\u{1b}'),
            "no raw escape echoed: {body}"
        );
    }
    // The largest array is 10,000 tasks, all stored in one go.
    let (status, body) = f
        .post(
            "/jobs",
            &admin,
            json!({"name": "wide", "project": "vision", "command": ["true"], "array": "0-9999%10"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, array) = f
        .get(
            &format!("/arrays/{}", body["array"]["id"].as_str().unwrap()),
            &admin,
        )
        .await;
    assert_eq!(
        (status, &array["states"]),
        (StatusCode::OK, &json!({"QUEUED": 10000}))
    );
    let (_, page) = f.get("/jobs?limit=1&status=QUEUED", &admin).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    // A project nobody may submit to stores no array.
    let (status, body) = f
        .post(
            "/jobs",
            &admin,
            json!({"name": "nowhere", "project": "nowhere", "command": ["true"], "array": "0-3"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("project")),
        "{body}"
    );
    let count: i64 = gpuplane_testkit::sql!(&f.server.state.db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM job_arrays")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(count, 1, "only the accepted array is stored");
}

/// Another project's editor, a viewer, a token limited to another project
/// and a job's own sdk token try an array's routes.
#[tokio::test(flavor = "multi_thread")]
async fn an_array_stays_inside_its_project() {
    let f = TestServer::start().await;
    let people = People::of_vision(&f).await;
    let People {
        admin,
        viewer,
        outsider,
        limited,
    } = people.clone();
    let (status, first) = f
        .post(
            "/jobs",
            &admin,
            json!({"name": "private", "project": "vision", "command": ["true"], "array": "0-3%1"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let array_id = first["array"]["id"].as_str().unwrap();
    // A node takes the first task: its attempt's sdk token exists.
    let node_token = agent_token(&f.server.state.db).await;
    let gpu = serde_json::to_value(simulated_gpu(0)).unwrap();
    let hello = json!({"name": "n1", "hostname": "n1", "gpus": [gpu], "agent_version": "test", "runners": ["process"]});
    let (status, body) = f.post("/agent/hello", &node_token, hello).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first_id = first["id"].as_str().unwrap();
    eventually(
        "the first task dispatched",
        std::time::Duration::from_secs(30),
        || async {
            let (_, shown) = f.get(&format!("/jobs/{first_id}"), &admin).await;
            (shown["status"] == "DISPATCHING").then_some(())
        },
    )
    .await;
    let sdk = f.server.state.secret.attempt_token(first_id, 1);
    // The viewer reads it; nobody else does.
    let (status, _) = f.get(&format!("/arrays/{array_id}"), &viewer).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tasks(&f, &viewer, array_id).await.len(), 4);
    for token in [&outsider, &limited] {
        let (status, _) = f.get(&format!("/arrays/{array_id}"), token).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            tasks(&f, token, array_id).await.is_empty(),
            "the list hides another project's tasks"
        );
    }
    let (status, _) = f.get(&format!("/arrays/{array_id}"), &sdk).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a job's sdk token reads no job routes"
    );
    people
        .cannot_cancel(&f, &format!("/arrays/{array_id}/cancel"), &sdk)
        .await;
    // Nor may they submit one into vision.
    for token in [&viewer, &outsider, &limited, &sdk] {
        let (status, body) = f
            .post(
                "/jobs",
                token,
                json!({"name": "x", "project": "vision", "command": ["true"], "array": "0-1"}),
            )
            .await;
        assert!(
            [
                StatusCode::FORBIDDEN,
                StatusCode::UNPROCESSABLE_ENTITY,
                StatusCode::NOT_FOUND
            ]
            .contains(&status),
            "{status} {body}"
        );
    }
    let (_, array) = f.get(&format!("/arrays/{array_id}"), &admin).await;
    assert_eq!(
        array["states"],
        json!({"DISPATCHING": 1, "QUEUED": 3}),
        "nobody stopped a task: {array}"
    );
    let count: i64 = gpuplane_testkit::sql!(&f.server.state.db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM job_arrays")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(count, 1, "nobody else stored an array");
}
