//! `/api/v1/projects`: the caller's projects; creating projects and managing
//! members (server admins, or admins of the project).

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access::{self, Principal, Visible, require_server_admin};
use crate::jobs::{node_access, node_policies};
use crate::projects;
use crate::runs::{primary, shares};
use crate::state::AppState;
use crate::store;
use crate::store::Db;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::metric::SetPrimaryMetric;
use gpuplane_api::project::{Membership, NewProject, NodePolicy, Project, ProjectNodePolicy, Role};
use gpuplane_api::share::ProjectChanges;

/// The projects the caller can see, with the caller's role in each.
#[utoipa::path(get, path = "/projects", tag = "projects",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<Project>), AuthErrors))]
pub async fn list_projects(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<Project>>, ApiError> {
    let principal = auth.caller.principal();
    let names: Vec<String> = match access::visible_projects(&state.db, &principal).await? {
        Visible::All => projects::all_names(&state.db).await?,
        Visible::Only(names) => names,
    };
    let mut items = Vec::new();
    for name in names {
        if let Some(role) = access::role_in(&state.db, &principal, &name).await? {
            items.push(projects::project(&state.db, name, role).await?);
        }
    }
    Ok(Json(Page {
        items,
        next_before: None,
    }))
}

/// Creates a project (server admins only); the creator becomes its admin.
#[utoipa::path(post, path = "/projects", tag = "projects",
    security(("bearer" = ["write"])),
    request_body = NewProject,
    responses((status = 201, body = Project), AuthErrors,
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_project(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewProject>,
) -> Result<(StatusCode, Json<Project>), ApiError> {
    require_server_admin(&auth.caller, "creating a project")?;
    if !valid_project_name(&new.name) {
        return Err(ApiError::field(
            "name",
            "must be 1-64 characters of lowercase letters, digits, '-' or '_'",
        ));
    }
    projects::create(&state.db, &new.name, auth.caller.user_id.as_deref()).await?;
    audit::by_caller(&state.db, &auth.caller, AuditAction::ProjectCreate, &new.name, "").await?;
    Ok((
        StatusCode::CREATED,
        Json(projects::project(&state.db, new.name, Role::Admin).await?),
    ))
}

/// Sets the primary metric of the project's runs that set none (project admins).
#[utoipa::path(post, path = "/projects/{name}/primary-metric", tag = "projects",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    request_body = SetPrimaryMetric,
    responses((status = 200, body = Project), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_project_primary_metric(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<SetPrimaryMetric>,
) -> Result<Json<Project>, ApiError> {
    let principal = auth.caller.principal();
    require_admin(&state.db, &principal, &name).await?;
    primary::set_for_project(&state.db, &name, &request).await?;
    let role = access::role_in(&state.db, &principal, &name)
        .await?
        .unwrap_or(Role::Admin);
    Ok(Json(projects::project(&state.db, name, role).await?))
}

/// Changes a project's settings: whether its runs may be shared by link
/// (`share_links`, project admins), what happens to its jobs whose GPUs sit
/// idle (`idle_action`, project admins), its priority ceiling
/// (`max_priority`, server admins).
#[utoipa::path(patch, path = "/projects/{name}", tag = "projects",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    request_body = ProjectChanges,
    responses((status = 200, body = Project), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn change_project(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(changes): ApiJson<ProjectChanges>,
) -> Result<Json<Project>, ApiError> {
    let principal = auth.caller.principal();
    require_admin(&state.db, &principal, &name).await?;
    let mut changed = Vec::new();
    if let Some(max) = changes.max_priority {
        // A project's own admins must not lift their own ceiling.
        require_server_admin(&auth.caller, "a project's max_priority")?;
        crate::jobs::priorities::set_max_priority(&state.db, &name, max).await?;
        changed.push(format!(
            "max_priority {}",
            max.map_or("none".to_string(), |m| m.to_string())
        ));
    }
    if let Some(allow) = changes.share_links {
        shares::set_allowed(&state.db, &name, allow).await?;
        changed.push(format!("share_links {allow}"));
    }
    if let Some(action) = changes.idle_action {
        projects::set_idle_action(&state.db, &name, action).await?;
        changed.push(format!("idle_action {action}"));
    }
    if !changed.is_empty() {
        let detail = changed.join(", ");
        audit::by_caller(
            &state.db,
            &auth.caller,
            AuditAction::ProjectSettings,
            &name,
            &detail,
        )
        .await?;
    }
    let role = access::role_in(&state.db, &principal, &name)
        .await?
        .unwrap_or(Role::Admin);
    Ok(Json(projects::project(&state.db, name, role).await?))
}

/// Adds a member to a project, or changes their role (project admins).
#[utoipa::path(post, path = "/projects/{name}/members", tag = "projects",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    request_body = Membership,
    responses((status = 200, body = Membership), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_member(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(membership): ApiJson<Membership>,
) -> Result<Json<Membership>, ApiError> {
    let principal = auth.caller.principal();
    require_admin(&state.db, &principal, &name).await?;
    projects::set_member(&state.db, &name, &membership).await?;
    let detail = format!("{} is {}", membership.user, membership.role.as_str());
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::ProjectMember,
        &name,
        &detail,
    )
    .await?;
    Ok(Json(membership))
}

/// Removes a member (project admins): their tokens limited to the
/// project and their share links of its runs are revoked, and the alert
/// subscriptions they made for it deleted, at once. The last admin stays (409).
#[utoipa::path(delete, path = "/projects/{name}/members/{user}", tag = "projects",
    security(("bearer" = ["write"])),
    params(("name" = String, Path), ("user" = String, Path)),
    responses((status = 204), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn remove_member(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((name, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    require_admin(&state.db, &auth.caller.principal(), &name).await?;
    let removed = projects::remove_member(&state.db, &name, &user).await?;
    let detail = removed.describe(&user);
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::ProjectMember,
        &name,
        &detail,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn valid_project_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'))
}

/// The project's members and their roles, by name (anyone who can see the project).
#[utoipa::path(get, path = "/projects/{name}/members", tag = "projects",
    security(("bearer" = ["read"])),
    params(("name" = String, Path)),
    responses((status = 200, body = Page<Membership>), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn list_members(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Page<Membership>>, ApiError> {
    let not_found = || store::Error::NotFound(format!("no project {name}"));
    access::require(
        &state.db,
        &auth.caller.principal(),
        &name,
        Role::Viewer,
        not_found,
    )
    .await?;
    let items = projects::members(&state.db, &name).await?;
    Ok(Json(Page {
        items,
        next_before: None,
    }))
}

/// The project exists and the principal is its admin (404 for those who cannot see it).
async fn require_admin(db: &Db, principal: &Principal, name: &str) -> Result<(), ApiError> {
    let not_found = || store::Error::NotFound(format!("no project {name}"));
    if !projects::exists(db, name).await? {
        return Err(not_found().into());
    }
    Ok(access::require(db, principal, name, Role::Admin, not_found).await?)
}

/// Every project's node policy (server admins; members see their own
/// project's in `GET /projects`).
#[utoipa::path(get, path = "/node-policies", tag = "projects",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<ProjectNodePolicy>), AuthErrors))]
pub async fn list_node_policies(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<ProjectNodePolicy>>, ApiError> {
    require_server_admin(&auth.caller, "listing node policies")?;
    Ok(Json(Page {
        items: node_policies::list(&state.db).await?,
        next_before: None,
    }))
}

/// Binds a project to nodes (server admins): its jobs run only on nodes
/// carrying `labels` (which then serve only projects naming them), through
/// the `runners` granted. Queued jobs are placed under it from the next
/// pass; running ones are not stopped.
#[utoipa::path(put, path = "/projects/{name}/node-policy", tag = "projects",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    request_body = NodePolicy,
    responses((status = 200, body = ProjectNodePolicy), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_node_policy(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(policy): ApiJson<NodePolicy>,
) -> Result<Json<ProjectNodePolicy>, ApiError> {
    require_server_admin(&auth.caller, "a project's node policy")?;
    let set = node_policies::set(&state.db, &name, &policy, auth.caller.user_name.as_deref()).await?;
    let labels = if set.policy.labels.is_empty() {
        "any unreserved node".to_string()
    } else {
        node_access::describe_labels(&set.policy.labels)
    };
    let detail = format!(
        "labels {labels}; runners {}",
        node_access::describe_runners(&set.policy.runners)
    );
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::ProjectNodePolicy,
        &name,
        &detail,
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(Json(set))
}

/// Removes a project's node policy (server admins): its jobs go back to
/// nodes no policy reserves, with the process runner.
#[utoipa::path(delete, path = "/projects/{name}/node-policy", tag = "projects",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    responses((status = 204), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn clear_node_policy(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_server_admin(&auth.caller, "a project's node policy")?;
    node_policies::clear(&state.db, &name).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::ProjectNodePolicyClear,
        &name,
        "",
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(StatusCode::NO_CONTENT)
}
