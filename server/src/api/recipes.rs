//! `/api/v1/recipes`: the catalog (publish, list, show, deprecate) and the
//! jobs of experiments (check, submit). Reading needs `read`; publishing
//! and deprecating are for server admins (server-wide recipes) or the
//! project's admins (its own); an experiment's job needs `editor` in its
//! project, like any submit.

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::api::jobs::{check_priority, would_wait};
use crate::audit;
use crate::identity::access::{self, Principal};
use crate::identity::hub_tokens;
use crate::recipes::{self, Published};
use crate::state::AppState;
use crate::wake::Wake;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::job::{Job, JobSpec};
use gpuplane_api::project::Role;
use gpuplane_api::recipe::{
    ExperimentCheck, ExperimentJob, NewRecipe, Recipe, RecipeSummary, RecipeUse, ShippedFolder,
};
use gpuplane_api::spec;
use gpuplane_recipe::config;
use serde_json::Value;
use std::collections::BTreeMap;

/// Publishes a recipe file. The same file again is a 200; the same name
/// and version with other content, or a lower version, is a 409.
#[utoipa::path(post, path = "/recipes", tag = "recipes",
    security(("bearer" = ["write"])),
    request_body = NewRecipe,
    responses((status = 201, body = Recipe), (status = 200, body = Recipe), AuthErrors,
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn publish_recipe(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewRecipe>,
) -> Result<(StatusCode, Json<Recipe>), ApiError> {
    let recipe = gpuplane_recipe::Recipe::parse(&new.source).map_err(ApiError::Validation)?;
    recipes::require_publisher(&state.db, &auth.caller, recipe.project.as_deref()).await?;
    let published = recipes::publish(&state.db, &recipe, &new.source, auth.caller.user_id.as_deref()).await?;
    let principal = auth.caller.principal();
    let stored = recipes::visible(&state.db, &principal, &recipe.name, recipe.version).await?;
    let status = match published {
        Published::New => {
            let subject = format!("{} v{}", recipe.name, recipe.version);
            audit::by_caller(
                &state.db,
                &auth.caller,
                AuditAction::RecipePublish,
                &subject,
                &stored.contract,
            )
            .await?;
            StatusCode::CREATED
        }
        Published::Again => StatusCode::OK,
    };
    Ok((status, Json(stored.info()?)))
}

/// The recipes the caller can see, each with its versions, newest first.
#[utoipa::path(get, path = "/recipes", tag = "recipes",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<RecipeSummary>), AuthErrors))]
pub async fn list_recipes(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<RecipeSummary>>, ApiError> {
    let items = recipes::catalog(&state.db, &auth.caller.principal()).await?;
    Ok(Json(Page {
        items,
        next_before: None,
    }))
}

/// A recipe's newest version that is not deprecated (the newest of all
/// when every one is).
#[utoipa::path(get, path = "/recipes/{name}", tag = "recipes",
    security(("bearer" = ["read"])),
    params(("name" = String, Path)),
    responses((status = 200, body = Recipe), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn get_recipe(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Recipe>, ApiError> {
    let versions = recipes::visible_versions(&state.db, &auth.caller.principal(), &name).await?;
    let shown = recipes::latest(&versions).or(versions.first());
    match shown {
        Some(stored) => Ok(Json(stored.info()?)),
        None => Err(ApiError::NotFound(format!("no recipe {name} that you can see"))),
    }
}

/// One version of a recipe.
#[utoipa::path(get, path = "/recipes/{name}/{version}", tag = "recipes",
    security(("bearer" = ["read"])),
    params(("name" = String, Path), ("version" = i64, Path)),
    responses((status = 200, body = Recipe), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn get_recipe_version(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Result<Json<Recipe>, ApiError> {
    let version = version_number(&name, &version)?;
    let stored = recipes::visible(&state.db, &auth.caller.principal(), &name, version).await?;
    Ok(Json(stored.info()?))
}

/// Hides a version from new experiments; experiments locked to it keep
/// working.
#[utoipa::path(post, path = "/recipes/{name}/{version}/deprecate", tag = "recipes",
    security(("bearer" = ["write"])),
    params(("name" = String, Path), ("version" = i64, Path)),
    responses((status = 200, body = Recipe), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn deprecate_recipe(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Result<Json<Recipe>, ApiError> {
    let version = version_number(&name, &version)?;
    let principal = auth.caller.principal();
    let stored = recipes::visible(&state.db, &principal, &name, version).await?;
    recipes::require_publisher(&state.db, &auth.caller, stored.project.as_deref()).await?;
    if !stored.deprecated {
        recipes::deprecate(&state.db, &name, version).await?;
        let subject = format!("{name} v{version}");
        audit::by_caller(
            &state.db,
            &auth.caller,
            AuditAction::RecipeDeprecate,
            &subject,
            "",
        )
        .await?;
    }
    let stored = recipes::visible(&state.db, &principal, &name, version).await?;
    Ok(Json(stored.info()?))
}

/// Checks an experiment's job exactly as its submit would (drift, the
/// config against the recipe, the rendered spec, the project) and says
/// what would keep it waiting now; stores nothing. `gpuctl validate DIR`
/// uses it.
#[utoipa::path(post, path = "/recipes/{name}/{version}/check", tag = "recipes",
    security(("bearer" = ["write"])),
    params(("name" = String, Path), ("version" = i64, Path)),
    request_body = ExperimentJob,
    responses((status = 200, body = ExperimentCheck), AuthErrors, (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn check_experiment(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
    ApiJson(request): ApiJson<ExperimentJob>,
) -> Result<Json<ExperimentCheck>, ApiError> {
    let version = version_number(&name, &version)?;
    let principal = auth.caller.principal();
    let prepared = experiment_job(&state, &principal, &name, version, &request).await?;
    crate::jobs::store::check_references(&state.db, &prepared.spec, &principal).await?;
    let notes = would_wait(&state, &prepared.spec, &principal).await?;
    Ok(Json(ExperimentCheck {
        spec: prepared.spec,
        notes,
        warnings: prepared.warnings,
    }))
}

/// Queues an experiment's job: refused with 409 `recipe_drift` when the
/// catalog holds a newer version than the lock, with 422 naming every bad
/// config key; its run records the config and the recipe.
#[utoipa::path(post, path = "/recipes/{name}/{version}/jobs", tag = "recipes",
    security(("bearer" = ["write"])),
    params(("name" = String, Path), ("version" = i64, Path)),
    request_body = ExperimentJob,
    responses((status = 201, body = Job), AuthErrors, (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn submit_experiment(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
    ApiJson(request): ApiJson<ExperimentJob>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let version = version_number(&name, &version)?;
    let principal = auth.caller.principal();
    let Prepared {
        mut spec,
        run_config,
        hub_token,
        ..
    } = experiment_job(&state, &principal, &name, version, &request).await?;
    if let Some(token) = hub_token {
        // The user's own secret, sealed to this job like any secret variable.
        spec.secret_env.insert(HUB_TOKEN_VARIABLE.to_string(), token);
        spec::validate(&spec, &state.config.job_policy()).map_err(ApiError::Validation)?;
    }
    let job_id = recipes::submit(
        &state.db,
        &state.secret,
        &spec,
        &run_config,
        &request.files,
        &principal,
    )
    .await?;
    state.wakes.wake(Wake::Scheduler);
    tracing::info!(job_id, recipe = name, version, "experiment job submitted");
    Ok((
        StatusCode::CREATED,
        Json(crate::jobs::store::get(&state.db, &job_id).await?),
    ))
}

/// A version from a path: one that is not a whole number names no
/// version (404, as one that does not exist).
fn version_number(name: &str, text: &str) -> Result<i64, ApiError> {
    text.parse()
        .map_err(|_| ApiError::NotFound(format!("no recipe {name} v{text} that you can see")))
}

/// The variable a recipe with `hf_token = true` gives its jobs.
const HUB_TOKEN_VARIABLE: &str = "HF_TOKEN";

/// An experiment's job, checked.
struct Prepared {
    spec: JobSpec,
    run_config: BTreeMap<String, Value>,
    warnings: Vec<String>,
    /// The user's Hub token, for a recipe that gives it to its jobs.
    hub_token: Option<String>,
}

/// The job an experiment submits, and its run's config; every check of a
/// submit but the project's existence (`check_references`).
async fn experiment_job(
    state: &AppState,
    principal: &Principal,
    name: &str,
    version: i64,
    request: &ExperimentJob,
) -> Result<Prepared, ApiError> {
    if let Some(dir) = &request.exp_dir
        && (!dir.starts_with('/') || dir.len() > 4096 || dir.chars().any(char::is_control))
    {
        return Err(ApiError::field(
            "exp_dir",
            "is the experiment folder's absolute path, without control characters",
        ));
    }
    if request.exp_dir.is_some() && !request.files.is_empty() {
        return Err(ApiError::field(
            "files",
            "ship the experiment folder's files or name its path on a shared filesystem (`exp_dir`), not both",
        ));
    }
    let folder = gpuplane_api::recipe::check_folder(&request.files).map_err(ApiError::Validation)?;
    let versions = recipes::visible_versions(&state.db, principal, name).await?;
    let Some(locked) = versions.iter().find(|stored| stored.version == version) else {
        return Err(ApiError::NotFound(format!(
            "no recipe {name} v{version} that you can see"
        )));
    };
    if let Some(drift) = recipes::drift(&versions, locked, &request.contract) {
        return Err(ApiError::RecipeDrift(drift));
    }
    let recipe = locked.recipe()?;
    if let Some(owner) = &recipe.project
        && *owner != request.project
    {
        return Err(ApiError::field(
            "project",
            format!("recipe {name} belongs to project {owner}: its jobs run there"),
        ));
    }
    // Editors of the project only, before anything is asked of the Hub.
    access::require(&state.db, principal, &request.project, Role::Editor, || {
        crate::store::Error::field(
            "project",
            format!("no project named `{}` that you can submit to", request.project),
        )
    })
    .await?;
    let given: serde_json::Map<String, Value> = request.config.clone().into_iter().collect();
    let checked = config::check(&recipe, &given).map_err(ApiError::Validation)?;
    let hub_token = match &principal.user_id {
        Some(user_id) => hub_tokens::token(&state.db, &state.secret, user_id).await?,
        None => None,
    };
    let (hub_errors, mut warnings) =
        recipes::precheck(&state.hub, &recipe, &checked.config, hub_token.as_deref()).await;
    if !hub_errors.is_empty() {
        return Err(ApiError::Validation(hub_errors));
    }
    if recipe.hf_token && hub_token.is_none() {
        warnings.push(format!(
            "recipe {name} gives its jobs your Hugging Face token as {HUB_TOKEN_VARIABLE}, and you have \
             linked none: `gpuctl hf link`"
        ));
    }
    let mut spec = checked.spec;
    spec.project = request.project.clone();
    if let Some(job_name) = &request.name {
        spec.name = job_name.clone();
    }
    if recipe.observability == gpuplane_recipe::file::Observability::External
        && request.observability_url.is_none()
    {
        return Err(ApiError::field(
            "observability_url",
            format!(
                "recipe {name} reports to an external service: give its URL (gpuctl job submit --exp DIR \
                 --observability-url URL); the console still shows the SDK's metrics"
            ),
        ));
    }
    spec.observability_url = request.observability_url.clone();
    spec.priority = request.priority;
    spec.tags.extend(request.tags.iter().cloned());
    spec.git = request.git.clone();
    // A shipped folder's path is the agent's to choose; it runs there too.
    if spec.working_dir.is_none() {
        spec.working_dir = request.exp_dir.clone();
    }
    spec.recipe = Some(RecipeUse {
        name: recipe.name.clone(),
        version: recipe.version,
        contract: locked.contract.clone(),
        exp_dir: request.exp_dir.clone(),
        shipped: (!folder.is_empty()).then(|| ShippedFolder {
            files: folder.len(),
            bytes: folder.iter().map(|file| file.bytes.len() as u64).sum(),
        }),
    });
    spec::validate(&spec, &state.config.job_policy()).map_err(ApiError::Validation)?;
    check_priority(state, principal, &spec.project, spec.priority).await?;
    Ok(Prepared {
        spec,
        run_config: recipes::run_config(&recipe, &checked.config),
        warnings,
        hub_token: hub_token.filter(|_| recipe.hf_token),
    })
}
