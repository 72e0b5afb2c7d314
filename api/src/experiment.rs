//! What people record about a run besides its metrics: its config
//! (hyperparameters, flat `key: value`), tags and notes. One set of limits
//! and messages for the server, the CLI and the SDK's checks.

use crate::error::FieldError;
use crate::metric::Run;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The most config keys one run keeps.
pub const MAX_CONFIG_KEYS: usize = 1000;
/// The longest config key (nested keys are joined with dots).
pub const MAX_CONFIG_KEY_LEN: usize = 200;
/// The longest text value in a config.
pub const MAX_CONFIG_TEXT_LEN: usize = 4096;
/// The most tags on one run.
pub const MAX_TAGS: usize = 64;
/// The longest tag.
pub const MAX_TAG_LEN: usize = 64;
/// The longest notes.
pub const MAX_NOTES_LEN: usize = 20_000;

/// `POST /api/v1/runs/{id}/config`: keys to set (others stay).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigUpdate {
    /// Flat keys (`model.depth`); values are numbers, strings, booleans or null.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: BTreeMap<String, Value>,
}

/// `PATCH /api/v1/runs/{id}`: what to change; absent fields stay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunChanges {
    /// Replaces the tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Tags to add to the ones it has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_tags: Vec<String>,
    /// Tags to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_tags: Vec<String>,
    /// Replaces the notes (Markdown is shown as text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Renames the run (1-200 characters on one line); a job keeps its
    /// own name (`gpuplane.init(name=…)` inside a job names the job's run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `false` reopens a finished SDK run (`gpuplane.init(resume=…)`),
    /// `true` finishes it; a job's run follows its job (422).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<bool>,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// Every problem of a config update, each under `config.KEY`.
pub fn check_config(config: &BTreeMap<String, Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if config.len() > MAX_CONFIG_KEYS {
        errors.push(bad("config", format!("at most {MAX_CONFIG_KEYS} keys per run")));
    }
    for (key, value) in config {
        let field = format!("config.{key}");
        if key.is_empty() || key.chars().count() > MAX_CONFIG_KEY_LEN {
            errors.push(bad(&field, format!("keys are 1-{MAX_CONFIG_KEY_LEN} characters")));
        } else if key.chars().any(char::is_control) || key.starts_with('.') || key.ends_with('.') {
            errors.push(bad(
                &field,
                "keys are printable and do not start or end with a dot (nested keys are joined with dots)",
            ));
        }
        match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
            Value::String(text) if text.chars().count() <= MAX_CONFIG_TEXT_LEN => {}
            Value::String(_) => errors.push(bad(&field, format!("text values are at most {MAX_CONFIG_TEXT_LEN} characters"))),
            Value::Array(_) | Value::Object(_) => errors.push(bad(
                &field,
                "values are numbers, strings, booleans or null; flatten nested objects into dotted keys and write lists as text",
            )),
        }
    }
    errors
}

/// Tags are short words: letters, digits and `. _ - : /`.
pub fn check_tag(tag: &str) -> Result<(), String> {
    let valid = !tag.is_empty()
        && tag.chars().count() <= MAX_TAG_LEN
        && tag
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{tag}`: tags are 1-{MAX_TAG_LEN} letters, digits, '.', '_', '-', ':' or '/'"
        ))
    }
}

/// Every problem of a list of tags, under `field`.
pub fn check_tags(field: &str, tags: &[String]) -> Vec<FieldError> {
    let mut errors: Vec<FieldError> = tags
        .iter()
        .filter_map(|tag| check_tag(tag).err())
        .map(|message| bad(field, message))
        .collect();
    if tags.len() > MAX_TAGS {
        errors.push(bad(field, format!("at most {MAX_TAGS} tags")));
    }
    errors
}

/// The longest run name, in characters.
pub const MAX_RUN_NAME_LEN: usize = 200;

/// A run name's problem, if any: 1-200 characters (spaces around it are
/// dropped), one line, no control characters.
pub fn check_run_name(name: &str) -> Vec<FieldError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_RUN_NAME_LEN {
        vec![bad("name", format!("must be 1-{MAX_RUN_NAME_LEN} characters"))]
    } else if name.chars().any(char::is_control) {
        vec![bad("name", "must be one line without control characters")]
    } else {
        Vec::new()
    }
}

/// The notes' problem, if any.
pub fn check_notes(notes: &str) -> Vec<FieldError> {
    if notes.chars().count() > MAX_NOTES_LEN {
        vec![bad("notes", format!("at most {MAX_NOTES_LEN} characters"))]
    } else {
        Vec::new()
    }
}

/// A config value as people read it: `0.001`, `adam`, `true`, `null`.
pub fn show_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// One `config.KEY` filter of a run list: `config.lr=>0.001`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFilter {
    pub key: String,
    pub op: Comparison,
    /// The value compared with: a number when it reads as one.
    pub value: Value,
}

/// How a config filter compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl Comparison {
    pub fn sql(self) -> &'static str {
        match self {
            Comparison::Equal => "=",
            Comparison::NotEqual => "!=",
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
        }
    }
}

impl ConfigFilter {
    /// `key` and the query value: `>0.001`, `>=3`, `<1e-3`, `!=adam`, `adam`, `true`.
    /// Ordering needs a number.
    pub fn parse(key: &str, text: &str) -> Result<ConfigFilter, String> {
        let (op, rest) = [
            (">=", Comparison::GreaterOrEqual),
            ("<=", Comparison::LessOrEqual),
            ("!=", Comparison::NotEqual),
            (">", Comparison::Greater),
            ("<", Comparison::Less),
            ("=", Comparison::Equal),
        ]
        .into_iter()
        .find_map(|(prefix, op)| text.strip_prefix(prefix).map(|rest| (op, rest)))
        .unwrap_or((Comparison::Equal, text));
        let rest = rest.trim();
        let value = match rest {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ => match rest.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                Some(number) => Value::Number(number),
                None => Value::String(rest.to_string()),
            },
        };
        let ordered = !matches!(op, Comparison::Equal | Comparison::NotEqual);
        if ordered && !value.is_number() {
            return Err(format!("`{text}`: <, <=, > and >= compare numbers"));
        }
        if key.is_empty() {
            return Err("name a config key: config.KEY=VALUE".into());
        }
        Ok(ConfigFilter {
            key: key.to_string(),
            op,
            value,
        })
    }
}

/// `config.lr > 1e-3` (as `gpuctl run list --where` and the console's
/// filter field write it) as the `GET /runs` query pair `("config.lr", ">1e-3")`.
pub fn parse_condition(text: &str) -> Result<(String, String), String> {
    let operators = [">=", "<=", "!=", ">", "<", "="];
    let (at, op) = operators
        .iter()
        .filter_map(|op| text.find(op).map(|at| (at, *op)))
        .min_by_key(|(at, op)| (*at, std::cmp::Reverse(op.len())))
        .ok_or_else(|| format!("`{text}`: write KEY OP VALUE, e.g. 'config.lr > 1e-3'"))?;
    let key = text[..at].trim();
    let value = text[at + op.len()..].trim();
    let Some(name) = key.strip_prefix("config.").filter(|name| !name.is_empty()) else {
        return Err(format!(
            "`{text}`: conditions are on config keys: config.KEY OP VALUE"
        ));
    };
    let op = if op == "=" { "" } else { op };
    ConfigFilter::parse(name, &format!("{op}{value}"))?;
    Ok((key.to_string(), format!("{op}{value}")))
}

/// A column of the runs table (the console's, `gpuctl run list --columns`)
/// and what `GET /runs?sort=` orders by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunColumn {
    Name,
    Status,
    Created,
    /// Seconds from the first start to the end (or now).
    Duration,
    Tags,
    /// The best value of the run's primary metric.
    Primary,
    Config(String),
    /// A metric's latest value.
    Metric(String),
}

const BUILT_IN_COLUMNS: [&str; 6] = ["name", "status", "created", "duration", "tags", "primary"];

impl RunColumn {
    /// `name`, `status`, `created`, `duration`, `tags`, `primary`,
    /// `config.KEY`, or a metric key (`metric.KEY` when it reads like one of the others).
    pub fn parse(text: &str) -> Result<RunColumn, String> {
        let text = text.trim();
        let column = match text {
            "name" => RunColumn::Name,
            "status" => RunColumn::Status,
            "created" => RunColumn::Created,
            "duration" => RunColumn::Duration,
            "tags" => RunColumn::Tags,
            "primary" => RunColumn::Primary,
            _ => match (text.strip_prefix("config."), text.strip_prefix("metric.")) {
                (Some(key), _) => RunColumn::Config(key.to_string()),
                (_, Some(key)) => RunColumn::Metric(key.to_string()),
                _ => RunColumn::Metric(text.to_string()),
            },
        };
        match &column {
            RunColumn::Config(key) | RunColumn::Metric(key) if key.is_empty() => Err(format!(
                "`{text}` is not a column: use {}, config.KEY or a metric key",
                BUILT_IN_COLUMNS.join(", ")
            )),
            _ => Ok(column),
        }
    }

    /// How URLs and `--columns` write it; [`RunColumn::parse`] reads it back.
    pub fn id(&self) -> String {
        match self {
            RunColumn::Name => "name".into(),
            RunColumn::Status => "status".into(),
            RunColumn::Created => "created".into(),
            RunColumn::Duration => "duration".into(),
            RunColumn::Tags => "tags".into(),
            RunColumn::Primary => "primary".into(),
            RunColumn::Config(key) => format!("config.{key}"),
            RunColumn::Metric(key)
                if BUILT_IN_COLUMNS.contains(&key.as_str())
                    || key.starts_with("config.")
                    || key.starts_with("metric.") =>
            {
                format!("metric.{key}")
            }
            RunColumn::Metric(key) => key.clone(),
        }
    }

    /// A run's value in this column, as text.
    pub fn cell(&self, run: &Run) -> String {
        let missing = || "-".to_string();
        match self {
            RunColumn::Name => run.name.clone(),
            RunColumn::Status => run.status.clone(),
            RunColumn::Created => run.created_at.clone(),
            RunColumn::Duration => run
                .duration_s
                .map_or_else(missing, crate::duration::format_seconds),
            RunColumn::Tags => run.tags.join(" "),
            RunColumn::Primary => run
                .primary_metric
                .as_ref()
                .and_then(|primary| primary.best.as_ref())
                .map_or_else(missing, |best| best.value.describe()),
            RunColumn::Config(key) => run.config.get(key).map_or_else(missing, show_value),
            RunColumn::Metric(key) => run
                .latest
                .get(key)
                .map_or_else(missing, |latest| latest.value.describe()),
        }
    }
}

/// The order of a run list: a column, ascending unless written with a
/// leading `-`. Runs without a value come last either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSort {
    pub column: RunColumn,
    pub descending: bool,
}

impl RunSort {
    /// Newest first, the default.
    pub fn newest() -> RunSort {
        RunSort {
            column: RunColumn::Created,
            descending: true,
        }
    }

    /// `newest`, `primary_metric` (best first), or a column with an optional
    /// leading `-`: `-config.lr`, `eval/accuracy`, `duration`.
    pub fn parse(text: &str) -> Result<RunSort, String> {
        match text.trim() {
            "" | "newest" => Ok(RunSort::newest()),
            "primary_metric" => Ok(RunSort {
                column: RunColumn::Primary,
                descending: true,
            }),
            text => {
                let (descending, column) = match text.strip_prefix('-') {
                    Some(column) => (true, column),
                    None => (false, text),
                };
                Ok(RunSort {
                    column: RunColumn::parse(column)?,
                    descending,
                })
            }
        }
    }

    /// How `?sort=` writes it.
    pub fn param(&self) -> String {
        format!("{}{}", if self.descending { "-" } else { "" }, self.column.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configs_take_flat_scalars_and_name_each_bad_key() {
        let config: BTreeMap<String, Value> = serde_json::from_value(json!({
            "lr": 0.001, "optimizer": "adam", "amp": true, "seed": null, "model.depth": 12,
            "layers": [1, 2], "model": {"depth": 3}, ".x": 1, "": 2,
        }))
        .unwrap();
        let fields: Vec<String> = check_config(&config).into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["config.", "config..x", "config.layers", "config.model"]);
    }

    #[test]
    fn tags_are_short_words() {
        assert!(
            check_tags(
                "tags",
                &["baseline".into(), "lr:1e-3".into(), "ablation/no-aug".into()]
            )
            .is_empty()
        );
        let errors = check_tags("tags", &["has space".into(), String::new(), "x".repeat(65)]);
        assert_eq!(errors.len(), 3);
        assert!(errors[0].message.contains("`has space`"));
    }

    #[test]
    fn filters_read_an_operator_and_a_typed_value() {
        let filter = ConfigFilter::parse("lr", ">0.001").unwrap();
        assert_eq!((filter.op, filter.value), (Comparison::Greater, json!(0.001)));
        let filter = ConfigFilter::parse("optimizer", "adam").unwrap();
        assert_eq!((filter.op, filter.value), (Comparison::Equal, json!("adam")));
        let filter = ConfigFilter::parse("amp", "!=true").unwrap();
        assert_eq!((filter.op, filter.value), (Comparison::NotEqual, json!(true)));
        assert_eq!(
            ConfigFilter::parse("depth", ">=12").unwrap().op,
            Comparison::GreaterOrEqual
        );
        assert!(
            ConfigFilter::parse("optimizer", ">adam")
                .unwrap_err()
                .contains("compare numbers")
        );
    }

    #[test]
    fn columns_and_sorts_read_back_what_they_write() {
        for text in [
            "name",
            "duration",
            "config.lr",
            "eval/accuracy",
            "metric.status",
            "metric.config.x",
        ] {
            assert_eq!(RunColumn::parse(text).unwrap().id(), text);
        }
        assert_eq!(
            RunColumn::parse("metric.loss").unwrap(),
            RunColumn::Metric("loss".into())
        );
        assert!(RunColumn::parse("config.").is_err());
        let sort = RunSort::parse("-config.lr").unwrap();
        assert_eq!(
            (sort.column.clone(), sort.descending),
            (RunColumn::Config("lr".into()), true)
        );
        assert_eq!(sort.param(), "-config.lr");
        assert_eq!(RunSort::parse("newest").unwrap(), RunSort::newest());
        assert_eq!(RunSort::parse("primary_metric").unwrap().param(), "-primary");
    }

    #[test]
    fn conditions_become_query_pairs() {
        assert_eq!(
            parse_condition("config.lr > 1e-3").unwrap(),
            ("config.lr".into(), ">1e-3".into())
        );
        assert_eq!(
            parse_condition("config.opt=adam").unwrap(),
            ("config.opt".into(), "adam".into())
        );
        assert_eq!(parse_condition("config.depth>=12").unwrap().1, ">=12");
        assert_eq!(parse_condition("config.opt != sgd").unwrap().1, "!=sgd");
        assert!(parse_condition("lr > 1").unwrap_err().contains("config keys"));
        assert!(
            parse_condition("config.opt > adam")
                .unwrap_err()
                .contains("compare numbers")
        );
        assert!(parse_condition("config.lr").unwrap_err().contains("KEY OP VALUE"));
    }
}

/// `DELETE /api/v1/runs/{run_id}`: what went with the run.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeletedRun {
    pub run_id: String,
    /// Its job, deleted with it.
    pub job_id: Option<String>,
    pub metric_points: i64,
    pub log_lines: i64,
    pub events: i64,
}

/// What one project keeps on the server (`GET /api/v1/projects/usage`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectUsage {
    pub project: String,
    pub runs: i64,
    pub archived_runs: i64,
    pub metric_points: i64,
    /// Bytes of its stored metric chunks.
    pub metric_bytes: i64,
    /// Output lines the server keeps, and their bytes.
    pub log_lines: i64,
    pub log_bytes: i64,
    /// Texts logged per step, and their bytes.
    pub text_bytes: i64,
}

impl ProjectUsage {
    /// Every byte counted above.
    pub fn total_bytes(&self) -> i64 {
        self.metric_bytes + self.log_bytes + self.text_bytes
    }
}

/// A byte count as people read it: `512 B`, `3.4 KiB`, `1.2 GiB`.
pub fn format_bytes(count: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
