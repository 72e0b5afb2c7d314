//! The recipe file: what a platform team publishes (`gpuctl recipe publish
//! FILE`). Parsing checks everything that can be checked without a config:
//! names, the schema (a valid JSON Schema of scalar keys, defaults that pass
//! it), the rules (known keys, numeric) and the template (known job-spec
//! fields, placeholders naming schema keys, a valid spec when rendered).

use crate::template;
use gpuplane_api::error::FieldError;
use gpuplane_api::recipe::RecipeKey;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The largest recipe file the server takes.
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// The config key types a recipe may declare: a run's config holds scalars.
pub const KEY_TYPES: &[&str] = &["string", "number", "integer", "boolean"];
/// Rule operands that name the rendered job's resources, not config keys.
pub const RESOURCE_OPERANDS: &[&str] = &["gpus", "nodes"];
/// `compare` operators.
pub const OPERATORS: &[&str] = &["<", "<=", ">", ">=", "==", "!="];
/// Job-spec fields a template may set; the rest are the submitter's.
pub const TEMPLATE_FIELDS: &[&str] = &[
    "name",
    "kind",
    "command",
    "working_dir",
    "env",
    "runner",
    "image",
    "resources",
    "node_selector",
    "max_attempts",
    "retry_cooldown_s",
    "time_limit_s",
    "watch_dirs",
    "tags",
    "slurm",
];

/// A parsed, checked recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub name: String,
    pub version: i64,
    pub runtime_id: String,
    #[serde(default)]
    pub description: String,
    /// The project whose admins publish it; none: server-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default)]
    pub observability: Observability,
    /// Its jobs get the user's Hugging Face token as `HF_TOKEN`.
    #[serde(default)]
    pub hf_token: bool,
    /// It runs the user's own code: `exp init` writes a `train.sh` scaffold.
    #[serde(default)]
    pub user_code: bool,
    pub template: Map<String, Value>,
    pub schema: Value,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Observability {
    /// The SDK's metrics, in the console.
    #[default]
    Builtin,
    /// The job reports elsewhere too: its spec needs `observability_url`.
    External,
}

impl Observability {
    pub fn as_str(self) -> &'static str {
        match self {
            Observability::Builtin => "builtin",
            Observability::External => "external",
        }
    }
}

/// What a schema cannot say. Exactly one of the two is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The first divisible by the product of the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divisible: Option<Vec<String>>,
    /// `[KEY, OPERATOR, KEY]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<Vec<String>>,
}

impl Rule {
    /// The rule in words, as the catalog shows it.
    pub fn describe(&self) -> String {
        match (&self.divisible, &self.compare) {
            (Some(keys), _) if !keys.is_empty() => {
                format!("{} divisible by {}", keys[0], keys[1..].join(" × "))
            }
            (_, Some(parts)) => parts.join(" "),
            _ => String::new(),
        }
    }
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

impl Recipe {
    /// Parses and checks a recipe file; every problem at once.
    pub fn parse(source: &str) -> Result<Recipe, Vec<FieldError>> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(vec![bad(
                "source",
                format!("a recipe file is at most {MAX_SOURCE_BYTES} bytes"),
            )]);
        }
        let recipe: Recipe = toml::from_str(source).map_err(|error| {
            vec![bad(
                "source",
                format!("not a recipe file: {}", error.to_string().trim_end()),
            )]
        })?;
        let errors = recipe.problems();
        if errors.is_empty() {
            Ok(recipe)
        } else {
            Err(errors)
        }
    }

    fn problems(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if let Err(message) = check_name(&self.name) {
            errors.push(bad("name", message));
        }
        if !(1..=1_000_000).contains(&self.version) {
            errors.push(bad("version", "is a whole number from 1 to 1000000"));
        }
        let runtime_ok = !self.runtime_id.is_empty()
            && self.runtime_id.len() <= 200
            && self.runtime_id.chars().all(|c| c.is_ascii_graphic());
        if !runtime_ok {
            errors.push(bad("runtime_id", "is 1-200 printable characters without spaces"));
        }
        if self.description.chars().count() > 4000 || self.description.contains('\0') {
            errors.push(bad("description", "is at most 4000 characters"));
        }
        if let Some(project) = &self.project
            && !valid_project_name(project)
        {
            errors.push(bad(
                "project",
                "is a project name: 1-64 lowercase letters, digits, '-' or '_'",
            ));
        }
        let schema_errors = check_schema(&self.schema);
        let schema_ok = schema_errors.is_empty();
        errors.extend(schema_errors);
        if schema_ok {
            errors.extend(self.check_rules());
            errors.extend(self.check_template());
        }
        errors
    }

    /// The schema's properties (checked to be an object by `parse`).
    pub fn properties(&self) -> Map<String, Value> {
        self.schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    /// The keys the schema requires.
    pub fn required(&self) -> Vec<String> {
        self.schema
            .get("required")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().filter_map(|k| k.as_str().map(String::from)).collect())
            .unwrap_or_default()
    }

    /// Struct mode: keys the schema does not name are refused.
    pub fn struct_mode(&self) -> bool {
        self.schema.get("additionalProperties") == Some(&Value::Bool(false))
    }

    /// The schema's defaults, by key.
    pub fn defaults(&self) -> Map<String, Value> {
        self.properties()
            .into_iter()
            .filter_map(|(key, property)| property.get("default").cloned().map(|value| (key, value)))
            .collect()
    }

    /// The config keys as the catalog shows them, in the schema's order.
    pub fn keys(&self) -> Vec<RecipeKey> {
        let required = self.required();
        self.properties()
            .into_iter()
            .map(|(name, property)| RecipeKey {
                required: required.contains(&name),
                kind: property
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                default: property.get("default").cloned(),
                description: property
                    .get("description")
                    .and_then(Value::as_str)
                    .map(String::from),
                constraint: constraint(&property),
                hub: property.get(HUB_MARK).and_then(Value::as_str).map(String::from),
                choices: match property.get("enum") {
                    Some(Value::Array(choices)) => choices.clone(),
                    _ => Vec::new(),
                },
                name,
            })
            .collect()
    }

    /// The keys marked as Hugging Face Hub ids, with `model` or `dataset`.
    pub fn hub_keys(&self) -> Vec<(String, String)> {
        self.keys()
            .into_iter()
            .filter_map(|key| key.hub.map(|hub| (key.name, hub)))
            .collect()
    }

    /// `sha256:…` of everything that changes what runs: not the description
    /// or the owning project.
    pub fn contract(&self) -> String {
        let what_runs = serde_json::json!({
            "name": self.name,
            "version": self.version,
            "runtime_id": self.runtime_id,
            "observability": self.observability.as_str(),
            "hf_token": self.hf_token,
            "user_code": self.user_code,
            "template": Value::Object(self.template.clone()),
            "schema": self.schema,
            "rules": self.rules,
        });
        let canonical = canonical(&what_runs).to_string();
        format!("sha256:{}", hex::encode(Sha256::digest(canonical.as_bytes())))
    }

    fn check_rules(&self) -> Vec<FieldError> {
        let properties = self.properties();
        let numeric = |key: &str, integer_only: bool| -> Result<(), String> {
            if RESOURCE_OPERANDS.contains(&key) {
                return Ok(());
            }
            match properties
                .get(key)
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str)
            {
                None => Err(format!(
                    "`{key}` is not a key of the schema, nor `gpus` or `nodes`"
                )),
                Some("integer") => Ok(()),
                Some("number") if !integer_only => Ok(()),
                Some(kind) => Err(format!(
                    "`{key}` is a {kind}; this rule takes {}",
                    if integer_only { "integers" } else { "numbers" }
                )),
            }
        };
        let mut errors = Vec::new();
        for (n, rule) in self.rules.iter().enumerate() {
            let field = format!("rules[{n}]");
            match (&rule.divisible, &rule.compare) {
                (Some(keys), None) => {
                    if keys.len() < 2 {
                        errors.push(bad(&field, "`divisible` names at least two keys"));
                    }
                    for key in keys {
                        if let Err(message) = numeric(key, true) {
                            errors.push(bad(format!("{field}.divisible"), message));
                        }
                    }
                }
                (None, Some(parts)) => match parts.as_slice() {
                    [left, operator, right] => {
                        if !OPERATORS.contains(&operator.as_str()) {
                            errors.push(bad(
                                format!("{field}.compare"),
                                format!("`{operator}` is not one of {}", OPERATORS.join(" ")),
                            ));
                        }
                        for key in [left, right] {
                            if let Err(message) = numeric(key, false) {
                                errors.push(bad(format!("{field}.compare"), message));
                            }
                        }
                    }
                    _ => errors.push(bad(
                        format!("{field}.compare"),
                        "is [KEY, OPERATOR, KEY], e.g. [\"warmup_steps\", \"<=\", \"max_steps\"]",
                    )),
                },
                _ => errors.push(bad(&field, "gives exactly one of `divisible` or `compare`")),
            }
        }
        errors
    }

    fn check_template(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for field in self.template.keys() {
            if !TEMPLATE_FIELDS.contains(&field.as_str()) {
                let hint = gpuplane_api::spec::closest(field, TEMPLATE_FIELDS.iter().copied())
                    .map(|best| format!("; did you mean `{best}`?"))
                    .unwrap_or_default();
                errors.push(bad(
                    format!("template.{field}"),
                    format!(
                        "is not a field a template sets (those are {}){hint}",
                        TEMPLATE_FIELDS.join(", ")
                    ),
                ));
            }
        }
        let properties = self.properties();
        for key in template::placeholders(&Value::Object(self.template.clone())) {
            if !properties.contains_key(&key) {
                errors.push(bad(
                    "template",
                    format!("`${{config.{key}}}` names no key of the schema"),
                ));
            }
        }
        if !errors.is_empty() {
            return errors;
        }
        // Rendered with the defaults (and a sample value for keys without
        // one), the template must be a valid job spec.
        let mut sample = self.defaults();
        for (key, property) in &properties {
            sample
                .entry(key.clone())
                .or_insert_with(|| sample_value(property));
        }
        match template::render(self, &sample) {
            Ok(spec) => {
                if let Err(spec_errors) = gpuplane_api::spec::validate(&spec, &Default::default()) {
                    errors.extend(spec_errors.into_iter().map(|error| FieldError {
                        field: format!("template.{}", error.field),
                        message: error.message,
                    }));
                }
            }
            Err(render_errors) => errors.extend(render_errors),
        }
        errors
    }
}

/// The schema extension that marks a key as a Hub id.
pub const HUB_MARK: &str = "x-gpuplane-hf";

/// A recipe name: 1-64 lowercase letters, digits, `-`, `_` and `.`,
/// starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err("is 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit".into())
    }
}

fn valid_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// A config key: 1-200 characters of letters, digits, `_`, `-` and `.`,
/// starting with a letter or `_` (it becomes a run config key and a
/// `${config.KEY}` placeholder).
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 200
        && key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !key.ends_with('.')
}

fn check_schema(schema: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(object) = schema.as_object() else {
        return vec![bad("schema", "is a table (a JSON Schema object)")];
    };
    if object.get("type").and_then(Value::as_str) != Some("object") {
        errors.push(bad("schema.type", "is \"object\": a config is a table of keys"));
    }
    match object.get("additionalProperties") {
        None | Some(Value::Bool(_)) => {}
        Some(_) => errors.push(bad(
            "schema.additionalProperties",
            "is true or false (false: struct mode, unknown keys are refused)",
        )),
    }
    let properties = match object.get("properties") {
        Some(Value::Object(properties)) => properties.clone(),
        None => Map::new(),
        Some(_) => {
            errors.push(bad("schema.properties", "is a table of keys"));
            Map::new()
        }
    };
    for (key, property) in &properties {
        let field = format!("schema.properties.{key}");
        if !valid_key(key) {
            errors.push(bad(
                &field,
                "a key is 1-200 letters, digits, '_', '-' or '.', starting with a letter or '_'",
            ));
        } else if key.starts_with("recipe.") {
            errors.push(bad(
                &field,
                "keys under `recipe.` are the run's record of its recipe",
            ));
        }
        let kind = property.get("type").and_then(Value::as_str);
        if !kind.is_some_and(|kind| KEY_TYPES.contains(&kind)) {
            errors.push(bad(
                format!("{field}.type"),
                format!(
                    "is one of {} (a run's config holds scalars)",
                    KEY_TYPES.join(", ")
                ),
            ));
        }
        match property.get(HUB_MARK) {
            None => {}
            Some(Value::String(hub)) if (hub == "model" || hub == "dataset") && kind == Some("string") => {}
            Some(_) => errors.push(bad(
                format!("{field}.{HUB_MARK}"),
                "is \"model\" or \"dataset\", on a string key",
            )),
        }
    }
    if let Some(required) = object.get("required") {
        let names: Option<Vec<&str>> = required
            .as_array()
            .and_then(|keys| keys.iter().map(Value::as_str).collect());
        match names {
            Some(names) => {
                for name in names {
                    if !properties.contains_key(name) {
                        errors.push(bad("schema.required", format!("`{name}` is not in properties")));
                    }
                }
            }
            None => errors.push(bad("schema.required", "is a list of keys")),
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    if let Err(error) = jsonschema::validator_for(schema) {
        return vec![bad("schema", format!("is not a valid JSON Schema: {error}"))];
    }
    for (key, property) in &properties {
        let Some(default) = property.get("default") else {
            continue;
        };
        match jsonschema::validator_for(property) {
            Ok(validator) => {
                if let Some(error) = validator.iter_errors(default).next() {
                    errors.push(bad(
                        format!("schema.properties.{key}.default"),
                        format!("does not pass its own schema: {error}"),
                    ));
                }
            }
            Err(error) => errors.push(bad(
                format!("schema.properties.{key}"),
                format!("is not a valid JSON Schema: {error}"),
            )),
        }
    }
    errors
}

/// Bounds and choices of a property, in words.
fn constraint(property: &Value) -> Option<String> {
    let number = |name: &str| property.get(name).map(Value::to_string);
    let mut parts = Vec::new();
    let lower = number("minimum")
        .map(|n| format!("{n} ≤ "))
        .or_else(|| number("exclusiveMinimum").map(|n| format!("{n} < ")));
    let upper = number("maximum")
        .map(|n| format!(" ≤ {n}"))
        .or_else(|| number("exclusiveMaximum").map(|n| format!(" < {n}")));
    if lower.is_some() || upper.is_some() {
        parts.push(format!(
            "{}x{}",
            lower.unwrap_or_default(),
            upper.unwrap_or_default()
        ));
    }
    if let Some(Value::Array(choices)) = property.get("enum") {
        let choices: Vec<String> = choices.iter().map(Value::to_string).collect();
        parts.push(format!("one of {}", choices.join(", ")));
    }
    if let Some(multiple) = number("multipleOf") {
        parts.push(format!("a multiple of {multiple}"));
    }
    if let Some(pattern) = property.get("pattern").and_then(Value::as_str) {
        parts.push(format!("matches {pattern}"));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A value of a property's type that its bounds allow where they are
/// simple, for checking the template without a user's config.
fn sample_value(property: &Value) -> Value {
    if let Some(Value::Array(choices)) = property.get("enum")
        && let Some(first) = choices.first()
    {
        return first.clone();
    }
    let minimum = property.get("minimum").and_then(Value::as_f64);
    match property.get("type").and_then(Value::as_str) {
        Some("integer") => Value::from(minimum.map_or(1, |m| m.ceil().max(1.0) as i64)),
        Some("number") => Value::from(minimum.unwrap_or(1.0)),
        Some("boolean") => Value::Bool(false),
        _ => Value::String("org/name".into()),
    }
}

/// `value` with every object's keys sorted, whatever order serde_json keeps.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            let mut sorted = Map::new();
            for key in keys {
                sorted.insert(key.clone(), canonical(&object[key]));
            }
            Value::Object(sorted)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}
