//! The real `gpuplane-server` binary: bootstrap commands print only secrets;
//! bad configuration, a busy port, an unusable data dir or a broken database
//! end with one clear error line and exit 1; SIGTERM stops it cleanly.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpuplane-server");

fn server(data_dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("GPUPLANE_CONFIG");
    command
}

fn run_with_stdin(mut command: Command, stdin: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Asserts a failure with exit code 1 and exactly one `error:` line containing `needle`.
fn assert_one_line_error(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line expected in: {stderr}");
    assert!(errors[0].contains(needle), "`{needle}` not in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn admin_commands_print_only_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let created = run_with_stdin(
        server(
            dir.path(),
            &["admin", "create-user", "root", "--admin", "--password-stdin"],
        ),
        "s3cret-password\n",
    );
    assert!(created.status.success(), "{created:?}");
    assert!(created.stdout.is_empty(), "create-user prints nothing on stdout");

    let token = server(
        dir.path(),
        &["admin", "create-token", "--user", "root", "--scope", "write"],
    )
    .output()
    .unwrap();
    assert!(token.status.success(), "{token:?}");
    let stdout = String::from_utf8(token.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1);
    assert!(
        stdout.starts_with("gpp_") && stdout.trim().len() == 47,
        "{stdout}"
    );

    let agent = server(dir.path(), &["admin", "create-agent-token", "--name", "rack-1"])
        .output()
        .unwrap();
    assert!(String::from_utf8(agent.stdout).unwrap().starts_with("gpp_"));

    let duplicate = run_with_stdin(
        server(dir.path(), &["admin", "create-user", "root", "--password-stdin"]),
        "another-password\n",
    );
    assert_one_line_error(&duplicate, "a user named `root` already exists");

    let short = run_with_stdin(
        server(
            dir.path(),
            &["admin", "create-user", "shorty", "--password-stdin"],
        ),
        "abc\n",
    );
    assert_one_line_error(&short, "at least 8 characters");

    let nobody = server(
        dir.path(),
        &["admin", "create-token", "--user", "ghost", "--scope", "read"],
    )
    .output()
    .unwrap();
    assert_one_line_error(&nobody, "no user named `ghost`");
}

#[test]
fn agent_tokens_are_listed_with_their_node_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = server(dir.path(), args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    run(&[
        "admin",
        "create-agent-token",
        "--name",
        "rack-1",
        "--node",
        "gpu-01",
    ]);
    run(&["admin", "create-agent-token", "--name", "rack-2"]);
    let listed: serde_json::Value =
        serde_json::from_str(&run(&["admin", "list-agent-tokens", "--json"])).unwrap();
    let tokens = listed.as_array().unwrap();
    assert_eq!(tokens.len(), 2);
    assert_eq!(
        (&tokens[0]["name"], &tokens[0]["node"]),
        (&"rack-1".into(), &"gpu-01".into())
    );
    assert_eq!(
        tokens[1]["node"],
        serde_json::Value::Null,
        "bound at its first hello"
    );
    let table = run(&["admin", "list-agent-tokens"]);
    assert!(
        table.contains("gpu-01") && table.contains("(not yet bound)"),
        "{table}"
    );

    let id = tokens[0]["id"].as_str().unwrap();
    let revoked = server(dir.path(), &["admin", "revoke-agent-token", id])
        .output()
        .unwrap();
    assert!(
        revoked.status.success() && revoked.stdout.is_empty(),
        "{revoked:?}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&run(&["admin", "list-agent-tokens", "--json"])).unwrap();
    assert!(listed[0]["revoked_at"].is_string(), "{listed}");
    let unknown = server(dir.path(), &["admin", "revoke-agent-token", "tok_nope"])
        .output()
        .unwrap();
    assert_one_line_error(&unknown, "no agent token tok_nope");
    let bad_node = server(dir.path(), &["admin", "create-agent-token", "--node", "a b"])
        .output()
        .unwrap();
    assert_one_line_error(&bad_node, "node: must be 1-128 characters");

    // The audit log has each change, by the server CLI; failures add nothing.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let entries = runtime.block_on(async {
        let db = gpuplane_server::store::open(dir.path()).await.unwrap();
        let filter = gpuplane_server::audit::Filter::default();
        gpuplane_server::audit::list(&db, &filter, 50, None)
            .await
            .unwrap()
            .items
    });
    let lines: Vec<String> = entries
        .iter()
        .rev()
        .map(|e| format!("{} {} {}", e.actor, e.action, e.detail))
        .collect();
    assert_eq!(
        lines,
        [
            "server CLI agent_token.create rack-1, for node gpu-01",
            "server CLI agent_token.create rack-2, for the first node it says hello as",
            "server CLI agent_token.revoke ",
        ]
    );
    assert_eq!(entries[0].target, id);
}

#[test]
fn sso_without_allowed_domains_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = server(dir.path(), &["serve", "--bind", "127.0.0.1:0"])
        .env("GPUPLANE_OIDC_ISSUER", "https://idp.example")
        .env("GPUPLANE_OIDC_CLIENT_ID", "gpuplane")
        .env("GPUPLANE_OIDC_CLIENT_SECRET", "s")
        .output()
        .unwrap();
    assert_one_line_error(&output, "oidc_allowed_domains is empty");
    let output = server(dir.path(), &["serve", "--bind", "127.0.0.1:0"])
        .env("GPUPLANE_OIDC_ISSUER", "https://idp.example")
        .env("GPUPLANE_OIDC_CLIENT_ID", "gpuplane")
        .env("GPUPLANE_OIDC_CLIENT_SECRET", "s")
        .env("GPUPLANE_OIDC_ALLOWED_DOMAINS", "example.com")
        .env("GPUPLANE_OIDC_NEW_USER_ROLE", "owner")
        .output()
        .unwrap();
    assert_one_line_error(&output, "oidc_new_user_role must be none, viewer or editor");
}

#[test]
fn unknown_config_keys_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gpuplane.toml"),
        "bind = \"127.0.0.1:0\"\nbnid = \"oops\"\n",
    )
    .unwrap();
    let output = server(dir.path(), &["serve"]).output().unwrap();
    assert_one_line_error(&output, "unknown field `bnid`");
}

#[test]
fn a_missing_explicit_config_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = server(dir.path(), &["--config", "/nonexistent/gpuplane.toml", "serve"])
        .output()
        .unwrap();
    assert_one_line_error(&output, "cannot read config file /nonexistent/gpuplane.toml");
}

#[test]
fn a_port_in_use_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = server(dir.path(), &["serve", "--bind", &address])
        .output()
        .unwrap();
    assert_one_line_error(&output, &format!("cannot listen on {address}"));
}

#[test]
fn an_unusable_data_dir_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let output = server(&file.join("data"), &["serve", "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_one_line_error(&output, "cannot create data directory");
}

#[test]
fn a_failed_migration_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let agent = server(dir.path(), &["admin", "create-agent-token"])
        .output()
        .unwrap();
    assert!(agent.status.success());
    // Pretend the database was migrated by a newer server.
    let db = dir.path().join("gpuplane.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES (9999, 'from the future', 1, x'00', 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    });
    let output = server(dir.path(), &["serve", "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_one_line_error(&output, "cannot migrate database");
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = server(dir.path(), &["serve", "--bind", "127.0.0.1:0"])
        .env("GPUPLANE_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server exited before listening"
        );
    }
    let url = line
        .split("listening on ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let health = std::net::TcpStream::connect(url.trim_start_matches("http://"));
    assert!(health.is_ok(), "the server accepts connections at {url}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "a SIGTERM is a clean stop");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(rest.contains("shutting down"), "{rest}");
}

/// The host's `admin create-user` gives the role `default_project_role`
/// says (viewer unless set, by the variable or the config file), and
/// `admin create-token` is audited like every other admin action.
#[test]
fn admin_create_user_reads_the_default_project_role_and_create_token_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("none.toml");
    std::fs::write(&config, "default_project_role = \"none\"\n").unwrap();
    for (name, variable, file) in [
        ("plain", None, None),
        ("trusted", Some("editor"), None),
        ("outsider", None, Some(&config)),
    ] {
        let mut command = server(dir.path(), &["admin", "create-user", name, "--password-stdin"]);
        command.env_remove("GPUPLANE_DEFAULT_PROJECT_ROLE");
        if let Some(role) = variable {
            command.env("GPUPLANE_DEFAULT_PROJECT_ROLE", role);
        }
        if let Some(file) = file {
            command.arg("--config").arg(file);
        }
        let created = run_with_stdin(command, "a-good-password\n");
        assert!(created.status.success(), "{created:?}");
    }
    let mut bad = server(dir.path(), &["admin", "create-user", "x", "--password-stdin"]);
    bad.env("GPUPLANE_DEFAULT_PROJECT_ROLE", "owner");
    assert_one_line_error(
        &run_with_stdin(bad, "a-good-password\n"),
        "default_project_role must be none, viewer or editor",
    );
    let token = server(
        dir.path(),
        &["admin", "create-token", "--user", "plain", "--scope", "read"],
    )
    .output()
    .unwrap();
    assert!(token.status.success(), "{token:?}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (members, audited) = runtime.block_on(async {
        let db = gpuplane_server::store::open(dir.path()).await.unwrap();
        let pool = db.as_sqlite().unwrap();
        let members: Vec<(String, String)> = sqlx::query_as(
            "SELECT u.name, m.role FROM project_members m JOIN users u ON u.id = m.user_id
             WHERE m.project = 'default' ORDER BY u.name",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        let audited: Vec<(String, String, String)> =
            sqlx::query_as("SELECT action, target, detail FROM audit_log WHERE action = 'token.create'")
                .fetch_all(pool)
                .await
                .unwrap();
        db.close().await;
        (members, audited)
    });
    assert_eq!(
        members,
        [
            ("plain".to_string(), "viewer".to_string()),
            ("trusted".into(), "editor".into())
        ]
    );
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0].1, "plain");
    assert!(audited[0].2.contains("read"), "{audited:?}");
}
