//! The rules of a metric batch, checked before anything is stored: its
//! size, keys, wall times and texts, one error per bad field (at most
//! `MAX_POINT_ERRORS` for the points, then for the texts). `wire.rs`
//! applies them to every batch, whichever way it arrived.

use super::texts::{MAX_BATCH_TEXTS, MAX_TEXT_BYTES};
use gpuplane_api::error::FieldError;
use gpuplane_api::metric::Text;

/// The most points one batch may carry.
pub const MAX_BATCH_POINTS: usize = 100_000;
pub use gpuplane_api::metric::{MAX_KEY_LEN, key_is_valid};

/// The most errors reported for a batch's points (and then for its texts).
pub(super) const MAX_POINT_ERRORS: usize = 20;

/// A batch's errors: its id, its size, then its points' (found by the
/// caller, at most [`MAX_POINT_ERRORS`]), then its texts'.
pub(super) fn batch_errors(
    batch_id: &str,
    points: usize,
    point_errors: Vec<FieldError>,
    texts: &[Text],
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if batch_id.trim().is_empty() || batch_id.len() > 200 {
        errors.push(FieldError {
            field: "batch_id".into(),
            message: "must be 1-200 characters".into(),
        });
    }
    if points > MAX_BATCH_POINTS {
        errors.push(FieldError {
            field: "points".into(),
            message: format!("at most {MAX_BATCH_POINTS} points per batch; send several batches"),
        });
    }
    errors.extend(point_errors);
    validate_texts(texts, &mut errors);
    errors
}

/// A point's or text's key (1-[`MAX_KEY_LEN`] characters, no control
/// characters) and wall time (finite); `list[at]` names it (`points[3]`).
/// The name is only formatted for an error: this runs for every point.
pub(super) fn check_key_and_time(
    list: &str,
    at: usize,
    key: &str,
    wall_time: f64,
    errors: &mut Vec<FieldError>,
) {
    if !key_is_valid(key) {
        errors.push(key_error(list, at));
    }
    check_time(list, at, wall_time, errors);
}

pub(super) fn key_error(list: &str, at: usize) -> FieldError {
    FieldError {
        field: format!("{list}[{at}].key"),
        message: format!("must be 1-{MAX_KEY_LEN} characters without control characters"),
    }
}

pub(super) fn check_time(list: &str, at: usize, wall_time: f64, errors: &mut Vec<FieldError>) {
    if !wall_time.is_finite() {
        errors.push(FieldError {
            field: format!("{list}[{at}].wall_time"),
            message: "must be a finite number of seconds since the epoch".into(),
        });
    }
}

/// Adds one error per bad text field to `errors` (at most 20 in all).
fn validate_texts(texts: &[Text], errors: &mut Vec<FieldError>) {
    if texts.len() > MAX_BATCH_TEXTS {
        errors.push(FieldError {
            field: "texts".into(),
            message: format!("at most {MAX_BATCH_TEXTS} texts per batch; send several batches"),
        });
    }
    for (at, text) in texts.iter().enumerate() {
        if errors.len() >= 20 {
            break;
        }
        check_key_and_time("texts", at, &text.key, text.wall_time, errors);
        if text.text.len() > MAX_TEXT_BYTES {
            errors.push(FieldError {
                field: format!("texts[{at}].text"),
                message: format!("at most {} KiB", MAX_TEXT_BYTES / 1024),
            });
        }
    }
}
