//! Recipes over HTTP, against the real server and SQLite file: who may
//! publish and see them, immutability, drift, per-key refusals, and the
//! attacks of SECURITY.md's "Recipes" row (another project's editor, a
//! viewer, a project-limited token, a job's sdk token, hostile text).

use gpuplane_api::auth::Scope;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../recipe/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The example recipe, owned by `project` (none: server-wide).
pub fn sft(version: &str, project: Option<&str>) -> String {
    let source = fixture(&format!("sft.{version}.toml"));
    match project {
        Some(project) => source.replacen(
            "user_code = true",
            &format!("user_code = true\nproject = \"{project}\""),
            1,
        ),
        None => source,
    }
}

pub struct Teams {
    pub f: TestServer,
    pub root: String,
    pub lead: String,
    pub editor: String,
    pub viewer: String,
    pub outsider: String,
}

/// Project `vision` with an admin (lead), an editor and a viewer; project
/// `speech` with its own editor (outsider to vision).
pub async fn teams() -> Teams {
    let f = TestServer::start().await;
    let db = f.db().clone();
    let root = user_token(&db, "root", Scope::Write, true).await;
    let lead = user_token(&db, "lead", Scope::Write, false).await;
    let editor = user_token(&db, "ed", Scope::Write, false).await;
    let viewer = user_token(&db, "vi", Scope::Write, false).await;
    let outsider = user_token(&db, "eve", Scope::Write, false).await;
    for project in ["vision", "speech"] {
        let (status, body) = f.post("/projects", &root, json!({"name": project})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for (project, user, role) in [
        ("vision", "lead", "admin"),
        ("vision", "ed", "editor"),
        ("vision", "vi", "viewer"),
        ("speech", "eve", "editor"),
    ] {
        let (status, body) = f
            .post(
                &format!("/projects/{project}/members"),
                &root,
                json!({"user": user, "role": role}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    Teams {
        f,
        root,
        lead,
        editor,
        viewer,
        outsider,
    }
}

async fn publish(t: &Teams, token: &str, source: &str) -> (StatusCode, Value) {
    t.f.post("/recipes", token, json!({"source": source})).await
}

fn experiment(contract: &Value, project: &str, config: Value) -> Value {
    json!({"contract": contract, "project": project, "config": config, "exp_dir": "/tmp"})
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_is_for_admins_and_a_version_never_changes() {
    let t = teams().await;
    let global = sft("v1", None);
    // Server-wide recipes are for server admins only.
    for token in [&t.lead, &t.editor, &t.viewer] {
        let (status, body) = publish(&t, token, &global).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    let (status, body) = publish(&t, &t.root, &global).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["contract"].as_str().unwrap().starts_with("sha256:"));
    // The same file again changes nothing; other content under v1 is refused.
    let (status, again) = publish(&t, &t.root, &global).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["contract"], body["contract"]);
    let (status, body) = publish(&t, &t.root, &global.replace("maximum = 8", "maximum = 4")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("publish it as v2"),
        "{body}"
    );

    // A project's recipes: its admins publish them, its editor may not.
    let mine = sft("v1", Some("vision")).replace("name = \"sft\"", "name = \"vision-sft\"");
    let (status, body) = publish(&t, &t.editor, &mine).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an editor: {body}");
    let (status, body) = publish(&t, &t.outsider, &mine).await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another project's editor sees no vision: {body}"
    );
    let (status, body) = publish(&t, &t.lead, &mine).await;
    assert_eq!(status, StatusCode::CREATED, "the project's admin: {body}");
    // A name stays with its project: speech cannot take vision-sft over.
    let stolen = mine
        .replace("project = \"vision\"", "project = \"speech\"")
        .replace("version = 1", "version = 2");
    let (status, body) = publish(&t, &t.root, &stolen).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    // Deprecating: the same rights as publishing.
    let (status, body) =
        t.f.post("/recipes/vision-sft/1/deprecate", &t.editor, json!(null))
            .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) =
        t.f.post("/recipes/vision-sft/1/deprecate", &t.lead, json!(null))
            .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["deprecated"], true);
    let (_, audit) = t.f.get("/audit", &t.root).await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"recipe.publish") && actions.contains(&"recipe.deprecate"),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_projects_recipes_are_invisible_to_everyone_else() {
    let t = teams().await;
    let (status, body) = publish(&t, &t.lead, &sft("v1", Some("vision"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, limited) =
        t.f.post(
            "/tokens",
            &t.root,
            json!({"name": "ci", "scope": "write", "project": "speech"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{limited}");
    let limited = limited["secret"].as_str().unwrap().to_string();
    for (who, token) in [
        ("another project's editor", &t.outsider),
        ("a token limited to speech", &limited),
    ] {
        let (_, list) = t.f.get("/recipes", token).await;
        assert_eq!(list["items"], json!([]), "{who}: {list}");
        for path in ["/recipes/sft", "/recipes/sft/1"] {
            let (status, body) = t.f.get(path, token).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{who} {path}: {body}");
        }
        let (status, body) =
            t.f.post(
                "/recipes/sft/1/jobs",
                token,
                experiment(&json!("x"), "vision", json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{who}: {body}");
    }
    // The project's viewer reads the catalog but submits nothing.
    let (status, shown) = t.f.get("/recipes/sft/1", &t.viewer).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    let request = experiment(&shown["contract"], "vision", json!({"base_model": "org/model"}));
    let (status, body) = t.f.post("/recipes/sft/1/jobs", &t.viewer, request.clone()).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a viewer cannot submit to vision: {body}"
    );
    // A job's sdk token reads no catalog and submits nothing.
    let (status, job) = t.f.post("/recipes/sft/1/jobs", &t.editor, request.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let sdk =
        t.f.server
            .state
            .secret
            .attempt_token(job["id"].as_str().unwrap(), 1);
    for (status, body) in [
        t.f.get("/recipes", &sdk).await,
        t.f.post("/recipes/sft/1/jobs", &sdk, request.clone()).await,
        t.f.post("/recipes", &sdk, json!({"source": sft("v2", Some("vision"))}))
            .await,
    ] {
        assert!(
            status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED,
            "sdk token: {status} {body}"
        );
    }
    // Recipe jobs of vision's recipe run in vision only.
    let elsewhere = experiment(&shown["contract"], "default", json!({"base_model": "org/model"}));
    let (status, body) = t.f.post("/recipes/sft/1/jobs", &t.root, elsewhere).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "project");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_experiment_is_checked_per_key_and_drift_is_a_409() {
    let t = teams().await;
    let (_, v1) = publish(&t, &t.root, &sft("v1", None)).await;
    let contract = v1["contract"].clone();
    // Three mistakes, three details, no job.
    let bad = experiment(
        &contract,
        "vision",
        json!({"base_model": "org/model", "warmup_step": 10, "learning_rate": 3.0, "global_batch_size": 60}),
    );
    let (status, body) = t.f.post("/recipes/sft/1/jobs", &t.editor, bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "config.learning_rate",
            "config.warmup_step",
            "config.global_batch_size"
        ]
    );
    assert!(
        body.to_string().contains("did you mean `warmup_steps`?"),
        "{body}"
    );
    let (_, jobs) = t.f.get("/jobs", &t.root).await;
    assert_eq!(jobs["items"], json!([]), "a refusal writes no job");

    // A good one: the job carries the recipe, its run the config.
    let good = experiment(
        &contract,
        "vision",
        json!({"base_model": "org/model", "gpus": 2, "global_batch_size": 32}),
    );
    let (status, check) = t.f.post("/recipes/sft/1/check", &t.editor, good.clone()).await;
    assert_eq!(status, StatusCode::OK, "{check}");
    assert_eq!(check["spec"]["resources"]["gpu"], 2);
    let (status, job) = t.f.post("/recipes/sft/1/jobs", &t.editor, good.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["spec"]["recipe"]["name"], "sft");
    assert_eq!(job["spec"]["recipe"]["contract"], contract);
    assert_eq!(job["spec"]["working_dir"], "/tmp");
    let (_, run) =
        t.f.get(&format!("/runs/{}", job["run_id"].as_str().unwrap()), &t.editor)
            .await;
    assert_eq!(run["config"]["recipe.version"], 1, "{run}");
    assert_eq!(run["config"]["global_batch_size"], 32, "{run}");
    assert_eq!(
        run["config"]["max_steps"], 1000,
        "the defaults are recorded too: {run}"
    );

    // A plain submit cannot claim a recipe.
    let mut claimed = job["spec"].clone();
    claimed.as_object_mut().unwrap().remove("git");
    let (status, body) = t.f.post("/jobs", &t.editor, claimed).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "recipe");

    // v2 published: the v1 lock is drift, named with both versions.
    let (status, _) = publish(&t, &t.root, &sft("v2", None)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = t.f.post("/recipes/sft/1/jobs", &t.editor, good.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "recipe_drift");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("v1") && message.contains("v2"), "{message}");
    // A lock whose contract is not the catalog's is drift too.
    let forged = experiment(&json!("sha256:00"), "vision", json!({"base_model": "org/model"}));
    let (status, body) = t.f.post("/recipes/sft/2/jobs", &t.editor, forged).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Deprecating v2 makes v1 the newest again: the old lock works.
    let (status, _) = t.f.post("/recipes/sft/2/deprecate", &t.root, json!(null)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = t.f.post("/recipes/sft/1/jobs", &t.editor, good).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_recipes_and_experiments_are_refused_cleanly() {
    let t = teams().await;
    let cases = [
        ("not toml", "name = \u{0}".to_string()),
        ("a huge file", format!("name = \"x\"\n# {}", "a".repeat(300_000))),
        (
            "a remote $ref",
            sft("v1", None).replace(
                "additionalProperties = false",
                "additionalProperties = false\n\"$ref\" = \"http://169.254.169.254/latest\"",
            ),
        ),
        (
            "a control character in the runtime",
            sft("v1", None).replace("torch-2.4-cu124", "torch\\u001b[2J"),
        ),
        (
            "a name with a slash",
            sft("v1", None).replace("name = \"sft\"", "name = \"../etc\""),
        ),
        (
            "a template field outside the allowed",
            sft("v1", None).replace("[template]", "[template]\nsecret_env = { A = \"b\" }"),
        ),
        (
            "a config key under recipe.",
            sft("v1", None).replace(
                "[schema.properties.gpus]",
                "[schema.properties.\"recipe.name\"]\ntype = \"string\"\n[schema.properties.gpus]",
            ),
        ),
    ];
    for (what, source) in cases {
        let (status, body) = publish(&t, &t.root, &source).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
    }
    let (_, recipes) = t.f.get("/recipes", &t.root).await;
    assert_eq!(recipes["items"], json!([]), "nothing was stored");
    let (_, v1) = publish(&t, &t.root, &sft("v1", None)).await;
    let contract = v1["contract"].clone();
    for (what, body) in [
        (
            "a relative exp_dir",
            json!({"contract": contract, "config": {"base_model": "o/m"}, "exp_dir": "../x"}),
        ),
        (
            "a control character in exp_dir",
            json!({"contract": contract, "config": {"base_model": "o/m"}, "exp_dir": "/tmp/\u{1b}[2J"}),
        ),
        (
            "a nested config value",
            json!({"contract": contract, "config": {"base_model": {"a": 1}}}),
        ),
        (
            "an env-breaking value",
            json!({"contract": contract, "config": {"base_model": "o/m\u{0}x"}}),
        ),
        (
            "an unknown field",
            json!({"contract": contract, "config": {}, "command": ["rm", "-rf", "/"]}),
        ),
    ] {
        let (status, answer) = t.f.post("/recipes/sft/1/jobs", &t.editor, body).await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{what}: {status} {answer}"
        );
    }
    // A shipped folder whose paths would leave it, or that is too big.
    let file = |path: &str, content: &[u8]| {
        use base64::Engine as _;
        json!({"path": path, "content": base64::engine::general_purpose::STANDARD.encode(content)})
    };
    let big = vec![b'x'; (gpuplane_api::recipe::MAX_FOLDER_BYTES / 2 + 1) as usize];
    for (what, files, field) in [
        (
            "a parent path",
            json!([file("../../.ssh/authorized_keys", b"ssh-ed25519 A")]),
            "files[0].path",
        ),
        (
            "an absolute path",
            json!([file("/etc/cron.d/x", b"* * * * * root id")]),
            "files[0].path",
        ),
        (
            "an inner ..",
            json!([file("ok.txt", b""), file("src/../../x", b"")]),
            "files[1].path",
        ),
        ("an empty part", json!([file("a//b", b"")]), "files[0].path"),
        ("a backslash", json!([file("a\\..\\b", b"")]), "files[0].path"),
        (
            "a control character",
            json!([file("a\u{1b}[2J", b"")]),
            "files[0].path",
        ),
        (
            "a path twice",
            json!([file("a", b"1"), file("a", b"2")]),
            "files[1].path",
        ),
        (
            "a file that is a folder too",
            json!([file("a", b"1"), file("a/b", b"2")]),
            "files[1].path",
        ),
        (
            "content that is not base64",
            json!([{"path": "a", "content": "%%%"}]),
            "files[0].content",
        ),
        (
            "more than 4 MiB",
            json!([file("a", &big), file("b", &big)]),
            "files",
        ),
    ] {
        let body = json!({"contract": contract, "config": {"base_model": "o/m"}, "files": files});
        let (status, answer) = t.f.post("/recipes/sft/1/jobs", &t.editor, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {answer}");
        assert_eq!(answer["error"]["details"][0]["field"], field, "{what}: {answer}");
    }
    let both = json!({"contract": contract, "config": {"base_model": "o/m"}, "exp_dir": "/tmp", "files": [file("a", b"")]});
    let (status, answer) = t.f.post("/recipes/sft/1/jobs", &t.editor, both).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let (_, jobs) = t.f.get("/jobs", &t.root).await;
    assert_eq!(jobs["items"], json!([]), "no job was written");
}
