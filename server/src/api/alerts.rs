//! Alerts (`/api/v1/alerts/…`): server admins keep the channels; project
//! admins subscribe their projects, any user subscribes to their own jobs
//! and runs, server admins to everything; everyone lists the deliveries of
//! the subscriptions they may see. `POST /runs/{run_id}/alerts` is a run's
//! own alert (the SDK's `run.alert`).

use crate::alerts::deliveries::{self, Visibility};
use crate::alerts::{channels, subscriptions};
use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Ingest, Read, Write};
use crate::audit;
use crate::identity::access::{self, Caller, Visible, require_server_admin, visible_projects};
use crate::paging::{cursor, page_limit};
use crate::runs;
use crate::state::AppState;
use crate::store::Error;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::alert::{
    Channel, ChannelSubscribers, Delivery, DeliveryStatus, MAX_ALERT_TEXT, MAX_ALERT_TITLE, NewChannel,
    NewRunAlert, NewSubscription, RunAlertAnswer, Subscription,
};
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::project::Role;
use serde::Deserialize;

/// Every channel; where each sends is shown to server admins only.
#[utoipa::path(get, path = "/alerts/channels", tag = "alerts",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<Channel>), AuthErrors))]
pub async fn list_channels(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<Channel>>, ApiError> {
    let for_admin = auth.caller.is_server_admin();
    Ok(Json(Page {
        items: channels::list(&state.db, for_admin).await?,
        next_before: None,
    }))
}

/// Adds a channel (server admins). A webhook made without a secret gets
/// one, answered this once in `secret`.
#[utoipa::path(post, path = "/alerts/channels", tag = "alerts",
    security(("bearer" = ["write"])),
    request_body = NewChannel,
    responses((status = 201, body = Channel), AuthErrors,
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_channel(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewChannel>,
) -> Result<(StatusCode, Json<Channel>), ApiError> {
    require_server_admin(&auth.caller, "adding alert channels")?;
    let allow_private = state.config.settings.alert_private_hosts;
    let by = auth.caller.user_name.as_deref();
    let channel = channels::create(&state.db, &state.secret, &new, by, allow_private).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::AlertChannelCreate,
        &channel.name,
        channel.kind.as_str(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(channel)))
}

/// Removes a channel and its subscriptions (server admins).
#[utoipa::path(delete, path = "/alerts/channels/{name}", tag = "alerts",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    responses((status = 204), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn delete_channel(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_server_admin(&auth.caller, "removing alert channels")?;
    channels::delete(&state.db, &name).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::AlertChannelDelete,
        &name,
        "",
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Whether `caller`, who sees the projects `visible`, may see a
/// subscription: its project's members, its user, and server admins.
fn may_see(caller: &Caller, visible: &Visible, rule: &subscriptions::Rule) -> bool {
    match (&rule.project, &rule.user_id) {
        (Some(project), _) => visible.contains(project),
        (None, Some(user_id)) => {
            caller.project.is_none() && (caller.is_server_admin() || caller.user_id.as_ref() == Some(user_id))
        }
        (None, None) => caller.is_server_admin(),
    }
}

/// The subscriptions the caller may see: their projects', their own, and
/// all of them for server admins.
#[utoipa::path(get, path = "/alerts/subscriptions", tag = "alerts",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<Subscription>), AuthErrors))]
pub async fn list_subscriptions(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<Subscription>>, ApiError> {
    let visible = visible_projects(&state.db, &auth.caller.principal()).await?;
    let items = subscriptions::list(&state.db)
        .await?
        .into_iter()
        .filter(|(rule, _)| may_see(&auth.caller, &visible, rule))
        .map(|(_, subscription)| subscription)
        .collect();
    Ok(Json(Page {
        items,
        next_before: None,
    }))
}

/// Subscribes a channel to events: a project's (its admins), every event
/// (server admins), or, with neither `project` nor `all`, the caller's own
/// jobs and runs.
#[utoipa::path(post, path = "/alerts/subscriptions", tag = "alerts",
    security(("bearer" = ["write"])),
    request_body = NewSubscription,
    responses((status = 201, body = Subscription), AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn create_subscription(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewSubscription>,
) -> Result<(StatusCode, Json<Subscription>), ApiError> {
    let caller = &auth.caller;
    let Some(policy) = channels::policy(&state.db, &new.channel).await? else {
        return Err(ApiError::field(
            "channel",
            format!("no alert channel named {}", new.channel),
        ));
    };
    // The channel says who may subscribe to it, and a project's channel
    // takes that project's events only.
    if policy.subscribers == ChannelSubscribers::Admins && !caller.is_server_admin() {
        return Err(ApiError::Forbidden(format!(
            "channel {} takes subscriptions from server admins only",
            new.channel
        )));
    }
    if let Some(project) = &policy.project
        && new.project.as_ref() != Some(project)
    {
        return Err(ApiError::Forbidden(format!(
            "channel {} is project {project}'s: it takes that project's events only (give project = {project})",
            new.channel
        )));
    }
    let limited = |what: &str| {
        caller.project.as_ref().map_or(Ok(()), |project| {
            Err(Error::Forbidden(format!(
                "this token is limited to project {project}; it cannot subscribe to {what}"
            )))
        })
    };
    let (project, user_id) = match (&new.project, new.all) {
        (Some(_), true) => {
            return Err(ApiError::field("all", "give `project` or `all`, not both"));
        }
        (Some(project), false) => {
            access::require(&state.db, &caller.principal(), project, Role::Admin, || {
                Error::field("project", format!("no project named {project}"))
            })
            .await?;
            (Some(project.clone()), None)
        }
        (None, true) => {
            limited("every event")?;
            require_server_admin(caller, "subscribing to every event")?;
            (None, None)
        }
        (None, false) => {
            limited("your own jobs in every project")?;
            let Some(user_id) = caller.user_id.clone() else {
                return Err(ApiError::field(
                    "project",
                    "this token has no user: name a project",
                ));
            };
            (None, Some(user_id))
        }
    };
    let rule = subscriptions::Rule {
        id: String::new(),
        channel: new.channel.clone(),
        project,
        user_id,
        kinds: new.kinds.clone(),
        min_severity: new.min_severity,
        projects: None,
    };
    let subscription = subscriptions::create(&state.db, &rule, caller.user_name.as_deref()).await?;
    let target = format!("{} → {}", subscription.scope, subscription.channel);
    audit::by_caller(
        &state.db,
        caller,
        AuditAction::AlertSubscriptionCreate,
        &subscription.id,
        &target,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(subscription)))
}

/// Removes a subscription: its user, its project's admins, server admins.
#[utoipa::path(delete, path = "/alerts/subscriptions/{subscription_id}", tag = "alerts",
    security(("bearer" = ["write"])),
    params(("subscription_id" = String, Path)),
    responses((status = 204), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn delete_subscription(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(subscription_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let caller = &auth.caller;
    let (rule, _) = subscriptions::get(&state.db, &subscription_id).await?;
    let visible = visible_projects(&state.db, &caller.principal()).await?;
    if !may_see(caller, &visible, &rule) {
        return Err(Error::NotFound(format!("no subscription {subscription_id}")).into());
    }
    if let Some(project) = &rule.project {
        access::require(&state.db, &caller.principal(), project, Role::Admin, || {
            Error::NotFound(format!("no subscription {subscription_id}"))
        })
        .await?;
    }
    subscriptions::delete(&state.db, &subscription_id).await?;
    audit::by_caller(
        &state.db,
        caller,
        AuditAction::AlertSubscriptionDelete,
        &subscription_id,
        "",
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    channel: Option<String>,
    /// `pending`, `sent` or `failed`.
    status: Option<String>,
    run_id: Option<String>,
    job_id: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    before: Option<i64>,
}

/// Deliveries, newest first: those of the subscriptions the caller may
/// see (a project's for its members, a user's own, all for server admins).
#[utoipa::path(get, path = "/alerts/deliveries", tag = "alerts",
    security(("bearer" = ["read"])),
    params(DeliveryQuery),
    responses((status = 200, body = Page<Delivery>), AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn list_deliveries(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<DeliveryQuery>,
) -> Result<Json<Page<Delivery>>, ApiError> {
    let mut errors = Vec::new();
    let status = query.status.as_deref().and_then(|text| {
        text.parse::<DeliveryStatus>()
            .map_err(|message| {
                errors.push(FieldError {
                    field: "status".into(),
                    message,
                })
            })
            .ok()
    });
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let caller = &auth.caller;
    let projects = visible_projects(&state.db, &caller.principal()).await?;
    let visibility = Visibility {
        all: caller.is_server_admin(),
        projects: projects.as_json().unwrap_or_else(|| "[]".into()),
        user_id: caller.user_id.clone().filter(|_| caller.project.is_none()),
    };
    let filter = deliveries::Filter {
        channel: query.channel,
        status,
        run_id: query.run_id,
        job_id: query.job_id,
    };
    Ok(Json(
        deliveries::list(&state.db, &visibility, &filter, limit, before).await?,
    ))
}

/// Raises an alert from the run itself (the SDK's `run.alert`): recorded as
/// a `RUN_ALERT` event at `level` and sent to the channels subscribed to it.
#[utoipa::path(post, path = "/runs/{run_id}/alerts", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    request_body = NewRunAlert,
    responses((status = 200, body = RunAlertAnswer), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn raise_run_alert(
    auth: Authed<Ingest>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiJson(alert): ApiJson<NewRunAlert>,
) -> Result<Json<RunAlertAnswer>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    let title = alert.title.trim();
    let mut errors = Vec::new();
    if title.is_empty() || title.chars().count() > MAX_ALERT_TITLE || title.contains('\n') {
        errors.push(FieldError {
            field: "title".into(),
            message: format!("one line of 1 to {MAX_ALERT_TITLE} characters"),
        });
    }
    if alert.text.chars().count() > MAX_ALERT_TEXT {
        errors.push(FieldError {
            field: "text".into(),
            message: format!("at most {MAX_ALERT_TEXT} characters"),
        });
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    // A run (its job's script, say) cannot flood the channels.
    if let Err(wait) = state.run_alert_limiter.check(&run_id).await {
        return Err(ApiError::RateLimited(format!(
            "run {run_id} raised too many alerts; try again in {} s",
            wait.as_secs().max(1)
        )));
    }
    state.run_alert_limiter.fail(&run_id).await;
    let message = match alert.text.trim() {
        "" => title.to_string(),
        text => format!("{title}: {text}"),
    };
    let Some(event_id) =
        runs::alerts::raise(&state.db, &run_id, alert.level, title, &message, alert.wait_s).await?
    else {
        return Ok(Json(RunAlertAnswer {
            recorded: false,
            event_id: None,
        }));
    };
    state.wakes.wake(crate::wake::Wake::Events);
    Ok(Json(RunAlertAnswer {
        recorded: true,
        event_id: Some(event_id),
    }))
}
