//! Durations as people write them (`90s`, `30m`, `2h`, `1h30m`, `1d`, or
//! plain seconds) for time limits, read the same by `gpuctl`, the server and
//! the console, and written back in the shortest such form.

const UNITS: &[(char, i64)] = &[('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// Whole seconds from `2h`, `1h30m`, `45m`, `90s`, `1d` or `7200`.
pub fn parse_seconds(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("is empty; write it as 90s, 30m, 2h, 1h30m, 1d or a number of seconds".into());
    }
    if let Ok(seconds) = text.parse::<i64>() {
        return Ok(seconds);
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    let mut last_unit = usize::MAX;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let Some(at) = UNITS.iter().position(|(unit, _)| *unit == c.to_ascii_lowercase()) else {
            return Err(format!(
                "`{text}` is not a duration: `{c}` is not a unit (d, h, m or s)"
            ));
        };
        if digits.is_empty() {
            return Err(format!(
                "`{text}` is not a duration: `{c}` has no number before it"
            ));
        }
        if last_unit != usize::MAX && at <= last_unit {
            return Err(format!(
                "`{text}` is not a duration: give units once each, largest first"
            ));
        }
        let amount: i64 = digits
            .parse()
            .map_err(|_| format!("`{text}` is not a duration: `{digits}` is too large"))?;
        total = amount
            .checked_mul(UNITS[at].1)
            .and_then(|seconds| total.checked_add(seconds))
            .ok_or_else(|| format!("`{text}` is too long a duration"))?;
        digits.clear();
        last_unit = at;
    }
    if !digits.is_empty() {
        return Err(format!(
            "`{text}` is not a duration: `{digits}` has no unit (d, h, m or s)"
        ));
    }
    Ok(total)
}

/// The shortest way to write `seconds` that [`parse_seconds`] reads back: `2h`, `1h30m`, `45s`.
pub fn format_seconds(seconds: i64) -> String {
    if seconds <= 0 {
        return format!("{seconds}s");
    }
    let mut left = seconds;
    let mut text = String::new();
    for (unit, size) in UNITS {
        if left >= *size {
            text.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written_and_write_back_the_same() {
        for (text, seconds) in [
            ("7200", 7200),
            ("2h", 7200),
            ("1h30m", 5400),
            ("90m", 5400),
            ("45s", 45),
            ("1d", 86_400),
            ("1d2h3m4s", 93_784),
            (" 2H ", 7200),
        ] {
            assert_eq!(parse_seconds(text), Ok(seconds), "{text}");
        }
        for (seconds, text) in [
            (7200, "2h"),
            (5400, "1h30m"),
            (45, "45s"),
            (93_784, "1d2h3m4s"),
            (0, "0s"),
        ] {
            assert_eq!(format_seconds(seconds), text);
            assert_eq!(parse_seconds(text), Ok(seconds));
        }
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        for (text, says) in [
            ("", "is empty"),
            ("2x", "`x` is not a unit"),
            ("h", "has no number before it"),
            ("1h2", "`2` has no unit"),
            ("30m1h", "largest first"),
            ("1h1h", "largest first"),
            ("99999999999999999999s", "too large"),
            ("9999999999999999d", "too long"),
        ] {
            let error = parse_seconds(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
