//! Attacks on the real server (HTTP, real SQLite file) that must fail: one
//! test per hole of SECURITY.md that does not need an agent process
//! (those are in `testkit/tests/system/security.rs`).

use gpuplane_api::auth::Scope;
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, agent_token, eventually, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `POST /login`; returns the redirect target and whether a session cookie came back.
async fn login(f: &TestServer, username: &str, password: &str, next: &str) -> (String, bool) {
    let response = f
        .http
        .post(f.url("/login"))
        .header("origin", &f.server.url)
        .form(&[("username", username), ("password", password), ("next", next)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER, "a redirect either way");
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let session = response.headers().get_all("set-cookie").iter().any(|cookie| {
        let cookie = cookie.to_str().unwrap();
        cookie.starts_with("gpuplane_session=") && !cookie.contains("Max-Age=0")
    });
    (location, session)
}

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn hello(name: &str) -> Value {
    json!({"name": name, "hostname": name, "gpus": [], "agent_version": "test", "runners": ["process"]})
}

/// Hole 1: an account without a password (made by SSO) accepts no password,
/// not even the text of the dummy hash that keeps sign-in timing even.
#[tokio::test(flavor = "multi_thread")]
async fn accounts_without_a_password_accept_none() {
    let f = TestServer::start().await;
    sql!(&f.server.state.db, |pool| {
        sqlx::query(
            "INSERT INTO users (id, name, email, oidc_subject, is_admin, created_at)
         VALUES ('usr_sso', 'sso-ada', 'ada@example.com', 'https://idp|ada', TRUE, 0)",
        )
        .execute(pool)
        .await
        .map(|_| ())
    })
    .unwrap();
    for password in ["not a real password", "", "x"] {
        let (location, session) = login(&f, "sso-ada", password, "/").await;
        assert!(
            location.starts_with("/login?error=invalid"),
            "{password:?}: {location}"
        );
        assert!(!session, "{password:?} must not start a session");
    }
    // A local account still signs in.
    gpuplane_server::admin::create_user(&f.server.state.db, "local", "correct horse", false)
        .await
        .unwrap();
    let (location, session) = login(&f, "local", "correct horse", "/jobs").await;
    assert_eq!(location, "/jobs");
    assert!(session);
}

/// Hole 5: after sign-in, only same-site paths are followed.
#[tokio::test(flavor = "multi_thread")]
async fn sign_in_never_redirects_off_site() {
    let f = TestServer::start().await;
    gpuplane_server::admin::create_user(&f.server.state.db, "ada", "correct horse", false)
        .await
        .unwrap();
    for next in [
        "/\t/evil.example",
        "/\n/evil.example",
        "//evil.example",
        "/\\evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        " /x",
    ] {
        let (location, session) = login(&f, "ada", "correct horse", next).await;
        assert!(session);
        assert_eq!(location, "/", "next={next:?}");
    }
    let (location, _) = login(&f, "ada", "correct horse", "/runs/run_1?tab=logs#L3").await;
    assert_eq!(location, "/runs/run_1?tab=logs#L3");
}

/// Hole 3: an agent token speaks for its own node only; a second token can
/// neither say hello as another node, nor poll or report for it, nor answer
/// its log fetches; a revoked token fails at once.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_token_speaks_only_for_its_own_node() {
    let f = TestServer::start().await;
    let db = &f.server.state.db;
    let token_a = agent_token(db).await;
    let token_b = agent_token(db).await;

    let (status, welcome) = f.post("/agent/hello", &token_a, hello("node-a")).await;
    assert_eq!(status, StatusCode::OK, "{welcome}");
    let node_a = welcome["node_id"].as_str().unwrap().to_string();
    assert!(welcome["server_id"].as_str().unwrap().starts_with("srv_"));

    // B says hello as A: refused, naming the rule.
    let (status, body) = f.post("/agent/hello", &token_b, hello("node-a")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("belongs to another agent token"),
        "{body}"
    );

    // A job dispatched to A (the only node yet).
    let user = user_token(db, "ada", Scope::Write, true).await;
    let (status, job) = f
        .post(
            "/jobs",
            &user,
            json!({"name": "j", "command": ["true"], "resources": {"gpu": 0}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();
    // A heartbeats meanwhile, as its agent would: a node silent for the test
    // server's 1 s node timeout goes OFFLINE and gets nothing.
    let heartbeat = json!({"node_id": node_a, "gpus": [], "running": []});
    eventually("the job to be dispatched", WAIT, || async {
        f.post("/agent/poll", &token_a, heartbeat.clone()).await;
        let (_, job) = f.get(&format!("/jobs/{job_id}"), &user).await;
        (job["status"] == "DISPATCHING").then_some(())
    })
    .await;

    // B's first hello binds it to node-b; it cannot then speak for node-a.
    let (status, welcome_b) = f.post("/agent/hello", &token_b, hello("node-b")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = f.post("/agent/hello", &token_b, hello("node-a")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("speaks only for node `node-b`"),
        "{body}"
    );
    // B polls as A: refused, and so is a report about A's attempt.
    let poll = json!({"node_id": node_a, "gpus": [], "running": []});
    let (status, body) = f.post("/agent/poll", &token_b, poll.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("speaks only for node `node-b`")
    );
    let forged = json!({"node_id": node_a, "items": [
        {"type": "exited", "job_id": job_id, "attempt": 1, "exit_code": 0, "signal": null,
         "oom_killed": false, "cancelled": false, "time": 0}]});
    let (status, _) = f.post("/agent/report", &token_b, forged.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Nor can B write telemetry for A's GPUs.
    let telemetry = json!({"node_id": node_a, "batch_id": "t1", "samples": [
        {"wall_time": 1.0e9, "gpus": [{"index": 0, "utilization_percent": 99.0}]}]});
    let (status, _) = f.post("/agent/telemetry", &token_b, telemetry.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let stored: i64 = sql!(f.db(), |pool| {
        sqlx::query_scalar("SELECT count(*) FROM telemetry_series")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(stored, 0);
    // Reported under its own node id, the forged exit changes nothing.
    let mut own = forged.clone();
    own["node_id"] = welcome_b["node_id"].clone();
    let (status, _) = f.post("/agent/report", &token_b, own).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // A's own poll gets the dispatch; B's answers never contain it.
    let (status, answer) = f.post("/agent/poll", &token_a, poll).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["commands"][0]["type"], "dispatch", "{answer}");
    let (_, job_now) = f.get(&format!("/jobs/{job_id}"), &user).await;
    assert_eq!(job_now["status"], "DISPATCHING", "{job_now}");

    // A full-log fetch meant for A cannot be answered by B.
    let started = json!({"node_id": node_a, "items": [
        {"type": "started", "job_id": job_id, "attempt": 1, "pid": 1, "time": 1}]});
    assert_eq!(
        f.post("/agent/report", &token_a, started).await.0,
        StatusCode::NO_CONTENT
    );
    let reader = {
        let http = f.http.clone();
        let url = f.api_url(&format!("/jobs/{job_id}/logs/full"));
        let user = user.clone();
        tokio::spawn(async move { http.get(url).bearer_auth(user).send().await.unwrap() })
    };
    let poll = json!({"node_id": node_a, "gpus": [], "running": [{"job_id": job_id, "attempt": 1}]});
    let request_id = eventually("the fetch to reach node-a's poll", WAIT, || async {
        let (_, answer) = f.post("/agent/poll", &token_a, poll.clone()).await;
        let fetch = answer["commands"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "fetch_log")
            .cloned()?;
        Some(fetch["request_id"].as_str()?.to_string())
    })
    .await;
    let upload = |token: &str| {
        f.http
            .post(f.api_url(&format!("/agent/log-fetch/{request_id}")))
            .bearer_auth(token)
            .header("content-type", "application/octet-stream")
            .body("forged log\n")
            .send()
    };
    assert_eq!(upload(&token_b).await.unwrap().status(), StatusCode::NOT_FOUND);
    assert_eq!(upload(&token_a).await.unwrap().status(), StatusCode::NO_CONTENT);
    let full = reader.await.unwrap();
    assert_eq!(
        full.headers()["content-disposition"],
        format!("attachment; filename=\"{job_id}-attempt-1-stdout.log\"")
    );
    assert_eq!(
        full.text().await.unwrap(),
        "forged log\n",
        "A's own upload reaches the reader"
    );

    // Revoking A's token stops it at once.
    let token_a_id: String = sql!(db, |pool| {
        sqlx::query_scalar("SELECT id FROM api_tokens WHERE node_name = 'node-a'")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    sql!(db, |pool| {
        sqlx::query("UPDATE api_tokens SET revoked_at = 1 WHERE id = $1")
            .bind(&token_a_id)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (status, _) = f.post("/agent/hello", &token_a, hello("node-a")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // And the node can move to a new token.
    let token_c = agent_token(db).await;
    let (status, _) = f.post("/agent/hello", &token_c, hello("node-a")).await;
    assert_eq!(status, StatusCode::OK);
}

/// Hole 6: a project-limited token mints only tokens limited to that project.
#[tokio::test(flavor = "multi_thread")]
async fn a_project_limited_token_mints_only_limited_tokens() {
    let f = TestServer::start().await;
    let admin = user_token(&f.server.state.db, "root", Scope::Write, true).await;
    for name in ["vision", "speech"] {
        let (status, body) = f.post("/projects", &admin, json!({"name": name})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, limited) = f
        .post(
            "/tokens",
            &admin,
            json!({"name": "ci", "scope": "write", "project": "vision"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{limited}");
    let limited = limited["secret"].as_str().unwrap().to_string();

    let (status, minted) = f
        .post("/tokens", &limited, json!({"name": "child", "scope": "read"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    assert_eq!(
        minted["token"]["project"], "vision",
        "the limit is inherited: {minted}"
    );
    let child = minted["secret"].as_str().unwrap();
    let (_, jobs) = f.get("/jobs?project=speech", child).await;
    assert_eq!(jobs["items"], json!([]), "{jobs}");
    let (_, projects) = f.get("/projects", child).await;
    let names: Vec<&str> = projects["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["vision"]);

    let (status, body) = f
        .post(
            "/tokens",
            &limited,
            json!({"name": "escape", "scope": "read", "project": "speech"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "project");

    // Not even an admin limits a token to a project that does not exist
    // (found by Schemathesis: the insert failed its foreign key, a 500).
    let (status, body) = f
        .post(
            "/tokens",
            &admin,
            json!({"name": "ghost", "scope": "read", "project": "no-such-project"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "project");
}

/// Events of an SDK run (no job) belong to the run's project.
#[tokio::test(flavor = "multi_thread")]
async fn events_of_sdk_runs_stay_in_their_project() {
    let f = TestServer::start().await;
    let db = &f.server.state.db;
    let admin = user_token(db, "root", Scope::Write, true).await;
    assert_eq!(
        f.post("/projects", &admin, json!({"name": "secret-lab"})).await.0,
        StatusCode::CREATED
    );
    let (status, run) = f
        .post("/runs", &admin, json!({"project": "secret-lab", "name": "r"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run_id = run["id"].as_str().unwrap();
    let batch = json!({"batch_id": "b1", "points": [{"key": "train/loss", "step": 1, "wall_time": 1.0, "value": "NaN"}]});
    let (status, body) = f.post(&format!("/runs/{run_id}/metrics"), &admin, batch).await;
    assert!(status.is_success(), "{body}");
    let (_, events) = f
        .get(&format!("/events?kind=LOSS_NAN&run_id={run_id}"), &admin)
        .await;
    assert_eq!(events["items"].as_array().unwrap().len(), 1, "{events}");
    // A user of the default project only sees no such event.
    let outsider = user_token(db, "outsider", Scope::Read, false).await;
    let (_, events) = f.get("/events?kind=LOSS_NAN", &outsider).await;
    assert_eq!(events["items"], json!([]), "{events}");
}

/// Live streams per user and per token are bounded (429 past the limit).
#[tokio::test(flavor = "multi_thread")]
async fn live_streams_per_caller_are_bounded() {
    let f = TestServer::start_with(|config| config.settings.max_streams_per_user = 2).await;
    let token = user_token(&f.server.state.db, "ada", Scope::Read, false).await;
    let open = || f.http.get(f.api_url("/events/stream")).bearer_auth(&token).send();
    let first = open().await.unwrap();
    let second = open().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let third = open().await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(third.text().await.unwrap().contains("live streams"));
    // Closing one frees its place.
    // The server notices at its next write to the closed connection (a keep-alive at the latest).
    drop(first);
    eventually(
        "a place to free up",
        std::time::Duration::from_secs(60),
        || async {
            let again = open().await.unwrap();
            (again.status() == StatusCode::OK).then_some(())
        },
    )
    .await;
}

/// Secret job variables are stored sealed, never shown back, and reach the
/// agent only in its dispatch.
#[tokio::test(flavor = "multi_thread")]
async fn secret_env_is_never_shown_and_never_stored_in_clear() {
    let f = TestServer::start().await;
    let db = f.db();
    let user = user_token(db, "ada", Scope::Write, false).await;
    let secret = "wandb-key-3f9a1c-do-not-leak";
    let spec = json!({"name": "s", "command": ["true"], "env": {"PLAIN": "1"}, "secret_env": {"WANDB_API_KEY": secret}});
    let (status, job) = f.post("/jobs", &user, spec).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert!(!job.to_string().contains(secret));
    assert_eq!(job["secret_env"], json!(["WANDB_API_KEY"]));
    let job_id = job["id"].as_str().unwrap();
    let (_, shown) = f.get(&format!("/jobs/{job_id}"), &user).await;
    assert!(!shown.to_string().contains(secret), "{shown}");
    let (_, list) = f.get("/jobs", &user).await;
    assert!(!list.to_string().contains(secret));

    // Bad names and clashes: 422 per field, nothing stored.
    let bad = json!({"name": "s", "command": ["true"], "env": {"A": "1"},
                     "secret_env": {"A": "x", "GPUCTL_TOKEN": "y", "1X": "z"}});
    let (status, body) = f.post("/jobs", &user, bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["details"].as_array().unwrap().len(), 3, "{body}");

    // The agent of the node it is dispatched to gets the value.
    let agent = agent_token(db).await;
    let (_, welcome) = f.post("/agent/hello", &agent, hello("box")).await;
    let poll = json!({"node_id": welcome["node_id"], "gpus": [], "running": []});
    let (_, answer) = f.post("/agent/poll", &agent, poll).await;
    assert_eq!(
        answer["commands"][0]["spec"]["secret_env"]["WANDB_API_KEY"], secret,
        "{answer}"
    );

    // Nowhere in the database (its files, or PostgreSQL's tables) in clear.
    if let Some(pool) = db.as_sqlite() {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(pool)
            .await
            .unwrap();
    }
    let bytes = gpuplane_testkit::postgres::stored_bytes(f.data_dir()).await;
    let stored = |text: &str| bytes.windows(text.len()).any(|w| w == text.as_bytes());
    assert!(
        stored("WANDB_API_KEY"),
        "the job's spec, with the secret's name, was read"
    );
    assert!(
        !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the secret is in the database"
    );
}

/// Console pages carry a Content-Security-Policy whose nonce is the one on
/// the hydration script, and answers are not sniffed or framed.
#[tokio::test(flavor = "multi_thread")]
async fn console_pages_carry_a_strict_content_security_policy() {
    let f = TestServer::start().await;
    let page = f.http.get(f.url("/login")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    let policy = headers["content-security-policy"].to_str().unwrap().to_string();
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "same-origin");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(
        !policy.contains("unsafe-eval'") || policy.contains("'wasm-unsafe-eval'"),
        "{policy}"
    );
    let nonce = policy
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("a nonce in script-src");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(&format!("nonce=\"{nonce}\"")),
        "the hydration script carries the nonce"
    );
    // Files and error pages of the console carry the headers too.
    let file = f.http.get(f.url("/no-such-file.html")).send().await.unwrap();
    assert_eq!(file.headers()["x-content-type-options"], "nosniff");
    let policy = file.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
}

/// Device login: tokens expire, and sign-in requests per address are limited.
#[tokio::test(flavor = "multi_thread")]
async fn device_login_tokens_expire_and_requests_are_limited() {
    let f = TestServer::start_with(|config| {
        config.device_token_lifetime = std::time::Duration::from_secs(3 * 24 * 3600)
    })
    .await;
    let start = || {
        f.http
            .post(f.url("/oauth/device_authorization"))
            .form(&[("client_id", "gpuctl"), ("client_host", "laptop")])
            .send()
    };
    let first: Value = start().await.unwrap().json().await.unwrap();
    let user_code = first["user_code"].as_str().unwrap().replace('-', "");
    let user_id = gpuplane_server::admin::create_user(&f.server.state.db, "ada", "correct horse", false)
        .await
        .unwrap();
    assert!(
        gpuplane_server::api::device_login::decide(&f.server.state, &user_code, &user_id, "127.0.0.1", true)
            .await
            .ok()
            .unwrap()
    );
    let token: Value = f
        .http
        .post(f.url("/oauth/token"))
        .form(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ("device_code", first["device_code"].as_str().unwrap()),
            ("client_id", "gpuctl"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(token["expires_in"], 3 * 24 * 3600, "{token}");
    let access = token["access_token"].as_str().unwrap();
    let (_, tokens) = f.get("/tokens", access).await;
    assert!(tokens["items"][0]["expires_at"].is_string(), "{tokens}");
    // A token it makes cannot outlive it.
    let parent_expiry = tokens["items"][0]["expires_at"].as_str().unwrap().to_string();
    for asked in [
        json!({"name": "forever", "scope": "write"}),
        json!({"name": "long", "scope": "read", "expires_in_days": 3650}),
    ] {
        let (status, child) = f.post("/tokens", access, asked).await;
        assert_eq!(status, StatusCode::CREATED, "{child}");
        assert_eq!(child["token"]["expires_at"], parent_expiry.as_str(), "{child}");
    }

    // 30 requests per address per 10 minutes; the first one above was one.
    for _ in 0..29 {
        assert_eq!(start().await.unwrap().status(), StatusCode::OK);
    }
    let limited = start().await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"], "slow_down");
}

/// The 409 for a checkpoint path several runs wrote names only the runs the
/// caller may see; the others are only counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_checkpoint_names_only_runs_the_caller_can_see() {
    let f = TestServer::start().await;
    let db = &f.server.state.db;
    let admin = user_token(db, "root", Scope::Write, true).await;
    assert_eq!(
        f.post("/projects", &admin, json!({"name": "hidden"})).await.0,
        StatusCode::CREATED
    );
    let editor = user_token(db, "ada", Scope::Write, false).await;
    let mut runs = Vec::new();
    for (token, project) in [(&editor, "default"), (&editor, "default"), (&admin, "hidden")] {
        let (status, run) = f
            .post("/runs", token, json!({"project": project, "name": "r"}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        runs.push(run["id"].as_str().unwrap().to_string());
    }
    for run in &runs {
        let mut conn = gpuplane_server::store::write(db).await.unwrap();
        gpuplane_server::runs::checkpoints::record(
            &mut conn,
            run,
            "node_x",
            "/ckpt/shared.pt",
            1,
            0,
            Some(10),
        )
        .await
        .unwrap();
        conn.commit().await.unwrap();
    }
    let (status, body) = f
        .post(
            "/evaluations",
            &editor,
            json!({"run_id": runs[0], "checkpoint": "/ckpt/shared.pt", "command": ["true"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&runs[1]), "a visible run is named: {message}");
    assert!(!message.contains(&runs[2]), "a hidden run is not: {message}");
    assert!(
        message.contains("1 run(s) of projects you cannot see"),
        "{message}"
    );
}

/// With `allowed_image_registries`, a docker job's image must come from one
/// of them, at submit and at a retry that changes the image.
#[tokio::test(flavor = "multi_thread")]
async fn docker_images_come_only_from_allowed_registries() {
    let f = TestServer::start_with(|config| {
        config.settings.allowed_image_registries = Some(vec!["nvcr.io".into(), " GHCR.io ".into()])
    })
    .await;
    let token = f.user("ada", Scope::Write, true).await;
    f.set_node_policy(&token, "default", json!({"runners": ["process", "docker"]}))
        .await;
    let docker = |image: &str| json!({"name": "d", "command": ["true"], "runner": "docker", "image": image});

    let (status, body) = f.post("/jobs", &token, docker("pytorch/pytorch:latest")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "image");
    let message = body["error"]["details"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "comes from docker.io, which this server does not allow (allowed: nvcr.io, ghcr.io)"
        ),
        "{message}"
    );

    let (status, job) = f
        .post("/jobs", &token, docker("ghcr.io/acme/train@sha256:0123abcd"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_str().unwrap();
    let (status, _) = f
        .post(&format!("/jobs/{id}/cancel"), &token, json!({"confirm": true}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = f
        .post(
            &format!("/jobs/{id}/retry"),
            &token,
            json!({"set": {"image": "ubuntu"}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "image");
}
