//! Evaluations: an `EVALUATE` job on a checkpoint of a training run. The
//! job writes `{"metrics": {...}}` to `GPUCTL_EVAL_OUTPUT`; when it exits 0
//! the agent sends that file and the metrics become `eval/<name>` points of
//! the evaluated run at the checkpoint's step. Anything else fails the job
//! with EVALUATION_RESULT_INVALID and says exactly what was wrong.

use crate::identity::access::{self, Principal, Visible};
use crate::jobs::store;
use crate::metrics;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Tx};
use gpuplane_api::Page;
use gpuplane_api::evaluation::{Evaluation, NewEvaluation, ResultFile};
use gpuplane_api::job::{JobKind, JobSpec, JobStatus};
use gpuplane_api::metric::{Point, Value};
use gpuplane_api::node::NODE_NAME_LABEL;
use gpuplane_api::spec;
use std::collections::BTreeMap;

/// Metric keys of results get this prefix on the evaluated run.
pub const KEY_PREFIX: &str = "eval/";

/// Metric keys are at most 256 characters, the prefix included.
const MAX_NAME_LEN: usize = 256 - KEY_PREFIX.len();

/// The most metrics one result may hold.
const MAX_METRICS: usize = 10_000;

/// The checkpoint an evaluation reads, as its run recorded it.
#[derive(sqlx::FromRow)]
struct CheckpointRow {
    step: Option<i64>,
    node_name: Option<String>,
    /// JSON array of the other runs that wrote the same path.
    shared_with: String,
}

/// Queues an evaluation of `new.checkpoint` of run `new.run_id` in the run's
/// project (the caller must be an editor there: checked by the caller).
/// A path another run also wrote is refused with 409.
pub async fn create(
    db: &Db,
    secret: &crate::identity::secrets::SecretKey,
    principal: &Principal,
    new: &NewEvaluation,
) -> Result<String, Error> {
    let (project, run_name): (String, String) = sql!(db, |pool| {
        sqlx::query_as("SELECT project, name FROM runs WHERE id = $1")
            .bind(&new.run_id)
            .fetch_one(pool)
            .await
    })?;
    let shared_with = db.dialect().json_array_agg("o.run_id");
    let checkpoint: Option<CheckpointRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT c.step, n.name AS node_name,
                (SELECT {shared_with} FROM checkpoints o WHERE o.path = c.path AND o.run_id != c.run_id)
                    AS shared_with
         FROM checkpoints c LEFT JOIN nodes n ON n.id = c.node_id WHERE c.run_id = $1 AND c.path = $2"
        ))
        .bind(&new.run_id)
        .bind(&new.checkpoint)
        .fetch_optional(pool)
        .await
    })?;
    let Some(checkpoint) = checkpoint else {
        return Err(unknown_checkpoint(db, new).await?);
    };
    let shared_with: Vec<String> =
        serde_json::from_str(&checkpoint.shared_with).map_err(anyhow::Error::from)?;
    if !shared_with.is_empty() {
        // Name only the runs the caller may see; the others are counted.
        let visible = access::visible_projects(db, principal).await?;
        let mut named = Vec::new();
        for run_id in &shared_with {
            let project: Option<String> = sql!(db, |pool| {
                sqlx::query_scalar("SELECT project FROM runs WHERE id = $1")
                    .bind(run_id)
                    .fetch_optional(pool)
                    .await
            })?;
            if project.is_some_and(|p| visible.contains(&p)) {
                named.push(run_id.clone());
            }
        }
        let hidden = shared_with.len() - named.len();
        let others = match (named.is_empty(), hidden) {
            (false, 0) => named.join(", "),
            (false, n) => format!("{} and {n} run(s) of projects you cannot see", named.join(", ")),
            (true, n) => format!("{n} run(s) of projects you cannot see"),
        };
        return Err(Error::Conflict(format!(
            "checkpoint {} was written by run {} and also by {others}: it may hold another run's weights, \
             so it cannot be evaluated for {}. Write checkpoints into run-scoped directories \
             (for example checkpoints/$GPUCTL_RUN_ID/) so that no two runs share a path",
            new.checkpoint, new.run_id, new.run_id
        )));
    }
    let step = match checkpoint.step {
        Some(step) => step,
        None => last_step(db, &new.run_id).await?,
    };
    let spec = job_spec(new, &project, &run_name, step, checkpoint.node_name);
    // Evaluations run as processes: no image, so no image policy applies.
    spec::validate(&spec, &spec::Policy::default()).map_err(Error::Invalid)?;

    let mut tx = crate::store::write(db).await?;
    let job_id = store::insert(&mut tx, secret, &spec, principal.user_id.as_deref()).await?;
    sql!(tx, |conn| {
        sqlx::query(
        "INSERT INTO evaluations (job_id, run_id, checkpoint, step, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&job_id)
    .bind(&new.run_id)
    .bind(&new.checkpoint)
    .bind(step)
    .bind(now_ms())
    .execute(conn)
    .await.map(|_| ())
    })?;
    tx.commit().await?;
    Ok(job_id)
}

/// The job an evaluation runs: the request's command with the checkpoint's
/// path in `GPUCTL_CHECKPOINT`, on the checkpoint's node unless told otherwise.
fn job_spec(new: &NewEvaluation, project: &str, run_name: &str, step: i64, node: Option<String>) -> JobSpec {
    let mut spec = JobSpec::new(
        new.name
            .clone()
            .unwrap_or_else(|| format!("eval {run_name} @ {step}")),
        new.command.clone(),
    );
    spec.kind = JobKind::Evaluate;
    spec.project = project.to_string();
    spec.working_dir = new.working_dir.clone();
    spec.resources = new.resources.clone();
    spec.env = new.env.clone();
    spec.env
        .insert("GPUCTL_CHECKPOINT".to_string(), new.checkpoint.clone());
    spec.node_selector = match (&new.node_selector, node) {
        (Some(selector), _) => selector.clone(),
        (None, Some(node)) => BTreeMap::from([(NODE_NAME_LABEL.to_string(), node)]),
        (None, None) => BTreeMap::new(),
    };
    spec
}

/// 422 naming the checkpoints the run does have.
async fn unknown_checkpoint(db: &Db, new: &NewEvaluation) -> Result<Error, Error> {
    let known: Vec<String> = sql!(db, |pool| {
        sqlx::query_scalar(
            "SELECT path FROM checkpoints WHERE run_id = $1 ORDER BY step DESC, modified_at DESC LIMIT 5",
        )
        .bind(&new.run_id)
        .fetch_all(pool)
        .await
    })?;
    let message = if known.is_empty() {
        format!(
            "run {} has no recorded checkpoints; the agent records files written into a job's watch_dirs",
            new.run_id
        )
    } else {
        format!(
            "run {} recorded no checkpoint at this path; its newest: {}",
            new.run_id,
            known.join(", ")
        )
    };
    Ok(Error::field("checkpoint", message))
}

/// The highest step the run recorded, for a checkpoint whose name tells none.
async fn last_step(db: &Db, run_id: &str) -> Result<i64, Error> {
    let step: Option<i64> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT max(latest_step) FROM metric_series WHERE run_id = $1")
            .bind(run_id)
            .fetch_one(pool)
            .await
    })?;
    Ok(step.unwrap_or(0))
}

/// Judges what an evaluation that exited 0 left behind. Valid metrics are
/// recorded on the evaluated run (the job's own run for an EVALUATE job
/// submitted directly); otherwise the reason, for EVALUATION_RESULT_INVALID.
pub async fn accept(
    conn: &mut Tx,
    job_id: &str,
    result: Option<&ResultFile>,
    loss_pattern: &str,
) -> Result<Result<(), String>, Error> {
    let metrics = match parse(result) {
        Ok(metrics) => metrics,
        Err(reason) => return Ok(Err(reason)),
    };
    let target: Option<(String, i64)> = sql!(conn, |conn| {
        sqlx::query_as("SELECT run_id, step FROM evaluations WHERE job_id = $1")
            .bind(job_id)
            .fetch_optional(conn)
            .await
    })?;
    let (run_id, step) = match target {
        Some(target) => target,
        None => (
            sql!(conn, |conn| {
                sqlx::query_scalar("SELECT run_id FROM jobs WHERE id = $1")
                    .bind(job_id)
                    .fetch_one(conn)
                    .await
            })?,
            0,
        ),
    };
    let wall_time = now_ms() as f64 / 1000.0;
    let points: Vec<Point> = metrics
        .iter()
        .map(|(name, value)| Point {
            key: format!("{KEY_PREFIX}{name}"),
            step,
            wall_time,
            value: *value,
        })
        .collect();
    let batch = match metrics::prepare(format!("evaluation-{job_id}"), &points, Vec::new()) {
        Ok(batch) => batch,
        Err(Error::Invalid(errors)) => {
            let problems: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
            return Ok(Err(format!("the metrics were refused: {}", problems.join("; "))));
        }
        Err(other) => return Err(other),
    };
    metrics::store(conn, &run_id, &batch, loss_pattern).await?;
    sql!(conn, |conn| {
        sqlx::query("UPDATE evaluations SET metrics = $1 WHERE job_id = $2")
            .bind(serde_json::to_string(&metrics).map_err(anyhow::Error::from)?)
            .bind(job_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    Ok(Ok(()))
}

/// The metrics of a result file, or exactly what is wrong with it.
pub fn parse(result: Option<&ResultFile>) -> Result<BTreeMap<String, Value>, String> {
    let (path, text) = match result {
        None => return Err("the agent sent no result file (upgrade the agent)".into()),
        Some(ResultFile::Missing { path }) => {
            return Err(format!(
                "it wrote nothing to {path} (GPUCTL_EVAL_OUTPUT); write {{\"metrics\": {{\"name\": number}}}} there, \
                 for example with gpuplane.write_eval_result(metrics)"
            ));
        }
        Some(ResultFile::Unreadable { path, reason }) => {
            return Err(format!("{path} could not be read: {reason}"));
        }
        Some(ResultFile::Text { path, text }) => (path, text),
    };
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|error| format!("{path} is not JSON: {error}"))?;
    let Some(object) = json.as_object() else {
        return Err(format!(
            "{path} holds {}; expected an object {{\"metrics\": {{\"name\": number}}}}",
            describe(&json)
        ));
    };
    let Some(metrics) = object.get("metrics") else {
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        return Err(format!(
            "{path} has no \"metrics\" key (its keys: {}); expected {{\"metrics\": {{\"name\": number}}}}",
            if keys.is_empty() {
                "none".into()
            } else {
                keys.join(", ")
            }
        ));
    };
    let Some(metrics) = metrics.as_object() else {
        return Err(format!(
            "\"metrics\" in {path} is {}; expected an object of name to number",
            describe(metrics)
        ));
    };
    if metrics.is_empty() {
        return Err(format!(
            "\"metrics\" in {path} is empty; name at least one metric"
        ));
    }
    if metrics.len() > MAX_METRICS {
        return Err(format!(
            "\"metrics\" in {path} has {} entries; at most {MAX_METRICS}",
            metrics.len()
        ));
    }
    let mut parsed = BTreeMap::new();
    let mut bad = Vec::new();
    for (name, value) in metrics {
        if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
            bad.push(format!(
                "the name {name:?} is not usable (1-{MAX_NAME_LEN} characters, no control characters)"
            ));
            continue;
        }
        let number = match value {
            serde_json::Value::Number(number) => number.as_f64(),
            serde_json::Value::String(text) => match text.as_str() {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            },
            _ => None,
        };
        match number {
            Some(number) => {
                parsed.insert(name.clone(), Value(number));
            }
            None => bad.push(format!("\"{name}\" is {}", describe(value))),
        }
    }
    if !bad.is_empty() {
        return Err(format!(
            "in {path}, {}; metrics must map names to numbers (or \"NaN\", \"Infinity\", \"-Infinity\")",
            bad.join(", ")
        ));
    }
    Ok(parsed)
}

/// A JSON value in words, short: `a string ("0.91")`, `an array`, `null`.
fn describe(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(b) => format!("a boolean ({b})"),
        serde_json::Value::Number(n) => format!("a number ({n})"),
        serde_json::Value::String(s) => {
            let short: String = s.chars().take(40).collect();
            format!("a string ({short:?})")
        }
        serde_json::Value::Array(_) => "an array".into(),
        serde_json::Value::Object(_) => "an object".into(),
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    job_id: String,
    run_id: String,
    checkpoint: String,
    step: i64,
    status: String,
    metrics: Option<String>,
    failure_detail: Option<String>,
    created_at: i64,
    seq: i64,
}

const COLUMNS: &str =
    "e.job_id, e.run_id, e.checkpoint, e.step, j.status, e.metrics, j.failure_detail, e.created_at, j.seq";

/// Evaluations in the visible projects, newest first, optionally of one run.
pub async fn list(
    db: &Db,
    visible: &Visible,
    run_id: Option<&str>,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<Evaluation>, Error> {
    let visible_projects = db.dialect().json_values("$4");
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM evaluations e JOIN jobs j ON j.id = e.job_id
         WHERE ($1 IS NULL OR e.run_id = $1) AND ($2 IS NULL OR j.seq < $2)
           AND ($4 IS NULL OR j.project IN (SELECT value FROM {visible_projects}))
         ORDER BY j.seq DESC LIMIT $3"
        ))
        .bind(run_id)
        .bind(before)
        .bind(limit + 1)
        .bind(visible.as_json())
        .fetch_all(pool)
        .await
    })?;
    let (rows, next_before) = crate::paging::split(rows, limit, |row| row.seq);
    let items = rows
        .into_iter()
        .map(evaluation_from_row)
        .collect::<Result<_, _>>()?;
    Ok(Page { items, next_before })
}

/// One evaluation by its job id.
pub async fn get(db: &Db, job_id: &str) -> Result<Evaluation, Error> {
    let row: Option<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM evaluations e JOIN jobs j ON j.id = e.job_id WHERE e.job_id = $1"
        ))
        .bind(job_id)
        .fetch_optional(pool)
        .await
    })?;
    evaluation_from_row(row.ok_or_else(|| Error::NotFound(format!("no evaluation {job_id}")))?)
}

fn evaluation_from_row(row: Row) -> Result<Evaluation, Error> {
    let status: JobStatus = row.status.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let metrics = match &row.metrics {
        Some(json) => serde_json::from_str(json).map_err(anyhow::Error::from)?,
        None => BTreeMap::new(),
    };
    Ok(Evaluation {
        job_id: row.job_id,
        run_id: row.run_id,
        checkpoint: row.checkpoint,
        step: row.step,
        status,
        metrics,
        failure_detail: row.failure_detail,
        created_at: rfc3339(row.created_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> Option<ResultFile> {
        Some(ResultFile::Text {
            path: "/jobs/j/attempt-1/eval_result.json".into(),
            text: text.into(),
        })
    }

    #[test]
    fn a_result_with_numbers_and_non_finite_strings_is_accepted() {
        let metrics =
            parse(text(r#"{"metrics": {"accuracy": 0.91, "loss": "NaN", "n": 10}, "note": "x"}"#).as_ref())
                .unwrap();
        assert_eq!(metrics["accuracy"], Value(0.91));
        assert!(metrics["loss"].0.is_nan());
        assert_eq!(metrics["n"], Value(10.0));
    }

    #[test]
    fn each_bad_result_says_exactly_what_is_wrong() {
        let cases = [
            (
                text("accuracy=0.9"),
                "/jobs/j/attempt-1/eval_result.json is not JSON: expected value at line 1 column 1",
            ),
            (
                text("[1, 2]"),
                "/jobs/j/attempt-1/eval_result.json holds an array; expected an object {\"metrics\": {\"name\": number}}",
            ),
            (
                text(r#"{"accuracy": 0.9}"#),
                "/jobs/j/attempt-1/eval_result.json has no \"metrics\" key (its keys: accuracy); expected {\"metrics\": {\"name\": number}}",
            ),
            (
                text(r#"{"metrics": [0.9]}"#),
                "\"metrics\" in /jobs/j/attempt-1/eval_result.json is an array; expected an object of name to number",
            ),
            (
                text(r#"{"metrics": {}}"#),
                "\"metrics\" in /jobs/j/attempt-1/eval_result.json is empty; name at least one metric",
            ),
            (
                text(r#"{"metrics": {"accuracy": "0.91", "f1": null, "top5": 0.99}}"#),
                "in /jobs/j/attempt-1/eval_result.json, \"accuracy\" is a string (\"0.91\"), \"f1\" is null; \
                 metrics must map names to numbers (or \"NaN\", \"Infinity\", \"-Infinity\")",
            ),
            (
                Some(ResultFile::Unreadable {
                    path: "/x/eval_result.json".into(),
                    reason: "it is not UTF-8 text".into(),
                }),
                "/x/eval_result.json could not be read: it is not UTF-8 text",
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(parse(result.as_ref()).unwrap_err(), expected);
        }
        let missing = parse(Some(&ResultFile::Missing {
            path: "/x/eval_result.json".into(),
        }))
        .unwrap_err();
        assert!(
            missing.starts_with("it wrote nothing to /x/eval_result.json (GPUCTL_EVAL_OUTPUT)"),
            "{missing}"
        );
    }
}
