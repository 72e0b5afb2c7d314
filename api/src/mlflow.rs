//! Names of MLflow's tracking API as GPUPlane answers it: an MLflow
//! experiment is a project, whose experiment id is its name, except the
//! `default` project, which is MLflow's default experiment `0`.

/// The id MLflow clients use for their default experiment.
pub const DEFAULT_EXPERIMENT: &str = "0";

/// The variables a job gets for the mlflow client (unless its spec names
/// an MLflow server of its own in `MLFLOW_TRACKING_URI`): this server, the
/// attempt's own token, the job's run and its project's experiment.
pub const TRACKING_URI: &str = "MLFLOW_TRACKING_URI";
pub const TRACKING_TOKEN: &str = "MLFLOW_TRACKING_TOKEN";
pub const RUN_ID: &str = "MLFLOW_RUN_ID";
pub const EXPERIMENT_ID: &str = "MLFLOW_EXPERIMENT_ID";

/// The project of an MLflow experiment id.
pub fn project_of(experiment_id: &str) -> &str {
    match experiment_id {
        DEFAULT_EXPERIMENT => "default",
        name => name,
    }
}

/// The MLflow experiment id of a project.
pub fn experiment_id(project: &str) -> String {
    match project {
        "default" => DEFAULT_EXPERIMENT.to_string(),
        name => name.to_string(),
    }
}
