//! Alerts through the API: who may add channels and subscribe to what, who
//! sees which subscriptions and deliveries, and what a failing channel does
//! to a delivery (kept, retried, failed once its channel is gone). The
//! messages themselves reaching a real webhook, Slack receiver and SMTP
//! server are tested end to end in `testkit/alerts/test_alerts.py`.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::sql;
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
    let f = TestServer::start_with(|config| {
        config.settings.alert_retry_initial_s = 1;
        // The channel below points at this host (port 9, nobody there).
        config.settings.alert_private_hosts = true;
    })
    .await;
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
    // Open to anyone's own subscriptions (a channel's own choice; the default is admins only).
    let hook =
        json!({"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/hook", "subscribers": "anyone"});
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

/// Alert channels are not open relays. A channel decides who subscribes to
/// it (server admins unless it says otherwise; a project's channel takes
/// that project's events only, from its admins); a webhook into the
/// server's own network is refused (an address in the URL at once, a name
/// that resolves there at each try, where the connection is made) unless
/// an admin allows it; errors never show a password or what the receiver
/// answered; and a run cannot flood the channels with alerts.
#[tokio::test(flavor = "multi_thread")]
async fn channels_are_no_relays_into_the_network_or_for_anyone() {
    let f = TestServer::start_with(|config| config.settings.alert_retry_initial_s = 1).await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let lead = user_token(&db, "lead", Scope::Write, false).await;
    let bob = user_token(&db, "bob", Scope::Write, false).await;
    ok(f.post("/projects", &root, json!({"name": "vision"})).await);
    ok(f.post(
        "/projects/vision/members",
        &root,
        json!({"user": "lead", "role": "admin"}),
    )
    .await);

    // Who may subscribe.
    let admins_only = ok(f
        .post(
            "/alerts/channels",
            &root,
            json!({"name": "ops", "kind": "slack", "url": "https://hooks.example.com/T/B/secret"}),
        )
        .await);
    assert_eq!(admins_only["subscribers"], "admins");
    let (status, body) = f
        .post("/alerts/subscriptions", &bob, json!({"channel": "ops"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = f
        .post(
            "/alerts/subscriptions",
            &lead,
            json!({"channel": "ops", "project": "vision"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a project admin on the admins' channel"
    );
    ok(f.post(
        "/alerts/subscriptions",
        &root,
        json!({"channel": "ops", "all": true}),
    )
    .await);
    let team = ok(f
        .post(
            "/alerts/channels",
            &root,
            json!({"name": "vision-team", "kind": "slack", "url": "https://hooks.example.com/T/B/team", "project": "vision"}),
        )
        .await);
    assert_eq!(
        (&team["subscribers"], &team["project"]),
        (&json!("project"), &json!("vision"))
    );
    ok(f.post(
        "/alerts/subscriptions",
        &lead,
        json!({"channel": "vision-team", "project": "vision"}),
    )
    .await);
    for (token, body) in [
        (&lead, json!({"channel": "vision-team"})),
        (&root, json!({"channel": "vision-team", "all": true})),
        (&root, json!({"channel": "vision-team", "project": "default"})),
    ] {
        let (status, answer) = f.post("/alerts/subscriptions", token, body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}: {answer}");
    }

    // The network inside: an address in the URL is refused at once...
    for url in [
        "http://127.0.0.1:8600/api/v1/jobs",
        "http://169.254.169.254/latest",
        "http://[::1]:5432/",
    ] {
        let (status, body) = f
            .post(
                "/alerts/channels",
                &root,
                json!({"name": "inside", "kind": "webhook", "url": url}),
            )
            .await;
        assert_eq!(
            (status, field_errors(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, vec!["url".to_string()]),
            "{url}"
        );
    }
    // ...a name resolving there fails each try where it connects, and a
    // password in the URL never shows.
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = receiver.local_addr().unwrap().port();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = reached.clone();
    tokio::spawn(async move {
        while let Ok((_, _)) = receiver.accept().await {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    ok(f.post(
        "/alerts/channels",
        &root,
        json!({"name": "rebound", "kind": "webhook", "url": format!("http://admin:hunter2@localhost:{port}/hook")}),
    )
    .await);
    ok(f.post(
        "/alerts/subscriptions",
        &root,
        json!({"channel": "rebound", "all": true}),
    )
    .await);
    let run = ok(f
        .post("/runs", &root, json!({"project": "default", "name": "r"}))
        .await);
    let run_id = run["id"].as_str().unwrap().to_string();
    ok(f.post(
        &format!("/runs/{run_id}/alerts"),
        &root,
        json!({"title": "probe"}),
    )
    .await);
    let tried = eventually("the rebound delivery's try", Duration::from_secs(20), || async {
        let page = ok(f.get("/alerts/deliveries?channel=rebound", &root).await);
        let delivery = page["items"].get(0)?.clone();
        (delivery["attempts"].as_i64() >= Some(1)).then_some(delivery)
    })
    .await;
    let error = tried["last_error"].as_str().unwrap();
    assert!(error.contains("loopback, private or link-local"), "{error}");
    assert!(
        !error.contains("hunter2") && !error.contains("admin:") && !error.contains("/hook"),
        "{error}"
    );
    assert!(
        !reached.load(std::sync::atomic::Ordering::SeqCst),
        "nothing reached the network inside"
    );

    // A run cannot flood the channels: 30 alerts a minute, then 429.
    let mut statuses = Vec::new();
    for n in 0..31 {
        let (status, _) = f
            .post(
                &format!("/runs/{run_id}/alerts"),
                &root,
                json!({"title": format!("flood {n}")}),
            )
            .await;
        statuses.push(status);
    }
    assert!(statuses[..29].iter().all(StatusCode::is_success), "{statuses:?}");
    assert_eq!(statuses[30], StatusCode::TOO_MANY_REQUESTS);
}

/// What a failing receiver answers is its own business: a delivery's error
/// keeps its status only (an error page may echo headers or secrets).
#[tokio::test(flavor = "multi_thread")]
async fn a_receivers_answer_never_shows_in_a_delivery() {
    let f = TestServer::start_with(|config| {
        config.settings.alert_retry_initial_s = 1;
        config.settings.alert_private_hosts = true;
    })
    .await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = receiver.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = receiver.accept().await {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let body = "receiver-secret-42 X-GPUPlane-Signature echoed";
            let answer = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    ok(f.post(
        "/alerts/channels",
        &root,
        json!({"name": "grumpy", "kind": "webhook", "url": format!("http://127.0.0.1:{port}/hook")}),
    )
    .await);
    ok(f.post(
        "/alerts/subscriptions",
        &root,
        json!({"channel": "grumpy", "all": true}),
    )
    .await);
    let run = ok(f
        .post("/runs", &root, json!({"project": "default", "name": "r"}))
        .await);
    ok(f.post(
        &format!("/runs/{}/alerts", run["id"].as_str().unwrap()),
        &root,
        json!({"title": "hi"}),
    )
    .await);
    let tried = eventually("a failed try", Duration::from_secs(20), || async {
        let page = ok(f.get("/alerts/deliveries?channel=grumpy", &root).await);
        let delivery = page["items"].get(0)?.clone();
        (delivery["attempts"].as_i64() >= Some(1)).then_some(delivery)
    })
    .await;
    let error = tried["last_error"].as_str().unwrap();
    assert_eq!(
        error,
        format!("POST http://127.0.0.1:{port} answered 500 Internal Server Error")
    );
}
