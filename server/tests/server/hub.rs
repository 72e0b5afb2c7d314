//! The Hugging Face precheck of recipes' model and dataset ids, against a
//! local stand-in of the Hub, and external recipes' observability links.

use crate::recipes::sft;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The example recipe with a dataset key too.
fn sft_with_dataset() -> String {
    sft("v1", None).replacen(
        "[[rules]]",
        "[schema.properties.dataset]\ntype = \"string\"\nx-gpuplane-hf = \"dataset\"\ndefault = \"org/data\"\n\n[[rules]]",
        1,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hub_precheck_refuses_what_the_user_cannot_read_and_a_linked_token_opens_gated_repos() {
    use gpuplane_testkit::hub::{HubStandIn, Repo};
    let hub = HubStandIn::start(
        vec![
            Repo::open("model", "org/open"),
            Repo::gated("model", "meta/gated", &["hf_granted"]),
            Repo::open("dataset", "org/data"),
            Repo::gated("dataset", "org/gated-data", &["hf_granted"]),
            Repo {
                private: true,
                ..Repo::open("model", "org/private")
            },
        ],
        &[("hf_granted", "ada"), ("hf_other", "bob")],
    )
    .await;
    let hub_url = hub.url.clone();
    let f = TestServer::start_with(move |config| config.settings.hf_endpoint = hub_url).await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let ed = user_token(f.db(), "ed", Scope::Write, false).await;
    let (status, body) = f
        .post(
            "/projects/default/members",
            &root,
            json!({"user": "ed", "role": "editor"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, recipe) = f
        .post("/recipes", &root, json!({"source": sft_with_dataset()}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{recipe}");
    let submit = |model: &str, dataset: &str| json!({"contract": recipe["contract"], "config": {"base_model": model, "dataset": dataset}, "exp_dir": "/tmp"});
    let refusal = |body: &Value| {
        (
            body["error"]["details"][0]["field"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            body["error"]["details"][0]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };

    // Unknown, private and gated repos are refused on their key; nothing queues.
    for (model, dataset, field, words) in [
        (
            "org/missing",
            "org/data",
            "config.base_model",
            "no model `org/missing` on the Hub",
        ),
        (
            "org/private",
            "org/data",
            "config.base_model",
            "or it is private and you have linked no Hub token",
        ),
        (
            "meta/gated",
            "org/data",
            "config.base_model",
            "is gated and you have linked no Hub token",
        ),
        (
            "org/open",
            "org/gated-data",
            "config.dataset",
            "dataset `org/gated-data` is gated",
        ),
        ("gpt2", "org/data", "config.base_model", "full org/name"),
    ] {
        let (status, body) = f.post("/recipes/sft/1/jobs", &ed, submit(model, dataset)).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{model} {dataset}: {body}"
        );
        let (got_field, message) = refusal(&body);
        assert_eq!(got_field, field, "{body}");
        assert!(message.contains(words), "{words}: {message}");
    }
    let (_, jobs) = f.get("/jobs", &root).await;
    assert_eq!(jobs["items"], json!([]));
    // A viewer of the project makes the server ask the Hub nothing.
    let vi = user_token(f.db(), "vi", Scope::Write, false).await;
    let (status, body) = f
        .post(
            "/projects/default/members",
            &root,
            json!({"user": "vi", "role": "viewer"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let asked = hub.requests();
    for action in ["check", "jobs"] {
        let (status, body) = f
            .post(
                &format!("/recipes/sft/1/{action}"),
                &vi,
                submit("org/other", "org/data"),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    assert_eq!(hub.requests(), asked, "no Hub request for a viewer");

    // A token the Hub refuses is not linked; one of an account without access is, and still refused.
    let (status, body) = f
        .call("PUT", "/hf/token", &ed, Some(json!({"token": "hf_wrong"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = f
        .call("PUT", "/hf/token", &ed, Some(json!({"token": "hf_other"})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hub_user"], "bob");
    let (status, body) = f
        .post("/recipes/sft/1/jobs", &ed, submit("meta/gated", "org/data"))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        refusal(&body).1.contains("your linked Hub token cannot read it"),
        "{body}"
    );

    // Granted: the job queues, and gets the token as a secret variable.
    let (status, body) = f
        .call("PUT", "/hf/token", &ed, Some(json!({"token": " hf_granted\n"})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        !body.to_string().contains("hf_granted"),
        "never shown back: {body}"
    );
    let before = hub.requests();
    let (status, check) = f
        .post(
            "/recipes/sft/1/check",
            &ed,
            submit("meta/gated", "org/gated-data"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{check}");
    assert!(
        !check.to_string().contains("hf_granted"),
        "the check shows no secret: {check}"
    );
    let asked = hub.requests() - before;
    let (status, job) = f
        .post("/recipes/sft/1/jobs", &ed, submit("meta/gated", "org/gated-data"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(
        hub.requests() - before,
        asked,
        "the second check came from the cache"
    );
    assert_eq!(job["secret_env"], json!(["HF_TOKEN"]), "{job}");
    assert!(!job.to_string().contains("hf_granted"), "{job}");
    let sealed: Vec<String> = gpuplane_testkit::sql!(f.db(), |pool| {
        sqlx::query_scalar("SELECT sealed FROM hub_tokens")
            .fetch_all(pool)
            .await
    })
    .unwrap();
    assert!(
        sealed.len() == 1 && !sealed[0].contains("hf_granted"),
        "stored sealed: {sealed:?}"
    );

    // The token is ed's own: nobody else sees, changes or removes it.
    let (_, mine) = f.get("/hf", &ed).await;
    assert_eq!(mine["linked"], true);
    let (_, theirs) = f.get("/hf", &root).await;
    assert_eq!(
        theirs["linked"], false,
        "an admin sees only their own link: {theirs}"
    );
    let (status, limited) = f
        .post(
            "/tokens",
            &ed,
            json!({"name": "ci", "scope": "write", "project": "default"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{limited}");
    let limited = limited["secret"].as_str().unwrap().to_string();
    let sdk = f
        .server
        .state
        .secret
        .attempt_token(job["id"].as_str().unwrap(), 1);
    for (who, token) in [
        ("a project-limited token", &limited),
        ("the job's sdk token", &sdk),
    ] {
        for (method, body) in [("PUT", Some(json!({"token": "hf_other"}))), ("DELETE", None)] {
            let (status, answer) = f.call(method, "/hf/token", token, body).await;
            assert!(
                status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED,
                "{who} {method}: {status} {answer}"
            );
        }
    }
    for hostile in ["", "hf token", "hf_\u{1b}[2J", &"a".repeat(600)] {
        let (status, body) = f
            .call("PUT", "/hf/token", &ed, Some(json!({"token": hostile})))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{hostile:?}: {body}");
    }
    let (_, mine) = f.get("/hf", &ed).await;
    assert_eq!(mine["hub_user"], "ada", "unchanged by the attacks: {mine}");
    let (status, gone) = f.call("DELETE", "/hf/token", &ed, None).await;
    assert_eq!(status, StatusCode::OK, "{gone}");
    assert_eq!(gone["linked"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hub_that_does_not_answer_is_a_warning_not_a_hang() {
    // Accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let f = TestServer::start_with(move |config| config.settings.hf_endpoint = url).await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let (_, recipe) = f
        .post("/recipes", &root, json!({"source": sft("v1", None)}))
        .await;
    let request =
        json!({"contract": recipe["contract"], "config": {"base_model": "meta/gated"}, "exp_dir": "/tmp"});
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        f.post("/recipes/sft/1/check", &root, request.clone()),
    )
    .await
    .expect("the check answers even when the Hub does not");
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    let warnings = answer.1["warnings"].to_string();
    assert!(
        warnings.contains("base_model `meta/gated` was not checked against the Hub"),
        "{warnings}"
    );
    let (status, job) = f.post("/recipes/sft/1/jobs", &root, request).await;
    assert_eq!(status, StatusCode::CREATED, "the job queues: {job}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_external_recipe_needs_an_observability_url_and_the_run_page_links_it() {
    let f = TestServer::start().await;
    let root = user_token(f.db(), "root", Scope::Write, true).await;
    let source = sft("v1", None).replacen(
        "hf_token = true",
        "hf_token = true\nobservability = \"external\"",
        1,
    );
    let (status, recipe) = f.post("/recipes", &root, json!({"source": source})).await;
    assert_eq!(status, StatusCode::CREATED, "{recipe}");
    assert_eq!(recipe["observability"], "external");
    let submit = |url: Value| json!({"contract": recipe["contract"], "config": {"base_model": "org/model"}, "exp_dir": "/tmp", "observability_url": url});
    for (what, url) in [
        ("none", Value::Null),
        ("a script", json!("javascript:alert(document.cookie)")),
        ("credentials", json!("https://me:secret@wandb.example/run")),
        ("a space", json!("https://wandb.example/a run")),
    ] {
        let (status, body) = f.post("/recipes/sft/1/jobs", &root, submit(url)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
        assert_eq!(
            body["error"]["details"][0]["field"], "observability_url",
            "{what}: {body}"
        );
    }
    let url = "https://wandb.example/team/run/1?x=<b>";
    let (status, job) = f.post("/recipes/sft/1/jobs", &root, submit(json!(url))).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["spec"]["observability_url"], url);

    // The run page links to it (server-rendered, the text escaped).
    let (status, body) = f
        .post(
            "/users",
            &root,
            json!({"name": "ada", "password": "correct horse battery", "admin": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let signed_in = f
        .http
        .post(f.url("/login"))
        .header("origin", &f.server.url)
        .form(&[
            ("username", "ada"),
            ("password", "correct horse battery"),
            ("next", "/"),
        ])
        .send()
        .await
        .unwrap();
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = f
        .http
        .get(f.url(&format!("/runs/{}", job["run_id"].as_str().unwrap())))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("data-testid=\"observability-link\""), "{page}");
    assert!(
        page.contains("https://wandb.example/team/run/1?x=&lt;b&gt;"),
        "escaped: {page}"
    );
    assert!(page.contains("sft v1"), "the recipe is named: {page}");
}
