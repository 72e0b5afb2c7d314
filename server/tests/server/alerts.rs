//! Alerts through the API: who may add channels and subscribe to what, who
//! sees which subscriptions and deliveries, and what a failing channel does
//! to a delivery (kept, retried, failed once its channel is gone). The
//! messages themselves reaching a real webhook, Slack receiver and SMTP
//! server are tested end to end in `testkit/alerts/test_alerts.py`.

use gpuplane_api::auth::Scope;
use gpuplane_server::sql;
use gpuplane_testkit::{TestServer, eventually, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

fn ok((status, body): (StatusCode, Value)) -> Value {
    assert!(status.is_success(), "{status} {body}");
    body
}

fn field_errors(body: &Value) -> Vec<String> {
    body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|detail| detail["field"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn channels_belong_to_admins_and_subscriptions_to_their_scope() {
    let f = TestServer::start_with(|config| config.settings.alert_retry_initial_s = 1).await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let bob = user_token(&db, "bob", Scope::Write, false).await;
    let carol = user_token(&db, "carol", Scope::Write, false).await;
    ok(f.post("/projects", &root, json!({"name": "vision"})).await);
    ok(f.post(
        "/projects/vision/members",
        &root,
        json!({"user": "carol", "role": "admin"}),
    )
    .await);
    ok(f.post(
        "/projects/default/members",
        &root,
        json!({"user": "bob", "role": "editor"}),
    )
    .await);

    // Channels: server admins only; a webhook gets a secret shown once.
    let hook = json!({"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/hook"});
    let (status, _) = f.post("/alerts/channels", &bob, hook.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let created = ok(f.post("/alerts/channels", &root, hook.clone()).await);
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{secret}");
    let (status, _) = f.post("/alerts/channels", &root, hook).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = f
        .post(
            "/alerts/channels",
            &root,
            json!({"name": "bad name", "kind": "email", "to": ["nope"]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(field_errors(&body), ["name", "to"]);
    // The secret is never listed, and is not stored in clear.
    let listed = ok(f.get("/alerts/channels", &root).await);
    assert_eq!(listed["items"][0]["url"], "http://127.0.0.1:9/hook");
    assert_eq!(listed["items"][0]["secret"], Value::Null);
    let stored: String = sql!(&db, |pool| {
        sqlx::query_scalar("SELECT sealed_secret FROM alert_channels")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert!(!stored.contains(&secret[6..]));
    // Where a channel sends is for admins only (a Slack URL is a credential).
    let listed = ok(f.get("/alerts/channels", &bob).await);
    assert_eq!(listed["items"][0]["name"], "ops");
    assert_eq!(listed["items"][0]["url"], Value::Null);

    // Subscriptions: a project's needs its admin; everything needs a server admin.
    let (status, _) = f
        .post(
            "/alerts/subscriptions",
            &bob,
            json!({"channel": "ops", "project": "default"}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an editor is not a project admin");
    let (status, body) = f
        .post(
            "/alerts/subscriptions",
            &bob,
            json!({"channel": "ops", "project": "vision"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        field_errors(&body),
        ["project"],
        "not a member: as if it did not exist"
    );
    let (status, _) = f
        .post(
            "/alerts/subscriptions",
            &bob,
            json!({"channel": "ops", "all": true}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = f
        .post("/alerts/subscriptions", &bob, json!({"channel": "nowhere"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(field_errors(&body), ["channel"]);
    let (status, body) = f
        .post(
            "/alerts/subscriptions",
            &bob,
            json!({"channel": "ops", "kinds": ["NOT_A_KIND"]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let mine = ok(f
        .post(
            "/alerts/subscriptions",
            &bob,
            json!({"channel": "ops", "kinds": ["RUN_ALERT"], "min_severity": "info"}),
        )
        .await);
    assert_eq!(mine["scope"], "user");
    assert_eq!(mine["user"], "bob");
    let theirs = ok(f
        .post(
            "/alerts/subscriptions",
            &carol,
            json!({"channel": "ops", "project": "vision"}),
        )
        .await);
    let everything = ok(f
        .post(
            "/alerts/subscriptions",
            &root,
            json!({"channel": "ops", "all": true}),
        )
        .await);
    assert_eq!(everything["scope"], "all");

    // A token limited to one project subscribes to that project only.
    let limited = ok(f
        .post(
            "/tokens",
            &carol,
            json!({"name": "vision-only", "scope": "write", "project": "vision"}),
        )
        .await);
    let limited = limited["secret"].as_str().unwrap();
    let (status, _) = f
        .post("/alerts/subscriptions", limited, json!({"channel": "ops"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Each sees their own, their projects', and admins see all.
    let ids = |page: Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (mine_id, theirs_id) = (mine["id"].as_str().unwrap(), theirs["id"].as_str().unwrap());
    assert_eq!(ids(ok(f.get("/alerts/subscriptions", &bob).await)), [mine_id]);
    assert_eq!(ids(ok(f.get("/alerts/subscriptions", &carol).await)), [theirs_id]);
    assert_eq!(ids(ok(f.get("/alerts/subscriptions", &root).await)).len(), 3);
    // Someone else's subscription is not found, as if it did not exist.
    let (status, _) = f
        .call(
            "DELETE",
            &format!("/alerts/subscriptions/{theirs_id}"),
            &bob,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A run's alert makes a delivery for bob's subscription and root's; the
    // channel answers nothing (port 9), so the delivery stays pending with
    // the reason and a next try.
    let run = ok(f
        .post("/runs", &bob, json!({"project": "default", "name": "r"}))
        .await);
    let run_id = run["id"].as_str().unwrap();
    let (status, body) = f
        .post(
            &format!("/runs/{run_id}/alerts"),
            &bob,
            json!({"title": "two\nlines"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(field_errors(&body), ["title"]);
    let raised = ok(f
        .post(
            &format!("/runs/{run_id}/alerts"),
            &bob,
            json!({"title": "eval dropped", "text": "0.41 < 0.5", "level": "warning", "wait_s": 60}),
        )
        .await);
    assert_eq!(raised["recorded"], true);
    let again = ok(f
        .post(
            &format!("/runs/{run_id}/alerts"),
            &bob,
            json!({"title": "eval dropped", "wait_s": 60}),
        )
        .await);
    assert_eq!(again["recorded"], false, "same title within wait_s");
    let deliveries = format!("/alerts/deliveries?run_id={run_id}");
    let failed_try = eventually("a failed try is kept", Duration::from_secs(20), || async {
        let page = ok(f.get(&deliveries, &bob).await);
        let delivery = page["items"].get(0)?.clone();
        (delivery["attempts"].as_i64() >= Some(1)).then_some(delivery)
    })
    .await;
    assert_eq!(failed_try["status"], "pending");
    assert_eq!(failed_try["channel"], "ops");
    assert_eq!(failed_try["event"]["kind"], "RUN_ALERT");
    assert_eq!(failed_try["event"]["message"], "eval dropped: 0.41 < 0.5");
    let error = failed_try["last_error"].as_str().unwrap();
    assert!(error.starts_with("POST http://127.0.0.1:9"), "{error}");
    assert!(!error.contains("/hook"), "the URL's path never shows: {error}");
    assert!(failed_try["next_attempt_at"].is_string());
    // One delivery per channel, whichever subscriptions matched; carol's
    // project saw nothing of bob's run.
    assert_eq!(
        ok(f.get(&deliveries, &root).await)["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(ok(f.get(&deliveries, &carol).await)["items"], json!([]));

    // Removing the channel removes its subscriptions; its pending delivery
    // fails with the reason at its next try.
    let (status, _) = f.call("DELETE", "/alerts/channels/ops", &bob, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f.call("DELETE", "/alerts/channels/ops", &root, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        ok(f.get("/alerts/subscriptions", &root).await)["items"],
        json!([])
    );
    let failed = eventually("the delivery fails", Duration::from_secs(20), || async {
        let page = ok(f.get(&format!("{deliveries}&status=failed"), &bob).await);
        page["items"].get(0).cloned()
    })
    .await;
    assert_eq!(failed["last_error"], "channel ops was removed");
    assert_eq!(failed["next_attempt_at"], Value::Null);
    let (status, body) = f.get("/alerts/deliveries?status=lost", &bob).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(field_errors(&body), ["status"]);
}
