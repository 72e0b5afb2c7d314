//! Turning a dispatch into a command line, and the checks that fail a
//! dispatch (DISPATCH_FAILED) before anything starts: the working_dir, the
//! program, and for the docker runner the client, the engine and the image.

use gpuplane_api::agent::{Dispatch, JOB_TOKEN_VARIABLE};
use gpuplane_api::evaluation::{self, ResultFile};
use gpuplane_api::job::{JobKind, Runner};
use gpuplane_api::mlflow;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory the job runs in: its spec's, else the experiment folder
/// shipped with it, else the attempt's own.
pub fn working_dir(dispatch: &Dispatch, attempt_dir: &Path) -> PathBuf {
    match &dispatch.spec.working_dir {
        Some(dir) => PathBuf::from(dir),
        None if shipped(dispatch) => crate::files::experiment_dir(attempt_dir),
        None => attempt_dir.to_path_buf(),
    }
}

/// Whether an experiment folder was shipped with the job (`GPUCTL_EXP_DIR`
/// is then the agent's copy, `files::experiment_dir`).
fn shipped(dispatch: &Dispatch) -> bool {
    dispatch
        .spec
        .recipe
        .as_ref()
        .is_some_and(|recipe| recipe.shipped.is_some())
}

/// The variables the job gets on top of the host's (less the agent's own,
/// see [`crate::private_variable`]): the spec's and its secrets, then the
/// server's (`GPUCTL_*`, `CUDA_VISIBLE_DEVICES`), which win, the attempt's
/// own spool folder (`GPUCTL_SPOOL_DIR`), its working directory
/// (`GPUCTL_WORK_DIR`), the job's folder kept across its attempts here
/// (`GPUCTL_JOB_DIR`), the experiment folder shipped with it
/// (`GPUCTL_EXP_DIR`), the attempt's token for the mlflow client when the
/// server set it up (`MLFLOW_TRACKING_TOKEN`), `WANDB_MODE=offline`,
/// `WANDB_DIR` and a flush every second (unless the job sets its own) when
/// the spec asks for W&B offline, and for an evaluation
/// `GPUCTL_EVAL_OUTPUT`.
pub fn job_env(dispatch: &Dispatch, attempt_dir: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = dispatch.spec.env.clone().into_iter().collect();
    env.extend(dispatch.spec.secret_env.clone());
    env.retain(|(key, _)| {
        !dispatch.env.contains_key(key)
            && key != EVAL_OUTPUT
            && key != SPOOL_DIR
            && key != WORK_DIR
            && key != JOB_DIR
            && key != EXP_DIR
    });
    env.extend(dispatch.env.clone());
    // The mlflow client's token, for the MLflow server the server named
    // (this one): the attempt's own, kept once (not at rest) as GPUCTL_TOKEN.
    if dispatch.env.contains_key(mlflow::RUN_ID)
        && let Some(token) = dispatch.env.get(JOB_TOKEN_VARIABLE)
    {
        env.retain(|(key, _)| key != mlflow::TRACKING_TOKEN);
        env.push((mlflow::TRACKING_TOKEN.to_string(), token.clone()));
    }
    env.push((
        SPOOL_DIR.to_string(),
        crate::spool::dir(attempt_dir).display().to_string(),
    ));
    env.push((
        WORK_DIR.to_string(),
        working_dir(dispatch, attempt_dir).display().to_string(),
    ));
    env.push((
        JOB_DIR.to_string(),
        crate::files::job_dir(attempt_dir).display().to_string(),
    ));
    if shipped(dispatch) {
        env.push((
            EXP_DIR.to_string(),
            crate::files::experiment_dir(attempt_dir).display().to_string(),
        ));
    }
    if let Some(dir) = wandb_dir(dispatch, attempt_dir) {
        // The spec asked for W&B offline: these win over the job's own.
        env.retain(|(key, _)| key != WANDB_MODE && key != WANDB_DIR);
        env.push((WANDB_MODE.to_string(), "offline".to_string()));
        env.push((WANDB_DIR.to_string(), dir.display().to_string()));
        // The package writes its file every 15 s unless told; every second,
        // the run page and a sweep's early stopping follow it live.
        if !env.iter().any(|(key, _)| key == WANDB_FLUSH_INTERVAL) {
            env.push((WANDB_FLUSH_INTERVAL.to_string(), "1".to_string()));
        }
    }
    if dispatch.spec.kind == JobKind::Evaluate {
        env.push((
            EVAL_OUTPUT.to_string(),
            eval_result_path(attempt_dir).display().to_string(),
        ));
    }
    env
}

/// The folder a `wandb = "offline"` job's `wandb` package writes its runs
/// under (`WANDB_DIR`), in the attempt's folder; the agent watches it.
pub fn wandb_dir(dispatch: &Dispatch, attempt_dir: &Path) -> Option<PathBuf> {
    dispatch.spec.wandb.map(|_| attempt_dir.join("wandb"))
}

/// Where an evaluation writes its result.
pub fn eval_result_path(attempt_dir: &Path) -> PathBuf {
    attempt_dir.join(evaluation::RESULT_FILE)
}

/// What an ended evaluation left in its result file, for the server to judge.
pub fn read_eval_result(attempt_dir: &Path) -> ResultFile {
    let path = eval_result_path(attempt_dir);
    let shown = path.display().to_string();
    let size = match std::fs::metadata(&path) {
        Ok(metadata) => metadata.len(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return ResultFile::Missing { path: shown };
        }
        Err(error) => {
            return ResultFile::Unreadable {
                path: shown,
                reason: error.to_string(),
            };
        }
    };
    if size > evaluation::MAX_RESULT_BYTES {
        return ResultFile::Unreadable {
            path: shown,
            reason: format!(
                "it is {size} bytes; the limit is {} bytes",
                evaluation::MAX_RESULT_BYTES
            ),
        };
    }
    match std::fs::read(&path).map(String::from_utf8) {
        Ok(Ok(text)) => ResultFile::Text { path: shown, text },
        Ok(Err(_)) => ResultFile::Unreadable {
            path: shown,
            reason: "it is not UTF-8 text".into(),
        },
        Err(error) => ResultFile::Unreadable {
            path: shown,
            reason: error.to_string(),
        },
    }
}

const EVAL_OUTPUT: &str = "GPUCTL_EVAL_OUTPUT";
const WANDB_MODE: &str = "WANDB_MODE";
const WANDB_DIR: &str = "WANDB_DIR";
/// The `wandb` package's `x_transaction_log_flush_interval` (seconds).
const WANDB_FLUSH_INTERVAL: &str = "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL";
const SPOOL_DIR: &str = "GPUCTL_SPOOL_DIR";
/// The job's working directory (`GPUCTL_EXP_DIR` for an experiment's job
/// whose recipe names none).
const WORK_DIR: &str = "GPUCTL_WORK_DIR";
const EXP_DIR: &str = "GPUCTL_EXP_DIR";
/// The job's folder kept across its attempts on this host.
const JOB_DIR: &str = "GPUCTL_JOB_DIR";

/// The name of an attempt's container (docker runner).
pub fn container_name(dispatch: &Dispatch) -> String {
    format!("gpuplane-{}-{}", dispatch.job_id.to_lowercase(), dispatch.attempt)
}

/// Program, arguments, working directory and extra environment of an attempt.
pub fn command_line(
    dispatch: &Dispatch,
    attempt_dir: &Path,
) -> (PathBuf, Vec<String>, PathBuf, Vec<(String, String)>) {
    let dir = working_dir(dispatch, attempt_dir);
    let env = job_env(dispatch, attempt_dir);
    match dispatch.spec.runner {
        // The Slurm runner's batch script runs this same command line.
        Runner::Process | Runner::Slurm => {
            let program =
                resolve_program(dispatch, &dir).unwrap_or_else(|_| PathBuf::from(&dispatch.spec.command[0]));
            (program, dispatch.spec.command[1..].to_vec(), dir, env)
        }
        Runner::Docker => {
            let mount = dir.display().to_string();
            let mut args = vec![
                "run".to_string(),
                "--rm".to_string(),
                "--init".to_string(),
                "--name".to_string(),
                container_name(dispatch),
                "--volume".to_string(),
                format!("{mount}:{mount}"),
                // GPUCTL_EVAL_OUTPUT and GPUCTL_SPOOL_DIR are in the attempt directory.
                "--volume".to_string(),
                format!("{0}:{0}", attempt_dir.display()),
                "--volume".to_string(),
                format!("{0}:{0}", crate::files::job_dir(attempt_dir).display()),
                "--workdir".to_string(),
                mount,
            ];
            if !dispatch.gpus.is_empty() {
                let devices: Vec<String> = dispatch.gpus.iter().map(u32::to_string).collect();
                args.push("--gpus".to_string());
                args.push(format!("\"device={}\"", devices.join(",")));
            }
            // `-e NAME` passes the value from the docker client's environment: no secrets in argv.
            for (key, _) in &env {
                args.push("--env".to_string());
                args.push(key.clone());
            }
            args.push(dispatch.spec.image.clone().unwrap_or_default());
            args.extend(dispatch.spec.command.iter().cloned());
            (PathBuf::from("docker"), args, dir, env)
        }
    }
}

/// `command[0]` as a path: relative to working_dir when it has a slash,
/// else looked up on the job's PATH.
pub fn resolve_program(dispatch: &Dispatch, working_dir: &Path) -> Result<PathBuf, String> {
    let name = &dispatch.spec.command[0];
    if name.contains('/') {
        let path = working_dir.join(name);
        return executable(&path).map(|()| path);
    }
    let path_var = dispatch
        .spec
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(name);
        if candidate.is_file() {
            return executable(&candidate).map(|()| candidate);
        }
    }
    Err(format!(
        "command[0] `{name}` was not found on this host's PATH ({path_var})"
    ))
}

/// Whether `path` is a file anyone may execute.
pub fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn executable(path: &Path) -> Result<(), String> {
    let metadata = std::fs::metadata(path)
        .map_err(|_| format!("command[0] {} does not exist on this host", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("command[0] {} is not a file", path.display()));
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err(format!(
            "command[0] {} is not executable (chmod +x it)",
            path.display()
        ));
    }
    Ok(())
}

/// Whether this agent's user could reach a Docker engine (its socket exists
/// and is writable): then starting without `--docker` deserves a word.
pub fn docker_socket_reachable() -> bool {
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|host| host.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".to_string());
    let Ok(path) = std::ffi::CString::new(socket) else {
        return false;
    };
    // SAFETY: a valid C string; access(2) only reads it.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

/// Everything that would make the attempt fail to start, named; `docker`:
/// whether the agent was started with `--docker`.
pub async fn check(dispatch: &Dispatch, attempt_dir: &Path, host: &str, docker: bool) -> Result<(), String> {
    if dispatch.spec.runner == Runner::Docker && !docker {
        return Err(format!(
            "runner docker: the agent on {host} does not run docker jobs (it was started without --docker)"
        ));
    }
    let dir = working_dir(dispatch, attempt_dir);
    match std::fs::metadata(&dir) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "working_dir {} on {host} is not a directory",
                dir.display()
            ));
        }
        Err(_) => {
            return Err(format!(
                "working_dir {} does not exist on {host} (paths are the agent host's, never the submitter's)",
                dir.display()
            ));
        }
    }
    match dispatch.spec.runner {
        // `slurm::check` checks the program the same way, before sbatch.
        Runner::Process | Runner::Slurm => resolve_program(dispatch, &dir).map(|_| ()),
        Runner::Docker => check_docker(dispatch.spec.image.as_deref().unwrap_or_default(), host).await,
    }
}

async fn check_docker(image: &str, host: &str) -> Result<(), String> {
    let run = |args: Vec<&'static str>, extra: Option<String>| async move {
        let mut command = tokio::process::Command::new("docker");
        command.args(&args);
        if let Some(extra) = extra {
            command.arg(extra);
        }
        command.stdin(std::process::Stdio::null()).kill_on_drop(true);
        tokio::time::timeout(Duration::from_secs(20), command.output()).await
    };
    let info = match run(vec!["info", "--format", "{{.ServerVersion}}"], None).await {
        Err(_) => {
            return Err(format!(
                "runner docker: `docker info` on {host} did not answer within 20s"
            ));
        }
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("runner docker: `docker` is not installed on {host}"));
        }
        Ok(Err(error)) => return Err(format!("runner docker: cannot run `docker` on {host}: {error}")),
        Ok(Ok(output)) => output,
    };
    if !info.status.success() {
        let why = first_line(&info.stderr);
        return Err(format!(
            "runner docker: no Docker engine is reachable on {host}: {why}"
        ));
    }
    match run(
        vec!["image", "inspect", "--format", "{{.Id}}"],
        Some(image.to_string()),
    )
    .await
    {
        Ok(Ok(output)) if output.status.success() => Ok(()),
        _ => Err(format!(
            "runner docker: image {image} is not on {host} (run `docker pull {image}` there)"
        )),
    }
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no details")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuplane_api::job::JobSpec;
    use std::collections::BTreeMap;

    #[test]
    fn a_docker_job_sees_its_working_attempt_and_job_folders_at_the_same_paths() {
        let mut spec = JobSpec::new("train", vec!["python".into(), "train.py".into()]);
        spec.runner = Runner::Docker;
        spec.image = Some("trainer@sha256:0123".into());
        spec.working_dir = Some("/data/project".into());
        spec.env.insert("GPUCTL_JOB_DIR".into(), "/elsewhere".into());
        let dispatch = Dispatch {
            job_id: "job_1".into(),
            attempt: 2,
            run_id: "run_1".into(),
            spec,
            gpus: vec![1],
            env: BTreeMap::new(),
            stop_grace_ms: 0,
            folder: Vec::new(),
            choose_master_port: false,
        };
        let attempt_dir = Path::new("/jobs/job_1/attempt-2");
        let (program, args, _, env) = command_line(&dispatch, attempt_dir);
        assert_eq!(program, Path::new("docker"));
        let mounts: Vec<&str> = args
            .windows(2)
            .filter(|pair| pair[0] == "--volume")
            .map(|pair| pair[1].as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                "/data/project:/data/project",
                "/jobs/job_1/attempt-2:/jobs/job_1/attempt-2",
                "/jobs/job_1/job:/jobs/job_1/job"
            ]
        );
        let job_dirs: Vec<&str> = env
            .iter()
            .filter(|(key, _)| key == "GPUCTL_JOB_DIR")
            .map(|(_, value)| value.as_str())
            .collect();
        assert_eq!(job_dirs, ["/jobs/job_1/job"], "the agent's, not the spec's");
    }
}
