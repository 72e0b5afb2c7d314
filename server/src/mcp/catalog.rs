//! The tool catalog: each tool's name, the API operation behind it, what
//! it does to the cluster, what an assistant reads about it and whether
//! a call needs a confirmation.

use gpuplane_api::auth::Scope;

/// What a tool does to the cluster, for its annotations and its scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads only (`read` scope).
    Reads,
    /// Creates or changes something (`write` scope).
    Changes,
    /// Stops work that cannot be resumed (`write` scope).
    Destroys,
}

impl Effect {
    pub fn scope(self) -> Scope {
        match self {
            Effect::Reads => Scope::Read,
            Effect::Changes | Effect::Destroys => Scope::Write,
        }
    }
}

/// One tool: its name, the API operation behind it and what an assistant
/// should know to choose it.
pub struct ToolDef {
    pub name: &'static str,
    pub method: &'static str,
    /// The API path below `/api/v1`, with `{name}` parameters.
    pub path: &'static str,
    pub effect: Effect,
    pub description: &'static str,
    /// Values used when the caller leaves a parameter out (smaller answers
    /// than the API's defaults, which suit programs more than assistants).
    pub defaults: &'static [(&'static str, i64)],
    /// Another read joined to the answer: (its key in the answer, its API
    /// path, with this tool's path parameters).
    pub joined: Option<(&'static str, &'static str)>,
    /// Whether a call needs a confirmation from its `preview_` tool.
    pub confirm: Confirm,
}

/// Which calls of a tool need a confirmation: a token its preview tool
/// answers, bound to the MCP session, the tool, its arguments and a few
/// minutes (`confirm.rs`). The model cannot make one up, as it could a
/// `confirm: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    No,
    /// Every call (cancelling, retrying).
    Always,
    /// A call with a priority that may preempt running jobs.
    AtPreemptingPriority,
    /// This tool is the preview of the named one: it answers what that
    /// call would do and its confirmation, and changes nothing.
    PreviewOf(&'static str),
}

/// Every tool, in the order assistants see them.
pub const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "cluster_status",
        method: "GET",
        path: "/cluster",
        effect: Effect::Reads,
        description: "Overview of the cluster: nodes online/offline, GPUs total and free, jobs queued and \
            running, any maintenance message, the quotas that concern the caller with their usage, and \
            fair share's GPU time per project and user. Use it first to see whether a job can start soon.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "node_status",
        method: "GET",
        path: "/nodes",
        effect: Effect::Reads,
        description: "Every node (GPU host): status (ONLINE/OFFLINE), labels, its GPUs with memory, \
            utilisation and which job holds each, disk space, last heartbeat.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_jobs",
        method: "GET",
        path: "/jobs",
        effect: Effect::Reads,
        description: "Jobs, newest first: filter by status (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, \
            LOST), project, user or text in the id/name; sort=primary_metric ranks by each run's best \
            primary metric. Answers a page (`items`, `next_before` for the next page).",
        defaults: &[("limit", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "get_job",
        method: "GET",
        path: "/jobs/{job_id}",
        effect: Effect::Reads,
        description: "One job: its spec, status, queued reason (why it waits), attempts with node, GPUs, \
            exit code and failure reason, and its run id (for get_run, explain_failure, diagnose_run).",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_recipes",
        method: "GET",
        path: "/recipes",
        effect: Effect::Reads,
        description: "The recipe catalog the caller can see: versioned job templates a platform team \
            publishes, each with its versions (newest first, deprecated ones marked) and `latest`, the \
            newest version new experiments start from (get one with show_recipe).",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "show_recipe",
        method: "GET",
        path: "/recipes/{name}",
        effect: Effect::Reads,
        description: "A recipe's newest version: its config keys (type, default, bounds, description, \
            whether required, Hugging Face Hub ids), its rules (e.g. a batch size divisible by GPUs), \
            the job template and the contract an experiment locks.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "check_experiment",
        method: "POST",
        path: "/recipes/{name}/{version}/check",
        effect: Effect::Reads,
        description: "Check an experiment's config against a recipe version exactly as a submit would \
            (every bad key named at once, drift from a newer version, gated Hugging Face repos) and see \
            the job it would run and what would keep it waiting; queues nothing. Give `contract` from \
            show_recipe and `config` as a map of key to value.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "submit_job",
        method: "POST",
        path: "/jobs",
        effect: Effect::Changes,
        description: "Submit a training or evaluation job: `name` and `command` (an argv list, never run \
            through a shell) are required; `resources.gpu` GPUs (on each of `resources.nodes` nodes for a \
            multi-node job, whose members get torchrun's variables), `project`, `priority`, `env`, \
            `working_dir` (absolute, on the agent host), `watch_dirs` for TensorBoard files, `array` \
            (`0-99%8`: a task per index, each seeing GPUCTL_ARRAY_INDEX). The job is \
            queued and starts when GPUs are free. Invalid fields come back one by one. A priority that \
            may preempt running jobs needs the `confirmation` that preview_submit_job answers.",
        defaults: &[],
        joined: None,
        confirm: Confirm::AtPreemptingPriority,
    },
    ToolDef {
        name: "cancel_job",
        method: "POST",
        path: "/jobs/{job_id}/cancel",
        effect: Effect::Destroys,
        description: "Cancel a queued or running job (SIGTERM, then SIGKILL after the grace). Needs the \
            `confirmation` that preview_cancel_job answers for the same job_id (valid a few minutes, in \
            this session); show the user what the preview says before you cancel.",
        defaults: &[],
        joined: None,
        confirm: Confirm::Always,
    },
    ToolDef {
        name: "retry_job",
        method: "POST",
        path: "/jobs/{job_id}/retry",
        effect: Effect::Changes,
        description: "Queue a finished job again as a new attempt. `set` changes fields first (e.g. \
            {\"resources.gpu\": \"2\", \"env.BATCH_SIZE\": \"16\"}). A job that ran out of GPU memory is \
            refused unless something changed or `force` is true; the refusal carries the advice. Needs \
            the `confirmation` that preview_retry_job answers for the same arguments. Changes to someone \
            else's job submit a new job of yours, without their secrets.",
        defaults: &[],
        joined: None,
        confirm: Confirm::Always,
    },
    ToolDef {
        name: "set_job_priority",
        method: "POST",
        path: "/jobs/{job_id}/priority",
        effect: Effect::Changes,
        description: "Change a QUEUED job's priority: higher runs first, FIFO within a priority. \
            Answers the job with its new place's reason.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "hold_job",
        method: "POST",
        path: "/jobs/{job_id}/hold",
        effect: Effect::Changes,
        description: "Keep a QUEUED job from starting (it stays in the queue) until release_job.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "release_job",
        method: "POST",
        path: "/jobs/{job_id}/release",
        effect: Effect::Changes,
        description: "Let a held job start again when GPUs are free.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "tail_logs",
        method: "GET",
        path: "/jobs/{job_id}/logs",
        effect: Effect::Reads,
        description: "The newest output lines of a job (`tail`, default 100; `stream` stdout or stderr; \
            `attempt` for an earlier attempt; `rank` for one member of a multi-node job). Long answers are \
            cut with a note.",
        defaults: &[("tail", 100)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_runs",
        method: "GET",
        path: "/runs",
        effect: Effect::Reads,
        description: "Runs (of jobs and SDK scripts) with their config, tags, latest metrics and primary \
            metric: filter by project, tag or text (q); sort by any column, descending with a leading `-`: \
            `-eval/accuracy` (a metric's latest value), `config.lr`, `-primary` (best first), `duration`, \
            `newest` (default). Runs without a value come last. Answers a page (`items`, `next_before`).",
        defaults: &[("limit", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "get_run",
        method: "GET",
        path: "/runs/{run_id}",
        effect: Effect::Reads,
        description: "A run (the metrics of a job or SDK script): status, the latest value of each metric \
            with a flag for NaN/Inf, the primary metric and its best value, and its checkpoints.",
        defaults: &[],
        joined: Some(("checkpoints", "/runs/{run_id}/checkpoints")),
        confirm: Confirm::No,
    },
    ToolDef {
        name: "query_metric",
        method: "GET",
        path: "/runs/{run_id}/metrics",
        effect: Effect::Reads,
        description: "One metric of a run as downsampled buckets (min, max, last, count of NaN/Inf per \
            step range), so a curve's shape fits in a short answer; `from`/`to` zoom into a step range. \
            `max_points` (default 50) bounds the answer.",
        defaults: &[("max_points", 50)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "get_run_system",
        method: "GET",
        path: "/runs/{run_id}/system",
        effect: Effect::Reads,
        description: "The GPUs and processes of a run's job over time, from the agent's telemetry: per \
            attempt and GPU, utilisation, memory used, power, temperature and SM clock, and the job's \
            CPU and memory, as downsampled buckets (`field` picks one; `max_points`, default 20, bounds \
            each series). Use it to see whether a job keeps its GPUs busy.",
        defaults: &[("max_points", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_run_texts",
        method: "GET",
        path: "/runs/{run_id}/texts",
        effect: Effect::Reads,
        description: "Texts a run logged per step (generated samples, prompts; `run.log_text` in the \
            SDK), highest step first, with every key it logged texts under; `key` picks one, `limit` \
            (default 10) and `before` page.",
        defaults: &[("limit", 10)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "explain_failure",
        method: "GET",
        path: "/runs/{run_id}/failure",
        effect: Effect::Reads,
        description: "Why a failed run failed: the failure reason (OOM, NaN loss, lost node, exit code, \
            ...), the evidence (log lines, metric values) and concrete advice on what to change.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "diagnose_run",
        method: "GET",
        path: "/runs/{run_id}/diagnosis",
        effect: Effect::Reads,
        description: "Findings on a run, running or finished: NaN losses, silence (a hang), low GPU use, \
            full disks, lost nodes, each with evidence and advice.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_events",
        method: "GET",
        path: "/events",
        effect: Effect::Reads,
        description: "Events, newest first (job state changes, NaN losses, OOMs, nodes lost, disks \
            full): filter by run_id, job_id, severity (info, warning, critical) or kind.",
        defaults: &[("limit", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_alert_deliveries",
        method: "GET",
        path: "/alerts/deliveries",
        effect: Effect::Reads,
        description: "Alert messages sent to notification channels (webhook, Slack, email), newest first, \
            with their event, status (pending, sent, failed), tries and last error: filter by run_id, \
            job_id, channel or status. Use it to check whether the team was told about a failure.",
        defaults: &[("limit", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "set_primary_metric",
        method: "POST",
        path: "/runs/{run_id}/primary-metric",
        effect: Effect::Changes,
        description: "Choose the metric that ranks a run (`key`, e.g. eval/accuracy, and `goal`: max or \
            min); list_jobs with sort=primary_metric then ranks by it.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "create_evaluation",
        method: "POST",
        path: "/evaluations",
        effect: Effect::Changes,
        description: "Evaluate a checkpoint of a run: a job runs `command` with GPUCTL_CHECKPOINT set and \
            writes its results, which land on the run as eval/* metrics.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_evaluations",
        method: "GET",
        path: "/evaluations",
        effect: Effect::Reads,
        description: "Evaluations (of one run with run_id), newest first, with their status and results.",
        defaults: &[("limit", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "create_sweep",
        method: "POST",
        path: "/sweeps",
        effect: Effect::Changes,
        description: "Start a hyperparameter sweep, written as a W&B sweep file: `method` (grid, random, \
            tpe; W&B's bayes is tpe), `metric` {name, goal}, `parameters` (values, value, min/max, \
            distribution), `max_trials` (W&B's run_cap), `max_concurrent`, `early_terminate` {type: asha or \
            hyperband, min_step, max_step, reduction_factor}, and `job`: the job each trial runs, where \
            `${NAME}` in its command is the trial's value of parameter NAME. Trials are jobs of the \
            project; poor ones are stopped early (SWEEP_PRUNED).",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "list_sweeps",
        method: "GET",
        path: "/sweeps",
        effect: Effect::Reads,
        description: "Sweeps (of one project with `project`), newest first: state, trials by state, best trial.",
        defaults: &[("limit", 20)],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "get_sweep",
        method: "GET",
        path: "/sweeps/{sweep_id}",
        effect: Effect::Reads,
        description: "One sweep: its best trial and every trial's parameters, state, metric value, step \
            and the rungs it reached.",
        defaults: &[],
        joined: None,
        confirm: Confirm::No,
    },
    ToolDef {
        name: "control_sweep",
        method: "POST",
        path: "/sweeps/{sweep_id}/{action}",
        effect: Effect::Destroys,
        description: "`pause` a sweep (no new trials; running ones go on), `resume` it, or `stop` it \
            (it ends and its queued and running trials are cancelled). Needs the \
            `confirmation` that preview_control_sweep answers for the same arguments.",
        defaults: &[],
        joined: None,
        confirm: Confirm::Always,
    },
    ToolDef {
        name: "preview_control_sweep",
        method: "POST",
        path: "/sweeps/{sweep_id}/{action}",
        effect: Effect::Changes,
        description: "What control_sweep would act on (it changes nothing): the sweep as it is, and the \
            `confirmation` control_sweep needs for exactly these arguments.",
        defaults: &[],
        joined: None,
        confirm: Confirm::PreviewOf("control_sweep"),
    },
    ToolDef {
        name: "preview_cancel_job",
        method: "POST",
        path: "/jobs/{job_id}/cancel",
        effect: Effect::Changes,
        description: "What cancel_job would do to a job (it changes nothing), and the `confirmation` \
            cancel_job needs for it: valid a few minutes, in this session, for this job only.",
        defaults: &[],
        joined: None,
        confirm: Confirm::PreviewOf("cancel_job"),
    },
    ToolDef {
        name: "preview_retry_job",
        method: "POST",
        path: "/jobs/{job_id}/retry",
        effect: Effect::Changes,
        description: "What retry_job would do with these arguments (it changes nothing): the job as it \
            is, and the `confirmation` retry_job needs for exactly these arguments.",
        defaults: &[],
        joined: None,
        confirm: Confirm::PreviewOf("retry_job"),
    },
    ToolDef {
        name: "preview_submit_job",
        method: "POST",
        path: "/jobs",
        effect: Effect::Changes,
        description: "Checks a job spec as submit_job would (it stores nothing) and says what would \
            keep it waiting; answers the `confirmation` submit_job needs for this exact spec when its \
            priority may preempt running jobs.",
        defaults: &[],
        joined: None,
        confirm: Confirm::PreviewOf("submit_job"),
    },
];
