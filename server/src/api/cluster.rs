//! `GET /api/v1/cluster`: nodes, GPUs and jobs at a glance; maintenance mode.

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access::{Principal, require_server_admin, visible_projects};
use crate::jobs::maintenance;
use crate::state::AppState;
use crate::store::time::now_ms;
use axum::Json;
use axum::extract::State;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::job::JobStatus;
use gpuplane_api::node::{ClusterSummary, Maintenance, StartMaintenance};
use gpuplane_api::quota::{FairShare, GpuUse, QuotaKind};

/// Nodes online and offline, GPUs in use, jobs by status, maintenance mode,
/// the quotas the caller may see with their usage, and fair share's GPU time.
#[utoipa::path(get, path = "/cluster", tag = "nodes",
    security(("bearer" = ["read"])),
    responses((status = 200, body = ClusterSummary), AuthErrors))]
pub async fn cluster(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<ClusterSummary>, ApiError> {
    Ok(Json(summary(&state, &auth.caller.principal()).await?))
}

pub async fn summary(state: &AppState, principal: &Principal) -> Result<ClusterSummary, ApiError> {
    let (online, offline) = crate::nodes::status_counts(&state.db).await?;
    let (total, simulated) = crate::nodes::online_gpus(&state.db).await?;
    let in_use = crate::jobs::store::gpus_in_use(&state.db).await?;
    let counts = crate::jobs::store::counts_by_status(&state.db).await?;
    let mut jobs: std::collections::BTreeMap<String, u64> = JobStatus::ALL
        .iter()
        .map(|status| (status.as_str().to_string(), 0))
        .collect();
    for (status, count) in counts {
        jobs.insert(status, count as u64);
    }
    let paused = crate::jobs::maintenance::current(&state.db).await?;
    Ok(ClusterSummary {
        nodes_online: online as u64,
        nodes_offline: offline as u64,
        gpus_total: total as u64,
        gpus_in_use: in_use as u64,
        gpus_simulated: simulated as u64,
        jobs,
        maintenance: paused
            .message
            .or_else(|| state.config.maintenance_message.clone()),
        dispatch_paused: paused.on,
        quotas: crate::api::quotas::visible(state, principal).await?,
        fair_share: fair_share(state, principal).await?,
    })
}

/// Fair share's window and the GPU time used in it by the projects the
/// caller may see and by the caller (everyone's, for admins).
async fn fair_share(state: &AppState, principal: &Principal) -> Result<Option<FairShare>, ApiError> {
    let policy = crate::jobs::scheduler::fair_share_policy(&state.jobs());
    if policy.window_ms <= 0 {
        return Ok(None);
    }
    let used = crate::jobs::fair_share::usage(&state.db, policy.window_ms, now_ms()).await?;
    let names = crate::identity::users::names_by_id(&state.db).await?;
    let everything = principal.is_server_admin();
    let projects = visible_projects(&state.db, principal).await?;
    let mut usage: Vec<GpuUse> = used
        .projects
        .into_iter()
        .filter(|(project, _)| everything || projects.contains(project))
        .map(|(name, ms)| (QuotaKind::Project, name, ms))
        .chain(used.users.into_iter().filter_map(|(id, ms)| {
            let name = names.get(&id)?.clone();
            (everything || principal.user_name.as_deref() == Some(name.as_str())).then_some((
                QuotaKind::User,
                name,
                ms,
            ))
        }))
        .map(|(kind, name, ms)| GpuUse {
            kind,
            name,
            gpu_seconds: ms / 1000,
        })
        .collect();
    usage.sort_by(|a, b| (b.gpu_seconds, a.kind, &a.name).cmp(&(a.gpu_seconds, b.kind, &b.name)));
    Ok(Some(FairShare {
        window_s: policy.window_ms / 1000,
        max_wait_s: policy.max_wait_ms / 1000,
        usage,
    }))
}

/// Maintenance mode: whether dispatch is paused, since when, by whom, why.
#[utoipa::path(get, path = "/maintenance", tag = "nodes",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Maintenance), AuthErrors))]
pub async fn get_maintenance(
    _auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Maintenance>, ApiError> {
    Ok(Json(maintenance::current(&state.db).await?))
}

/// Turns maintenance mode on (server admins): nothing new is dispatched,
/// running jobs continue, every queued job and the dashboard say why.
#[utoipa::path(put, path = "/maintenance", tag = "nodes",
    security(("bearer" = ["write"])),
    request_body = StartMaintenance,
    responses((status = 200, body = Maintenance), AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn start_maintenance(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(request): ApiJson<StartMaintenance>,
) -> Result<Json<Maintenance>, ApiError> {
    require_server_admin(&auth.caller, "maintenance mode")?;
    let by = auth.caller.user_name.as_deref();
    let maintenance = maintenance::start(&state.db, by, &request.message).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::MaintenanceOn,
        "cluster",
        &request.message,
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(Json(maintenance))
}

/// Turns maintenance mode off (server admins): queued jobs are dispatched at once.
#[utoipa::path(delete, path = "/maintenance", tag = "nodes",
    security(("bearer" = ["write"])),
    responses((status = 200, body = Maintenance), AuthErrors))]
pub async fn end_maintenance(
    auth: Authed<Write>,
    State(state): State<AppState>,
) -> Result<Json<Maintenance>, ApiError> {
    require_server_admin(&auth.caller, "maintenance mode")?;
    let maintenance = maintenance::end(&state.db).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::MaintenanceOff,
        "cluster",
        "",
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(Json(maintenance))
}
