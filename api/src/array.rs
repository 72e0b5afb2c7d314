//! Job arrays, as Slurm users write them: one submission (`array =
//! "0-99%8"`, `gpuctl job submit --array …`) makes a task per index, each
//! an ordinary job that sees `GPUCTL_ARRAY_INDEX`, with at most the `%`
//! limit running at once.

use serde::{Deserialize, Serialize};

/// The most tasks one array may have.
pub const MAX_TASKS: usize = 10_000;
/// The highest index a task may have.
pub const MAX_INDEX: u32 = 1_000_000;
/// Written in a task's command, replaced by its index at submit.
pub const INDEX_PLACEHOLDER: &str = "${GPUCTL_ARRAY_INDEX}";

/// The indices an `array` field names and its `%` limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// Each index once, ascending.
    pub indices: Vec<u32>,
    /// At most this many tasks run at once.
    pub limit: Option<u32>,
}

impl std::str::FromStr for ArraySpec {
    type Err = String;

    /// `0-99`, `1,3,5`, `0-98:2`, any of them joined by commas, then
    /// optionally `%N`: `0-9,20-29:2%4`.
    fn from_str(text: &str) -> Result<ArraySpec, String> {
        let (ranges, limit) = match text.split_once('%') {
            Some((ranges, limit)) => {
                let limit: u32 = number(limit, "the % limit")?;
                if limit == 0 {
                    return Err("the % limit must be 1 or more".into());
                }
                (ranges, Some(limit))
            }
            None => (text, None),
        };
        if ranges.trim().is_empty() {
            return Err("name the task indices, as in `0-99%8`, `1,3,5` or `0-98:2`".into());
        }
        let mut indices = std::collections::BTreeSet::new();
        for part in ranges.split(',') {
            let (range, step) = match part.split_once(':') {
                Some((range, step)) => (range, number(step, "a step")?),
                None => (part, 1),
            };
            if step == 0 {
                return Err(format!("`{part}`: the step must be 1 or more"));
            }
            let (first, last) = match range.split_once('-') {
                Some((first, last)) => (number(first, "an index")?, number(last, "an index")?),
                None => {
                    let index = number(range, "an index")?;
                    (index, index)
                }
            };
            if first > last {
                return Err(format!("`{part}`: {first} is after {last}"));
            }
            if last > MAX_INDEX {
                return Err(format!("`{part}`: indices go up to {MAX_INDEX}"));
            }
            for index in (first..=last).step_by(step as usize) {
                indices.insert(index);
                if indices.len() > MAX_TASKS {
                    return Err(format!("an array has at most {MAX_TASKS} tasks"));
                }
            }
        }
        Ok(ArraySpec {
            indices: indices.into_iter().collect(),
            limit,
        })
    }
}

fn number(text: &str, what: &str) -> Result<u32, String> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{}` is not {what} (a whole number)",
            text.escape_debug()
        ));
    }
    text.parse()
        .map_err(|_| format!("`{text}` is too large for {what}"))
}

/// A job that is one task of an array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayTask {
    /// The array's id (`arr_…`): `GET /api/v1/arrays/{id}`, `gpuctl job
    /// list --array ID`, `gpuctl job cancel ID`.
    pub id: String,
    /// This task's index (`GPUCTL_ARRAY_INDEX`).
    pub index: u32,
    /// How many tasks the array has.
    pub tasks: u32,
    /// At most this many of them run at once (the `%` limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `GET /api/v1/arrays/{id}`: an array and how many of its tasks are in
/// each state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobArray {
    pub id: String,
    pub name: String,
    pub project: String,
    /// The `array` field it was submitted with (`0-99%8`).
    pub array: String,
    pub tasks: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Tasks by state (`QUEUED`, `RUNNING`, …), states with none left out.
    pub states: std::collections::BTreeMap<String, u32>,
    pub submitted_by: Option<String>,
    pub created_at: String,
}

/// `POST /api/v1/arrays/{id}/cancel`: how many tasks were cancelled or are
/// being stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayCancelled {
    pub cancelled: u32,
    pub array: JobArray,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ArraySpec, String> {
        text.parse()
    }

    #[test]
    fn slurm_array_forms_are_read() {
        assert_eq!(
            parse("0-99%8").unwrap(),
            ArraySpec {
                indices: (0..100).collect(),
                limit: Some(8)
            }
        );
        assert_eq!(parse("1,3,5").unwrap().indices, [1, 3, 5]);
        assert_eq!(
            parse("0-98:2").unwrap().indices,
            (0..=98).step_by(2).collect::<Vec<_>>()
        );
        assert_eq!(parse("7").unwrap().indices, [7]);
        // Overlaps count once, in order.
        assert_eq!(parse("5,0-6:3,5%1").unwrap().indices, [0, 3, 5, 6]);
        assert_eq!(parse("0-3%2").unwrap().limit, Some(2));
    }

    #[test]
    fn bad_arrays_say_what_is_wrong() {
        for (text, expected) in [
            ("", "name the task indices"),
            ("%4", "name the task indices"),
            ("0-9%0", "the % limit must be 1 or more"),
            ("0-9%x", "`x` is not the % limit"),
            ("9-0", "`9-0`: 9 is after 0"),
            ("0-9:0", "the step must be 1 or more"),
            ("-5", "`` is not an index"),
            ("1,,2", "`` is not an index"),
            ("a", "`a` is not an index"),
            ("0-2000000", "indices go up to 1000000"),
            ("0-10000", "at most 10000 tasks"),
            ("1\u{1b}[2J", "is not an index"),
            ("99999999999", "too large"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }
}
