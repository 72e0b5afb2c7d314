//! Recipes and experiments as a new user runs them, through the real
//! `gpuctl`, server and agent: publish, init, a config with three mistakes
//! refused at once (offline, and by the server), fixed, submitted,
//! SUCCEEDED; v2 published; drift refused (exit 9); status; upgrade;
//! submitted again.

use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::Cluster;
use gpuplane_testkit::gpuctl;
use std::path::Path;
use std::process::Output;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../recipe/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// `gpuctl ARGS` signed in to the cluster as its admin.
fn run(cluster: &Cluster, home: &Path, args: &[&str]) -> Output {
    gpuctl::command(home)
        .args(args)
        .env("GPUCTL_SERVER", &cluster.server.url)
        .env("GPUCTL_TOKEN", &cluster.token)
        .output()
        .unwrap()
}

fn both(output: &Output) -> String {
    format!("{}{}", gpuctl::stdout(output), gpuctl::stderr(output))
}

#[tokio::test(flavor = "multi_thread")]
async fn from_a_published_recipe_to_a_succeeded_job_through_drift_and_upgrade() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let files = h.join("recipes");
    std::fs::create_dir_all(&files).unwrap();
    for version in ["v1", "v2"] {
        std::fs::write(
            files.join(format!("sft.{version}.toml")),
            fixture(&format!("sft.{version}.toml")),
        )
        .unwrap();
    }

    // Publish, browse, start an experiment.
    let published = run(&cluster, h, &["recipe", "publish", "recipes/sft.v1.toml"]);
    assert!(published.status.success(), "{}", both(&published));
    let listed = run(&cluster, h, &["recipe", "list"]);
    assert!(gpuctl::stdout(&listed).contains("sft"), "{}", both(&listed));
    let shown = run(&cluster, h, &["recipe", "show", "sft@1"]);
    assert!(
        gpuctl::stdout(&shown).contains("global_batch_size divisible by micro_batch_size × gpus"),
        "{}",
        both(&shown)
    );
    let init = run(&cluster, h, &["exp", "init", "exp", "--recipe", "sft"]);
    assert!(init.status.success(), "{}", both(&init));
    assert!(
        gpuctl::stdout(&init).contains("set in config.yaml: base_model"),
        "{}",
        both(&init)
    );
    let exp = h.join("exp");
    let config = std::fs::read_to_string(exp.join("config.yaml")).unwrap();
    assert!(
        config.contains("# Peak learning rate.\n# (number; 0 < x ≤ 1)\nlearning_rate: 0.0001"),
        "{config}"
    );
    let lock = std::fs::read_to_string(exp.join("experiment.toml")).unwrap();
    assert!(lock.contains("name = \"sft\"\nversion = 1"), "{lock}");

    // The scaffold says which line to replace, and fails until it is.
    let scaffold = std::process::Command::new("sh")
        .arg(exp.join("train.sh"))
        .output()
        .unwrap();
    assert_eq!(scaffold.status.code(), Some(2));
    assert!(
        gpuctl::stderr(&scaffold).contains("replace lines 7-8"),
        "{}",
        both(&scaffold)
    );

    // Three mistakes, named at once: offline (no server at all) and on submit.
    std::fs::write(
        exp.join("config.yaml"),
        "base_model: org/model\nwarmup_step: 10\nlearning_rate: 3.0\nglobal_batch_size: 60\n",
    )
    .unwrap();
    let offline = gpuctl::gpuctl(h, &["validate", "exp"]);
    assert_eq!(offline.status.code(), Some(7), "{}", both(&offline));
    let said = gpuctl::stderr(&offline);
    for part in [
        "has 3 problems",
        "config.learning_rate: 3.0 is greater than the maximum of 1",
        "did you mean `warmup_steps`?",
        "config.global_batch_size: global_batch_size (60) must be divisible by micro_batch_size × gpus = 8",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    let refused = run(&cluster, h, &["job", "submit", "--exp", "exp"]);
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    let (_, jobs) = cluster.get("/jobs").await;
    assert_eq!(jobs["items"], serde_json::json!([]), "nothing queued");

    // Fixed, with a real command: the job sees its folders and its config.
    std::fs::write(
        exp.join("config.yaml"),
        "base_model: org/model\nwarmup_steps: 10\nlearning_rate: 0.0003\nglobal_batch_size: 64\n",
    )
    .unwrap();
    // The folder ships with the job, dot-names left out; the job runs in
    // the agent's copy, so what it writes stays out of the user's folder.
    std::fs::write(
        exp.join("train.sh"),
        "echo \"exp=$GPUCTL_EXP_DIR work=$GPUCTL_WORK_DIR lr=$LEARNING_RATE model=$BASE_MODEL\"\n\
         grep '^learning_rate' \"$GPUCTL_EXP_DIR/config.yaml\"\n\
         cat src/model.py; ls -A; test -x src/run.sh && echo executable\n\
         touch written-by-the-job\n",
    )
    .unwrap();
    std::fs::create_dir_all(exp.join("src")).unwrap();
    std::fs::write(exp.join("src/model.py"), "print('model')\n").unwrap();
    std::fs::write(exp.join("src/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        exp.join("src/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(exp.join(".env"), "NOT_SHIPPED=1\n").unwrap();
    let valid = run(&cluster, h, &["validate", "--remote", "exp"]);
    assert!(valid.status.success(), "{}", both(&valid));
    assert!(
        gpuctl::stdout(&valid).contains("ships 5 files"),
        "{}",
        both(&valid)
    );
    let submitted = run(&cluster, h, &["--json", "job", "submit", "--exp", "exp"]);
    assert!(submitted.status.success(), "{}", both(&submitted));
    let job = gpuctl::json(&submitted);
    let id = job["id"].as_str().unwrap();
    assert_eq!(job["spec"]["recipe"]["shipped"]["files"], 5, "{job}");
    cluster.wait_for(id, JobStatus::Succeeded).await;
    let said = cluster.output(id, "stdout").await;
    let shipped = said[0]
        .strip_prefix("exp=")
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_string();
    assert!(shipped.ends_with(&format!("/{id}/exp")), "{said:?}");
    let expected = [
        &format!("exp={shipped} work={shipped} lr=0.0003 model=org/model"),
        "learning_rate: 0.0003",
        "print('model')",
        "config.yaml",
        "experiment.toml",
        "src",
        "train.sh",
        "executable",
    ];
    assert_eq!(said, expected);
    assert!(!exp.join("written-by-the-job").exists(), "the job ran in a copy");
    let shown = run(&cluster, h, &["job", "show", id]);
    assert!(
        gpuctl::stdout(&shown)
            .contains("recipe     sft v1; its experiment folder shipped with the job (5 files, "),
        "{}",
        both(&shown)
    );
    let (_, run_json) = cluster
        .get(&format!("/runs/{}", job["run_id"].as_str().unwrap()))
        .await;
    assert_eq!(run_json["config"]["recipe.name"], "sft");
    assert_eq!(run_json["config"]["learning_rate"], 0.0003);

    // v2: the v1 lock is drift (exit 9); status names the changes.
    let published = run(&cluster, h, &["recipe", "publish", "recipes/sft.v2.toml"]);
    assert!(published.status.success(), "{}", both(&published));
    let drift = run(&cluster, h, &["job", "submit", "--exp", "exp"]);
    assert_eq!(drift.status.code(), Some(9), "{}", both(&drift));
    assert!(gpuctl::stderr(&drift).contains("v1") && gpuctl::stderr(&drift).contains("v2"));
    assert!(
        gpuctl::stderr(&drift).contains("`gpuctl recipe upgrade exp`"),
        "the folder is named: {}",
        both(&drift)
    );
    let status = run(&cluster, h, &["recipe", "status", "exp"]);
    let said = gpuctl::stdout(&status);
    for part in [
        "runtime: torch-2.4-cu124 → torch-2.5-cu124",
        "key added: seed (default 0)",
        "gpus: maximum 8 → 16",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    let upgraded = run(&cluster, h, &["recipe", "upgrade", "exp"]);
    assert!(upgraded.status.success(), "{}", both(&upgraded));
    assert!(
        gpuctl::stdout(&upgraded).contains("v1 → v2"),
        "{}",
        both(&upgraded)
    );
    let config = std::fs::read_to_string(exp.join("config.yaml")).unwrap();
    assert!(
        config.contains("learning_rate: 0.0003") && config.contains("seed: 0"),
        "{config}"
    );
    let again = run(&cluster, h, &["--json", "job", "submit", "--exp", "exp"]);
    assert!(again.status.success(), "{}", both(&again));
    let job = gpuctl::json(&again);
    let done = cluster
        .wait_for(job["id"].as_str().unwrap(), JobStatus::Succeeded)
        .await;
    assert_eq!(done.spec.recipe.unwrap().version, 2);
    // The runs filter and compare by recipe version.
    let listed = run(
        &cluster,
        h,
        &[
            "--json",
            "run",
            "list",
            "--where",
            "config.recipe.version = 2",
            "--columns",
            "config.recipe.version",
        ],
    );
    assert!(listed.status.success(), "{}", both(&listed));
    let runs = gpuctl::json(&listed);
    let ids: Vec<&str> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [job["run_id"].as_str().unwrap()], "{runs}");

    // A v3 whose schema refuses the user's value stops the upgrade, writing nothing.
    let v3 = fixture("sft.v2.toml")
        .replace("version = 2", "version = 3")
        .replace("maximum = 1\n", "maximum = 0.0001\n");
    std::fs::write(files.join("sft.v3.toml"), v3).unwrap();
    let published = run(&cluster, h, &["recipe", "publish", "recipes/sft.v3.toml"]);
    assert!(published.status.success(), "{}", both(&published));
    let lock_before = std::fs::read_to_string(exp.join("experiment.toml")).unwrap();
    let stopped = run(
        &cluster,
        h,
        &["job", "submit", "--exp", "exp", "--upgrade-recipe"],
    );
    assert_eq!(stopped.status.code(), Some(7), "{}", both(&stopped));
    assert!(
        gpuctl::stderr(&stopped).contains("config.learning_rate"),
        "{}",
        both(&stopped)
    );
    assert_eq!(
        std::fs::read_to_string(exp.join("experiment.toml")).unwrap(),
        lock_before
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_model_is_refused_until_a_granted_hub_token_is_linked_and_the_job_gets_it() {
    use gpuplane_testkit::hub::{HubStandIn, Repo};
    use std::io::Write;
    let hub = HubStandIn::start(
        vec![Repo::gated("model", "meta/gated", &["hf_granted"])],
        &[("hf_granted", "ada")],
    )
    .await;
    let hub_url = hub.url.clone();
    let cluster = Cluster::start_with(move |config| config.settings.hf_endpoint = hub_url).await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::write(h.join("sft.toml"), fixture("sft.v1.toml")).unwrap();
    assert!(
        run(&cluster, h, &["recipe", "publish", "sft.toml"])
            .status
            .success()
    );
    assert!(
        run(&cluster, h, &["exp", "init", "exp", "--recipe", "sft"])
            .status
            .success()
    );
    let exp = h.join("exp");
    std::fs::write(exp.join("config.yaml"), "base_model: meta/gated\n").unwrap();
    std::fs::write(
        exp.join("train.sh"),
        "test \"$HF_TOKEN\" = hf_granted && echo token-reached-the-job\n",
    )
    .unwrap();

    // Offline the id is well-formed; the server refuses it on its key.
    assert!(gpuctl::gpuctl(h, &["validate", "exp"]).status.success());
    let refused = run(&cluster, h, &["job", "submit", "--exp", "exp"]);
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    assert!(
        gpuctl::stderr(&refused).contains("is gated and you have linked no Hub token"),
        "{}",
        both(&refused)
    );

    // `gpuctl hf link` reads the token from stdin, never from its arguments.
    let mut link = gpuctl::command(h)
        .args(["hf", "link"])
        .env("GPUCTL_SERVER", &cluster.server.url)
        .env("GPUCTL_TOKEN", &cluster.token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    link.stdin.take().unwrap().write_all(b"hf_granted\n").unwrap();
    let linked = link.wait_with_output().unwrap();
    assert!(linked.status.success(), "{}", both(&linked));
    assert!(
        gpuctl::stdout(&linked).contains("account ada"),
        "{}",
        both(&linked)
    );
    assert!(!both(&linked).contains("hf_granted"));
    let status = run(&cluster, h, &["hf", "status"]);
    assert!(
        gpuctl::stdout(&status).contains("Hub token linked (account ada)"),
        "{}",
        both(&status)
    );

    let submitted = run(&cluster, h, &["--json", "job", "submit", "--exp", "exp"]);
    assert!(submitted.status.success(), "{}", both(&submitted));
    let id = gpuctl::json(&submitted)["id"].as_str().unwrap().to_string();
    cluster.wait_for(&id, JobStatus::Succeeded).await;
    assert_eq!(cluster.output(&id, "stdout").await, vec!["token-reached-the-job"]);
}
