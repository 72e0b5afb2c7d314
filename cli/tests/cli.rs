//! The real `gpuctl` binary against a real server: output for people and for
//! programs (`--json` anywhere), stored credentials, and exit codes.

use expect_test::expect;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::gpuctl::{gpuctl, json, stderr, stdout};
use gpuplane_testkit::{agent_token, eventually, start_server, user_token};
use serde_json::Value;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn whoami_for_people_and_programs() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let token = user_token(&server.state.db, "alice", Scope::Write, true).await;
    let base = ["--server", server.url.as_str(), "--token", token.as_str()];

    let human = gpuctl(home.path(), &[&base[..], &["whoami"]].concat());
    assert!(human.status.success(), "{}", stderr(&human));
    let text = stdout(&human).replace(&server.url, "URL");
    let text = regex_lite_replace(&text, "tok_", 26);
    expect![[r#"
        alice (admin) on URL
        token test (tok_…), scope write, expires never
    "#]]
    .assert_eq(&text);

    // --json before the command, after it, or at the very end.
    for args in [vec!["--json", "whoami"], vec!["whoami", "--json"]] {
        let output = gpuctl(home.path(), &[&base[..], &args[..]].concat());
        let me = json(&output);
        assert_eq!(me["user"], "alice");
        assert_eq!(me["scope"], "write");
    }
}

/// Replaces `prefix` and the `len` characters after it with `prefix…`.
fn regex_lite_replace(text: &str, prefix: &str, len: usize) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at + prefix.len()]);
        out.push('…');
        rest = &rest[(at + prefix.len() + len).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_tell_scripts_what_went_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let url = server.url.as_str();

    // No token anywhere: 3, with a hint to log in.
    let output = gpuctl(home.path(), &["--server", url, "whoami"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(stderr(&output).contains("gpuctl login"), "{}", stderr(&output));

    // A refused token: 3, and with --json the API's error body on stdout.
    let output = gpuctl(
        home.path(),
        &["--server", url, "--token", "gpp_nope", "whoami", "--json"],
    );
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(json(&output)["error"]["code"], "invalid_token");

    // An agent token on a read route: 4.
    let agent = agent_token(&server.state.db).await;
    let output = gpuctl(
        home.path(),
        &["--server", url, "--token", &agent, "node", "status"],
    );
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));

    // Nobody listening: 8.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let output = gpuctl(
        home.path(),
        &["--server", &format!("http://{closed}"), "--token", "x", "status"],
    );
    assert_eq!(output.status.code(), Some(8));
    assert!(
        stderr(&output).contains("cannot reach the GPUPlane server"),
        "{}",
        stderr(&output)
    );

    // Bad usage: clap's 2.
    assert_eq!(gpuctl(home.path(), &["no-such-command"]).status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn login_stores_credentials_privately_and_logout_forgets_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let token = user_token(&server.state.db, "bob", Scope::Read, false).await;

    let refused = gpuctl(
        home.path(),
        &["--server", &server.url, "login", "--token", "gpp_wrong"],
    );
    assert_eq!(refused.status.code(), Some(3));
    assert!(
        !home.path().join("credentials.json").exists(),
        "a refused token is not stored"
    );

    let login = gpuctl(
        home.path(),
        &["--server", &server.url, "login", "--token", &token],
    );
    assert!(login.status.success(), "{}", stderr(&login));
    let file = home.path().join("credentials.json");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    // Now plain commands use the stored server and token.
    let me = json(&gpuctl(home.path(), &["whoami", "--json"]));
    assert_eq!(me["user"], "bob");

    let logout = gpuctl(home.path(), &["logout"]);
    assert!(logout.status.success());
    assert!(!file.exists());
    assert_eq!(
        gpuctl(home.path(), &["--server", &server.url, "whoami"])
            .status
            .code(),
        Some(3)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_node_status_show_the_agents_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let token = user_token(&server.state.db, "carol", Scope::Read, false).await;
    let base = ["--server", server.url.as_str(), "--token", token.as_str()];

    let empty = gpuctl(home.path(), &[&base[..], &["node", "status"]].concat());
    assert!(stdout(&empty).contains("No nodes yet"), "{}", stdout(&empty));

    // The agent binary belongs to another package (its own tests run it); here the
    // node registers over the agent API exactly as the agent does.
    let agent_token = agent_token(&server.state.db).await;
    let http = reqwest::Client::new();
    let gpus: Vec<Value> = (0..3)
        .map(|i| {
            serde_json::json!({
                "index": i, "uuid": format!("GPU-{i}"), "model": "Simulated GPU", "source": "simulated",
                "memory_total_mib": 81920, "memory_used_mib": 1024, "utilization_percent": 50, "temperature_c": null
            })
        })
        .collect();
    let hello = serde_json::json!({
        "name": "box-a", "hostname": "box-a", "labels": {"gpu": "sim"}, "agent_version": "test", "gpus": gpus, "runners": ["process"],
    });
    let response = http
        .post(format!("{}/api/v1/agent/hello", server.url))
        .bearer_auth(&agent_token)
        .json(&hello)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());

    let status = json(&gpuctl(home.path(), &[&base[..], &["status", "--json"]].concat()));
    assert_eq!(status["nodes_online"], 1);
    assert_eq!(status["gpus_total"], 3);
    assert_eq!(status["gpus_simulated"], 3);
    assert_eq!(status["gpus_in_use"], 0);
    assert_eq!(status["jobs"]["QUEUED"], 0);

    let text = stdout(&gpuctl(home.path(), &[&base[..], &["node", "status"]].concat()));
    assert!(
        text.starts_with("box-a  ONLINE  3 GPUs  labels: gpu=sim"),
        "{text}"
    );
    assert!(
        text.contains("gpu 2  Simulated GPU  1024/81920 MiB  util 50%  temp -  [simulated]"),
        "{text}"
    );

    // Without heartbeats the node turns OFFLINE, and status says so.
    eventually("the node to go OFFLINE", Duration::from_secs(10), || async {
        let status = json(&gpuctl(home.path(), &[&base[..], &["status", "--json"]].concat()));
        (status["nodes_offline"] == 1).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_created_listed_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let writer = user_token(&server.state.db, "dana", Scope::Write, false).await;
    let base = ["--server", server.url.as_str(), "--token", writer.as_str()];

    let created = json(&gpuctl(
        home.path(),
        &[
            &base[..],
            &["token", "create", "--name", "ci", "--scope", "read", "--json"],
        ]
        .concat(),
    ));
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["token"]["id"].as_str().unwrap().to_string();
    assert!(secret.starts_with("gpp_"));
    let human = gpuctl(
        home.path(),
        &[
            &base[..],
            &["token", "create", "--name", "ci-2", "--scope", "read"],
        ]
        .concat(),
    );
    assert!(
        stdout(&human).trim().starts_with("gpp_"),
        "the secret alone on stdout"
    );
    assert!(stderr(&human).contains("not shown again"));

    let read_base = ["--server", server.url.as_str(), "--token", secret.as_str()];
    assert_eq!(
        json(&gpuctl(
            home.path(),
            &[&read_base[..], &["whoami", "--json"]].concat()
        ))["scope"],
        "read"
    );
    // A read token cannot mint a write token.
    let escalate = gpuctl(
        home.path(),
        &[
            &read_base[..],
            &["token", "create", "--name", "x", "--scope", "write"],
        ]
        .concat(),
    );
    assert_eq!(
        escalate.status.code(),
        Some(4),
        "read tokens cannot create tokens at all: {}",
        stderr(&escalate)
    );

    let listed = json(&gpuctl(
        home.path(),
        &[&base[..], &["token", "list", "--json"]].concat(),
    ));
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"ci") && names.contains(&"ci-2"), "{names:?}");

    let revoked = gpuctl(home.path(), &[&base[..], &["token", "revoke", &id]].concat());
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    assert_eq!(
        gpuctl(home.path(), &[&read_base[..], &["whoami"]].concat())
            .status
            .code(),
        Some(3)
    );
    assert_eq!(
        gpuctl(
            home.path(),
            &[&base[..], &["token", "revoke", "tok_nope"]].concat()
        )
        .status
        .code(),
        Some(5)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_show_marks_non_finite_latest_values() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let token = user_token(&server.state.db, "erin", Scope::Write, false).await;
    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{}/api/v1/runs", server.url))
        .bearer_auth(&token)
        .json(&serde_json::json!({"name": "shown"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["id"].as_str().unwrap();
    let points = serde_json::json!({"batch_id": "b", "points": [
        {"key": "train/loss", "step": 10, "wall_time": 1.0, "value": 0.25},
        {"key": "train/loss", "step": 11, "wall_time": 2.0, "value": "NaN"},
        {"key": "eval/acc", "step": 11, "wall_time": 2.0, "value": 0.5},
    ], "texts": [{"key": "samples", "step": 11, "wall_time": 2.0, "text": "a cat\non a mat"}]});
    http.post(format!("{}/api/v1/runs/{run_id}/metrics", server.url))
        .bearer_auth(&token)
        .json(&points)
        .send()
        .await
        .unwrap();
    let base = ["--server", server.url.as_str(), "--token", token.as_str()];
    let shown = stdout(&gpuctl(
        home.path(),
        &[&base[..], &["run", "show", run_id]].concat(),
    ));
    let text = shown.replace(run_id, "RUN");
    let text: String = text
        .lines()
        .filter(|l| !l.contains("LOSS_NAN"))
        .map(|l| format!("{l}\n"))
        .collect();
    expect![[r#"
        RUN  shown  (project default)
        status  RUNNING
        primary metric  none (set one: gpuctl run set-primary RUN KEY --goal max|min)
        metrics (latest)
          eval/acc    step 11       0.5
          train/loss  step 11       NaN  [non-finite]  (1 of 2 points non-finite)
        recent events
    "#]]
    .assert_eq(&text);
    assert!(shown.contains("critical LOSS_NAN"), "{shown}");
    let shown_json = json(&gpuctl(
        home.path(),
        &[&base[..], &["run", "show", run_id, "--json"]].concat(),
    ));
    assert_eq!(shown_json["run"]["latest"]["train/loss"]["value"], "NaN");
    assert_eq!(
        gpuctl(home.path(), &[&base[..], &["run", "show", "run_nope"]].concat())
            .status
            .code(),
        Some(5)
    );
    let texts = stdout(&gpuctl(
        home.path(),
        &[&base[..], &["run", "texts", run_id]].concat(),
    ));
    assert_eq!(texts, "step 11 samples:\n  a cat\n  on a mat\n");
    let texts = json(&gpuctl(
        home.path(),
        &[&base[..], &["run", "texts", run_id, "--key", "none", "--json"]].concat(),
    ));
    assert_eq!(
        (texts["items"].as_array().unwrap().len(), &texts["keys"]),
        (0, &serde_json::json!(["samples"]))
    );
    // An SDK run has no job, so no telemetry; a bad field is refused by name.
    let system = stdout(&gpuctl(
        home.path(),
        &[&base[..], &["run", "system", run_id]].concat(),
    ));
    assert!(system.contains("no telemetry"), "{system}");
    let bad = gpuctl(
        home.path(),
        &[&base[..], &["run", "system", run_id, "--field", "fan"]].concat(),
    );
    assert_eq!(bad.status.code(), Some(7), "{}", stderr(&bad));
}

#[tokio::test(flavor = "multi_thread")]
async fn gpuctl_mcp_refuses_to_start_without_a_working_token() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let url = server.url.as_str();

    let output = gpuctl(home.path(), &["--server", url, "mcp"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(stderr(&output).contains("gpuctl login"), "{}", stderr(&output));
    assert!(
        stdout(&output).is_empty(),
        "stdout is the MCP channel: {}",
        stdout(&output)
    );

    let output = gpuctl(home.path(), &["--server", url, "--token", "gpp_nope", "mcp"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(stderr(&output).contains("not known"), "{}", stderr(&output));
    assert!(stdout(&output).is_empty(), "{}", stdout(&output));
}

#[tokio::test(flavor = "multi_thread")]
async fn admins_pause_dispatch_for_maintenance_and_everyone_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = user_token(&server.state.db, "root", Scope::Write, true).await;
    let reader = user_token(&server.state.db, "carol", Scope::Read, false).await;
    let url = server.url.as_str();
    let as_admin = |args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", &admin][..], args].concat(),
        )
    };
    let as_reader = |args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", &reader][..], args].concat(),
        )
    };

    let refused = as_reader(&["admin", "maintenance", "on", "nope"]);
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));

    let on = as_admin(&["admin", "maintenance", "on", "Driver upgrade until 12:00 UTC"]);
    assert!(on.status.success(), "{}", stderr(&on));
    let text = stdout(&on);
    assert!(text.starts_with("Maintenance mode is on since "), "{text}");
    assert!(text.contains("(by root): nothing new starts"), "{text}");
    let status = stdout(&as_reader(&["status"]));
    assert!(
        status.contains(
            "\nPaused  maintenance: nothing new starts, running jobs continue: Driver upgrade until 12:00 UTC"
        ),
        "{status}"
    );
    let shown = json(&as_reader(&["admin", "maintenance", "show", "--json"]));
    assert_eq!(shown["on"], true);

    let off = as_admin(&["admin", "maintenance", "off"]);
    expect!["Maintenance mode is off: jobs are dispatched.\n"].assert_eq(&stdout(&off));
    assert!(!stdout(&as_reader(&["status"])).contains("Paused"));
}

#[tokio::test(flavor = "multi_thread")]
async fn admins_set_and_clear_quotas_and_status_shows_usage_against_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = user_token(&server.state.db, "root", Scope::Write, true).await;
    let editor = user_token(&server.state.db, "dana", Scope::Write, false).await;
    let url = server.url.as_str();
    let as_user = |token: &str, args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", token][..], args].concat(),
        )
    };

    let refused = as_user(
        &editor,
        &["admin", "quota", "set", "--project", "default", "--gpus", "8"],
    );
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));
    let neither = as_user(&admin, &["admin", "quota", "set", "--gpus", "8"]);
    assert_eq!(neither.status.code(), Some(2), "--project or --user is required");
    let unknown = as_user(
        &admin,
        &["admin", "quota", "set", "--user", "nobody", "--gpus", "8"],
    );
    assert_eq!(unknown.status.code(), Some(5), "{}", stderr(&unknown));

    let set = as_user(
        &admin,
        &[
            "admin",
            "quota",
            "set",
            "--project",
            "default",
            "--gpus",
            "8",
            "--jobs",
            "4",
        ],
    );
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(
        stdout(&set).starts_with("project default  0/8 GPUs, 0/4 jobs  (set "),
        "{}",
        stdout(&set)
    );
    let set = as_user(
        &admin,
        &["admin", "quota", "set", "--user", "dana", "--gpus", "2", "--json"],
    );
    assert_eq!(json(&set)["max_running_jobs"], serde_json::Value::Null);

    // Everyone sees the quotas that concern them, in `status` and the list.
    let status = stdout(&as_user(&editor, &["status"]));
    assert!(
        status.contains("\nQuota   project default: 0/8 GPUs, 0/4 jobs"),
        "{status}"
    );
    assert!(
        status.contains("\nQuota   user dana: 0/2 GPUs, 0 jobs (no limit)"),
        "{status}"
    );
    let listed = json(&as_user(&editor, &["admin", "quota", "list", "--json"]));
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);

    let cleared = as_user(&admin, &["admin", "quota", "clear", "--user", "dana"]);
    expect!["Quota removed: jobs it held back start now.\n"].assert_eq(&stdout(&cleared));
    let again = as_user(&admin, &["admin", "quota", "clear", "--user", "dana"]);
    assert_eq!(again.status.code(), Some(5), "{}", stderr(&again));

    // Each change is in the audit log, which only admins read.
    let audit = stdout(&as_user(&admin, &["admin", "audit", "--action", "quota.set"]));
    let lines: Vec<&str> = audit.lines().collect();
    assert_eq!(lines.len(), 2, "{audit}");
    assert!(
        lines[0].ends_with("  root (127.0.0.1)  quota.set user dana  max_gpus 2, max_running_jobs none"),
        "{audit}"
    );
    let denied = as_user(&editor, &["admin", "audit"]);
    assert_eq!(denied.status.code(), Some(4), "{}", stderr(&denied));
    assert!(!stdout(&as_user(&editor, &["status"])).contains("user dana"));
}

#[tokio::test(flavor = "multi_thread")]
async fn admins_manage_users_and_agent_tokens_from_the_terminal() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = user_token(&server.state.db, "root", Scope::Write, true).await;
    let editor = user_token(&server.state.db, "dana", Scope::Write, false).await;
    let url = server.url.as_str();
    let as_user = |token: &str, args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", token][..], args].concat(),
        )
    };

    // The password comes from stdin, never argv; nothing is prompted.
    let mut create = gpuplane_testkit::gpuctl::command(home.path());
    create
        .args(["--server", url, "--token", &admin])
        .args(["admin", "user", "create", "erin", "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = create.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"erin's long password\n")
        .unwrap();
    let created = child.wait_with_output().unwrap();
    assert!(created.status.success(), "{}", stderr(&created));
    assert!(stdout(&created).starts_with("erin "), "{}", stdout(&created));
    // Empty stdin is a short password: the API's message, exit 7.
    let empty = as_user(&admin, &["admin", "user", "create", "finn", "--password-stdin"]);
    assert_eq!(empty.status.code(), Some(7), "{}", stderr(&empty));
    assert!(stderr(&empty).contains("password: must have at least 8 characters"));

    let promoted = as_user(
        &admin,
        &["admin", "user", "set", "erin", "--admin", "true", "--json"],
    );
    assert_eq!(json(&promoted)["is_admin"], true);
    let disabled = as_user(&admin, &["admin", "user", "set", "erin", "--disable"]);
    assert!(
        stdout(&disabled).contains("disabled since"),
        "{}",
        stdout(&disabled)
    );
    let listed = json(&as_user(&admin, &["admin", "user", "list", "--json"]));
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dana", "erin", "root"]);
    let refused = as_user(&editor, &["admin", "user", "list"]);
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));

    // An agent token: only the secret on stdout, so it can go to a file.
    let token = as_user(&admin, &["admin", "agent-token", "create", "--name", "rack-2"]);
    assert!(token.status.success(), "{}", stderr(&token));
    let secret = stdout(&token).trim().to_string();
    assert!(secret.starts_with("gpp_") && !secret.contains(' '), "{secret}");
    let listed = as_user(&admin, &["admin", "agent-token", "list", "--json"]);
    let token_id = json(&listed)["items"][0]["id"].as_str().unwrap().to_string();
    let revoked = as_user(&admin, &["admin", "agent-token", "revoke", &token_id]);
    assert!(stdout(&revoked).contains("revoked"), "{}", stdout(&revoked));
    let unknown = as_user(&admin, &["admin", "agent-token", "revoke", "tok_nope"]);
    assert_eq!(unknown.status.code(), Some(5), "{}", stderr(&unknown));
}

#[tokio::test(flavor = "multi_thread")]
async fn run_list_filters_on_config_and_shows_chosen_columns_or_csv() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let token = user_token(&server.state.db, "ada", Scope::Write, false).await;
    let http = reqwest::Client::new();
    for (name, lr, optimizer) in [("small", 0.0001, "adam"), ("big", 0.01, "sgd, momentum")] {
        let created = http
            .post(format!("{}/api/v1/runs", server.url))
            .bearer_auth(&token)
            .json(&serde_json::json!({
                "name": name, "config": {"lr": lr, "optimizer": optimizer}, "tags": ["sweep"],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
    }
    let url = server.url.as_str();
    let list = |args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", &token, "run", "list"][..], args].concat(),
        )
    };
    let table = list(&[
        "--where",
        "config.lr > 1e-3",
        "--columns",
        "config.lr,config.optimizer,train/loss",
    ]);
    assert!(table.status.success(), "{}", stderr(&table));
    let lines: Vec<String> = stdout(&table)
        .lines()
        .map(|line| line.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        lines,
        [
            "NAME STATUS CONFIG.LR CONFIG.OPTIMIZER TRAIN/LOSS",
            "big RUNNING 0.01 sgd, momentum -"
        ]
    );
    let csv = list(&[
        "--tag",
        "sweep",
        "--columns",
        "config.lr,config.optimizer",
        "--csv",
    ]);
    let text = stdout(&csv);
    let rows: Vec<&str> = text.split("\r\n").collect();
    assert_eq!(rows[0], "run,name,project,status,tags,config.lr,config.optimizer");
    assert!(
        rows[1].ends_with(",big,default,RUNNING,sweep,0.01,\"sgd, momentum\""),
        "{text}"
    );
    assert!(
        rows[2].ends_with(",small,default,RUNNING,sweep,0.0001,adam"),
        "{text}"
    );
    assert_eq!(rows.len(), 4, "a line ending after the last row: {text:?}");
    let bad = list(&["--where", "eval/acc > 0.9"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    let bad = list(&["--where", "config.optimizer > adam"]);
    assert!(stderr(&bad).contains("compare numbers"), "{}", stderr(&bad));
}

#[tokio::test(flavor = "multi_thread")]
async fn alert_channels_subscriptions_and_deliveries_from_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // Its webhook points at this host: an admin allows that.
    let server =
        gpuplane_testkit::start_server_with(dir.path(), |config| config.settings.alert_private_hosts = true)
            .await;
    let admin = user_token(&server.state.db, "root", Scope::Write, true).await;
    let editor = user_token(&server.state.db, "dana", Scope::Write, false).await;
    let url = server.url.as_str();
    let as_user = |token: &str, args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", token][..], args].concat(),
        )
    };
    // Port 9 answers nothing: the delivery is tried and kept pending. The
    // channel takes anyone's own subscriptions (by default: admins' only).
    let hook = [
        "alert",
        "channel",
        "add",
        "ops",
        "--webhook",
        "http://127.0.0.1:9/hook",
        "--subscribers",
        "anyone",
    ];

    let refused = as_user(&editor, &hook);
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));
    let neither = as_user(&admin, &["alert", "channel", "add", "ops"]);
    assert_eq!(neither.status.code(), Some(2), "a target is required");
    let added = as_user(&admin, &hook);
    assert!(added.status.success(), "{}", stderr(&added));
    let text = stdout(&added);
    let closed = as_user(
        &admin,
        &[
            "alert",
            "channel",
            "add",
            "pager",
            "--slack",
            "https://hooks.example.com/x",
        ],
    );
    assert!(closed.status.success(), "{}", stderr(&closed));
    let refused = as_user(&editor, &["alert", "subscribe", "--channel", "pager"]);
    assert_eq!(
        refused.status.code(),
        Some(4),
        "admins only: {}",
        stderr(&refused)
    );
    assert!(text.starts_with("Channel ops (webhook) added."), "{text}");
    assert!(text.lines().last().unwrap().starts_with("whsec_"), "{text}");
    let bad = as_user(
        &admin,
        &["alert", "channel", "add", "mail", "--email", "not-an-address"],
    );
    assert_eq!(bad.status.code(), Some(7), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("`not-an-address` is not an email address"),
        "{}",
        stderr(&bad)
    );

    let listed = stdout(&as_user(&editor, &["alert", "channel", "list"]));
    assert_eq!(
        listed.trim(),
        "ops                  webhook  subscribed by anyone\npager                slack    subscribed by admins",
        "the URL is for admins only"
    );

    let subscribed = as_user(
        &editor,
        &[
            "alert",
            "subscribe",
            "--channel",
            "ops",
            "--kind",
            "RUN_ALERT",
            "--severity",
            "info",
            "--json",
        ],
    );
    assert!(subscribed.status.success(), "{}", stderr(&subscribed));
    let subscription = json(&subscribed);
    assert_eq!(subscription["scope"], "user");
    let id = subscription["id"].as_str().unwrap().to_string();
    let all = as_user(&editor, &["alert", "subscribe", "--channel", "ops", "--all"]);
    assert_eq!(all.status.code(), Some(4), "{}", stderr(&all));
    let mine = stdout(&as_user(&editor, &["alert", "subscriptions"]));
    assert_eq!(
        mine.trim(),
        format!("{id}  dana's jobs and runs: RUN_ALERT, info and above → ops")
    );

    // A run's alert, then the delivery with its failed try.
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{url}/api/v1/runs"))
        .bearer_auth(&editor)
        .json(&serde_json::json!({"project": "default", "name": "alerting"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["id"].as_str().unwrap();
    let raised = client
        .post(format!("{url}/api/v1/runs/{run_id}/alerts"))
        .bearer_auth(&editor)
        .json(&serde_json::json!({"title": "eval dropped", "level": "info"}))
        .send()
        .await
        .unwrap();
    assert!(raised.status().is_success());
    let deliveries = eventually("a failed try", Duration::from_secs(20), || async {
        let shown = as_user(&editor, &["alert", "deliveries", "--run-id", run_id]);
        let text = stdout(&shown);
        text.contains("    try 1: POST http://127.0.0.1:9")
            .then_some(text)
    })
    .await;
    assert!(
        deliveries.contains(" pending ops          RUN_ALERT  eval dropped\n"),
        "{deliveries}"
    );

    let gone = as_user(&editor, &["alert", "unsubscribe", &id]);
    assert!(gone.status.success(), "{}", stderr(&gone));
    assert_eq!(
        stdout(&as_user(&editor, &["alert", "subscriptions"])).trim(),
        "No subscriptions."
    );
    let removed = as_user(&admin, &["alert", "channel", "remove", "ops", "--json"]);
    assert_eq!(json(&removed)["removed"], "ops");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_shared_listed_and_unshared_from_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = user_token(&server.state.db, "root", Scope::Write, true).await;
    let editor = user_token(&server.state.db, "dana", Scope::Write, false).await;
    let url = server.url.as_str();
    let as_user = |token: &str, args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", token][..], args].concat(),
        )
    };
    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{url}/api/v1/runs"))
        .bearer_auth(&editor)
        .json(&serde_json::json!({"project": "default", "name": "to-share"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["id"].as_str().unwrap();

    let shared = as_user(&editor, &["run", "share", run_id, "--days", "3"]);
    assert!(shared.status.success(), "{}", stderr(&shared));
    let text = stdout(&shared);
    let link = text.lines().next().unwrap().to_string();
    assert!(link.starts_with(&format!("{url}/s/gps_")), "{text}");
    assert!(text.contains("shown once"), "{text}");
    assert_eq!(http.get(&link).send().await.unwrap().status(), 200);

    let listed = as_user(&editor, &["run", "shares", run_id, "--json"]);
    let links = json(&listed);
    assert_eq!(links["items"][0]["views"], 1);
    let share_id = links["items"][0]["id"].as_str().unwrap().to_string();
    let shown = stdout(&as_user(&editor, &["run", "shares", run_id]));
    assert!(
        shown.starts_with(&format!("{share_id}  open     by dana  until ")),
        "{shown}"
    );

    let refused = as_user(&editor, &["project", "share-links", "default", "off"]);
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));
    let off = as_user(&admin, &["project", "share-links", "default", "off"]);
    assert_eq!(
        stdout(&off).trim(),
        "Share links of project default are forbidden; existing ones are closed."
    );
    assert_eq!(http.get(&link).send().await.unwrap().status(), 404);
    let no_more = as_user(&editor, &["run", "share", run_id]);
    assert_eq!(no_more.status.code(), Some(4), "{}", stderr(&no_more));
    as_user(&admin, &["project", "share-links", "default", "on"]);
    assert_eq!(http.get(&link).send().await.unwrap().status(), 200);

    let unshared = as_user(&editor, &["run", "unshare", run_id, &share_id]);
    assert_eq!(
        stdout(&unshared).trim(),
        format!("Share link {share_id} revoked.")
    );
    assert_eq!(http.get(&link).send().await.unwrap().status(), 404);
}

/// `gpuctl admin project-nodes`: a server admin binds a project to labelled
/// nodes and grants runners, lists and clears policies, with `--json`;
/// anyone else is refused (exit 4), and a bad runner never reaches the server.
#[tokio::test(flavor = "multi_thread")]
async fn admins_bind_projects_to_nodes_from_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = user_token(&server.state.db, "root", Scope::Write, true).await;
    let editor = user_token(&server.state.db, "dana", Scope::Write, false).await;
    let url = server.url.as_str();
    let as_user = |token: &str, args: &[&str]| {
        gpuctl(
            home.path(),
            &[&["--server", url, "--token", token][..], args].concat(),
        )
    };
    let set = [
        "admin",
        "project-nodes",
        "set",
        "default",
        "--labels",
        "team=vision,tier=a",
        "--runners",
        "process,docker",
    ];

    let refused = as_user(&editor, &set);
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));
    let bad = as_user(
        &admin,
        &[
            "admin",
            "project-nodes",
            "set",
            "default",
            "--runners",
            "process,root",
        ],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("`root` is not a runner"),
        "{}",
        stderr(&bad)
    );
    let empty = as_user(&admin, &["admin", "project-nodes", "list"]);
    expect!["No node policies: every project uses the nodes no policy reserves, with the process runner.\n"]
        .assert_eq(&stdout(&empty));

    let done = as_user(&admin, &set);
    assert!(done.status.success(), "{}", stderr(&done));
    let line = stdout(&done);
    assert!(
        line.starts_with("default  nodes labelled team=vision,tier=a  runners docker,process  (set ")
            && line.trim_end().ends_with(" by root)"),
        "{line}"
    );
    let listed = json(&as_user(&admin, &["admin", "project-nodes", "list", "--json"]));
    assert_eq!(listed["items"][0]["project"], "default", "{listed}");
    assert_eq!(listed["items"][0]["policy"]["labels"]["tier"], "a", "{listed}");
    let shown = json(&as_user(&editor, &["project", "list", "--json"]));
    assert_eq!(
        shown["items"][0]["node_policy"]["runners"],
        serde_json::json!(["docker", "process"]),
        "{shown}"
    );

    let cleared = as_user(&admin, &["admin", "project-nodes", "clear", "default", "--json"]);
    assert_eq!(json(&cleared)["cleared"], "default");
    let again = as_user(&admin, &["admin", "project-nodes", "clear", "default"]);
    assert_eq!(again.status.code(), Some(5), "{}", stderr(&again));
}
