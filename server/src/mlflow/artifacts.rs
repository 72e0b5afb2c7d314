//! MLflow artifacts in the artifact store (`artifact_store`): a folder
//! (default `artifacts/` in the data dir) or S3-compatible object storage
//! (`s3://bucket/prefix`), both through the `object_store` crate, at the
//! paths MLflow's proxied artifact API names: `EXPERIMENT/RUN/artifacts/…`
//! (a run's artifact URI is `mlflow-artifacts:/EXPERIMENT/RUN/artifacts`).
//! Bytes stream in and out in parts; a file is never held whole, and one
//! being written is invisible until it is complete (a staged file renamed
//! into place, or a multipart upload completed). A run's checkpoints are
//! listed among its artifacts, under `checkpoints/`.

use crate::config::ArtifactLocation;
use crate::identity::access::Caller;
use crate::runs;
use crate::store::Error;
use futures_util::{Stream, StreamExt, TryStreamExt};
use gpuplane_api::project::Role;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::sync::Arc;
use std::time::Duration;

/// The longest artifact path, in bytes.
pub const MAX_PATH: usize = 1024;

/// An artifact path's experiment, run and the parts below `artifacts/`;
/// every part plain (no empty, `.` or `..` part, no backslash or control
/// character).
pub fn split(path: &str) -> Result<(&str, &str, Vec<&str>), Error> {
    let bad = |why: &str| Error::field("path", format!("Invalid path: `{}` {why}", path.escape_debug()));
    if path.is_empty() || path.len() > MAX_PATH {
        return Err(bad(&format!("is not an artifact path of 1 to {MAX_PATH} bytes")));
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err(bad("has a control character or a backslash"));
    }
    let mut parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    // `…/artifacts/.` is the folder itself, as the client asks for it.
    if parts.len() > 3 && parts.last() == Some(&".") {
        parts.pop();
    }
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

/// The size of the parts an upload is sent in (S3's smallest is 5 MiB; at
/// most 10,000 parts make an 80 GB file), and how many go at once.
const PART: usize = 8 << 20;
const PARTS_AT_ONCE: usize = 2;

/// The artifact store.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    store: Arc<dyn ObjectStore>,
    location: ArtifactLocation,
}

impl ArtifactStore {
    /// Opens the store (a folder is created if missing; S3 credentials
    /// and region come from the `AWS_*` variables).
    pub fn open(location: &ArtifactLocation) -> anyhow::Result<ArtifactStore> {
        let store: Arc<dyn ObjectStore> = match location {
            ArtifactLocation::Folder(folder) => {
                std::fs::create_dir_all(folder).map_err(|error| {
                    anyhow::anyhow!("cannot create the artifact store {}: {error}", folder.display())
                })?;
                Arc::new(LocalFileSystem::new_with_prefix(folder)?.with_automatic_cleanup(true))
            }
            ArtifactLocation::S3 {
                bucket,
                prefix,
                endpoint,
            } => {
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                let s3: Arc<dyn ObjectStore> = Arc::new(builder.build()?);
                if prefix.is_empty() {
                    s3
                } else {
                    Arc::new(PrefixStore::new(s3, prefix.as_str()))
                }
            }
        };
        Ok(ArtifactStore {
            store,
            location: location.clone(),
        })
    }

    pub fn location(&self) -> &ArtifactLocation {
        &self.location
    }

    /// Writes a file from a body, part by part (each chunk within `idle`
    /// of the last); the bytes written. A small file is one put; a larger
    /// one a multipart upload, aborted if the body breaks off.
    pub async fn store<S, B, E>(&self, target: &ObjectPath, mut body: S, idle: Duration) -> Result<u64, Error>
    where
        S: Stream<Item = Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        let mut next = async || match tokio::time::timeout(idle, body.next()).await {
            Err(_) => Err(Error::field(
                "body",
                format!("no data arrived for {}s", idle.as_secs()),
            )),
            Ok(None) => Ok(None),
            Ok(Some(Err(error))) => Err(Error::field("body", format!("the upload broke off: {error}"))),
            Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
        };
        let mut first = Vec::new();
        while first.len() < PART {
            match next().await? {
                Some(chunk) => first.extend_from_slice(chunk.as_ref()),
                None => {
                    let total = first.len() as u64;
                    self.store
                        .put(target, PutPayload::from(first))
                        .await
                        .map_err(|error| stored(target, error))?;
                    return Ok(total);
                }
            }
        }
        let upload = self
            .store
            .put_multipart(target)
            .await
            .map_err(|error| stored(target, error))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut total = first.len() as u64;
        writer.write(&first);
        drop(first);
        let sent = async {
            while let Some(chunk) = next().await? {
                writer
                    .wait_for_capacity(PARTS_AT_ONCE)
                    .await
                    .map_err(|error| stored(target, error))?;
                total += chunk.as_ref().len() as u64;
                writer.write(chunk.as_ref());
            }
            Ok::<(), Error>(())
        }
        .await;
        match sent {
            Ok(()) => {
                writer.finish().await.map_err(|error| stored(target, error))?;
                Ok(total)
            }
            Err(error) => {
                let _ = writer.abort().await;
                Err(error)
            }
        }
    }

    /// The entries of a folder, by name (none when it does not exist, as
    /// MLflow answers; a file lists as itself).
    pub async fn list(&self, at: &ObjectPath) -> Result<Vec<Listed>, Error> {
        let listed = self
            .store
            .list_with_delimiter(Some(at))
            .await
            .map_err(|error| read(at, error))?;
        let mut found: Vec<Listed> = listed
            .common_prefixes
            .iter()
            .filter_map(|folder| folder.filename())
            .map(|name| Listed {
                name: name.to_string(),
                is_dir: true,
                size: None,
            })
            .chain(listed.objects.iter().filter_map(|object| {
                object.location.filename().map(|name| Listed {
                    name: name.to_string(),
                    is_dir: false,
                    size: Some(object.size),
                })
            }))
            .collect();
        if found.is_empty()
            && let Ok(file) = self.store.head(at).await
        {
            found.push(Listed {
                name: at.filename().unwrap_or_default().to_string(),
                is_dir: false,
                size: Some(file.size),
            });
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    /// An artifact file, to stream out, with its size.
    pub async fn open_file(
        &self,
        file: &ObjectPath,
    ) -> Result<
        (
            impl Stream<Item = Result<axum::body::Bytes, object_store::Error>> + use<>,
            u64,
        ),
        Error,
    > {
        match self.store.get(file).await {
            Ok(found) => {
                let size = found.meta.size;
                Ok((found.into_stream(), size))
            }
            Err(object_store::Error::NotFound { .. }) => Err(Error::NotFound(format!(
                "no artifact {}",
                file.filename().unwrap_or_default()
            ))),
            Err(error) => Err(read(file, error)),
        }
    }

    /// Removes a deleted run's artifacts (`gpuctl run delete`), in
    /// whichever experiment's folder they are.
    pub async fn remove_run(&self, run_id: &str) -> Result<(), Error> {
        for experiment in self.experiment_folders().await? {
            self.remove(&experiment.clone().join(run_id)).await?;
        }
        Ok(())
    }

    /// The store's top folders, one an experiment.
    async fn experiment_folders(&self) -> Result<Vec<ObjectPath>, Error> {
        let listed = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(|error| read(&ObjectPath::default(), error))?;
        Ok(listed.common_prefixes)
    }

    async fn remove(&self, folder: &ObjectPath) -> Result<(), Error> {
        let files = self.store.list(Some(folder)).map_ok(|file| file.location).boxed();
        let mut removed = self.store.delete_stream(files);
        while let Some(result) = removed.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(error) => {
                    return Err(anyhow::anyhow!("cannot remove the artifacts in {folder}: {error}").into());
                }
            }
        }
        Ok(())
    }

    /// Removes the artifacts of runs that no longer exist (deleted by the
    /// retention settings, or while a removal failed); the runs whose
    /// artifacts were removed.
    pub async fn sweep(&self, db: &crate::store::Db) -> Result<usize, Error> {
        let mut folders = Vec::new();
        for experiment in self.experiment_folders().await? {
            let runs = self
                .store
                .list_with_delimiter(Some(&experiment))
                .await
                .map_err(|error| read(&experiment, error))?;
            for run in runs.common_prefixes {
                if let Some(id) = run.filename() {
                    folders.push((id.to_string(), run.clone()));
                }
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
                if !existing.contains(id) && self.remove(folder).await.is_ok() {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

fn stored(path: &ObjectPath, error: object_store::Error) -> Error {
    anyhow::anyhow!("cannot store the artifact {path}: {error}").into()
}

fn read(path: &ObjectPath, error: object_store::Error) -> Error {
    anyhow::anyhow!("cannot read the artifacts at {path}: {error}").into()
}

/// Where an artifact path is in the store, once the caller has `role` in
/// its run's project and the path names that run's own experiment (else
/// "not found", as for a run that does not exist).
pub async fn locate(
    db: &crate::store::Db,
    caller: &Caller,
    path: &str,
    role: Role,
) -> Result<Located, Error> {
    let (experiment, run_id, inside) = split(path)?;
    runs::check(db, caller, run_id, role).await?;
    if super::experiment_of(db, run_id).await?.to_string() != experiment {
        return Err(Error::NotFound(format!(
            "no run {run_id} in experiment {experiment}"
        )));
    }
    let in_store = ObjectPath::from_iter(
        [experiment, run_id, "artifacts"]
            .into_iter()
            .chain(inside.iter().copied()),
    );
    Ok(Located {
        run_id: run_id.to_string(),
        inside: inside.iter().map(|part| part.to_string()).collect(),
        in_store,
    })
}

/// An artifact path of a run the caller may use.
#[derive(Debug, Clone)]
pub struct Located {
    pub run_id: String,
    /// The parts below the run's `artifacts/`.
    pub inside: Vec<String>,
    /// Where it is in the store.
    pub in_store: ObjectPath,
}

/// The folder a run's checkpoints are listed under.
pub const CHECKPOINTS: &str = "checkpoints";

impl Located {
    /// Whether this is the run's checkpoints folder (or below it), which
    /// lists what the run recorded instead of what was uploaded.
    pub fn in_checkpoints(&self) -> bool {
        self.inside.first().is_some_and(|part| part == CHECKPOINTS)
    }
}

/// One entry of a listed folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub is_dir: bool,
    pub size: Option<u64>,
}

/// The run's recorded checkpoints as the entries of its `checkpoints/`
/// folder (by file name; a name two checkpoints share is listed once, the
/// newest), and the folder itself among the root's entries.
pub async fn with_checkpoints(
    db: &crate::store::Db,
    at: &Located,
    mut listed: Vec<Listed>,
) -> Result<Vec<Listed>, Error> {
    let checkpoints = runs::checkpoints::of_run(db, &at.run_id).await?;
    if checkpoints.is_empty() {
        return Ok(listed);
    }
    match at.inside.as_slice() {
        [] => {
            if !listed.iter().any(|entry| entry.name == CHECKPOINTS) {
                listed.push(Listed {
                    name: CHECKPOINTS.to_string(),
                    is_dir: true,
                    size: None,
                });
                listed.sort_by(|a, b| a.name.cmp(&b.name));
            }
            Ok(listed)
        }
        [folder] if folder == CHECKPOINTS => {
            let mut by_name = std::collections::BTreeMap::new();
            for checkpoint in checkpoints {
                let name = checkpoint
                    .path
                    .rsplit('/')
                    .next()
                    .unwrap_or(&checkpoint.path)
                    .to_string();
                by_name.entry(name).or_insert(checkpoint.size);
            }
            for entry in listed {
                by_name
                    .entry(entry.name)
                    .or_insert(entry.size.unwrap_or_default());
            }
            Ok(by_name
                .into_iter()
                .map(|(name, size)| Listed {
                    name,
                    is_dir: false,
                    size: Some(size),
                })
                .collect())
        }
        _ => Ok(listed),
    }
}

/// Where a recorded checkpoint is, for a download of it: its bytes stay
/// on the host that wrote them.
pub async fn checkpoint_elsewhere(db: &crate::store::Db, at: &Located) -> Result<Option<String>, Error> {
    let [folder, name] = at.inside.as_slice() else {
        return Ok(None);
    };
    if folder != CHECKPOINTS {
        return Ok(None);
    }
    let checkpoints = runs::checkpoints::of_run(db, &at.run_id).await?;
    Ok(checkpoints
        .iter()
        .find(|checkpoint| checkpoint.path.rsplit('/').next() == Some(name.as_str()))
        .map(|checkpoint| {
            format!(
                "checkpoint {name} is recorded, not uploaded: it is {} on the host that ran the job ({} bytes)",
                checkpoint.path, checkpoint.size
            )
        }))
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
        assert!(split("0/run_1/artifacts/.").unwrap().2.is_empty());
        assert_eq!(split("0:4/run_1/artifacts/m").unwrap().0, "0:4");
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
