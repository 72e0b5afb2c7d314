//! Names of MLflow's tracking API as GPUPlane answers it. Each project is
//! an MLflow experiment, whose id is the project's name (the `default`
//! project is MLflow's default experiment `0`); experiments the mlflow
//! client creates by name live inside a project, with ids `PROJECT:N`
//! (not `.`: the mlflow client takes an id with a dot for a catalog's table).

/// The id MLflow clients use for their default experiment.
pub const DEFAULT_EXPERIMENT: &str = "0";

/// The variables a job gets for the mlflow client (unless its spec names
/// an MLflow server of its own in `MLFLOW_TRACKING_URI`): this server, the
/// attempt's own token, the job's run and its project's experiment.
pub const TRACKING_URI: &str = "MLFLOW_TRACKING_URI";
pub const TRACKING_TOKEN: &str = "MLFLOW_TRACKING_TOKEN";
pub const RUN_ID: &str = "MLFLOW_RUN_ID";
pub const EXPERIMENT_ID: &str = "MLFLOW_EXPERIMENT_ID";

/// The tag that places a new experiment in a project
/// (`create_experiment(NAME, tags={"gpuplane.project": "vision"})`).
pub const PROJECT_TAG: &str = "gpuplane.project";

/// MLflow's longest experiment name, in characters.
pub const MAX_EXPERIMENT_NAME_LEN: usize = 500;

/// An MLflow experiment id, parsed: a project's own experiment, or one
/// named inside a project (project names hold no `:`, so the two never
/// meet).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExperimentId {
    Project(String),
    Named { project: String, number: i64 },
}

impl ExperimentId {
    pub fn parse(id: &str) -> ExperimentId {
        if let Some((project, number)) = id.rsplit_once(':')
            && let Ok(number) = number.parse::<i64>()
        {
            return ExperimentId::Named {
                project: project_of(project).to_string(),
                number,
            };
        }
        ExperimentId::Project(project_of(id).to_string())
    }

    /// The experiment of a run: its named one, else its project's own.
    pub fn of_run(project: &str, named: Option<i64>) -> ExperimentId {
        match named {
            Some(number) => ExperimentId::Named {
                project: project.to_string(),
                number,
            },
            None => ExperimentId::Project(project.to_string()),
        }
    }

    pub fn project(&self) -> &str {
        match self {
            ExperimentId::Project(project) | ExperimentId::Named { project, .. } => project,
        }
    }

    /// The named experiment's number; none for a project's own.
    pub fn number(&self) -> Option<i64> {
        match self {
            ExperimentId::Project(_) => None,
            ExperimentId::Named { number, .. } => Some(*number),
        }
    }
}

impl std::fmt::Display for ExperimentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExperimentId::Project(project) => f.write_str(&experiment_id(project)),
            ExperimentId::Named { project, number } => write!(f, "{}:{number}", experiment_id(project)),
        }
    }
}

/// The project of a project's own MLflow experiment id.
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

/// Where a link the mlflow client prints leads in the console: its run
/// page for `#/experiments/EXPERIMENT/runs/RUN` (MLflow UI's address of a
/// run, after the server's), the runs of the experiment's project for
/// `#/experiments/EXPERIMENT`; none for anything else.
pub fn console_path(fragment: &str) -> Option<String> {
    let plain = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_:".contains(c))
    };
    let rest = fragment.strip_prefix('#').unwrap_or(fragment);
    let parts: Vec<&str> = rest.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["experiments", experiment, "runs", run, ..] if plain(experiment) && plain(run) => {
            Some(format!("/runs/{run}"))
        }
        ["experiments", experiment] if plain(experiment) => Some(format!(
            "/runs?project={}",
            ExperimentId::parse(experiment).project()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_links_lead_to_console_pages() {
        for (fragment, path) in [
            ("#/experiments/0/runs/run_01ABC", Some("/runs/run_01ABC")),
            ("#/experiments/vision:3/runs/run_1/artifacts", Some("/runs/run_1")),
            ("#/experiments/0", Some("/runs?project=default")),
            ("#/experiments/vision:3", Some("/runs?project=vision")),
            ("#/experiments/0/runs/<script>", None),
            ("#/experiments//runs/x", None),
            ("#section", None),
            ("", None),
        ] {
            assert_eq!(console_path(fragment).as_deref(), path, "{fragment}");
        }
    }

    #[test]
    fn experiment_ids_read_back() {
        for (id, parsed) in [
            ("0", ExperimentId::Project("default".into())),
            ("vision", ExperimentId::Project("vision".into())),
            (
                "vision:12",
                ExperimentId::Named {
                    project: "vision".into(),
                    number: 12,
                },
            ),
            (
                "0:3",
                ExperimentId::Named {
                    project: "default".into(),
                    number: 3,
                },
            ),
            ("a:b", ExperimentId::Project("a:b".into())),
        ] {
            assert_eq!(ExperimentId::parse(id), parsed, "{id}");
            assert_eq!(parsed.to_string(), id);
        }
    }
}
