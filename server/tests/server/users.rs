//! Users and agent tokens through the API: only server admins manage them,
//! a disabled user is refused at once, nobody locks themselves out, and
//! every change is in the audit log.

use gpuplane_api::Page;
use gpuplane_api::audit::AuditEntry;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn admins_create_promote_disable_and_enable_users() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let bob = user_token(&db, "bob", Scope::Write, false).await;

    // Others are refused before anything is read or changed.
    for (method, path, body) in [
        ("GET", "/users", None),
        (
            "POST",
            "/users",
            Some(json!({"name": "eve", "password": "long enough"})),
        ),
        ("PATCH", "/users/root", Some(json!({"admin": false}))),
    ] {
        let (status, body) = f.call(method, path, &bob, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
    }

    let (status, carol) = f
        .call(
            "POST",
            "/users",
            &root,
            Some(json!({"name": "carol", "password": "correct horse"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{carol}");
    assert_eq!(
        (
            &carol["name"],
            &carol["is_admin"],
            &carol["local"],
            &carol["disabled_at"]
        ),
        (&json!("carol"), &json!(false), &json!(true), &Value::Null)
    );
    // Bad input names its field; a taken name is a conflict.
    let (status, body) = f
        .call(
            "POST",
            "/users",
            &root,
            Some(json!({"name": "dave", "password": "short"})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("password"))
    );
    let (status, body) = f
        .call(
            "POST",
            "/users",
            &root,
            Some(json!({"name": "no spaces", "password": "correct horse"})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("name"))
    );
    let (status, _) = f
        .call(
            "POST",
            "/users",
            &root,
            Some(json!({"name": "carol", "password": "correct horse"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = f
        .call("PATCH", "/users/nobody", &root, Some(json!({"admin": true})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Promoted, bob may list users; disabled, his token stops at once; enabled, it works again.
    let (status, body) = f
        .call("PATCH", "/users/bob", &root, Some(json!({"admin": true})))
        .await;
    assert_eq!(
        (status, &body["is_admin"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let (status, list) = f.get("/users", &bob).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bob", "carol", "root"]);
    let (status, body) = f
        .call("PATCH", "/users/bob", &root, Some(json!({"disabled": true})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["disabled_at"].is_string(), "{body}");
    let (status, _) = f.get("/auth/whoami", &bob).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = f
        .call("PATCH", "/users/bob", &root, Some(json!({"disabled": false})))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = f.get("/auth/whoami", &bob).await;
    assert_eq!(status, StatusCode::OK);

    // Nobody locks themselves out.
    for change in [json!({"admin": false}), json!({"disabled": true})] {
        let (status, body) = f.call("PATCH", "/users/root", &root, Some(change.clone())).await;
        assert_eq!(status, StatusCode::CONFLICT, "{change}: {body}");
    }
    let (status, _) = f.get("/auth/whoami", &root).await;
    assert_eq!(status, StatusCode::OK);

    assert_eq!(
        audit_lines(&f, &root, "user.").await,
        [
            "root user.create carol",
            "root user.admin bob admin",
            "root user.disable bob",
            "root user.enable bob",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn admins_create_and_revoke_agent_tokens() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let bob = user_token(&db, "bob", Scope::Write, false).await;
    let (status, _) = f.call("POST", "/agent-tokens", &bob, Some(json!({}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f.get("/agent-tokens", &bob).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let (status, created) = f
        .call(
            "POST",
            "/agent-tokens",
            &root,
            Some(json!({"name": "rack 1", "node": "gpu-1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["secret"].as_str().unwrap().to_string();
    let token_id = created["token"]["id"].as_str().unwrap().to_string();
    assert_eq!(created["token"]["node"], "gpu-1");
    // The secret works for its node, and only as an agent.
    let hello = |name: &str| json!({"name": name, "hostname": name, "gpus": [], "agent_version": "test", "runners": ["process"]});
    let (status, body) = f
        .call("POST", "/agent/hello", &secret, Some(hello("gpu-1")))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = f
        .call("POST", "/agent/hello", &secret, Some(hello("gpu-2")))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f.get("/jobs", &secret).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = f
        .call("POST", "/agent-tokens", &root, Some(json!({"node": "bad/name"})))
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("node"))
    );

    let (_, list) = f.get("/agent-tokens", &root).await;
    assert_eq!(list["items"][0]["id"], token_id.as_str(), "{list}");
    assert!(list["items"][0]["last_used_at"].is_string(), "{list}");
    let (status, revoked) = f
        .call("POST", &format!("/agent-tokens/{token_id}/revoke"), &root, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (status, _) = f
        .call("POST", "/agent/hello", &secret, Some(hello("gpu-1")))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = f.call("POST", "/agent-tokens/tok_nope/revoke", &root, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A user's token is not an agent token, and is not revoked here.
    let (_, whoami) = f.get("/auth/whoami", &bob).await;
    let bobs = whoami["token_id"].as_str().unwrap().to_string();
    let (status, _) = f
        .call("POST", &format!("/agent-tokens/{bobs}/revoke"), &root, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    assert_eq!(
        audit_lines(&f, &root, "agent_token.").await,
        [
            format!("root agent_token.create {token_id} rack 1, for node gpu-1"),
            format!("root agent_token.revoke {token_id}"),
        ]
    );
}

/// The audit log's entries whose action starts with `prefix`, oldest first.
async fn audit_lines(f: &TestServer, admin: &str, prefix: &str) -> Vec<String> {
    let (_, body) = f.get("/audit?limit=100", admin).await;
    let log: Page<AuditEntry> = serde_json::from_value(body).unwrap();
    log.items
        .iter()
        .rev()
        .filter(|e| e.action.as_str().starts_with(prefix))
        .map(|e| {
            format!("{} {} {} {}", e.actor, e.action, e.target, e.detail)
                .trim_end()
                .to_string()
        })
        .collect()
}
