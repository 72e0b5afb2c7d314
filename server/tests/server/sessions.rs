//! Console sessions over real HTTP: sign-in, cookie flags, id rotation,
//! sign-out, timeouts, disabled users, cross-origin refusals, rate limits,
//! and no session id in the database in clear.

use gpuplane_testkit::http::TestServer;
use gpuplane_testkit::sql;
use reqwest::StatusCode;
use std::time::Duration;

/// A server with one user, `ada`, who signs in through the console's forms.
struct Console(TestServer);

impl std::ops::Deref for Console {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

/// The `gpuplane_session` cookie a response sets, with its attributes.
fn set_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("gpuplane_session="))
        .map(str::to_string)
}

fn cookie_value(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

impl Console {
    async fn start(configure: impl FnOnce(&mut gpuplane_server::config::ServerConfig)) -> Console {
        let site = TestServer::start_with(configure).await;
        gpuplane_server::admin::create_user(site.db(), "ada", "correct horse", false)
            .await
            .unwrap();
        Console(site)
    }

    /// Where the server listens (its public URL may be elsewhere, behind a proxy).
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.state.config.settings.bind)
    }

    async fn login(&self, password: &str, cookie: Option<&str>) -> reqwest::Response {
        let mut request = self
            .http
            .post(self.url("/login"))
            .header("origin", &self.server.url)
            .form(&[("username", "ada"), ("password", password), ("next", "/tokens")]);
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send().await.unwrap()
    }

    /// Signs in; returns the `name=value` cookie.
    async fn signed_in(&self) -> String {
        let response = self.login("correct horse", None).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(response.headers()["location"], "/tokens");
        cookie_value(&set_cookie(&response).expect("a session cookie"))
    }

    /// Whether a page that needs a session renders with this cookie.
    async fn works(&self, cookie: &str) -> bool {
        let response = self
            .http
            .get(self.url("/tokens"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        response.status() == StatusCode::OK
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sign_in_sets_a_safe_cookie_and_shows_the_user() {
    let console = Console::start(|_| {}).await;
    let response = console.login("correct horse", None).await;
    let cookie = set_cookie(&response).unwrap();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(cookie.contains("Path=/"), "{cookie}");
    assert!(!cookie.contains("Secure"), "plain HTTP here: {cookie}");
    let value = cookie_value(&cookie);
    let page = console
        .http
        .get(console.url("/tokens"))
        .header("cookie", &value)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(r#"data-testid="signed-in-as">ada<"#)
    );

    // Wrong password: back to the form, no session.
    let wrong = console.login("wrong", None).await;
    assert_eq!(wrong.headers()["location"], "/login?error=invalid&next=%2Ftokens");
    assert!(set_cookie(&wrong).is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cookie_is_secure_behind_https() {
    let console =
        Console::start(|config| config.settings.public_url = Some("https://gpuplane.example".into())).await;
    let response = console
        .http
        .post(console.url("/login"))
        .header("origin", "https://gpuplane.example")
        .form(&[("username", "ada"), ("password", "correct horse")])
        .send()
        .await
        .unwrap();
    assert!(set_cookie(&response).unwrap().contains("Secure"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sign_in_rotates_the_session_id_and_sign_out_ends_it_on_the_server() {
    let console = Console::start(|_| {}).await;
    let first = console.signed_in().await;
    let again = console.login("correct horse", Some(&first)).await;
    let second = cookie_value(&set_cookie(&again).unwrap());
    assert_ne!(first, second, "a new id at sign-in (no fixation)");
    assert!(!console.works(&first).await, "the old id is gone");
    assert!(console.works(&second).await);

    let out = console
        .http
        .post(console.url("/logout"))
        .header("origin", &console.server.url)
        .header("cookie", &second)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(
        !console.works(&second).await,
        "replaying the cookie after sign-out fails"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_end_after_the_absolute_lifetime_and_when_the_user_is_disabled() {
    let console = Console::start(|config| config.session_max = Duration::from_millis(800)).await;
    let cookie = console.signed_in().await;
    assert!(console.works(&cookie).await);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!console.works(&cookie).await, "older than session_max");

    let cookie = console.signed_in().await;
    gpuplane_server::admin::disable_user(console.db(), "ada")
        .await
        .unwrap();
    assert!(!console.works(&cookie).await, "disabled: at once");
    let refused = console.login("correct horse", None).await;
    assert_eq!(
        refused.headers()["location"],
        "/login?error=invalid&next=%2Ftokens"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sessions_end() {
    let console = Console::start(|config| config.session_idle = Duration::from_secs(1)).await;
    let cookie = console.signed_in().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!console.works(&cookie).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn cross_origin_posts_are_refused() {
    let console = Console::start(|_| {}).await;
    let cookie = console.signed_in().await;
    for (path, origin) in [
        ("/logout", Some("http://evil.example")),
        ("/logout", None),
        ("/console/fn/current_user", Some("http://evil.example")),
        ("/login", Some("http://evil.example")),
    ] {
        let mut request = console
            .http
            .post(console.url(path))
            .header("cookie", &cookie)
            .body("");
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path} from {origin:?}");
    }
    assert!(console.works(&cookie).await, "the refused sign-out did nothing");
    // The same server function from the console's own origin works.
    let ok = console
        .http
        .post(console.url("/console/fn/current_user"))
        .header("origin", &console.server.url)
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert!(ok.text().await.unwrap().contains("ada"));
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_sign_ins_are_rate_limited_per_account() {
    let console = Console::start(|_| {}).await;
    for _ in 0..5 {
        let response = console.login("guess", None).await;
        assert!(
            response.headers()["location"]
                .to_str()
                .unwrap()
                .contains("error=invalid")
        );
    }
    let locked = console.login("correct horse", None).await;
    assert!(
        locked.headers()["location"]
            .to_str()
            .unwrap()
            .contains("error=locked"),
        "even the right password waits"
    );
    assert!(set_cookie(&locked).is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_database_holds_no_session_id_in_clear() {
    let console = Console::start(|_| {}).await;
    let id = console
        .signed_in()
        .await
        .trim_start_matches("gpuplane_session=")
        .to_string();
    let stored: i64 = sql!(console.db(), |pool| {
        sqlx::query_scalar("SELECT count(*) FROM tower_sessions")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(stored, 1, "the session is stored");
    let dir = console.0.stop().await;
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            bytes.extend(std::fs::read(path).unwrap());
        }
    }
    assert!(
        !bytes.windows(id.len()).any(|w| w == id.as_bytes()),
        "the session id is not in the database files"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_reads_the_api_but_never_writes_through_it() {
    let console = Console::start(|_| {}).await;
    let cookie = console.signed_in().await;
    let get = |path: &str| {
        console
            .http
            .get(console.url(path))
            .header("cookie", &cookie)
            .send()
    };
    let whoami = get("/api/v1/auth/whoami").await.unwrap();
    assert_eq!(whoami.status(), StatusCode::OK);
    let body: serde_json::Value = whoami.json().await.unwrap();
    assert_eq!(body["scope"], "read");
    assert_eq!(get("/api/v1/jobs").await.unwrap().status(), StatusCode::OK);
    // Writes need a token, even from the console's own origin.
    let post = console
        .http
        .post(console.url("/api/v1/jobs"))
        .header("cookie", &cookie)
        .header("origin", &console.server.url)
        .json(&serde_json::json!({"name": "x", "command": ["true"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
    // Without the cookie, nothing.
    let anonymous = console
        .http
        .get(console.url("/api/v1/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_read_the_api_through_one_server_function_and_nothing_else() {
    let console = Console::start(|_| {}).await;
    let cookie = console.signed_in().await;
    let call = |path: &str, cookie: Option<&str>| {
        let mut request = console
            .http
            .post(console.url("/console/fn/api_get"))
            .header("origin", &console.server.url)
            .form(&[("path", path)]);
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send()
    };
    let answer = call("/api/v1/jobs?limit=5", Some(&cookie)).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let body: String = answer.json().await.unwrap();
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(page["items"].is_array(), "{page}");

    // Streams never end: refused however the path is dressed (a fragment
    // is cut off by the URI parser, so it must not hide the route).
    for refused in [
        "/api/v1/events/stream",
        "/login",
        "/api/v1/../tokens",
        "/api/v1/events/stream#",
        "/api/v1/events/stream#x",
        "/api/v1/jobs/job_x/logs/stream#.json",
        "/api/v1/events/stream?x=1#",
        "http://evil.example/api/v1/jobs",
        "//evil.example/api/v1/jobs",
        "/api/v1/events\\stream",
    ] {
        let response = call(refused, Some(&cookie)).await.unwrap();
        assert!(!response.status().is_success(), "{refused}");
        assert!(
            response.text().await.unwrap().contains("does not read"),
            "{refused}"
        );
    }
    let missing = call("/api/v1/jobs/job_nope", Some(&cookie)).await.unwrap();
    assert!(missing.text().await.unwrap().contains("job_nope"));
    let bad = call("/api/v1/jobs?status=SLEEPING", Some(&cookie)).await.unwrap();
    assert!(bad.text().await.unwrap().contains("status: "));
    let anonymous = call("/api/v1/jobs", None).await.unwrap();
    assert!(anonymous.text().await.unwrap().contains("not signed in"));

    // The batched read is bounded: at most 64 paths per call.
    let many = |count: usize| {
        // Server functions take a form, with lists as `paths[0]`, `paths[1]`, …
        let form: Vec<(String, String)> = (0..count)
            .map(|i| (format!("paths[{i}]"), "/api/v1/nodes".to_string()))
            .collect();
        console
            .http
            .post(console.url("/console/fn/api_get_many"))
            .header("origin", &console.server.url)
            .header("cookie", &cookie)
            .form(&form)
            .send()
    };
    let fine = many(64).await.unwrap();
    assert_eq!(fine.status(), StatusCode::OK);
    let too_many = many(65).await.unwrap();
    assert!(!too_many.status().is_success());
    assert!(too_many.text().await.unwrap().contains("at most 64 paths"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_changes_things_through_the_api_with_its_users_rights() {
    let console = Console::start(|_| {}).await;
    let cookie = console.signed_in().await;
    let send = |method: &str, path: &str, body: &str, cookie: Option<&str>, origin: bool| {
        let mut request = console.http.post(console.url("/console/fn/api_send")).form(&[
            ("method", method),
            ("path", path),
            ("body", body),
        ]);
        if origin {
            request = request.header("origin", &console.server.url);
        }
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send()
    };
    // ada (an editor of `default`) submits and cancels a job.
    let submitted = send(
        "POST",
        "/api/v1/jobs",
        r#"{"name": "from-console", "command": ["sleep", "60"]}"#,
        Some(&cookie),
        true,
    )
    .await
    .unwrap();
    assert_eq!(submitted.status(), StatusCode::OK);
    let body: String = submitted.json().await.unwrap();
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    let job_id = job["id"].as_str().unwrap();
    assert_eq!(job["submitted_by"], "ada");
    let cancel = format!("/api/v1/jobs/{job_id}/cancel");
    // The API's own checks and messages: a cancel needs its confirmation.
    let unconfirmed = send("POST", &cancel, "{}", Some(&cookie), true).await.unwrap();
    assert_eq!(unconfirmed.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        unconfirmed
            .text()
            .await
            .unwrap()
            .contains("confirm: must be true")
    );
    let cancelled = send("POST", &cancel, r#"{"confirm": true}"#, Some(&cookie), true)
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
    // Admin routes stay admin routes.
    let refused = send(
        "PUT",
        "/api/v1/maintenance",
        r#"{"message": "mine"}"#,
        Some(&cookie),
        true,
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(refused.text().await.unwrap().contains("for server admins"));

    // Nothing outside the API, no reads, no other origin, no session: nothing.
    for (method, path, expected) in [
        ("GET", "/api/v1/jobs", "does not send GET"),
        ("POST", "/login", "does not send to"),
        ("POST", "/api/v1/../tokens", "does not send to"),
        ("POST", "http://evil.example/api/v1/jobs", "does not send to"),
    ] {
        let response = send(method, path, "{}", Some(&cookie), true).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{method} {path}");
        assert!(
            response.text().await.unwrap().contains(expected),
            "{method} {path}"
        );
    }
    let cross_site = send("POST", &cancel, r#"{"confirm": true}"#, Some(&cookie), false)
        .await
        .unwrap();
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    let anonymous = send("POST", &cancel, r#"{"confirm": true}"#, None, true)
        .await
        .unwrap();
    assert!(anonymous.text().await.unwrap().contains("not signed in"));

    // The audit log names ada, the console and her address.
    let entries =
        gpuplane_server::audit::list(console.db(), &gpuplane_server::audit::Filter::default(), 10, None)
            .await
            .unwrap();
    let cancel_entry = entries.items.iter().find(|e| e.target == job_id).unwrap();
    assert_eq!(
        (
            cancel_entry.actor.as_str(),
            cancel_entry.action.as_str(),
            cancel_entry.token.as_deref(),
            cancel_entry.address.as_deref()
        ),
        ("ada", "job.cancel", Some("console"), Some("127.0.0.1"))
    );
    assert_eq!(entries.items.len(), 1, "refused changes leave nothing");
}
