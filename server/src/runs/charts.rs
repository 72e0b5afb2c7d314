//! A run's metric chart as the API, share links and the console draw it:
//! the parameters checked (every bad one at once), the lines of this run
//! and the runs compared read together, and the SVG (or PNG) made of them.
//! It lives with the runs, above the metrics it reads, because a line is
//! labelled with its run.

use crate::metrics::chart::{self, axis_and_range, image_size, log_scale};
use crate::metrics::{self, Axis, Query};
use crate::store::sql;
use crate::store::{Db, Error};
use gpuplane_api::error::FieldError;
use serde::Deserialize;

/// Most runs one chart compares.
const MAX_COMPARED: usize = 8;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ChartQuery {
    /// The metric, e.g. `train/loss`.
    key: String,
    /// `step` (default) or `time` (wall time since the first point).
    x: Option<String>,
    /// Range on the x axis (inclusive; wall time in Unix seconds).
    from: Option<f64>,
    to: Option<f64>,
    /// Smoothing weight, 0 (default) to 0.99.
    smooth: Option<f64>,
    /// Other runs to draw on the same chart, comma-separated ids.
    compare: Option<String>,
    /// `linear` (default) or `log`: values at or below zero are then not drawn.
    y_scale: Option<String>,
    /// The y range shown (either end optional; values outside are not drawn).
    y_min: Option<f64>,
    y_max: Option<f64>,
    /// Size in pixels: width 200–4000 (default 800), height 120–3000 (default 320).
    width: Option<u32>,
    height: Option<u32>,
}

impl ChartQuery {
    /// Whether it asks for other runs on the same chart.
    pub fn compares(&self) -> bool {
        self.compare
            .as_deref()
            .is_some_and(|list| !list.trim().is_empty())
    }
}

/// A chart to draw: its runs (the first, then those compared), checked
/// parameters and drawing options.
pub struct ChartRequest {
    pub run_ids: Vec<String>,
    key: String,
    axis: Axis,
    from: Option<f64>,
    to: Option<f64>,
    options: chart::ChartOptions,
}

impl ChartRequest {
    /// Checks a chart's parameters (every error at once, 422).
    pub fn check(run_id: String, query: ChartQuery) -> Result<ChartRequest, Error> {
        let mut errors = Vec::new();
        let axis = axis_and_range(query.x.as_deref(), query.from, query.to, &mut errors);
        let smoothing = query.smooth.unwrap_or(0.0);
        if !(0.0..=0.99).contains(&smoothing) {
            errors.push(FieldError {
                field: "smooth".into(),
                message: "must be between 0 and 0.99".into(),
            });
        }
        let (width, height) = image_size(query.width, query.height, (800, 320), &mut errors);
        let y_log = log_scale("y_scale", query.y_scale.as_deref(), &mut errors);
        for (field, value) in [("y_min", query.y_min), ("y_max", query.y_max)] {
            match value {
                Some(v) if !v.is_finite() => errors.push(FieldError {
                    field: field.into(),
                    message: "must be a finite number".into(),
                }),
                Some(v) if y_log && v <= 0.0 => errors.push(FieldError {
                    field: field.into(),
                    message: "must be above 0 on a log scale".into(),
                }),
                _ => {}
            }
        }
        if let (Some(lo), Some(hi)) = (query.y_min, query.y_max)
            && lo >= hi
        {
            errors.push(FieldError {
                field: "y_min".into(),
                message: "must be below `y_max`".into(),
            });
        }
        let mut run_ids = vec![run_id];
        for other in query
            .compare
            .iter()
            .flat_map(|list| list.split(','))
            .map(str::trim)
        {
            if !other.is_empty() && !run_ids.iter().any(|id| id == other) {
                run_ids.push(other.to_string());
            }
        }
        if run_ids.len() > 1 + MAX_COMPARED {
            errors.push(FieldError {
                field: "compare".into(),
                message: format!("at most {MAX_COMPARED} runs"),
            });
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        Ok(ChartRequest {
            run_ids,
            key: query.key.clone(),
            axis,
            from: query.from,
            to: query.to,
            options: chart::ChartOptions {
                title: query.key,
                axis,
                smoothing,
                y_log,
                y_min: query.y_min,
                y_max: query.y_max,
                width,
                height,
                marks: Vec::new(),
            },
        })
    }
}

/// Draws a chart whose runs the caller was allowed to read. The runs'
/// lines are read at once (each from its own pooled connection), so a
/// chart comparing 8 runs costs about what its slowest line does.
pub async fn svg(db: &Db, chart: &ChartRequest) -> Result<String, Error> {
    let metric_query = Query {
        key: chart.key.clone(),
        // Two pixels a bucket: enough to see every spike, half the drawing.
        max_points: (chart.options.width / 2) as usize,
        axis: chart.axis,
        from: chart.from,
        to: chart.to,
    };
    let (query, key) = (&metric_query, &chart.key);
    let lines = futures_util::future::try_join_all(chart.run_ids.iter().map(|id| async move {
        Ok::<_, Error>(chart::Line {
            label: super::label(db, id).await?,
            series: metrics::query(db, id, query).await?,
            first_non_finite_step: metrics::first_non_finite_step(db, id, key).await?,
        })
    }))
    .await?;
    let marks = match chart.run_ids.first() {
        Some(run_id) => attempt_marks(db, run_id, chart.axis).await?,
        None => Vec::new(),
    };
    let options = chart::ChartOptions {
        marks,
        ..chart.options.clone()
    };
    Ok(chart::svg(&lines, &options))
}

/// Where each attempt after the first began on a run's charts: at the step
/// it resumed from (an attempt that started over has none), or at its
/// start on a time axis.
async fn attempt_marks(db: &Db, run_id: &str, axis: Axis) -> Result<Vec<chart::Mark>, Error> {
    let attempts: Vec<(i64, Option<i64>, i64)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT a.n, a.resume_step, a.started_at FROM attempts a JOIN runs r ON r.job_id = a.job_id
             WHERE r.id = $1 AND a.n > 1 AND a.started_at IS NOT NULL ORDER BY a.n",
        )
        .bind(run_id)
        .fetch_all(pool)
        .await
    })?;
    Ok(attempts
        .into_iter()
        .filter_map(|(n, resume_step, started_at)| {
            let x = match axis {
                Axis::Step => resume_step? as f64,
                Axis::Time => started_at as f64 / 1000.0,
            };
            Some(chart::Mark {
                x,
                label: format!("attempt {n}"),
            })
        })
        .collect())
}

/// An SVG chart as PNG, off the async threads.
pub async fn png(svg: String) -> Result<Vec<u8>, Error> {
    Ok(tokio::task::spawn_blocking(move || chart::png(&svg))
        .await
        .map_err(anyhow::Error::from)??)
}
