//! The device authorization grant (RFC 8628) over HTTP: codes, pending,
//! slow_down with a growing interval, approval yielding one token, denial,
//! expiry, rate-limited wrong user codes, and no code stored in clear.

use gpuplane_server::api::device_login;
use gpuplane_testkit::http::TestServer;
use gpuplane_testkit::sql;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

/// A server with one user, `dev`, who approves or denies codes.
struct Flow {
    site: TestServer,
    user_id: String,
}

impl std::ops::Deref for Flow {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.site
    }
}

impl Flow {
    async fn start() -> Flow {
        let site =
            TestServer::start_with(|config| config.device_poll_interval = Duration::from_secs(1)).await;
        let user_id = gpuplane_server::admin::create_user(site.db(), "dev", "dev-password", false)
            .await
            .unwrap();
        Flow { site, user_id }
    }

    async fn form(&self, path: &str, fields: &[(&str, &str)]) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.server.url))
            .form(fields)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    async fn authorize(&self) -> Value {
        let (status, body) = self
            .form(
                "/oauth/device_authorization",
                &[
                    ("client_id", "gpuctl"),
                    ("client_name", "gpuctl"),
                    ("client_host", "gpu-box-7"),
                ],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn poll(&self, device_code: &str) -> (StatusCode, Value) {
        self.form(
            "/oauth/token",
            &[
                ("grant_type", device_login::DEVICE_GRANT),
                ("device_code", device_code),
                ("client_id", "gpuctl"),
            ],
        )
        .await
    }
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_code_approved_in_the_console_yields_one_token() {
    let flow = Flow::start().await;
    let (_, metadata) = {
        let response = flow
            .http
            .get(format!(
                "{}/.well-known/oauth-authorization-server",
                flow.server.url
            ))
            .send()
            .await
            .unwrap();
        (response.status(), response.json::<Value>().await.unwrap())
    };
    assert_eq!(
        metadata["device_authorization_endpoint"],
        format!("{}/oauth/device_authorization", flow.server.url)
    );
    assert_eq!(
        metadata["token_endpoint"],
        format!("{}/oauth/token", flow.server.url)
    );

    let grant = flow.authorize().await;
    let user_code = grant["user_code"].as_str().unwrap();
    assert!(
        user_code.len() == 9
            && &user_code[4..5] == "-"
            && user_code
                .chars()
                .filter(|c| *c != '-')
                .all(|c| "BCDFGHJKLMNPQRSTVWXZ".contains(c)),
        "{user_code}"
    );
    assert_eq!(grant["verification_uri"], format!("{}/device", flow.server.url));
    assert_eq!(
        grant["verification_uri_complete"],
        format!("{}/device?user_code={user_code}", flow.server.url)
    );
    assert_eq!(grant["interval"], 1);
    assert_eq!(grant["expires_in"], 600);
    let device_code = grant["device_code"].as_str().unwrap();

    let (status, body) = flow.poll(device_code).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error(&body), "authorization_pending");
    // Polling again at once is too fast: slow_down, and the interval grows by 5 s.
    let (_, body) = flow.poll(device_code).await;
    assert_eq!(error(&body), "slow_down");
    let interval: i64 = sql!(flow.db(), |pool| {
        sqlx::query_scalar("SELECT interval_s FROM device_authorizations")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(interval, 6);

    // The approving user sees who asks; the code matches whatever the case and dashes.
    let typed = user_code.replace('-', "").to_lowercase();
    let request = match device_login::lookup(&flow.server.state, &typed, &flow.user_id, "127.0.0.1").await {
        Ok(request) => request,
        Err(_) => panic!("the code is found"),
    };
    assert_eq!(request.client_host, "gpu-box-7");
    assert_eq!(request.client_ip, "127.0.0.1");
    assert_eq!(request.status, "pending");
    assert!(
        device_login::decide(&flow.server.state, user_code, &flow.user_id, "127.0.0.1", true)
            .await
            .unwrap()
    );
    assert!(
        !device_login::decide(&flow.server.state, user_code, &flow.user_id, "127.0.0.1", false)
            .await
            .unwrap(),
        "decided once"
    );

    // Wait out the (grown) interval, then the token comes, once.
    sql!(flow.db(), |pool| {
        sqlx::query("UPDATE device_authorizations SET last_poll_at = 0")
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (status, body) = flow.poll(device_code).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    let token = body["access_token"].as_str().unwrap();
    let (_, me) = flow.get("/auth/whoami", token).await;
    assert_eq!(me["user"], "dev");
    assert_eq!(me["scope"], "write");
    assert_eq!(
        me["token_name"], "gpuctl on gpu-box-7",
        "listed and revocable by name"
    );
    sql!(flow.db(), |pool| {
        sqlx::query("UPDATE device_authorizations SET last_poll_at = 0")
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (_, body) = flow.poll(device_code).await;
    assert_eq!(error(&body), "invalid_grant", "a device code yields a token once");
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_expired_and_malformed_requests_get_their_rfc_errors() {
    let flow = Flow::start().await;
    let denied = flow.authorize().await;
    device_login::decide(
        &flow.server.state,
        denied["user_code"].as_str().unwrap(),
        &flow.user_id,
        "127.0.0.1",
        false,
    )
    .await
    .unwrap();
    let (_, body) = flow.poll(denied["device_code"].as_str().unwrap()).await;
    assert_eq!(error(&body), "access_denied");

    let expired = flow.authorize().await;
    sql!(flow.db(), |pool| {
        sqlx::query("UPDATE device_authorizations SET expires_at = 1 WHERE status = 'pending'")
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (_, body) = flow.poll(expired["device_code"].as_str().unwrap()).await;
    assert_eq!(error(&body), "expired_token");
    assert!(
        !device_login::decide(
            &flow.server.state,
            expired["user_code"].as_str().unwrap(),
            &flow.user_id,
            "127.0.0.1",
            true
        )
        .await
        .unwrap(),
        "an expired code cannot be approved"
    );

    let (_, body) = flow.poll("no-such-code").await;
    assert_eq!(error(&body), "invalid_grant");
    let (_, body) = flow.form("/oauth/token", &[("grant_type", "password")]).await;
    assert_eq!(error(&body), "unsupported_grant_type");
    let (status, body) = flow
        .form("/oauth/device_authorization", &[("client_id", "someone-else")])
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error(&body), "invalid_client");

    // A missing field, or JSON instead of a form: RFC 6749's 400
    // invalid_request, never a bare 415 or 422.
    let (status, body) = flow.form("/oauth/token", &[("device_code", "x")]).await;
    assert_eq!(
        (status, error(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{body}"
    );
    assert!(
        body["error_description"].as_str().unwrap().contains("grant_type"),
        "{body}"
    );
    for path in ["/oauth/token", "/oauth/device_authorization"] {
        let response = flow
            .http
            .post(format!("{}{path}", flow.server.url))
            .json(&serde_json::json!({"client_id": "gpuctl", "grant_type": device_login::DEVICE_GRANT}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(error(&body), "invalid_request", "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_user_codes_are_rate_limited() {
    let flow = Flow::start().await;
    let grant = flow.authorize().await;
    let mut refused_after = None;
    for attempt in 1..=1000 {
        match device_login::lookup(&flow.server.state, "BBBB-BBBB", "usr_x", "203.0.113.7").await {
            Err(device_login::LookupError::Unknown) => {}
            Err(device_login::LookupError::Limited(_)) => {
                refused_after.get_or_insert(attempt);
            }
            _ => panic!("a wrong code was accepted"),
        }
    }
    assert_eq!(refused_after, Some(11), "10 wrong codes, then refused");
    // Even the right code now waits for this caller, but not for others.
    let right = grant["user_code"].as_str().unwrap();
    assert!(matches!(
        device_login::lookup(&flow.server.state, right, "usr_x", "203.0.113.7").await,
        Err(device_login::LookupError::Limited(_))
    ));
    assert!(
        device_login::lookup(&flow.server.state, right, "usr_y", "198.51.100.1")
            .await
            .is_ok()
    );
    // Approving is limited the same way: the limited caller cannot approve.
    assert!(matches!(
        device_login::decide(&flow.server.state, right, "usr_x", "203.0.113.7", true).await,
        Err(device_login::LookupError::Limited(_))
    ));
    let pending: String = sql!(flow.db(), |pool| {
        sqlx::query_scalar("SELECT status FROM device_authorizations")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(pending, "pending");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_device_or_user_code_is_stored_in_clear() {
    let flow = Flow::start().await;
    let grant = flow.authorize().await;
    let dir = flow.site.stop().await;
    let bytes = gpuplane_testkit::postgres::stored_bytes(dir.path()).await;
    let contains = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    let device_code = grant["device_code"].as_str().unwrap();
    let user_code = grant["user_code"].as_str().unwrap();
    assert!(
        contains(&gpuplane_server::identity::credentials::hash_token(device_code)),
        "the hash is there"
    );
    assert!(!contains(device_code));
    assert!(!contains(&user_code.replace('-', "")));
    assert!(!contains(user_code));
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_device_authorizations_are_deleted() {
    let flow = Flow::start().await;
    let old = flow.authorize().await;
    let fresh = flow.authorize().await;
    let db = flow.db();
    let old_code = old["device_code"].as_str().unwrap();
    sql!(db, |pool| {
        sqlx::query("UPDATE device_authorizations SET expires_at = 1 WHERE device_code_hash = $1")
            .bind(gpuplane_server::identity::credentials::hash_token(old_code))
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    gpuplane_server::identity::device_codes::delete_expired(db).await;
    let left: i64 = sql!(db, |pool| {
        sqlx::query_scalar("SELECT count(*) FROM device_authorizations")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(left, 1, "the expired one is gone, the pending one stays");
    let (_, body) = flow.poll(fresh["device_code"].as_str().unwrap()).await;
    assert_eq!(error(&body), "authorization_pending");
    let (_, body) = flow.poll(old_code).await;
    assert_eq!(error(&body), "invalid_grant");
}
