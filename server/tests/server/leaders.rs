//! Two leaders for a moment (a replica that lost its lock's connection but
//! not yet its scheduling pass, and the one that took over) cannot give
//! one GPU to two jobs: a claim made while another is being made waits
//! for it, and then leaves its job queued.

use gpuplane_api::auth::Scope;
use gpuplane_server::jobs::plan::Placement;
use gpuplane_server::jobs::scheduler;
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, agent_token, simulated_gpu, user_token};
use reqwest::StatusCode;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn two_stale_plans_cannot_give_one_gpu_twice() {
    let f = TestServer::start().await;
    let state = &f.server.state;
    let root = user_token(&state.db, "root", Scope::Write, true).await;
    // The server's own scheduler places nothing: only the two plans below do.
    let (status, body) = f
        .call(
            "PUT",
            "/maintenance",
            &root,
            Some(json!({"message": "two leaders"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let agent = agent_token(&state.db).await;
    let hello = json!({"name": "box", "hostname": "box", "gpus": [simulated_gpu(0)], "agent_version": "test", "runners": ["process"]});
    let (status, welcome) = f.post("/agent/hello", &agent, hello).await;
    assert_eq!(status, StatusCode::OK, "{welcome}");
    let node_id = welcome["node_id"].as_str().unwrap().to_string();
    let mut jobs = Vec::new();
    for name in ["first", "second"] {
        let (status, job) = f
            .post(
                "/jobs",
                &root,
                json!({"name": name, "command": ["true"], "resources": {"gpu": 1}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
        jobs.push(job["id"].as_str().unwrap().to_string());
    }

    // The other leader is claiming GPU 0 for the first job, its transaction
    // still open (as `scheduler::apply` writes the job and its attempt).
    let mut other = gpuplane_server::store::write(&state.db).await.unwrap();
    sql!(other, |conn| {
        sqlx::query("UPDATE jobs SET status = 'DISPATCHING', attempt_count = 1 WHERE id = $1")
            .bind(&jobs[0])
            .execute(conn)
            .await
            .map(|_| ())
    })
    .unwrap();
    sql!(other, |conn| {
        sqlx::query(
            "INSERT INTO attempts (job_id, n, node_id, gpus, status, dispatched_at) VALUES ($1, 1, $2, '[0]', 'DISPATCHING', 1)",
        )
        .bind(&jobs[0])
        .bind(&node_id)
        .execute(conn)
        .await
        .map(|_| ())
    })
    .unwrap();

    // This leader read the queue while GPU 0 was free, and places the
    // second job there: it waits for the other's claim, then sees it.
    let placements = vec![Placement {
        job_id: jobs[1].clone(),
        node_id: node_id.clone(),
        gpus: vec![0],
        others: Vec::new(),
    }];
    let this = tokio::spawn({
        let jobs = state.jobs();
        async move { scheduler::apply(&jobs, &placements, &[], &HashMap::new(), 1).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !this.is_finished(),
        "the claim waits while the other one is being made"
    );
    other.commit().await.unwrap();
    this.await.unwrap().unwrap();

    let statuses: Vec<(String, String)> = sql!(&state.db, |pool| {
        sqlx::query_as("SELECT name, status FROM jobs ORDER BY name")
            .fetch_all(pool)
            .await
    })
    .unwrap();
    let dispatched = statuses
        .iter()
        .filter(|(_, status)| status == "DISPATCHING")
        .count();
    let queued = statuses.iter().filter(|(_, status)| status == "QUEUED").count();
    assert_eq!(
        (dispatched, queued),
        (1, 1),
        "one job has GPU 0, the other waits: {statuses:?}"
    );
    let holders: i64 = sql!(&state.db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM attempts WHERE node_id = $1")
            .bind(&node_id)
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(holders, 1, "GPU 0 has one attempt on it");
}
