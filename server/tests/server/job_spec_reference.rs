//! The manual's job spec reference (`docs/src/reference/job-spec.md`) is
//! the API's own description of `JobSpec`, from its OpenAPI document: every
//! field, its type, whether it is required and its doc comment, and the
//! same for the types it names. `GPUPLANE_BLESS=1` rewrites the page after
//! a field changes.

use serde_json::{Map, Value};

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/reference/job-spec.md");

#[test]
fn the_manuals_job_spec_reference_is_the_apis_own() {
    let (_, openapi) = gpuplane_server::api::router();
    let document = serde_json::to_value(&openapi).unwrap();
    let schemas = document["components"]["schemas"].as_object().unwrap();
    let page = reference(schemas);
    if std::env::var_os("GPUPLANE_BLESS").is_some() {
        std::fs::write(PAGE, &page).unwrap();
    }
    let written = std::fs::read_to_string(PAGE).unwrap_or_default();
    assert!(
        written == page,
        "{PAGE} is not the API's description of JobSpec: run \
         `GPUPLANE_BLESS=1 cargo nextest run -p gpuplane-server -E 'test(/job_spec_reference/)'` and commit it"
    );
}

/// The page: `JobSpec`, then each type it names, in the order first named.
fn reference(schemas: &Map<String, Value>) -> String {
    let mut page = String::from(
        "# Job spec\n\n\
         What `POST /api/v1/jobs` takes and `gpuctl job submit -f FILE` reads (TOML,\n\
         YAML or JSON; flags override the file), field by field. `gpuctl validate\n\
         FILE` checks a file with the server's own rules. Generated from the API's\n\
         OpenAPI document (`/api/v1/openapi.json`) by\n\
         `server/tests/server/job_spec_reference.rs`.\n",
    );
    let mut pending = vec!["JobSpec".to_string()];
    let mut done = Vec::new();
    while let Some(name) = pending.first().cloned() {
        pending.remove(0);
        done.push(name.clone());
        let schema = &schemas[&name];
        page.push_str(&format!("\n## {name}\n\n"));
        if let Some(description) = schema["description"].as_str() {
            page.push_str(&format!("{}\n\n", one_line(description)));
        }
        if let Some(values) = schema["enum"].as_array() {
            let values: Vec<String> = values
                .iter()
                .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
                .collect();
            page.push_str(&format!("One of {}.\n", values.join(", ")));
            continue;
        }
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        page.push_str("| field | type | required | what it is |\n|---|---|---|---|\n");
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            let (kind, description, named) = describe(property);
            if let Some(named) = named
                && !done.contains(&named)
                && !pending.contains(&named)
            {
                pending.push(named);
            }
            let required = if required.contains(&field.as_str()) {
                "yes"
            } else {
                ""
            };
            page.push_str(&format!(
                "| `{field}` | {kind} | {required} | {} |\n",
                one_line(&description).replace('|', "\\|")
            ));
        }
    }
    page
}

/// A property's type in words, its description, and the schema it names.
fn describe(property: &Value) -> (String, String, Option<String>) {
    let description = property["description"].as_str().unwrap_or_default().to_string();
    if let Some(reference) = property["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or_default().to_string();
        return (
            format!("[{name}](#{})", name.to_lowercase()),
            description,
            Some(name),
        );
    }
    // `Option<T>` of a named type: `oneOf: [null, {$ref, description}]`.
    if let Some(choices) = property["oneOf"].as_array()
        && let Some(named) = choices.iter().find(|choice| choice.get("$ref").is_some())
    {
        let (kind, inner, name) = describe(named);
        return (
            kind,
            if description.is_empty() {
                inner
            } else {
                description
            },
            name,
        );
    }
    let kind = match &property["type"] {
        Value::Array(types) => types.iter().find(|t| *t != "null").cloned().unwrap_or_default(),
        other => other.clone(),
    };
    let kind = match kind.as_str().unwrap_or_default() {
        "array" => format!("list of {}", describe(&property["items"]).0),
        "object" => format!("map of {}", describe(&property["additionalProperties"]).0),
        "integer" => "integer".into(),
        other => other.to_string(),
    };
    (kind, description, None)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
