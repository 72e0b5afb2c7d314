//! Projects: members see their projects' jobs, logs and events; everyone
//! else gets 404 on every route family, exactly as for ids that do not exist.

use gpuplane_api::auth::Scope;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_server::events::{self, Links};
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn other_projects_are_invisible_and_roles_are_enforced() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let bob = user_token(&db, "bob", Scope::Write, false).await;
    let alice = user_token(&db, "alice", Scope::Write, false).await;
    let carol = user_token(&db, "carol", Scope::Write, false).await;

    let (status, _) = f
        .call("POST", "/projects", &bob, Some(json!({"name": "secret"})))
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "only server admins create projects"
    );
    let (status, body) = f
        .call("POST", "/projects", &root, Some(json!({"name": "secret"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for (user, role) in [("bob", "editor"), ("carol", "viewer")] {
        let (status, body) = f
            .call(
                "POST",
                "/projects/secret/members",
                &root,
                Some(json!({"user": user, "role": role})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    let (status, job) = f
        .call(
            "POST",
            "/jobs",
            &bob,
            Some(json!({"name": "hidden", "project": "secret", "command": ["true"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();
    let mut conn = gpuplane_server::store::write(&db).await.unwrap();
    let links = Links {
        job_id: Some(&job_id),
        ..Links::default()
    };
    events::record(
        &mut conn,
        1,
        Severity::Critical,
        EventKind::Oom,
        links,
        "secret event",
    )
    .await
    .unwrap();
    conn.commit().await.unwrap();

    // Alice is not a member: every route family answers as if the job did not exist.
    let routes = [
        ("GET", format!("/jobs/{job_id}"), None),
        (
            "POST",
            format!("/jobs/{job_id}/cancel"),
            Some(json!({"confirm": true})),
        ),
        ("POST", format!("/jobs/{job_id}/retry"), Some(json!({}))),
        (
            "POST",
            format!("/jobs/{job_id}/priority"),
            Some(json!({"priority": 99})),
        ),
        ("POST", format!("/jobs/{job_id}/hold"), None),
        ("POST", format!("/jobs/{job_id}/release"), None),
        ("GET", format!("/jobs/{job_id}/logs"), None),
        ("GET", format!("/jobs/{job_id}/logs/stream"), None),
        ("GET", format!("/jobs/{job_id}/logs/full"), None),
    ];
    for (method, path, body) in &routes {
        let (status, hidden) = f.call(method, path, &alice, body.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {hidden}");
        let missing_path = path.replace(&job_id, "job_01ZZZZZZZZZZZZZZZZZZZZZZZZ");
        let (_, missing) = f.call(method, &missing_path, &alice, body.clone()).await;
        assert_eq!(
            hidden["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&job_id, "ID"),
            missing["error"]["message"]
                .as_str()
                .unwrap()
                .replace("job_01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID"),
            "{method} {path}: a hidden job reads exactly like a missing one"
        );
    }
    let (_, listed) = f.call("GET", "/jobs", &alice, None).await;
    assert_eq!(listed["items"], json!([]));
    let (_, listed) = f.call("GET", "/events", &alice, None).await;
    assert_eq!(listed["items"], json!([]));
    let (status, body) = f
        .call(
            "POST",
            "/jobs",
            &alice,
            Some(json!({"name": "x", "project": "secret", "command": ["true"]})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["details"][0]["field"], "project");
    // Waiting for the hidden job (`after`) neither works nor tells it exists:
    // at submit and at /jobs/validate, the same words as for a missing job.
    for path in ["/jobs", "/jobs/validate"] {
        let mut messages = Vec::new();
        for after in [job_id.as_str(), "job_01ZZZZZZZZZZZZZZZZZZZZZZZZ"] {
            let (status, body) = f
                .call(
                    "POST",
                    path,
                    &alice,
                    Some(json!({"name": "x", "command": ["true"], "after": [after]})),
                )
                .await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
            assert_eq!(body["error"]["details"][0]["field"], "after[0]");
            messages.push(
                body["error"]["details"][0]["message"]
                    .as_str()
                    .unwrap()
                    .replace(after, "ID"),
            );
        }
        assert_eq!(
            messages[0], messages[1],
            "{path}: a hidden job reads like a missing one"
        );
    }
    let (status, _) = f
        .call(
            "POST",
            "/jobs/validate",
            &alice,
            Some(json!({"name": "x", "project": "secret", "command": ["true"]})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validate checks the project like submit"
    );
    let (_, projects) = f.call("GET", "/projects", &alice, None).await;
    assert_eq!(
        projects["items"],
        json!([{"name": "default", "role": "editor", "share_links": true, "idle_action": "warn"}])
    );

    // Carol may look but not touch.
    let (status, _) = f.call("GET", &format!("/jobs/{job_id}"), &carol, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = f
        .call(
            "POST",
            &format!("/jobs/{job_id}/cancel"),
            &carol,
            Some(json!({"confirm": true})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    for (path, body) in [
        ("priority", Some(json!({"priority": 99}))),
        ("hold", None),
        ("release", None),
    ] {
        let (status, answer) = f
            .call("POST", &format!("/jobs/{job_id}/{path}"), &carol, body)
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
    }
    // Neither the outsider nor the viewer changed anything.
    let (_, unchanged) = f.call("GET", &format!("/jobs/{job_id}"), &bob, None).await;
    assert_eq!(unchanged["priority"], 0);
    assert_eq!(unchanged["status"], "QUEUED");
    assert!(
        !unchanged["queued_reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("held")
    );
    let (_, events) = f.call("GET", "/events", &carol, None).await;
    assert_eq!(events["items"][0]["message"], "secret event");

    // Bob sees it in his list; admins see everything.
    let (_, listed) = f.call("GET", "/jobs", &bob, None).await;
    assert_eq!(listed["items"][0]["id"], job_id.as_str());
    let (_, listed) = f.call("GET", "/jobs", &root, None).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);

    // A token limited to `default` cannot reach Bob's secret job.
    sql!(&db, |pool| {
        sqlx::query("UPDATE api_tokens SET project = 'default' WHERE token_hash = $1")
            .bind(gpuplane_server::identity::credentials::hash_token(&bob))
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let (status, _) = f.call("GET", &format!("/jobs/{job_id}"), &bob, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A new user is no longer an editor of `default` by default: the setting
/// `default_project_role` (viewer unless set) gives their role there, for
/// accounts an admin makes through the API (the host's `admin create-user`
/// reads the same setting: `binary.rs`).
#[tokio::test(flavor = "multi_thread")]
async fn a_new_user_gets_the_default_project_role_viewer_unless_set() {
    use gpuplane_api::project::Role;
    use gpuplane_server::identity::credentials::{NewToken, create_token};
    for (setting, role) in [
        (None, Some("viewer")),
        (Some(Some(Role::Editor)), Some("editor")),
        (Some(None), None),
    ] {
        let f = TestServer::start_with(|config| {
            if let Some(setting) = setting {
                config.default_project_role = setting;
            }
        })
        .await;
        let root = user_token(f.db(), "root", Scope::Write, true).await;
        let (status, user) = f
            .call(
                "POST",
                "/users",
                &root,
                Some(json!({"name": "newbie", "password": "newbie-password-1"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{user}");
        let new = NewToken {
            user_id: user["id"].as_str(),
            name: "test",
            scope: Scope::Write,
            expires_at: None,
            project: None,
            node: None,
        };
        let token = create_token(f.db(), new).await.unwrap().1;
        let (_, projects) = f.get("/projects", &token).await;
        let roles: Vec<&str> = projects["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, role.into_iter().collect::<Vec<_>>(), "{setting:?}");
        let (status, body) = f
            .call(
                "POST",
                "/jobs",
                &token,
                Some(json!({"name": "x", "command": ["true"]})),
            )
            .await;
        let submits = status == StatusCode::CREATED;
        assert_eq!(submits, role == Some("editor"), "{setting:?}: {status} {body}");
    }
}
