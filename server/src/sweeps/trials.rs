//! A trial as a job: the sweep's job template with the trial's values in
//! its command (`${NAME}`, W&B's macros), `GPUCTL_SWEEP_ID`,
//! `GPUCTL_SWEEP_TRIAL` and `GPUCTL_SWEEP_PARAMS` in its variables, and its
//! parameters as its run's config; stored with the trial's row in one
//! transaction, so a trial is never made twice nor lost.

use crate::identity::secrets::SecretKey;
use crate::store::sql;
use crate::store::{Db, Error};
use gpuplane_api::error::FieldError;
use gpuplane_api::job::JobSpec;
use gpuplane_api::spec::{self, Policy};
use gpuplane_api::sweep::{self as api, Checked, Params};
use serde_json::Value;

/// Template keys a trial cannot take from the sweep, and why.
const REFUSED: [(&str, &str); 4] = [
    ("array", "a sweep makes its trials itself: leave out array"),
    ("after", "trials cannot wait for other jobs: leave out after"),
    (
        "secret_env",
        "a sweep's file is kept as written, so it may not hold secrets: give them in the project's \
         jobs another way (a file on the hosts, or the host's environment)",
    ),
    ("recipe", "is recorded by the server for experiment jobs only"),
];

/// Trial `number`'s job spec, checked as a submitted job is; errors name
/// the sweep file's fields (`job.resources.gpu`).
pub fn spec_of(
    sweep_id: &str,
    checked: &Checked,
    number: u64,
    params: &Params,
    policy: &Policy,
) -> Result<JobSpec, Vec<FieldError>> {
    let in_job = |field: &str, message: String| FieldError {
        field: format!("job.{field}"),
        message,
    };
    let mut job = checked.job.clone();
    let refused: Vec<FieldError> = REFUSED
        .iter()
        .filter(|(key, _)| job.contains_key(*key))
        .map(|(key, why)| in_job(key, why.to_string()))
        .collect();
    if !refused.is_empty() {
        return Err(refused);
    }
    let command: Vec<String> = match job.get("command") {
        Some(Value::Array(args)) => match args.iter().map(|a| a.as_str().map(String::from)).collect() {
            Some(args) => args,
            None => return Err(vec![in_job("command", "must be a list of strings".into())]),
        },
        _ => return Err(vec![in_job("command", "must be a list of strings".into())]),
    };
    let argv = api::trial_command(&command, checked.program.as_deref(), params);
    job.insert("command".into(), Value::from(argv));
    let name = job
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(&checked.name)
        .to_string();
    job.insert("name".into(), Value::String(format!("{name}-{number}")));
    let mut spec: JobSpec = serde_json::from_value(Value::Object(job)).map_err(|error| {
        vec![FieldError {
            field: "job".into(),
            message: error.to_string(),
        }]
    })?;
    let params_json = serde_json::to_string(params).unwrap_or_else(|_| "{}".into());
    for (name, value) in [
        (api::SWEEP_ID_VARIABLE, sweep_id.to_string()),
        (api::SWEEP_TRIAL_VARIABLE, number.to_string()),
        (api::SWEEP_PARAMS_VARIABLE, params_json),
    ] {
        spec.env.insert(name.to_string(), value);
    }
    spec::validate(&spec, policy).map_err(|errors| {
        errors
            .into_iter()
            .map(|error| in_job(&error.field, error.message))
            .collect::<Vec<_>>()
    })?;
    Ok(spec)
}

/// Stores trial `number` of a sweep: its job (submitted by `user_id`), its
/// run's config and its row, in one transaction. Fails with a conflict
/// when the trial exists already or the sweep is no longer RUNNING (paused
/// or stopped since the controller looked: no trial outlives a stop).
pub async fn insert(
    db: &Db,
    secret: &SecretKey,
    sweep_id: &str,
    number: u64,
    spec: &JobSpec,
    params: &Params,
    user_id: Option<&str>,
) -> Result<String, Error> {
    let mut tx = crate::store::write(db).await?;
    let state: Option<String> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT state FROM sweeps WHERE id = $1")
            .bind(sweep_id)
            .fetch_optional(conn)
            .await
    })?;
    if state.as_deref() != Some("RUNNING") {
        return Err(Error::Conflict(format!(
            "sweep {sweep_id} is {}: no new trial",
            state.as_deref().unwrap_or("gone")
        )));
    }
    let taken: Option<i64> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT number FROM sweep_trials WHERE sweep_id = $1 AND number = $2")
            .bind(sweep_id)
            .bind(number as i64)
            .fetch_optional(conn)
            .await
    })?;
    if taken.is_some() {
        return Err(Error::Conflict(format!(
            "sweep {sweep_id} has a trial {number} already"
        )));
    }
    let job_id = crate::jobs::store::insert(&mut tx, secret, spec, user_id).await?;
    let run_id = crate::jobs::store::run_of(&mut tx, &job_id).await?;
    crate::runs::details::update_config(&mut tx, &run_id, params).await?;
    let params_json = serde_json::to_string(params).map_err(anyhow::Error::from)?;
    sql!(tx, |conn| {
        sqlx::query("INSERT INTO sweep_trials (sweep_id, number, job_id, params) VALUES ($1, $2, $3, $4)")
            .bind(sweep_id)
            .bind(number as i64)
            .bind(&job_id)
            .bind(params_json)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(job_id)
}
