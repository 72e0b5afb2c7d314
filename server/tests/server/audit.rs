//! The audit log: every admin action and every change to a job's place in
//! the queue is recorded with who, what, when and from where; only server
//! admins read it.

use gpuplane_api::Page;
use gpuplane_api::audit::AuditEntry;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::{TestServer, agent_token, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn every_admin_action_and_queue_change_is_recorded_and_only_admins_read_them() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let bob = user_token(&db, "bob", Scope::Write, false).await;
    let ok = |what: &str, (status, body): (StatusCode, Value)| {
        assert!(status.is_success(), "{what}: {status} {body}");
        body
    };

    // An editor's queue changes.
    let job = ok(
        "submit",
        f.call(
            "POST",
            "/jobs",
            &bob,
            Some(json!({"name": "j", "command": ["true"]})),
        )
        .await,
    );
    let job_id = job["id"].as_str().unwrap();
    let on_job = |action: &str| format!("/jobs/{job_id}/{action}");
    ok(
        "priority",
        f.call("POST", &on_job("priority"), &bob, Some(json!({"priority": 5})))
            .await,
    );
    ok("hold", f.call("POST", &on_job("hold"), &bob, None).await);
    ok("release", f.call("POST", &on_job("release"), &bob, None).await);
    ok(
        "cancel",
        f.call("POST", &on_job("cancel"), &bob, Some(json!({"confirm": true})))
            .await,
    );
    ok(
        "retry",
        f.call(
            "POST",
            &on_job("retry"),
            &bob,
            Some(json!({"set": {"env.LR": "0.1"}})),
        )
        .await,
    );
    // A refused action leaves no entry.
    let (status, _) = f
        .call("PUT", "/maintenance", &bob, Some(json!({"message": "no"})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An admin's actions.
    let agent = agent_token(&db).await;
    let hello = json!({"name": "gpu-1", "hostname": "gpu-1", "gpus": [], "agent_version": "test", "runners": ["process"]});
    ok("hello", f.call("POST", "/agent/hello", &agent, Some(hello)).await);
    ok("drain", f.call("POST", "/nodes/gpu-1/drain", &root, None).await);
    ok(
        "undrain",
        f.call("POST", "/nodes/gpu-1/undrain", &root, None).await,
    );
    ok(
        "quota",
        f.call(
            "PUT",
            "/quotas/project/default",
            &root,
            Some(json!({"max_gpus": 8})),
        )
        .await,
    );
    let (status, _) = f.call("DELETE", "/quotas/project/default", &root, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    ok(
        "maintenance on",
        f.call(
            "PUT",
            "/maintenance",
            &root,
            Some(json!({"message": "driver upgrade"})),
        )
        .await,
    );
    ok(
        "maintenance off",
        f.call("DELETE", "/maintenance", &root, None).await,
    );
    ok(
        "project",
        f.call("POST", "/projects", &root, Some(json!({"name": "vision"})))
            .await,
    );
    ok(
        "member",
        f.call(
            "POST",
            "/projects/vision/members",
            &root,
            Some(json!({"user": "bob", "role": "editor"})),
        )
        .await,
    );

    // Only server admins read the log.
    let (status, _) = f.get("/audit", &bob).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let log: Page<AuditEntry> = serde_json::from_value(ok("audit", f.get("/audit", &root).await)).unwrap();
    let lines: Vec<String> = log
        .items
        .iter()
        .rev()
        .map(|e| {
            let target = if e.target == job_id {
                "JOB"
            } else {
                e.target.as_str()
            };
            format!("{} {} {target} {}", e.actor, e.action, e.detail)
                .trim_end()
                .to_string()
        })
        .collect();
    assert_eq!(
        lines,
        [
            "bob job.priority JOB priority 0 → 5",
            "bob job.hold JOB",
            "bob job.release JOB",
            "bob job.cancel JOB was QUEUED",
            "bob job.retry JOB env.LR=0.1",
            "root node.drain gpu-1",
            "root node.undrain gpu-1",
            "root quota.set project default max_gpus 8, max_running_jobs none",
            "root quota.clear project default",
            "root maintenance.on cluster driver upgrade",
            "root maintenance.off cluster",
            "root project.create vision",
            "root project.member vision bob is editor",
        ]
    );
    // When and from where, and through which token.
    let first = log.items.last().unwrap();
    assert_eq!(
        (first.address.as_deref(), first.token.as_deref()),
        (Some("127.0.0.1"), Some("test"))
    );
    assert!(first.time.ends_with('Z'), "{}", first.time);

    // Filters and pages.
    let (_, body) = f.get("/audit?actor=root&action=quota.set", &root).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 1, "{body}");
    let (_, body) = f.get(&format!("/audit?target={job_id}&limit=2"), &root).await;
    assert_eq!(body["items"][0]["action"], "job.retry", "{body}");
    let before = body["next_before"].as_i64().unwrap();
    let (_, body) = f
        .get(&format!("/audit?target={job_id}&limit=2&before={before}"), &root)
        .await;
    assert_eq!(body["items"][0]["action"], "job.release", "{body}");
    let (status, body) = f.get("/audit?action=job.explode", &root).await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("action"))
    );
}
