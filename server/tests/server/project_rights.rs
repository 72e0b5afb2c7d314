//! Attacks on what a project grants: an admin's project token, the priority
//! cap, a removed member, node policies, the idle-GPU action.

use crate::People;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A token limited to a project has that project's rights only, even an
/// admin's: none of the server admin's powers (users, agent tokens, alert
/// channels, maintenance, the audit log, preempting priorities), while it
/// still does everything inside its project.
#[tokio::test(flavor = "multi_thread")]
async fn an_admins_project_token_has_project_rights_only() {
    let f = TestServer::start_with(|config| config.settings.preempt_priority = Some(100)).await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let (status, body) = f
        .call("POST", "/projects", &root, Some(json!({"name": "vision"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, made) = f
        .call(
            "POST",
            "/tokens",
            &root,
            Some(json!({"name": "vision-only", "scope": "write", "project": "vision"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let limited = made["secret"].as_str().unwrap().to_string();
    let (_, who) = f.get("/auth/whoami", &limited).await;
    assert_eq!(who["is_admin"], json!(false), "{who}");

    let server_wide: [(&str, &str, Option<Value>); 7] = [
        (
            "POST",
            "/users",
            Some(json!({"name": "mallory", "password": "mallory-password"})),
        ),
        ("GET", "/users", None),
        ("POST", "/agent-tokens", Some(json!({"name": "rogue"}))),
        (
            "POST",
            "/alerts/channels",
            Some(json!({"name": "leak", "kind": "webhook", "url": "https://example.com/hook"})),
        ),
        ("PUT", "/maintenance", Some(json!({"message": "mine now"}))),
        ("GET", "/audit", None),
        (
            "POST",
            "/jobs",
            Some(json!({"name": "urgent", "project": "vision", "priority": 100, "command": ["true"]})),
        ),
    ];
    for (method, path, body) in server_wide {
        let (status, answer) = f.call(method, path, &limited, body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        let (status, answer) = f.call(method, path, &root, body).await;
        assert!(
            status.is_success(),
            "the admin's own token may: {method} {path}: {answer}"
        );
    }
    // Inside its project it keeps the project's rights.
    let (status, job) = f
        .call(
            "POST",
            "/jobs",
            &limited,
            Some(json!({"name": "fine", "project": "vision", "priority": 99, "command": ["true"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let (status, _) = f.call("DELETE", "/maintenance", &root, None).await;
    assert!(status.is_success());
}

/// A project's priority ceiling: with preemption off, one team could give
/// every job priority 2^62 and starve the rest. Server admins set
/// `max_priority`; the project's own admins cannot lift it; its members'
/// submits, priority changes and retries above it answer 403.
#[tokio::test(flavor = "multi_thread")]
async fn a_projects_max_priority_caps_its_members_and_only_server_admins_set_it() {
    let f = TestServer::start().await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let lead = user_token(f.db(), "lead", Scope::Write, false).await;
    f.call("POST", "/projects", &root, Some(json!({"name": "vision"})))
        .await;
    let (status, body) = f
        .call(
            "POST",
            "/projects/vision/members",
            &root,
            Some(json!({"user": "lead", "role": "admin"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let set = |token: String, value: Value| {
        let f = &f;
        async move {
            f.call(
                "PATCH",
                "/projects/vision",
                &token,
                Some(json!({"max_priority": value})),
            )
            .await
        }
    };
    let (status, body) = set(lead.clone(), json!(1_000_000)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the project's admin: {body}");
    let (status, body) = set(root.clone(), json!(gpuplane_api::MAX_I64_SAFE + 1)).await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("max_priority")),
        "{body}"
    );
    let (status, body) = set(root.clone(), json!(10)).await;
    assert_eq!(
        (status, &body["max_priority"]),
        (StatusCode::OK, &json!(10)),
        "{body}"
    );

    let submit = |priority: i64, command: &str| {
        json!({"name": "j", "project": "vision", "priority": priority, "command": [command],
               "node_selector": {"pool": "none-yet"}})
    };
    let (status, body) = f.call("POST", "/jobs", &lead, Some(submit(11, "true"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("up to 10"),
        "{body}"
    );
    let (status, body) = f
        .call("POST", "/jobs/validate", &lead, Some(submit(11, "true")))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "validate agrees: {body}");
    let (status, job) = f.call("POST", "/jobs", &lead, Some(submit(10, "true"))).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_str().unwrap();
    let (status, body) = f
        .call(
            "POST",
            &format!("/jobs/{id}/priority"),
            &lead,
            Some(json!({"priority": 50})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Server admins are not capped.
    let (status, body) = f.call("POST", "/jobs", &root, Some(submit(1000, "true"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, projects) = f.get("/projects", &lead).await;
    let vision = projects["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vision")
        .unwrap();
    assert_eq!(vision["max_priority"], json!(10), "{projects}");
    // null lifts it.
    let (status, body) = set(root.clone(), Value::Null).await;
    assert_eq!(
        (status, &body["max_priority"]),
        (StatusCode::OK, &Value::Null),
        "{body}"
    );
    let (status, body) = f.call("POST", "/jobs", &lead, Some(submit(11, "true"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// People leave. A project admin removes a member: their tokens limited to
/// the project stop working (401), their share links of its runs close
/// (404), the alert subscriptions they made for it go, and their own
/// subscription no longer hears of the project; all in one audited step.
/// A disabled user's share links and subscriptions stop likewise. The
/// last admin stays (409); an editor cannot remove anyone (403), an
/// outsider does not see the project (404).
#[tokio::test(flavor = "multi_thread")]
async fn a_removed_member_loses_what_reached_the_project_and_a_disabled_user_too() {
    use gpuplane_server::alerts::subscriptions::{EventFacts, rules};
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let lead = user_token(&db, "lead", Scope::Write, false).await;
    let leaver = user_token(&db, "leaver", Scope::Write, false).await;
    let outsider = user_token(&db, "outsider", Scope::Write, false).await;
    f.call("POST", "/projects", &root, Some(json!({"name": "vision"})))
        .await;
    for (user, role) in [("lead", "admin"), ("leaver", "admin")] {
        let (status, body) = f
            .call(
                "POST",
                "/projects/vision/members",
                &root,
                Some(json!({"user": user, "role": role})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = f
        .call(
            "POST",
            "/alerts/channels",
            &root,
            Some(json!({"name": "ops", "kind": "webhook", "url": "https://hooks.example.com/x", "subscribers": "anyone"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // What the leaver holds in the project.
    let (_, made) = f
        .call(
            "POST",
            "/tokens",
            &leaver,
            Some(json!({"name": "ci", "scope": "write", "project": "vision"})),
        )
        .await;
    let limited = made["secret"].as_str().unwrap().to_string();
    let (_, run) = f
        .call(
            "POST",
            "/runs",
            &leaver,
            Some(json!({"project": "vision", "name": "r"})),
        )
        .await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let (_, shared) = f
        .post(&format!("/runs/{run_id}/shares"), &leaver, json!({}))
        .await;
    let link = shared["url"].as_str().unwrap().to_string();
    for body in [
        json!({"channel": "ops", "project": "vision"}),
        json!({"channel": "ops"}),
    ] {
        let (status, made) = f.call("POST", "/alerts/subscriptions", &leaver, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
    }
    let anonymous = reqwest::Client::new();
    assert_eq!(
        anonymous.get(&link).send().await.unwrap().status(),
        StatusCode::OK
    );
    let (status, _) = f.get("/runs?project=vision", &limited).await;
    assert_eq!(status, StatusCode::OK);

    // Who may remove: the project's admins only.
    let (status, _) = f
        .call("DELETE", "/projects/vision/members/leaver", &outsider, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = f
        .call("DELETE", "/projects/vision/members/ghost", &lead, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no such member");
    let (status, body) = f
        .call("DELETE", "/projects/vision/members/leaver", &lead, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let (status, _) = f.get("/runs?project=vision", &limited).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the project token is revoked");
    assert_eq!(
        anonymous.get(&link).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let (_, runs) = f.get("/runs", &leaver).await;
    assert!(
        !runs.to_string().contains(&run_id),
        "their own token no longer sees it"
    );
    let remaining = rules(&db).await.unwrap();
    assert!(
        remaining.iter().all(|rule| rule.project.is_none()),
        "their project subscription went"
    );
    let (leaver_id,): (String,) = sql!(&db, |pool| {
        sqlx::query_as("SELECT id FROM users WHERE name = 'leaver'")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    let their_job_in_vision = EventFacts {
        kind: gpuplane_api::event::EventKind::Oom,
        severity: gpuplane_api::event::Severity::Critical,
        project: Some("vision"),
        owner: Some(&leaver_id),
    };
    assert!(
        !remaining.iter().any(|rule| rule.receives(&their_job_in_vision)),
        "their own subscription no longer hears of the project"
    );
    let (_, audit) = f.get("/audit?action=project.member", &root).await;
    assert!(
        audit
            .to_string()
            .contains("removed leaver (was admin); revoked 1 token(s)"),
        "{audit}"
    );

    // The last admin stays (root made the project, so it was an admin too);
    // an editor removes nobody.
    let (status, _) = f
        .call("DELETE", "/projects/vision/members/root", &lead, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = f
        .call("DELETE", "/projects/vision/members/lead", &lead, None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    f.call(
        "POST",
        "/projects/vision/members",
        &root,
        Some(json!({"user": "outsider", "role": "editor"})),
    )
    .await;
    let (status, _) = f
        .call("DELETE", "/projects/vision/members/lead", &outsider, None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // A disabled user's share links and subscriptions stop working.
    let (_, shared) = f.post(&format!("/runs/{run_id}/shares"), &lead, json!({})).await;
    let lead_link = shared["url"].as_str().unwrap().to_string();
    let (status, _) = f
        .call(
            "POST",
            "/alerts/subscriptions",
            &lead,
            Some(json!({"channel": "ops", "project": "vision"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        anonymous.get(&lead_link).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert!(
        rules(&db)
            .await
            .unwrap()
            .iter()
            .any(|rule| rule.project.as_deref() == Some("vision"))
    );
    let (status, body) = f
        .call("PATCH", "/users/lead", &root, Some(json!({"disabled": true})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        anonymous.get(&lead_link).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert!(
        rules(&db)
            .await
            .unwrap()
            .iter()
            .all(|rule| rule.project.is_none())
    );
}

/// Node policies are server admins' alone: a project's own admin, an
/// editor, a viewer and even a server admin's token limited to a project
/// cannot bind, widen or clear one (403), nor list them. Hostile labels and
/// empty grants are refused by field (422), every change is audited, and a
/// project's members see the policy they run under. Submit and retry refuse
/// what the policy could never run: a runner not granted (field `runner`),
/// a selector contradicting the project's labels or naming another
/// project's reserved labels (field `node_selector`).
#[tokio::test(flavor = "multi_thread")]
async fn node_policies_are_set_by_server_admins_and_refuse_what_could_never_run() {
    let f = TestServer::start().await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    for name in ["vision", "nlp"] {
        let (status, body) = f
            .call("POST", "/projects", &root, Some(json!({"name": name})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let lead = user_token(f.db(), "lead", Scope::Write, false).await;
    let eve = user_token(f.db(), "eve", Scope::Write, false).await;
    let watcher = user_token(f.db(), "watcher", Scope::Write, false).await;
    for (user, project, role) in [
        ("lead", "vision", "admin"),
        ("eve", "nlp", "editor"),
        ("watcher", "vision", "viewer"),
    ] {
        let (status, body) = f
            .post(
                &format!("/projects/{project}/members"),
                &root,
                json!({"user": user, "role": role}),
            )
            .await;
        assert!(status.is_success(), "{body}");
    }
    let (status, made) = f
        .post(
            "/tokens",
            &root,
            json!({"name": "vision-only", "scope": "write", "project": "vision"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let limited = made["secret"].as_str().unwrap().to_string();

    // Even a server admin's token of the scope a job's token has.
    let admin_sdk = user_token(f.db(), "root-sdk", Scope::Sdk, true).await;
    let grab = json!({"labels": {"team": "vision"}, "runners": ["process", "docker", "slurm"]});
    for (who, token) in [
        ("admin's sdk-scope token", &admin_sdk),
        ("project admin", &lead),
        ("other project's editor", &eve),
        ("viewer", &watcher),
        ("admin's project-limited token", &limited),
    ] {
        for (method, body) in [("PUT", Some(grab.clone())), ("DELETE", None)] {
            let (status, answer) = f.call(method, "/projects/vision/node-policy", token, body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{who} {method}: {answer}");
        }
        let (status, answer) = f.get("/node-policies", token).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{who} lists: {answer}");
    }

    // Hostile text and empty grants, by field; a project that is not there.
    let hostile = json!({"labels": {"team\u{1b}]0;owned\u{7}": "x", "ok": "line\nbreak"}, "runners": []});
    let (status, body) = f
        .call("PUT", "/projects/vision/node-policy", &root, Some(hostile))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields = gpuplane_testkit::http::error_fields(&body);
    assert_eq!(fields.len(), 3, "{body}");
    assert!(
        fields.contains(&"runners".to_string()) && fields.contains(&"labels.ok".to_string()),
        "{body}"
    );
    let (status, body) = f
        .call(
            "PUT",
            "/projects/vision/node-policy",
            &root,
            Some(json!({"runners": ["root"]})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, _) = f
        .call(
            "PUT",
            "/projects/ghost/node-policy",
            &root,
            Some(json!({"labels": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, projects) = f.get("/projects", &lead).await;
    assert!(projects.to_string().contains("\"vision\"") && !projects.to_string().contains("node_policy"));

    // The admin binds vision; its members see it; the change is audited.
    let (status, set) = f
        .call(
            "PUT",
            "/projects/vision/node-policy",
            &root,
            Some(json!({"labels": {"team": "vision"}, "runners": ["docker", "process", "docker"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["policy"]["runners"], json!(["docker", "process"]), "{set}");
    assert_eq!(set["updated_by"], json!("root"));
    let (_, projects) = f.get("/projects", &watcher).await;
    let vision = projects["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vision")
        .unwrap()
        .clone();
    assert_eq!(
        vision["node_policy"]["labels"],
        json!({"team": "vision"}),
        "{vision}"
    );
    let (_, listed) = f.get("/node-policies", &root).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    let (_, audit) = f.get("/audit?action=project.node_policy", &root).await;
    assert_eq!(audit["items"][0]["target"], "vision", "{audit}");
    assert!(
        audit["items"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("team=vision"),
        "{audit}"
    );

    // Submits the policy could never run: 422 by field, nothing stored.
    let job = |project: &str, extra: Value| {
        let mut spec = json!({"name": "j", "project": project, "command": ["true"]});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    let refused = [
        (
            &eve,
            job("nlp", json!({"node_selector": {"team": "vision"}})),
            "node_selector",
        ),
        (
            &eve,
            job("nlp", json!({"runner": "docker", "image": "python:3.12"})),
            "runner",
        ),
        (&eve, job("nlp", json!({"runner": "slurm"})), "runner"),
        (
            &lead,
            job("vision", json!({"node_selector": {"team": "nlp"}})),
            "node_selector",
        ),
        (&lead, job("vision", json!({"runner": "slurm"})), "runner"),
    ];
    let (_, before) = f.get("/jobs", &root).await;
    for (token, spec, field) in refused {
        let (status, body) = f.post("/jobs", token, spec.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{spec}: {body}");
        assert_eq!(body["error"]["details"][0]["field"], field, "{spec}: {body}");
        let (status, body) = f.post("/jobs/validate", token, spec.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validate {spec}: {body}"
        );
    }
    let (_, after) = f.get("/jobs", &root).await;
    assert_eq!(before["items"], after["items"], "nothing half-written");
    // Inside the policy: accepted.
    let (status, body) = f
        .post(
            "/jobs",
            &lead,
            job("vision", json!({"runner": "docker", "image": "python:3.12"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // A retry is checked under the policy as it is now: an nlp job that
    // ended, retried towards vision's nodes, is refused.
    let (status, ended) = f.post("/jobs", &eve, job("nlp", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{ended}");
    let id = ended["id"].as_str().unwrap();
    let (status, _) = f
        .post(&format!("/jobs/{id}/cancel"), &eve, json!({"confirm": true}))
        .await;
    assert!(status.is_success(), "cancel");
    let towards = json!({"set": {"node_selector.team": "vision"}});
    let (status, body) = f.post(&format!("/jobs/{id}/retry"), &eve, towards).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "node_selector", "{body}");

    // Cleared: vision is back to unreserved nodes and the process runner.
    let (status, _) = f
        .call("DELETE", "/projects/vision/node-policy", &root, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = f
        .call("DELETE", "/projects/vision/node-policy", &root, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = f
        .post(
            "/jobs",
            &lead,
            job("vision", json!({"runner": "docker", "image": "python:3.12"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_projects_idle_action_is_its_admins_to_set_and_nobody_elses() {
    let f = TestServer::start().await;
    let people = People::of_vision(&f).await;
    let editor = user_token(f.db(), "ed", Scope::Write, false).await;
    let (status, body) = f
        .post(
            "/projects/vision/members",
            &people.admin,
            json!({"user": "ed", "role": "editor"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let sdk = user_token(f.db(), "job", Scope::Sdk, true).await;
    let set = |token: String, value: Value| {
        let f = &f;
        async move {
            f.call(
                "PATCH",
                "/projects/vision",
                &token,
                Some(json!({"idle_action": value})),
            )
            .await
        }
    };
    // A viewer and an editor may not; another project's editor and a token
    // limited to another project do not see the project; a job's token has
    // no scope for it.
    for (token, expected) in [
        (&people.viewer, StatusCode::FORBIDDEN),
        (&editor, StatusCode::FORBIDDEN),
        (&people.outsider, StatusCode::NOT_FOUND),
        (&people.limited, StatusCode::NOT_FOUND),
        (&sdk, StatusCode::FORBIDDEN),
    ] {
        let (status, body) = set(token.clone(), json!("stop")).await;
        assert_eq!(status, expected, "{body}");
    }
    // Hostile text is refused naming the field, and changes nothing.
    let (status, body) = set(people.admin.clone(), json!("stop\u{1b}[2J; rm -rf /")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.to_string().contains("idle_action"), "{body}");
    let (_, projects) = f.get("/projects", &people.admin).await;
    let vision = projects["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vision")
        .unwrap();
    assert_eq!(vision["idle_action"], "warn", "{vision}");
    // Its admin may, and it is audited.
    let (status, body) = set(people.admin.clone(), json!("stop")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["idle_action"], "stop");
    let (status, audit) = f.get("/audit", &people.admin).await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert!(audit.to_string().contains("idle_action stop"), "{audit}");
}
