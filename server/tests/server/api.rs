//! The real server over HTTP with a real SQLite file: health, whoami, every
//! bearer error, scopes on every documented route, error bodies, token hashing.

use expect_test::expect;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, agent_token, start_server, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The API as an HTTP client sees it: full paths (the route walk reads them
/// from the OpenAPI document), any token or none, any body.
struct Fixture {
    server: TestServer,
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture {
            server: TestServer::start().await,
        }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    async fn get(&self, path: &str, token: Option<&str>) -> (StatusCode, Option<String>, Value) {
        let mut request = self.server.http.get(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        split(request.send().await.unwrap()).await
    }

    async fn post(&self, path: &str, token: &str, content_type: &str, body: &str) -> (StatusCode, Value) {
        let response = self
            .server
            .http
            .post(self.url(path))
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let (status, _, body) = split(response).await;
        (status, body)
    }
}

/// Status, `WWW-Authenticate`, and the JSON body (or `null`).
async fn split(response: reqwest::Response) -> (StatusCode, Option<String>, Value) {
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    (
        status,
        challenge,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn health_answers_without_a_token() {
    let f = Fixture::new().await;
    let (status, _, body) = f.get("/api/v1/health", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["version"], gpuplane_api::VERSION);
}

#[tokio::test(flavor = "multi_thread")]
async fn ready_answers_503_once_the_database_is_gone() {
    let f = Fixture::new().await;
    let (status, _, body) = f.get("/api/v1/ready", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ready");

    // The pool closed: every query fails, as with a database that went away.
    f.server.db().close().await;
    let (status, _, body) = f.get("/api/v1/ready", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "unavailable");
    // Anonymous callers learn that much, not the driver's error text.
    assert_eq!(body["error"]["message"], "the database is not reachable");
    let (status, _, _) = f.get("/api/v1/health", None).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test(flavor = "multi_thread")]
async fn whoami_names_the_user_and_scope() {
    let f = Fixture::new().await;
    let token = user_token(f.server.db(), "alice", Scope::Write, true).await;
    let (status, _, body) = f.get("/api/v1/auth/whoami", Some(&token)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["user"], "alice");
    assert_eq!(body["is_admin"], true);
    assert_eq!(body["scope"], "write");
    assert_eq!(body["expires_at"], Value::Null);
    assert!(body["token_id"].as_str().unwrap().starts_with("tok_"));
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_errors_follow_rfc_6750() {
    let f = Fixture::new().await;
    let db = f.server.db();
    let token = user_token(db, "bob", Scope::Read, false).await;

    // No token: 401 with a bare challenge.
    let (status, challenge, body) = f.get("/api/v1/auth/whoami", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(challenge.as_deref(), Some("Bearer realm=\"gpuplane\""));
    assert_eq!(body["error"]["code"], "unauthorized");

    // A token of another scheme counts as none.
    let response = f
        .server
        .http
        .get(f.url("/api/v1/auth/whoami"))
        .header("authorization", format!("Basic {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // Unknown, expired, revoked, and disabled-user tokens: 401 invalid_token.
    let expect_invalid = |(status, challenge, body): (StatusCode, Option<String>, Value), why: &str| {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}");
        assert!(challenge.unwrap().contains("error=\"invalid_token\""), "{why}");
        assert_eq!(body["error"]["code"], "invalid_token", "{why}");
        assert_eq!(body["error"]["message"], why);
    };
    expect_invalid(
        f.get("/api/v1/auth/whoami", Some("gpp_nonsense")).await,
        "the token is not known",
    );

    let hash = gpuplane_server::identity::credentials::hash_token(&token);
    sql!(db, |pool| {
        sqlx::query("UPDATE api_tokens SET expires_at = 1 WHERE token_hash = $1")
            .bind(&hash)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    expect_invalid(
        f.get("/api/v1/auth/whoami", Some(&token)).await,
        "the token has expired",
    );

    sql!(db, |pool| {
        sqlx::query("UPDATE api_tokens SET expires_at = NULL, revoked_at = 1 WHERE token_hash = $1")
            .bind(&hash)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    expect_invalid(
        f.get("/api/v1/auth/whoami", Some(&token)).await,
        "the token was revoked",
    );

    let other = user_token(db, "carol", Scope::Read, false).await;
    assert_eq!(f.get("/api/v1/auth/whoami", Some(&other)).await.0, StatusCode::OK);
    sql!(db, |pool| {
        sqlx::query("UPDATE users SET disabled_at = 1 WHERE name = 'carol'")
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    expect_invalid(
        f.get("/api/v1/auth/whoami", Some(&other)).await,
        "the token's user is disabled",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_token_is_refused_on_an_agent_route_with_403() {
    let f = Fixture::new().await;
    let token = user_token(f.server.db(), "dave", Scope::Write, false).await;
    let response = f
        .server
        .http
        .post(f.url("/api/v1/agent/poll"))
        .bearer_auth(&token)
        .json(&json!({"node_id": "node_x", "gpus": [], "running": []}))
        .send()
        .await
        .unwrap();
    let (status, challenge, body) = split(response).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        challenge.as_deref(),
        Some("Bearer realm=\"gpuplane\", error=\"insufficient_scope\", scope=\"agent\"")
    );
    assert_eq!(body["error"]["code"], "insufficient_scope");
}

/// Walks the OpenAPI document: every route it lists exists, and every secured
/// route refuses a missing token (401) and a token without its scope (403).
#[tokio::test(flavor = "multi_thread")]
async fn every_documented_route_exists_and_enforces_its_scope() {
    let f = Fixture::new().await;
    let db = f.server.db();
    let read = user_token(db, "reader", Scope::Read, false).await;
    let sdk = user_token(db, "sdk-user", Scope::Sdk, false).await;
    let agent = agent_token(db).await;
    // A server admin's scrape token: it must open no route but whoami.
    let metrics = user_token(db, "scraper", Scope::Metrics, true).await;
    let (status, _, doc) = f.get("/api/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);

    let mut summary = String::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let scopes: Vec<String> = operation["security"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|requirement| requirement["bearer"].as_array().unwrap())
                .map(|scope| scope.as_str().unwrap().to_string())
                .collect();
            let secured = operation.get("security").is_some();
            summary.push_str(&format!(
                "{method:6} {path}  {}\n",
                if secured {
                    format!("bearer {scopes:?}")
                } else {
                    "public".into()
                }
            ));

            let call = |token: Option<&str>| {
                let mut request = f
                    .server
                    .http
                    .request(method.to_uppercase().parse().unwrap(), f.url(path));
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                request
                    .header("content-type", "application/json")
                    .body("{}")
                    .send()
            };
            let (status, _, body) = split(call(None).await.unwrap()).await;
            assert_ne!(
                body["error"]["message"]
                    .as_str()
                    .map(|m| m.starts_with("no route")),
                Some(true),
                "{method} {path} is documented but not routed"
            );
            if !secured {
                assert_ne!(status, StatusCode::UNAUTHORIZED, "{method} {path} is public");
                continue;
            }
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} without a token"
            );
            // A token whose scope the route does not list must get 403.
            let needed: Vec<Scope> = scopes.iter().map(|s| s.parse().unwrap()).collect();
            let wrong = [(&read, Scope::Read), (&sdk, Scope::Sdk), (&agent, Scope::Agent)]
                .into_iter()
                .find(|(_, held)| !needed.is_empty() && !needed.iter().any(|n| held.grants(*n)));
            if let Some((token, held)) = wrong {
                let (status, _, _) = split(call(Some(token)).await.unwrap()).await;
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} with a {held} token"
                );
            }
            if path != "/api/v1/auth/whoami" {
                let (status, _, _) = split(call(Some(&metrics)).await.unwrap()).await;
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} with a metrics token"
                );
            }
        }
    }
    expect![[r#"
        get    /.well-known/oauth-authorization-server  public
        get    /api/v1/agent-tokens  bearer ["read"]
        post   /api/v1/agent-tokens  bearer ["write"]
        post   /api/v1/agent-tokens/{token_id}/revoke  bearer ["write"]
        post   /api/v1/agent/hello  bearer ["agent"]
        post   /api/v1/agent/log-fetch/{request_id}  bearer ["agent"]
        post   /api/v1/agent/poll  bearer ["agent"]
        post   /api/v1/agent/report  bearer ["agent"]
        post   /api/v1/agent/telemetry  bearer ["agent"]
        get    /api/v1/alerts/channels  bearer ["read"]
        post   /api/v1/alerts/channels  bearer ["write"]
        delete /api/v1/alerts/channels/{name}  bearer ["write"]
        get    /api/v1/alerts/deliveries  bearer ["read"]
        get    /api/v1/alerts/subscriptions  bearer ["read"]
        post   /api/v1/alerts/subscriptions  bearer ["write"]
        delete /api/v1/alerts/subscriptions/{subscription_id}  bearer ["write"]
        get    /api/v1/arrays/{array_id}  bearer ["read"]
        post   /api/v1/arrays/{array_id}/cancel  bearer ["write"]
        get    /api/v1/audit  bearer ["read"]
        get    /api/v1/auth/whoami  bearer []
        get    /api/v1/cluster  bearer ["read"]
        get    /api/v1/evaluations  bearer ["read"]
        post   /api/v1/evaluations  bearer ["write"]
        get    /api/v1/evaluations/{job_id}  bearer ["read"]
        get    /api/v1/events  bearer ["read"]
        get    /api/v1/events/stream  bearer ["read"]
        get    /api/v1/health  public
        get    /api/v1/hf  bearer ["read"]
        delete /api/v1/hf/token  bearer ["write"]
        put    /api/v1/hf/token  bearer ["write"]
        get    /api/v1/jobs  bearer ["read"]
        post   /api/v1/jobs  bearer ["write"]
        post   /api/v1/jobs/validate  bearer ["write"]
        get    /api/v1/jobs/{job_id}  bearer ["read"]
        post   /api/v1/jobs/{job_id}/cancel  bearer ["write"]
        post   /api/v1/jobs/{job_id}/hold  bearer ["write"]
        get    /api/v1/jobs/{job_id}/logs  bearer ["read"]
        get    /api/v1/jobs/{job_id}/logs/full  bearer ["read"]
        get    /api/v1/jobs/{job_id}/logs/stream  bearer ["read"]
        post   /api/v1/jobs/{job_id}/priority  bearer ["write"]
        post   /api/v1/jobs/{job_id}/release  bearer ["write"]
        post   /api/v1/jobs/{job_id}/retry  bearer ["write"]
        delete /api/v1/maintenance  bearer ["write"]
        get    /api/v1/maintenance  bearer ["read"]
        put    /api/v1/maintenance  bearer ["write"]
        get    /api/v1/node-policies  bearer ["read"]
        get    /api/v1/nodes  bearer ["read"]
        post   /api/v1/nodes/{name}/drain  bearer ["write"]
        post   /api/v1/nodes/{name}/labels  bearer ["write"]
        post   /api/v1/nodes/{name}/undrain  bearer ["write"]
        get    /api/v1/openapi.json  public
        get    /api/v1/projects  bearer ["read"]
        post   /api/v1/projects  bearer ["write"]
        get    /api/v1/projects/usage  bearer ["read"]
        patch  /api/v1/projects/{name}  bearer ["write"]
        get    /api/v1/projects/{name}/members  bearer ["read"]
        post   /api/v1/projects/{name}/members  bearer ["write"]
        delete /api/v1/projects/{name}/members/{user}  bearer ["write"]
        delete /api/v1/projects/{name}/node-policy  bearer ["write"]
        put    /api/v1/projects/{name}/node-policy  bearer ["write"]
        post   /api/v1/projects/{name}/primary-metric  bearer ["write"]
        get    /api/v1/quotas  bearer ["read"]
        delete /api/v1/quotas/{kind}/{name}  bearer ["write"]
        put    /api/v1/quotas/{kind}/{name}  bearer ["write"]
        get    /api/v1/ready  public
        get    /api/v1/recipes  bearer ["read"]
        post   /api/v1/recipes  bearer ["write"]
        get    /api/v1/recipes/{name}  bearer ["read"]
        get    /api/v1/recipes/{name}/{version}  bearer ["read"]
        post   /api/v1/recipes/{name}/{version}/check  bearer ["write"]
        post   /api/v1/recipes/{name}/{version}/deprecate  bearer ["write"]
        post   /api/v1/recipes/{name}/{version}/jobs  bearer ["write"]
        get    /api/v1/runs  bearer ["read"]
        post   /api/v1/runs  bearer ["sdk", "write"]
        get    /api/v1/runs/scatter.svg  bearer ["read"]
        delete /api/v1/runs/{run_id}  bearer ["write"]
        get    /api/v1/runs/{run_id}  bearer ["read"]
        patch  /api/v1/runs/{run_id}  bearer ["sdk", "write"]
        post   /api/v1/runs/{run_id}/alerts  bearer ["sdk", "write"]
        post   /api/v1/runs/{run_id}/archive  bearer ["write"]
        get    /api/v1/runs/{run_id}/chart.png  bearer ["read"]
        get    /api/v1/runs/{run_id}/chart.svg  bearer ["read"]
        get    /api/v1/runs/{run_id}/checkpoints  bearer ["read"]
        post   /api/v1/runs/{run_id}/config  bearer ["sdk", "write"]
        get    /api/v1/runs/{run_id}/diagnosis  bearer ["read"]
        get    /api/v1/runs/{run_id}/failure  bearer ["read"]
        post   /api/v1/runs/{run_id}/finish  bearer ["sdk", "write"]
        get    /api/v1/runs/{run_id}/metrics  bearer ["read"]
        post   /api/v1/runs/{run_id}/metrics  bearer ["sdk", "write"]
        post   /api/v1/runs/{run_id}/primary-metric  bearer ["write"]
        get    /api/v1/runs/{run_id}/shares  bearer ["read"]
        post   /api/v1/runs/{run_id}/shares  bearer ["write"]
        delete /api/v1/runs/{run_id}/shares/{share_id}  bearer ["write"]
        get    /api/v1/runs/{run_id}/shares/{share_id}/views  bearer ["read"]
        get    /api/v1/runs/{run_id}/stream  bearer ["read"]
        get    /api/v1/runs/{run_id}/system  bearer ["read"]
        get    /api/v1/runs/{run_id}/system.svg  bearer ["read"]
        get    /api/v1/runs/{run_id}/texts  bearer ["read"]
        post   /api/v1/runs/{run_id}/unarchive  bearer ["write"]
        get    /api/v1/sweeps  bearer ["read"]
        post   /api/v1/sweeps  bearer ["write"]
        get    /api/v1/sweeps/{sweep_id}  bearer ["read"]
        post   /api/v1/sweeps/{sweep_id}/{action}  bearer ["write"]
        get    /api/v1/tokens  bearer ["read"]
        post   /api/v1/tokens  bearer ["write"]
        delete /api/v1/tokens/{token_id}  bearer ["write"]
        get    /api/v1/usage  bearer ["read"]
        get    /api/v1/users  bearer ["read"]
        post   /api/v1/users  bearer ["write"]
        patch  /api/v1/users/{name}  bearer ["write"]
        post   /oauth/device_authorization  public
        post   /oauth/token  public
    "#]]
    .assert_eq(&summary);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_bodies_get_the_standard_error_shape() {
    let f = Fixture::new().await;
    let agent = agent_token(f.server.db()).await;
    let hello = "/api/v1/agent/hello";

    let (status, body) = f.post(hello, &agent, "application/json", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "bad_request");

    let (status, body) = f.post(hello, &agent, "text/plain", "{}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("application/json")
    );

    let valid = json!({"name": "n1", "hostname": "h", "gpus": [], "agent_version": "1"});
    let mut unknown = valid.clone();
    unknown["colour"] = json!("blue");
    let (status, body) = f
        .post(hello, &agent, "application/json", &unknown.to_string())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["code"], "validation_error");
    assert_eq!(body["error"]["details"][0]["field"], "colour");

    let mut wrong_type = valid.clone();
    wrong_type["gpus"] = json!([{"index": -1}]);
    let (status, body) = f
        .post(hello, &agent, "application/json", &wrong_type.to_string())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["details"][0]["field"], "gpus[0].index");

    let mut bad_name = valid.clone();
    bad_name["name"] = json!("");
    let (status, body) = f
        .post(hello, &agent, "application/json", &bad_name.to_string())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["details"][0]["field"], "name");
    let (_, _, nodes) = f
        .get(
            "/api/v1/nodes",
            Some(&user_token(f.server.db(), "r", Scope::Read, false).await),
        )
        .await;
    assert_eq!(nodes["items"], json!([]), "a refused hello writes no node");

    let (status, body) = f
        .post(hello, &agent, "application/json", &valid.to_string())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["node_id"].as_str().unwrap().starts_with("node_"));
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_api_routes_answer_json_404() {
    let f = Fixture::new().await;
    let (status, _, body) = f.get("/api/v1/no/such/route", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_renders_without_a_wasm_bundle_and_pages_need_a_session() {
    let f = Fixture::new().await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = no_redirects.get(f.url("/tokens")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(response.headers()["location"], "/login?next=/tokens");
    let response = f.server.http.get(f.url("/login")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let html = response.text().await.unwrap();
    assert!(html.contains("<h1>Sign in</h1>"), "{html}");
    assert!(
        html.contains(r#"action="/login""#),
        "a plain form: works without JavaScript"
    );
    assert!(
        html.contains("/pkg/gpuplane.js"),
        "the page asks for the hydrate bundle"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_stored_only_as_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let token = user_token(&server.state.db, "erin", Scope::Write, false).await;
    let agent = agent_token(&server.state.db).await;
    // Use the tokens so every code path that touches them has run.
    let http = reqwest::Client::new();
    for t in [&token, &agent] {
        http.get(format!("{}/api/v1/auth/whoami", server.url))
            .bearer_auth(t)
            .send()
            .await
            .unwrap();
    }
    let db = server.state.db.clone();
    server.stop().await.unwrap();
    db.close().await;

    // The hash check at the end proves these bytes hold the tokens' rows.
    let bytes = gpuplane_testkit::postgres::stored_bytes(dir.path()).await;
    for secret in [&token, &agent] {
        let body = secret.trim_start_matches("gpp_");
        assert!(
            !contains(&bytes, body.as_bytes()),
            "a token appears in the database files"
        );
        assert!(
            !contains(&bytes, &body.as_bytes()[..16]),
            "part of a token appears in the database files"
        );
    }
    let hash = gpuplane_server::identity::credentials::hash_token(&token);
    assert!(contains(&bytes, hash.as_bytes()), "its hash is what is stored");
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_filter_by_user_and_text() {
    let f = Fixture::new().await;
    let alice = user_token(f.server.db(), "alice", Scope::Write, true).await;
    let bob = user_token(f.server.db(), "bob", Scope::Write, true).await;
    for (token, name) in [
        (&alice, "resnet-sweep-1"),
        (&alice, "bert-base"),
        (&bob, "ResNet-big"),
    ] {
        let body = json!({"name": name, "command": ["true"]}).to_string();
        let (status, job) = f.post("/api/v1/jobs", token, "application/json", &body).await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
    }
    let names = |body: &Value| -> Vec<String> {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| job["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, _, by_text) = f.get("/api/v1/jobs?q=resnet", Some(&alice)).await;
    assert_eq!(names(&by_text), ["ResNet-big", "resnet-sweep-1"]);
    let (_, _, by_user) = f.get("/api/v1/jobs?user=alice", Some(&alice)).await;
    assert_eq!(names(&by_user), ["bert-base", "resnet-sweep-1"]);
    let (_, _, both) = f.get("/api/v1/jobs?user=bob&q=resnet", Some(&alice)).await;
    assert_eq!(names(&both), ["ResNet-big"]);
    let (_, _, none) = f.get("/api/v1/jobs?q=nothing-like-this", Some(&alice)).await;
    assert_eq!(names(&none), Vec::<String>::new());
}

/// Every route that reads a JSON body documents 400, 413 and 422, every
/// route with query parameters 422; a body that is not JSON and an unknown
/// query parameter get a documented answer (what Schemathesis checks).
#[tokio::test(flavor = "multi_thread")]
async fn inputs_that_do_not_fit_get_documented_answers_on_every_route() {
    let f = Fixture::new().await;
    let db = f.server.db();
    let admin = user_token(db, "root", Scope::Write, true).await;
    let agent = agent_token(db).await;
    let (_, _, doc) = f.get("/api/v1/openapi.json", None).await;
    let (mut bodies, mut queries) = (0, 0);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let reads_json = operation["requestBody"]["content"]
                .get("application/json")
                .is_some();
            let reads_query = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|parameter| parameter["in"] == "query");
            let responses = operation["responses"].as_object().unwrap();
            let expected: &[&str] = match (reads_json, reads_query) {
                (true, _) => &["400", "413", "422"],
                (false, true) => &["422"],
                (false, false) => continue,
            };
            for status in expected {
                assert!(
                    responses.contains_key(*status),
                    "{method} {path} documents no {status}"
                );
            }
            let scopes = operation["security"][0]["bearer"].to_string();
            let token = if scopes.contains("agent") { &agent } else { &admin };
            // Path parameters filled with a made-up id.
            let concrete = path
                .split('/')
                .map(|part| if part.starts_with('{') { "made-up" } else { part })
                .collect::<Vec<_>>()
                .join("/");
            let mut request = f
                .server
                .http
                .request(method.to_uppercase().parse().unwrap(), f.url(&concrete))
                .bearer_auth(token);
            if reads_json {
                request = request
                    .header("content-type", "application/json")
                    .body("{not json");
                bodies += 1;
            } else {
                request = request.query(&[("no-such-parameter", "1")]);
                queries += 1;
            }
            let status = request.send().await.unwrap().status().as_u16().to_string();
            assert!(
                responses.contains_key(&status),
                "{method} {path} answered an undocumented {status}"
            );
        }
    }
    assert!(
        bodies >= 20 && queries >= 15,
        "only {bodies} routes read JSON, {queries} a query"
    );
}

/// A creation (`POST` answering 201) links to the operations on what it
/// made, with the new id or name filled in, so Schemathesis' stateful phase
/// and client generators follow real ids.
#[tokio::test(flavor = "multi_thread")]
async fn creations_link_to_the_operations_on_what_they_made() {
    let f = Fixture::new().await;
    let (_, _, doc) = f.get("/api/v1/openapi.json", None).await;
    let links = |path: &str| doc["paths"][path]["post"]["responses"]["201"]["links"].clone();
    let runs = links("/api/v1/runs");
    assert_eq!(runs["get_run"]["parameters"]["run_id"], "$response.body#/id");
    assert_eq!(runs["create_share"]["parameters"]["run_id"], "$response.body#/id");
    let users = links("/api/v1/users");
    assert_eq!(users["change_user"]["parameters"]["name"], "$response.body#/name");
    let evaluations = links("/api/v1/evaluations");
    assert_eq!(
        evaluations["get_evaluation"]["parameters"]["job_id"],
        "$response.body#/job_id"
    );
    let shares = links("/api/v1/runs/{run_id}/shares");
    assert_eq!(
        shares["share_views"]["parameters"],
        json!({"share_id": "$response.body#/link/id", "run_id": "$request.path.run_id"})
    );
    // Every link names an operation that exists.
    let operations: Vec<&Value> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .collect();
    let mut count = 0;
    for operation in &operations {
        for (status, response) in operation["responses"].as_object().unwrap() {
            for (name, link) in response["links"].as_object().into_iter().flatten() {
                assert!(
                    operations.iter().any(|o| o["operationId"] == link["operationId"]),
                    "{status} link {name} names no operation"
                );
                count += 1;
            }
        }
    }
    assert!(count >= 30, "{count} links");
}
