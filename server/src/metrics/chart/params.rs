//! The parameters charts share, checked: each bad one is a field error,
//! all reported at once.

use super::super::Axis;
use gpuplane_api::error::FieldError;

/// `x` must be `step` or `time`, and `from` not after `to`.
pub fn axis_and_range(
    x: Option<&str>,
    from: Option<f64>,
    to: Option<f64>,
    errors: &mut Vec<FieldError>,
) -> Axis {
    if let (Some(from), Some(to)) = (from, to)
        && from > to
    {
        errors.push(FieldError {
            field: "from".into(),
            message: "must not be after `to`".into(),
        });
    }
    match x {
        None | Some("step") => Axis::Step,
        Some("time") => Axis::Time,
        Some(other) => {
            errors.push(FieldError {
                field: "x".into(),
                message: format!("must be `step` or `time`, not `{other}`"),
            });
            Axis::Step
        }
    }
}

/// An image's size in pixels, `default` when not given: width 200–4000,
/// height 120–3000.
pub fn image_size(
    width: Option<u32>,
    height: Option<u32>,
    default: (u32, u32),
    errors: &mut Vec<FieldError>,
) -> (u32, u32) {
    let (width, height) = (width.unwrap_or(default.0), height.unwrap_or(default.1));
    for (field, value, range) in [("width", width, 200..=4000), ("height", height, 120..=3000)] {
        if !range.contains(&value) {
            errors.push(FieldError {
                field: field.into(),
                message: format!("must be between {} and {}", range.start(), range.end()),
            });
        }
    }
    (width, height)
}

/// Whether an axis is logarithmic: `linear` (the default) or `log`.
pub fn log_scale(field: &str, scale: Option<&str>, errors: &mut Vec<FieldError>) -> bool {
    match scale {
        None | Some("linear") => false,
        Some("log") => true,
        Some(other) => {
            errors.push(FieldError {
                field: field.into(),
                message: format!("`{other}` is not a scale: use linear or log"),
            });
            false
        }
    }
}
