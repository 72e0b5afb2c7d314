//! Sweeps: what the controller costs with 1,000 trials running at once, each
//! logging its metric. On the server library in this process with no
//! background task, so each of the controller's looks is timed alone:
//!
//! - proposals: the looks that make the 1,000 trials (each a job);
//! - decisions: every trial logs 10 steps of `loss` (and of `acc`, which
//!   the controller does not read) between looks, as a fast training loop
//!   logging 10 steps a second would; a look reads each trial's new points
//!   and ASHA decides on each one (a report before the trial's next rung
//!   goes on without being read). Decisions per second = reports logged /
//!   time in the looks before the first rung, while all 1,000 trials log;
//!   the looks after it go on to step 300, and a trial stopped early logs
//!   no more (its job is cancelled);
//! - the scheduling pass over 1,000 queued jobs beside the running trials,
//!   alone and while looks run back to back (the controller runs once a
//!   second; back to back is its worst case).

use crate::jobs::{bench_admin, register_nodes};
use crate::process::percentile;
use crate::report::{count, record, size};
use anyhow::Context;
use gpuplane_api::agent::{Report, ReportItem};
use gpuplane_api::job::JobSpec;
use gpuplane_api::metric::{Point, Value};
use gpuplane_api::project::Role;
use gpuplane_api::sweep::SweepSpec;
use gpuplane_server::identity::access::Principal;
use gpuplane_server::jobs::Handles;
use gpuplane_server::state::AppState;
use gpuplane_server::sweeps::controller;
use serde_json::json;
use std::collections::HashMap;
use std::time::Instant;

/// GPUs of each node `register_nodes` makes.
const GPUS_PER_NODE: usize = 8;
/// Steps each trial logs between two looks.
const STEPS_PER_LOOK: i64 = 10;
/// The looks before the first rung (step 30), while every trial logs.
const FULL_LOOKS: usize = 3;

pub async fn run() -> anyhow::Result<()> {
    let trials: usize = size(1000, 40);
    let looks: usize = size(30, FULL_LOOKS + 1);
    println!(
        "== sweep controller: {trials} trials running at once, {STEPS_PER_LOOK} steps each between looks"
    );
    let dir = tempfile::tempdir()?;
    let state = open_state(dir.path()).await?;
    let server = state.jobs();
    let admin = bench_admin(&state.db).await?;
    register_nodes(&state.db, trials.div_ceil(GPUS_PER_NODE)).await?;
    let sweep_id = create_sweep(&state, &admin, trials).await?;

    let started = Instant::now();
    let mut made = 0;
    while made < trials {
        made += controller::look(&server).await?.proposed;
    }
    let proposals_per_s = made as f64 / started.elapsed().as_secs_f64();
    println!("sweeps: {made} trials proposed, each a job: {proposals_per_s:.0} trials/s");
    record(
        "sweeps.proposals",
        format!("sweep controller: trials proposed (each a job submitted) per second, {trials} trials"),
        "trials/s",
        proposals_per_s,
    );
    start_trials(&state, &server, &admin, &sweep_id).await?;

    let runs = run_ids(&state, &admin, &sweep_id).await?;
    // Every trial logs until the first rung (step 30, the third look);
    // from then on ASHA stops most of them.
    let (mut decided, mut pruned, mut all_ms) = (0, 0, Vec::new());
    for round in 0..looks {
        let reports = log_round(&state, &sweep_id, &runs, round).await?;
        let started = Instant::now();
        let one = controller::look(&server).await?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if round < FULL_LOOKS {
            decided += reports;
            all_ms.push(ms);
        }
        pruned += one.pruned;
    }
    let decisions_per_s = decided as f64 / (all_ms.iter().sum::<f64>() / 1000.0);
    all_ms.sort_by(f64::total_cmp);
    let look_ms = percentile(&all_ms, 0.5);
    println!(
        "sweeps: a look while all {trials} trials log {STEPS_PER_LOOK} steps each: p50 {look_ms:.1} ms, {} decisions/s; {pruned} trials stopped early in {looks} looks",
        count(decisions_per_s as usize),
    );
    record(
        "sweeps.decisions",
        format!(
            "sweep controller: ASHA decisions per second, {trials} trials each logging {STEPS_PER_LOOK} steps between looks"
        ),
        "decisions/s",
        decisions_per_s,
    );
    record(
        "sweeps.look",
        format!(
            "sweep controller: one look (once a second) with {trials} trials each logging {STEPS_PER_LOOK} new steps"
        ),
        "ms",
        look_ms,
    );
    scheduling_beside_the_controller(&state, &server, &admin, &sweep_id, &runs, looks).await
}

/// The server's state over a fresh store (SQLite, or PostgreSQL when the
/// test environment names one), with none of its background tasks.
async fn open_state(dir: &std::path::Path) -> anyhow::Result<AppState> {
    let config = gpuplane_server::config::ServerConfig::with_defaults(dir.to_path_buf());
    gpuplane_server::config::prepare_data_dir(dir)?;
    let db = gpuplane_testkit::open_store(dir).await;
    let secret = gpuplane_server::identity::secrets::SecretKey::load_or_create(dir)?;
    let artifacts = gpuplane_server::mlflow::artifacts::ArtifactStore::open(&config.artifact_location)?;
    Ok(AppState::new(db, config, secret, artifacts))
}

/// A random search over a learning rate, every trial at once, ASHA from
/// step 30 with η 3 (rungs at 30, 90, 270).
async fn create_sweep(state: &AppState, admin: &Principal, trials: usize) -> anyhow::Result<String> {
    let spec: SweepSpec = serde_json::from_value(json!({
        "name": "bench",
        "method": "random",
        "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"lr": {"distribution": "log_uniform_values", "min": 0.0001, "max": 1.0}},
        "max_trials": trials,
        "max_concurrent": trials,
        "early_terminate": {"type": "asha", "min_step": 30, "reduction_factor": 3},
        "job": {"command": ["python3", "train.py", "--lr=${lr}"], "resources": {"gpu": 1}},
    }))?;
    let policy = state.config.job_policy();
    let (checked, _) = gpuplane_server::sweeps::check(&state.db, &policy, &spec, admin)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(gpuplane_server::sweeps::store::create(&state.db, &checked, &spec, admin).await?)
}

/// Places every trial's job and reports each started, as its agent would.
async fn start_trials(
    state: &AppState,
    server: &Handles,
    admin: &Principal,
    sweep_id: &str,
) -> anyhow::Result<()> {
    gpuplane_server::jobs::scheduler::pass(server).await?;
    let sweep = gpuplane_server::sweeps::store::get_for(&state.db, admin, sweep_id, Role::Viewer).await?;
    let mut started: HashMap<String, Vec<ReportItem>> = HashMap::new();
    for trial in &sweep.trials {
        let job = gpuplane_server::jobs::store::get(&state.db, &trial.job_id).await?;
        let attempt = job
            .attempts
            .last()
            .with_context(|| format!("trial {} was not placed", trial.number))?;
        started
            .entry(attempt.node_id.clone())
            .or_default()
            .push(ReportItem::Started {
                job_id: trial.job_id.clone(),
                attempt: attempt.n,
                pid: 4242,
                time: gpuplane_server::store::time::now_ms(),
                git_commit: None,
                master_port: None,
            });
    }
    for (node_id, items) in started {
        gpuplane_server::jobs::reports::apply_report(server, &Report { node_id, items }).await?;
    }
    Ok(())
}

/// Each trial's run id and learning rate.
async fn run_ids(state: &AppState, admin: &Principal, sweep_id: &str) -> anyhow::Result<Vec<(String, f64)>> {
    let sweep = gpuplane_server::sweeps::store::get_for(&state.db, admin, sweep_id, Role::Viewer).await?;
    Ok(sweep
        .trials
        .iter()
        .map(|t| {
            (
                t.run_id.clone(),
                t.params.get("lr").and_then(|v| v.as_f64()).unwrap_or(0.01),
            )
        })
        .collect())
}

/// Every trial not stopped early logs its next `STEPS_PER_LOOK` steps of
/// `loss` and `acc`, all at once, as through the ingest route; returns the
/// reports of `loss` logged, each one the controller decides on.
async fn log_round(
    state: &AppState,
    sweep_id: &str,
    runs: &[(String, f64)],
    round: usize,
) -> anyhow::Result<usize> {
    let pruned = controller_pruned(&state.db, sweep_id).await?;
    let mut sends = tokio::task::JoinSet::new();
    for (run_id, lr) in runs {
        if pruned.contains(run_id) {
            continue;
        }
        let first = round as i64 * STEPS_PER_LOOK + 1;
        let points: Vec<Point> = (first..first + STEPS_PER_LOOK)
            .flat_map(|step| {
                let loss = loss(*lr, step, run_id);
                [("loss", loss), ("acc", 1.0 - loss / 4.0)].map(|(key, value)| Point {
                    key: key.to_string(),
                    step,
                    wall_time: 1.7e9 + step as f64,
                    value: Value(value),
                })
            })
            .collect();
        let prepared =
            gpuplane_server::metrics::wire::prepare(format!("{run_id}-{round}"), &points, Vec::new())?;
        let writer = state.metric_writer.clone();
        let run_id = run_id.clone();
        sends.spawn(async move { writer.store((run_id, prepared)).await });
    }
    let reports = sends.len() * STEPS_PER_LOOK as usize;
    while let Some(sent) = sends.join_next().await {
        sent??;
    }
    Ok(reports)
}

/// The runs of trials the controller stopped early (their jobs may still
/// be stopping).
async fn controller_pruned(
    db: &gpuplane_server::store::Db,
    sweep_id: &str,
) -> anyhow::Result<std::collections::HashSet<String>> {
    use gpuplane_server::store::Db;
    let query = "SELECT j.run_id FROM sweep_trials t JOIN jobs j ON j.id = t.job_id
                 WHERE t.sweep_id = $1 AND t.pruned_step IS NOT NULL";
    let runs: Vec<String> = match db {
        Db::Sqlite(pool) => sqlx::query_scalar(query).bind(sweep_id).fetch_all(pool).await?,
        Db::Postgres(pool) => sqlx::query_scalar(query).bind(sweep_id).fetch_all(pool).await?,
    };
    Ok(runs.into_iter().collect())
}

/// A curve whose end depends on how far `lr` is from 0.01, with a little
/// noise of its own per run and step.
fn loss(lr: f64, step: i64, run_id: &str) -> f64 {
    let distance = (lr.ln() - 0.01f64.ln()).powi(2) / 20.0;
    let noise = (run_id
        .bytes()
        .fold(step as u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 1000) as f64
        / 1e5;
    distance + 2.0 / (1.0 + step as f64 / 20.0) + noise
}

/// The scheduling pass over 1,000 jobs that wait (every GPU is a trial's),
/// alone and while the controller looks back to back with trials logging.
async fn scheduling_beside_the_controller(
    state: &AppState,
    server: &Handles,
    admin: &Principal,
    sweep_id: &str,
    runs: &[(String, f64)],
    looks_done: usize,
) -> anyhow::Result<()> {
    let queued: usize = size(1000, 40);
    for i in 0..queued {
        let mut spec = JobSpec::new(format!("waiting-{i}"), vec!["true".into()]);
        spec.resources.gpu = 1;
        gpuplane_server::jobs::store::submit(&state.db, &state.secret, &spec, admin).await?;
    }
    let passes: usize = size(30, 3);
    let mut alone = Vec::new();
    for _ in 0..passes {
        let started = Instant::now();
        gpuplane_server::jobs::scheduler::pass(server).await?;
        alone.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let controller = {
        let (state, server) = (state.clone(), server.clone());
        let (sweep_id, runs) = (sweep_id.to_string(), runs.to_vec());
        tokio::spawn(async move {
            let mut round = looks_done;
            while !*stopped.borrow() {
                log_round(&state, &sweep_id, &runs, round).await?;
                controller::look(&server).await?;
                round += 1;
            }
            anyhow::Ok(round - looks_done)
        })
    };
    let mut beside = Vec::new();
    for _ in 0..passes {
        let started = Instant::now();
        gpuplane_server::jobs::scheduler::pass(server).await?;
        beside.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    stop.send(true)?;
    let rounds = controller.await??;
    alone.sort_by(f64::total_cmp);
    beside.sort_by(f64::total_cmp);
    let (alone, beside) = (percentile(&alone, 0.5), percentile(&beside, 0.5));
    println!(
        "sweeps: scheduling pass over {queued} waiting jobs beside {} running trials: p50 {alone:.2} ms alone, {beside:.2} ms while the controller looked back to back ({rounds} looks with logging)",
        runs.len()
    );
    record(
        "sweeps.pass_alone",
        format!(
            "scheduling pass, {queued} waiting jobs beside {} running trials, controller idle",
            runs.len()
        ),
        "ms",
        alone,
    );
    record(
        "sweeps.pass_beside",
        "the same pass while the controller looks back to back, trials logging".to_string(),
        "ms",
        beside,
    );
    Ok(())
}
