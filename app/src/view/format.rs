//! How values read on the console: times, durations, metric values, statuses.

use leptos::prelude::*;

/// `2026-11-30T05:24:13.123Z` → `2026-11-30 05:24:13`.
pub fn time(rfc3339: &str) -> String {
    let trimmed = rfc3339.split('.').next().unwrap_or(rfc3339).trim_end_matches('Z');
    trimmed.replacen('T', " ", 1)
}

/// Seconds since the Unix epoch of an RFC 3339 UTC time.
pub fn epoch_seconds(rfc3339: &str) -> Option<i64> {
    let number = |range: std::ops::Range<usize>| rfc3339.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Seconds since the Unix epoch (an SDK's wall time) as `2026-11-30 05:24:13` UTC.
pub fn epoch_time(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "–".into();
    }
    let seconds = seconds.floor() as i64;
    let (days, clock) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // The civil date of a day number (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        clock / 3600,
        clock % 3600 / 60,
        clock % 60
    )
}

/// `1h 02m`, `3m 07s`, `12s`.
pub fn duration(seconds: i64) -> String {
    let seconds = seconds.max(0);
    match seconds {
        s if s >= 86_400 => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
        s if s >= 3600 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// A metric value: NaN and infinities by name, others with up to 6 significant digits.
pub fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-4) {
        format!("{v:.4e}")
    } else {
        let text = format!("{v:.6}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        text.to_string()
    }
}

/// A job or node state as a coloured badge.
pub fn status_badge(status: impl Into<String>) -> impl IntoView {
    let status = status.into();
    let class = format!("badge status-{}", status.to_lowercase());
    view! { <span class=class data-testid="status">{status}</span> }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_date_and_clock() {
        assert_eq!(time("2026-11-30T05:24:13.123Z"), "2026-11-30 05:24:13");
        assert_eq!(epoch_seconds("1970-01-02T00:00:01Z"), Some(86_401));
        assert_eq!(epoch_seconds("2026-11-30T00:00:00Z"), Some(1_795_996_800));
        assert_eq!(epoch_time(1_795_996_800.5 + 5053.0), "2026-11-30 01:24:13");
        assert_eq!(epoch_time(86_401.0), "1970-01-02 00:00:01");
        assert_eq!(epoch_time(951_782_400.0), "2000-02-29 00:00:00");
        assert_eq!(epoch_time(f64::NAN), "–");
    }

    #[test]
    fn values_name_non_finite_ones() {
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(value(0.25), "0.25");
        assert_eq!(value(2.0), "2");
        assert_eq!(value(1.5e-7), "1.5000e-7");
        assert_eq!(duration(3725), "1h 02m");
    }
}
