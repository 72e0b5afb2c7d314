//! Metric charts as SVG, drawn with plotters: one metric of one or more runs,
//! by step or wall time, optionally smoothed. Non-finite values are never
//! hidden: the line breaks there and a labelled marker says which value it was.

mod params;
mod samples;

pub use params::{axis_and_range, image_size, log_scale};

use samples::{Sample, bands, bounds, non_finite_stretches, samples, segments, smooth, span, stretch_label};

use super::Axis;
use gpuplane_api::metric::Series;
use plotters::prelude::*;

/// One line of a chart: a run's series of the charted metric.
pub struct Line {
    pub label: String,
    pub series: Series,
    /// The step of the series' first non-finite value (exact, from ingest),
    /// so a labelled stretch of buckets can say where it starts.
    pub first_non_finite_step: Option<i64>,
}

#[derive(Clone)]
pub struct ChartOptions {
    pub title: String,
    pub axis: Axis,
    /// Exponential moving average weight, 0 (none) to below 1.
    pub smoothing: f64,
    /// A logarithmic y axis: values at or below zero are not drawn (and counted in the title).
    pub y_log: bool,
    /// The y range shown, each end optional (else fitted to the values);
    /// values outside it are not drawn.
    pub y_min: Option<f64>,
    pub y_max: Option<f64>,
    pub width: u32,
    pub height: u32,
    /// Vertical marks across the plot (where each attempt of the run began).
    pub marks: Vec<Mark>,
}

/// A vertical mark at `x`: a step, or a Unix time on a time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub x: f64,
    pub label: String,
}

/// Colours of the lines, in order (readable on light and dark backgrounds).
const PALETTE: [RGBColor; 6] = [
    RGBColor(47, 111, 237),
    RGBColor(230, 120, 20),
    RGBColor(46, 160, 67),
    RGBColor(156, 80, 220),
    RGBColor(0, 150, 170),
    RGBColor(200, 60, 130),
];
const NON_FINITE: RGBColor = RGBColor(214, 40, 40);
/// Axis and marker text size (px in the SVG); the console shows charts
/// near their drawn width, so this is about the size it reads at.
const LABEL_PX: u32 = 16;
/// Labels of non-finite markers closer than this (pixels) to a labelled one are left out.
const LABEL_GAP_PX: f64 = 70.0;

/// The font chart text is drawn with in PNGs: DejaVu Sans cut down to
/// Latin, punctuation, arrows and a few symbols (25 KiB, licence beside it),
/// built into the binary so a GPU host without any font still gets text.
const CHART_FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-subset.ttf");

/// The fonts PNGs are drawn with: the built-in one as `sans-serif`, then
/// (when asked) the system's, for characters it lacks (CJK run names…).
fn font_database(system: bool) -> resvg::usvg::fontdb::Database {
    let mut fonts = resvg::usvg::fontdb::Database::new();
    fonts.load_font_data(CHART_FONT.to_vec());
    if system {
        fonts.load_system_fonts();
    }
    fonts.set_sans_serif_family("DejaVu Sans");
    fonts
}

/// A chart drawn by [`svg`] as a PNG image, its text in the built-in font.
pub fn png(svg: &str) -> anyhow::Result<Vec<u8>> {
    static FONTS: std::sync::OnceLock<std::sync::Arc<resvg::usvg::fontdb::Database>> =
        std::sync::OnceLock::new();
    let fonts = FONTS.get_or_init(|| std::sync::Arc::new(font_database(true)));
    render_png(svg, fonts.clone())
}

fn render_png(svg: &str, fonts: std::sync::Arc<resvg::usvg::fontdb::Database>) -> anyhow::Result<Vec<u8>> {
    use resvg::{tiny_skia, usvg};
    let options = usvg::Options {
        fontdb: fonts,
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &options)?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
        anyhow::anyhow!(
            "a chart of {}×{} pixels cannot be drawn",
            size.width(),
            size.height()
        )
    })?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    Ok(pixmap.encode_png()?)
}

/// The chart as an SVG document. Its root element says where the plot
/// area is and what it spans (`data-plot-left`, `data-plot-right` in SVG
/// units; `data-x-min`, `data-x-max` in steps, or Unix seconds on a time
/// axis), so the hydrated page can read a position as a step or a time
/// (hover read-out, drag-to-zoom).
pub fn svg(lines: &[Line], options: &ChartOptions) -> String {
    let mut out = String::new();
    match draw(&mut out, lines, options) {
        // Into the root tag, in place (not a copy of the whole document).
        Ok(Some(plot)) if out.starts_with("<svg ") => {
            let attributes = format!(
                " data-plot-left=\"{}\" data-plot-right=\"{}\" data-x-min=\"{}\" data-x-max=\"{}\"",
                plot.left, plot.right, plot.x_min, plot.x_max
            );
            out.insert_str("<svg".len(), &attributes);
        }
        Ok(_) => {}
        // Drawing into a string cannot fail for I/O reasons; say so if it does anyway.
        Err(error) => tracing::error!(%error, "chart drawing failed"),
    }
    xml_safe(out)
}

/// The document with every character XML 1.0 forbids (control characters
/// but tab and line ends, U+FFFE, U+FFFF) shown as U+FFFD: plotters escapes
/// markup in labels, not these, and a run name or metric key may hold them.
fn xml_safe(svg: String) -> String {
    let forbidden =
        |c: char| (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{FFFE}' | '\u{FFFF}');
    if !svg.contains(forbidden) {
        return svg;
    }
    svg.chars()
        .map(|c| if forbidden(c) { '\u{FFFD}' } else { c })
        .collect()
}

/// Where a chart's plot area is, in SVG units, and the x range it spans
/// (steps, or Unix seconds on a time axis).
struct PlotArea {
    left: i32,
    right: i32,
    x_min: f64,
    x_max: f64,
}

fn draw(
    out: &mut String,
    lines: &[Line],
    options: &ChartOptions,
) -> Result<Option<PlotArea>, Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(out, (options.width, options.height)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut all: Vec<Vec<Sample>> = lines
        .iter()
        .map(|line| samples(&line.series, options.axis))
        .collect();
    // Wall time is shown as time since the earliest point, in a readable
    // unit; `origin` turns a shown x back into a step or a Unix time.
    let mut origin = (0.0, 1.0);
    let unit = if options.axis == Axis::Time {
        let start = all.iter().flatten().map(|s| s.x).fold(f64::INFINITY, f64::min);
        let end = all
            .iter()
            .flatten()
            .map(|s| s.x)
            .fold(f64::NEG_INFINITY, f64::max);
        let (unit, divisor) = match end - start {
            span if span > 3.0 * 3600.0 => ("hours", 3600.0),
            span if span > 180.0 => ("minutes", 60.0),
            _ => ("seconds", 1.0),
        };
        for sample in all.iter_mut().flatten() {
            sample.x = (sample.x - start) / divisor;
            sample.x_from = (sample.x_from - start) / divisor;
        }
        origin = (start, divisor);
        unit
    } else {
        "step"
    };
    // A log axis plots log10 of the values; what it cannot show (zero and
    // below) breaks the line like a gap, without a non-finite marker.
    let mut not_shown = 0;
    if options.y_log {
        for sample in all.iter_mut().flatten() {
            if sample.y.is_finite() && sample.y <= 0.0 {
                not_shown += 1;
            }
            sample.y = if sample.y.is_finite() && sample.y <= 0.0 {
                f64::NAN
            } else {
                sample.y.log10()
            };
            sample.range = sample
                .range
                .filter(|(lo, _)| *lo > 0.0)
                .map(|(lo, hi)| (lo.log10(), hi.log10()));
        }
    }
    let place = |value: f64| if options.y_log { value.log10() } else { value };
    let ((x0, x1), (fitted_y0, fitted_y1)) = bounds(&all);
    let y0 = options.y_min.map_or(fitted_y0, place);
    let y1 = options.y_max.map_or(fitted_y1, place);
    // Values outside a chosen range are not drawn (a gap, not a false value at the edge).
    if options.y_min.is_some() || options.y_max.is_some() {
        for sample in all.iter_mut().flatten() {
            if sample.y.is_finite() && !(y0..=y1).contains(&sample.y) {
                sample.y = f64::NAN;
            }
            sample.range = sample.range.map(|(lo, hi)| (lo.clamp(y0, y1), hi.clamp(y0, y1)));
        }
    }
    let mut title = options.title.clone();
    if options.y_log {
        title.push_str(" (log scale");
        if not_shown > 0 {
            title.push_str(&format!("; {not_shown} at or below 0 not shown"));
        }
        title.push(')');
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let pixels = chart.plotting_area().get_pixel_range().0;
    let plot = PlotArea {
        left: pixels.start,
        right: pixels.end,
        x_min: origin.0 + x0 * origin.1,
        x_max: origin.0 + x1 * origin.1,
    };
    let x_desc = match options.axis {
        Axis::Step => "step".to_string(),
        Axis::Time => format!("{unit} since start"),
    };
    let step_label = |x: &f64| format!("{}", x.round() as i64);
    let time_label = |x: &f64| format!("{}", (x * 100.0).round() / 100.0);
    let y_label = |y: &f64| short_number(if options.y_log { 10f64.powf(*y) } else { *y });
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .max_light_lines(0)
        .bold_line_style(RGBColor(222, 226, 230))
        .label_style(("sans-serif", LABEL_PX))
        .axis_desc_style(("sans-serif", LABEL_PX))
        .x_labels(8)
        .y_labels(label_count(y0, y1, options.y_log, 6))
        .x_label_formatter(if options.axis == Axis::Step {
            &step_label
        } else {
            &time_label
        })
        .y_label_formatter(&y_label)
        .draw()?;
    if all.iter().all(Vec::is_empty) {
        root.draw(&Text::new(
            "no points in this range",
            (
                (options.width / 2).saturating_sub(80) as i32,
                (options.height / 2) as i32,
            ),
            ("sans-serif", 15).into_font().color(&RGBColor(110, 118, 128)),
        ))?;
        root.present()?;
        return Ok(None);
    }
    let mark_colour = RGBColor(110, 118, 128);
    for mark in &options.marks {
        let x = (mark.x - origin.0) / origin.1;
        if !(x0..=x1).contains(&x) {
            continue;
        }
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, y0), (x, y1)],
            mark_colour.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y1))
                + Text::new(
                    mark.label.clone(),
                    (4, 28),
                    ("sans-serif", LABEL_PX).into_font().color(&mark_colour),
                ),
        ))?;
    }
    let x_per_px = (x1 - x0) / f64::from(options.width.max(1));
    for (index, (line, samples)) in lines.iter().zip(&all).enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        // Downsampled: the buckets' finite ranges as a light band, so spikes stay visible.
        for band in bands(samples) {
            chart.draw_series(std::iter::once(Polygon::new(band, colour.mix(0.25).filled())))?;
        }
        let raw = segments(samples.iter().map(|s| (s.x, s.y)));
        let smoothed = (options.smoothing > 0.0).then(|| {
            let values = smooth(samples, options.smoothing);
            segments(samples.iter().zip(values).map(|(s, y)| (s.x, y)))
        });
        let main_style = colour.stroke_width(2);
        let raw_style = if smoothed.is_some() {
            colour.mix(0.3).stroke_width(1)
        } else {
            main_style
        };
        for segment in raw {
            chart.draw_series(LineSeries::new(segment, raw_style))?;
        }
        let mut labelled = false;
        for segment in smoothed.into_iter().flatten() {
            let series = chart.draw_series(LineSeries::new(segment, main_style))?;
            if !labelled {
                series.label(line.label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                });
                labelled = true;
            }
        }
        if !labelled {
            // The legend entry, drawn once whatever the line's shape.
            chart
                .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?
                .label(line.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
        }
        // Non-finite values: a red marker at the top (NaN, +Inf) or bottom
        // (-Inf); each stretch of them labelled once, with its count.
        let mut last_label = f64::NEG_INFINITY;
        for stretch in non_finite_stretches(samples) {
            for sample in stretch {
                let y = if sample.y == f64::NEG_INFINITY { y0 } else { y1 };
                chart.draw_series(std::iter::once(TriangleMarker::new(
                    (sample.x, y),
                    6,
                    NON_FINITE.filled(),
                )))?;
            }
            let first = &stretch[0];
            if (first.x - last_label) / x_per_px < LABEL_GAP_PX {
                continue;
            }
            let at = stretch_label(stretch, options.axis, line.first_non_finite_step);
            let y = if first.y == f64::NEG_INFINITY { y0 } else { y1 };
            let dy = if first.y == f64::NEG_INFINITY { -18 } else { 8 };
            // Near the right edge the label goes to the left of its marker.
            let dx = if (x1 - first.x) / x_per_px < 130.0 {
                -(8 * at.chars().count() as i32)
            } else {
                6
            };
            chart.draw_series(std::iter::once(
                EmptyElement::at((first.x, y))
                    + Text::new(
                        at,
                        (dx, dy),
                        ("sans-serif", LABEL_PX).into_font().color(&NON_FINITE),
                    ),
            ))?;
            last_label = first.x;
        }
    }
    if lines.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 205, 210))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    root.present()?;
    Ok(Some(plot))
}

/// A scatter plot of runs: one dot per run, a config value or metric on
/// each axis, either axis on a log scale.
pub struct ScatterOptions {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x_log: bool,
    pub y_log: bool,
    pub width: u32,
    pub height: u32,
}

/// A number as a tick label: short, in e-notation when very large or small.
pub fn short_number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".into()
    } else if (1e-3..1e5).contains(&magnitude) {
        let text = format!("{value:.4}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let text = format!("{value:.2e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        format!("{mantissa}e{exponent}")
    }
}

/// How many ticks an axis asks for: on a log axis one per decade (so they
/// fall on powers of ten), at most `most`.
fn label_count(from: f64, to: f64, log: bool, most: usize) -> usize {
    if log {
        ((to.floor() - from.ceil()) as usize + 1).clamp(2, most)
    } else {
        most
    }
}

/// The plot as an SVG document; `points` are finite (and positive on a log axis).
pub fn scatter_svg(points: &[(f64, f64)], options: &ScatterOptions) -> String {
    let mut out = String::new();
    if let Err(error) = draw_scatter(&mut out, points, options) {
        tracing::error!(%error, "scatter drawing failed");
    }
    xml_safe(out)
}

fn draw_scatter(
    out: &mut String,
    points: &[(f64, f64)],
    options: &ScatterOptions,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(out, (options.width, options.height)).into_drawing_area();
    root.fill(&WHITE)?;
    // A log axis plots log10 of the value and labels its ticks with the value.
    let place = |value: f64, log: bool| if log { value.log10() } else { value };
    let placed: Vec<(f64, f64)> = points
        .iter()
        .map(|&(x, y)| (place(x, options.x_log), place(y, options.y_log)))
        .collect();
    let (x0, x1) = span(placed.iter().map(|p| p.0));
    let (y0, y1) = span(placed.iter().map(|p| p.1));
    let mut chart = ChartBuilder::on(&root)
        .caption(&options.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let x_label = |x: &f64| short_number(if options.x_log { 10f64.powf(*x) } else { *x });
    let y_label = |y: &f64| short_number(if options.y_log { 10f64.powf(*y) } else { *y });
    let log_note = |desc: &str, log: bool| {
        if log {
            format!("{desc} (log scale)")
        } else {
            desc.to_string()
        }
    };
    chart
        .configure_mesh()
        .x_desc(log_note(&options.x_desc, options.x_log))
        .y_desc(log_note(&options.y_desc, options.y_log))
        .max_light_lines(0)
        .bold_line_style(RGBColor(222, 226, 230))
        .label_style(("sans-serif", LABEL_PX))
        .axis_desc_style(("sans-serif", LABEL_PX))
        .x_labels(label_count(x0, x1, options.x_log, 8))
        .y_labels(label_count(y0, y1, options.y_log, 6))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .draw()?;
    if placed.is_empty() {
        root.draw(&Text::new(
            "no run has numbers for both axes",
            (
                (options.width / 2).saturating_sub(110) as i32,
                (options.height / 2) as i32,
            ),
            ("sans-serif", 15).into_font().color(&RGBColor(110, 118, 128)),
        ))?;
    }
    let colour = PALETTE[0];
    chart.draw_series(
        placed
            .iter()
            .map(|&point| Circle::new(point, 4, colour.mix(0.7).filled())),
    )?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests;
