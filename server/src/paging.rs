//! Keyset pages: a list fetches `limit + 1` rows, newest first; the extra
//! row only says that another page exists.

/// The page's rows and the cursor (`next_before`) of the next page, if any.
pub fn split<T>(mut rows: Vec<T>, limit: i64, seq: impl Fn(&T) -> i64) -> (Vec<T>, Option<i64>) {
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_before = if has_more { rows.last().map(seq) } else { None };
    (rows, next_before)
}
