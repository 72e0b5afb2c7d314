//! Experiment folders: `gpuctl exp init DIR --recipe NAME[@VERSION]` writes
//! one; `gpuctl validate DIR`, `gpuctl job submit --exp DIR` and `gpuctl
//! recipe status|upgrade DIR` read it. A folder holds:
//!
//! - `experiment.toml`: the lock (`[recipe] name, version, contract,
//!   runtime_id`) and the project;
//! - `config.yaml`: the config, the schema's defaults and descriptions
//!   written in at init;
//! - `.gpuplane/recipe.toml`: the locked recipe as published, so
//!   `gpuctl validate DIR` checks offline with the server's own code;
//! - `train.sh`: for recipes that run the user's code, a scaffold that
//!   exits 2 until its line is replaced.
//!
//! `submit --exp` ships the folder with the job (every file but those
//! under a name starting with `.`; 4 MiB, 1,000 files at most): the job's
//! agent writes it into the job's folder, `GPUCTL_EXP_DIR`.

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use gpuplane_api::error::FieldError;
use gpuplane_api::job::Job;
use gpuplane_api::recipe::{
    ExperimentCheck, ExperimentJob, FolderFile, MAX_FOLDER_BYTES, MAX_FOLDER_FILES, Recipe as RecipeInfo,
};
use gpuplane_recipe::{Recipe, changes, config};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "experiment.toml";
pub const CONFIG_FILE: &str = "config.yaml";
pub const CACHED_RECIPE: &str = ".gpuplane/recipe.toml";
pub const SCAFFOLD: &str = "train.sh";

/// `experiment.toml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub recipe: LockedRecipe,
    #[serde(default)]
    pub experiment: ExperimentSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedRecipe {
    pub name: String,
    pub version: i64,
    pub contract: String,
    pub runtime_id: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSettings {
    /// The project its jobs go to (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

fn invalid(message: impl Into<String>) -> CliError {
    CliError::new(Failure::Invalid, "invalid_experiment", message)
}

/// Exit 7 naming every bad key, as the server's 422 does.
pub fn refused(place: &str, details: Vec<FieldError>) -> CliError {
    let message = match details.as_slice() {
        [one] => format!("{place}: {}: {}", one.field, one.message),
        many => format!("{place} has {} problems:", many.len()),
    };
    let mut error = CliError::new(Failure::Invalid, "validation_error", message);
    error.error.details = details;
    error
}

/// An experiment folder, read.
pub struct Experiment {
    pub dir: PathBuf,
    pub lock: Lock,
    /// The locked recipe, from `.gpuplane/recipe.toml`.
    pub recipe: Recipe,
    pub config: Map<String, Value>,
}

impl Experiment {
    pub fn read(dir: &Path) -> Result<Experiment, CliError> {
        let lock_path = dir.join(LOCK_FILE);
        let text = std::fs::read_to_string(&lock_path).map_err(|error| {
            invalid(format!(
                "{} is not an experiment folder ({error}): make one with `gpuctl exp init {} --recipe NAME`",
                dir.display(),
                dir.display()
            ))
        })?;
        let lock: Lock = toml::from_str(&text).map_err(|error| {
            invalid(format!(
                "{}: {}",
                lock_path.display(),
                error.to_string().trim_end()
            ))
        })?;
        let cached = dir.join(CACHED_RECIPE);
        let source = std::fs::read_to_string(&cached).map_err(|error| {
            invalid(format!(
                "{}: {error}; `gpuctl recipe upgrade {}` fetches the recipe again",
                cached.display(),
                dir.display()
            ))
        })?;
        let recipe =
            Recipe::parse(&source).map_err(|details| refused(&cached.display().to_string(), details))?;
        if recipe.contract() != lock.recipe.contract {
            return Err(invalid(format!(
                "{} is not the recipe {} locks (contract {}): `gpuctl recipe upgrade {}` fetches it again",
                cached.display(),
                LOCK_FILE,
                lock.recipe.contract,
                dir.display()
            )));
        }
        let config = read_config(&dir.join(CONFIG_FILE))?;
        Ok(Experiment {
            dir: dir.to_path_buf(),
            lock,
            recipe,
            config,
        })
    }

    pub fn project(&self) -> String {
        self.lock
            .experiment
            .project
            .clone()
            .unwrap_or_else(|| "default".into())
    }

    /// Checks the config with the recipe's own rules, here (no server).
    pub fn check_offline(&self) -> Result<config::Checked, CliError> {
        config::check(&self.recipe, &self.config)
            .map_err(|details| refused(&self.dir.join(CONFIG_FILE).display().to_string(), details))
    }

    /// The request the server's `…/check` and `…/jobs` take, without the
    /// folder's files (`files`).
    pub fn request(&self, name: Option<String>, priority: i64, tags: Vec<String>) -> ExperimentJob {
        ExperimentJob {
            contract: self.lock.recipe.contract.clone(),
            config: self.config.clone().into_iter().collect(),
            project: self.project(),
            name,
            exp_dir: None,
            files: Vec::new(),
            priority,
            tags,
            git: None,
            observability_url: None,
        }
    }

    /// The files the folder ships with its job: all but those under a name
    /// starting with `.` (`.git`, `.venv`, `.gpuplane`); a link to a file
    /// ships the file, a link to a folder is left out (said on stderr).
    /// Refused past 4 MiB or 1,000 files, naming the largest.
    pub fn files(&self) -> Result<Vec<FolderFile>, CliError> {
        let mut found = Vec::new();
        collect_files(&self.dir, "", &mut found)?;
        let total: u64 = found.iter().map(|(_, _, bytes)| bytes.len() as u64).sum();
        if total > MAX_FOLDER_BYTES || found.len() > MAX_FOLDER_FILES {
            found.sort_by_key(|(_, _, bytes)| std::cmp::Reverse(bytes.len()));
            let largest: Vec<String> = found
                .iter()
                .take(3)
                .map(|(path, _, bytes)| format!("{path} ({} bytes)", bytes.len()))
                .collect();
            return Err(invalid(format!(
                "{} holds {} files, {total} bytes (largest: {}); an experiment folder ships at most \
                 {MAX_FOLDER_FILES} files and {MAX_FOLDER_BYTES} bytes with its job: keep data and checkpoints \
                 outside it (name them in config.yaml) or under a name starting with `.`, which is not shipped",
                self.dir.display(),
                found.len(),
                largest.join(", ")
            )));
        }
        use base64::Engine as _;
        Ok(found
            .into_iter()
            .map(|(path, executable, bytes)| FolderFile {
                path,
                executable,
                content: base64::engine::general_purpose::STANDARD.encode(bytes),
            })
            .collect())
    }

    pub fn api_path(&self, action: &str) -> String {
        format!(
            "recipes/{}/{}/{action}",
            self.lock.recipe.name, self.lock.recipe.version
        )
    }
}

/// The files under `dir` (shown as `prefix…`), sorted, for [`Experiment::files`].
fn collect_files(dir: &Path, prefix: &str, found: &mut Vec<(String, bool, Vec<u8>)>) -> Result<(), CliError> {
    use std::os::unix::fs::PermissionsExt;
    let unreadable =
        |path: &Path, error: std::io::Error| invalid(format!("cannot read {}: {error}", path.display()));
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
        .map_err(|error| unreadable(dir, error))?
        .collect::<Result<_, _>>()
        .map_err(|error| unreadable(dir, error))?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            return Err(invalid(format!(
                "{}: the name is not UTF-8; rename it or move it out of the experiment folder",
                path.display()
            )));
        };
        if name.starts_with('.') {
            continue;
        }
        let shown = format!("{prefix}{name}");
        let is_link = entry
            .file_type()
            .map_err(|error| unreadable(&path, error))?
            .is_symlink();
        let metadata = std::fs::metadata(&path).map_err(|error| unreadable(&path, error))?;
        if metadata.is_dir() && is_link {
            eprintln!("note: {shown} is a link to a folder: not shipped with the job");
        } else if metadata.is_dir() {
            collect_files(&path, &format!("{shown}/"), found)?;
        } else if metadata.is_file() {
            if metadata.len() > MAX_FOLDER_BYTES {
                return Err(invalid(format!(
                    "{} is {} bytes; an experiment folder ships at most {MAX_FOLDER_BYTES} bytes with its job: \
                     keep data and checkpoints outside it or under a name starting with `.`",
                    path.display(),
                    metadata.len()
                )));
            }
            let bytes = std::fs::read(&path).map_err(|error| unreadable(&path, error))?;
            found.push((shown, metadata.permissions().mode() & 0o111 != 0, bytes));
        }
    }
    Ok(())
}

/// `config.yaml` as a table of scalars (an empty file is an empty config).
fn read_config(path: &Path) -> Result<Map<String, Value>, CliError> {
    let text =
        std::fs::read_to_string(path).map_err(|error| invalid(format!("{}: {error}", path.display())))?;
    let parsed: Option<Value> = serde_yaml::from_str(&text)
        .map_err(|error| invalid(format!("{}: not YAML: {error}", path.display())))?;
    match parsed {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(config)) => Ok(config),
        Some(_) => Err(invalid(format!(
            "{}: the config is a mapping of keys to values",
            path.display()
        ))),
    }
}

/// `config.yaml` for `recipe`: each key with its description, type and
/// bounds as comments; keys without a value left commented out.
pub fn config_yaml(recipe: &Recipe, values: &Map<String, Value>) -> String {
    let mut text = format!(
        "# Config of experiment on recipe {} v{}: checked by `gpuctl validate .` here and by\n\
         # the server on `gpuctl job submit --exp .`. Keys: `gpuctl recipe show {}@{}`.\n",
        recipe.name, recipe.version, recipe.name, recipe.version
    );
    let extra: Vec<(&String, &Value)> = values
        .iter()
        .filter(|(key, _)| !recipe.properties().contains_key(*key))
        .collect();
    for key in recipe.keys() {
        text.push('\n');
        if let Some(description) = &key.description {
            for line in description.lines() {
                text.push_str(&format!("# {line}\n"));
            }
        }
        let mut facts = vec![key.kind.clone()];
        if key.required {
            facts.push("required".into());
        }
        if let Some(constraint) = &key.constraint {
            facts.push(constraint.clone());
        }
        if let Some(hub) = &key.hub {
            facts.push(format!("a Hugging Face {hub} id, org/name"));
        }
        text.push_str(&format!("# ({})\n", facts.join("; ")));
        match values.get(&key.name) {
            Some(value) => text.push_str(&format!("{}: {}\n", key.name, yaml_scalar(value))),
            None => text.push_str(&format!("# {}:\n", key.name)),
        }
    }
    if !extra.is_empty() {
        text.push_str("\n# Not keys of the recipe (kept as you wrote them):\n");
        for (key, value) in extra {
            text.push_str(&format!("{key}: {}\n", yaml_scalar(value)));
        }
    }
    text
}

fn yaml_scalar(value: &Value) -> String {
    serde_yaml::to_string(value)
        .map(|text| text.trim_end().to_string())
        .unwrap_or_else(|_| value.to_string())
}

fn scaffold(recipe: &Recipe) -> String {
    format!(
        "#!/bin/sh\n\
         # The training command of this experiment (recipe {} v{}). Its job runs it in\n\
         # $GPUCTL_WORK_DIR; this folder is $GPUCTL_EXP_DIR, the config is\n\
         # \"$GPUCTL_EXP_DIR/config.yaml\". Replace lines 7-8 with your command, e.g.\n\
         #   exec python \"$GPUCTL_EXP_DIR/train.py\" --config \"$GPUCTL_EXP_DIR/config.yaml\"\n\
         \n\
         echo \"train.sh is the scaffold gpuctl exp init wrote: replace lines 7-8 of $0 with your training command\" >&2\n\
         exit 2\n",
        recipe.name, recipe.version
    )
}

/// Writes the lock, the cached recipe and the config (not `train.sh`).
fn write_lock_and_config(
    dir: &Path,
    info: &RecipeInfo,
    recipe: &Recipe,
    project: Option<String>,
    values: &Map<String, Value>,
) -> Result<(), CliError> {
    let lock = Lock {
        recipe: LockedRecipe {
            name: info.name.clone(),
            version: info.version,
            contract: info.contract.clone(),
            runtime_id: info.runtime_id.clone(),
        },
        experiment: ExperimentSettings { project },
    };
    let lock_text = format!(
        "# The recipe this experiment is locked to. `gpuctl recipe status .` shows\n\
         # what a newer version changes; `gpuctl recipe upgrade .` moves to it.\n{}",
        toml::to_string(&lock).map_err(anyhow::Error::from)?
    );
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text)
            .map_err(|error| invalid(format!("cannot write {}: {error}", path.display())))
    };
    std::fs::create_dir_all(dir.join(".gpuplane"))
        .map_err(|error| invalid(format!("cannot create {}: {error}", dir.display())))?;
    write(dir.join(CACHED_RECIPE), &info.source)?;
    write(dir.join(CONFIG_FILE), &config_yaml(recipe, values))?;
    write(dir.join(LOCK_FILE), &lock_text)
}

/// `NAME` or `NAME@VERSION`.
pub fn parse_reference(text: &str) -> Result<(String, Option<i64>), String> {
    match text.split_once('@') {
        None => Ok((text.to_string(), None)),
        Some((name, version)) => {
            let version = version
                .trim_start_matches('v')
                .parse()
                .map_err(|_| format!("`{text}` is NAME or NAME@VERSION (a whole number)"))?;
            Ok((name.to_string(), Some(version)))
        }
    }
}

pub fn recipe_path(name: &str, version: Option<i64>) -> String {
    match version {
        Some(version) => format!("recipes/{name}/{version}"),
        None => format!("recipes/{name}"),
    }
}

#[derive(Serialize)]
struct Initialized {
    dir: String,
    recipe: String,
    version: i64,
    contract: String,
    files: Vec<String>,
}

/// `gpuctl exp init DIR --recipe NAME[@VERSION] [--project P]`.
pub async fn init(
    client: &Client,
    dir: &Path,
    reference: &str,
    project: Option<String>,
    out: &Output,
) -> Result<(), CliError> {
    let (name, version) = parse_reference(reference).map_err(invalid)?;
    if dir.join(LOCK_FILE).exists() {
        return Err(CliError::new(
            Failure::Conflict,
            "conflict",
            format!(
                "{} is already an experiment: `gpuctl recipe upgrade {}` moves it to another version",
                dir.display(),
                dir.display()
            ),
        ));
    }
    let info: RecipeInfo = client.get(&recipe_path(&name, version)).await?;
    if info.deprecated {
        return Err(CliError::new(
            Failure::Conflict,
            "conflict",
            format!(
                "recipe {} v{} is deprecated: new experiments use a newer version (`gpuctl recipe show {}`)",
                info.name, info.version, info.name
            ),
        ));
    }
    let recipe = Recipe::parse(&info.source).map_err(|details| refused("the catalog's recipe", details))?;
    std::fs::create_dir_all(dir)
        .map_err(|error| invalid(format!("cannot create {}: {error}", dir.display())))?;
    write_lock_and_config(dir, &info, &recipe, project, &recipe.defaults())?;
    let mut files = vec![
        LOCK_FILE.to_string(),
        CONFIG_FILE.to_string(),
        CACHED_RECIPE.to_string(),
    ];
    if recipe.user_code && !dir.join(SCAFFOLD).exists() {
        let path = dir.join(SCAFFOLD);
        std::fs::write(&path, scaffold(&recipe))
            .map_err(|error| invalid(format!("cannot write {}: {error}", path.display())))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
        files.push(SCAFFOLD.to_string());
    }
    let done = Initialized {
        dir: dir.display().to_string(),
        recipe: info.name.clone(),
        version: info.version,
        contract: info.contract.clone(),
        files,
    };
    out.emit(&done, |done| {
        let required: Vec<String> = recipe
            .keys()
            .into_iter()
            .filter(|key| key.required && key.default.is_none())
            .map(|key| key.name)
            .collect();
        let mut text = format!(
            "Experiment {} on recipe {} v{} ({})\nwrote {}",
            done.dir,
            done.recipe,
            done.version,
            done.contract,
            done.files.join(", ")
        );
        if !required.is_empty() {
            text.push_str(&format!("\nset in config.yaml: {}", required.join(", ")));
        }
        if done.files.iter().any(|file| file == SCAFFOLD) {
            text.push_str("\nreplace the training command in train.sh");
        }
        text.push_str(&format!(
            "\nthen: gpuctl validate {0} && gpuctl job submit --exp {0}",
            done.dir
        ));
        text
    });
    Ok(())
}

#[derive(Serialize)]
struct Validated {
    dir: String,
    recipe: String,
    version: i64,
    valid: bool,
    /// What `submit --exp` ships with the job.
    ships: Ships,
    /// From the server, with `--remote`: what would keep it waiting now.
    notes: Vec<String>,
}

#[derive(Serialize)]
struct Ships {
    files: usize,
    bytes: u64,
}

/// The server's drift refusal with the folder named in its commands.
fn naming(mut error: CliError, dir: &Path) -> CliError {
    if error.error.code == gpuplane_api::error::codes::RECIPE_DRIFT {
        error.error.message = error
            .error
            .message
            .replace(" DIR", &format!(" {}", dir.display()));
    }
    error
}

/// `gpuctl validate DIR`: offline with the cached recipe; `--remote` also
/// asks the server (drift, the project, what would keep it waiting).
pub async fn validate(
    server: Option<String>,
    token: Option<String>,
    dir: &Path,
    remote: bool,
    out: &Output,
) -> Result<(), CliError> {
    let experiment = Experiment::read(dir)?;
    experiment.check_offline()?;
    let files = experiment.files()?;
    // The server's own check of a shipped folder.
    let checked = gpuplane_api::recipe::check_folder(&files)
        .map_err(|details| refused(&dir.display().to_string(), details))?;
    let ships = Ships {
        files: checked.len(),
        bytes: checked.iter().map(|file| file.bytes.len() as u64).sum(),
    };
    let mut notes = Vec::new();
    if remote {
        let client = Client::new(server, token)?;
        let mut request = experiment.request(None, 0, Vec::new());
        request.files = files;
        let check: ExperimentCheck = client
            .post(&experiment.api_path("check"), &request)
            .await
            .map_err(|error| naming(error, dir))?;
        for warning in &check.warnings {
            eprintln!("warning: {warning}");
        }
        notes = check.notes;
    }
    let done = Validated {
        dir: dir.display().to_string(),
        recipe: experiment.lock.recipe.name.clone(),
        version: experiment.lock.recipe.version,
        valid: true,
        ships,
        notes,
    };
    out.emit(&done, |done| {
        let mut text = format!(
            "{}: the config is valid for recipe {} v{}; submit --exp ships {} files ({} bytes) with the job",
            done.dir, done.recipe, done.version, done.ships.files, done.ships.bytes
        );
        for note in &done.notes {
            text.push_str(&format!("\nif submitted now it would wait: {note}"));
        }
        text
    });
    Ok(())
}

/// What `gpuctl job submit --exp DIR` takes from its flags.
pub struct SubmitOptions {
    pub name: Option<String>,
    pub project: Option<String>,
    pub priority: i64,
    pub tags: Vec<String>,
    pub allow_dirty: bool,
    pub upgrade: bool,
    pub observability_url: Option<String>,
}

/// `gpuctl job submit --exp DIR [--upgrade-recipe]`: checked here first
/// (the same code as the server), then submitted; the server checks again.
pub async fn submit(client: &Client, dir: &Path, options: SubmitOptions) -> Result<Job, CliError> {
    if options.upgrade {
        upgrade_folder(client, dir).await?;
    }
    let mut experiment = Experiment::read(dir)?;
    if let Some(project) = options.project {
        experiment.lock.experiment.project = Some(project);
    }
    experiment.check_offline()?;
    let files = experiment.files()?;
    let mut request = experiment.request(options.name, options.priority, options.tags);
    request.git = crate::commands::jobs::checkout_of(&experiment.dir, options.allow_dirty)?;
    request.observability_url = options.observability_url;
    // The server's own check first, for what it could not check (the Hub).
    let check: ExperimentCheck = client
        .post(&experiment.api_path("check"), &request)
        .await
        .map_err(|error| naming(error, dir))?;
    for warning in &check.warnings {
        eprintln!("warning: {warning}");
    }
    request.files = files;
    client
        .post(&experiment.api_path("jobs"), &request)
        .await
        .map_err(|error| naming(error, dir))
}

#[derive(Serialize)]
struct Status {
    dir: String,
    recipe: String,
    locked: i64,
    /// The catalog's newest version not deprecated.
    latest: Option<i64>,
    up_to_date: bool,
    changes: Vec<String>,
}

/// `gpuctl recipe status DIR`: the lock against the catalog's newest.
pub async fn status(client: &Client, dir: &Path, out: &Output) -> Result<(), CliError> {
    let experiment = Experiment::read(dir)?;
    let name = &experiment.lock.recipe.name;
    let latest: RecipeInfo = client.get(&recipe_path(name, None)).await?;
    let newer = !latest.deprecated && latest.version > experiment.lock.recipe.version;
    let changes = if newer {
        let recipe =
            Recipe::parse(&latest.source).map_err(|details| refused("the catalog's recipe", details))?;
        changes::changes(&experiment.recipe, &recipe)
    } else {
        Vec::new()
    };
    let done = Status {
        dir: dir.display().to_string(),
        recipe: name.clone(),
        locked: experiment.lock.recipe.version,
        latest: (!latest.deprecated).then_some(latest.version),
        up_to_date: !newer,
        changes,
    };
    out.emit(&done, |done| {
        if done.up_to_date {
            return format!(
                "{}: recipe {} v{} is the newest",
                done.dir, done.recipe, done.locked
            );
        }
        let mut text = format!(
            "{}: locked to recipe {} v{}; the catalog's newest is v{}. What changes:",
            done.dir,
            done.recipe,
            done.locked,
            done.latest.unwrap_or_default()
        );
        for line in &done.changes {
            text.push_str(&format!("\n  {line}"));
        }
        text.push_str(&format!("\nupgrade with: gpuctl recipe upgrade {}", done.dir));
        text
    });
    Ok(())
}

#[derive(Serialize)]
struct Upgraded {
    dir: String,
    recipe: String,
    from: i64,
    to: i64,
    /// Keys the new version added, with their defaults.
    added: Vec<String>,
    /// Keys the new version no longer has.
    dropped: Vec<String>,
}

/// Moves the folder to the catalog's newest version, keeping the user's
/// values; a value the new schema refuses stops it with nothing written.
async fn upgrade_folder(client: &Client, dir: &Path) -> Result<Upgraded, CliError> {
    let experiment = Experiment::read(dir)?;
    let name = experiment.lock.recipe.name.clone();
    let from = experiment.lock.recipe.version;
    let latest: RecipeInfo = client.get(&recipe_path(&name, None)).await?;
    let mut done = Upgraded {
        dir: dir.display().to_string(),
        recipe: name,
        from,
        to: from,
        added: Vec::new(),
        dropped: Vec::new(),
    };
    if latest.deprecated || (latest.version <= from && latest.contract == experiment.lock.recipe.contract) {
        return Ok(done);
    }
    let recipe = Recipe::parse(&latest.source).map_err(|details| refused("the catalog's recipe", details))?;
    let (carried, dropped) = changes::carry(&experiment.config, &recipe);
    config::check(&recipe, &carried).map_err(|details| {
        let mut error = refused(
            &format!(
                "{} under recipe {} v{}",
                dir.join(CONFIG_FILE).display(),
                recipe.name,
                recipe.version
            ),
            details,
        );
        error
            .error
            .message
            .push_str(" (nothing was changed: fix config.yaml, or wait for a fixed recipe)");
        error
    })?;
    done.added = recipe
        .properties()
        .keys()
        .filter(|key| {
            !experiment.config.contains_key(*key) && !experiment.recipe.properties().contains_key(*key)
        })
        .map(|key| {
            format!(
                "{key} = {}",
                carried
                    .get(key)
                    .map(Value::to_string)
                    .unwrap_or_else(|| "(unset)".into())
            )
        })
        .collect();
    done.dropped = dropped;
    write_lock_and_config(
        dir,
        &latest,
        &recipe,
        experiment.lock.experiment.project.clone(),
        &carried,
    )?;
    done.to = latest.version;
    Ok(done)
}

/// `gpuctl recipe upgrade DIR`.
pub async fn upgrade(client: &Client, dir: &Path, out: &Output) -> Result<(), CliError> {
    let done = upgrade_folder(client, dir).await?;
    out.emit(&done, |done| {
        if done.from == done.to {
            return format!(
                "{}: recipe {} v{} is the newest; nothing to do",
                done.dir, done.recipe, done.to
            );
        }
        let mut text = format!(
            "{}: recipe {} v{} → v{}",
            done.dir, done.recipe, done.from, done.to
        );
        if !done.added.is_empty() {
            text.push_str(&format!("\nadded: {}", done.added.join(", ")));
        }
        if !done.dropped.is_empty() {
            text.push_str(&format!(
                "\ndropped (no longer keys of the recipe): {}",
                done.dropped.join(", ")
            ));
        }
        text
    });
    Ok(())
}
