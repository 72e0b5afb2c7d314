//! The tools. Each is one API operation (a method and a path under
//! `/api/v1`): its input schema is built from that operation's parameters
//! and body in the OpenAPI document (so from the API's own types), and
//! calling it is that API request, made with the caller's own token.

use gpuplane_api::auth::Scope;
use gpuplane_api::error::FieldError;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};
use std::sync::Arc;

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

/// The argument that carries a confirmation.
pub const CONFIRMATION: &str = "confirmation";

/// A parameter's place in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Path,
    Query,
    Body,
}

/// A tool ready to list and call.
pub struct Prepared {
    pub def: &'static ToolDef,
    pub tool: Tool,
    params: Vec<(String, Place)>,
}

/// A request for the API, built from a tool's arguments.
#[derive(Debug)]
pub struct ApiCall {
    pub method: &'static str,
    /// Path and query, below `/api/v1`.
    pub path_and_query: String,
    pub body: Option<Value>,
    /// The joined read: its key in the answer and its path.
    pub joined: Option<(&'static str, String)>,
}

impl Prepared {
    /// The API request for `args`, or the fields that are wrong.
    pub fn call(&self, args: &JsonObject) -> Result<ApiCall, Vec<FieldError>> {
        let mut errors = Vec::new();
        for name in args.keys() {
            if !self.params.iter().any(|(param, _)| param == name) {
                errors.push(field(name, "unknown field: see the tool's input schema"));
            }
        }
        let mut path = self.def.path.to_string();
        let mut joined = self.def.joined.map(|(key, path)| (key, path.to_string()));
        let mut query = Vec::new();
        let mut body = Map::new();
        for (name, place) in &self.params {
            let value = args.get(name).cloned().or_else(|| {
                let (_, default) = self.def.defaults.iter().find(|(key, _)| key == name)?;
                Some(json!(default))
            });
            let Some(value) = value.filter(|value| !value.is_null()) else {
                if *place == Place::Path {
                    errors.push(field(name, "is required"));
                }
                continue;
            };
            match place {
                Place::Path => match value.as_str().filter(|id| valid_id(id)) {
                    Some(id) => {
                        path = path.replace(&format!("{{{name}}}"), id);
                        if let Some((_, joined_path)) = &mut joined {
                            *joined_path = joined_path.replace(&format!("{{{name}}}"), id);
                        }
                    }
                    None => errors.push(field(name, "must be an id such as the ones list tools answer")),
                },
                Place::Query => query.push((name.clone(), scalar_text(&value))),
                Place::Body => {
                    body.insert(name.clone(), value);
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if !query.is_empty() {
            path.push('?');
            path.push_str(&serde_urlencoded::to_string(&query).unwrap_or_default());
        }
        let has_body = self.params.iter().any(|(_, place)| *place == Place::Body);
        Ok(ApiCall {
            method: self.def.method,
            path_and_query: path,
            body: has_body.then_some(Value::Object(body)),
            joined,
        })
    }
}

fn field(name: &str, message: &str) -> FieldError {
    FieldError {
        field: name.to_string(),
        message: message.to_string(),
    }
}

/// Ids are ULID-like words: nothing that could change the path.
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && id != "."
        && id != ".."
}

/// A query parameter's text: strings as they are, numbers and booleans written out.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Every tool of [`TOOLS`], with its schema taken from `openapi` (the
/// API's own document, as JSON).
pub fn prepare(openapi: &Value) -> anyhow::Result<Vec<Prepared>> {
    TOOLS.iter().map(|def| prepare_one(openapi, def)).collect()
}

fn prepare_one(openapi: &Value, def: &'static ToolDef) -> anyhow::Result<Prepared> {
    let full_path = format!("{}{}", gpuplane_api::paths::PREFIX, def.path);
    let operation = openapi
        .pointer(&format!(
            "/paths/{}/{}",
            full_path.replace('~', "~0").replace('/', "~1"),
            def.method.to_lowercase()
        ))
        .ok_or_else(|| anyhow::anyhow!("tool {}: no {} {full_path} in the API", def.name, def.method))?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut params = Vec::new();
    for parameter in operation["parameters"].as_array().into_iter().flatten() {
        let name = parameter["name"].as_str().unwrap_or_default().to_string();
        let place = match parameter["in"].as_str() {
            Some("path") => Place::Path,
            Some("query") => Place::Query,
            other => anyhow::bail!("tool {}: parameter {name} in {other:?}", def.name),
        };
        let mut schema = parameter["schema"].clone();
        if let (Some(description), Some(object)) = (parameter["description"].as_str(), schema.as_object_mut())
        {
            object.insert("description".into(), description.into());
        }
        if let Some((_, default)) = def.defaults.iter().find(|(key, _)| *key == name)
            && let Some(object) = schema.as_object_mut()
        {
            object.insert("default".into(), json!(default));
        }
        if parameter["required"].as_bool() == Some(true) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), schema);
        params.push((name, place));
    }
    if let Some(body) = operation.pointer("/requestBody/content/application~1json/schema") {
        let body = resolve(openapi, body);
        for (name, schema) in body["properties"].as_object().into_iter().flatten() {
            properties.insert(name.clone(), schema.clone());
            params.push((name.clone(), Place::Body));
        }
        required.extend(body["required"].as_array().into_iter().flatten().cloned());
    }
    // `confirm: true` is the API's; an assistant's confirmation is a token.
    if properties.remove("confirm").is_some() {
        params.retain(|(name, _)| name != "confirm");
        required.retain(|name| name != "confirm");
    }
    if matches!(def.confirm, Confirm::Always | Confirm::AtPreemptingPriority) {
        properties.insert(
            CONFIRMATION.into(),
            json!({"type": "string", "description": format!(
                "The confirmation preview_{} answered for these same arguments.", def.name
            )}),
        );
    }
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let definitions = referenced_schemas(openapi, &mut schema);
    if !definitions.is_empty() {
        schema["$defs"] = Value::Object(definitions);
    }
    let Value::Object(schema) = schema else {
        unreachable!("built as an object")
    };
    let annotations = ToolAnnotations::new()
        .read_only(def.effect == Effect::Reads || matches!(def.confirm, Confirm::PreviewOf(_)))
        .destructive(def.effect == Effect::Destroys)
        .open_world(false);
    let tool = Tool::new(def.name, def.description, Arc::new(schema)).annotate(annotations);
    Ok(Prepared { def, tool, params })
}

/// `schema`, or what its `$ref` points at.
fn resolve<'a>(openapi: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => openapi.pointer(pointer).unwrap_or(schema),
        None => schema,
    }
}

const COMPONENT_PREFIX: &str = "#/components/schemas/";

/// Rewrites the API's `#/components/schemas/X` references in `schema` to
/// `#/$defs/X`, and answers every component they reach, rewritten too.
fn referenced_schemas(openapi: &Value, schema: &mut Value) -> Map<String, Value> {
    let mut definitions = Map::new();
    let mut pending = rewrite_refs(schema);
    while let Some(name) = pending.pop() {
        if definitions.contains_key(&name) {
            continue;
        }
        let mut component = openapi
            .pointer(&format!("/components/schemas/{name}"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        pending.extend(rewrite_refs(&mut component));
        definitions.insert(name, component);
    }
    definitions
}

/// Rewrites the references under `value` and answers the component names they name.
fn rewrite_refs(value: &mut Value) -> Vec<String> {
    let mut names = Vec::new();
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get_mut("$ref")
                && let Some(name) = reference.strip_prefix(COMPONENT_PREFIX).map(str::to_string)
            {
                *reference = format!("#/$defs/{name}");
                names.push(name);
            }
            for child in object.values_mut() {
                names.extend(rewrite_refs(child));
            }
        }
        Value::Array(items) => {
            for child in items {
                names.extend(rewrite_refs(child));
            }
        }
        _ => {}
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<Prepared> {
        let (_, doc) = crate::api::router();
        prepare(&serde_json::to_value(doc).unwrap()).unwrap()
    }

    fn args(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn every_tool_is_an_api_operation_with_a_self_contained_schema() {
        for prepared in tools() {
            let text = serde_json::to_string(&prepared.tool.input_schema).unwrap();
            assert!(!text.contains("#/components/"), "{}: {text}", prepared.def.name);
            for reference in text.split("\"#/$defs/").skip(1) {
                let name = reference.split('"').next().unwrap();
                assert!(
                    prepared.tool.input_schema["$defs"].get(name).is_some(),
                    "{}: $defs lacks {name}",
                    prepared.def.name
                );
            }
        }
    }

    #[test]
    fn submit_job_takes_the_job_spec_and_list_jobs_its_filters() {
        let tools = tools();
        let submit = tools.iter().find(|t| t.def.name == "submit_job").unwrap();
        let schema = &submit.tool.input_schema;
        assert_eq!(schema["required"], json!(["name", "command"]));
        assert_eq!(schema["properties"]["command"]["type"], "array");
        let list = tools.iter().find(|t| t.def.name == "list_jobs").unwrap();
        let call = list.call(&args(json!({"status": "RUNNING"}))).unwrap();
        assert_eq!(call.path_and_query, "/jobs?status=RUNNING&limit=20");
        assert!(call.body.is_none());
    }

    #[test]
    fn arguments_become_path_query_and_body() {
        let tools = tools();
        let retry = tools.iter().find(|t| t.def.name == "retry_job").unwrap();
        let call = retry
            .call(&args(
                json!({"job_id": "job_01", "force": true, "set": {"resources.gpu": "2"}}),
            ))
            .unwrap();
        assert_eq!(call.method, "POST");
        assert_eq!(call.path_and_query, "/jobs/job_01/retry");
        assert_eq!(
            call.body,
            Some(json!({"force": true, "set": {"resources.gpu": "2"}}))
        );
    }

    #[test]
    fn wrong_arguments_are_named() {
        let tools = tools();
        let get = tools.iter().find(|t| t.def.name == "get_job").unwrap();
        let errors = get.call(&args(json!({"jobid": "x"}))).unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["jobid", "job_id"]);
        let errors = get.call(&args(json!({"job_id": "../nodes"}))).unwrap_err();
        assert_eq!(errors[0].field, "job_id");
    }
}
