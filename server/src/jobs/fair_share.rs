//! Fair share: the order of queued jobs of equal priority. The project
//! that used fewer GPU-hours in the window goes first, then, within a
//! project, the user who used fewer; submit time breaks ties. A job that
//! has waited `max_wait` is no longer passed (it ages out of fair share
//! and goes by submit time, ahead of the jobs still sorted by use), so
//! nothing starves. Priorities stay absolute: fair share never moves a job
//! past one of another priority.
//!
//! [`order`] is pure, like `plan`; [`usage`] reads the GPU time of the
//! window's attempts from the database.

use crate::jobs::plan::QueuedJob;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use std::cmp::Reverse;
use std::collections::HashMap;

/// GPU time used in the window, in GPU-milliseconds, by project name and by
/// user id.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub projects: HashMap<String, i64>,
    pub users: HashMap<String, i64>,
}

impl Usage {
    fn of_project(&self, project: &str) -> i64 {
        self.projects.get(project).copied().unwrap_or(0)
    }

    fn of_user(&self, user: Option<&str>) -> i64 {
        user.and_then(|user| self.users.get(user)).copied().unwrap_or(0)
    }
}

/// The rules of one pass.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// The window in ms; 0 is first come, first served.
    pub window_ms: i64,
    /// After this long in the queue (ms) a job goes by submit time.
    pub max_wait_ms: i64,
}

/// Sorts `queue` (highest priority first, FIFO within a priority, as
/// `load_queue` reads it) into fair-share order, and gives each job that a
/// later-submitted job of its priority now passes a note saying why.
pub fn order(queue: &mut [QueuedJob], usage: &Usage, policy: Policy, now_ms: i64) {
    if !applies(queue, policy) {
        return;
    }
    // A stable sort: equal keys keep the queue's own order (submit time, then seq).
    queue.sort_by_cached_key(|job| {
        let aged = now_ms - job.queued_at >= policy.max_wait_ms;
        let (project_use, user_use) = if aged {
            (0, 0)
        } else {
            (usage.of_project(&job.project), usage.of_user(job.user.as_deref()))
        };
        (Reverse(job.priority), !aged, project_use, user_use, job.queued_at)
    });
    // A job passed by one submitted after it (same priority) says why.
    let mut latest_ahead: Option<(i64, i64)> = None; // (priority, latest queued_at so far)
    for job in queue.iter_mut() {
        latest_ahead = match latest_ahead {
            Some((priority, latest)) if priority == job.priority => {
                if latest > job.queued_at {
                    job.fair_share_note = Some(note(job, usage, policy));
                }
                Some((priority, latest.max(job.queued_at)))
            }
            _ => Some((job.priority, job.queued_at)),
        };
    }
}

/// Whether fair share can change anything: it is on and the queue holds
/// jobs of more than one project or user (else `usage` need not be read).
pub fn applies(queue: &[QueuedJob], policy: Policy) -> bool {
    policy.window_ms > 0
        && queue.first().is_some_and(|first| {
            queue
                .iter()
                .any(|job| job.project != first.project || job.user != first.user)
        })
}

fn note(job: &QueuedJob, usage: &Usage, policy: Policy) -> String {
    let time = |ms: i64| gpuplane_api::duration::format_seconds(ms / 1000);
    let mut used = format!(
        "project {} used {} of GPU time",
        job.project,
        time(usage.of_project(&job.project))
    );
    if job.user.is_some() {
        used.push_str(&format!(
            ", its user {}",
            time(usage.of_user(job.user.as_deref()))
        ));
    }
    format!(
        "fair share: jobs of less-used projects or users go first ({used}, in the last {}; \
         after {} in the queue it goes by submit time)",
        time(policy.window_ms),
        time(policy.max_wait_ms)
    )
}

/// GPU time per project and per user of attempts that held GPUs inside the
/// window `[now - window_ms, now]`: running ones up to now.
pub async fn usage(db: &Db, window_ms: i64, now_ms: i64) -> Result<Usage, Error> {
    let mut usage = Usage::default();
    if window_ms <= 0 {
        return Ok(usage);
    }
    let since = now_ms - window_ms;
    // Ended attempts by the ended_at index, active ones by attempts_active.
    let dialect = db.dialect();
    let held_ms = format!(
        "{} * ({} - {})",
        dialect.json_length("a.gpus"),
        dialect.least("coalesce(a.ended_at, $1)", "$1"),
        dialect.greatest("a.started_at", "$2")
    );
    let rows: Vec<(String, Option<String>, i64)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT j.project, j.submitted_by, CAST(sum({held_ms}) AS BIGINT)
         FROM (SELECT * FROM attempts WHERE ended_at > $2
               UNION ALL
               SELECT * FROM attempts WHERE status IN ('DISPATCHING', 'RUNNING')) a
         JOIN jobs j ON j.id = a.job_id
         WHERE a.started_at IS NOT NULL AND a.gpus != '[]'
         GROUP BY j.project, j.submitted_by"
        ))
        .bind(now_ms)
        .bind(since)
        .fetch_all(pool)
        .await
    })?;
    for (project, user, gpu_ms) in rows {
        let gpu_ms = gpu_ms.max(0);
        *usage.projects.entry(project).or_default() += gpu_ms;
        if let Some(user) = user {
            *usage.users.entry(user).or_default() += gpu_ms;
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const HOUR: i64 = 3_600_000;
    const POLICY: Policy = Policy {
        window_ms: 7 * 24 * HOUR,
        max_wait_ms: 24 * HOUR,
    };

    fn job(id: &str, priority: i64, project: &str, user: &str, queued_at: i64) -> QueuedJob {
        QueuedJob {
            id: id.to_string(),
            gpus: 1,
            priority,
            node_selector: BTreeMap::new(),
            runner: gpuplane_api::job::Runner::Process,
            not_before: None,
            next_attempt: 1,
            max_attempts: 1,
            project: project.to_string(),
            user: Some(user.to_string()),
            after: Vec::new(),
            queued_at,
            fair_share_note: None,
            time_limit_ms: None,
            resume_node: None,
            nodes: 1,
            colocate: None,
            array: None,
        }
    }

    fn usage(projects: &[(&str, i64)], users: &[(&str, i64)]) -> Usage {
        let hours = |pairs: &[(&str, i64)]| pairs.iter().map(|(k, h)| (k.to_string(), h * HOUR)).collect();
        Usage {
            projects: hours(projects),
            users: hours(users),
        }
    }

    /// The queue's ids after `order`, a `*` on each job that got a note.
    fn ordered(mut queue: Vec<QueuedJob>, usage: &Usage, policy: Policy, now: i64) -> Vec<String> {
        order(&mut queue, usage, policy, now);
        queue
            .iter()
            .map(|job| {
                format!(
                    "{}{}",
                    job.id,
                    if job.fair_share_note.is_some() { "*" } else { "" }
                )
            })
            .collect()
    }

    #[test]
    fn within_a_priority_the_less_used_project_then_user_goes_first() {
        let queue = vec![
            job("vision-alice", 0, "vision", "alice", 1),
            job("vision-bob", 0, "vision", "bob", 2),
            job("nlp-carol", 0, "nlp", "carol", 3),
        ];
        let used = usage(&[("vision", 100), ("nlp", 10)], &[("alice", 90), ("bob", 10)]);
        assert_eq!(
            ordered(queue, &used, POLICY, 10),
            ["nlp-carol", "vision-bob*", "vision-alice*"]
        );
    }

    #[test]
    fn priorities_stay_absolute() {
        let queue = vec![
            job("urgent-heavy", 5, "vision", "alice", 2),
            job("light", 0, "nlp", "carol", 1),
        ];
        let used = usage(&[("vision", 1000)], &[("alice", 1000)]);
        assert_eq!(ordered(queue, &used, POLICY, 10), ["urgent-heavy", "light"]);
    }

    #[test]
    fn equal_use_keeps_submit_order_and_notes_nobody() {
        let queue = vec![
            job("a", 0, "vision", "alice", 1),
            job("b", 0, "nlp", "carol", 2),
            job("c", 0, "audio", "dan", 3),
        ];
        assert_eq!(ordered(queue, &Usage::default(), POLICY, 10), ["a", "b", "c"]);
    }

    #[test]
    fn a_job_waiting_past_max_wait_is_no_longer_passed() {
        let now = 30 * HOUR;
        let queue = vec![
            job("heavy-old", 0, "vision", "alice", 0),
            job("heavy-new", 0, "vision", "alice", 29 * HOUR),
            job("light", 0, "nlp", "carol", 29 * HOUR + 1),
        ];
        let used = usage(&[("vision", 500)], &[("alice", 500)]);
        // heavy-old waited 30 h > 24 h: it goes first; heavy-new is still
        // passed by the lighter project.
        assert_eq!(
            ordered(queue, &used, POLICY, now),
            ["heavy-old", "light", "heavy-new*"]
        );
    }

    #[test]
    fn a_zero_window_is_first_come_first_served() {
        let queue = vec![
            job("heavy", 0, "vision", "alice", 1),
            job("light", 0, "nlp", "carol", 2),
        ];
        let used = usage(&[("vision", 500)], &[]);
        let off = Policy {
            window_ms: 0,
            ..POLICY
        };
        assert_eq!(ordered(queue, &used, off, 10), ["heavy", "light"]);
    }

    #[test]
    fn the_note_names_the_use_window_and_aging() {
        let mut queue = vec![
            job("heavy", 0, "vision", "alice", 1),
            job("light", 0, "nlp", "carol", 2),
        ];
        let used = usage(&[("vision", 12)], &[("alice", 3)]);
        order(&mut queue, &used, POLICY, 10);
        assert_eq!(
            queue[1].fair_share_note.as_deref(),
            Some(
                "fair share: jobs of less-used projects or users go first (project vision used 12h of \
                 GPU time, its user 3h, in the last 7d; after 1d in the queue it goes by submit time)"
            )
        );
    }
}
