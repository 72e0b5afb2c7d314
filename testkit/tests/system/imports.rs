//! `gpuctl import tensorboard` against a real server: folders of event files
//! (written by tensorboardX) become runs with every scalar once, a second
//! import adds nothing, an import cut off by a refused file goes on where it
//! stopped, and nobody imports into a project they cannot write to.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::gpuctl;
use gpuplane_testkit::{start_server, user_token};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/{name}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tfevents")
    )
}

fn copy_fixture(name: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let from = fixture(name);
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

struct Env {
    _dir: tempfile::TempDir,
    home: tempfile::TempDir,
    server: gpuplane_server::RunningServer,
    root: String,
}

impl Env {
    async fn start() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let server = start_server(&dir.path().join("server")).await;
        let root = user_token(&server.state.db, "root", Scope::Write, true).await;
        Env {
            _dir: dir,
            home: tempfile::tempdir().unwrap(),
            server,
            root,
        }
    }

    fn gpuctl(&self, token: &str, args: &[&str]) -> Output {
        gpuctl::command(self.home.path())
            .args(args)
            .env("GPUCTL_SERVER", &self.server.url)
            .env("GPUCTL_TOKEN", token)
            .output()
            .unwrap()
    }

    fn import(&self, token: &str, dir: &Path, project: &str) -> Output {
        let dir = dir.display().to_string();
        self.gpuctl(
            token,
            &["--json", "import", "tensorboard", &dir, "--project", project],
        )
    }

    async fn call(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let client = reqwest::Client::new();
        let mut request = client
            .request(
                method.parse().unwrap(),
                format!("{}/api/v1{path}", self.server.url),
            )
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The values of a run's metric, in order.
    async fn series(&self, run_id: &str, key: &str) -> Vec<Value> {
        let (status, answer) = self
            .call(
                "GET",
                &format!("/runs/{run_id}/metrics?key={key}&max_points=100000"),
                &self.root,
                None,
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        answer["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|point| point["value"].clone())
            .collect()
    }
}

/// One TFRecord holding an `Event` with one `simple_value` scalar.
fn event_record(tag: &str, step: i64, value: f32) -> Vec<u8> {
    fn field(number: u64, wire: u64, out: &mut Vec<u8>) {
        varint((number << 3) | wire, out);
    }
    fn varint(mut value: u64, out: &mut Vec<u8>) {
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }
    fn bytes(number: u64, content: &[u8], out: &mut Vec<u8>) {
        field(number, 2, out);
        varint(content.len() as u64, out);
        out.extend_from_slice(content);
    }
    let mut value_message = Vec::new();
    bytes(1, tag.as_bytes(), &mut value_message);
    field(2, 5, &mut value_message);
    value_message.extend_from_slice(&value.to_le_bytes());
    let mut summary = Vec::new();
    bytes(1, &value_message, &mut summary);
    let mut event = Vec::new();
    field(1, 1, &mut event);
    event.extend_from_slice(&1_764_460_800f64.to_le_bytes());
    field(2, 0, &mut event);
    varint(step as u64, &mut event);
    bytes(5, &summary, &mut event);

    let length = (event.len() as u64).to_le_bytes();
    let mut record = length.to_vec();
    record.extend_from_slice(&gpuplane_tfevents::masked_crc(&length).to_le_bytes());
    record.extend_from_slice(&event);
    record.extend_from_slice(&gpuplane_tfevents::masked_crc(&event).to_le_bytes());
    record
}

fn failed(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "expected a failure: {}",
        gpuctl::stdout(output)
    );
    gpuctl::stderr(output)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tree_of_event_files_becomes_runs_once_and_a_cut_off_import_goes_on() {
    let env = Env::start().await;
    let tree = env._dir.path().join("logs");
    copy_fixture("tb-simple", &tree.join("sweep/lr-0.1"));
    copy_fixture("tb-tensor", &tree.join("sweep/lr-0.01"));
    copy_fixture("tb-hparams", &tree.join("baseline"));
    std::fs::write(tree.join("notes.txt"), "not an event file").unwrap();

    let first = gpuctl::json(&env.import(&env.root, &tree, "default"));
    let runs = first["runs"].as_array().unwrap();
    let names: Vec<&str> = runs.iter().map(|run| run["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["baseline", "sweep/lr-0.01", "sweep/lr-0.1"]);
    assert!(runs.iter().all(|run| run["outcome"] == "imported"), "{first}");
    let simple = runs[2]["run_id"].as_str().unwrap().to_string();
    let loss = env.series(&simple, "train/loss").await;
    assert_eq!(loss.len(), 50);
    assert_eq!(loss[13], "NaN");
    assert_eq!(loss[14], "Infinity");
    assert_eq!(loss[15], "-Infinity");
    assert_eq!(
        env.series(runs[1]["run_id"].as_str().unwrap(), "train/loss")
            .await
            .len(),
        50
    );
    assert_eq!(
        first["points_added"],
        runs.iter()
            .map(|run| run["points_added"].as_u64().unwrap())
            .sum::<u64>()
    );

    let (_, baseline) = env
        .call(
            "GET",
            &format!("/runs/{}", runs[0]["run_id"].as_str().unwrap()),
            &env.root,
            None,
        )
        .await;
    assert_eq!(baseline["status"], "FINISHED");
    assert!(baseline["tags"].as_array().unwrap().contains(&json!("imported")));
    let source = baseline["config"]["import.source"].as_str().unwrap();
    assert!(
        source.starts_with("tensorboard:") && source.ends_with("/logs/baseline"),
        "{source}"
    );
    assert!(
        baseline["config"].as_object().unwrap().len() > 1,
        "the hparams plugin's values are in the config: {baseline}"
    );

    // A second import adds nothing.
    let second = gpuctl::json(&env.import(&env.root, &tree, "default"));
    assert_eq!(second["points_added"], 0);
    assert!(
        second["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|run| run["outcome"] == "skipped")
    );
    let text =
        gpuctl::stdout(&env.gpuctl(&env.root, &["import", "tensorboard", &tree.display().to_string()]));
    assert!(text.contains("3 already imported; 0 point(s) added"), "{text}");

    // An import cut off by a file the server refuses (a tag longer than a
    // metric key may be) keeps what it sent; once the file is fixed, the
    // next import goes on in the same run and stores no point twice.
    let cut = env._dir.path().join("cut");
    copy_fixture("tb-simple", &cut.join("run"));
    let bad = cut.join("run/events.out.tfevents.zz-bad");
    std::fs::write(&bad, event_record(&"x".repeat(300), 1, 0.5)).unwrap();
    let refused = failed(&env.import(&env.root, &cut, "default"));
    assert!(
        refused.contains("events.out.tfevents.zz-bad") && refused.contains("key"),
        "{refused}"
    );
    std::fs::write(&bad, event_record("train/extra", 1, 0.5)).unwrap();
    let resumed = gpuctl::json(&env.import(&env.root, &cut, "default"));
    let run = &resumed["runs"][0];
    assert_eq!(run["outcome"], "resumed", "{resumed}");
    assert_eq!(run["points_added"], 1, "only the fixed file's point: {resumed}");
    let run_id = run["run_id"].as_str().unwrap();
    assert_eq!(env.series(run_id, "train/loss").await.len(), 50, "no point twice");
    assert_eq!(env.series(run_id, "train/extra").await, [json!(0.5)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn imports_go_only_where_the_token_may_write_and_hostile_names_stay_text() {
    let env = Env::start().await;
    let db = env.server.state.db.clone();
    let editor = user_token(&db, "bob", Scope::Write, false).await;
    let viewer = user_token(&db, "carol", Scope::Write, false).await;
    let reader = user_token(&db, "dave", Scope::Read, false).await;
    for project in ["team-a", "team-b"] {
        let (status, body) = env
            .call("POST", "/projects", &env.root, Some(json!({"name": project})))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    for (user, role) in [("bob", "editor"), ("carol", "viewer"), ("dave", "editor")] {
        let (status, body) = env
            .call(
                "POST",
                "/projects/team-a/members",
                &env.root,
                Some(json!({"user": user, "role": role})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, limited) = env
        .call(
            "POST",
            "/tokens",
            &editor,
            Some(json!({"name": "ci", "scope": "write", "project": "team-a"})),
        )
        .await;
    assert_eq!(status, 201, "{limited}");
    let limited = limited["secret"].as_str().unwrap().to_string();

    let tree = env._dir.path().join("logs");
    copy_fixture("tb-simple", &tree.join("evil\x1b]0;owned\x07\x1b[31m"));
    let cases = [
        (
            &editor,
            "team-b",
            "no project named `team-b` that you can write to",
        ),
        (
            &viewer,
            "team-a",
            "you are viewer in project team-a; this needs editor",
        ),
        (&reader, "team-a", "needs a token with the `sdk` scope"),
        (
            &limited,
            "team-b",
            "no project named `team-b` that you can write to",
        ),
    ];
    for (token, project, why) in cases {
        let refused = failed(&env.import(token, &tree, project));
        assert!(refused.contains(why), "{why}: {refused}");
    }
    for project in ["team-a", "team-b"] {
        let (_, page) = env
            .call("GET", &format!("/runs?project={project}"), &env.root, None)
            .await;
        assert_eq!(page["items"], json!([]), "nothing written to {project}");
    }

    // Allowed, the folder's control characters become a plain name.
    let output = env.gpuctl(
        &limited,
        &[
            "import",
            "tensorboard",
            &tree.display().to_string(),
            "--project",
            "team-a",
        ],
    );
    assert!(output.status.success(), "{}", gpuctl::stderr(&output));
    let text = gpuctl::stdout(&output);
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    let (_, page) = env.call("GET", "/runs?project=team-a", &env.root, None).await;
    let name = page["items"][0]["name"].as_str().unwrap();
    assert_eq!(name, "evil?]0;owned??[31m");
}
