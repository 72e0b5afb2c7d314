//! Hangs found, not waited out (JOB_HUNG): a running job whose steps stop
//! advancing while its processes live (a rank stuck in a collective, a dead
//! data loader). The leader watches every RUNNING attempt's run: the
//! highest step it has logged, and how long each advance took to come.
//! An attempt is hung when no step came for `hang_factor` times its usual
//! wait (the median of its last advances) and for at least `hang_after_s`;
//! it is reported once per stall, with what its GPUs did meanwhile and its
//! last output lines. An attempt
//! that has advanced fewer than [`MIN_ADVANCES`] times has no usual pace
//! yet and is not judged, and each is judged by its own pace, so a job that
//! is merely slow never is.

use crate::events::{self, Links};
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
/// Output lines a JOB_HUNG event quotes.
const LAST_LINES: i64 = 5;

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
        on_hang: Option<String>,
        step: Option<i64>,
    }
    let on_hang = db.dialect().json_field("j.spec", "on_hang");
    let running: Vec<Running> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT a.job_id, a.n, a.node_id, j.run_id, a.gpus, {on_hang} AS on_hang,
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
        on_hang,
        step,
    } in running
    {
        let key = (job_id, n);
        let mut progress = watched.remove(&key);
        if let Some(step) = step {
            let progress = progress.get_or_insert_with(|| Progress::new(step, now));
            if let Some(stall) = progress.observe(step, now, rule) {
                let attempt = Stalled {
                    job_id: &key.0,
                    attempt: n,
                    node_id: &node_id,
                    run_id: &run_id,
                    gpus: serde_json::from_str(&gpus).unwrap_or_default(),
                    restart: on_hang.as_deref() == Some("restart"),
                };
                report(db, &attempt, stall).await?;
                wakes.wake(Wake::Events);
                if attempt.restart {
                    // Every member of a multi-node attempt stops.
                    let mut tx = crate::store::read(db).await?;
                    let mut nodes = crate::jobs::members::node_ids(&mut tx, &key.0, n).await?;
                    nodes.push(node_id.clone());
                    for node_id in nodes {
                        wakes.wake(Wake::Agent(node_id));
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
    node_id: &'a str,
    run_id: &'a str,
    gpus: Vec<u32>,
    /// Its spec says `on_hang = "restart"`.
    restart: bool,
}

/// A JOB_HUNG event for the attempt, with its last output lines; with
/// `restart`, the attempt is marked to be stopped (its agent is told on its
/// next poll) and its end becomes a HUNG failure, retried (`reports`).
async fn report(db: &Db, stalled: &Stalled<'_>, stall: Stall) -> Result<(), Error> {
    let Stalled {
        job_id,
        attempt,
        node_id,
        run_id,
        restart,
        ..
    } = *stalled;
    let now = now_ms();
    // What its GPUs did since its last step (from the agent's telemetry).
    let (since_s, now_s) = ((now - stall.silent_ms) as f64 / 1000.0, now as f64 / 1000.0);
    let mut utilisation = Vec::new();
    for &gpu in &stalled.gpus {
        let key = gpu_key(gpu, "utilization_percent");
        if let Some((mean, _)) = telemetry::mean(db, node_id, &key, since_s, now_s).await? {
            utilisation.push(format!("GPU {gpu} averaged {mean:.0} %"));
        }
    }
    let gpus = match utilisation.is_empty() {
        true => String::new(),
        false => format!(" ({} since its last step)", utilisation.join(", ")),
    };
    let mut tx = crate::store::write(db).await?;
    let lines = logs::recent_text(&mut tx, job_id, attempt, None, LAST_LINES).await?;
    let last = match lines.is_empty() {
        true => "it printed nothing".to_string(),
        false => format!("its last output:\n{}", lines.join("\n")),
    };
    let then = match restart {
        true => "; stopping it to retry from its last checkpoint (on_hang = restart)",
        false => "",
    };
    let message = format!(
        "attempt {attempt} has logged no step for {} after step {} (its usual wait between steps is {}), \
         while its processes still run{gpus}{then}; {last}",
        span(stall.silent_ms),
        stall.step,
        span(stall.usual_ms),
    );
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
        node_id: Some(node_id),
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
