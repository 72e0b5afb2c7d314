//! The API's paths, built in one place for the clients that build them
//! (the console's pages): a typo is a compile error, not a 404.

/// The prefix of every API route.
pub const PREFIX: &str = "/api/v1";

pub fn alert_channels() -> String {
    format!("{PREFIX}/alerts/channels")
}

pub fn alert_subscriptions() -> String {
    format!("{PREFIX}/alerts/subscriptions")
}

/// Deliveries (`?status=&channel=&run_id=&job_id=&before=`).
pub fn alert_deliveries() -> String {
    format!("{PREFIX}/alerts/deliveries")
}

/// What each project keeps on the server.
pub fn project_usage() -> String {
    format!("{PREFIX}/projects/usage")
}

pub fn cluster() -> String {
    format!("{PREFIX}/cluster")
}

pub fn nodes() -> String {
    format!("{PREFIX}/nodes")
}

pub fn jobs() -> String {
    format!("{PREFIX}/jobs")
}

pub fn job(job_id: &str) -> String {
    format!("{PREFIX}/jobs/{job_id}")
}

/// `action` is `cancel`, `retry`, `priority`, `hold` or `release`.
pub fn job_action(job_id: &str, action: &str) -> String {
    format!("{PREFIX}/jobs/{job_id}/{action}")
}

pub fn array(array_id: &str) -> String {
    format!("{PREFIX}/arrays/{array_id}")
}

pub fn array_action(array_id: &str, action: &str) -> String {
    format!("{PREFIX}/arrays/{array_id}/{action}")
}

pub fn sweeps() -> String {
    format!("{PREFIX}/sweeps")
}

pub fn sweep(sweep_id: &str) -> String {
    format!("{PREFIX}/sweeps/{sweep_id}")
}

/// `action` is `pause`, `resume` or `stop`.
pub fn sweep_action(sweep_id: &str, action: &str) -> String {
    format!("{PREFIX}/sweeps/{sweep_id}/{action}")
}

/// The server's kept lines of a job (`?stream=&n=&attempt=`).
pub fn job_logs(job_id: &str) -> String {
    format!("{PREFIX}/jobs/{job_id}/logs")
}

pub fn job_logs_stream(job_id: &str) -> String {
    format!("{PREFIX}/jobs/{job_id}/logs/stream")
}

/// A whole output file, fetched from the job's agent.
pub fn job_logs_full(job_id: &str) -> String {
    format!("{PREFIX}/jobs/{job_id}/logs/full")
}

/// The run list (`?sort=&tag=&q=&config.KEY=`).
pub fn runs() -> String {
    format!("{PREFIX}/runs")
}

/// A scatter plot of runs (`?x=&y=` and the list's filters).
pub fn runs_scatter() -> String {
    format!("{PREFIX}/runs/scatter.svg")
}

pub fn run(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}")
}

/// A run's share links.
pub fn run_shares(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/shares")
}

pub fn run_share(run_id: &str, share_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/shares/{share_id}")
}

pub fn run_stream(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/stream")
}

/// A run's points or buckets of one metric (`?key=&max_points=&x=&from=&to=`).
pub fn run_metrics(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/metrics")
}

/// A run's chart; `format` is `svg` or `png`.
pub fn run_chart(run_id: &str, format: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/chart.{format}")
}

/// The telemetry of a run's job (`?field=&max_points=`).
pub fn run_system(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/system")
}

/// One telemetry field of a run's job as an SVG chart (`?field=`).
pub fn run_system_chart(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/system.svg")
}

/// A run's texts (`?key=&limit=&before=`).
pub fn run_texts(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/texts")
}

pub fn run_checkpoints(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/checkpoints")
}

/// Why a failed run failed, and what to do.
pub fn run_failure(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/failure")
}

pub fn run_diagnosis(run_id: &str) -> String {
    format!("{PREFIX}/runs/{run_id}/diagnosis")
}

pub fn evaluations() -> String {
    format!("{PREFIX}/evaluations")
}

pub fn events() -> String {
    format!("{PREFIX}/events")
}

pub fn events_stream() -> String {
    format!("{PREFIX}/events/stream")
}

pub fn maintenance() -> String {
    format!("{PREFIX}/maintenance")
}

/// `action` is `drain`, `undrain` or `labels`.
pub fn node_action(node: &str, action: &str) -> String {
    format!("{PREFIX}/nodes/{node}/{action}")
}

pub fn projects() -> String {
    format!("{PREFIX}/projects")
}

/// `GET /usage` (its query: `by`, `since`).
pub fn usage() -> String {
    format!("{PREFIX}/usage")
}

pub fn project_members(project: &str) -> String {
    format!("{PREFIX}/projects/{project}/members")
}

pub fn node_policies() -> String {
    format!("{PREFIX}/node-policies")
}

pub fn node_policy(project: &str) -> String {
    format!("{PREFIX}/projects/{project}/node-policy")
}

pub fn quotas() -> String {
    format!("{PREFIX}/quotas")
}

/// `kind` is `project` or `user`.
pub fn quota(kind: &str, name: &str) -> String {
    format!("{PREFIX}/quotas/{kind}/{name}")
}

pub fn users() -> String {
    format!("{PREFIX}/users")
}

pub fn user(name: &str) -> String {
    format!("{PREFIX}/users/{name}")
}

pub fn agent_tokens() -> String {
    format!("{PREFIX}/agent-tokens")
}

pub fn agent_token_revoke(token_id: &str) -> String {
    format!("{PREFIX}/agent-tokens/{token_id}/revoke")
}

pub fn audit() -> String {
    format!("{PREFIX}/audit")
}

pub fn openapi() -> String {
    format!("{PREFIX}/openapi.json")
}

pub fn recipes() -> String {
    format!("{PREFIX}/recipes")
}

pub fn recipe(name: &str) -> String {
    format!("{PREFIX}/recipes/{name}")
}

pub fn recipe_version(name: &str, version: i64) -> String {
    format!("{PREFIX}/recipes/{name}/{version}")
}

/// `action` is `check`, `jobs` or `deprecate`.
pub fn recipe_action(name: &str, version: i64, action: &str) -> String {
    format!("{PREFIX}/recipes/{name}/{version}/{action}")
}

pub fn hub() -> String {
    format!("{PREFIX}/hf")
}

pub fn hub_token() -> String {
    format!("{PREFIX}/hf/token")
}
