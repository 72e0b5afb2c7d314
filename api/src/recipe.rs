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
    /// The experiment folder as the job sees it (`GPUCTL_EXP_DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_dir: Option<String>,
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
    /// The experiment folder (`GPUCTL_EXP_DIR`), absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_dir: Option<String>,
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
