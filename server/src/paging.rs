//! Keyset pages: a list fetches `limit + 1` rows, newest first; the extra
//! row only says that another page exists. Lists sorted by primary metric
//! give the top `limit` only. The list parameters (`limit`, `before`, `sort`)
//! are checked here, each problem added to the request's field errors.

use gpuplane_api::MAX_I64_SAFE;
use gpuplane_api::error::FieldError;

/// Default and largest page sizes of lists.
pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 500;

/// How run and job lists are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    Newest,
    /// Best primary metric first; those without a value last.
    PrimaryMetric,
}

impl Sort {
    /// `newest` (default) or `primary_metric`.
    pub fn parse(text: Option<&str>) -> Result<Sort, String> {
        match text {
            None | Some("newest") => Ok(Sort::Newest),
            Some("primary_metric") => Ok(Sort::PrimaryMetric),
            Some(other) => Err(format!("`{other}` is not a sort: use newest or primary_metric")),
        }
    }
}

/// The page's rows and the cursor (`next_before`) of the next page, if any.
pub fn split<T>(mut rows: Vec<T>, limit: i64, seq: impl Fn(&T) -> i64) -> (Vec<T>, Option<i64>) {
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_before = if has_more { rows.last().map(seq) } else { None };
    (rows, next_before)
}

/// `sort` must be `newest` or `primary_metric`.
pub fn sort_order(sort: Option<&str>, errors: &mut Vec<FieldError>) -> Sort {
    Sort::parse(sort).unwrap_or_else(|message| {
        errors.push(FieldError {
            field: "sort".into(),
            message,
        });
        Sort::Newest
    })
}

/// `limit` must be 1..=MAX_LIMIT.
pub fn page_limit(limit: Option<i64>, errors: &mut Vec<FieldError>) -> i64 {
    match limit {
        Some(limit) if !(1..=MAX_LIMIT).contains(&limit) => {
            errors.push(FieldError {
                field: "limit".into(),
                message: format!("must be between 1 and {MAX_LIMIT}"),
            });
            DEFAULT_LIMIT
        }
        Some(limit) => limit,
        None => DEFAULT_LIMIT,
    }
}

/// `before` must be 1..=MAX_I64_SAFE.
pub fn cursor(before: Option<i64>, errors: &mut Vec<FieldError>) -> Option<i64> {
    match before {
        Some(before) if !(1..=MAX_I64_SAFE).contains(&before) => {
            errors.push(FieldError {
                field: "before".into(),
                message: "must be between 1 and 2^62 (MAX_I64_SAFE)".into(),
            });
            None
        }
        other => other,
    }
}
