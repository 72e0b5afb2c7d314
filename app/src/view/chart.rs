//! A chart drawn by the server, made interactive once hydrated: pointing at
//! it reads out the nearest point of each line (step, value, wall time),
//! and dragging across it zooms to that range by writing `from` and `to`
//! into the address (the From and To fields stay for the keyboard). The
//! SVG's root says where its plot area is and what x range it spans
//! (`metrics/chart.rs::svg`); the points are fetched on the first hover.

use crate::api::api_get_many;
use crate::view::format;
use crate::view::query::link;
use gpuplane_api::metric::Series;
use leptos::html::Div;
use leptos::prelude::*;
use leptos_router::hooks::{use_location, use_navigate, use_query_map};

/// Charts by metric key or telemetry field: each an SVG, or why it could
/// not be drawn.
pub type Charts = Vec<(String, Result<String, String>)>;

/// A drag shorter than this (CSS pixels) is a click, not a zoom.
const MIN_DRAG_PX: f64 = 6.0;

/// One line's points as the read-out needs them, ordered by `at` (a step,
/// or a Unix time on a time axis).
#[derive(Debug, Clone)]
struct Near {
    at: f64,
    text: String,
}

/// The readable points of a series: a point, or a bucket's last value with
/// its range.
fn nearables(series: &Series, by_time: bool) -> Vec<Near> {
    let mut out = Vec::new();
    for point in series.points.iter().flatten() {
        out.push(Near {
            at: if by_time {
                point.wall_time
            } else {
                point.step as f64
            },
            text: format!(
                "step {}: {} at {}",
                point.step,
                format::value(point.value.0),
                format::epoch_time(point.wall_time)
            ),
        });
    }
    for bucket in series.buckets.iter().flatten() {
        let range = match (&bucket.min, &bucket.max) {
            (Some(min), Some(max)) => {
                format!(" (min {}, max {})", format::value(min.0), format::value(max.0))
            }
            _ => String::new(),
        };
        out.push(Near {
            at: if by_time {
                bucket.time_to
            } else {
                bucket.step_to as f64
            },
            text: format!(
                "steps {}–{}: {}{range} at {}",
                bucket.step_from,
                bucket.step_to,
                format::value(bucket.last.0),
                format::epoch_time(bucket.time_to)
            ),
        });
    }
    out
}

/// The entry of `line` nearest to `at`.
fn nearest(line: &[Near], at: f64) -> Option<&Near> {
    let after = line.partition_point(|near| near.at < at);
    let candidates = [after.checked_sub(1), Some(after)];
    candidates
        .into_iter()
        .flatten()
        .filter_map(|index| line.get(index))
        .min_by(|a, b| (a.at - at).abs().total_cmp(&(b.at - at).abs()))
}

/// Where the plot area is, in CSS pixels from the chart's left edge, and
/// the x range it spans.
#[derive(Debug, Clone, Copy)]
struct Plot {
    left_px: f64,
    right_px: f64,
    x_min: f64,
    x_max: f64,
}

impl Plot {
    /// The x value at `px` CSS pixels from the left edge, if inside the plot.
    fn x_at(&self, px: f64) -> Option<f64> {
        (self.left_px..=self.right_px).contains(&px).then(|| {
            self.x_min + (px - self.left_px) / (self.right_px - self.left_px) * (self.x_max - self.x_min)
        })
    }
}

/// An interactive chart: the server's SVG, a hover read-out and drag-to-zoom.
/// `series_paths` are the API reads of the lines drawn (the run's, then the
/// compared runs'), with `labels` to name them.
#[component]
pub fn ChartSurface(
    svg: String,
    series_paths: Vec<String>,
    labels: Vec<String>,
    by_time: bool,
) -> impl IntoView {
    let surface = NodeRef::<Div>::new();
    let lines = RwSignal::new(None::<Vec<Vec<Near>>>);
    let loading = RwSignal::new(false);
    // The x value under the pointer, while it is over the plot.
    let pointer = RwSignal::new(None::<f64>);
    let drag = RwSignal::new(None::<(f64, f64)>);
    let query = use_query_map();
    let location = use_location();
    let navigate = use_navigate();

    // The plot area and the pointer's x, in CSS pixels, from the rendered
    // SVG (in the browser only: events never fire on the server).
    let locate = move |client_x: i32| -> Option<(Plot, f64)> {
        #[cfg(feature = "hydrate")]
        {
            let div = surface.get_untracked()?;
            let svg = div.query_selector("svg").ok()??;
            let number = |name: &str| svg.get_attribute(name)?.parse::<f64>().ok();
            let width = number("width")?;
            let rect = div.get_bounding_client_rect();
            let scale = rect.width() / width;
            let plot = Plot {
                left_px: number("data-plot-left")? * scale,
                right_px: number("data-plot-right")? * scale,
                x_min: number("data-x-min")?,
                x_max: number("data-x-max")?,
            };
            Some((plot, f64::from(client_x) - rect.left()))
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = (surface, client_x);
            None
        }
    };
    let load = move || {
        if loading.get_untracked() {
            return;
        }
        loading.set(true);
        let paths = series_paths.clone();
        leptos::task::spawn_local(async move {
            let Ok(answers) = api_get_many(paths).await else {
                return;
            };
            let parsed = answers
                .into_iter()
                .map(|answer| {
                    answer
                        .ok()
                        .and_then(|body| serde_json::from_str::<Series>(&body).ok())
                        .map(|series| nearables(&series, by_time))
                        .unwrap_or_default()
                })
                .collect();
            lines.set(Some(parsed));
        });
    };
    let on_move = move |event: leptos::ev::MouseEvent| {
        let Some((plot, px)) = locate(event.client_x()) else {
            return;
        };
        if let Some((start, _)) = drag.get_untracked() {
            drag.set(Some((start, px.clamp(plot.left_px, plot.right_px))));
        }
        pointer.set(plot.x_at(px));
        if pointer.get_untracked().is_some() {
            load();
        }
    };
    let on_down = move |event: leptos::ev::MouseEvent| {
        if event.button() != 0 {
            return;
        }
        if let Some((plot, px)) = locate(event.client_x())
            && plot.x_at(px).is_some()
        {
            event.prevent_default();
            drag.set(Some((px, px)));
        }
    };
    let on_up = move |event: leptos::ev::MouseEvent| {
        let Some((start, _)) = drag.get_untracked() else {
            return;
        };
        drag.set(None);
        let Some((plot, px)) = locate(event.client_x()) else {
            return;
        };
        let end = px.clamp(plot.left_px, plot.right_px);
        if (end - start).abs() < MIN_DRAG_PX {
            return;
        }
        let (Some(a), Some(b)) = (plot.x_at(start.min(end)), plot.x_at(start.max(end))) else {
            return;
        };
        let (from, to) = if by_time {
            (format!("{a:.3}"), format!("{b:.3}"))
        } else {
            (format!("{}", a.floor() as i64), format!("{}", b.ceil() as i64))
        };
        let href = link(
            &location.pathname.get_untracked(),
            &query.read_untracked(),
            &[("from", Some(&from)), ("to", Some(&to))],
        );
        navigate(&href, Default::default());
    };
    let selection = move || {
        drag.get().map(|(start, now)| {
            let (left, width) = (start.min(now), (now - start).abs());
            view! { <div class="zoom-selection" data-testid="zoom-selection" style=format!("left: {left}px; width: {width}px")></div> }
        })
    };
    view! {
        <div class="chart-surface" node_ref=surface
            on:mousemove=on_move on:mousedown=on_down on:mouseup=on_up
            on:mouseleave=move |_| { pointer.set(None); drag.set(None); }>
            <div class="chart-svg" inner_html=svg></div>
            {selection}
        </div>
        <p class="readout" data-testid="chart-readout" aria-live="polite">
            {move || {
                let texts: Vec<String> = match (pointer.get(), lines.get()) {
                    (Some(at), Some(lines)) => lines
                        .iter()
                        .zip(&labels)
                        .filter_map(|(line, label)| nearest(line, at).map(|near| format!("{label}{}", near.text)))
                        .collect(),
                    _ => Vec::new(),
                };
                if texts.is_empty() {
                    "Point at the chart to read values; drag across it to zoom.".to_string()
                } else {
                    texts.join(" · ")
                }
            }}
        </p>
    }
}
