//! The JSON API under `/api/v1`: every route is registered through
//! [`OpenApiRouter`], so the OpenAPI document cannot miss one.

mod agent;
mod alerts;
mod arrays;
mod audit;
mod auth;
mod cluster;
pub mod device_login;
mod diagnosis;
pub mod error;
mod evaluations;
mod events;
pub mod extract;
pub mod in_process;
pub(crate) mod health;
mod hub;
mod jobs;
mod lifecycle;
mod logs;
mod metrics;
pub mod mlflow;
pub mod mlflow_artifacts;
mod nodes;
pub mod origin;
pub mod projects;
mod quotas;
mod recipes;
mod runs;
pub mod scrape;
pub mod sessions;
pub mod shared;
mod shares;
pub mod sso;
mod sweeps;
mod telemetry;
mod tokens;
mod usage;
mod users;

use crate::api::error::ApiError;
use crate::state::AppState;
use axum::response::IntoResponse;
use axum::routing::any;
use axum::{Extension, Router};
use gpuplane_api::error::ErrorBody;
use std::sync::Arc;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The prefix of every API route.
pub use gpuplane_api::paths::PREFIX;

#[derive(OpenApi)]
#[openapi(
    info(title = "GPUPlane API", description = "Jobs, runs, metrics and nodes of a GPUPlane cluster. \
        Bearer tokens carry one scope: read, write (includes read), sdk (metric ingest only) or agent."),
    components(schemas(ErrorBody)),
    modifiers(&BearerScheme),
)]
struct ApiDoc;

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The API router and its OpenAPI document.
pub fn router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let api = OpenApiRouter::new()
        .routes(routes!(health::health))
        .routes(routes!(health::ready))
        .routes(routes!(auth::whoami))
        .routes(routes!(nodes::list_nodes))
        .routes(routes!(nodes::drain_node))
        .routes(routes!(nodes::undrain_node))
        .routes(routes!(nodes::change_node_labels))
        .routes(routes!(cluster::cluster))
        .routes(routes!(recipes::publish_recipe, recipes::list_recipes))
        .routes(routes!(recipes::get_recipe))
        .routes(routes!(recipes::get_recipe_version))
        .routes(routes!(recipes::deprecate_recipe))
        .merge(
            OpenApiRouter::new()
                .routes(routes!(recipes::check_experiment))
                .routes(routes!(recipes::submit_experiment))
                // A shipped experiment folder, in base64, and the rest.
                .layer(axum::extract::DefaultBodyLimit::max(
                    gpuplane_api::recipe::MAX_REQUEST_BYTES,
                )),
        )
        .routes(routes!(hub::hub_status))
        .routes(routes!(hub::link_hub_token, hub::unlink_hub_token))
        .routes(routes!(
            cluster::get_maintenance,
            cluster::start_maintenance,
            cluster::end_maintenance
        ))
        .routes(routes!(audit::list_audit))
        .routes(routes!(users::list_users, users::create_user))
        .routes(routes!(users::change_user))
        .routes(routes!(users::list_agent_tokens, users::create_agent_token))
        .routes(routes!(users::revoke_agent_token))
        .routes(routes!(quotas::list_quotas))
        .routes(routes!(alerts::list_channels, alerts::create_channel))
        .routes(routes!(alerts::delete_channel))
        .routes(routes!(alerts::list_subscriptions, alerts::create_subscription))
        .routes(routes!(alerts::delete_subscription))
        .routes(routes!(alerts::list_deliveries))
        .routes(routes!(quotas::set_quota, quotas::clear_quota))
        .routes(routes!(jobs::submit_job, jobs::list_jobs))
        .routes(routes!(jobs::validate_job))
        .routes(routes!(jobs::get_job))
        .routes(routes!(jobs::cancel_job))
        .routes(routes!(jobs::retry_job))
        .routes(routes!(jobs::set_priority))
        .routes(routes!(jobs::hold_job))
        .routes(routes!(jobs::release_job))
        .routes(routes!(arrays::get_array))
        .routes(routes!(arrays::cancel_array))
        .routes(routes!(sweeps::create_sweep, sweeps::list_sweeps))
        .routes(routes!(sweeps::get_sweep))
        .routes(routes!(sweeps::act_on_sweep))
        .routes(routes!(logs::job_logs))
        .routes(routes!(logs::follow_logs))
        .routes(routes!(logs::full_log))
        .routes(routes!(tokens::list_tokens, tokens::create_token))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(projects::list_projects, projects::create_project))
        .routes(routes!(projects::list_members, projects::set_member))
        .routes(routes!(projects::remove_member))
        .routes(routes!(usage::usage))
        .routes(routes!(projects::set_project_primary_metric))
        .routes(routes!(projects::change_project))
        .routes(routes!(projects::set_node_policy, projects::clear_node_policy))
        .routes(routes!(projects::list_node_policies))
        .routes(routes!(runs::create_run, runs::list_runs))
        .routes(routes!(runs::scatter_svg))
        .routes(routes!(runs::set_primary_metric))
        .routes(routes!(runs::get_run, runs::change_run, lifecycle::delete_run))
        .routes(routes!(lifecycle::archive_run))
        .routes(routes!(lifecycle::unarchive_run))
        .routes(routes!(lifecycle::project_usage))
        .routes(routes!(runs::update_config))
        .routes(routes!(metrics::query_metrics))
        .routes(routes!(metrics::chart_svg))
        .routes(routes!(metrics::chart_png))
        .routes(routes!(metrics::list_texts))
        .routes(routes!(telemetry::run_system))
        .routes(routes!(telemetry::system_chart_svg))
        .routes(routes!(runs::follow_run))
        .routes(routes!(runs::finish_run))
        .routes(routes!(shares::list_shares, shares::create_share))
        .routes(routes!(shares::revoke_share))
        .routes(routes!(shares::share_views))
        .routes(routes!(alerts::raise_run_alert))
        .routes(routes!(runs::list_checkpoints))
        .routes(routes!(diagnosis::explain_failure))
        .routes(routes!(diagnosis::diagnose_run))
        .routes(routes!(
            evaluations::create_evaluation,
            evaluations::list_evaluations
        ))
        .routes(routes!(evaluations::get_evaluation))
        .merge(
            OpenApiRouter::new()
                .routes(routes!(metrics::ingest))
                // The handler enforces its own limit (see `metrics::read_limited`).
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .routes(routes!(events::list_events))
        .routes(routes!(events::follow_events))
        .routes(routes!(agent::hello))
        .routes(routes!(agent::poll))
        .merge(
            OpenApiRouter::new()
                .routes(routes!(agent::report))
                .routes(routes!(agent::telemetry))
                .layer(axum::extract::DefaultBodyLimit::max(
                    gpuplane_api::agent::MAX_REPORT_BYTES,
                )),
        )
        .routes(routes!(agent::log_upload))
        .routes(routes!(openapi_json));
    // The OAuth endpoints live at the root, where RFC 8414 clients expect them.
    let oauth = OpenApiRouter::new()
        .routes(routes!(crate::api::device_login::authorize))
        .routes(routes!(crate::api::device_login::token))
        .routes(routes!(crate::api::device_login::metadata));
    let (api, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest(PREFIX, api)
        .merge(oauth)
        .split_for_parts();
    doc.info.version = gpuplane_api::VERSION.to_string();
    document_input_errors(&mut doc);
    link_created_resources(&mut doc);
    let json = OpenApiJson(Arc::from(openapi_text(&doc)));
    let api = api
        .route(PREFIX, any(no_route))
        .route(&format!("{PREFIX}/{{*rest}}"), any(no_route))
        .layer(Extension(json));
    (api, doc)
}

/// Every route that reads a JSON body answers 400 when it is not JSON (or
/// not sent as `application/json`) and 413 when it is too large
/// ([`error::ApiJson`]); it and every route with query parameters answer
/// 422 naming the field that does not fit, unknown ones included.
/// Documented here once for all of them.
fn document_input_errors(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for operation in operations.into_iter().flatten() {
            let reads_json = operation
                .request_body
                .as_ref()
                .is_some_and(|body| body.content.contains_key("application/json"));
            let reads_query = operation
                .parameters
                .iter()
                .flatten()
                .any(|parameter| parameter.parameter_in == ParameterIn::Query);
            let mut answers = Vec::new();
            if reads_json {
                answers.push(("400", "The body is not JSON, or not sent as `application/json`"));
                answers.push(("413", "The body is too large"));
                answers.push((
                    "408",
                    "The body did not arrive in full within `request_body_timeout_s`",
                ));
                answers.push((
                    "507",
                    "The server's disk is full; nothing of the request was kept",
                ));
            }
            if reads_json || reads_query {
                answers.push(("422", "A field or parameter does not fit (each one named)"));
            }
            for (status, description) in answers {
                operation
                    .responses
                    .responses
                    .entry(status.into())
                    .or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(description)
                            .content(
                                "application/json",
                                ContentBuilder::new()
                                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                                    .build(),
                            )
                            .build()
                            .into()
                    });
            }
        }
    }
}

/// OpenAPI links from each creation (`POST P` answering 201) to every
/// operation on `P/{param}…`, the new resource's `id` (or `name`) filling
/// `param` and the request's own path parameters the rest: what a client
/// generator or Schemathesis' stateful phase follows to reach a resource it
/// made instead of guessing ids.
fn link_created_resources(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::link::LinkBuilder;
    use utoipa::openapi::{RefOr, Schema};
    // Where an answer of schema `name` keeps the value of path parameter
    // `param`: a field of that name (`job_id`), else `id` (or `name` for
    // `{name}`), at the top or one object down (`link.id`).
    let schemas = doc
        .components
        .as_ref()
        .map(|c| c.schemas.clone())
        .unwrap_or_default();
    let pointer = |name: &str, param: &str| -> Option<String> {
        let fields = |name: &str| match schemas.get(name) {
            Some(RefOr::T(Schema::Object(object))) => Some(object.properties.clone()),
            _ => None,
        };
        let properties = fields(name)?;
        let key = if param == "name" { "name" } else { "id" };
        for field in [param, key] {
            if properties.contains_key(field) {
                return Some(format!("/{field}"));
            }
        }
        properties.iter().find_map(|(field, schema)| match schema {
            RefOr::Ref(reference) => {
                let inner = reference.ref_location.rsplit('/').next()?;
                fields(inner)?
                    .contains_key(key)
                    .then(|| format!("/{field}/{key}"))
            }
            _ => None,
        })
    };
    let targets: Vec<(String, String)> = doc
        .paths
        .paths
        .iter()
        .flat_map(|(path, item)| {
            [&item.get, &item.post, &item.put, &item.patch, &item.delete]
                .into_iter()
                .flatten()
                .filter_map(|operation| Some((path.clone(), operation.operation_id.clone()?)))
        })
        .collect();
    for (path, item) in doc.paths.paths.iter_mut() {
        let Some(create) = item.post.as_mut() else {
            continue;
        };
        let Some(RefOr::T(created)) = create.responses.responses.get_mut("201") else {
            continue;
        };
        let Some(RefOr::Ref(body)) = created
            .content
            .get("application/json")
            .and_then(|content| content.schema.clone())
        else {
            continue;
        };
        let Some(schema) = body.ref_location.rsplit('/').next() else {
            continue;
        };
        let own: Vec<&str> = path
            .split('/')
            .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        for (target, operation_id) in &targets {
            let Some(rest) = target.strip_prefix(&format!("{path}/{{")) else {
                continue;
            };
            let Some((param, _)) = rest.split_once('}') else {
                continue;
            };
            let Some(pointer) = pointer(schema, param) else {
                continue;
            };
            let mut link = LinkBuilder::new()
                .operation_id(operation_id.clone())
                .parameter(param, format!("$response.body#{pointer}"));
            for name in &own {
                link = link.parameter(*name, format!("$request.path.{name}"));
            }
            created.links.insert(operation_id.clone(), RefOr::T(link.build()));
        }
    }
}

/// The document as served. utoipa 5.5 writes a link's fields in snake
/// case (`operation_id`); OpenAPI and its readers want `operationId`.
fn openapi_text(doc: &utoipa::openapi::OpenApi) -> String {
    fn values(value: Option<&mut serde_json::Value>) -> impl Iterator<Item = &mut serde_json::Value> {
        value
            .and_then(serde_json::Value::as_object_mut)
            .into_iter()
            .flat_map(|object| object.values_mut())
    }
    let mut value = serde_json::to_value(doc).unwrap_or_default();
    for item in values(value.get_mut("paths")) {
        for operation in values(Some(item)) {
            for response in values(operation.get_mut("responses")) {
                for link in values(response.get_mut("links")).filter_map(|link| link.as_object_mut()) {
                    for (snake, camel) in [
                        ("operation_id", "operationId"),
                        ("operation_ref", "operationRef"),
                        ("request_body", "requestBody"),
                    ] {
                        if let Some(field) = link.remove(snake) {
                            link.insert(camel.into(), field);
                        }
                    }
                }
            }
        }
    }
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

/// A place for one more live stream of `caller` (429 over the limit);
/// taken before the stream's work starts, given to [`bounded`].
pub(crate) fn stream_permit(
    state: &AppState,
    caller: &crate::identity::access::Caller,
) -> Result<crate::identity::streams::StreamPermit, ApiError> {
    Ok(state
        .streams
        .acquire(caller, state.config.settings.max_streams_per_user)?)
}

/// Ends a server-sent event stream after `stream_max`: the client reconnects
/// with `Last-Event-ID` and resumes, and no proxy sees an endless response.
/// The stream holds `permit` until it ends.
pub(crate) fn bounded<S: futures_util::Stream>(
    stream_max: std::time::Duration,
    permit: crate::identity::streams::StreamPermit,
    stream: S,
) -> impl futures_util::Stream<Item = S::Item> {
    use futures_util::StreamExt;
    stream
        .take_until(tokio::time::sleep(stream_max))
        .map(move |item| {
            let _ = &permit;
            item
        })
}

#[derive(Clone)]
struct OpenApiJson(Arc<str>);

/// This document: every route, body and scope of the API.
#[utoipa::path(get, path = "/openapi.json", tag = "server",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_json(Extension(OpenApiJson(json)): Extension<OpenApiJson>) -> impl IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        json.to_string(),
    )
}

/// Unknown API paths answer in the API's error shape, not with a console page.
async fn no_route(method: http::Method, uri: http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route {method} {}", uri.path()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn path_parameters_are_in_their_path_and_the_rest_in_the_query() {
        let (_, doc) = super::router();
        let doc = serde_json::to_value(doc).unwrap();
        for (path, operations) in doc["paths"].as_object().unwrap() {
            for (method, operation) in operations.as_object().unwrap() {
                for parameter in operation["parameters"].as_array().into_iter().flatten() {
                    let name = parameter["name"].as_str().unwrap();
                    let in_template = path.contains(&format!("{{{name}}}"));
                    let place = parameter["in"].as_str().unwrap();
                    let expected = if in_template { "path" } else { "query" };
                    assert_eq!(place, expected, "{method} {path}: parameter {name}");
                }
            }
        }
    }
}
