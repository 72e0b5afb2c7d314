//! Share links: an editor makes a read-only link to one run; anyone with it
//! sees that run's page, charts and output and nothing else, until it
//! expires, is revoked, or its project forbids links; every request through
//! it is recorded, and only its hash is stored.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::TestServer;
use gpuplane_testkit::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn ok((status, body): (StatusCode, Value)) -> Value {
    assert!(status.is_success(), "{status} {body}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn a_share_link_opens_one_run_read_only_until_it_is_revoked_expires_or_is_forbidden() {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = f.user("root", Scope::Write, true).await;
    let ed = f.user("ed", Scope::Write, false).await;
    let vic = f.user("vic", Scope::Write, false).await;
    let outsider = f.user("out", Scope::Write, false).await;
    ok(f.post("/projects", &root, json!({"name": "vision"})).await);
    ok(f.post(
        "/projects/vision/members",
        &root,
        json!({"user": "ed", "role": "editor"}),
    )
    .await);
    ok(f.post(
        "/projects/vision/members",
        &root,
        json!({"user": "vic", "role": "viewer"}),
    )
    .await);

    let run = ok(f
        .post("/runs", &ed, json!({"project": "vision", "name": "shared-run"}))
        .await);
    let run_id = run["id"].as_str().unwrap().to_string();
    let other = ok(f
        .post("/runs", &ed, json!({"project": "vision", "name": "private-run"}))
        .await);
    let other_id = other["id"].as_str().unwrap().to_string();
    let points: Vec<Value> = (0..50)
        .map(|step| json!({"key": "train/loss", "step": step, "wall_time": 1.7e9 + step as f64, "value": 1.0 / (1.0 + step as f64)}))
        .collect();
    ok(f.post(
        &format!("/runs/{run_id}/metrics"),
        &ed,
        json!({"batch_id": "b1", "points": points}),
    )
    .await);
    // Notes are the run's own words: they must come out as text, not markup.
    ok(f.call(
        "PATCH",
        &format!("/runs/{run_id}"),
        &ed,
        Some(json!({"notes": "<img src=x onerror=alert(1)>"})),
    )
    .await);

    // Editors make links; viewers and other projects' users cannot.
    let shares = format!("/runs/{run_id}/shares");
    let (status, _) = f.post(&shares, &vic, json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f.post(&shares, &outsider, json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for days in [0, 91] {
        let (status, body) = f.post(&shares, &ed, json!({"expires_in_days": days})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body["error"]["details"][0]["field"], "expires_in_days");
    }
    let created = ok(f.post(&shares, &ed, json!({})).await);
    let url = created["url"].as_str().unwrap().to_string();
    let link_id = created["link"]["id"].as_str().unwrap().to_string();
    assert!(url.starts_with(&f.url("/s/gps_")), "{url}");
    let secret = url.rsplit('/').next().unwrap().to_string();
    assert_eq!(created["link"]["active"], true);
    assert_eq!(created["link"]["created_by"], "ed");

    // Only the hash is stored.
    let stored: Vec<String> = sql!(&db, |pool| {
        sqlx::query_scalar("SELECT secret_hash FROM share_links")
            .fetch_all(pool)
            .await
    })
    .unwrap();
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].contains(&secret[4..]));

    // Anyone with the URL, no cookie, no token: the page, charts, output.
    let anonymous = reqwest::Client::new();
    let page = anonymous.get(&url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert_eq!(headers["cache-control"], "private, no-store");
    assert_eq!(headers["x-robots-tag"], "noindex");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.starts_with("default-src 'none'; img-src 'self'"),
        "{policy}"
    );
    let html = page.text().await.unwrap();
    assert!(html.contains("<h1>shared-run</h1>"), "{html}");
    assert!(html.contains("read-only link shared by ed"));
    assert!(
        html.contains(&format!("src=\"/s/{secret}/chart.svg?key=train%2Floss\"")),
        "{html}"
    );
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!html.contains("<img src=x"), "the notes are escaped");
    assert!(!html.contains(&other_id) && !html.contains("private-run"));

    let svg = anonymous
        .get(format!("{url}/chart.svg?key=train/loss&y_scale=log"))
        .send()
        .await
        .unwrap();
    assert_eq!(svg.status(), StatusCode::OK);
    assert_eq!(svg.headers()["content-type"], "image/svg+xml");
    assert!(svg.text().await.unwrap().contains("<svg"));
    let png = anonymous
        .get(format!("{url}/chart.png?key=train/loss"))
        .send()
        .await
        .unwrap();
    assert_eq!(png.status(), StatusCode::OK);
    assert!(png.bytes().await.unwrap().starts_with(b"\x89PNG"));
    // Its own run only: no compared runs, and the secret is no API token.
    let compared = anonymous
        .get(format!("{url}/chart.svg?key=train/loss&compare={other_id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(compared.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let as_token = anonymous
        .get(f.api_url(&format!("/runs/{run_id}")))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(as_token.status(), StatusCode::UNAUTHORIZED);
    let logs = anonymous.get(format!("{url}/logs.txt")).send().await.unwrap();
    assert_eq!(logs.status(), StatusCode::OK);

    // Every request was recorded; viewers of the project see the list.
    let listed = ok(f.get(&shares, &vic).await);
    assert_eq!(listed["items"][0]["views"], 5);
    let views = ok(f.get(&format!("{shares}/{link_id}/views"), &vic).await);
    let what: Vec<&str> = views["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["what"].as_str().unwrap())
        .collect();
    assert_eq!(what, ["logs", "chart.svg", "chart.png", "chart.svg", "page"]);
    assert_eq!(views["items"][0]["address"], "127.0.0.1");
    let (status, _) = f.get(&shares, &outsider).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A project that forbids links closes them (project admins only decide).
    let (status, _) = f
        .call(
            "PATCH",
            "/projects/vision",
            &ed,
            Some(json!({"share_links": false})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let project = ok(f
        .call(
            "PATCH",
            "/projects/vision",
            &root,
            Some(json!({"share_links": false})),
        )
        .await);
    assert_eq!(project["share_links"], false);
    let closed = anonymous.get(&url).send().await.unwrap();
    assert_eq!(closed.status(), StatusCode::NOT_FOUND);
    assert!(
        closed
            .text()
            .await
            .unwrap()
            .contains("does not exist, has expired or was revoked")
    );
    let (status, body) = f.post(&shares, &ed, json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(ok(f.get(&shares, &ed).await)["items"][0]["active"], false);
    ok(f.call(
        "PATCH",
        "/projects/vision",
        &root,
        Some(json!({"share_links": true})),
    )
    .await);
    assert_eq!(anonymous.get(&url).send().await.unwrap().status(), StatusCode::OK);

    // Revoked: never again; a viewer cannot revoke.
    let (status, _) = f.call("DELETE", &format!("{shares}/{link_id}"), &vic, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let revoked = ok(f.call("DELETE", &format!("{shares}/{link_id}"), &ed, None).await);
    assert_eq!(revoked["active"], false);
    assert!(revoked["revoked_at"].is_string());
    for path in ["", "/chart.svg?key=train/loss", "/logs.txt"] {
        let gone = anonymous.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(gone.status(), StatusCode::NOT_FOUND, "{path}");
    }

    // Expired: the same 404 as one that never existed.
    let second = ok(f.post(&shares, &ed, json!({"expires_in_days": 1})).await);
    let second_url = second["url"].as_str().unwrap().to_string();
    assert_eq!(
        anonymous.get(&second_url).send().await.unwrap().status(),
        StatusCode::OK
    );
    sql!(&db, |pool| {
        sqlx::query("UPDATE share_links SET expires_at = 0 WHERE id = $1")
            .bind(second["link"]["id"].as_str().unwrap())
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    assert_eq!(
        anonymous.get(&second_url).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let made_up = anonymous
        .get(f.url("/s/gps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
        .send()
        .await
        .unwrap();
    assert_eq!(made_up.status(), StatusCode::NOT_FOUND);
}

/// Share links are open to anyone who holds one: the requests through them
/// are counted per client address, 300 a minute, then 429.
#[tokio::test(flavor = "multi_thread")]
async fn requests_through_share_links_are_rate_limited_per_address() {
    let f = TestServer::start().await;
    let root = f.user("root", Scope::Write, true).await;
    let run = ok(f
        .post("/runs", &root, json!({"project": "default", "name": "r"}))
        .await);
    let link = ok(f
        .post(
            &format!("/runs/{}/shares", run["id"].as_str().unwrap()),
            &root,
            json!({}),
        )
        .await);
    let url = format!("{}/logs.txt", link["url"].as_str().unwrap());
    let anonymous = reqwest::Client::new();
    for n in 0..300 {
        let status = anonymous.get(&url).send().await.unwrap().status();
        assert_eq!(status, StatusCode::OK, "request {n}");
    }
    let refused = anonymous.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
}
