//! Keyset pages: a list fetches `limit + 1` rows, newest first; the extra
//! row only says that another page exists. Lists sorted by primary metric
//! give the top `limit` only.

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
