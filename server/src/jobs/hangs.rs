//! Hangs found, not waited out (JOB_HUNG): a running job whose steps stop
//! advancing while its processes live (a rank stuck in a collective, a dead
//! data loader). The leader watches every RUNNING attempt's run: the
//! highest step it has logged, and how long each advance took to come.
//! An attempt is hung when no step came for `hang_factor` times its usual
//! wait (the median of its last advances) and for at least `hang_after_s`;
//! it is reported once per stall, with what its GPUs did meanwhile and its
//! last output lines; a multi-node attempt's report covers each member and
//! names the one that went quiet first (the earliest last output line or
//! busy GPU sample, by more than the usual wait). An attempt
//! that has advanced fewer than [`MIN_ADVANCES`] times has no usual pace
//! yet and is not judged, and each is judged by its own pace, so a job that
//! is merely slow never is.

use crate::events::{self, Links};
use crate::jobs::members::{self, Placed};
use crate::logs;
use crate::nodes::telemetry;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use crate::wake::{Wake, Wakes};
use gpuplane_api::duration::format_seconds;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::telemetry::gpu_key;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::sync::watch;

/// Advances seen before an attempt's pace is known.
pub const MIN_ADVANCES: usize = 3;
/// Advances its usual pace is the median of.
const KEEP_ADVANCES: usize = 20;
/// Output lines a JOB_HUNG event quotes (of each member).
const LAST_LINES: i64 = 5;
/// Members a JOB_HUNG event quotes, those that went quiet first.
const MEMBERS_QUOTED: usize = 4;
/// A GPU this busy (percent) is doing work.
const BUSY_PERCENT: f64 = 10.0;
/// How far before the last step a member's GPUs are looked at, ms.
const LOOK_BACK_MS: i64 = 10 * 60 * 1000;

/// When an attempt counts as hung.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Never before this long without a step.
    pub after_ms: i64,
    /// Nor before this many times its usual wait between advances.
    pub factor: i64,
}

/// What an attempt's run has done so far, as seen by the monitor.
#[derive(Debug)]
pub struct Progress {
    step: i64,
    /// When `step` was first seen.
    since_ms: i64,
    /// How long each of the last advances took to come, ms.
    waits: VecDeque<i64>,
    /// This stall was reported.
    reported: bool,
}

/// A stall just found: how long it has lasted and the usual wait, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub silent_ms: i64,
    pub usual_ms: i64,
    pub step: i64,
}

impl Progress {
    pub fn new(step: i64, now_ms: i64) -> Progress {
        Progress {
            step,
            since_ms: now_ms,
            waits: VecDeque::new(),
            reported: false,
        }
    }

    /// Takes the run's highest step at `now_ms`; a stall the moment the
    /// attempt becomes hung (once per stall).
    pub fn observe(&mut self, step: i64, now_ms: i64, rule: Rule) -> Option<Stall> {
        if step > self.step {
            if self.waits.len() == KEEP_ADVANCES {
                self.waits.pop_front();
            }
            self.waits.push_back(now_ms - self.since_ms);
            (self.step, self.since_ms, self.reported) = (step, now_ms, false);
            return None;
        }
        if self.reported || self.waits.len() < MIN_ADVANCES {
            return None;
        }
        let mut waits: Vec<i64> = self.waits.iter().copied().collect();
        waits.sort_unstable();
        let usual_ms = waits[waits.len() / 2];
        let silent_ms = now_ms - self.since_ms;
        if silent_ms < rule.after_ms.max(usual_ms.saturating_mul(rule.factor)) {
            return None;
        }
        self.reported = true;
        Some(Stall {
            silent_ms,
            usual_ms,
            step: self.step,
        })
    }
}

/// Watches running attempts until shutdown; `hang_after_s = 0` turns it off.
pub async fn monitor(db: Db, rule: Rule, wakes: Wakes, mut shutdown: watch::Receiver<bool>) {
    if rule.after_ms <= 0 {
        return;
    }
    // A tenth of the shortest stall it may report, within 0.2 s and 30 s.
    let period = Duration::from_millis((rule.after_ms / 10).clamp(200, 30_000) as u64);
    let mut watched: HashMap<(String, i64), Progress> = HashMap::new();
    loop {
        if let Err(error) = check(&db, rule, &wakes, &mut watched).await {
            tracing::warn!(%error, "hang check failed; will try again");
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// One look at every running attempt's highest step.
async fn check(
    db: &Db,
    rule: Rule,
    wakes: &Wakes,
    watched: &mut HashMap<(String, i64), Progress>,
) -> Result<(), Error> {
    #[derive(sqlx::FromRow)]
    struct Running {
        job_id: String,
        n: i64,
        node_id: String,
        run_id: String,
        /// A JSON array of GPU indices.
        gpus: String,
        started_at: Option<i64>,
        on_hang: Option<String>,
        step: Option<i64>,
    }
    let on_hang = db.dialect().json_field("j.spec", "on_hang");
    let running: Vec<Running> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT a.job_id, a.n, a.node_id, j.run_id, a.gpus, a.started_at, {on_hang} AS on_hang,
                    (SELECT max(s.latest_step) FROM metric_series s WHERE s.run_id = j.run_id) AS step
             FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.status = 'RUNNING' AND a.hung_at IS NULL"
        ))
        .fetch_all(pool)
        .await
    })?;
    let now = now_ms();
    let mut still_running = HashMap::with_capacity(running.len());
    for Running {
        job_id,
        n,
        node_id,
        run_id,
        gpus,
        started_at,
        on_hang,
        step,
    } in running
    {
        let key = (job_id, n);
        let mut progress = watched.remove(&key);
        if let Some(step) = step {
            let progress = progress.get_or_insert_with(|| Progress::new(step, now));
            if let Some(stall) = progress.observe(step, now, rule) {
                let mut tx = crate::store::read(db).await?;
                let mut members = members::placed(&mut tx, &key.0, n).await?;
                drop(tx);
                if members.is_empty() {
                    members.push(Placed {
                        rank: 0,
                        node_id,
                        node: String::new(),
                        gpus,
                        started_at,
                    });
                }
                let attempt = Stalled {
                    job_id: &key.0,
                    attempt: n,
                    run_id: &run_id,
                    members,
                    restart: on_hang.as_deref() == Some("restart"),
                };
                report(db, &attempt, stall).await?;
                wakes.wake(Wake::Events);
                if attempt.restart {
                    // Every member of a multi-node attempt stops.
                    for member in attempt.members {
                        wakes.wake(Wake::Agent(member.node_id));
                    }
                }
            }
        }
        if let Some(progress) = progress {
            still_running.insert(key, progress);
        }
    }
    *watched = still_running;
    Ok(())
}

/// A running attempt just found hung.
struct Stalled<'a> {
    job_id: &'a str,
    attempt: i64,
    run_id: &'a str,
    /// Its members, rank 0 first; a one-node attempt is its own rank 0.
    members: Vec<Placed>,
    /// Its spec says `on_hang = "restart"`.
    restart: bool,
}

/// What one member did up to the stall.
struct Seen {
    rank: i64,
    node: String,
    /// ` (GPU 0 averaged 3 % since its last step)`, or empty without telemetry.
    gpus: String,
    /// `its last output:\n…`, or `it printed nothing`.
    last: String,
    /// Its last sign of work (epoch ms): its last output line or busy GPU
    /// sample, else its start.
    quiet_since_ms: i64,
}

/// Looks at one member's GPUs (the agent's telemetry) and output around a
/// stall whose last step came at `last_step_ms`.
async fn look_at(
    db: &Db,
    stalled: &Stalled<'_>,
    member: &Placed,
    last_step_ms: i64,
    now: i64,
) -> Result<Seen, Error> {
    let gpus: Vec<u32> = serde_json::from_str(&member.gpus).unwrap_or_default();
    let started_at = member.started_at.unwrap_or(0);
    let to_s = |ms: i64| ms as f64 / 1000.0;
    let mut utilisation = Vec::new();
    let mut last_busy_ms = None;
    // Far enough back to see every member's GPUs go quiet, and no further.
    let window = (to_s(started_at.max(last_step_ms - LOOK_BACK_MS)), to_s(now));
    for &gpu in &gpus {
        let key = gpu_key(gpu, "utilization_percent");
        if let Some((mean, _)) =
            telemetry::mean(db, &member.node_id, &key, to_s(last_step_ms), to_s(now)).await?
        {
            utilisation.push(format!("GPU {gpu} averaged {mean:.0} %"));
        }
        if let Some(busy) = telemetry::last_at_least(db, &member.node_id, &key, window, BUSY_PERCENT).await? {
            last_busy_ms = last_busy_ms.max(Some((busy * 1000.0) as i64));
        }
    }
    let gpus = match utilisation.is_empty() {
        true => String::new(),
        false => format!(" ({} since its last step)", utilisation.join(", ")),
    };
    let mut tx = crate::store::read(db).await?;
    let lines = logs::recent_text(
        &mut tx,
        stalled.job_id,
        stalled.attempt,
        Some(member.rank),
        LAST_LINES,
    )
    .await?;
    let last_line_ms = logs::last_line_at(&mut tx, stalled.job_id, stalled.attempt, member.rank).await?;
    let last = match lines.is_empty() {
        true => "it printed nothing".to_string(),
        false => format!("its last output:\n{}", lines.join("\n")),
    };
    Ok(Seen {
        rank: member.rank,
        node: member.node.clone(),
        gpus,
        last,
        quiet_since_ms: started_at
            .max(last_busy_ms.unwrap_or(0))
            .max(last_line_ms.unwrap_or(0)),
    })
}

/// A JOB_HUNG event for the attempt, with what each member's GPUs did and
/// its last output lines (and, with several members, the one that went
/// quiet first); with `restart`, the attempt is marked to be stopped (its
/// agents are told on their next poll) and its end becomes a HUNG failure,
/// retried (`reports`).
async fn report(db: &Db, stalled: &Stalled<'_>, stall: Stall) -> Result<(), Error> {
    let Stalled {
        job_id,
        attempt,
        run_id,
        restart,
        ..
    } = *stalled;
    let now = now_ms();
    let last_step_ms = now - stall.silent_ms;
    let mut seen = Vec::with_capacity(stalled.members.len());
    for member in &stalled.members {
        seen.push(look_at(db, stalled, member, last_step_ms, now).await?);
    }
    let then = match restart {
        true => "; stopping it to retry from its last checkpoint (on_hang = restart)",
        false => "",
    };
    let no_step = format!(
        "attempt {attempt} has logged no step for {} after step {} (its usual wait between steps is {})",
        span(stall.silent_ms),
        stall.step,
        span(stall.usual_ms),
    );
    let message = match seen.as_mut_slice() {
        [one] => format!(
            "{no_step}, while its processes still run{}{then}; {}",
            one.gpus, one.last
        ),
        several => {
            several.sort_by_key(|member| (member.quiet_since_ms, member.rank));
            let first = match several {
                [first, second, ..]
                    if second.quiet_since_ms - first.quiet_since_ms > stall.usual_ms.max(1000) =>
                {
                    format!(
                        "rank {} on {} went quiet first, {} before the others",
                        first.rank,
                        first.node,
                        span(second.quiet_since_ms - first.quiet_since_ms)
                    )
                }
                _ => "its members went quiet together".to_string(),
            };
            let mut text = format!(
                "{no_step}, while the processes of its {} members still run; {first}{then}.",
                several.len()
            );
            for member in several.iter().take(MEMBERS_QUOTED) {
                text.push_str(&format!(
                    "\nrank {} on {}{}: {}",
                    member.rank, member.node, member.gpus, member.last
                ));
            }
            if several.len() > MEMBERS_QUOTED {
                text.push_str(&format!(
                    "\n(and {} more members, which went quiet later)",
                    several.len() - MEMBERS_QUOTED
                ));
            }
            text
        }
    };
    let mut tx = crate::store::write(db).await?;
    if restart {
        sql!(tx, |conn| {
            sqlx::query(
                "UPDATE attempts SET hung_at = $1 WHERE job_id = $2 AND n = $3 AND status = 'RUNNING'",
            )
            .bind(now)
            .bind(job_id)
            .bind(attempt)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
    }
    let links = Links {
        job_id: Some(job_id),
        run_id: Some(run_id),
        node_id: stalled.members.first().map(|member| member.node_id.as_str()),
    };
    events::record(
        &mut tx,
        now,
        Severity::Warning,
        EventKind::JobHung,
        links,
        &message,
    )
    .await?;
    tx.commit().await?;
    tracing::warn!(job_id, attempt, "{message}");
    Ok(())
}

/// A span for people: `0.4s`, `41s`, `12m30s`.
fn span(ms: i64) -> String {
    match ms {
        0..10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format_seconds(ms / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Rule = Rule {
        after_ms: 60_000,
        factor: 10,
    };

    /// Feeds `(time_s, step)` observations; the times (s) at which a stall was reported.
    fn stalls(observations: &[(i64, i64)]) -> Vec<i64> {
        let mut progress = Progress::new(observations[0].1, observations[0].0 * 1000);
        observations[1..]
            .iter()
            .filter_map(|&(time, step)| progress.observe(step, time * 1000, RULE).map(|_| time))
            .collect()
    }

    #[test]
    fn a_job_that_stops_advancing_is_hung_once_after_its_usual_wait_times_the_factor() {
        // A step every 10 s up to 50 s, then nothing: usual 10 s, so hung at 100 s of silence.
        let mut seen: Vec<(i64, i64)> = (0..=5).map(|i| (i * 10, i)).collect();
        seen.extend((6..=20).map(|i| (i * 10, 5)));
        assert_eq!(stalls(&seen), [150]);
    }

    #[test]
    fn a_slow_job_is_judged_by_its_own_pace_and_never_found_hung() {
        // A step every 5 minutes, with one pause of 20 minutes (an evaluation): never hung.
        let mut seen = Vec::new();
        let mut time = 0;
        for step in 0..30 {
            time += if step == 15 { 1200 } else { 300 };
            for t in (time - 290..time).step_by(30) {
                seen.push((t, step.max(1) - 1));
            }
            seen.push((time, step));
        }
        assert_eq!(stalls(&seen), Vec::<i64>::new());
    }

    #[test]
    fn a_fast_job_is_not_hung_before_the_minimum_and_not_before_it_has_a_pace() {
        // Steps every second: hung only after the 60 s minimum.
        let mut seen: Vec<(i64, i64)> = (0..=10).map(|i| (i, i)).collect();
        seen.extend((11..=80).map(|t| (t, 10)));
        assert_eq!(stalls(&seen), [70]);
        // Two advances, then silence: no pace yet, never judged.
        let seen: Vec<(i64, i64)> = [(0, 0), (1, 1), (2, 2)]
            .into_iter()
            .chain((3..500).map(|t| (t, 2)))
            .collect();
        assert_eq!(stalls(&seen), Vec::<i64>::new());
    }

    #[test]
    fn a_job_that_advances_again_may_be_found_hung_again() {
        let mut seen: Vec<(i64, i64)> = (0..=5).map(|i| (i, i)).collect();
        seen.extend((6..=70).map(|t| (t, 5)));
        seen.push((71, 6));
        seen.extend((72..=140).map(|t| (t, 6)));
        assert_eq!(stalls(&seen), [65, 131]);
    }
}
