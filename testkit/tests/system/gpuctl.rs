//! `gpuctl job …`, `logs` and `event list` against a real server and a real
//! agent process: what people read, what scripts parse, and exit codes.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::gpuctl;
use gpuplane_testkit::{WAIT, agent_token, binary, eventually, start_server_with, user_token};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

struct Env {
    _dir: tempfile::TempDir,
    home: tempfile::TempDir,
    server: gpuplane_server::RunningServer,
    token: String,
    agent: Child,
    work: PathBuf,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}

impl Env {
    async fn start() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let server = start_server_with(&dir.path().join("server"), |config| {
            config.settings.log_tail_lines = 100
        })
        .await;
        let token = user_token(&server.state.db, "cli-user", Scope::Write, false).await;
        let agent = Command::new(binary("gpuplane-agent"))
            .args([
                "--server",
                &server.url,
                "--token",
                &agent_token(&server.state.db).await,
            ])
            .args(["--name", "box", "--fake-gpus", "2", "--jobs-dir"])
            .arg(dir.path().join("jobs"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let env = Env {
            _dir: dir,
            home: tempfile::tempdir().unwrap(),
            server,
            token,
            agent,
            work,
        };
        eventually("the agent to connect", WAIT, || async {
            let status = env.json(&["status"]);
            (status["nodes_online"] == 1).then_some(())
        })
        .await;
        env
    }

    fn run(&self, args: &[&str]) -> Output {
        gpuctl::command(self.home.path())
            .args(args)
            .env("GPUCTL_SERVER", &self.server.url)
            .env("GPUCTL_TOKEN", &self.token)
            .output()
            .unwrap()
    }

    /// `gpuctl ARGS` run from `dir` (a git checkout, say).
    fn run_in(&self, dir: &std::path::Path, args: &[&str]) -> Output {
        gpuctl::command(self.home.path())
            .current_dir(dir)
            .args(args)
            .env("GPUCTL_SERVER", &self.server.url)
            .env("GPUCTL_TOKEN", &self.token)
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        // Before the arguments: after `--`, `--json` would belong to the job's command.
        let output = self.run(&[&["--json"], args].concat());
        gpuctl::json(&output)
    }

    async fn wait_status(&self, job_id: &str, status: &str) -> Value {
        eventually(&format!("{job_id} to be {status}"), WAIT, || async {
            let job = self.json(&["job", "show", job_id]);
            (job["status"] == status).then_some(job)
        })
        .await
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_follow_show_and_list_a_job() {
    let env = Env::start().await;
    let work = env.work.display().to_string();
    let submitted = env.json(&[
        "job",
        "submit",
        "--name",
        "hello",
        "--gpus",
        "1",
        "--env",
        "GREETING=hi there",
        "--workdir",
        &work,
        "--",
        "sh",
        "-c",
        "echo \"$GREETING\"; echo to-stderr >&2; echo bye",
    ]);
    let id = submitted["id"].as_str().unwrap().to_string();
    assert!(submitted["run_id"].as_str().unwrap().starts_with("run_"));

    // `logs -f` prints as the job writes, on the job's own streams, and ends with it.
    let follow = env.run(&["logs", "-f", &id]);
    assert!(follow.status.success(), "{}", text(&follow.stderr));
    assert_eq!(text(&follow.stdout), "hi there\nbye\n");
    assert!(text(&follow.stderr).contains("to-stderr"));
    assert!(text(&follow.stderr).contains("(job ended: SUCCEEDED)"));

    let show = env.run(&["job", "show", &id]);
    let shown = text(&show.stdout);
    assert!(shown.contains("status     SUCCEEDED"), "{shown}");
    assert!(shown.contains("#1 SUCCEEDED  node box  gpus [0]"), "{shown}");
    assert!(
        shown.contains("command    sh -c 'echo \"$GREETING\"; echo to-stderr >&2; echo bye'"),
        "{shown}"
    );

    let list = env.json(&["job", "list", "--status", "succeeded"]);
    assert_eq!(list["items"][0]["id"], id.as_str());
    let empty = env.json(&["job", "list", "--status", "FAILED"]);
    assert_eq!(empty["items"], serde_json::json!([]));

    let status = env.json(&["status"]);
    assert_eq!(status["jobs"]["SUCCEEDED"], 1);
    assert_eq!(status["gpus_total"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn spec_files_in_toml_yaml_and_json_with_flags_on_top() {
    let env = Env::start().await;
    let files = [
        (
            "job.toml",
            "name = \"from-toml\"\ncommand = [\"true\"]\n[resources]\ngpu = 1\n",
        ),
        ("job.yaml", "name: from-yaml\ncommand: [\"true\"]\npriority: 5\n"),
        (
            "job.json",
            "{\"name\": \"from-json\", \"command\": [\"true\"], \"max_attempts\": 2}",
        ),
    ];
    for (file, body) in files {
        let path = env.work.join(file);
        std::fs::write(&path, body).unwrap();
        let job = env.json(&["job", "submit", "-f", path.to_str().unwrap()]);
        assert_eq!(
            job["name"],
            format!("from-{}", file.trim_start_matches("job.")),
            "{job}"
        );
    }
    let path = env.work.join("job.toml");
    let overridden = env.json(&[
        "job",
        "submit",
        "-f",
        path.to_str().unwrap(),
        "--name",
        "renamed",
        "--gpus",
        "0",
    ]);
    assert_eq!(overridden["name"], "renamed");
    assert_eq!(overridden["resources"]["gpu"], 0);

    // A time limit as people write it, shown back the same way.
    let limited = env.json(&[
        "job",
        "submit",
        "-f",
        path.to_str().unwrap(),
        "--time-limit",
        "1h30m",
    ]);
    assert_eq!(limited["spec"]["time_limit_s"], 5400, "{limited}");
    let shown = env.run(&["job", "show", limited["id"].as_str().unwrap()]);
    assert!(
        text(&shown.stdout).contains("time limit 1h30m per attempt"),
        "{}",
        text(&shown.stdout)
    );
    // --after: checked here as the server checks it, shown back.
    let first = limited["id"].as_str().unwrap();
    let after = format!("{first}:finished");
    let later = env.json(&["job", "submit", "-f", path.to_str().unwrap(), "--after", &after]);
    assert_eq!(later["spec"]["after"], serde_json::json!([after]), "{later}");
    let shown = text(&env.run(&["job", "show", later["id"].as_str().unwrap()]).stdout);
    assert!(shown.contains(&format!("after      {after}")), "{shown}");
    let bad_after = env.run(&["job", "submit", "--after", "train-1", "--", "true"]);
    assert!(
        text(&bad_after.stderr).contains("`train-1` is not a job id"),
        "{}",
        text(&bad_after.stderr)
    );
    // --on-hang restart needs attempts to restart with.
    let restarts = env.json(&[
        "job",
        "submit",
        "-f",
        path.to_str().unwrap(),
        "--on-hang",
        "restart",
        "--max-attempts",
        "3",
    ]);
    assert_eq!(restarts["spec"]["on_hang"], "restart", "{restarts}");
    let once = env.run(&["job", "submit", "--on-hang", "restart", "--", "true"]);
    assert_eq!(once.status.code(), Some(7));
    assert!(
        text(&once.stderr)
            .contains("on_hang: restart retries the job, which needs max_attempts of 2 or more"),
        "{}",
        text(&once.stderr)
    );
    let bad_limit = env.run(&["job", "submit", "--time-limit", "2 hours", "--", "true"]);
    assert!(!bad_limit.status.success());
    assert!(
        text(&bad_limit.stderr).contains("is not a duration"),
        "{}",
        text(&bad_limit.stderr)
    );

    let bad = env.work.join("job.txt");
    std::fs::write(&bad, "x").unwrap();
    let output = env.run(&["job", "submit", "-f", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(7));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_submissions_and_unconfirmed_cancels_exit_7_naming_the_fields() {
    let env = Env::start().await;
    let output = env.run(&[
        "job",
        "submit",
        "--name",
        "",
        "--gpus",
        "-1",
        "--max-attempts",
        "0",
        "--workdir",
        "rel",
        "--",
        "true",
    ]);
    assert_eq!(output.status.code(), Some(7));
    let stderr = text(&output.stderr);
    for field in ["name:", "working_dir:", "resources.gpu:", "max_attempts:"] {
        assert!(stderr.contains(&format!("  {field}")), "{field} in {stderr}");
    }
    let job = env.json(&["job", "submit", "--", "sleep", "30"]);
    let id = job["id"].as_str().unwrap();
    env.wait_status(id, "RUNNING").await;
    let refused = env.run(&["job", "cancel", id]);
    assert_eq!(refused.status.code(), Some(7));
    assert!(text(&refused.stderr).contains("--confirm"));
    let cancelled = env.run(&["job", "cancel", id, "--confirm"]);
    assert!(cancelled.status.success(), "{}", text(&cancelled.stderr));
    env.wait_status(id, "CANCELLED").await;
    let again = env.run(&["job", "cancel", id, "--confirm"]);
    assert_eq!(again.status.code(), Some(6), "conflict: already ended");
    assert_eq!(env.run(&["job", "show", "job_missing"]).status.code(), Some(5));
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_n_0_prints_everything_from_the_agent_and_events_show_the_oom() {
    let env = Env::start().await;
    let job = env.json(&[
        "job",
        "submit",
        "--",
        "sh",
        "-c",
        "seq 1 300; echo 'RuntimeError: CUDA error: out of memory' >&2; exit 1",
    ]);
    let id = job["id"].as_str().unwrap();
    let failed = env.wait_status(id, "FAILED").await;
    assert_eq!(failed["failure_reason"], "OOM");

    let tail = env.run(&["logs", id, "--stream", "stdout", "-n", "5"]);
    assert_eq!(text(&tail.stdout), "296\n297\n298\n299\n300\n");
    let kept = env.run(&["logs", id, "--stream", "stdout", "-n", "1000"]);
    assert_eq!(
        text(&kept.stdout).lines().count(),
        100,
        "the server keeps 100 lines here"
    );
    assert!(
        text(&kept.stderr).contains("gpuctl logs -n 0"),
        "it says where the rest is"
    );
    let full = env.run(&["logs", id, "-n", "0"]);
    assert!(full.status.success(), "{}", text(&full.stderr));
    let expected: String = (1..=300).map(|n| format!("{n}\n")).collect();
    assert_eq!(text(&full.stdout), expected);
    assert!(text(&full.stderr).contains("CUDA error: out of memory"));

    let events = env.run(&["event", "list", "--severity", "critical"]);
    let listed = text(&events.stdout);
    assert!(listed.contains("critical OOM"), "{listed}");
    assert!(listed.contains(id), "{listed}");

    // Why, without reading the log; the job id stands for its run.
    let explained = env.run(&["run", "explain-failure", id]);
    assert!(explained.status.success(), "{}", text(&explained.stderr));
    let shown = text(&explained.stdout);
    assert!(
        shown.starts_with(
            "The GPU ran out of memory: RuntimeError: CUDA error: out of memory  [CUDA out of memory]"
        ),
        "{shown}"
    );
    assert!(shown.contains("attempt 1 stderr line 1: RuntimeError"), "{shown}");
    assert!(shown.contains("what to do\n  1. "), "{shown}");
    assert!(shown.contains("retry: Retrying unchanged"), "{shown}");
    let explanation = env.json(&["run", "explain-failure", id]);
    assert_eq!(explanation["rule"], "cuda-oom");
    let diagnosis = env.json(&["run", "diagnose", id]);
    assert_eq!(diagnosis["failure"]["rule"], "cuda-oom");

    // An unchanged retry is refused (exit 6) with the advice; a changed one is queued.
    let refused = env.run(&["job", "retry", id]);
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("--force"),
        "{}",
        text(&refused.stderr)
    );
    let retried = env.json(&["job", "retry", id, "--set", "env.BATCH_SIZE=8"]);
    assert_eq!(retried["spec"]["env"]["BATCH_SIZE"], "8");
}

#[tokio::test(flavor = "multi_thread")]
async fn evaluate_a_checkpoint_and_read_the_result() {
    let env = Env::start().await;
    let work = env.work.display().to_string();
    let trained = env.json(&[
        "job",
        "submit",
        "--workdir",
        &work,
        "--watch",
        "ckpt",
        "--tag",
        "trained",
        "--",
        "sh",
        "-c",
        "mkdir -p ckpt && echo weights > ckpt/step_300.pt",
    ]);
    let run_id = trained["run_id"].as_str().unwrap().to_string();
    env.wait_status(trained["id"].as_str().unwrap(), "SUCCEEDED")
        .await;
    let shown = text(&env.run(&["run", "show", &run_id]).stdout);
    assert!(shown.contains("\ntags  trained\n"), "{shown}");
    let path = env.work.join("ckpt/step_300.pt").display().to_string();

    let created = env.run(&[
        "eval",
        "create",
        "--run",
        &run_id,
        "--checkpoint",
        &path,
        "--",
        "sh",
        "-c",
        r#"printf '{"metrics": {"accuracy": 0.5}}' > "$GPUCTL_EVAL_OUTPUT""#,
    ]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    let said = text(&created.stdout);
    assert!(said.contains("(results at step 300)"), "{said}");
    let job_id = said.split_whitespace().next().unwrap().to_string();
    env.wait_status(&job_id, "SUCCEEDED").await;

    let shown = text(&env.run(&["eval", "show", &job_id]).stdout);
    assert!(shown.contains("step        300"), "{shown}");
    assert!(shown.contains("  accuracy  0.5"), "{shown}");
    let listed = env.json(&["eval", "list", "--run", &run_id]);
    assert_eq!(listed["items"][0]["metrics"]["accuracy"], 0.5);
    let run = env.json(&["run", "show", &run_id]);
    assert_eq!(run["run"]["latest"]["eval/accuracy"]["step"], 300);

    // Rank by it: the summary, the checkpoint list and the run list show it.
    let set = env.run(&["run", "set-primary", &run_id, "eval/accuracy", "--goal", "max"]);
    assert!(set.status.success(), "{}", text(&set.stderr));
    assert_eq!(
        text(&set.stdout).trim(),
        format!(
            "{run_id} ranks by eval/accuracy (max, set on the run): best 0.5 at step 300, best checkpoint {path}"
        )
    );
    let shown = text(&env.run(&["run", "show", &run_id]).stdout);
    assert!(
        shown.contains(&format!("step 300      {path}  8 bytes  0.5  [best]")),
        "{shown}"
    );
    let listed = text(&env.run(&["run", "list", "--sort", "primary"]).stdout);
    assert!(listed.contains("eval/accuracy=0.5"), "{listed}");
    let jobs = text(&env.run(&["job", "list", "--sort", "primary_metric"]).stdout);
    assert!(jobs.contains("PRIMARY (BEST)"), "{jobs}");
    let bad = env.run(&["run", "set-primary", &run_id, "eval/accuracy", "--goal", "up"]);
    assert_eq!(bad.status.code(), Some(2), "a usage error");

    // The same path written by a second run: 409, exit 6, naming both runs.
    let again = env.json(&[
        "job",
        "submit",
        "--workdir",
        &work,
        "--watch",
        "ckpt",
        "--",
        "sh",
        "-c",
        "echo other > ckpt/step_300.pt",
    ]);
    env.wait_status(again["id"].as_str().unwrap(), "SUCCEEDED").await;
    let refused = env.run(&[
        "eval",
        "create",
        "--run",
        &run_id,
        "--checkpoint",
        &path,
        "--",
        "true",
    ]);
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused.stderr));
    let message = text(&refused.stderr);
    assert!(message.contains(again["run_id"].as_str().unwrap()), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn secret_variables_reach_the_job_but_are_never_shown() {
    let env = Env::start().await;
    let secret = "tok-3b8e91-never-show";
    let from_shell = "from-the-shell-77c1";
    let output = gpuctl::command(env.home.path())
        .args(["--json", "job", "submit", "--name", "secrets", "--gpus", "0"])
        .args([
            "--secret-env",
            &format!("API_KEY={secret}"),
            "--secret-env",
            "SHELL_SECRET",
        ])
        .args(["--", "sh", "-c", "echo key=$API_KEY shell=$SHELL_SECRET"])
        .env("GPUCTL_SERVER", &env.server.url)
        .env("GPUCTL_TOKEN", &env.token)
        .env("SHELL_SECRET", from_shell)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let submitted: Value = serde_json::from_slice(&output.stdout).unwrap();
    let id = submitted["id"].as_str().unwrap();
    env.wait_status(id, "SUCCEEDED").await;
    let shown = env.run(&["job", "show", id]);
    let shown_text = text(&shown.stdout);
    assert!(
        shown_text.contains("secrets    API_KEY, SHELL_SECRET (set; values are never shown)"),
        "{shown_text}"
    );
    let json = env.json(&["job", "show", id]).to_string();
    assert!(!json.contains(secret) && !json.contains(from_shell), "{json}");
    let logs = text(&env.run(&["logs", id]).stdout);
    assert_eq!(logs.trim(), "key=*** shell=***", "masked in the shipped output");
    let missing = env.run(&[
        "job",
        "submit",
        "--secret-env",
        "NOT_SET_ANYWHERE_42",
        "--",
        "true",
    ]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing.stderr));
    assert!(text(&missing.stderr).contains("no variable NOT_SET_ANYWHERE_42 is set here"));
}

/// One table of bad specs, through `gpuctl validate` (here, with the shared
/// code) and through the server's submit: the same fields, the same words.
#[tokio::test(flavor = "multi_thread")]
async fn validate_and_the_server_agree_on_every_bad_spec() {
    let env = Env::start().await;
    let cases = [
        serde_json::json!({"name": "", "command": []}),
        serde_json::json!({"name": "x", "command": ["python"], "resources": {"gpu": -2}}),
        serde_json::json!({"name": "x", "command": ["true"], "working_dir": "data/run", "max_attempts": 0}),
        serde_json::json!({"name": "x", "command": ["true"], "runner": "docker"}),
        serde_json::json!({"name": "x", "command": ["true"], "time_limit_s": 0, "after": ["job_01A", "job_01A", "x"]}),
        serde_json::json!({"name": "x", "command": ["true"], "env": {"1BAD": "v"}, "retry_cooldown_s": -1}),
    ];
    let http = reqwest::Client::new();
    for (n, case) in cases.iter().enumerate() {
        let path = env.work.join(format!("bad-{n}.json"));
        std::fs::write(&path, case.to_string()).unwrap();
        let local = env.run(&["--json", "validate", path.to_str().unwrap()]);
        assert_eq!(local.status.code(), Some(7), "{case}: {}", text(&local.stderr));
        let local: Value = serde_json::from_slice(&local.stdout).unwrap();
        let response = http
            .post(format!("{}/api/v1/jobs", env.server.url))
            .bearer_auth(&env.token)
            .json(case)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 422, "{case}");
        let server: Value = response.json().await.unwrap();
        assert_eq!(local["error"]["details"], server["error"]["details"], "{case}");
        assert!(!server["error"]["details"].as_array().unwrap().is_empty());
    }

    // An unknown key is named with the closest known one.
    let typo = env.work.join("typo.toml");
    std::fs::write(&typo, "name = \"x\"\ncomand = [\"true\"]\n").unwrap();
    let output = env.run(&["validate", typo.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(7));
    assert!(
        text(&output.stderr).contains("did you mean `command`?"),
        "{}",
        text(&output.stderr)
    );

    // A valid spec: fine here; --remote adds what would keep it waiting.
    let good = env.work.join("good.toml");
    std::fs::write(
        &good,
        "name = \"x\"\ncommand = [\"true\"]\nnode_selector = { gpu = \"a100\" }\n",
    )
    .unwrap();
    let output = env.run(&["validate", good.to_str().unwrap()]);
    assert_eq!(
        text(&output.stdout).trim(),
        format!("{} is a valid job spec", good.display())
    );
    let remote = env.json(&["validate", "--remote", good.to_str().unwrap()]);
    assert_eq!(remote["valid"], true);
    assert_eq!(
        remote["notes"],
        serde_json::json!(["node_selector gpu=a100 matches no online node"])
    );
    // What only the server knows: a project the user cannot submit to.
    let elsewhere = env.work.join("elsewhere.toml");
    std::fs::write(
        &elsewhere,
        "name = \"x\"\ncommand = [\"true\"]\nproject = \"secret\"\n",
    )
    .unwrap();
    assert!(
        env.run(&["validate", elsewhere.to_str().unwrap()])
            .status
            .success()
    );
    let refused = env.run(&["validate", "--remote", elsewhere.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(7));
    assert!(
        text(&refused.stderr).contains("project: no project named `secret` that you can submit to"),
        "{}",
        text(&refused.stderr)
    );
}

/// `git ARGS` in `dir` (with an identity, so commits work on any machine).
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=Tester",
            "-c",
            "user.email=tester@example.com",
            "-C",
        ])
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", text(&output.stderr));
    text(&output.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_records_its_git_checkout_and_refuses_uncommitted_changes_unless_allowed() {
    let env = Env::start().await;
    let repo = env.work.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("train.py"), "print('v1')\n").unwrap();
    git(&repo, &["add", "train.py"]);
    git(&repo, &["commit", "-q", "-m", "v1"]);
    // A remote URL with a token in it: the job records it without.
    git(
        &repo,
        &[
            "remote",
            "add",
            "origin",
            "https://me:ghp_secret@git.example.com/team/repo.git",
        ],
    );
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let workdir = repo.to_str().unwrap();
    let submit = |extra: &[&str]| {
        let args = [
            &["--json", "job", "submit", "--workdir", workdir],
            extra,
            &["--", "true"],
        ]
        .concat();
        env.run_in(&repo, &args)
    };

    // A clean tree: repository, branch and commit recorded; the attempt ran it.
    let output = submit(&[]);
    let job = gpuctl::json(&output);
    assert_eq!(
        job["spec"]["git"],
        serde_json::json!({"repository": "https://git.example.com/team/repo.git", "branch": "main",
                           "commit": head, "dirty": false})
    );
    let id = job["id"].as_str().unwrap();
    let done = env.wait_status(id, "SUCCEEDED").await;
    assert_eq!(done["attempts"][0]["git_commit"], head.as_str());
    let shown = text(&env.run(&["job", "show", id]).stdout);
    assert!(
        shown.contains(&format!(
            "source     https://git.example.com/team/repo.git @ main {}\n",
            &head[..12]
        )),
        "{shown}"
    );
    assert!(!shown.contains("warning:"), "{shown}");

    // An untracked file is a warning only.
    std::fs::write(repo.join("notes.txt"), "scratch").unwrap();
    let output = submit(&[]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(&format!(
            "warning: files not in git are not part of commit {}: notes.txt",
            &head[..12]
        )),
        "{}",
        text(&output.stderr)
    );

    // A changed tracked file: refused (exit 7), nothing submitted…
    std::fs::write(repo.join("train.py"), "print('v2')\n").unwrap();
    let before = env.json(&["job", "list"])["items"].as_array().unwrap().len();
    let output = submit(&[]);
    assert_eq!(output.status.code(), Some(7), "{}", text(&output.stdout));
    let refusal = text(&output.stderr);
    assert!(
        refusal.contains("this git checkout has uncommitted changes (M train.py)")
            && refusal.contains("submit with --allow-dirty"),
        "{refusal}"
    );
    assert_eq!(
        env.json(&["job", "list"])["items"].as_array().unwrap().len(),
        before
    );
    // …unless allowed, and then the job says so.
    let job = gpuctl::json(&submit(&["--allow-dirty"]));
    assert_eq!(job["spec"]["git"]["dirty"], true);
    git(&repo, &["checkout", "-q", "train.py"]);

    // Submitted from this commit, but the agent's working_dir is a clone
    // at another one: job show warns.
    let other = env.work.join("other");
    git(&env.work, &["clone", "-q", workdir, other.to_str().unwrap()]);
    std::fs::write(other.join("train.py"), "print('v3')\n").unwrap();
    git(&other, &["commit", "-q", "-am", "v3"]);
    let other_head = git(&other, &["rev-parse", "HEAD"]);
    let output = env.run_in(
        &repo,
        &[
            "--json",
            "job",
            "submit",
            "--workdir",
            other.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    let id = gpuctl::json(&output)["id"].as_str().unwrap().to_string();
    env.wait_status(&id, "SUCCEEDED").await;
    let shown = text(&env.run(&["job", "show", &id]).stdout);
    assert!(
        shown.contains(&format!(
            "warning: attempt 1 ran commit {} but the job was submitted from {}",
            &other_head[..12],
            &head[..12]
        )),
        "{shown}"
    );
}

/// Output cannot attack the terminal or the spreadsheet. A job prints a
/// window title, a clipboard write, a hyperlink, a cursor report request
/// and a device control string between coloured text and a progress bar's
/// carriage return: `gpuctl logs` (kept lines, `-f` and the whole file)
/// keeps the colours and the `\r` and drops the rest; `--raw` gives the
/// bytes as written. A job named with an escape shows it escaped, and a
/// run whose name is a formula is text in `--csv`.
#[tokio::test(flavor = "multi_thread")]
async fn output_cannot_drive_the_terminal_or_a_spreadsheet() {
    let env = Env::start().await;
    let hostile = r"printf '\033[32mgreen\033[0m \033]0;pwned-title\007\033]52;c;cm0gLXJmIC8=\007\033]8;;https://evil.example\033\\link\033]8;;\033\\ \033[6n\033P+q544e\033\\end\n 50%%\r100%%\n'";
    let submitted = env.json(&[
        "job",
        "submit",
        "--name",
        "evil\u{1b}]0;job-title\u{7}",
        "--",
        "sh",
        "-c",
        hostile,
    ]);
    let id = submitted["id"].as_str().unwrap().to_string();
    env.wait_status(&id, "SUCCEEDED").await;
    let coloured = "\u{1b}[32mgreen\u{1b}[0m link end\n";
    // The server keeps a progress bar's last state; the agent's file has it all.
    for (args, progress) in [
        (vec!["logs", &id], "100%\n"),
        (vec!["logs", "-f", &id], "100%\n"),
        (vec!["logs", "-n", "0", &id], " 50%\r100%\n"),
    ] {
        let shown = env.run(&args);
        assert!(shown.status.success(), "{}", text(&shown.stderr));
        assert_eq!(text(&shown.stdout), format!("{coloured}{progress}"), "{args:?}");
    }
    let raw = text(&env.run(&["logs", "--raw", &id]).stdout);
    assert!(
        raw.contains("\u{1b}]0;pwned-title\u{7}") && raw.contains("\u{1b}[6n"),
        "{raw:?}"
    );

    let listed = text(&env.run(&["job", "list"]).stdout);
    assert!(!listed.contains('\u{1b}'), "{listed:?}");
    assert!(listed.contains(r"evil\u{1b}]0;job-title\u{7}"), "{listed}");

    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/api/v1/runs", env.server.url))
        .bearer_auth(&env.token)
        .json(&serde_json::json!({"name": "=HYPERLINK(\"https://evil.example\",\"x\")", "config": {"note": "@SUM(A1:A9)"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let csv = text(
        &env.run(&["run", "list", "--columns", "config.note", "--csv"])
            .stdout,
    );
    let row = csv.lines().find(|line| line.contains("HYPERLINK")).unwrap();
    assert!(
        row.contains(",\"'=HYPERLINK(\"\"https://evil.example\"\",\"\"x\"\")\","),
        "{row}"
    );
    assert!(row.ends_with(",'@SUM(A1:A9)"), "{row}");
}
