//! A config checked against its recipe, every problem at once, each under
//! `config.KEY`: the JSON Schema (through the `jsonschema` crate), keys the
//! schema does not name in struct mode (with the closest key suggested),
//! and the recipe's rules on the job it renders.

use crate::file::{Recipe, Rule};
use crate::template;
use gpuplane_api::error::FieldError;
use gpuplane_api::job::JobSpec;
use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A config that passed: the values the job runs with (the recipe's
/// defaults under the given ones) and the job they render.
#[derive(Debug, Clone)]
pub struct Checked {
    pub config: Map<String, Value>,
    pub spec: JobSpec,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks `config` against `recipe`; every problem at once.
pub fn check(recipe: &Recipe, config: &Map<String, Value>) -> Result<Checked, Vec<FieldError>> {
    let as_tree: BTreeMap<String, Value> = config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut errors = gpuplane_api::experiment::check_config(&as_tree);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut values = recipe.defaults();
    values.extend(config.iter().map(|(k, v)| (k.clone(), v.clone())));
    errors.extend(schema_errors(recipe, &values));
    for (key, kind) in recipe.hub_keys() {
        if let Some(Value::String(id)) = values.get(&key)
            && let Err(message) = check_hub_id(id, &kind)
        {
            errors.push(bad(format!("config.{key}"), message));
        }
    }
    // The rules speak too, on the keys the schema found nothing wrong with:
    // every problem at once, not one round per kind.
    let spec = match template::render(recipe, &values) {
        Ok(spec) => spec,
        // A value of the wrong type breaks the render: already named.
        Err(_) if !errors.is_empty() => return Err(errors),
        Err(render_errors) => return Err(render_errors),
    };
    let named: Vec<String> = errors.iter().map(|error| error.field.clone()).collect();
    for rule in &recipe.rules {
        let operands = rule
            .divisible
            .iter()
            .flatten()
            .chain(rule.compare.iter().flatten());
        if operands
            .into_iter()
            .any(|key| named.contains(&format!("config.{key}")))
        {
            continue;
        }
        if let Some(error) = broken(rule, &values, &spec) {
            errors.push(error);
        }
    }
    if errors.is_empty() {
        Ok(Checked { config: values, spec })
    } else {
        Err(errors)
    }
}

fn schema_errors(recipe: &Recipe, values: &Map<String, Value>) -> Vec<FieldError> {
    // Checked when the recipe was parsed; a schema that no longer compiles
    // (a newer crate) is the recipe's problem, named as such.
    let validator = match jsonschema::validator_for(&recipe.schema) {
        Ok(validator) => validator,
        Err(error) => return vec![bad("recipe", format!("its schema does not compile: {error}"))],
    };
    let instance = Value::Object(values.clone());
    let properties = recipe.properties();
    let known: Vec<&str> = properties.keys().map(String::as_str).collect();
    let mut errors = Vec::new();
    for error in validator.iter_errors(&instance) {
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                for key in unexpected {
                    let hint = gpuplane_api::spec::closest(key, known.iter().copied())
                        .map(|best| format!("; did you mean `{best}`?"))
                        .unwrap_or_default();
                    errors.push(bad(
                        format!("config.{key}"),
                        format!(
                            "is not a key of recipe {} v{} (struct mode: unknown keys are refused){hint}",
                            recipe.name, recipe.version
                        ),
                    ));
                }
            }
            ValidationErrorKind::Required { property } => {
                let key = property
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| property.to_string());
                let described = properties
                    .get(&key)
                    .and_then(|p| p.get("description"))
                    .and_then(Value::as_str)
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                errors.push(bad(format!("config.{key}"), format!("is required{described}")));
            }
            _ => {
                let path = error.instance_path().to_string();
                let key = path.trim_start_matches('/').replace('/', ".");
                let field = if key.is_empty() {
                    "config".to_string()
                } else {
                    format!("config.{key}")
                };
                errors.push(bad(field, error.to_string()));
            }
        }
    }
    errors
}

/// A Hugging Face Hub id is `org/name`: each part 1-96 letters, digits,
/// `-`, `_` or `.`, not starting or ending with `-` or `.`.
pub fn check_hub_id(id: &str, kind: &str) -> Result<(), String> {
    let part_ok = |part: &str| {
        !part.is_empty()
            && part.len() <= 96
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !part.starts_with(['-', '.'])
            && !part.ends_with(['-', '.'])
            && !part.contains("..")
    };
    match id.split_once('/') {
        Some((org, name)) if part_ok(org) && part_ok(name) => Ok(()),
        _ => Err(format!(
            "`{id}` is not a Hugging Face {kind} id: give the full org/name (as on its Hub page, e.g. `meta-llama/Llama-3.1-8B`)"
        )),
    }
}

/// The value a rule operand names: a config key, or the rendered job's
/// `gpus` (per node) and `nodes` (1 until jobs span hosts).
fn operand(name: &str, values: &Map<String, Value>, spec: &JobSpec) -> Option<f64> {
    match name {
        "gpus" => Some(spec.resources.gpu as f64),
        "nodes" => Some(1.0),
        key => values.get(key).and_then(Value::as_f64),
    }
}

/// The field a rule's failure is shown on: its first config key.
fn rule_field(keys: &[String]) -> String {
    keys.iter()
        .find(|key| !crate::file::RESOURCE_OPERANDS.contains(&key.as_str()))
        .map(|key| format!("config.{key}"))
        .unwrap_or_else(|| "config".into())
}

fn show(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        value.to_string()
    }
}

/// The rule's failure, or none when it holds (or a key it names is unset).
fn broken(rule: &Rule, values: &Map<String, Value>, spec: &JobSpec) -> Option<FieldError> {
    if let Some(keys) = &rule.divisible {
        let numbers: Option<Vec<f64>> = keys.iter().map(|key| operand(key, values, spec)).collect();
        let numbers = numbers?;
        let (first, rest) = numbers.split_first()?;
        let product: f64 = rest.iter().product();
        let divides = product != 0.0 && (first / product).fract() == 0.0;
        if divides {
            return None;
        }
        let parts: Vec<String> = keys[1..]
            .iter()
            .zip(rest)
            .map(|(key, value)| format!("{key} {}", show(*value)))
            .collect();
        return Some(bad(
            rule_field(keys),
            format!(
                "{} ({}) must be divisible by {} = {} ({})",
                keys[0],
                show(*first),
                keys[1..].join(" × "),
                show(product),
                parts.join(", ")
            ),
        ));
    }
    if let Some(parts) = &rule.compare
        && let [left, operator, right] = parts.as_slice()
    {
        let (a, b) = (operand(left, values, spec)?, operand(right, values, spec)?);
        let holds = match operator.as_str() {
            "<" => a < b,
            "<=" => a <= b,
            ">" => a > b,
            ">=" => a >= b,
            "==" => a == b,
            "!=" => a != b,
            _ => true,
        };
        if holds {
            return None;
        }
        return Some(bad(
            rule_field(&[left.clone(), right.clone()]),
            format!(
                "{left} {operator} {right} must hold: {left} is {}, {right} is {}",
                show(a),
                show(b)
            ),
        ));
    }
    None
}
