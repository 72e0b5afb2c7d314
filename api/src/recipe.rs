//! Recipes (versioned job templates with a config schema) and the
//! experiments started from them, as they cross the wire. Parsing and
//! checking a recipe file is `gpuplane-recipe`'s.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// What `POST /api/v1/recipes` takes: the recipe file's text (TOML).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewRecipe {
    pub source: String,
}

/// One published version of a recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Recipe {
    pub name: String,
    pub version: i64,
    /// The project whose admins publish it; none: a server-wide recipe.
    pub project: Option<String>,
    pub runtime_id: String,
    pub description: String,
    /// `builtin` or `external`.
    pub observability: String,
    /// Its jobs get the user's Hugging Face token as `HF_TOKEN`.
    pub hf_token: bool,
    /// `exp init` writes a `train.sh` scaffold for the user's own code.
    pub user_code: bool,
    /// `sha256:…` of everything that changes what runs.
    pub contract: String,
    /// Hidden from new experiments; old locks keep working.
    pub deprecated: bool,
    pub published_at: String,
    pub published_by: Option<String>,
    /// The config keys, from the schema.
    pub keys: Vec<RecipeKey>,
    /// The rules a schema cannot say, as text.
    pub rules: Vec<String>,
    /// The job-spec fields, with `${config.KEY}` placeholders.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub template: Value,
    /// The JSON Schema of the config.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub schema: Value,
    /// The file as published.
    pub source: String,
}

/// One config key of a recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecipeKey {
    pub name: String,
    /// `string`, `number`, `integer` or `boolean`.
    #[serde(rename = "type")]
    pub kind: String,
    pub required: bool,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub default: Option<Value>,
    pub description: Option<String>,
    /// Bounds and choices in words (`1 ≤ x ≤ 64`, `one of a, b`).
    pub constraint: Option<String>,
    /// `model` or `dataset`: a Hugging Face Hub id.
    pub hub: Option<String>,
    /// The only values it takes (the schema's `enum`); the console's form
    /// offers them in a list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub choices: Vec<Value>,
}

/// A recipe's versions, newest first, in `GET /api/v1/recipes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecipeSummary {
    pub name: String,
    pub project: Option<String>,
    pub description: String,
    /// The newest version not deprecated (none when all are).
    pub latest: Option<i64>,
    pub versions: Vec<RecipeVersion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecipeVersion {
    pub version: i64,
    pub runtime_id: String,
    pub contract: String,
    pub deprecated: bool,
    pub published_at: String,
}

/// A job from an experiment folder: its lock's contract and its config.
/// `POST /api/v1/recipes/{name}/{version}/jobs` (and `…/check`) take it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExperimentJob {
    /// The lock's contract; another one than the catalog's is drift (409).
    pub contract: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: BTreeMap<String, Value>,
    #[serde(default = "default_project")]
    pub project: String,
    /// The job's name (default: the recipe's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The experiment folder on a filesystem the agents' hosts share
    /// (`GPUCTL_EXP_DIR`), absolute; not with `files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_dir: Option<String>,
    /// The experiment folder's files, shipped with the job: its agent
    /// writes them into the job's folder and points `GPUCTL_EXP_DIR` there.
    /// `gpuctl job submit --exp DIR` sends them; not with `exp_dir`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FolderFile>,
    #[serde(default)]
    pub priority: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<crate::job::GitSource>,
    /// Where the job also reports (required by `observability = "external"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observability_url: Option<String>,
}

fn default_project() -> String {
    "default".to_string()
}

/// What a job records of the recipe it came from (`JobSpec::recipe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RecipeUse {
    /// The recipe's name.
    pub name: String,
    /// The version the experiment is locked to.
    pub version: i64,
    /// `sha256:…` of everything in that version that changes what runs.
    pub contract: String,
    /// The experiment folder on a shared filesystem (`GPUCTL_EXP_DIR`), absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_dir: Option<String>,
    /// The experiment folder shipped with the job, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shipped: Option<ShippedFolder>,
}

/// What a job records of the experiment folder shipped with it; the files
/// themselves are stored beside the job and sent with each dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ShippedFolder {
    pub files: usize,
    /// Their content, in all.
    pub bytes: u64,
}

/// One file of an experiment folder shipped with its job.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FolderFile {
    /// Relative to the folder, `/`-separated: `train.sh`, `src/model.py`.
    pub path: String,
    /// Written with the owner's execute bit (`train.sh`).
    #[serde(default)]
    pub executable: bool,
    /// The bytes, in standard base64.
    pub content: String,
}

/// Paths and sizes only: a folder's content is not for logs.
impl std::fmt::Debug for FolderFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FolderFile {{ path: {:?}, executable: {}, content: <{} base64 chars> }}",
            self.path,
            self.executable,
            self.content.len()
        )
    }
}

/// The most an experiment folder ships: its content, in all ...
pub const MAX_FOLDER_BYTES: u64 = 4 << 20;
/// ... and its files.
pub const MAX_FOLDER_FILES: usize = 1000;
/// The largest experiment request (`…/check`, `…/jobs`): a full folder in
/// base64, its paths and the rest.
pub const MAX_REQUEST_BYTES: usize = (MAX_FOLDER_BYTES as usize) * 4 / 3 + (2 << 20);
/// The longest path of a shipped file, in bytes.
pub const MAX_FOLDER_PATH: usize = 1024;

/// A shipped file, decoded and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedFile {
    pub path: String,
    pub executable: bool,
    pub bytes: Vec<u8>,
}

/// Decodes a shipped folder and checks it (every problem at once, each on
/// `files[i]…`): paths relative, `/`-separated, without empty, `.` or `..`
/// parts, control characters or backslashes, unique, none a folder of
/// another; within [`MAX_FOLDER_FILES`] and [`MAX_FOLDER_BYTES`]. The
/// server checks it before storing; the agent again before writing.
pub fn check_folder(files: &[FolderFile]) -> Result<Vec<CheckedFile>, Vec<crate::error::FieldError>> {
    use base64::Engine as _;
    let mut problems = Vec::new();
    let mut problem =
        |field: String, message: String| problems.push(crate::error::FieldError { field, message });
    if files.len() > MAX_FOLDER_FILES {
        problem(
            "files".into(),
            format!(
                "has {} files; an experiment folder ships at most {MAX_FOLDER_FILES}",
                files.len()
            ),
        );
    }
    let mut checked = Vec::with_capacity(files.len());
    let mut total: u64 = 0;
    for (index, file) in files.iter().enumerate() {
        if let Err(message) = check_relative_path(&file.path) {
            problem(format!("files[{index}].path"), message);
        }
        match base64::engine::general_purpose::STANDARD.decode(&file.content) {
            Ok(bytes) => {
                total += bytes.len() as u64;
                checked.push(CheckedFile {
                    path: file.path.clone(),
                    executable: file.executable,
                    bytes,
                });
            }
            Err(_) => problem(format!("files[{index}].content"), "is not standard base64".into()),
        }
    }
    if total > MAX_FOLDER_BYTES {
        problem(
            "files".into(),
            format!(
                "hold {total} bytes; an experiment folder ships at most {MAX_FOLDER_BYTES}: keep data and \
                 checkpoints outside it"
            ),
        );
    }
    let paths: std::collections::BTreeSet<&str> = files.iter().map(|file| file.path.as_str()).collect();
    for (index, file) in files.iter().enumerate() {
        if files[..index].iter().any(|earlier| earlier.path == file.path) {
            problem(
                format!("files[{index}].path"),
                format!("`{}` is given twice", file.path),
            );
        }
        let parents = file.path.match_indices('/').map(|(at, _)| &file.path[..at]);
        if let Some(parent) = parents.into_iter().find(|parent| paths.contains(parent)) {
            problem(
                format!("files[{index}].path"),
                format!("`{parent}` is a file, so it cannot hold `{}`", file.path),
            );
        }
    }
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(problems)
    }
}

fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_FOLDER_PATH {
        return Err(format!("is a path of 1 to {MAX_FOLDER_PATH} bytes"));
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err("has a control character or a backslash".into());
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!(
            "`{path}` is not a plain relative path (no leading `/`, no empty, `.` or `..` parts)"
        ));
    }
    Ok(())
}

/// What `…/check` answers: the job the experiment would submit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExperimentCheck {
    pub spec: crate::job::JobSpec,
    /// What would keep it waiting if submitted now.
    pub notes: Vec<String>,
    /// What could not be checked (the Hub did not answer), or is missing
    /// (no Hub token linked for a recipe that gives one to its jobs).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// What `PUT /api/v1/hf/token` takes: the user's Hugging Face Hub token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HubLink {
    pub token: String,
}

/// Never shows the token.
impl std::fmt::Debug for HubLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HubLink { token: <secret> }")
    }
}

/// The caller's link to the Hugging Face Hub (`GET /api/v1/hf`); the token
/// itself is never shown back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HubStatus {
    pub linked: bool,
    pub linked_at: Option<String>,
    /// The Hub's name for the token's account, when it answered at link time.
    pub hub_user: Option<String>,
    /// The Hub the server checks against; none: the precheck is off.
    pub endpoint: Option<String>,
    /// Why the link is refused or unverified, when it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
