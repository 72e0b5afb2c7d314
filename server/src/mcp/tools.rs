//! The tools. Each is one API operation (a method and a path under
//! `/api/v1`): its input schema is built from that operation's parameters
//! and body in the OpenAPI document (so from the API's own types), and
//! calling it is that API request, made with the caller's own token.

pub use super::catalog::{Confirm, Effect, TOOLS, ToolDef};
use gpuplane_api::error::FieldError;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The argument that carries a confirmation.
pub const CONFIRMATION: &str = "confirmation";

/// A parameter's place in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Path,
    Query,
    Body,
}

/// A tool ready to list and call.
pub struct Prepared {
    pub def: &'static ToolDef,
    pub tool: Tool,
    params: Vec<(String, Place)>,
}

/// A request for the API, built from a tool's arguments.
#[derive(Debug)]
pub struct ApiCall {
    pub method: &'static str,
    /// Path and query, below `/api/v1`.
    pub path_and_query: String,
    pub body: Option<Value>,
    /// The joined read: its key in the answer and its path.
    pub joined: Option<(&'static str, String)>,
}

impl Prepared {
    /// The API request for `args`, or the fields that are wrong.
    pub fn call(&self, args: &JsonObject) -> Result<ApiCall, Vec<FieldError>> {
        let mut errors = Vec::new();
        for name in args.keys() {
            if !self.params.iter().any(|(param, _)| param == name) {
                errors.push(field(name, "unknown field: see the tool's input schema"));
            }
        }
        let mut path = self.def.path.to_string();
        let mut joined = self.def.joined.map(|(key, path)| (key, path.to_string()));
        let mut query = Vec::new();
        let mut body = Map::new();
        for (name, place) in &self.params {
            let value = args.get(name).cloned().or_else(|| {
                let (_, default) = self.def.defaults.iter().find(|(key, _)| key == name)?;
                Some(json!(default))
            });
            let Some(value) = value.filter(|value| !value.is_null()) else {
                if *place == Place::Path {
                    errors.push(field(name, "is required"));
                }
                continue;
            };
            match place {
                Place::Path => match value.as_str().filter(|id| valid_id(id)) {
                    Some(id) => {
                        path = path.replace(&format!("{{{name}}}"), id);
                        if let Some((_, joined_path)) = &mut joined {
                            *joined_path = joined_path.replace(&format!("{{{name}}}"), id);
                        }
                    }
                    None => errors.push(field(name, "must be an id such as the ones list tools answer")),
                },
                Place::Query => query.push((name.clone(), scalar_text(&value))),
                Place::Body => {
                    body.insert(name.clone(), value);
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if !query.is_empty() {
            path.push('?');
            path.push_str(&serde_urlencoded::to_string(&query).unwrap_or_default());
        }
        let has_body = self.params.iter().any(|(_, place)| *place == Place::Body);
        Ok(ApiCall {
            method: self.def.method,
            path_and_query: path,
            body: has_body.then_some(Value::Object(body)),
            joined,
        })
    }
}

fn field(name: &str, message: &str) -> FieldError {
    FieldError {
        field: name.to_string(),
        message: message.to_string(),
    }
}

/// Ids are ULID-like words: nothing that could change the path.
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && id != "."
        && id != ".."
}

/// A query parameter's text: strings as they are, numbers and booleans written out.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Every tool of [`TOOLS`], with its schema taken from `openapi` (the
/// API's own document, as JSON).
pub fn prepare(openapi: &Value) -> anyhow::Result<Vec<Prepared>> {
    TOOLS.iter().map(|def| prepare_one(openapi, def)).collect()
}

fn prepare_one(openapi: &Value, def: &'static ToolDef) -> anyhow::Result<Prepared> {
    let full_path = format!("{}{}", gpuplane_api::paths::PREFIX, def.path);
    let operation = openapi
        .pointer(&format!(
            "/paths/{}/{}",
            full_path.replace('~', "~0").replace('/', "~1"),
            def.method.to_lowercase()
        ))
        .ok_or_else(|| anyhow::anyhow!("tool {}: no {} {full_path} in the API", def.name, def.method))?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut params = Vec::new();
    for parameter in operation["parameters"].as_array().into_iter().flatten() {
        let name = parameter["name"].as_str().unwrap_or_default().to_string();
        let place = match parameter["in"].as_str() {
            Some("path") => Place::Path,
            Some("query") => Place::Query,
            other => anyhow::bail!("tool {}: parameter {name} in {other:?}", def.name),
        };
        let mut schema = parameter["schema"].clone();
        if let (Some(description), Some(object)) = (parameter["description"].as_str(), schema.as_object_mut())
        {
            object.insert("description".into(), description.into());
        }
        if let Some((_, default)) = def.defaults.iter().find(|(key, _)| *key == name)
            && let Some(object) = schema.as_object_mut()
        {
            object.insert("default".into(), json!(default));
        }
        if parameter["required"].as_bool() == Some(true) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), schema);
        params.push((name, place));
    }
    if let Some(body) = operation.pointer("/requestBody/content/application~1json/schema") {
        let body = resolve(openapi, body);
        for (name, schema) in body["properties"].as_object().into_iter().flatten() {
            properties.insert(name.clone(), schema.clone());
            params.push((name.clone(), Place::Body));
        }
        required.extend(body["required"].as_array().into_iter().flatten().cloned());
    }
    // `confirm: true` is the API's; an assistant's confirmation is a token.
    if properties.remove("confirm").is_some() {
        params.retain(|(name, _)| name != "confirm");
        required.retain(|name| name != "confirm");
    }
    if matches!(def.confirm, Confirm::Always | Confirm::AtPreemptingPriority) {
        properties.insert(
            CONFIRMATION.into(),
            json!({"type": "string", "description": format!(
                "The confirmation preview_{} answered for these same arguments.", def.name
            )}),
        );
    }
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let definitions = referenced_schemas(openapi, &mut schema);
    if !definitions.is_empty() {
        schema["$defs"] = Value::Object(definitions);
    }
    let Value::Object(schema) = schema else {
        unreachable!("built as an object")
    };
    let annotations = ToolAnnotations::new()
        .read_only(def.effect == Effect::Reads || matches!(def.confirm, Confirm::PreviewOf(_)))
        .destructive(def.effect == Effect::Destroys)
        .open_world(false);
    let tool = Tool::new(def.name, def.description, Arc::new(schema)).annotate(annotations);
    Ok(Prepared { def, tool, params })
}

/// `schema`, or what its `$ref` points at.
fn resolve<'a>(openapi: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => openapi.pointer(pointer).unwrap_or(schema),
        None => schema,
    }
}

const COMPONENT_PREFIX: &str = "#/components/schemas/";

/// Rewrites the API's `#/components/schemas/X` references in `schema` to
/// `#/$defs/X`, and answers every component they reach, rewritten too.
fn referenced_schemas(openapi: &Value, schema: &mut Value) -> Map<String, Value> {
    let mut definitions = Map::new();
    let mut pending = rewrite_refs(schema);
    while let Some(name) = pending.pop() {
        if definitions.contains_key(&name) {
            continue;
        }
        let mut component = openapi
            .pointer(&format!("/components/schemas/{name}"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        pending.extend(rewrite_refs(&mut component));
        definitions.insert(name, component);
    }
    definitions
}

/// Rewrites the references under `value` and answers the component names they name.
fn rewrite_refs(value: &mut Value) -> Vec<String> {
    let mut names = Vec::new();
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get_mut("$ref")
                && let Some(name) = reference.strip_prefix(COMPONENT_PREFIX).map(str::to_string)
            {
                *reference = format!("#/$defs/{name}");
                names.push(name);
            }
            for child in object.values_mut() {
                names.extend(rewrite_refs(child));
            }
        }
        Value::Array(items) => {
            for child in items {
                names.extend(rewrite_refs(child));
            }
        }
        _ => {}
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<Prepared> {
        let (_, doc) = crate::api::router();
        prepare(&serde_json::to_value(doc).unwrap()).unwrap()
    }

    fn args(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn every_tool_is_an_api_operation_with_a_self_contained_schema() {
        for prepared in tools() {
            let text = serde_json::to_string(&prepared.tool.input_schema).unwrap();
            assert!(!text.contains("#/components/"), "{}: {text}", prepared.def.name);
            for reference in text.split("\"#/$defs/").skip(1) {
                let name = reference.split('"').next().unwrap();
                assert!(
                    prepared.tool.input_schema["$defs"].get(name).is_some(),
                    "{}: $defs lacks {name}",
                    prepared.def.name
                );
            }
        }
    }

    #[test]
    fn submit_job_takes_the_job_spec_and_list_jobs_its_filters() {
        let tools = tools();
        let submit = tools.iter().find(|t| t.def.name == "submit_job").unwrap();
        let schema = &submit.tool.input_schema;
        assert_eq!(schema["required"], json!(["name", "command"]));
        assert_eq!(schema["properties"]["command"]["type"], "array");
        let list = tools.iter().find(|t| t.def.name == "list_jobs").unwrap();
        let call = list.call(&args(json!({"status": "RUNNING"}))).unwrap();
        assert_eq!(call.path_and_query, "/jobs?status=RUNNING&limit=20");
        assert!(call.body.is_none());
    }

    #[test]
    fn arguments_become_path_query_and_body() {
        let tools = tools();
        let retry = tools.iter().find(|t| t.def.name == "retry_job").unwrap();
        let call = retry
            .call(&args(
                json!({"job_id": "job_01", "force": true, "set": {"resources.gpu": "2"}}),
            ))
            .unwrap();
        assert_eq!(call.method, "POST");
        assert_eq!(call.path_and_query, "/jobs/job_01/retry");
        assert_eq!(
            call.body,
            Some(json!({"force": true, "set": {"resources.gpu": "2"}}))
        );
    }

    #[test]
    fn wrong_arguments_are_named() {
        let tools = tools();
        let get = tools.iter().find(|t| t.def.name == "get_job").unwrap();
        let errors = get.call(&args(json!({"jobid": "x"}))).unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["jobid", "job_id"]);
        let errors = get.call(&args(json!({"job_id": "../nodes"}))).unwrap_err();
        assert_eq!(errors[0].field, "job_id");
    }
}
