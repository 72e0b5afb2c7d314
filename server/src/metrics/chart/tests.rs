//! Charts drawn to SVG and PNG: scales, ranges, marks, non-finite values, fonts.

use super::*;
use gpuplane_api::metric::{SeriesPoint, Value};

fn points(values: &[f64]) -> Series {
    Series {
        key: "train/loss".into(),
        points: Some(
            values
                .iter()
                .enumerate()
                .map(|(step, &value)| SeriesPoint {
                    step: step as i64,
                    wall_time: 1_000.0 + step as f64,
                    value: Value(value),
                })
                .collect(),
        ),
        buckets: None,
    }
}

fn options() -> ChartOptions {
    ChartOptions {
        title: "train/loss".into(),
        axis: Axis::Step,
        smoothing: 0.0,
        y_log: false,
        y_min: None,
        y_max: None,
        width: 640,
        height: 320,
        marks: Vec::new(),
    }
}

fn line(label: &str, series: Series) -> Line {
    Line {
        label: label.into(),
        series,
        first_non_finite_step: None,
    }
}

/// The texts of an SVG's `<text>` elements.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|rest| {
            let body = &rest[rest.find('>')? + 1..rest.find("</text>")?];
            Some(body.trim().to_string())
        })
        .collect()
}

#[test]
fn a_log_scale_spans_decades_and_leaves_out_what_it_cannot_show() {
    let series = points(&[500.0, 40.0, 3.0, 0.2, 0.01, 0.0001, 0.0]);
    let options = ChartOptions {
        y_log: true,
        ..options()
    };
    let svg = svg(&[line("run", series)], &options);
    let texts = texts(&svg);
    assert!(
        texts.contains(&"train/loss (log scale; 1 at or below 0 not shown)".to_string()),
        "{texts:?}"
    );
    for tick in ["1e-4", "0.01", "1", "100"] {
        assert!(texts.contains(&tick.to_string()), "{tick} in {texts:?}");
    }
}

#[test]
fn marks_inside_the_range_are_drawn_with_their_labels_and_those_outside_are_not() {
    let options = ChartOptions {
        marks: vec![
            Mark {
                x: 3.0,
                label: "attempt 2".into(),
            },
            Mark {
                x: 60.0,
                label: "attempt 3".into(),
            },
        ],
        ..options()
    };
    let svg = svg(&[line("run", points(&[1.0, 0.8, 0.6, 0.5, 0.4, 0.3]))], &options);
    let texts = texts(&svg);
    assert!(texts.contains(&"attempt 2".to_string()), "{texts:?}");
    assert!(
        !texts.contains(&"attempt 3".to_string()),
        "step 60 is past the plot: {texts:?}"
    );
}

#[test]
fn a_chosen_y_range_leaves_out_values_beyond_it() {
    let options = ChartOptions {
        y_max: Some(0.85),
        ..options()
    };
    let svg = svg(&[line("run", points(&[1.0, 0.9, 0.8, 0.7, 0.75]))], &options);
    let drawn = r##"stroke="#2F6FED" stroke-width="2""##;
    assert_eq!(svg.matches(drawn).count(), 1, "only 0.8, 0.7, 0.75: {svg}");
    let y_ticks: Vec<f64> = texts(&svg)
        .iter()
        .filter(|t| t.contains('.'))
        .filter_map(|t| t.parse().ok())
        .collect();
    assert!(
        !y_ticks.is_empty() && y_ticks.iter().all(|y| *y <= 0.85),
        "{y_ticks:?}"
    );
}

#[test]
fn a_stretch_of_non_finite_buckets_is_labelled_once_with_its_total_and_first_step() {
    let bucket = |from: i64, to: i64, non_finite: u64| gpuplane_api::metric::Bucket {
        step_from: from,
        step_to: to,
        time_from: from as f64,
        time_to: to as f64,
        min: Some(Value(0.5)),
        max: Some(Value(0.6)),
        last: Value(if non_finite > 0 { f64::NAN } else { 0.5 }),
        count: (to - from + 1) as u64,
        non_finite,
    };
    // 8-step buckets; NaN/+Inf values from step 2901: 3 in the bucket
    // 2896–2903, then 8 in each of the next 11.
    let mut all: Vec<_> = (0..400).map(|b| bucket(b * 8, b * 8 + 7, 0)).collect();
    all[362] = bucket(2896, 2903, 3);
    for made in &mut all[363..374] {
        *made = bucket(made.step_from, made.step_to, 8);
    }
    let total: u64 = all.iter().map(|b| b.non_finite).sum();
    assert_eq!(total, 3 + 11 * 8);
    let series = Series {
        key: "train/loss".into(),
        points: None,
        buckets: Some(all),
    };
    let svg = svg(
        &[Line {
            label: "run".into(),
            series,
            first_non_finite_step: Some(2901),
        }],
        &options(),
    );
    let labels: Vec<String> = texts(&svg)
        .into_iter()
        .filter(|t| t.contains("non-finite"))
        .collect();
    assert_eq!(labels, [format!("{total} non-finite from step 2901")]);
}

#[test]
fn a_nan_breaks_the_line_and_is_labelled() {
    let series = points(&[1.0, 0.9, f64::NAN, 0.8, 0.7]);
    let svg = svg(&[line("run", series)], &options());
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.contains("NaN at step 2"), "{svg}");
    let line = r##"stroke="#2F6FED" stroke-width="2""##;
    assert_eq!(svg.matches(line).count(), 2, "two segments around the NaN: {svg}");
}

#[test]
fn infinities_are_named_by_sign() {
    let series = points(&[1.0, f64::INFINITY, 0.5, f64::NEG_INFINITY]);
    let svg = svg(&[line("run", series)], &options());
    assert!(
        svg.contains("+Inf at step 1") && svg.contains("-Inf at step 3"),
        "{svg}"
    );
}

#[test]
fn smoothing_is_debiased_and_skips_non_finite_values() {
    let samples: Vec<Sample> = [2.0, f64::NAN, 2.0]
        .iter()
        .enumerate()
        .map(|(x, &y)| Sample {
            x: x as f64,
            x_from: x as f64,
            y,
            range: None,
            non_finite: None,
            non_finite_count: 0,
        })
        .collect();
    let smoothed = smooth(&samples, 0.9);
    assert_eq!(smoothed[0], 2.0);
    assert!(smoothed[1].is_nan());
    assert!((smoothed[2] - 2.0).abs() < 1e-12);
}

#[test]
fn an_empty_range_says_so() {
    let svg = svg(&[line("run", points(&[]))], &options());
    assert!(svg.contains("no points in this range"), "{svg}");
}

#[test]
fn labels_are_escaped() {
    let series = points(&[1.0, 2.0]);
    let lines = [line("<script>a</script>", series.clone()), line("b&c", series)];
    let svg = svg(&lines, &options());
    assert!(!svg.contains("<script>"), "{svg}");
    assert!(svg.contains("b&amp;c"), "{svg}");
}

#[test]
fn control_characters_in_labels_still_make_a_document_that_renders() {
    let series = points(&[1.0, 2.0]);
    let lines = [line("run\u{14}name\u{0}", series.clone()), line("other", series)];
    let svg = svg(&lines, &options());
    assert!(
        !svg.contains('\u{14}') && svg.contains("run\u{FFFD}name"),
        "{svg}"
    );
    png(&svg).expect("the PNG renders");
}

#[test]
fn tick_numbers_stay_short() {
    assert_eq!(short_number(0.001), "0.001");
    assert_eq!(short_number(0.0001), "1e-4");
    assert_eq!(short_number(0.00031622776), "3.16e-4");
    assert_eq!(short_number(12.5), "12.5");
    assert_eq!(short_number(250000.0), "2.5e5");
    assert_eq!(short_number(0.0), "0");
}

#[test]
fn scatter_plots_draw_a_dot_per_run_on_log_axes() {
    let points = [(1e-4, 0.6), (1e-3, 0.8), (1e-2, 0.7)];
    let options = ScatterOptions {
        title: "eval/accuracy by config.lr".into(),
        x_desc: "config.lr".into(),
        y_desc: "eval/accuracy".into(),
        x_log: true,
        y_log: false,
        width: 640,
        height: 400,
    };
    let svg = scatter_svg(&points, &options);
    assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
    assert!(svg.contains("config.lr (log scale)"));
    for tick in ["1e-4", "0.001", "0.01"] {
        assert!(svg.contains(&format!("\n{tick}\n")), "{tick}: {svg}");
    }
    assert!(!svg.contains("3.16e-4"), "ticks fall on powers of ten: {svg}");
}

#[test]
fn pngs_have_text_without_any_system_font() {
    let svg = svg(&[line("run", points(&[3.0, 2.0, 1.0]))], &options());
    let no_text = without_text(&svg);
    assert!(no_text.len() < svg.len(), "the chart has text to strip");
    let fonts = std::sync::Arc::new(font_database(false));
    assert_eq!(fonts.len(), 1, "only the built-in font");
    let with_text = render_png(&svg, fonts.clone()).unwrap();
    let without = render_png(&no_text, fonts).unwrap();
    assert_ne!(with_text, without, "the text drew pixels");
    // What a host without fonts drew before the font was built in: no text at all.
    let empty = std::sync::Arc::new(resvg::usvg::fontdb::Database::new());
    assert_eq!(
        render_png(&svg, empty.clone()).unwrap(),
        render_png(&no_text, empty).unwrap()
    );
}

/// The SVG with every `<text>…</text>` element removed.
fn without_text(svg: &str) -> String {
    let mut out = String::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("</text>").expect("closed") + start + "</text>".len();
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
