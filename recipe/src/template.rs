//! The job a recipe and a config make: every `${config.KEY}` in the
//! template's strings is replaced by the key's value, as text. In the
//! numeric fields (`resources`, `max_attempts`, `retry_cooldown_s`,
//! `time_limit_s`) a string that is exactly one placeholder becomes the
//! value itself, so `gpu = "${config.gpus}"` is a number. Other `${…}` text
//! is left alone (a shell's variables).

use crate::file::Recipe;
use gpuplane_api::error::FieldError;
use gpuplane_api::job::JobSpec;
use serde_json::{Map, Value};

const OPEN: &str = "${config.";
/// Template fields whose placeholders keep their value's type.
const NUMERIC_FIELDS: &[&str] = &["resources", "max_attempts", "retry_cooldown_s", "time_limit_s"];

/// The config keys the template's placeholders name, in order, repeated.
pub fn placeholders(template: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk_strings(template, &mut |text| {
        let mut rest = text;
        while let Some(start) = rest.find(OPEN) {
            let after = &rest[start + OPEN.len()..];
            match after.find('}') {
                Some(end) => {
                    found.push(after[..end].to_string());
                    rest = &after[end + 1..];
                }
                None => break,
            }
        }
    });
    found
}

fn walk_strings(value: &Value, visit: &mut impl FnMut(&str)) {
    match value {
        Value::String(text) => visit(text),
        Value::Array(items) => items.iter().for_each(|item| walk_strings(item, visit)),
        Value::Object(object) => object.values().for_each(|item| walk_strings(item, visit)),
        _ => {}
    }
}

/// The job spec of `recipe` with `config` (the recipe's defaults under it),
/// in project `default` and named after the recipe unless its template
/// names the job; the caller sets the submitter's fields.
pub fn render(recipe: &Recipe, config: &Map<String, Value>) -> Result<JobSpec, Vec<FieldError>> {
    let mut values = recipe.defaults();
    values.extend(config.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut missing = Vec::new();
    let mut rendered = Value::Object(
        recipe
            .template
            .iter()
            .map(|(field, value)| {
                let typed = NUMERIC_FIELDS.contains(&field.as_str());
                (field.clone(), fill(value, &values, typed, &mut missing))
            })
            .collect(),
    );
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(missing
            .into_iter()
            .map(|key| FieldError {
                field: format!("config.{key}"),
                message: "is required: the recipe's template uses it and it has no default".into(),
            })
            .collect());
    }
    if let Value::Object(object) = &mut rendered {
        object
            .entry("name")
            .or_insert_with(|| Value::String(recipe.name.clone()));
    }
    serde_json::from_value(rendered).map_err(|error| {
        vec![FieldError {
            field: "template".into(),
            message: format!("with this config it is not a job spec: {error}"),
        }]
    })
}

fn fill(value: &Value, config: &Map<String, Value>, typed: bool, missing: &mut Vec<String>) -> Value {
    match value {
        Value::String(text) => fill_text(text, config, typed, missing),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| fill(item, config, typed, missing))
                .collect(),
        ),
        Value::Object(object) => Value::Object(
            object
                .iter()
                .map(|(key, item)| (key.clone(), fill(item, config, typed, missing)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn fill_text(text: &str, config: &Map<String, Value>, typed: bool, missing: &mut Vec<String>) -> Value {
    // Exactly one placeholder in a numeric field: the value itself, typed.
    if typed
        && let Some(key) = text.strip_prefix(OPEN).and_then(|rest| rest.strip_suffix('}'))
        && !key.contains('}')
    {
        return match config.get(key) {
            Some(value) => value.clone(),
            None => {
                missing.push(key.to_string());
                Value::Null
            }
        };
    }
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Value::String(out);
        };
        let key = &after[..end];
        match config.get(key) {
            Some(Value::String(value)) => out.push_str(value),
            Some(value) => out.push_str(&value.to_string()),
            None => missing.push(key.to_string()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Value::String(out)
}
