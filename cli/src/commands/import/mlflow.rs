//! `gpuctl import mlflow --tracking-uri URI`: the experiments and runs of a
//! running MLflow tracking server become GPUPlane runs. Both ends are read
//! and written through MLflow's REST API (`/api/2.0/mlflow/`, which
//! GPUPlane's server answers too), metric histories through GPUPlane's
//! batches, whose ids make a resent page add nothing.
//!
//! MLflow's `Default` experiment (id 0) goes to the project's own
//! experiment; any other to the project's named experiment of the same name
//! (made when missing). A run keeps its name, user, start and end times,
//! status, params, tags and every point of every metric (step, timestamp,
//! NaN and ±Inf); with `--artifacts`, the files MLflow's artifact proxy
//! serves (`mlflow-artifacts:` locations), streamed from one server to the
//! other.
//!
//! Idempotent and resumable: an imported run carries the tag
//! `gpuplane.import.source` (`mlflow:URI#RUN`) from its creation and
//! `gpuplane.import.done` once whole. A done run is skipped; one without it
//! (an import cut off) is completed: params and tags sent again (the same
//! values are accepted), history pages under the same batch ids (stored
//! once), artifacts already there with their size not copied again.

use super::{ImportReport, ImportedRun, Progress, one_line, short_id};
use crate::client::{CliError, Client, root_cause};
use crate::exit::Failure;
use gpuplane_api::experiment::MAX_RUN_NAME_LEN;
use gpuplane_api::metric::{Batch, IngestResult, Point, Value as MetricValue};
use gpuplane_api::mlflow::{
    DEFAULT_EXPERIMENT, ExperimentId, MAX_EXPERIMENT_NAME_LEN, PROJECT_TAG, experiment_id,
};
use reqwest::{Method, Url};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct MlflowArgs {
    /// The MLflow tracking server to copy from, as MLFLOW_TRACKING_URI
    /// (http or https). Its credentials, when it asks for some:
    /// MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and
    /// MLFLOW_TRACKING_PASSWORD.
    #[arg(long, value_name = "URI")]
    pub tracking_uri: String,
    /// Only the experiment of this name (repeatable); by default every
    /// active experiment.
    #[arg(long = "experiment", value_name = "NAME")]
    pub experiments: Vec<String>,
    /// The project the experiments go into (you must be one of its editors).
    #[arg(long, default_value = "default")]
    pub project: String,
    /// Also copy the runs' artifacts (those MLflow's artifact proxy serves).
    #[arg(long)]
    pub artifacts: bool,
}

/// The tag naming an imported run's source: `mlflow:URI#RUN`.
const SOURCE_TAG: &str = "gpuplane.import.source";
/// MLflow's tag that holds a run's name.
const RUN_NAME_TAG: &str = "mlflow.runName";
/// The tag an imported run gets once all of it was copied.
const DONE_TAG: &str = "gpuplane.import.done";
/// Points asked for (and sent) at once.
const HISTORY_PAGE: usize = 25_000;
/// MLflow's limits for one `log-batch`: 100 params, 100 tags.
const BATCH_ITEMS: usize = 100;

pub async fn import(
    client: &Client,
    args: &MlflowArgs,
    progress: &Progress,
) -> Result<ImportReport, CliError> {
    let source = Mlflow::source(&args.tracking_uri)?;
    let target = Mlflow::new(
        &client.server,
        client
            .token()
            .map_or(Auth::None, |token| Auth::Bearer(token.to_string())),
        "GPUPlane".into(),
    )?;
    let ours = experiments(&target, "ALL").await?;
    let experiments = chosen(experiments(&source, "ACTIVE_ONLY").await?, &args.experiments)?;
    let mut report = ImportReport {
        project: args.project.clone(),
        runs: Vec::new(),
        points_added: 0,
        artifacts_added: 0,
    };
    for (number, experiment) in experiments.iter().enumerate() {
        let name = one_line(&text(&experiment["name"]), MAX_EXPERIMENT_NAME_LEN);
        let into = target_experiment(&target, &args.project, experiment, &ours).await?;
        let imported = imported_runs(&target, &into).await?;
        let runs = runs(&source, &text(&experiment["experiment_id"])).await?;
        for (index, found) in runs.iter().enumerate() {
            let place = format!(
                "[{}/{}] {name}: run {}/{}",
                number + 1,
                experiments.len(),
                index + 1,
                runs.len()
            );
            progress.show(&place);
            let copy = RunCopy {
                source: &source,
                target: &target,
                client,
                progress,
                place,
            };
            let run = copy.run(found, &into, &name, &imported, args.artifacts).await?;
            report.points_added += run.points_added;
            report.artifacts_added += run.artifacts_added;
            report.runs.push(run);
        }
    }
    Ok(report)
}

/// One run's copy, with what it needs.
struct RunCopy<'a> {
    source: &'a Mlflow,
    target: &'a Mlflow,
    client: &'a Client,
    progress: &'a Progress,
    /// Where the import is, for the progress line.
    place: String,
}

impl RunCopy<'_> {
    async fn run(
        &self,
        found: &Value,
        into: &str,
        experiment: &str,
        imported: &BTreeMap<String, (String, bool)>,
        with_artifacts: bool,
    ) -> Result<ImportedRun, CliError> {
        let (info, data) = (&found["info"], &found["data"]);
        let source_id = text(&info["run_id"]);
        let name = match text(&info["run_name"]) {
            name if name.is_empty() => source_id.clone(),
            name => one_line(&name, MAX_RUN_NAME_LEN),
        };
        let key = format!("mlflow:{}#{source_id}", self.source.base);
        let (run_id, outcome) = match imported.get(&key) {
            Some((run_id, true)) => {
                return Ok(ImportedRun::new(
                    Some(experiment.into()),
                    name,
                    run_id.clone(),
                    "skipped",
                ));
            }
            Some((run_id, false)) => (run_id.clone(), "resumed"),
            None => {
                let created = self
                    .target
                    .post(
                        "runs/create",
                        &json!({
                            "experiment_id": into,
                            "run_name": name,
                            "start_time": info["start_time"],
                            "user_id": info["user_id"],
                            "tags": [{"key": SOURCE_TAG, "value": key}],
                        }),
                    )
                    .await?;
                (text(&created["run"]["info"]["run_id"]), "imported")
            }
        };
        let mut run = ImportedRun::new(Some(experiment.into()), name, run_id, outcome);
        self.log_batches(&run.run_id, "params", list(&data["params"]))
            .await?;
        // `mlflow.runName` names the run: it holds the name as imported.
        let tags: Vec<Value> = list(&data["tags"])
            .into_iter()
            .filter(|tag| ![SOURCE_TAG, DONE_TAG].contains(&tag["key"].as_str().unwrap_or_default()))
            .map(|tag| match tag["key"].as_str() {
                Some(RUN_NAME_TAG) => json!({"key": RUN_NAME_TAG, "value": run.name}),
                _ => tag,
            })
            .collect();
        self.log_batches(&run.run_id, "tags", tags).await?;
        let keys: BTreeSet<String> = list(&data["metrics"])
            .iter()
            .map(|metric| text(&metric["key"]))
            .collect();
        for metric in &keys {
            self.copy_history(&source_id, metric, &mut run).await?;
        }
        if with_artifacts {
            let ours = self.target.get("runs/get", &[("run_id", &run.run_id)]).await?;
            self.copy_artifacts(
                &text(&info["artifact_uri"]),
                &text(&ours["run"]["info"]["artifact_uri"]),
                &mut run,
            )
            .await?;
        }
        let status = text(&info["status"]);
        if ["FINISHED", "FAILED", "KILLED"].contains(&status.as_str()) {
            self.target
                .post(
                    "runs/update",
                    &json!({"run_id": run.run_id, "status": status, "end_time": info["end_time"]}),
                )
                .await?;
        }
        self.target
            .post(
                "runs/set-tag",
                &json!({"run_id": run.run_id, "key": DONE_TAG, "value": "true"}),
            )
            .await?;
        Ok(run)
    }

    /// Params or tags, at most MLflow's 100 to a `log-batch`.
    async fn log_batches(&self, run_id: &str, field: &str, items: Vec<Value>) -> Result<(), CliError> {
        for chunk in items.chunks(BATCH_ITEMS) {
            self.target
                .post("runs/log-batch", &json!({"run_id": run_id, field: chunk}))
                .await?;
        }
        Ok(())
    }

    /// Every point of one metric, page by page; page N is batch
    /// `mlflow:KEY:N` of the run.
    async fn copy_history(
        &self,
        source_run: &str,
        metric: &str,
        run: &mut ImportedRun,
    ) -> Result<(), CliError> {
        let page_size = HISTORY_PAGE.to_string();
        let mut token = String::new();
        for page in 0.. {
            let mut query = vec![
                ("run_id", source_run),
                ("metric_key", metric),
                ("max_results", page_size.as_str()),
            ];
            if !token.is_empty() {
                query.push(("page_token", &token));
            }
            let answer = self.source.get("metrics/get-history", &query).await?;
            let points: Vec<Point> = list(&answer["metrics"])
                .iter()
                .map(|point| Point {
                    key: metric.to_string(),
                    step: integer(&point["step"]).unwrap_or(0),
                    wall_time: integer(&point["timestamp"]).unwrap_or(0) as f64 / 1000.0,
                    value: MetricValue(number(&point["value"])),
                })
                .collect();
            if !points.is_empty() {
                let batch = Batch {
                    batch_id: format!("mlflow:{}:{page}", short_id(metric)),
                    points,
                    texts: Vec::new(),
                };
                let answer: IngestResult = self
                    .client
                    .post(&format!("runs/{}/metrics", run.run_id), &batch)
                    .await?;
                run.points_added += answer.accepted;
                self.progress.show(&format!(
                    "{} {}: {} point(s) added",
                    self.place, run.name, run.points_added
                ));
            }
            token = text(&answer["next_page_token"]);
            if token.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// The files under the source run's artifact location that the target
    /// run lacks (or holds with another size), folder by folder.
    async fn copy_artifacts(&self, from: &str, to: &str, run: &mut ImportedRun) -> Result<(), CliError> {
        let (Some(from), Some(to)) = (proxied_path(from), proxied_path(to)) else {
            run.warnings.push(format!(
                "artifacts at {from}: not served by the MLflow server's artifact proxy (mlflow-artifacts:), not copied"
            ));
            return Ok(());
        };
        let mut folders = vec![Vec::<String>::new()];
        while let Some(folder) = folders.pop() {
            let there: BTreeMap<String, (bool, Option<u64>)> = self.target.artifacts(&to, &folder).await?;
            for (name, (is_dir, size)) in self.source.artifacts(&from, &folder).await? {
                if !plain_part(&name) {
                    run.warnings.push(format!(
                        "artifact {name:?} in {}: not a plain name, not copied",
                        folder.join("/")
                    ));
                    continue;
                }
                let mut path = folder.clone();
                path.push(name.clone());
                if is_dir {
                    folders.push(path);
                } else if there.get(&name) != Some(&(false, size)) {
                    self.progress
                        .show(&format!("{} {}: {}", self.place, run.name, path.join("/")));
                    self.copy_file(&from, &to, &path, size).await?;
                    run.artifacts_added += 1;
                }
            }
        }
        Ok(())
    }

    /// Streams one file from the source's artifact proxy into the target's.
    async fn copy_file(
        &self,
        from: &str,
        to: &str,
        path: &[String],
        size: Option<u64>,
    ) -> Result<(), CliError> {
        let download = self.source.artifact_url(from, path)?;
        let response = self
            .source
            .send(self.source.request(Method::GET, download))
            .await?;
        let mut upload = self
            .target
            .request(Method::PUT, self.target.artifact_url(to, path)?)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
        if let Some(size) = size.or(response.content_length()) {
            upload = upload.header(reqwest::header::CONTENT_LENGTH, size);
        }
        let upload = upload.body(reqwest::Body::wrap_stream(response.bytes_stream()));
        self.target.send(upload).await?;
        Ok(())
    }
}

/// The experiments a server has, every page.
async fn experiments(server: &Mlflow, view_type: &str) -> Result<Vec<Value>, CliError> {
    let search = json!({"max_results": 1000, "view_type": view_type});
    server
        .every_page("experiments/search", search, "experiments")
        .await
}

/// The source's experiments the user named (all when none), each named one
/// required to exist.
fn chosen(experiments: Vec<Value>, names: &[String]) -> Result<Vec<Value>, CliError> {
    if names.is_empty() {
        return Ok(experiments);
    }
    for name in names {
        if !experiments
            .iter()
            .any(|experiment| experiment["name"] == name.as_str())
        {
            return Err(CliError::new(
                Failure::NotFound,
                "not_found",
                format!("the MLflow server has no active experiment named {name:?}"),
            ));
        }
    }
    Ok(experiments
        .into_iter()
        .filter(|experiment| names.iter().any(|name| experiment["name"] == name.as_str()))
        .collect())
}

/// The experiment of `project` that the source experiment's runs go to:
/// the project's own for MLflow's default, else the named one of the same
/// name, made when missing.
async fn target_experiment(
    target: &Mlflow,
    project: &str,
    source: &Value,
    ours: &[Value],
) -> Result<String, CliError> {
    if source["experiment_id"] == DEFAULT_EXPERIMENT {
        return Ok(experiment_id(project));
    }
    let name = one_line(&text(&source["name"]), MAX_EXPERIMENT_NAME_LEN);
    let same = ours.iter().find(|experiment| {
        experiment["name"] == name.as_str()
            && ExperimentId::parse(&text(&experiment["experiment_id"])).project() == project
    });
    if let Some(experiment) = same {
        if experiment["lifecycle_stage"] == "deleted" {
            return Err(CliError::new(
                Failure::Conflict,
                "conflict",
                format!(
                    "the experiment {name:?} of project {project} is deleted: restore it (MlflowClient().restore_experiment) or import into another project"
                ),
            ));
        }
        return Ok(text(&experiment["experiment_id"]));
    }
    let created = target
        .post(
            "experiments/create",
            &json!({"name": name, "tags": [{"key": PROJECT_TAG, "value": project}]}),
        )
        .await?;
    Ok(text(&created["experiment_id"]))
}

/// The runs of the target experiment made by an import, by source: (run,
/// whether it is whole).
async fn imported_runs(
    target: &Mlflow,
    experiment: &str,
) -> Result<BTreeMap<String, (String, bool)>, CliError> {
    let mut imported = BTreeMap::new();
    for run in runs(target, experiment).await? {
        let tags = list(&run["data"]["tags"]);
        let tag = |key: &str| {
            tags.iter()
                .find(|tag| tag["key"] == key)
                .map(|tag| text(&tag["value"]))
        };
        if let Some(source) = tag(SOURCE_TAG) {
            imported.insert(source, (text(&run["info"]["run_id"]), tag(DONE_TAG).is_some()));
        }
    }
    Ok(imported)
}

/// The active runs of an experiment, every page.
async fn runs(server: &Mlflow, experiment: &str) -> Result<Vec<Value>, CliError> {
    let search = json!({"experiment_ids": [experiment], "max_results": 1000, "run_view_type": "ACTIVE_ONLY"});
    server.every_page("runs/search", search, "runs").await
}

/// How requests prove who sends them.
enum Auth {
    None,
    Bearer(String),
    Basic(String, Option<String>),
}

/// An MLflow REST API: the source server's, or GPUPlane's own.
struct Mlflow {
    http: reqwest::Client,
    base: String,
    auth: Auth,
    /// Who answers, in errors: `MLflow at URI` or `GPUPlane`.
    who: String,
}

impl Mlflow {
    fn new(base: &str, auth: Auth, who: String) -> Result<Mlflow, CliError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(120))
            .user_agent(concat!("gpuctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| CliError::from(anyhow::Error::from(error)))?;
        Ok(Mlflow {
            http,
            base: base.trim_end_matches('/').to_string(),
            auth,
            who,
        })
    }

    /// The server at `uri`, with the credentials the mlflow client would use.
    fn source(uri: &str) -> Result<Mlflow, CliError> {
        if !(uri.starts_with("http://") || uri.starts_with("https://")) || Url::parse(uri).is_err() {
            return Err(CliError::new(
                Failure::Invalid,
                "invalid_input",
                format!("--tracking-uri {uri:?}: an MLflow tracking server's http:// or https:// address"),
            ));
        }
        let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let auth = match (
            variable("MLFLOW_TRACKING_TOKEN"),
            variable("MLFLOW_TRACKING_USERNAME"),
        ) {
            (Some(token), _) => Auth::Bearer(token),
            (None, Some(user)) => Auth::Basic(user, variable("MLFLOW_TRACKING_PASSWORD")),
            (None, None) => Auth::None,
        };
        Mlflow::new(uri, auth, format!("MLflow at {}", uri.trim_end_matches('/')))
    }

    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let request = self.http.request(method, url);
        match &self.auth {
            Auth::None => request,
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic(user, password) => request.basic_auth(user, password.as_deref()),
        }
    }

    fn url(&self, path: &str) -> Result<Url, CliError> {
        Url::parse(&format!("{}{path}", self.base)).map_err(|error| {
            CliError::new(
                Failure::Invalid,
                "invalid_input",
                format!("{}{path}: {error}", self.base),
            )
        })
    }

    async fn get(&self, endpoint: &str, query: &[(&str, &str)]) -> Result<Value, CliError> {
        let url = self.url(&format!("/api/2.0/mlflow/{endpoint}"))?;
        self.json(self.request(Method::GET, url).query(query)).await
    }

    async fn post(&self, endpoint: &str, body: &Value) -> Result<Value, CliError> {
        let url = self.url(&format!("/api/2.0/mlflow/{endpoint}"))?;
        self.json(self.request(Method::POST, url).json(body)).await
    }

    /// The `field` lists of every page a search answers.
    async fn every_page(
        &self,
        endpoint: &str,
        mut search: Value,
        field: &str,
    ) -> Result<Vec<Value>, CliError> {
        let mut all = Vec::new();
        loop {
            let answer = self.post(endpoint, &search).await?;
            all.extend(list(&answer[field]));
            match text(&answer["next_page_token"]) {
                token if token.is_empty() => return Ok(all),
                token => search["page_token"] = Value::from(token),
            }
        }
    }

    /// The entries of one folder of the artifacts under `root`: name →
    /// (is a folder, size).
    async fn artifacts(
        &self,
        root: &str,
        folder: &[String],
    ) -> Result<BTreeMap<String, (bool, Option<u64>)>, CliError> {
        let url = self.url("/api/2.0/mlflow-artifacts/artifacts")?;
        let path = std::iter::once(root.to_string())
            .chain(folder.iter().cloned())
            .collect::<Vec<_>>()
            .join("/");
        let answer = self
            .json(self.request(Method::GET, url).query(&[("path", path)]))
            .await?;
        Ok(list(&answer["files"])
            .iter()
            .map(|file| {
                let name = text(&file["path"]);
                let name = name.rsplit('/').next().unwrap_or_default().to_string();
                (
                    name,
                    (
                        file["is_dir"] == true,
                        integer(&file["file_size"]).map(|size| size as u64),
                    ),
                )
            })
            .collect())
    }

    /// The artifact proxy's address of a file, each part encoded.
    fn artifact_url(&self, root: &str, path: &[String]) -> Result<Url, CliError> {
        let mut url = self.url("/api/2.0/mlflow-artifacts/artifacts")?;
        url.path_segments_mut()
            .map_err(|()| {
                CliError::new(
                    Failure::Invalid,
                    "invalid_input",
                    format!("{} is not a base", self.base),
                )
            })?
            .extend(root.split('/'))
            .extend(path);
        Ok(url)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, CliError> {
        let response = request.send().await.map_err(|error| self.unreachable(&error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        Err(self.refused(status, &bytes))
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value, CliError> {
        let response = self.send(request).await?;
        let bytes = response.bytes().await.map_err(|error| self.unreachable(&error))?;
        if bytes.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&bytes).map_err(|error| {
            CliError::new(
                Failure::Other,
                "bad_answer",
                format!("{}: cannot read its answer: {error}", self.who),
            )
        })
    }

    fn unreachable(&self, error: &reqwest::Error) -> CliError {
        CliError::new(
            Failure::Unreachable,
            "unreachable",
            format!("cannot reach {} ({}): {}", self.who, self.base, root_cause(error)),
        )
    }

    /// MLflow's error (`error_code`, `message`) as the command's.
    fn refused(&self, status: reqwest::StatusCode, bytes: &[u8]) -> CliError {
        let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let message = body["message"]
            .as_str()
            .map_or_else(|| format!("answered {status}"), str::to_string);
        let code = body["error_code"].as_str().unwrap_or("http_error");
        CliError::new(
            Failure::from_status(status.as_u16()),
            code,
            format!("{}: {message}", self.who),
        )
    }
}

/// The path under the artifact proxy of an `mlflow-artifacts:` location
/// (`mlflow-artifacts:/1/RUN/artifacts`, or with a host:
/// `mlflow-artifacts://host:5000/1/RUN/artifacts`); None for another kind.
fn proxied_path(location: &str) -> Option<String> {
    let rest = location.strip_prefix("mlflow-artifacts:")?;
    let rest = match rest.strip_prefix("//") {
        Some(with_host) => &with_host[with_host.find('/')?..],
        None => rest,
    };
    let path = rest.trim_matches('/');
    (!path.is_empty() && path.split('/').all(plain_part)).then(|| path.to_string())
}

/// A file or folder name that stays where it is: not empty, `.` or `..`,
/// no slash, backslash or control character.
fn plain_part(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.chars().any(|c| c == '/' || c == '\\' || c.is_control())
}

fn list(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// A string field, or a number as text; empty when missing.
fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// An int64 field: MLflow writes them as numbers, protobuf's JSON as strings.
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => text.parse().ok(),
        _ => None,
    }
}

/// A metric value: a number, or "NaN", "Infinity", "-Infinity" as protobuf's
/// JSON writes them.
fn number(value: &Value) -> f64 {
    match value {
        Value::Number(number) => number.as_f64().unwrap_or(f64::NAN),
        Value::String(text) => match text.as_str() {
            "Infinity" | "inf" => f64::INFINITY,
            "-Infinity" | "-inf" => f64::NEG_INFINITY,
            other => other.parse().unwrap_or(f64::NAN),
        },
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_proxied_locations_with_plain_parts_are_copied() {
        assert_eq!(
            proxied_path("mlflow-artifacts:/1/abc/artifacts").as_deref(),
            Some("1/abc/artifacts")
        );
        assert_eq!(
            proxied_path("mlflow-artifacts://mlflow.internal:5000/1/abc/artifacts").as_deref(),
            Some("1/abc/artifacts")
        );
        assert_eq!(proxied_path("/srv/mlruns/1/abc/artifacts"), None);
        assert_eq!(proxied_path("s3://bucket/1/abc/artifacts"), None);
        assert_eq!(proxied_path("mlflow-artifacts:/1/../../etc"), None);
        assert_eq!(proxied_path("mlflow-artifacts:/"), None);
    }

    #[test]
    fn names_a_hostile_mlflow_server_lists_are_not_paths() {
        for name in ["weights.bin", "vocab 2.txt", "..hidden", "模型.pt"] {
            assert!(plain_part(name), "{name}");
        }
        for name in [
            "",
            ".",
            "..",
            "a/b",
            "../../etc/passwd",
            "a\\b",
            "x\u{1b}[31m",
            "x\n",
        ] {
            assert!(!plain_part(name), "{name:?}");
        }
    }

    #[test]
    fn values_in_both_json_forms() {
        assert!(number(&json!("NaN")).is_nan());
        assert_eq!(number(&json!("-Infinity")), f64::NEG_INFINITY);
        assert_eq!(number(&json!(0.25)), 0.25);
        assert_eq!(integer(&json!("1764460800000")), Some(1_764_460_800_000));
        assert_eq!(integer(&json!(7)), Some(7));
    }
}
