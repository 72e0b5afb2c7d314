//! What a chart draws, before any drawing: the samples of each series
//! (points, or buckets with their range), smoothed when asked, the
//! stretches of non-finite values and their labels, the line segments
//! between them, and the axes' bounds.

use crate::metrics::Axis;
use gpuplane_api::metric::Series;

/// A position on the chart: the value at the end of a point or bucket, and
/// the bucket's finite range when downsampled.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub(super) x: f64,
    /// Where the bucket starts (`x` for a point).
    pub(super) x_from: f64,
    pub(super) y: f64,
    pub(super) range: Option<(f64, f64)>,
    /// Non-finite values here: the one value's name (a point, or a bucket
    /// with one), or a count.
    pub(super) non_finite: Option<String>,
    pub(super) non_finite_count: u64,
}

fn value_name(value: f64) -> &'static str {
    if value.is_nan() {
        "NaN"
    } else if value > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

pub(super) fn samples(series: &Series, axis: Axis) -> Vec<Sample> {
    let mut out = Vec::new();
    for point in series.points.iter().flatten() {
        let value = point.value.0;
        let x = match axis {
            Axis::Step => point.step as f64,
            Axis::Time => point.wall_time,
        };
        out.push(Sample {
            x,
            x_from: x,
            y: value,
            range: None,
            non_finite: (!value.is_finite()).then(|| value_name(value).to_string()),
            non_finite_count: u64::from(!value.is_finite()),
        });
    }
    for bucket in series.buckets.iter().flatten() {
        let last = bucket.last.0;
        let non_finite = match bucket.non_finite {
            0 => None,
            1 if !last.is_finite() => Some(value_name(last).to_string()),
            n => Some(format!("{n} non-finite")),
        };
        let (x_from, x) = match axis {
            Axis::Step => (bucket.step_from as f64, bucket.step_to as f64),
            Axis::Time => (bucket.time_from, bucket.time_to),
        };
        out.push(Sample {
            x,
            x_from,
            y: last,
            range: bucket.min.zip(bucket.max).map(|(lo, hi)| (lo.0, hi.0)),
            non_finite,
            non_finite_count: bucket.non_finite,
        });
    }
    out
}

/// TensorBoard's smoothing: a debiased exponential moving average over the
/// finite values; non-finite values stay where they are and do not enter it.
pub(super) fn smooth(samples: &[Sample], weight: f64) -> Vec<f64> {
    let mut average = 0.0;
    let mut seen = 0;
    samples
        .iter()
        .map(|sample| {
            if !sample.y.is_finite() {
                return sample.y;
            }
            seen += 1;
            average = average * weight + (1.0 - weight) * sample.y;
            average / (1.0 - weight.powi(seen))
        })
        .collect()
}

/// Runs of consecutive samples holding non-finite values.
pub(super) fn non_finite_stretches(samples: &[Sample]) -> Vec<&[Sample]> {
    let mut stretches = Vec::new();
    let mut start = None;
    for (index, sample) in samples.iter().enumerate() {
        match (sample.non_finite_count > 0, start) {
            (true, None) => start = Some(index),
            (false, Some(from)) => {
                stretches.push(&samples[from..index]);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(from) = start {
        stretches.push(&samples[from..]);
    }
    stretches
}

/// What a stretch of non-finite values is labelled: `NaN at step 20` for
/// one value, else its count and where it starts: the exact first step when
/// the series' first non-finite value falls in it, else its span of steps.
pub(super) fn stretch_label(stretch: &[Sample], axis: Axis, first_non_finite_step: Option<i64>) -> String {
    let total: u64 = stretch.iter().map(|s| s.non_finite_count).sum();
    let (first, last) = (&stretch[0], &stretch[stretch.len() - 1]);
    let single = stretch.len() == 1 && total == 1;
    let name = first.non_finite.clone().unwrap_or_default();
    match axis {
        Axis::Time if single => name,
        Axis::Time => format!("{total} non-finite"),
        Axis::Step if single && first.x_from == first.x => format!("{name} at step {}", first.x),
        Axis::Step => {
            let exact = first_non_finite_step
                .map(|step| step as f64)
                .filter(|step| (first.x_from..=last.x).contains(step));
            let what = if single {
                name
            } else {
                format!("{total} non-finite")
            };
            match exact {
                Some(step) if total == 1 => format!("{what} at step {step}"),
                Some(step) => format!("{what} from step {step}"),
                None => format!("{what} in steps {}–{}", first.x_from, last.x),
            }
        }
    }
}

/// Runs of consecutive finite values: a non-finite value breaks the line.
pub(super) fn segments(xs: impl Iterator<Item = (f64, f64)>) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (x, y) in xs {
        if y.is_finite() {
            out.last_mut().expect("never empty").push((x, y));
        } else if !out.last().expect("never empty").is_empty() {
            out.push(Vec::new());
        }
    }
    out.retain(|segment| !segment.is_empty());
    out
}

/// Outlines of the min–max band of consecutive buckets (upper edge, then the
/// lower edge back): one polygon per run of buckets with a finite range.
pub(super) fn bands(samples: &[Sample]) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut run: Vec<(f64, f64, f64)> = Vec::new();
    let mut close = |run: &mut Vec<(f64, f64, f64)>| {
        if run.len() > 1 {
            let upper = run.iter().map(|&(x, _, hi)| (x, hi));
            let lower = run.iter().rev().map(|&(x, lo, _)| (x, lo));
            out.push(upper.chain(lower).collect());
        }
        run.clear();
    };
    for sample in samples {
        match sample.range {
            Some((lo, hi)) => run.push((sample.x, lo, hi)),
            None => close(&mut run),
        }
    }
    close(&mut run);
    out
}

/// The x range, the y range of finite values, each widened when flat.
pub(super) fn bounds(lines: &[Vec<Sample>]) -> ((f64, f64), (f64, f64)) {
    let mut x = (f64::INFINITY, f64::NEG_INFINITY);
    let mut y = (f64::INFINITY, f64::NEG_INFINITY);
    for sample in lines.iter().flatten() {
        x = (x.0.min(sample.x), x.1.max(sample.x));
        let (lo, hi) = sample.range.unwrap_or((sample.y, sample.y));
        for value in [lo, hi, sample.y] {
            if value.is_finite() {
                y = (y.0.min(value), y.1.max(value));
            }
        }
    }
    let x = if x.0.is_finite() && x.1 > x.0 { x } else { widen(x) };
    (x, widen(y))
}

/// A range with a margin of 5 %; a flat one widened around its value, an
/// empty one (infinite bounds) made `0..1`.
fn widen((lo, hi): (f64, f64)) -> (f64, f64) {
    if !lo.is_finite() {
        (0.0, 1.0)
    } else if hi - lo < f64::EPSILON * lo.abs().max(1.0) {
        let pad = (lo.abs() * 0.1).max(0.5);
        (lo - pad, hi + pad)
    } else {
        let pad = (hi - lo) * 0.05;
        (lo - pad, hi + pad)
    }
}

/// The smallest and largest of some values, widened.
pub(super) fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    widen(values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    }))
}
