//! Job dependencies (`after`): whether a queued job may be planned now,
//! must wait (and for which job), or can never run because a job it needs
//! ended the wrong way. Pure: the pass gives the statuses; table-driven tests.

use gpuplane_api::job::{Dependency, JobStatus};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every job it waits for has ended as it needs.
    Ready,
    /// The queued reason: `waiting for job_… (RUNNING)`.
    Waiting(String),
    /// Why it can never run: it fails with DEPENDENCY_FAILED.
    Never(String),
}

/// The verdict for a job waiting for `after`, given each job's status
/// (`None`: no such job).
pub fn verdict(after: &[Dependency], status_of: impl Fn(&str) -> Option<JobStatus>) -> Verdict {
    let mut waiting = Vec::new();
    for dependency in after {
        let id = &dependency.job_id;
        let Some(status) = status_of(id) else {
            return Verdict::Never(format!("the job it waits for, {id}, no longer exists"));
        };
        if !status.is_terminal() {
            let what = if dependency.any_end { " to end" } else { "" };
            waiting.push(format!("{id}{what} ({status})"));
        } else if !dependency.any_end && status != JobStatus::Succeeded {
            return Verdict::Never(format!(
                "{id} ended {status}, and this job runs only after it succeeds \
                 (retry {id}, then this job; or wait for any end with {id}:finished)"
            ));
        }
    }
    if waiting.is_empty() {
        Verdict::Ready
    } else {
        Verdict::Waiting(format!("waiting for {}", waiting.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;
    use std::collections::HashMap;

    #[test]
    fn every_way_a_dependency_holds_a_job() {
        let statuses = HashMap::from([
            ("job_run", JobStatus::Running),
            ("job_queued", JobStatus::Queued),
            ("job_ok", JobStatus::Succeeded),
            ("job_failed", JobStatus::Failed),
            ("job_cancelled", JobStatus::Cancelled),
        ]);
        let status_of = |id: &str| statuses.get(id).copied();
        let cases: &[&[&str]] = &[
            &[],
            &["job_ok"],
            &["job_ok", "job_failed:finished", "job_cancelled:finished"],
            &["job_run"],
            &["job_run:finished", "job_queued", "job_ok"],
            &["job_run", "job_failed"],
            &["job_cancelled"],
            &["job_gone:finished"],
        ];
        let rendered: String = cases
            .iter()
            .map(|after| {
                let after: Vec<Dependency> = after.iter().map(|text| text.parse().unwrap()).collect();
                format!("{:?}\n", verdict(&after, status_of))
            })
            .collect();
        expect![[r#"
            Ready
            Ready
            Ready
            Waiting("waiting for job_run (RUNNING)")
            Waiting("waiting for job_run to end (RUNNING), job_queued (QUEUED)")
            Never("job_failed ended FAILED, and this job runs only after it succeeds (retry job_failed, then this job; or wait for any end with job_failed:finished)")
            Never("job_cancelled ended CANCELLED, and this job runs only after it succeeds (retry job_cancelled, then this job; or wait for any end with job_cancelled:finished)")
            Never("the job it waits for, job_gone, no longer exists")
        "#]]
        .assert_eq(&rendered);
    }
}
