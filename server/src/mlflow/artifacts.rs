//! MLflow artifacts in the artifact store, a folder (`artifact_store`,
//! default `artifacts/` in the data dir), at the paths MLflow's proxied
//! artifact API names: `EXPERIMENT/RUN/artifacts/…` (a run's artifact URI
//! is `mlflow-artifacts:/EXPERIMENT/RUN/artifacts`). Bytes stream in and out
//! in chunks; a file is never held whole, and one being written is a hidden
//! `.partial` file until it is complete, then renamed into place.

use crate::identity::access::Caller;
use crate::runs;
use crate::store::Error;
use crate::store::ids::new_id;
use futures_util::{Stream, StreamExt};
use gpuplane_api::project::Role;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The longest artifact path, in bytes.
pub const MAX_PATH: usize = 1024;

/// An artifact path's experiment, run and the parts below `artifacts/`;
/// every part plain (no empty, `.` or `..` part, no backslash or control
/// character).
pub fn split(path: &str) -> Result<(&str, &str, Vec<&str>), Error> {
    let bad = |why: &str| Error::field("path", format!("`{}` {why}", path.escape_debug()));
    if path.is_empty() || path.len() > MAX_PATH {
        return Err(bad(&format!("is not an artifact path of 1 to {MAX_PATH} bytes")));
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err(bad("has a control character or a backslash"));
    }
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    if parts
        .iter()
        .any(|part| part.is_empty() || *part == "." || *part == "..")
    {
        return Err(bad(
            "is not a plain relative path (no leading `/`, no empty, `.` or `..` parts)",
        ));
    }
    match parts.as_slice() {
        [experiment, run, "artifacts", inside @ ..] => Ok((experiment, run, inside.to_vec())),
        _ => Err(bad(
            "is not EXPERIMENT/RUN/artifacts[/PATH], a run's artifact path",
        )),
    }
}

/// Where an artifact path is in the store, once the caller has `role` in
/// its run's project and the path names that run's own experiment (else
/// "not found", as for a run that does not exist).
pub async fn locate(
    db: &crate::store::Db,
    root: &Path,
    caller: &Caller,
    path: &str,
    role: Role,
) -> Result<PathBuf, Error> {
    let (experiment, run_id, inside) = split(path)?;
    let project = runs::check(db, caller, run_id, role).await?;
    if super::experiment_id(&project) != experiment {
        return Err(Error::NotFound(format!(
            "no run {run_id} in experiment {experiment}"
        )));
    }
    let mut located = root.join(experiment).join(run_id).join("artifacts");
    for part in inside {
        located.push(part);
    }
    Ok(located)
}

/// Writes a file from a body, chunk by chunk (each within `idle` of the
/// last), into a hidden partial file renamed into place when whole; the
/// bytes written.
pub async fn store<S, B, E>(target: &Path, mut body: S, idle: Duration) -> Result<u64, Error>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let (Some(folder), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(Error::field("path", "names no file"));
    };
    if target.is_dir() {
        return Err(Error::Conflict(format!(
            "{} is a folder of artifacts, not a file",
            name.to_string_lossy()
        )));
    }
    tokio::fs::create_dir_all(folder)
        .await
        .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", folder.display()))?;
    let partial = folder.join(format!(".{}.{}.partial", name.to_string_lossy(), new_id("up")));
    let written = async {
        let mut file = tokio::fs::File::create(&partial)
            .await
            .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", partial.display()))?;
        let mut total = 0u64;
        loop {
            let chunk = match tokio::time::timeout(idle, body.next()).await {
                Err(_) => {
                    return Err(Error::field(
                        "body",
                        format!("no data arrived for {}s", idle.as_secs()),
                    ));
                }
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    return Err(Error::field("body", format!("the upload broke off: {error}")));
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            let chunk = chunk.as_ref();
            total += chunk.len() as u64;
            file.write_all(chunk)
                .await
                .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", partial.display()))?;
        }
        file.sync_all()
            .await
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", partial.display()))?;
        Ok::<u64, Error>(total)
    }
    .await;
    match written {
        Ok(total) => {
            tokio::fs::rename(&partial, target)
                .await
                .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", target.display()))?;
            Ok(total)
        }
        Err(error) => {
            let _ = tokio::fs::remove_file(&partial).await;
            Err(error)
        }
    }
}

/// One entry of a listed folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub is_dir: bool,
    pub size: Option<u64>,
}

/// The artifacts in a folder, by name (none when it does not exist, as
/// MLflow answers; a file lists as itself). Partial uploads are not shown.
pub async fn list(at: &Path) -> Result<Vec<Listed>, Error> {
    let metadata = match tokio::fs::metadata(at).await {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(anyhow::anyhow!("cannot read {}: {error}", at.display()).into()),
    };
    if metadata.is_file() {
        let name = at
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(vec![Listed {
            name,
            is_dir: false,
            size: Some(metadata.len()),
        }]);
    }
    let mut entries = tokio::fs::read_dir(at)
        .await
        .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", at.display()))?;
    let mut found = Vec::new();
    while let Some(entry) = entries
        .next_entry()
        .await
        .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", at.display()))?
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".partial") {
            continue;
        }
        let metadata = entry
            .metadata()
            .await
            .map_err(|error| anyhow::anyhow!("cannot read {name}: {error}"))?;
        found.push(Listed {
            name,
            is_dir: metadata.is_dir(),
            size: metadata.is_file().then_some(metadata.len()),
        });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// An artifact file, opened to stream it out, with its size.
pub async fn open(file: &Path) -> Result<(tokio::fs::File, u64), Error> {
    let missing = || {
        Error::NotFound(format!(
            "no artifact {}",
            file.file_name().unwrap_or_default().to_string_lossy()
        ))
    };
    let metadata = tokio::fs::metadata(file).await.map_err(|_| missing())?;
    if !metadata.is_file() {
        return Err(missing());
    }
    let opened = tokio::fs::File::open(file).await.map_err(|_| missing())?;
    Ok((opened, metadata.len()))
}

/// Removes a deleted run's artifacts (`gpuctl run delete`).
pub async fn remove_run(root: &Path, project: &str, run_id: &str) -> Result<(), Error> {
    let folder = root.join(super::experiment_id(project)).join(run_id);
    match tokio::fs::remove_dir_all(&folder).await {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(anyhow::anyhow!("cannot remove {}: {error}", folder.display()).into()),
    }
}

/// Removes the artifacts of runs that no longer exist (deleted by the
/// retention settings, or while a removal failed); the folders removed.
pub async fn sweep(db: &crate::store::Db, root: &Path) -> Result<usize, Error> {
    let Ok(mut experiments) = tokio::fs::read_dir(root).await else {
        return Ok(0);
    };
    let mut folders = Vec::new();
    while let Ok(Some(experiment)) = experiments.next_entry().await {
        let Ok(mut runs) = tokio::fs::read_dir(experiment.path()).await else {
            continue;
        };
        while let Ok(Some(run)) = runs.next_entry().await {
            folders.push((run.file_name().to_string_lossy().into_owned(), run.path()));
        }
    }
    let mut removed = 0;
    for batch in folders.chunks(500) {
        let ids: Vec<&str> = batch.iter().map(|(id, _)| id.as_str()).collect();
        let ids = serde_json::to_string(&ids).map_err(anyhow::Error::from)?;
        let listed = db.dialect().json_values("$1");
        let existing: Vec<String> = crate::store::sql!(db, |pool| {
            sqlx::query_scalar(&format!(
                "SELECT id FROM runs WHERE id IN (SELECT value FROM {listed})"
            ))
            .bind(&ids)
            .fetch_all(pool)
            .await
        })?;
        for (id, folder) in batch {
            if !existing.contains(id) && tokio::fs::remove_dir_all(folder).await.is_ok() {
                removed += 1;
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_runs_own_plain_paths_are_artifact_paths() {
        let (experiment, run, inside) = split("0/run_1/artifacts/model/weights.pt").unwrap();
        assert_eq!(
            (experiment, run, inside),
            ("0", "run_1", vec!["model", "weights.pt"])
        );
        assert!(split("0/run_1/artifacts").unwrap().2.is_empty());
        for bad in [
            "",
            "/etc/passwd",
            "0/run_1/artifacts/../../run_2/artifacts/x",
            "0/run_1/artifacts/./x",
            "0/run_1/artifacts//x",
            "0/run_1/artifacts/a\\..\\b",
            "0/run_1/artifacts/\u{1b}[2J",
            "0/run_1/other/x",
            "0/run_1",
        ] {
            assert!(split(bad).is_err(), "{bad:?}");
        }
    }
}
