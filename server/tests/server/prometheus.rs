//! `GET /metrics`: who may scrape it (a server admin's `metrics` token on
//! the main address; anyone who reaches `metrics_bind`), what a `metrics`
//! token cannot do, and what the text says of the queue. Prometheus itself
//! scrapes a cluster in `testkit/tests/system/prometheus.rs`.

use gpuplane_api::auth::Scope;
use gpuplane_server::identity::credentials::hash_token;
use gpuplane_testkit::http::error_fields;
use gpuplane_testkit::{TestServer, agent_token, sql, user_token};
use reqwest::StatusCode;
use serde_json::json;

/// `GET /metrics` on the main address with `token`: the status and the text.
async fn scrape(f: &TestServer, token: Option<&str>) -> (StatusCode, String) {
    let mut request = f.http.get(f.url("/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// A metrics token made through the API by `creator`: the status and body.
async fn make_metrics_token(
    f: &TestServer,
    creator: &str,
    project: Option<&str>,
) -> (StatusCode, serde_json::Value) {
    f.post(
        "/tokens",
        creator,
        json!({"name": "prometheus", "scope": "metrics", "project": project}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn only_a_server_admins_metrics_token_scrapes_and_it_opens_nothing_else() {
    let f = TestServer::start().await;
    let db = f.db();
    let admin = user_token(db, "ada", Scope::Write, true).await;
    let (status, body) = f.post("/projects", &admin, json!({"name": "vision"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // Who may make one: a server admin's write token, for no project.
    let editor = user_token(db, "eve", Scope::Write, false).await;
    let admin_reader = user_token(db, "ada-read", Scope::Read, true).await;
    let admin_limited = user_token(db, "ada-limited", Scope::Write, true).await;
    sql!(db, |pool| {
        sqlx::query("UPDATE api_tokens SET project = 'vision' WHERE token_hash = $1")
            .bind(hash_token(&admin_limited))
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    for creator in [&editor, &admin_limited] {
        let (status, body) = make_metrics_token(&f, creator, None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(error_fields(&body), ["scope"], "{body}");
    }
    // A read token makes no token at all.
    let (status, body) = make_metrics_token(&f, &admin_reader, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = make_metrics_token(&f, &admin, Some("vision")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(error_fields(&body), ["project"], "{body}");
    let (status, created) = make_metrics_token(&f, &admin, None).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let metrics = created["secret"].as_str().unwrap().to_string();

    // Only it scrapes: no token is 401, every other scope 403.
    let (status, _) = scrape(&f, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let sdk = user_token(db, "job", Scope::Sdk, true).await;
    let agent = agent_token(db).await;
    for token in [&admin, &admin_reader, &sdk, &agent] {
        let (status, text) = scrape(&f, Some(token)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    }
    let (status, text) = scrape(&f, Some(&metrics)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("# TYPE gpuplane_build_info gauge\n"), "{text}");

    // It opens nothing else: not the API, not ingest, not MCP.
    let run = f.create_run(&admin, "r").await;
    let (status, body) = f.get("/jobs", &metrics).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = f
        .post("/jobs", &metrics, json!({"name": "x", "command": ["true"]}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = f
        .ingest(
            &metrics,
            &run,
            json!({"batch_id": "b", "points": [{"key": "loss", "step": 1, "wall_time": 1.0, "value": 1.0}]}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = f
        .post("/tokens", &metrics, json!({"name": "more", "scope": "read"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let mcp = f
        .http
        .post(f.url("/mcp"))
        .bearer_auth(&metrics)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::FORBIDDEN);
    let (status, me) = f.get("/auth/whoami", &metrics).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["scope"], "metrics");

    // A request is timed under the route that answered it, as declared,
    // never under the path it asked for.
    for path in ["/api/v1/x%22%7Bevil%7D", "/x%22%7Bevil%7D.js"] {
        let probe = f.http.get(f.url(path)).send().await.unwrap();
        assert_eq!(probe.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let (_, text) = scrape(&f, Some(&metrics)).await;
    assert!(!text.contains("evil"), "{text}");
    assert!(text.contains("route=\"/api/v1/{*rest}\""), "{text}");

    // The token is its owner's: an owner who stops being an admin stops it.
    sql!(db, |pool| {
        sqlx::query("UPDATE users SET is_admin = FALSE WHERE name = 'ada'")
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (status, text) = scrape(&f, Some(&metrics)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_bind_serves_the_metrics_alone_without_a_token() {
    let f = TestServer::start_with(|config| {
        config.settings.metrics_bind = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let open = f.server.state.config.settings.metrics_bind.unwrap();
    let admin = user_token(f.db(), "ada", Scope::Write, true).await;
    let job = json!({"name": "waits", "command": ["true"], "resources": {"gpu": 1}});
    let (status, body) = f.post("/jobs", &admin, job).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let response = f.http.get(format!("http://{open}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    // No node has a GPU: the job waits, and its project's queue says so.
    assert!(
        text.contains("gpuplane_jobs{project=\"default\",state=\"QUEUED\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("gpuplane_queue_oldest_age_seconds{project=\"default\"} "),
        "{text}"
    );
    assert!(text.contains("gpuplane_leader 1"), "{text}");
    // Nothing else is there: not the API, not the console, no other method.
    for path in ["/api/v1/jobs", "/", "/api/v1/auth/whoami"] {
        let response = f.http.get(format!("http://{open}{path}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let response = f
        .http
        .post(format!("http://{open}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    // The main address still asks for a token.
    let (status, _) = scrape(&f, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
