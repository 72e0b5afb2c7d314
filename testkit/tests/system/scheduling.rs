//! Scheduling on real agents: queued reasons, backfill past a blocked
//! multi-GPU head without starving it, cancel, retry and automatic retries.

use gpuplane_api::auth::Scope;
use gpuplane_api::event::EventKind;
use gpuplane_api::job::{FailureReason, JobStatus};
use gpuplane_server::store::Db;
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::sql;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn every_queued_job_says_why_it_waits() {
    let cluster = Cluster::start_with(|config| config.settings.cpu_slots_per_node = 1).await;
    let _agent = cluster.agent("box", 2, &["--labels", "gpu=sim"]);
    cluster.wait_for_nodes(1).await;
    let cpu_busy = cluster
        .submit(json!({"name": "cpu-1", "command": sh("sleep 30")}))
        .await;
    cluster.wait_for(&cpu_busy.id, JobStatus::Running).await;

    let cases = [
        (
            json!({"name": "a100", "command": ["true"], "resources": {"gpu": 1}, "node_selector": {"gpu": "a100"}}),
            "node_selector gpu=a100 matches no online node",
        ),
        (
            json!({"name": "huge", "command": ["true"], "resources": {"gpu": 16}}),
            "no node can ever fit 16 GPUs (the largest matching node has 2)",
        ),
        (
            json!({"name": "cpu-2", "command": ["true"]}),
            "cpu lane full (1/1) on box",
        ),
    ];
    for (spec, expected) in cases {
        let job = cluster.submit(spec).await;
        let job = cluster
            .wait_until(&job.id, expected, |job| {
                job.queued_reason.as_deref() == Some(expected)
            })
            .await;
        assert_eq!(job.status, JobStatus::Queued);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn small_jobs_backfill_past_a_blocked_multi_gpu_head_which_still_gets_its_node() {
    let cluster = Cluster::start().await;
    let _big_box = cluster.agent("big-box", 2, &["--labels", "size=big"]);
    let _small_box = cluster.agent("small-box", 1, &[]);
    cluster.wait_for_nodes(2).await;
    let work = cluster.workdir("backfill");
    let release = work.join("release");

    // One GPU of big-box is busy until the test says so.
    let blocker = cluster
        .submit(json!({
            "name": "blocker", "resources": {"gpu": 1}, "node_selector": {"size": "big"},
            "command": sh(&format!("while [ ! -e {} ]; do sleep 0.05; done", release.display())),
        }))
        .await;
    let blocker = cluster.wait_for(&blocker.id, JobStatus::Running).await;
    let blocked_node = blocker.attempts[0].node.clone();
    assert_eq!(blocked_node, "big-box");

    // The 2-GPU head cannot fit anywhere now, and holds the node where it will.
    let head = cluster
        .submit(json!({"name": "head", "priority": 10, "resources": {"gpu": 2}, "command": ["true"]}))
        .await;
    let head = cluster.wait_for_reason(&head.id, "holding big-box").await;
    assert!(
        head.queued_reason
            .unwrap()
            .starts_with("needs 2 GPUs; the largest free on a matching node is 1")
    );

    // A cpu job and a 1-GPU job that fits elsewhere start anyway (backfill).
    let cpu = cluster.submit(json!({"name": "cpu", "command": ["true"]})).await;
    let small = cluster
        .submit(json!({"name": "small", "resources": {"gpu": 1}, "command": ["true"]}))
        .await;
    cluster.wait_for(&cpu.id, JobStatus::Succeeded).await;
    let small = cluster.wait_for(&small.id, JobStatus::Succeeded).await;
    assert_eq!(small.attempts[0].node, "small-box");

    // A second 1-GPU job must not take big-box's free GPU from the head.
    let late = cluster
        .submit(json!({"name": "late", "resources": {"gpu": 1}, "command": sh("sleep 0.2")}))
        .await;
    let late_job = cluster
        .wait_until(&late.id, "the late job to run on small-box", |job| {
            job.attempts.first().is_some_and(|a| a.node == "small-box")
        })
        .await;
    assert_ne!(late_job.attempts[0].node, blocked_node);
    assert_eq!(cluster.job(&head.id).await.status, JobStatus::Queued);

    // When the blocker ends, the head gets big-box.
    std::fs::write(&release, "").unwrap();
    let head = cluster.wait_for(&head.id, JobStatus::Succeeded).await;
    assert_eq!(head.attempts[0].node, "big-box");
    assert_eq!(head.attempts[0].gpus, vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_needs_confirmation_then_stops_the_job() {
    let cluster =
        Cluster::start_with(|config| config.cancel_grace = std::time::Duration::from_millis(500)).await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    // Ignores SIGTERM: only the SIGKILL after the grace period stops it.
    let stubborn = cluster
        .submit(json!({"name": "stubborn", "command": sh("trap 'echo got-term' TERM; echo started; while true; do sleep 0.05; done")}))
        .await;
    cluster
        .wait_until(&stubborn.id, "it to print", |job| {
            job.status == JobStatus::Running
        })
        .await;
    gpuplane_testkit::eventually("its first line", gpuplane_testkit::WAIT, || async {
        cluster.output(&stubborn.id, "stdout").await.first().cloned()
    })
    .await;

    for body in [json!({}), json!({"confirm": false})] {
        let (status, error) = cluster.post(&format!("/jobs/{}/cancel", stubborn.id), body).await;
        assert_eq!(status, 422, "{error}");
        assert_eq!(error["error"]["details"][0]["field"], "confirm");
    }
    assert_eq!(
        cluster.job(&stubborn.id).await.status,
        JobStatus::Running,
        "nothing changed"
    );

    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", stubborn.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    let job = cluster.wait_for(&stubborn.id, JobStatus::Cancelled).await;
    assert_eq!(job.attempts[0].signal, Some(9), "SIGKILL after the grace period");
    assert!(
        cluster
            .output(&stubborn.id, "stdout")
            .await
            .contains(&"got-term".to_string()),
        "SIGTERM came first"
    );

    // Cancelling a queued job needs no agent; an ended job cannot be cancelled.
    let queued = cluster
        .submit(json!({"name": "never", "resources": {"gpu": 8}, "command": ["true"]}))
        .await;
    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", queued.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "CANCELLED");
    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", queued.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = cluster
        .post("/jobs/job_nonexistent/cancel", json!({"confirm": true}))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_jobs_retry_automatically_after_their_cooldown_and_by_hand() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("retry");
    let marker = work.join("second-time");
    // Fails the first time, succeeds the second.
    let flaky = cluster
        .submit(json!({
            "name": "flaky", "max_attempts": 3, "retry_cooldown_s": 1, "working_dir": work,
            "command": sh("if [ -e second-time ]; then echo ok; else touch second-time; exit 7; fi"),
        }))
        .await;
    let retrying = cluster
        .wait_until(&flaky.id, "the retry to wait for its cooldown", |job| {
            job.status == JobStatus::Queued && job.attempts.len() == 1
        })
        .await;
    let reason = retrying.queued_reason.unwrap();
    assert!(reason.starts_with("retry cooldown: attempt 2 of 3"), "{reason}");
    let done = cluster.wait_for(&flaky.id, JobStatus::Succeeded).await;
    assert_eq!(done.attempts.len(), 2);
    assert_eq!(done.attempts[0].failure_reason, Some(FailureReason::ExitCode));
    assert_eq!(done.attempts[1].status, JobStatus::Succeeded);
    assert!(marker.exists());
    assert_eq!(
        cluster
            .events(&format!("job_id={}&kind=JOB_RETRYING", flaky.id))
            .await
            .len(),
        1
    );

    // Out of attempts: FAILED; a manual retry makes another attempt.
    let once = cluster
        .submit(json!({"name": "once", "command": sh("exit 1")}))
        .await;
    cluster.wait_for(&once.id, JobStatus::Failed).await;
    let (status, body) = cluster.post(&format!("/jobs/{}/retry", once.id), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let again = cluster
        .wait_until(&once.id, "the second attempt to fail", |job| {
            job.status == JobStatus::Failed && job.attempts.len() == 2
        })
        .await;
    assert_eq!(again.max_attempts, 2);

    // Succeeded jobs are not retried.
    let (status, _) = cluster
        .post(&format!("/jobs/{}/retry", flaky.id), json!({}))
        .await;
    assert_eq!(status, 409);
    let kinds: Vec<EventKind> = cluster.events("").await.iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::JobFailed));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_specs_are_refused_with_every_field_and_write_nothing() {
    let cluster = Cluster::start().await;
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({
                "name": "", "command": [], "working_dir": "relative", "runner": "docker",
                "resources": {"gpu": -1}, "priority": 4611686018427387905_i64, "max_attempts": 0,
            }),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let fields: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "name",
            "command",
            "working_dir",
            "image",
            "resources.gpu",
            "priority",
            "max_attempts"
        ]
    );

    let (status, body) = cluster
        .post("/jobs", json!({"name": "x", "command": ["true"], "gpus": 1}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        body["error"]["details"][0]["field"], "gpus",
        "unknown fields are named"
    );
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "x", "command": ["true"], "priority": 9223372036854775808_u64}),
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["details"][0]["field"], "priority");
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "x", "command": ["true"], "project": "nope"}),
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["details"][0]["field"], "project");

    for query in ["limit=0", "limit=-1", "before=4611686018427387905", "status=DONE"] {
        let (status, body) = cluster.get(&format!("/jobs?{query}")).await;
        assert_eq!(status, 422, "{query}: {body}");
    }
    let (status, body) = cluster.get("/jobs/job_x/logs?tail=0").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "tail");

    let db = &cluster.server.state.db;
    for table in ["jobs", "runs", "attempts"] {
        let count: i64 = sqlx_count(db, table).await;
        assert_eq!(count, 0, "no {table} row was written");
    }
}

async fn sqlx_count(db: &Db, table: &str) -> i64 {
    sql!(db, |pool| {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(pool)
            .await
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_page_with_a_cursor() {
    let cluster = Cluster::start().await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(
            cluster
                .submit(json!({"name": format!("j{n}"), "command": ["true"]}))
                .await
                .id,
        );
    }
    let (_, first) = cluster.get("/jobs?limit=2").await;
    let names: Vec<&str> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["j4", "j3"]);
    let cursor = first["next_before"].as_i64().unwrap();
    let (_, second) = cluster.get(&format!("/jobs?limit=2&before={cursor}")).await;
    let names: Vec<&str> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["j2", "j1"]);
    let (_, queued) = cluster.get("/jobs?status=QUEUED&limit=10").await;
    assert_eq!(queued["items"].as_array().unwrap().len(), 5);
    assert_eq!(queued["next_before"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_mode_pauses_dispatch_but_not_running_jobs() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 2, &[]);
    cluster.wait_for_nodes(1).await;
    let running = cluster
        .submit(json!({"name": "running", "command": sh("sleep 30"), "resources": {"gpu": 1}}))
        .await;
    cluster.wait_for(&running.id, JobStatus::Running).await;

    // Only server admins may turn it on; a message is required.
    let editor = gpuplane_testkit::user_token(&cluster.server.state.db, "editor", Scope::Write, false).await;
    let put = reqwest::Method::PUT;
    let (status, _) = cluster
        .call(
            put.clone(),
            "/maintenance",
            Some(json!({"message": "drivers"})),
            &editor,
        )
        .await;
    assert_eq!(status, 403);
    let (status, body) = cluster
        .call(
            put.clone(),
            "/maintenance",
            Some(json!({"message": " "})),
            &cluster.token,
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (422, Some("message"))
    );
    let (status, body) = cluster
        .call(
            put,
            "/maintenance",
            Some(json!({"message": "Driver upgrade until 12:00"})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["on"], true);
    assert_eq!(body["by"], "tester");

    // A free GPU, yet nothing new starts; the reason says why; the running job goes on.
    let waiting = cluster
        .submit(json!({"name": "waiting", "command": ["true"], "resources": {"gpu": 1}}))
        .await;
    let waiting = cluster
        .wait_for_reason(&waiting.id, "maintenance: dispatch paused since ")
        .await;
    assert!(
        waiting
            .queued_reason
            .unwrap()
            .ends_with("by tester: Driver upgrade until 12:00")
    );
    assert_eq!(cluster.job(&running.id).await.status, JobStatus::Running);
    let (_, summary) = cluster.get("/cluster").await;
    assert_eq!(summary["dispatch_paused"], true);
    assert_eq!(summary["maintenance"], "Driver upgrade until 12:00");

    // Off: the waiting job starts at once.
    let (status, body) = cluster
        .call(reqwest::Method::DELETE, "/maintenance", None, &cluster.token)
        .await;
    assert_eq!((status, &body["on"]), (200, &json!(false)));
    cluster.wait_for(&waiting.id, JobStatus::Succeeded).await;
    let (_, summary) = cluster.get("/cluster").await;
    assert_eq!(summary["dispatch_paused"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drained_node_finishes_its_jobs_takes_no_new_ones_and_undrains() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 2, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("drain");
    let release = work.join("release");
    let running = cluster
        .submit(json!({
            "name": "running", "resources": {"gpu": 1},
            "command": sh(&format!("while [ ! -e {} ]; do sleep 0.05; done", release.display())),
        }))
        .await;
    cluster.wait_for(&running.id, JobStatus::Running).await;

    let post = reqwest::Method::POST;
    let editor = gpuplane_testkit::user_token(&cluster.server.state.db, "editor", Scope::Write, false).await;
    let (status, _) = cluster
        .call(post.clone(), "/nodes/box/drain", None, &editor)
        .await;
    assert_eq!(status, 403);
    let (status, _) = cluster
        .call(post.clone(), "/nodes/nope/drain", None, &cluster.token)
        .await;
    assert_eq!(status, 404);
    let (status, node) = cluster
        .call(post.clone(), "/nodes/box/drain", None, &cluster.token)
        .await;
    assert_eq!(
        (status, node["status"].as_str()),
        (200, Some("DRAINING")),
        "{node}"
    );
    assert_eq!(node["drained_by"], "tester");

    // A free GPU, yet the new job waits and says why; the running job goes on.
    let waiting = cluster
        .submit(json!({"name": "waiting", "command": ["true"], "resources": {"gpu": 1}}))
        .await;
    let expected = "only drained nodes match (box): they take no new jobs until an admin undrains them";
    cluster
        .wait_until(&waiting.id, expected, |job| {
            job.queued_reason.as_deref() == Some(expected)
        })
        .await;

    // Its job done, the node is DRAINED.
    std::fs::write(&release, "").unwrap();
    cluster.wait_for(&running.id, JobStatus::Succeeded).await;
    let (_, nodes) = cluster.get("/nodes").await;
    assert_eq!(nodes["items"][0]["status"], "DRAINED");
    assert_eq!(cluster.job(&waiting.id).await.status, JobStatus::Queued);

    let (status, node) = cluster
        .call(post, "/nodes/box/undrain", None, &cluster.token)
        .await;
    assert_eq!((status, node["status"].as_str()), (200, Some("ONLINE")));
    cluster.wait_for(&waiting.id, JobStatus::Succeeded).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_jobs_can_be_reprioritised_held_and_released() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("queue-control");
    let release = work.join("release");
    let order = work.join("order");
    let blocker = cluster
        .submit(json!({
            "name": "blocker", "resources": {"gpu": 1},
            "command": sh(&format!("while [ ! -e {} ]; do sleep 0.05; done", release.display())),
        }))
        .await;
    cluster.wait_for(&blocker.id, JobStatus::Running).await;
    let job = |name: &str| {
        json!({"name": name, "resources": {"gpu": 1},
               "command": sh(&format!("echo {name} >> {}", order.display()))})
    };
    let first = cluster.submit(job("first")).await;
    let second = cluster.submit(job("second")).await;
    let third = cluster.submit(job("third")).await;

    // `third` jumps the queue; `first` is held; a running job's priority cannot change.
    let (status, body) = cluster
        .post(&format!("/jobs/{}/priority", third.id), json!({"priority": 10}))
        .await;
    assert_eq!((status, body["priority"].as_i64()), (200, Some(10)), "{body}");
    assert_eq!(body["spec"]["priority"], 10);
    let (status, body) = cluster
        .post(&format!("/jobs/{}/priority", blocker.id), json!({"priority": 1}))
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = cluster
        .post(
            &format!("/jobs/{}/priority", third.id),
            json!({"priority": i64::MAX}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (422, Some("priority"))
    );
    let (status, held) = cluster
        .post(&format!("/jobs/{}/hold", first.id), json!(null))
        .await;
    assert_eq!(status, 200, "{held}");
    assert!(
        held["queued_reason"]
            .as_str()
            .unwrap()
            .starts_with("held by tester since "),
        "{held}"
    );

    std::fs::write(&release, "").unwrap();
    cluster.wait_for(&second.id, JobStatus::Succeeded).await;
    assert_eq!(cluster.job(&first.id).await.status, JobStatus::Queued, "held");
    let (status, _) = cluster
        .post(&format!("/jobs/{}/release", first.id), json!(null))
        .await;
    assert_eq!(status, 200);
    cluster.wait_for(&first.id, JobStatus::Succeeded).await;
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "third\nsecond\nfirst\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn over_quota_jobs_wait_with_the_reason_and_start_as_running_jobs_finish() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 4, &[]);
    cluster.wait_for_nodes(1).await;
    let editor = gpuplane_testkit::user_token(&cluster.server.state.db, "editor", Scope::Write, false).await;
    let put = reqwest::Method::PUT;
    let delete = reqwest::Method::DELETE;

    // Only server admins set quotas; bad limits and unknown names are named.
    let limit = json!({"max_gpus": 2});
    let (status, _) = cluster
        .call(
            put.clone(),
            "/quotas/project/default",
            Some(limit.clone()),
            &editor,
        )
        .await;
    assert_eq!(status, 403);
    for (path, body, expected) in [
        (
            "/quotas/project/default",
            json!({"max_gpus": -1}),
            (422, "max_gpus"),
        ),
        ("/quotas/project/default", json!({}), (422, "max_gpus")),
        ("/quotas/team/default", limit.clone(), (422, "kind")),
    ] {
        let (status, body) = cluster.call(put.clone(), path, Some(body), &cluster.token).await;
        assert_eq!(
            (
                status,
                body["error"]["details"][0]["field"].as_str().unwrap_or("")
            ),
            expected,
            "{path}: {body}"
        );
    }
    let (status, body) = cluster
        .call(
            put.clone(),
            "/quotas/project/nope",
            Some(limit.clone()),
            &cluster.token,
        )
        .await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (404, Some("no project named nope"))
    );

    // The project may hold 2 GPUs, the editor 1 job at a time.
    let (status, body) = cluster
        .call(
            put.clone(),
            "/quotas/project/default",
            Some(limit),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["max_gpus"].as_i64(), body["updated_by"].as_str()),
        (Some(2), Some("tester"))
    );
    let (status, _) = cluster
        .call(
            put.clone(),
            "/quotas/user/editor",
            Some(json!({"max_running_jobs": 1})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200);

    let first = cluster
        .submit(json!({"name": "first", "command": sh("sleep 30"), "resources": {"gpu": 2}}))
        .await;
    cluster.wait_for(&first.id, JobStatus::Running).await;
    // Two GPUs are free, but the project uses 2 of 2: accepted, and it waits.
    let second = cluster
        .submit(json!({"name": "second", "command": ["true"], "resources": {"gpu": 1}}))
        .await;
    let second = cluster.wait_for_reason(&second.id, "quota").await;
    assert_eq!(
        second.queued_reason.as_deref(),
        Some("quota: project default uses 2 of 2 GPUs")
    );
    // The editor's own job limit holds its cpu job back too.
    let (status, body) = cluster
        .call(
            reqwest::Method::POST,
            "/jobs",
            Some(json!({"name": "editor-1", "command": sh("sleep 30")})),
            &editor,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let editor_first = body["id"].as_str().unwrap().to_string();
    cluster.wait_for(&editor_first, JobStatus::Running).await;
    let (_, body) = cluster
        .call(
            reqwest::Method::POST,
            "/jobs",
            Some(json!({"name": "editor-2", "command": ["true"]})),
            &editor,
        )
        .await;
    let editor_second = body["id"].as_str().unwrap().to_string();
    let waiting = cluster.wait_for_reason(&editor_second, "quota").await;
    assert_eq!(
        waiting.queued_reason.as_deref(),
        Some("quota: user editor runs 1 of 1 jobs")
    );

    // Usage against quota in GET /cluster; the editor sees the project's
    // quota and its own, and nobody else's.
    let (_, cluster_view) = cluster.get("/cluster").await;
    let quotas = cluster_view["quotas"].as_array().unwrap();
    let default_quota = quotas.iter().find(|q| q["kind"] == "project").unwrap();
    assert_eq!(
        (
            default_quota["gpus_in_use"].as_i64(),
            default_quota["running_jobs"].as_i64()
        ),
        (Some(2), Some(2))
    );
    let (status, _) = cluster
        .call(
            put.clone(),
            "/quotas/user/tester",
            Some(json!({"max_gpus": 64})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200);
    let (_, seen) = cluster.call(reqwest::Method::GET, "/quotas", None, &editor).await;
    let mut seen: Vec<String> = seen["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| format!("{} {}", q["kind"].as_str().unwrap(), q["name"].as_str().unwrap()))
        .collect();
    seen.sort();
    assert_eq!(seen, ["project default", "user editor"]);

    // Running jobs end: the waiting jobs start.
    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", first.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    cluster.wait_for(&second.id, JobStatus::Succeeded).await;
    // Removing a quota lets what it held back start at once.
    let (status, _) = cluster
        .call(delete.clone(), "/quotas/user/editor", None, &cluster.token)
        .await;
    assert_eq!(status, 204);
    cluster.wait_for(&editor_second, JobStatus::Succeeded).await;
    let (status, body) = cluster
        .call(delete, "/quotas/user/editor", None, &cluster.token)
        .await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (404, Some("user editor has no quota"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_after_another_waits_for_it_and_fails_when_it_never_can_run() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 2, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("after");
    let gate = work.join("gate");

    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "x", "command": ["true"], "after": ["job_01NOPE", "run_1"]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let fields: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["after[1]"], "the shape first: {body}");
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "x", "command": ["true"], "after": ["job_01NOPE"]}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["message"].as_str()),
        (422, Some("no job job_01NOPE that you can see"))
    );

    // `first` runs until the gate file appears; `second` waits for it.
    let first = cluster
        .submit(json!({"name": "first", "working_dir": work,
            "command": sh("while [ ! -e gate ]; do sleep 0.05; done")}))
        .await;
    cluster.wait_for(&first.id, JobStatus::Running).await;
    let second = cluster
        .submit(json!({"name": "second", "command": ["true"], "after": [first.id]}))
        .await;
    let waiting = cluster.wait_for_reason(&second.id, "waiting for job_").await;
    assert_eq!(
        waiting.queued_reason,
        Some(format!("waiting for {} (RUNNING)", first.id))
    );
    std::fs::write(&gate, "").unwrap();
    cluster.wait_for(&second.id, JobStatus::Succeeded).await;

    // A failed job: what needs its success fails, and so does what needs
    // that; what waits for any end runs.
    let failing = cluster
        .submit(json!({"name": "failing", "command": sh("exit 3")}))
        .await;
    let needs_success = cluster
        .submit(json!({"name": "needs-success", "command": ["true"], "after": [failing.id]}))
        .await;
    let chained = cluster
        .submit(json!({"name": "chained", "command": ["true"], "after": [format!("{}:succeeded", needs_success.id)]}))
        .await;
    let any_end = cluster
        .submit(
            json!({"name": "any-end", "command": ["true"], "after": [format!("{}:finished", failing.id)]}),
        )
        .await;
    cluster.wait_for(&failing.id, JobStatus::Failed).await;
    cluster.wait_for(&any_end.id, JobStatus::Succeeded).await;
    let never = cluster.wait_for(&needs_success.id, JobStatus::Failed).await;
    assert_eq!(never.failure_reason, Some(FailureReason::DependencyFailed));
    assert!(never.attempts.is_empty(), "it never started");
    assert!(
        never.failure_detail.as_deref().unwrap().starts_with(&format!(
            "{} ended FAILED, and this job runs only after it succeeds",
            failing.id
        )),
        "{:?}",
        never.failure_detail
    );
    let chained = cluster.wait_for(&chained.id, JobStatus::Failed).await;
    assert_eq!(chained.failure_reason, Some(FailureReason::DependencyFailed));
    let (status, explanation) = cluster.get(&format!("/runs/{}/failure", never.run_id)).await;
    assert_eq!(
        (status, explanation["rule"].as_str()),
        (200, Some("dependency-failed")),
        "{explanation}"
    );
}

/// Submits `spec` with `token`; the new job's id.
async fn submit_as(cluster: &Cluster, token: &str, spec: serde_json::Value) -> String {
    let (status, body) = cluster
        .call(reqwest::Method::POST, "/jobs", Some(spec), token)
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn among_equal_priorities_the_user_with_fewer_gpu_hours_goes_first() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let db = &cluster.server.state.db;
    let heavy = gpuplane_testkit::user_token(db, "heavy", Scope::Write, false).await;
    let light = gpuplane_testkit::user_token(db, "light", Scope::Write, false).await;

    // heavy has used the GPU for a while; light not at all.
    let used = submit_as(
        &cluster,
        &heavy,
        json!({"name": "used", "command": sh("sleep 1"), "resources": {"gpu": 1}}),
    )
    .await;
    cluster.wait_for(&used, JobStatus::Succeeded).await;
    let blocker = cluster
        .submit(json!({"name": "blocker", "command": sh("sleep 30"), "resources": {"gpu": 1}}))
        .await;
    cluster.wait_for(&blocker.id, JobStatus::Running).await;
    // heavy's job is queued first, light's after it.
    let heavy_job = submit_as(
        &cluster,
        &heavy,
        json!({"name": "heavy", "command": sh("sleep 30"), "resources": {"gpu": 1}}),
    )
    .await;
    let light_job = submit_as(
        &cluster,
        &light,
        json!({"name": "light", "command": sh("sleep 30"), "resources": {"gpu": 1}}),
    )
    .await;
    let passed = cluster.wait_for_reason(&heavy_job, "fair share").await;
    let reason = passed.queued_reason.unwrap();
    assert!(
        // The project's use grows while the blocker runs; heavy's is its `sleep 1`.
        reason.contains("; fair share: jobs of less-used projects or users go first (project default used ")
            && reason.ends_with("in the last 7d; after 1d in the queue it goes by submit time)"),
        "{reason}"
    );

    // The GPU frees up: light's job starts, heavy's keeps waiting.
    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", blocker.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    cluster.wait_for(&light_job, JobStatus::Running).await;
    assert_eq!(cluster.job(&heavy_job).await.status, JobStatus::Queued);

    // gpuctl status shows heavy its project's and its own GPU time, nobody else's.
    let home = tempfile::tempdir().unwrap();
    let url = &cluster.server.url;
    let output =
        gpuplane_testkit::gpuctl::gpuctl(home.path(), &["--server", url, "--token", &heavy, "status"]);
    let text = gpuplane_testkit::gpuctl::stdout(&output);
    let share = text
        .lines()
        .find(|line| line.starts_with("Share "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        share.starts_with("Share   GPU time in the last 7d: project default ")
            && share.contains(", user heavy 1s")
            && !share.contains("user light")
            && share.ends_with("(less goes first among equal priorities)"),
        "{share}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_urgent_job_preempts_a_lower_one_which_checkpoints_requeues_without_spending_an_attempt_and_resumes()
 {
    let cluster = Cluster::start_with(|config| {
        config.settings.preempt_priority = Some(100);
        config.settings.preemption_grace_s = 20;
    })
    .await;
    let _agent = cluster.agent("box", 2, &[]);
    cluster.wait_for_nodes(1).await;
    let editor = gpuplane_testkit::user_token(&cluster.server.state.db, "editor", Scope::Write, false).await;

    // The low job saves a checkpoint in its job folder when told to stop
    // (and waits for the agent to record it), says which attempt it is and
    // where it resumes from, and reads the checkpoint back when it resumes.
    let low = submit_as(
        &cluster,
        &editor,
        json!({"name": "low", "resources": {"gpu": 2},
            "command": sh("trap 'echo saved by $GPUCTL_ATTEMPT > \"$GPUCTL_JOB_DIR/step_7.pt\"; \
                                echo got SIGTERM, checkpoint saved; sleep 1.5; exit 0' TERM; \
                           echo attempt $GPUCTL_ATTEMPT resumes from ${GPUCTL_RESUME_FROM-unset} at ${GPUCTL_RESUME_STEP-unset}; \
                           if [ -n \"$GPUCTL_RESUME_FROM\" ]; then cat \"$GPUCTL_RESUME_FROM\"; fi; \
                           for i in $(seq 600); do sleep 0.05; done")}),
    )
    .await;
    cluster.wait_for(&low, JobStatus::Running).await;

    // Only admins may give a job a priority that preempts.
    let urgent_spec = json!({"name": "urgent", "priority": 100, "resources": {"gpu": 1},
        "command": sh("echo urgent ran")});
    let (status, body) = cluster
        .call(reqwest::Method::POST, "/jobs", Some(urgent_spec.clone()), &editor)
        .await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (
            403,
            Some(
                "priority 100 may preempt running jobs (preempt_priority is 100): only admins may set it; use a priority below 100"
            )
        )
    );
    let (status, _) = cluster
        .call(
            reqwest::Method::POST,
            &format!("/jobs/{low}/priority"),
            Some(json!({"priority": 500})),
            &editor,
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = cluster
        .call(
            reqwest::Method::POST,
            "/jobs/validate",
            Some(urgent_spec.clone()),
            &editor,
        )
        .await;
    assert_eq!(status, 403, "gpuctl validate --remote says so too");

    let urgent = cluster.submit(urgent_spec).await;
    cluster.wait_for(&urgent.id, JobStatus::Succeeded).await;
    // low got SIGTERM, checkpointed, and runs again as attempt 2 with one
    // more attempt allowed: preemption spent nothing.
    let low_job = cluster
        .wait_until(&low, "attempt 2 running", |job| {
            job.status == JobStatus::Running && job.attempts.len() == 2
        })
        .await;
    let first = &low_job.attempts[0];
    assert_eq!(
        (
            first.status,
            first.failure_reason,
            first.failure_detail.as_deref()
        ),
        (
            JobStatus::Cancelled,
            Some(FailureReason::Preempted),
            Some(format!("preempted for {} on box", urgent.id).as_str())
        )
    );
    assert_eq!((low_job.max_attempts, low_job.preemptions), (2, 1));
    assert_eq!(
        low_job.attempts_summary(),
        "2 of 2 (1 preempted, which spend none)"
    );
    let text = |logs: gpuplane_api::log::Logs| logs.lines.into_iter().map(|l| l.text).collect::<Vec<_>>();
    let attempt_1 = text(cluster.logs(&low, "attempt=1&stream=stdout").await);
    assert_eq!(
        attempt_1,
        [
            "attempt 1 resumes from unset at unset",
            "got SIGTERM, checkpoint saved"
        ]
    );
    // Attempt 2 gets the checkpoint attempt 1 saved in the job's folder.
    let attempt_2 = gpuplane_testkit::eventually(
        "attempt 2's first lines",
        std::time::Duration::from_secs(10),
        || async {
            let lines = text(cluster.logs(&low, "attempt=2&stream=stdout").await);
            (lines.len() >= 2).then_some(lines)
        },
    )
    .await;
    let checkpoint = format!("/{low}/job/step_7.pt");
    assert!(
        attempt_2[0].starts_with("attempt 2 resumes from /")
            && attempt_2[0].ends_with(&format!("{checkpoint} at 7")),
        "{attempt_2:?}"
    );
    assert_eq!(attempt_2[1], "saved by 1");
    // The job says where attempt 2 picked up (`gpuctl job show`, the job page).
    let resumed = low_job.attempts[1].resumed().unwrap();
    assert!(
        resumed.starts_with("resumed from step 7 (/") && resumed.ends_with(&format!("{checkpoint})")),
        "{resumed}"
    );
    assert_eq!(low_job.attempts[0].resumed(), None);
    let events = cluster.events(&format!("job_id={low}&kind=JOB_PREEMPTED")).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, EventKind::JobPreempted);
    assert!(
        events[0].message.starts_with(&format!(
            "attempt 1 preempted on box for {} (priority 100): SIGTERM now, SIGKILL after 20s",
            urgent.id
        )),
        "{}",
        events[0].message
    );
    let (status, _) = cluster
        .post(&format!("/jobs/{low}/cancel"), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
    cluster.wait_for(&low, JobStatus::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_window_keeps_jobs_out_until_it_opens_and_refuses_those_that_would_outlast_it() {
    let cluster = Cluster::start_with(|config| {
        config.scheduling_windows =
            vec![gpuplane_server::config::windows::Window::parse("pool=night 20:00-06:00").unwrap()];
    })
    .await;
    let _agent = cluster.agent("night-1", 1, &["--labels", "pool=night"]);
    cluster.wait_for_nodes(1).await;
    // The clock windows are judged by: 19:59:54 UTC.
    const DAY: i64 = 24 * 3_600_000;
    let set_window_clock = |hh: i64, mm: i64, ss: i64| {
        let now = gpuplane_server::store::time::now_ms();
        let target = now - now.rem_euclid(DAY) + ((hh * 60 + mm) * 60 + ss) * 1000;
        cluster
            .server
            .state
            .window_clock_offset_ms
            .store(target - now, std::sync::atomic::Ordering::Relaxed);
    };
    set_window_clock(19, 59, 54);
    let night_job = |name: &str, limit: &str| {
        json!({"name": name, "command": ["true"], "resources": {"gpu": 1},
               "node_selector": {"pool": "night"}, "time_limit_s": gpuplane_api::duration::parse_seconds(limit).unwrap()})
    };
    let early = cluster.submit(night_job("early", "1h")).await;
    let waiting = cluster.wait_for_reason(&early.id, "scheduling window").await;
    let reason = waiting.queued_reason.unwrap();
    assert!(
        reason.starts_with(
            "scheduling window pool=night 20:00-06:00 UTC is closed: it starts when the window opens at "
        ) && reason.contains(" (in ")
            && reason.ends_with("s)"), // in real time: the window clock runs ahead
        "{reason}"
    );
    // The scheduler planned to look again when the window opens: it starts by itself.
    cluster.wait_for(&early.id, JobStatus::Succeeded).await;

    // Half an hour before the window closes: an hour-long job waits for the
    // next window, a ten-minute one starts.
    set_window_clock(5, 30, 0);
    let long = cluster.submit(night_job("long", "1h")).await;
    let short = cluster.submit(night_job("short", "10m")).await;
    cluster.wait_for(&short.id, JobStatus::Succeeded).await;
    let long = cluster.wait_for_reason(&long.id, "does not fit").await;
    assert!(
        long.queued_reason.as_deref().unwrap().starts_with(
            "its time limit 1h does not fit in what is left of scheduling window pool=night 20:00-06:00 UTC (29m"
        ) && long.queued_reason.as_deref().unwrap().contains("): it starts when the window opens at "),
        "{:?}",
        long.queued_reason
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn admins_relabel_a_node_without_restarting_its_agent_and_the_change_outlives_a_restart() {
    let cluster = Cluster::start().await;
    let labels = ["--labels", "pool=day,tier=gold"];
    let mut agent = cluster.agent("box", 1, &labels);
    cluster.wait_for_nodes(1).await;
    let editor = gpuplane_testkit::user_token(&cluster.server.state.db, "editor", Scope::Write, false).await;
    let night = cluster
        .submit(json!({"name": "night", "command": ["true"], "node_selector": {"pool": "night"}}))
        .await;
    cluster
        .wait_for_reason(&night.id, "node_selector pool=night matches no online node")
        .await;

    // Only admins relabel, and never the node's name label.
    let change = json!({"set": {"pool": "night"}, "remove": ["tier"]});
    let (status, _) = cluster
        .call(
            reqwest::Method::POST,
            "/nodes/box/labels",
            Some(change.clone()),
            &editor,
        )
        .await;
    assert_eq!(status, 403);
    let (status, body) = cluster
        .post("/nodes/box/labels", json!({"set": {"gpuplane.node": "other"}}))
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (422, Some("set.gpuplane.node")),
        "{body}"
    );
    let (status, node) = cluster.post("/nodes/box/labels", change).await;
    assert_eq!(status, 200, "{node}");
    assert_eq!(node["labels"], json!({"pool": "night"}));
    assert_eq!(node["admin_labels"], json!({"pool": "night", "tier": null}));
    // The queued job starts at once: no agent restart.
    cluster.wait_for(&night.id, JobStatus::Succeeded).await;

    // The agent restarts with its old labels: the admin's change stays.
    agent.kill();
    let _restarted = cluster.agent_in("box", 1, &agent.jobs_dir.clone(), &labels);
    let labels_of_box = || async {
        let (_, nodes) = cluster.get("/nodes").await;
        nodes["items"][0].clone()
    };
    // A job runs only through the restarted agent, whose hello came first.
    let again = cluster
        .submit(json!({"name": "still-night", "command": ["true"], "node_selector": {"pool": "night"}}))
        .await;
    cluster.wait_for(&again.id, JobStatus::Succeeded).await;
    assert_eq!(labels_of_box().await["labels"], json!({"pool": "night"}));

    // gpuctl resets to the agent's own labels; the audit log has both changes.
    let home = tempfile::tempdir().unwrap();
    let url = &cluster.server.url;
    let output = gpuplane_testkit::gpuctl::gpuctl(
        home.path(),
        &[
            "--server",
            url,
            "--token",
            &cluster.token,
            "admin",
            "node",
            "label",
            "box",
            "--reset",
        ],
    );
    assert_eq!(
        gpuplane_testkit::gpuctl::stdout(&output),
        "box  labels: pool=day, tier=gold\n",
        "{}",
        gpuplane_testkit::gpuctl::stderr(&output)
    );
    let (_, audit) = cluster.get("/audit?action=node.labels").await;
    let details: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["detail"].as_str().unwrap())
        .collect();
    assert_eq!(details, ["reset", "pool=night tier-"]);
}
