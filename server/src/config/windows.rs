//! Scheduling windows: a node pool (nodes with one label) may start jobs
//! only during a daily window, in UTC (`pool=night 20:00-06:00`). A job
//! starts there only if its time limit ends before the window closes; a
//! job without a time limit may start any time the window is open (a
//! window never stops a running job). Pure, like `plan`: [`Window::at`]
//! says where a window stands at a moment.

use std::collections::BTreeMap;

const DAY_MS: i64 = 24 * 3_600_000;
const MINUTE_MS: i64 = 60_000;

/// One configured window: nodes labelled `key=value` start jobs only from
/// `start` to `end` (minutes after midnight UTC; `end` before `start` wraps
/// past midnight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub key: String,
    pub value: String,
    pub start: i64,
    pub end: i64,
}

/// Where a window stands at one moment (epoch ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowState {
    /// `pool=night 20:00-06:00 UTC`: how reasons name it.
    pub label: String,
    /// When it closes, if it is open now.
    pub open_until: Option<i64>,
    /// When it next opens (after `open_until` if it is open now).
    pub next_open: i64,
}

impl Window {
    /// `pool=night 20:00-06:00`.
    pub fn parse(text: &str) -> Result<Window, String> {
        let bad = || {
            format!(
                "`{text}` is not a scheduling window: write LABEL=VALUE HH:MM-HH:MM (UTC), e.g. pool=night 20:00-06:00"
            )
        };
        let (label, times) = text.trim().split_once(' ').ok_or_else(bad)?;
        let (key, value) = label.split_once('=').ok_or_else(bad)?;
        let (start, end) = times.trim().split_once('-').ok_or_else(bad)?;
        let minutes = |hhmm: &str| -> Option<i64> {
            let (h, m) = hhmm.trim().split_once(':')?;
            let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
            ((0..=24).contains(&h) && (0..60).contains(&m) && h * 60 + m <= 24 * 60).then_some(h * 60 + m)
        };
        let (start, end) = (minutes(start).ok_or_else(bad)?, minutes(end).ok_or_else(bad)?);
        if key.is_empty() || value.is_empty() || start == end {
            return Err(bad());
        }
        Ok(Window {
            key: key.to_string(),
            value: value.to_string(),
            start: start % (24 * 60),
            end,
        })
    }

    /// Whether a node with `labels` is in this window's pool.
    pub fn covers(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.get(&self.key) == Some(&self.value)
    }

    /// Where the window stands at `now` (epoch ms, UTC).
    pub fn at(&self, now: i64) -> WindowState {
        let midnight = now.div_euclid(DAY_MS) * DAY_MS;
        let minute = (now - midnight) / MINUTE_MS;
        let (start, end) = (self.start * MINUTE_MS, self.end * MINUTE_MS);
        let wraps = self.end <= self.start;
        // The window that contains `now`, if any: today's, or yesterday's
        // when it wraps past midnight.
        let open_until = if !wraps && (self.start..self.end).contains(&minute) {
            Some(midnight + end)
        } else if wraps && minute >= self.start {
            Some(midnight + DAY_MS + end)
        } else if wraps && minute < self.end {
            Some(midnight + end)
        } else {
            None
        };
        let today_start = midnight + start;
        let next_open = if today_start > now && open_until.is_none() {
            today_start
        } else if wraps && minute < self.end {
            // Open since yesterday: next opens this evening.
            today_start
        } else {
            today_start + DAY_MS
        };
        WindowState {
            label: format!(
                "{}={} {}-{} UTC",
                self.key,
                self.value,
                hhmm(self.start),
                hhmm(self.end)
            ),
            open_until,
            next_open,
        }
    }
}

fn hhmm(minutes: i64) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

impl WindowState {
    /// Why a job with `time_limit_ms` may not start now on a node of this
    /// window, if it may not.
    pub fn refuses(&self, time_limit_ms: Option<i64>, now: i64) -> Option<String> {
        let opens = || {
            format!(
                "it starts when the window opens at {} (in {})",
                crate::store::time::rfc3339(self.next_open),
                gpuplane_api::duration::format_seconds((self.next_open - now).div_euclid(1000).max(1))
            )
        };
        match (self.open_until, time_limit_ms) {
            (None, _) => Some(format!("scheduling window {} is closed: {}", self.label, opens())),
            (Some(until), Some(limit)) if now + limit > until => Some(format!(
                "its time limit {} does not fit in what is left of scheduling window {} ({}): {}",
                gpuplane_api::duration::format_seconds(limit / 1000),
                self.label,
                gpuplane_api::duration::format_seconds(((until - now) / 1000).max(0)),
                opens()
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01 at `hh:mm` UTC, in epoch ms.
    fn at(hh: i64, mm: i64) -> i64 {
        1_796_083_200_000 + (hh * 60 + mm) * MINUTE_MS
    }

    #[test]
    fn windows_parse_or_say_how_to_write_them() {
        let night = Window::parse("pool=night 20:00-06:00").unwrap();
        assert_eq!((night.start, night.end), (20 * 60, 6 * 60));
        assert_eq!(Window::parse(" gpu=a100  08:30-24:00 ").unwrap().end, 24 * 60);
        for bad in [
            "pool=night",
            "night 20:00-06:00",
            "pool=night 25:00-06:00",
            "pool=night 8-9",
            "pool=x 10:00-10:00",
        ] {
            let error = Window::parse(bad).unwrap_err();
            assert!(error.contains("LABEL=VALUE HH:MM-HH:MM"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_window_past_midnight_is_open_late_and_early_and_closed_by_day() {
        let night = Window::parse("pool=night 20:00-06:00").unwrap();
        let late = night.at(at(22, 0));
        assert_eq!((late.open_until, late.next_open), (Some(at(30, 0)), at(44, 0)));
        let early = night.at(at(5, 0));
        assert_eq!((early.open_until, early.next_open), (Some(at(6, 0)), at(20, 0)));
        let day = night.at(at(12, 0));
        assert_eq!((day.open_until, day.next_open), (None, at(20, 0)));
        assert_eq!(day.label, "pool=night 20:00-06:00 UTC");
    }

    #[test]
    fn a_window_within_a_day() {
        let office = Window::parse("pool=office 08:00-18:00").unwrap();
        assert_eq!(office.at(at(7, 59)).open_until, None);
        assert_eq!(office.at(at(7, 59)).next_open, at(8, 0));
        assert_eq!(office.at(at(8, 0)).open_until, Some(at(18, 0)));
        assert_eq!(office.at(at(18, 0)).open_until, None);
        assert_eq!(office.at(at(18, 0)).next_open, at(32, 0));
    }

    #[test]
    fn a_job_starts_only_if_its_time_limit_ends_inside_the_window() {
        let night = Window::parse("pool=night 20:00-06:00").unwrap();
        let hour = Some(3_600_000);
        let now = at(5, 30);
        let state = night.at(now);
        assert_eq!(
            state.refuses(hour, now).unwrap(),
            "its time limit 1h does not fit in what is left of scheduling window pool=night 20:00-06:00 UTC (30m): \
             it starts when the window opens at 2026-12-01T20:00:00.000Z (in 14h30m)"
        );
        assert_eq!(
            state.refuses(Some(1_800_000), now),
            None,
            "30 minutes fit exactly"
        );
        assert_eq!(
            state.refuses(None, now),
            None,
            "no limit: it may start while the window is open"
        );
        let noon = at(12, 0);
        assert_eq!(
            night.at(noon).refuses(None, noon).unwrap(),
            "scheduling window pool=night 20:00-06:00 UTC is closed: it starts when the window opens at 2026-12-01T20:00:00.000Z (in 8h)"
        );
    }
}
