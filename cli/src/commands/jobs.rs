//! `gpuctl job submit|list|show|cancel|retry`.

use crate::Output;
use crate::client::{CliError, Client};
use crate::commands::runs::best_text;
use crate::exit::Failure;
use clap::{Args, Subcommand};
use gpuplane_api::Page;
use gpuplane_api::job::{
    CancelRequest, Job, JobKind, JobSpec, JobStatus, RetryRequest, Runner, SetPriority, image_is_pinned,
};
use std::fmt::Write;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Queue a job: `gpuctl job submit --gpus 1 -- python train.py`.
    Submit(Box<SubmitArgs>),
    /// Jobs, newest first.
    List {
        /// Only jobs in this state (QUEUED, RUNNING, FAILED, ...).
        #[arg(long)]
        status: Option<JobStatus>,
        #[arg(long)]
        project: Option<String>,
        /// newest (default) or primary_metric (best run first).
        #[arg(long, value_parser = crate::commands::parse_sort)]
        sort: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Jobs of archived runs (`gpuctl run archive`) instead of the others.
        #[arg(long)]
        archived: bool,
        /// Only the tasks of this job array (`arr_…`).
        #[arg(long, value_name = "ARRAY_ID")]
        array: Option<String>,
    },
    /// A job's spec, state, queued reason and attempts (an array id: its tasks by state).
    Show { job_id: String },
    /// Cancel a job (a running one gets SIGTERM, then SIGKILL); an array id cancels every task.
    Cancel {
        job_id: String,
        /// Required: cancelling stops a running job.
        #[arg(long)]
        confirm: bool,
    },
    /// Queue a FAILED, LOST or CANCELLED job for another attempt.
    Retry {
        job_id: String,
        /// Change a field first: env.NAME=V, resources.gpu=N, command="python train.py --bs 16", … (repeatable).
        #[arg(long = "set", value_parser = key_value)]
        set: Vec<(String, String)>,
        /// Retry an out-of-memory failure unchanged anyway.
        #[arg(long)]
        force: bool,
    },
    /// Change a QUEUED job's priority (higher runs first).
    SetPriority {
        job_id: String,
        #[arg(allow_negative_numbers = true)]
        priority: i64,
    },
    /// Keep a QUEUED job from starting until it is released.
    Hold { job_id: String },
    /// Let a held job start again.
    Release { job_id: String },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A job spec file (.toml, .yaml/.yml or .json); flags override its fields.
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// An experiment folder (`gpuctl exp init`): its recipe makes the job;
    /// --name, --project, --priority, --tag and --allow-dirty apply.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["file", "command", "gpus", "nodes", "kind", "env", "secret_env", "working_dir", "image", "runner", "watch", "selector"])]
    exp: Option<PathBuf>,
    /// With --exp: move the folder to the recipe's newest version first
    /// (as `gpuctl recipe upgrade DIR`).
    #[arg(long, requires = "exp")]
    upgrade_recipe: bool,
    /// Where the job also reports its metrics (http(s) URL); the run page
    /// links to it. Required for recipes with external observability.
    #[arg(long, value_name = "URL")]
    observability_url: Option<String>,
    /// Job name (default: the program's name).
    #[arg(long)]
    name: Option<String>,
    /// TRAIN (default) or EVALUATE.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<JobKind>,
    #[arg(long)]
    project: Option<String>,
    /// GPUs on one node; 0 runs in the cpu_only lane.
    #[arg(long, allow_hyphen_values = true)]
    gpus: Option<i64>,
    /// Nodes to run on at once, --gpus on each (default 1): a multi-node
    /// job whose members all start together, with torchrun's variables set
    /// (with --runner slurm: one `sbatch --nodes N` allocation).
    #[arg(long, allow_hyphen_values = true)]
    nodes: Option<i64>,
    /// A job array, a task per index: `0-99%8` (at most 8 at once),
    /// `1,3,5`, `0-98:2`; each sees GPUCTL_ARRAY_INDEX.
    #[arg(long, value_name = "INDICES")]
    array: Option<String>,
    /// With --nodes: a node label all its members must share one value of
    /// (e.g. `rack`).
    #[arg(long, value_name = "LABEL")]
    colocate: Option<String>,
    /// Higher runs first.
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i64>,
    /// Automatic retries: total attempts allowed.
    #[arg(long, allow_hyphen_values = true)]
    max_attempts: Option<i64>,
    /// Seconds between a failure and its automatic retry.
    #[arg(long, allow_hyphen_values = true)]
    retry_cooldown: Option<i64>,
    /// Stop each attempt after this long (2h, 90m, 1h30m, or seconds): SIGTERM,
    /// then SIGKILL after the grace; it fails with TIMEOUT.
    #[arg(long, value_parser = gpuplane_api::duration::parse_seconds)]
    time_limit: Option<i64>,
    /// When its steps stop advancing while it runs (JOB_HUNG): warn (the
    /// event alone, default) or restart (stop it and retry from its last
    /// checkpoint; needs --max-attempts 2 or more).
    #[arg(long, value_parser = ["warn", "restart"])]
    on_hang: Option<String>,
    /// Start only after JOB succeeds, or after any end with JOB:finished (repeatable).
    #[arg(long = "after", value_parser = parse_after)]
    after: Vec<String>,
    /// Absolute path on the agent host (never rewritten from this machine).
    #[arg(long = "workdir", alias = "working-dir")]
    working_dir: Option<String>,
    /// Environment variable for the job, KEY=VALUE (repeatable).
    #[arg(long = "env", value_parser = key_value)]
    env: Vec<(String, String)>,
    /// Secret variable for the job, NAME=VALUE, or NAME to take the value
    /// from this shell's environment (repeatable). Stored encrypted, never
    /// shown back, masked in the job's output.
    #[arg(long = "secret-env", value_parser = secret_value)]
    secret_env: Vec<(String, String)>,
    /// Node label the job needs, KEY=VALUE (repeatable).
    #[arg(long = "selector", value_parser = key_value)]
    selector: Vec<(String, String)>,
    /// TensorBoard / checkpoint directory to watch (repeatable).
    #[arg(long = "watch")]
    watch: Vec<String>,
    /// `offline`: the job's `wandb` package logs offline and the agent reads
    /// its files into the job's run (history, config, summary).
    #[arg(long, value_parser = parse_wandb)]
    wandb: Option<gpuplane_api::job::WandbMode>,
    /// A tag for the job's run, e.g. `baseline` (repeatable).
    #[arg(long = "tag")]
    tag: Vec<String>,
    /// process (default), docker, or slurm (an agent started with `--runner slurm`).
    #[arg(long, value_parser = parse_runner)]
    runner: Option<Runner>,
    /// Slurm partition, when the job runs through Slurm.
    #[arg(long, value_name = "NAME")]
    slurm_partition: Option<String>,
    /// Slurm account, when the job runs through Slurm.
    #[arg(long, value_name = "NAME")]
    slurm_account: Option<String>,
    /// Slurm QOS, when the job runs through Slurm.
    #[arg(long, value_name = "NAME")]
    slurm_qos: Option<String>,
    /// Image for the docker runner.
    #[arg(long)]
    image: Option<String>,
    /// Submit from a git checkout with uncommitted changes anyway (the job
    /// records that its tree was dirty).
    #[arg(long)]
    allow_dirty: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
}

pub fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}

/// `NAME=VALUE`, or `NAME` with the value of that variable here (so the
/// secret never appears in this command's arguments).
fn secret_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) => Ok((name.to_string(), value.to_string())),
        None => std::env::var(text)
            .map(|value| (text.to_string(), value))
            .map_err(|_| format!("`{text}` is not NAME=VALUE and no variable {text} is set here")),
    }
}

/// `JOB`, `JOB:succeeded` or `JOB:finished`, checked here as the server checks it.
fn parse_after(text: &str) -> Result<String, String> {
    text.parse::<gpuplane_api::job::Dependency>()?;
    Ok(text.trim().to_string())
}

fn parse_kind(text: &str) -> Result<JobKind, String> {
    match text.to_ascii_uppercase().as_str() {
        "TRAIN" => Ok(JobKind::Train),
        "EVALUATE" => Ok(JobKind::Evaluate),
        _ => Err(format!("unknown kind `{text}`; expected TRAIN or EVALUATE")),
    }
}

fn parse_runner(text: &str) -> Result<Runner, String> {
    match text {
        "process" => Ok(Runner::Process),
        "docker" => Ok(Runner::Docker),
        "slurm" => Ok(Runner::Slurm),
        _ => Err(format!(
            "unknown runner `{text}`; expected process, docker or slurm"
        )),
    }
}

/// A job spec file (.toml, .yaml/.yml or .json); an unknown key is named
/// with the closest known one.
pub fn read_spec_file(path: &std::path::Path) -> Result<JobSpec, CliError> {
    let invalid = |message: String| CliError::new(Failure::Invalid, "invalid_spec", message);
    let text = std::fs::read_to_string(path)
        .map_err(|error| invalid(format!("cannot read {}: {error}", path.display())))?;
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    let parsed: Result<JobSpec, String> = match extension {
        "toml" => toml::from_str(&text).map_err(|e| e.to_string()),
        "yaml" | "yml" => serde_yaml::from_str(&text).map_err(|e| e.to_string()),
        "json" => serde_json::from_str(&text).map_err(|e| e.to_string()),
        _ => Err("the file must end in .toml, .yaml, .yml or .json".into()),
    };
    parsed.map_err(|error| {
        let hint = did_you_mean(&error)
            .map(|hint| format!(" ({hint})"))
            .unwrap_or_default();
        invalid(format!("{}: {}{hint}", path.display(), error.trim_end()))
    })
}

/// For serde's "unknown field `comand`, expected one of `name`, `command`, …":
/// "did you mean `command`?", when one known name is close.
pub fn did_you_mean(error: &str) -> Option<String> {
    let rest = error.split("unknown field `").nth(1)?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.split_once("expected")?.1;
    let candidates = expected.split('`').skip(1).step_by(2);
    let best = gpuplane_api::spec::closest(unknown, candidates)?;
    Some(format!("did you mean `{best}`?"))
}

/// Records the git checkout gpuctl runs in (unless the spec names one): a
/// tree with uncommitted changes to tracked files is refused unless
/// `allow_dirty`; untracked files are only a warning.
fn record_checkout(spec: &mut JobSpec, allow_dirty: bool) -> Result<(), CliError> {
    if spec.git.is_some() {
        return Ok(());
    }
    if let Ok(dir) = std::env::current_dir() {
        spec.git = checkout_of(&dir, allow_dirty)?;
    }
    Ok(())
}

/// The git checkout `dir` is in, if any: refused when tracked files have
/// uncommitted changes unless `allow_dirty`; untracked files are a warning.
pub fn checkout_of(
    dir: &std::path::Path,
    allow_dirty: bool,
) -> Result<Option<gpuplane_api::job::GitSource>, CliError> {
    let Some(checkout) = crate::git::checkout(dir) else {
        return Ok(None);
    };
    let short = &checkout.source.commit[..12.min(checkout.source.commit.len())];
    if !checkout.changed.is_empty() && !allow_dirty {
        return Err(CliError::new(
            Failure::Invalid,
            "dirty_tree",
            format!(
                "this git checkout has uncommitted changes ({}): the job could not be traced to commit {short}. \
                 Commit them, or submit with --allow-dirty (the job then records a dirty tree)",
                crate::git::some_of(&checkout.changed, 5)
            ),
        ));
    }
    if !checkout.untracked.is_empty() {
        eprintln!(
            "warning: files not in git are not part of commit {short}: {}",
            crate::git::some_of(&checkout.untracked, 5)
        );
    }
    Ok(Some(checkout.source))
}

/// The spec from the file (if any) with the flags on top.
fn build_spec(args: SubmitArgs) -> Result<JobSpec, CliError> {
    let invalid = |message: String| CliError::new(Failure::Invalid, "invalid_spec", message);
    let mut spec = match &args.file {
        Some(path) => read_spec_file(path)?,
        None => {
            let program = args.command.first().ok_or_else(|| {
                invalid("give the command after `--` (gpuctl job submit -- python train.py) or a spec file with -f".into())
            })?;
            let name = program.rsplit('/').next().unwrap_or(program).to_string();
            JobSpec::new(name, Vec::new())
        }
    };
    if !args.command.is_empty() {
        spec.command = args.command;
    }
    if let Some(name) = args.name {
        spec.name = name;
    }
    if let Some(kind) = args.kind {
        spec.kind = kind;
    }
    if let Some(project) = args.project {
        spec.project = project;
    }
    if let Some(gpus) = args.gpus {
        spec.resources.gpu = gpus;
    }
    if let Some(nodes) = args.nodes {
        spec.resources.nodes = nodes;
    }
    spec.array = args.array.or(spec.array);
    if let Some(label) = args.colocate {
        spec.resources.colocate = Some(label);
    }
    if let Some(priority) = args.priority {
        spec.priority = priority;
    }
    if let Some(max_attempts) = args.max_attempts {
        spec.max_attempts = max_attempts;
    }
    if let Some(cooldown) = args.retry_cooldown {
        spec.retry_cooldown_s = cooldown;
    }
    if let Some(limit) = args.time_limit {
        spec.time_limit_s = Some(limit);
    }
    match args.on_hang.as_deref() {
        Some("restart") => spec.on_hang = gpuplane_api::job::OnHang::Restart,
        Some(_) => spec.on_hang = gpuplane_api::job::OnHang::Warn,
        None => {}
    }
    spec.after.extend(args.after);
    if let Some(dir) = args.working_dir {
        spec.working_dir = Some(dir);
    }
    spec.env.extend(args.env);
    spec.secret_env.extend(args.secret_env);
    spec.node_selector.extend(args.selector);
    spec.watch_dirs.extend(args.watch);
    if let Some(mode) = args.wandb {
        spec.wandb = Some(mode);
    }
    spec.tags.extend(args.tag);
    if let Some(runner) = args.runner {
        spec.runner = runner;
    }
    if let Some(url) = args.observability_url {
        spec.observability_url = Some(url);
    }
    if let Some(image) = args.image {
        spec.image = Some(image);
    }
    if args.slurm_partition.is_some() || args.slurm_account.is_some() || args.slurm_qos.is_some() {
        let slurm = spec.slurm.get_or_insert_default();
        slurm.partition = args.slurm_partition.or(slurm.partition.take());
        slurm.account = args.slurm_account.or(slurm.account.take());
        slurm.qos = args.slurm_qos.or(slurm.qos.take());
    }
    Ok(spec)
}

pub async fn run(client: &Client, command: JobCommand, out: &Output) -> Result<(), CliError> {
    match command {
        JobCommand::Submit(args) => {
            let allow_dirty = args.allow_dirty;
            let job: Job = match args.exp.clone() {
                Some(dir) => {
                    let options = crate::commands::experiments::SubmitOptions {
                        name: args.name,
                        project: args.project,
                        priority: args.priority.unwrap_or(0),
                        tags: args.tag,
                        allow_dirty,
                        upgrade: args.upgrade_recipe,
                        observability_url: args.observability_url,
                    };
                    crate::commands::experiments::submit(client, &dir, options).await?
                }
                None => {
                    let mut spec = build_spec(*args)?;
                    record_checkout(&mut spec, allow_dirty)?;
                    client.post("jobs", &spec).await?
                }
            };
            if let Some(image) = job.spec.image.as_deref().filter(|image| !image_is_pinned(image)) {
                eprintln!(
                    "note: image {image} is not pinned by digest; `{image}@sha256:…` runs the very same image next time"
                );
            }
            out.emit(&job, |job| {
                if let Some(text) = crate::commands::arrays::submitted(job) {
                    return text;
                }
                format!(
                    "Submitted {} (run {}): {}{}\nFollow it: gpuctl logs -f {}",
                    job.id,
                    job.run_id,
                    job.status,
                    job.queued_reason
                        .as_deref()
                        .map(|r| format!(" — {r}"))
                        .unwrap_or_default(),
                    job.id
                )
            });
        }
        JobCommand::List {
            status,
            project,
            sort,
            limit,
            archived,
            array,
        } => {
            let mut path = format!("jobs?limit={limit}&archived={archived}");
            if let Some(array) = array {
                path.push_str(&format!("&array={array}"));
            }
            if let Some(status) = status {
                path.push_str(&format!("&status={status}"));
            }
            if let Some(project) = project {
                path.push_str(&format!("&project={project}"));
            }
            if let Some(sort) = sort {
                path.push_str(&format!("&sort={sort}"));
            }
            let page: Page<Job> = client.get(&path).await?;
            out.emit(&page, |page| render_list(&page.items));
        }
        JobCommand::Show { job_id } if crate::commands::arrays::is_array_id(&job_id) => {
            crate::commands::arrays::show(client, &job_id, out).await?;
        }
        JobCommand::Show { job_id } => {
            let job: Job = client.get(&format!("jobs/{job_id}")).await?;
            out.emit(&job, render_job);
        }
        JobCommand::Cancel { job_id, confirm } => {
            if !confirm {
                return Err(CliError::new(
                    Failure::Invalid,
                    "confirmation_required",
                    format!("cancelling stops the job: run `gpuctl job cancel {job_id} --confirm`"),
                ));
            }
            if crate::commands::arrays::is_array_id(&job_id) {
                return crate::commands::arrays::cancel(client, &job_id, out).await;
            }
            let job: Job = client
                .post(&format!("jobs/{job_id}/cancel"), &CancelRequest { confirm })
                .await?;
            out.emit(&job, |job| match job.status {
                JobStatus::Cancelled => format!("{} is CANCELLED.", job.id),
                _ => format!(
                    "{} is stopping (SIGTERM now, SIGKILL after the grace period).",
                    job.id
                ),
            });
        }
        JobCommand::Retry { job_id, set, force } => {
            let request = RetryRequest {
                force,
                set: set.into_iter().collect(),
            };
            let job: Job = client.post(&format!("jobs/{job_id}/retry"), &request).await?;
            out.emit(&job, |job| {
                if job.id != job_id {
                    // Someone else's job, changed: a new job of the caller's.
                    return format!(
                        "{} is a new job of yours, QUEUED: {job_id} is someone else's, so its changed spec runs as \
                         yours, without its secrets.",
                        job.id
                    );
                }
                format!(
                    "{} is QUEUED again for attempt {} of {}.",
                    job.id,
                    job.attempts.len() + 1,
                    job.max_attempts
                )
            });
        }
        JobCommand::SetPriority { job_id, priority } => {
            let job: Job = client
                .post(&format!("jobs/{job_id}/priority"), &SetPriority { priority })
                .await?;
            out.emit(&job, render_queued);
        }
        JobCommand::Hold { job_id } => {
            let job: Job = client.post(&format!("jobs/{job_id}/hold"), &()).await?;
            out.emit(&job, render_queued);
        }
        JobCommand::Release { job_id } => {
            let job: Job = client.post(&format!("jobs/{job_id}/release"), &()).await?;
            out.emit(&job, render_queued);
        }
    }
    Ok(())
}

/// A queued job after a change: its priority and why it waits.
fn render_queued(job: &Job) -> String {
    format!(
        "{} is {} with priority {}{}",
        job.id,
        job.status,
        job.priority,
        job.queued_reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

fn render_list(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return "No jobs.".to_string();
    }
    // The primary metric column appears once some job's run has one.
    let ranked = jobs.iter().any(|job| job.primary_metric.is_some());
    let mut text = format!(
        "{:<32} {:<20} {:<11} {:>4} {:>8}  {}{}\n",
        "ID",
        "NAME",
        "STATUS",
        "GPUS",
        "ATTEMPTS",
        if ranked {
            format!("{:<24} ", "PRIMARY (BEST)")
        } else {
            String::new()
        },
        "NODE / REASON"
    );
    for job in jobs {
        let last = job.attempts.last();
        let detail = match job.status {
            JobStatus::Queued => job.queued_reason.clone().unwrap_or_default(),
            // Held queued by Slurm: its reason says why it has not started.
            JobStatus::Dispatching if job.queued_reason.is_some() => {
                job.queued_reason.clone().unwrap_or_default()
            }
            JobStatus::Failed | JobStatus::Lost => format!(
                "{} {}",
                job.failure_reason.map(|r| r.as_str()).unwrap_or_default(),
                job.failure_detail.as_deref().unwrap_or_default()
            ),
            _ => last.map(|a| a.node.clone()).unwrap_or_default(),
        };
        let primary = if ranked {
            format!("{:<24} ", best_text(job.primary_metric.as_ref()))
        } else {
            String::new()
        };
        let _ = writeln!(
            text,
            "{:<32} {:<20} {:<11} {:>4} {:>8}  {primary}{}",
            job.id,
            truncate(&job.title(), 20),
            job.status.as_str(),
            job.resources.gpu,
            format!("{}/{}", job.attempts.len(), job.max_attempts),
            detail.trim()
        );
    }
    text
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        text.chars().take(width - 1).collect::<String>() + "…"
    }
}

fn render_job(job: &Job) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{}  {}  ({})", job.id, job.name, job.kind.as_str());
    let _ = writeln!(text, "status     {}", job.status);
    if let Some(reason) = &job.queued_reason {
        let _ = writeln!(text, "waiting    {reason}");
    }
    if let Some(reason) = job.failure_reason {
        let _ = writeln!(
            text,
            "failure    {reason}: {}",
            job.failure_detail.as_deref().unwrap_or_default()
        );
    }
    let _ = writeln!(text, "run        {}", job.run_id);
    if let Some(line) = crate::commands::arrays::task_line(job) {
        let _ = writeln!(text, "{line}");
    }
    if let Some(sweep) = &job.sweep {
        let _ = writeln!(
            text,
            "sweep      trial {} of {} (gpuctl sweep show {})",
            sweep.trial, sweep.id, sweep.id
        );
    }
    let nodes = match job.resources.nodes {
        1 => String::new(),
        n => format!(" on each of {n} nodes"),
    };
    let _ = writeln!(
        text,
        "project    {}   priority {}   gpus {}{nodes}",
        job.project, job.priority, job.resources.gpu
    );
    let _ = writeln!(text, "command    {}", shell_words(&job.spec.command));
    if let Some(dir) = &job.spec.working_dir {
        let _ = writeln!(text, "workdir    {dir}");
    }
    if let Some(recipe) = &job.spec.recipe {
        let folder = match (&recipe.shipped, &recipe.exp_dir) {
            (Some(shipped), _) => format!(
                "; its experiment folder shipped with the job ({} files, {} bytes)",
                shipped.files, shipped.bytes
            ),
            (None, Some(dir)) => format!("; its experiment folder at {dir}"),
            (None, None) => String::new(),
        };
        let _ = writeln!(text, "recipe     {} v{}{folder}", recipe.name, recipe.version);
    }
    if let Some(url) = &job.spec.observability_url {
        let _ = writeln!(text, "reports to {url}");
    }
    if !job.spec.after.is_empty() {
        let _ = writeln!(text, "after      {}", job.spec.after.join(", "));
    }
    if let Some(limit) = job.spec.time_limit_s {
        let _ = writeln!(
            text,
            "time limit {} per attempt (then SIGTERM, SIGKILL after the grace: TIMEOUT)",
            gpuplane_api::duration::format_seconds(limit)
        );
    }
    if !job.secret_env.is_empty() {
        let _ = writeln!(
            text,
            "secrets    {} (set; values are never shown)",
            job.secret_env.join(", ")
        );
    }
    let _ = writeln!(
        text,
        "submitted  {} by {}",
        job.created_at,
        job.submitted_by.as_deref().unwrap_or("?")
    );
    if let Some(git) = &job.spec.git {
        let _ = writeln!(text, "source     {}", git.describe());
    }
    let _ = writeln!(text, "attempts   {}", job.attempts_summary());
    for attempt in &job.attempts {
        let gpus: Vec<String> = attempt.gpus.iter().map(u32::to_string).collect();
        let ending = match (attempt.exit_code, &attempt.signal_name, attempt.signal) {
            (_, Some(name), Some(number)) => format!("signal {number} ({name})"),
            (_, None, Some(number)) => format!("signal {number}"),
            (Some(code), _, _) => format!("exit {code}"),
            _ => String::new(),
        };
        let _ = writeln!(
            text,
            "  #{} {:<10} node {}  gpus [{}]  started {}  ended {}  {}{}",
            attempt.n,
            attempt.status.as_str(),
            attempt.node,
            gpus.join(","),
            attempt.started_at.as_deref().unwrap_or("-"),
            attempt.ended_at.as_deref().unwrap_or("-"),
            ending,
            attempt
                .failure_detail
                .as_deref()
                .map(|d| format!("  — {d}"))
                .unwrap_or_default()
        );
        for member in &attempt.members {
            let gpus: Vec<String> = member.gpus.iter().map(u32::to_string).collect();
            let ending = match (member.exit_code, &member.signal_name, member.signal) {
                (_, Some(name), _) => format!("  {name}"),
                (_, None, Some(number)) => format!("  signal {number}"),
                (Some(code), _, _) => format!("  exit {code}"),
                _ => String::new(),
            };
            let _ = writeln!(
                text,
                "     rank {:<3} {:<10} node {} ({})  gpus [{}]{ending}",
                member.rank,
                member.state.as_str(),
                member.node,
                member.address.as_deref().unwrap_or("no address"),
                gpus.join(","),
            );
        }
        if let Some(resumed) = attempt.resumed() {
            let _ = writeln!(text, "     {resumed}");
        }
        if let Some(commit) = &attempt.git_commit {
            let _ = writeln!(text, "     ran commit {commit}");
        }
    }
    for warning in job.source_mismatches() {
        let _ = writeln!(text, "warning: {warning}");
    }
    text
}

/// The command as one might type it (quoted where needed).
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `offline`, for `--wandb`.
fn parse_wandb(text: &str) -> Result<gpuplane_api::job::WandbMode, String> {
    match text {
        "offline" => Ok(gpuplane_api::job::WandbMode::Offline),
        other => Err(format!(
            "`{other}`: the one mode is offline (W&B's servers are not reached from jobs)"
        )),
    }
}
