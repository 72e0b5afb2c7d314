//! Metric points, batches, queries and run summaries.
//!
//! JSON has no NaN or infinities: values travel as numbers when finite and
//! as the strings `"NaN"`, `"Infinity"` and `"-Infinity"` otherwise, in every
//! request and response. Nothing is ever turned into null or zero.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// A metric value that keeps NaN, +∞ and −∞.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Value(pub f64);

impl Value {
    pub fn is_finite(self) -> bool {
        self.0.is_finite()
    }

    /// `"NaN"`, `"Infinity"`, `"-Infinity"`, or the number as text.
    pub fn describe(self) -> String {
        match self.0 {
            v if v.is_nan() => "NaN".into(),
            v if v == f64::INFINITY => "Infinity".into(),
            v if v == f64::NEG_INFINITY => "-Infinity".into(),
            v => v.to_string(),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() {
            serializer.serialize_f64(self.0)
        } else {
            serializer.serialize_str(&self.describe())
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ValueVisitor;
        impl Visitor<'_> for ValueVisitor {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#"a number or one of "NaN", "Infinity", "-Infinity""#)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
                Ok(Value(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
                Ok(Value(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
                Ok(Value(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
                match v {
                    "NaN" => Ok(Value(f64::NAN)),
                    "Infinity" => Ok(Value(f64::INFINITY)),
                    "-Infinity" => Ok(Value(f64::NEG_INFINITY)),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
        }
        deserializer.deserialize_any(ValueVisitor)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Value {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Number))
            .item(ObjectBuilder::new().schema_type(Type::String).enum_values(Some([
                "NaN",
                "Infinity",
                "-Infinity",
            ])))
            .description(Some("A number, or \"NaN\", \"Infinity\", \"-Infinity\""))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Value {}

/// One point as clients send it.
/// The longest metric key, in bytes.
pub const MAX_KEY_LEN: usize = 256;

/// Whether `key` can name a metric: 1-[`MAX_KEY_LEN`] bytes, no control
/// characters. The server refuses a batch with any other.
pub fn key_is_valid(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && !key.chars().any(char::is_control)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// e.g. `train/loss`; namespaces (`train/`, `eval/`, …) are kept as written.
    pub key: String,
    pub step: i64,
    /// Seconds since the epoch.
    pub wall_time: f64,
    pub value: Value,
}

/// `POST /api/v1/runs/{run_id}/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Chosen by the client; a batch id seen before for the run adds nothing.
    pub batch_id: String,
    #[serde(default)]
    pub points: Vec<Point>,
    /// Texts logged at a step (generated samples, prompts), stored with the
    /// points under the same batch id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub texts: Vec<Text>,
}

/// A text logged at a step: a generated sample, a prompt, a remark. Shown in a
/// table on the run page, newest step first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Text {
    /// e.g. `samples/generation`; the same rules as a metric key.
    pub key: String,
    pub step: i64,
    /// Seconds since the epoch.
    pub wall_time: f64,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IngestResult {
    /// Points and texts stored by this request (0 for a duplicate).
    pub accepted: u64,
    /// The batch id had been acknowledged before.
    pub duplicate: bool,
}

/// `GET /api/v1/runs/{run_id}/texts`: a page of a run's texts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TextPage {
    pub items: Vec<Text>,
    /// Pass as `before` to get the next page; `null` on the last page.
    pub next_before: Option<i64>,
    /// Every key the run logged texts under, sorted.
    pub keys: Vec<String>,
}

/// A point in a query answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeriesPoint {
    pub step: i64,
    pub wall_time: f64,
    pub value: Value,
}

/// Points aggregated over a range: spikes (min, max) and non-finite values survive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Bucket {
    pub step_from: i64,
    pub step_to: i64,
    pub time_from: f64,
    pub time_to: f64,
    /// Of the finite values; `null` when all were non-finite.
    pub min: Option<Value>,
    pub max: Option<Value>,
    /// The value at the highest step (may be non-finite).
    pub last: Value,
    pub count: u64,
    pub non_finite: u64,
}

/// `GET /api/v1/runs/{run_id}/metrics`: raw points when the range holds at
/// most `max_points`, else at most `max_points` buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Series {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<SeriesPoint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<Bucket>>,
}

/// `GET /api/v1/runs/{run_id}/metrics?format=columns`: the same answer as
/// [`Series`], one array per field, for clients that read many points
/// (a notebook, a script) and would rather not parse an object per point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeriesColumns {
    pub key: String,
    /// Raw points, when the range holds at most `max_points`: the i-th point
    /// is `steps[i]`, `times[i]` (seconds since the epoch), `values[i]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<Value>>,
    /// Else the buckets, one array per [`Bucket`] field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<BucketColumns>,
}

/// Buckets as columns: the i-th bucket is the i-th element of each.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BucketColumns {
    pub step_from: Vec<i64>,
    pub step_to: Vec<i64>,
    pub time_from: Vec<f64>,
    pub time_to: Vec<f64>,
    pub min: Vec<Option<Value>>,
    pub max: Vec<Option<Value>>,
    pub last: Vec<Value>,
    pub count: Vec<u64>,
    pub non_finite: Vec<u64>,
}

impl From<Series> for SeriesColumns {
    fn from(series: Series) -> Self {
        let points = series.points.map(|points| {
            let steps = points.iter().map(|p| p.step).collect();
            let times = points.iter().map(|p| p.wall_time).collect();
            let values = points.iter().map(|p| p.value).collect();
            (steps, times, values)
        });
        let buckets = series.buckets.map(|buckets| {
            let mut columns = BucketColumns::default();
            for b in buckets {
                columns.step_from.push(b.step_from);
                columns.step_to.push(b.step_to);
                columns.time_from.push(b.time_from);
                columns.time_to.push(b.time_to);
                columns.min.push(b.min);
                columns.max.push(b.max);
                columns.last.push(b.last);
                columns.count.push(b.count);
                columns.non_finite.push(b.non_finite);
            }
            columns
        });
        let (steps, times, values) = match points {
            Some((steps, times, values)) => (Some(steps), Some(times), Some(values)),
            None => (None, None, None),
        };
        SeriesColumns {
            key: series.key,
            steps,
            times,
            values,
            buckets,
        }
    }
}

/// A metric query's JSON answer: [`Series`] (one object per point, the
/// default) or, with `format=columns`, [`SeriesColumns`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SeriesAnswer {
    Points(Series),
    Columns(Box<SeriesColumns>),
}

/// `anyOf`, not `oneOf`: an answer with no points, `{"key": …, "points":
/// []}`, fits both shapes.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SeriesAnswer {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::ToSchema;
        use utoipa::openapi::Ref;
        use utoipa::openapi::schema::AnyOfBuilder;
        AnyOfBuilder::new()
            .item(Ref::from_schema_name(Series::name()))
            .item(Ref::from_schema_name(SeriesColumns::name()))
            .description(Some("Series, or SeriesColumns with format=columns"))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SeriesAnswer {
    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
        use utoipa::{PartialSchema, ToSchema};
        schemas.push((Series::name().into(), Series::schema()));
        <Series as ToSchema>::schemas(schemas);
        schemas.push((SeriesColumns::name().into(), SeriesColumns::schema()));
        <SeriesColumns as ToSchema>::schemas(schemas);
    }
}

/// The latest point of a metric in a run summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Latest {
    pub step: i64,
    pub value: Value,
    pub non_finite: bool,
    /// Points stored for the key, and how many were non-finite.
    pub count: u64,
    pub non_finite_count: u64,
}

/// A run: what a job (or a script using the SDK) recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Run {
    pub id: String,
    pub job_id: Option<String>,
    pub project: String,
    pub name: String,
    /// The job's status; `RUNNING` for an SDK run that has not finished, then `FINISHED`.
    pub status: String,
    pub latest: BTreeMap<String, Latest>,
    /// The metric that ranks this run: its own, else its project's default.
    pub primary_metric: Option<PrimaryMetric>,
    pub created_at: String,
    /// Hyperparameters as flat keys (`model.depth`): numbers, strings, booleans, null.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: BTreeMap<String, serde_json::Value>,
    /// Sorted; the job's tags for a job's run.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub notes: String,
    /// Seconds from its first start (a job's first attempt, an SDK run's
    /// creation) to its end, or to now while it goes; null before it starts.
    #[serde(default)]
    pub duration_s: Option<i64>,
    /// When it was archived (with its job): out of the default lists, kept whole.
    #[serde(default)]
    pub archived_at: Option<String>,
    /// Where metrics meant for it went instead (its job's SDK spooled them,
    /// or the server refused them): the newest `METRICS_SPOOLED` and
    /// `METRICS_REFUSED` events, newest first. Only in the answer for one run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_events: Vec<crate::event::Event>,
}

/// Whether a larger or a smaller value of a metric is better (a run's
/// primary metric, a sweep's; `maximize` and `minimize` are W&B's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    #[serde(alias = "maximize")]
    Max,
    #[serde(alias = "minimize")]
    Min,
}

names!("goal", Goal { Max => "max", Min => "min" });

/// `POST /api/v1/runs/{id}/primary-metric` and `POST /api/v1/projects/{name}/primary-metric`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetPrimaryMetric {
    /// A metric key such as `eval/accuracy`; it need not have points yet.
    pub key: String,
    pub goal: Goal,
}

/// A run's primary metric and its best value so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PrimaryMetric {
    pub key: String,
    pub goal: Goal,
    /// `run` when set on the run, `project` when it is the project's default.
    pub set_on: String,
    /// The best finite value and the first step that reached it; null until one exists.
    pub best: Option<BestValue>,
    /// The checkpoint whose step has the best value (run summaries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_checkpoint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BestValue {
    pub step: i64,
    pub value: Value,
}

/// A checkpoint file a run wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Checkpoint {
    pub id: String,
    pub run_id: String,
    /// As the agent host sees it.
    pub path: String,
    pub size: u64,
    pub modified_at: String,
    /// The training step, when the file name tells it.
    pub step: Option<i64>,
    /// Other runs wrote the same path: its content cannot be trusted for evaluation.
    pub shared_with: Vec<String>,
    /// The run's primary metric at this checkpoint's step (the point at or
    /// just before it), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_value: Option<Value>,
    /// The best checkpoint by the run's primary metric.
    #[serde(default)]
    pub best: bool,
}

/// `POST /api/v1/runs`: a run made by the SDK outside the platform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewRun {
    #[serde(default = "default_project")]
    pub project: String,
    pub name: String,
    /// Flat config keys, as `POST /runs/{id}/config` takes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

fn default_project() -> String {
    "default".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_round_trip_as_strings() {
        let values = [
            Value(0.5),
            Value(f64::NAN),
            Value(f64::INFINITY),
            Value(f64::NEG_INFINITY),
            Value(-3.0),
        ];
        let json = serde_json::to_string(&values).unwrap();
        assert_eq!(json, r#"[0.5,"NaN","Infinity","-Infinity",-3.0]"#);
        let back: Vec<Value> = serde_json::from_str(&json).unwrap();
        assert!(back[1].0.is_nan());
        assert_eq!(back[2].0, f64::INFINITY);
        assert_eq!(back[3].0, f64::NEG_INFINITY);
        assert_eq!(back[4].0, -3.0);
    }

    #[test]
    fn other_strings_and_bare_nan_are_refused() {
        assert!(serde_json::from_str::<Value>(r#""nan""#).is_err());
        assert!(serde_json::from_str::<Value>("NaN").is_err());
        assert!(serde_json::from_str::<Value>("null").is_err());
    }
}
