//! A sweep's parameters, read as W&B reads them: a distribution named or
//! inferred (`values` → categorical, `value` → constant, whole `min`/`max`
//! → int_uniform, other `min`/`max` → uniform, `mu`/`sigma` → normal),
//! `log_uniform`'s bounds as exponents and `*_values`' as values, `q`
//! rounding to a multiple (default 1).
//!
//! Every bounded distribution is a range of one number `x` (its internal
//! coordinate, where samplers work) and a map from `x` to the value.

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// Whether a range's internal coordinate is the value or its logarithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    Linear,
    Log,
}

/// What values a parameter takes, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "distribution", rename_all = "snake_case")]
pub enum Distribution {
    Constant {
        value: Value,
    },
    Categorical {
        values: Vec<Value>,
        /// Each value's chance for random search (default: equal).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probabilities: Option<Vec<f64>>,
    },
    /// `x` uniform in `[low, high]`; the value is `x` (linear) or `e^x`
    /// (log), rounded to a multiple of `q` when given, a whole number when
    /// `whole` (int_uniform: `[min - 0.5, max + 0.5]` rounded).
    Range {
        /// W&B's name for it, as the file gave or implied it.
        kind: String,
        low: f64,
        high: f64,
        scale: Scale,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        q: Option<f64>,
        whole: bool,
    },
    /// `x` normal with mean `mu` and deviation `sigma`; the value is `x`
    /// or `e^x` (log), rounded to a multiple of `q` when given.
    Normal {
        kind: String,
        mu: f64,
        sigma: f64,
        scale: Scale,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        q: Option<f64>,
        whole: bool,
    },
}

/// One searched parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameter {
    pub name: String,
    #[serde(flatten)]
    pub distribution: Distribution,
}

impl Distribution {
    /// W&B's name for it.
    pub fn kind(&self) -> &str {
        match self {
            Distribution::Constant { .. } => "constant",
            Distribution::Categorical { .. } => "categorical",
            Distribution::Range { kind, .. } | Distribution::Normal { kind, .. } => kind,
        }
    }

    /// Whether TPE can search it (a list or a finite range).
    pub fn bounded(&self) -> bool {
        !matches!(self, Distribution::Normal { .. })
    }

    /// Every value, in order, where there are finitely many that a grid
    /// can step through: constants, lists, whole and linear `q` ranges.
    pub fn grid_values(&self) -> Option<Vec<Value>> {
        match self {
            Distribution::Constant { value } => Some(vec![value.clone()]),
            Distribution::Categorical { values, .. } => Some(values.clone()),
            Distribution::Range {
                low,
                high,
                scale: Scale::Linear,
                q,
                whole,
                ..
            } if *whole || q.is_some() => {
                let step = q.unwrap_or(1.0);
                let (first, last) = ((low / step).ceil() as i64, (high / step).floor() as i64);
                if last < first || last - first >= i64::from(super::MAX_TRIALS) {
                    return None;
                }
                Some((first..=last).map(|k| number(k as f64 * step, *whole)).collect())
            }
            _ => None,
        }
    }

    /// The value at internal coordinate `x` of a range or normal.
    pub fn value_at(&self, x: f64) -> Value {
        match self {
            Distribution::Range {
                scale,
                q,
                whole,
                low,
                high,
                ..
            } => {
                let x = x.clamp(*low, *high);
                quantise(scaled(x, *scale), *q, *whole)
            }
            Distribution::Normal { scale, q, whole, .. } => quantise(scaled(x, *scale), *q, *whole),
            Distribution::Constant { value } => value.clone(),
            Distribution::Categorical { values, .. } => {
                let i = (x.max(0.0) as usize).min(values.len().saturating_sub(1));
                values[i].clone()
            }
        }
    }

    /// The internal coordinate of `value` in a range (where a sampler that
    /// models the space puts an observed trial), if it is a number.
    pub fn coordinate_of(&self, value: &Value) -> Option<f64> {
        let v = value.as_f64()?;
        match self {
            Distribution::Range {
                scale: Scale::Linear, ..
            } => Some(v),
            Distribution::Range {
                scale: Scale::Log, ..
            } => (v > 0.0).then(|| v.ln()),
            _ => None,
        }
    }
}

fn scaled(x: f64, scale: Scale) -> f64 {
    match scale {
        Scale::Linear => x,
        Scale::Log => x.exp(),
    }
}

/// Rounds to a multiple of `q` (W&B: `round(x / q) · q`), and to a whole
/// number when `whole`.
fn quantise(value: f64, q: Option<f64>, whole: bool) -> Value {
    let value = match q {
        Some(q) => (value / q).round() * q,
        None => value,
    };
    number(value, whole)
}

fn number(value: f64, whole: bool) -> Value {
    if whole {
        Value::Number(Number::from(value.round() as i64))
    } else {
        Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

/// Whether `name` may name a parameter (it is written in `${NAME}` and
/// `--NAME=`).
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && name.len() <= 100
}

const KEYS: [&str; 10] = [
    "value",
    "values",
    "probabilities",
    "distribution",
    "min",
    "max",
    "mu",
    "sigma",
    "q",
    "description",
];

/// Reads one parameter of the file; an error names the key (`.min`, or
/// empty for the parameter as a whole) and what is wrong.
pub fn parameter(name: &str, spec: &Value) -> Result<Parameter, (String, String)> {
    let whole_err = |message: String| (String::new(), message);
    let Value::Object(spec) = spec else {
        return Err(whole_err(
            "must be a mapping such as `{values: [1, 2]}` or `{min: 0.1, max: 1}`".into(),
        ));
    };
    if spec.contains_key("parameters") {
        return Err((
            ".parameters".into(),
            "nested parameters are not supported: name each one at the top, as `outer.inner`".into(),
        ));
    }
    if let Some(key) = spec.keys().find(|key| !KEYS.contains(&key.as_str())) {
        let hint = crate::spec::closest(key, KEYS)
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        return Err((format!(".{key}"), format!("unknown key{hint}")));
    }
    let float = |key: &str| -> Result<Option<f64>, (String, String)> {
        match spec.get(key) {
            None => Ok(None),
            Some(value) => match value.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err((format!(".{key}"), "must be a finite number".into())),
            },
        }
    };
    let is_whole = |key: &str| spec.get(key).is_some_and(|v| v.is_i64() || v.is_u64());
    let kind = match spec.get("distribution") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err((".distribution".into(), "must be a name such as uniform".into())),
        None if spec.contains_key("values") => "categorical".into(),
        None if spec.contains_key("value") => "constant".into(),
        None if spec.contains_key("min") && spec.contains_key("max") => {
            if is_whole("min") && is_whole("max") {
                "int_uniform".into()
            } else {
                "uniform".into()
            }
        }
        None if spec.contains_key("mu") || spec.contains_key("sigma") => "normal".into(),
        None => {
            return Err(whole_err(
                "give `values`, `value`, `min` and `max`, or a distribution".into(),
            ));
        }
    };
    let q = float("q")?;
    if q.is_some_and(|q| q <= 0.0) {
        return Err((".q".into(), "must be more than 0".into()));
    }
    let q_whole = q.is_none_or(|q| q.fract() == 0.0);
    let quantised = kind.starts_with("q_");
    let q = match quantised {
        true => Some(q.unwrap_or(1.0)),
        false if q.is_some() => {
            return Err((".q".into(), format!("is for the q_ distributions, not {kind}")));
        }
        false => None,
    };
    let bounds = || -> Result<(f64, f64), (String, String)> {
        let min = float("min")?.ok_or((".min".to_string(), format!("{kind} needs min")))?;
        let max = float("max")?.ok_or((".max".to_string(), format!("{kind} needs max")))?;
        if min > max {
            return Err((".max".into(), format!("must be at least min ({min})")));
        }
        Ok((min, max))
    };
    let positive_bounds = || -> Result<(f64, f64), (String, String)> {
        let (min, max) = bounds()?;
        if min <= 0.0 {
            return Err((
                ".min".into(),
                format!("{kind} takes values: min must be more than 0 (log_uniform takes exponents)"),
            ));
        }
        Ok((min, max))
    };
    let range = |low: f64, high: f64, scale: Scale, whole: bool| Distribution::Range {
        kind: kind.clone(),
        low,
        high,
        scale,
        q,
        whole,
    };
    let distribution = match kind.as_str() {
        "constant" => Distribution::Constant {
            value: spec
                .get("value")
                .cloned()
                .ok_or((".value".to_string(), "constant needs value".to_string()))?,
        },
        "categorical" => {
            let Some(Value::Array(values)) = spec.get("values") else {
                return Err((".values".into(), "must be a list".into()));
            };
            if values.is_empty() || values.len() > super::MAX_VALUES {
                return Err((
                    ".values".into(),
                    format!("must list 1 to {} values", super::MAX_VALUES),
                ));
            }
            let probabilities = match spec.get("probabilities") {
                None => None,
                Some(Value::Array(p)) => {
                    let p: Option<Vec<f64>> = p.iter().map(Value::as_f64).collect();
                    let p = p
                        .filter(|p| p.len() == values.len() && p.iter().all(|x| x.is_finite() && *x >= 0.0))
                        .ok_or((
                            ".probabilities".to_string(),
                            "must be one number of 0 or more per value".to_string(),
                        ))?;
                    if (p.iter().sum::<f64>() - 1.0).abs() > 1e-6 {
                        return Err((".probabilities".into(), "must add up to 1".into()));
                    }
                    Some(p)
                }
                Some(_) => return Err((".probabilities".into(), "must be a list".into())),
            };
            Distribution::Categorical {
                values: values.clone(),
                probabilities,
            }
        }
        "int_uniform" => {
            let (min, max) = bounds()?;
            if !(is_whole("min") && is_whole("max")) {
                return Err((".min".into(), "int_uniform takes whole numbers".into()));
            }
            range(min - 0.5, max + 0.5, Scale::Linear, true)
        }
        "uniform" | "q_uniform" => {
            let (min, max) = bounds()?;
            let whole = quantised && q_whole && min.fract() == 0.0 && max.fract() == 0.0;
            range(min, max, Scale::Linear, whole)
        }
        // Bounds are exponents of e.
        "log_uniform" | "q_log_uniform" => {
            let (min, max) = bounds()?;
            range(min, max, Scale::Log, quantised && q_whole)
        }
        "log_uniform_values" | "q_log_uniform_values" => {
            let (min, max) = positive_bounds()?;
            let whole = quantised && q_whole && min.fract() == 0.0 && max.fract() == 0.0;
            range(min.ln(), max.ln(), Scale::Log, whole)
        }
        // log(1/x) uniform in [min, max]: x = e^-u, the same as log-uniform
        // between e^-max and e^-min.
        "inv_log_uniform" => {
            let (min, max) = bounds()?;
            range(-max, -min, Scale::Log, false)
        }
        "inv_log_uniform_values" => {
            let (min, max) = positive_bounds()?;
            range(min.ln(), max.ln(), Scale::Log, false)
        }
        "normal" | "q_normal" | "log_normal" | "q_log_normal" => {
            let mu = float("mu")?.unwrap_or(0.0);
            let sigma = float("sigma")?.unwrap_or(1.0);
            if sigma <= 0.0 {
                return Err((".sigma".into(), "must be more than 0".into()));
            }
            let scale = if kind.contains("log") {
                Scale::Log
            } else {
                Scale::Linear
            };
            Distribution::Normal {
                kind: kind.clone(),
                mu,
                sigma,
                scale,
                q,
                whole: quantised && q_whole,
            }
        }
        "beta" | "q_beta" => {
            return Err((
                ".distribution".into(),
                "beta is not supported: use uniform, or values".into(),
            ));
        }
        other => {
            let names = [
                "constant",
                "categorical",
                "int_uniform",
                "uniform",
                "q_uniform",
                "log_uniform",
                "log_uniform_values",
                "q_log_uniform",
                "q_log_uniform_values",
                "inv_log_uniform",
                "inv_log_uniform_values",
                "normal",
                "q_normal",
                "log_normal",
                "q_log_normal",
            ];
            let hint = crate::spec::closest(other, names)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err((
                ".distribution".into(),
                format!("`{other}` is not a distribution{hint}"),
            ));
        }
    };
    Ok(Parameter {
        name: name.to_string(),
        distribution,
    })
}
