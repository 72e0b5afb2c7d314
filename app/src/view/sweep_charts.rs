//! A sweep's three charts, drawn as SVG from its trials: the best value
//! so far by trial, parallel coordinates (an axis per parameter and one for
//! the metric, a line per trial), and each parameter against the metric.
//! Stopped trials are drawn grey, the best trial in the accent colour.
//! Text from users (categorical values) is escaped.

use gpuplane_api::metric::Goal;
use gpuplane_api::sweep::{Distribution, Parameter, Scale, Trial};
use serde_json::Value;
use std::fmt::Write;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 240.0;
const PAD: f64 = 36.0;
const BEST: &str = "#c2410c";
const LINE: &str = "#2563eb";
const PRUNED: &str = "#9ca3af";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn open(height: f64, label: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{}" font-size="11" font-family="sans-serif">"#,
        escape(label)
    )
}

/// Maps `v` from `[lo, hi]` onto `[a, b]` (the middle when the range is empty).
fn scale(v: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    if hi > lo {
        a + (v - lo) / (hi - lo) * (b - a)
    } else {
        (a + b) / 2.0
    }
}

fn short(v: f64) -> String {
    if v != 0.0 && (v.abs() >= 1e4 || v.abs() < 1e-3) {
        format!("{v:.2e}")
    } else {
        format!("{}", (v * 1000.0).round() / 1000.0)
    }
}

fn pruned(trial: &Trial) -> bool {
    trial.failure_reason.as_deref() == Some("SWEEP_PRUNED")
}

/// The best finished value after each trial, by trial number.
pub fn best_so_far(trials: &[Trial], goal: Goal) -> Option<String> {
    let values: Vec<(u64, f64)> = trials
        .iter()
        .filter_map(|t| Some((t.number, t.value.filter(|v| v.is_finite())?)))
        .collect();
    if values.is_empty() {
        return None;
    }
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, v)| {
            (lo.min(*v), hi.max(*v))
        });
    let last = trials.iter().map(|t| t.number).max().unwrap_or(0) as f64;
    let x = |n: f64| scale(n, 0.0, last.max(1.0), PAD, WIDTH - 10.0);
    let y = |v: f64| scale(v, lo, hi, HEIGHT - PAD, 10.0);
    let mut svg = open(HEIGHT, "best value so far by trial");
    for t in trials {
        let Some(v) = t.value.filter(|v| v.is_finite()) else {
            continue;
        };
        let colour = if pruned(t) { PRUNED } else { LINE };
        let _ = write!(
            svg,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}" opacity="0.6"><title>trial {}: {}</title></circle>"#,
            x(t.number as f64),
            y(v),
            t.number,
            short(v)
        );
    }
    let mut best: Option<f64> = None;
    let mut points = Vec::new();
    for t in trials.iter().filter(|t| t.state == "SUCCEEDED") {
        let Some(v) = t.value.filter(|v| v.is_finite()) else {
            continue;
        };
        let better = best.is_none_or(|b| match goal {
            Goal::Min => v < b,
            Goal::Max => v > b,
        });
        if better {
            best = Some(v);
        }
        points.push(format!("{:.1},{:.1}", x(t.number as f64), y(best.unwrap_or(v))));
    }
    if !points.is_empty() {
        let _ = write!(
            svg,
            r#"<polyline data-line="best" fill="none" stroke="{BEST}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{PAD}" y="{}">trial</text><text x="4" y="14">{}</text><text x="4" y="{}">{}</text></svg>"#,
        HEIGHT - 8.0,
        short(hi),
        HEIGHT - PAD,
        short(lo)
    );
    Some(svg)
}

/// Where a trial's value of `parameter` sits on its axis, from 0 to 1.
fn position(parameter: &Parameter, value: &Value, seen: &[f64]) -> Option<f64> {
    match &parameter.distribution {
        Distribution::Categorical { values, .. } => {
            let i = values.iter().position(|v| v == value)?;
            Some(if values.len() > 1 {
                i as f64 / (values.len() - 1) as f64
            } else {
                0.5
            })
        }
        Distribution::Constant { .. } => Some(0.5),
        d => {
            let x = axis_value(d, value)?;
            let (lo, hi) = seen
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                    (lo.min(*v), hi.max(*v))
                });
            Some(scale(x, lo, hi, 0.0, 1.0))
        }
    }
}

/// A number's place on a numeric axis: its logarithm on a log scale.
fn axis_value(distribution: &Distribution, value: &Value) -> Option<f64> {
    let v = value.as_f64()?;
    match distribution {
        Distribution::Range {
            scale: Scale::Log, ..
        }
        | Distribution::Normal {
            scale: Scale::Log, ..
        } => (v > 0.0).then(|| v.ln()),
        _ => Some(v),
    }
}

/// An axis per parameter and one for the metric; a line per trial with a value.
pub fn parallel_coordinates(
    trials: &[Trial],
    parameters: &[Parameter],
    metric: &str,
    best: Option<u64>,
) -> Option<String> {
    let valued: Vec<&Trial> = trials
        .iter()
        .filter(|t| t.value.is_some_and(f64::is_finite))
        .collect();
    if valued.is_empty() || parameters.is_empty() {
        return None;
    }
    let seen: Vec<Vec<f64>> = parameters
        .iter()
        .map(|p| {
            valued
                .iter()
                .filter_map(|t| axis_value(&p.distribution, t.params.get(&p.name)?))
                .collect()
        })
        .collect();
    let values: Vec<f64> = valued.iter().filter_map(|t| t.value).collect();
    let axes = parameters.len() + 1;
    let x = |i: usize| scale(i as f64, 0.0, (axes - 1).max(1) as f64, PAD, WIDTH - PAD);
    let y = |p: f64| scale(p, 0.0, 1.0, HEIGHT - PAD, 20.0);
    let mut svg = open(HEIGHT, "parallel coordinates of the trials");
    for (i, name) in parameters
        .iter()
        .map(|p| p.name.as_str())
        .chain([metric])
        .enumerate()
    {
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="20" y2="{1}" stroke="#6b7280"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
            x(i),
            HEIGHT - PAD,
            HEIGHT - 12.0,
            escape(name)
        );
    }
    for t in &valued {
        let mut points = Vec::new();
        for (i, p) in parameters.iter().enumerate() {
            let Some(at) = t.params.get(&p.name).and_then(|v| position(p, v, &seen[i])) else {
                continue;
            };
            points.push(format!("{:.1},{:.1}", x(i), y(at)));
        }
        let metric_at = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(*v), hi.max(*v))
            });
        points.push(format!(
            "{:.1},{:.1}",
            x(axes - 1),
            y(scale(t.value.unwrap_or(0.0), metric_at.0, metric_at.1, 0.0, 1.0))
        ));
        let (colour, width) = if Some(t.number) == best {
            (BEST, 2.5)
        } else if pruned(t) {
            (PRUNED, 1.0)
        } else {
            (LINE, 1.0)
        };
        let _ = write!(
            svg,
            r#"<polyline data-trial="{}" fill="none" stroke="{colour}" stroke-width="{width}" opacity="0.8" points="{}"><title>trial {}</title></polyline>"#,
            t.number,
            points.join(" "),
            t.number
        );
    }
    svg.push_str("</svg>");
    Some(svg)
}

/// One small scatter per parameter: its value (across) against the metric (up).
pub fn parameter_scatters(trials: &[Trial], parameters: &[Parameter]) -> Vec<(String, String)> {
    let height = 160.0;
    let valued: Vec<&Trial> = trials
        .iter()
        .filter(|t| t.value.is_some_and(f64::is_finite))
        .collect();
    let values: Vec<f64> = valued.iter().filter_map(|t| t.value).collect();
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        });
    let mut charts = Vec::new();
    for p in parameters
        .iter()
        .filter(|p| !matches!(p.distribution, Distribution::Constant { .. }))
    {
        let seen: Vec<f64> = valued
            .iter()
            .filter_map(|t| axis_value(&p.distribution, t.params.get(&p.name)?))
            .collect();
        let mut svg = open(height, &format!("{} against the metric", p.name));
        for t in &valued {
            let Some(at) = t.params.get(&p.name).and_then(|v| position(p, v, &seen)) else {
                continue;
            };
            let v = t.value.unwrap_or(0.0);
            let colour = if pruned(t) { PRUNED } else { LINE };
            let _ = write!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}" opacity="0.7"><title>trial {}: {}</title></circle>"#,
                scale(at, 0.0, 1.0, PAD, WIDTH - 10.0),
                scale(v, lo, hi, height - 24.0, 10.0),
                t.number,
                short(v)
            );
        }
        let scale_note = match p.distribution {
            Distribution::Range {
                scale: Scale::Log, ..
            } => " (log)",
            _ => "",
        };
        let _ = write!(
            svg,
            r#"<text x="{PAD}" y="{}">{}{scale_note}</text></svg>"#,
            height - 6.0,
            escape(&p.name)
        );
        charts.push((p.name.clone(), svg));
    }
    charts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trial(number: u64, lr: f64, value: f64, state: &str) -> Trial {
        Trial {
            number,
            job_id: format!("job_{number}"),
            run_id: format!("run_{number}"),
            params: [
                ("lr".to_string(), json!(lr)),
                ("opt".to_string(), json!("<adam>")),
            ]
            .into(),
            state: state.into(),
            failure_reason: (state == "CANCELLED").then(|| "SWEEP_PRUNED".to_string()),
            value: Some(value),
            step: Some(10),
            rungs: vec![],
        }
    }

    fn parameters() -> Vec<Parameter> {
        let lr = gpuplane_api::sweep::Parameter {
            name: "lr".into(),
            distribution: Distribution::Range {
                kind: "log_uniform_values".into(),
                low: -9.0,
                high: 0.0,
                scale: Scale::Log,
                q: None,
                whole: false,
            },
        };
        let opt = gpuplane_api::sweep::Parameter {
            name: "opt".into(),
            distribution: Distribution::Categorical {
                values: vec![json!("sgd"), json!("<adam>")],
                probabilities: None,
            },
        };
        vec![lr, opt]
    }

    #[test]
    fn the_best_line_only_improves_and_user_text_is_escaped() {
        let trials = [
            trial(0, 0.1, 3.0, "SUCCEEDED"),
            trial(1, 0.01, 1.0, "SUCCEEDED"),
            trial(2, 0.5, 2.0, "SUCCEEDED"),
            trial(3, 0.9, 9.0, "CANCELLED"),
        ];
        let svg = best_so_far(&trials, Goal::Min).unwrap();
        let line = svg.split(r#"data-line="best""#).nth(1).unwrap();
        let points: Vec<f64> = line
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .split(' ')
            .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
            .collect();
        // y grows downwards: the best so far never rises on the page.
        assert_eq!(points.len(), 3);
        assert!(points.windows(2).all(|w| w[1] >= w[0]), "{points:?}");
        let parallel = parallel_coordinates(&trials, &parameters(), "loss", Some(1)).unwrap();
        assert!(
            !parallel.contains("<adam>"),
            "categorical text reaches the page escaped"
        );
        assert_eq!(parallel.matches("<polyline").count(), 4);
        assert!(parallel.contains(&format!(r#"data-trial="1" fill="none" stroke="{BEST}""#)));
        assert!(parallel.contains(&format!(r#"data-trial="3" fill="none" stroke="{PRUNED}""#)));
        let scatters = parameter_scatters(&trials, &parameters());
        assert_eq!(
            scatters.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["lr", "opt"]
        );
        assert!(scatters[0].1.contains("lr (log)"));
    }
}
