//! Where a job that goes back to the queue picks up (#46): the run's latest
//! checkpoint, recorded on the job when it is queued again (after a
//! preemption, a transient failure or a user's retry) and copied onto the
//! attempt the scheduler places next (on the host that recorded it when
//! that host fits: `plan` prefers it), which gets it as `GPUCTL_RESUME_FROM`
//! and `GPUCTL_RESUME_STEP`. When the checkpoint's step is known, the
//! points and texts logged past it are set aside (`metrics::rewind`), so
//! the next attempt continues the run's curves instead of doubling them.

use crate::metrics::rewind::{Rewound, rewind};
use crate::runs::checkpoints;
use crate::store::sql;
use crate::store::{Error, Tx};

/// Where the job's next attempt resumes, and what was set aside for it.
pub struct ResumePoint {
    pub path: String,
    pub step: Option<i64>,
    pub rewound: Rewound,
}

impl ResumePoint {
    /// A few words for the job's queued reason ("" when there is no checkpoint).
    pub fn describe(&self) -> String {
        match (self.path.is_empty(), self.step) {
            (true, _) => String::new(),
            (false, Some(step)) => format!("; resumes from step {step}"),
            (false, None) => "; resumes from its latest checkpoint".to_string(),
        }
    }
}

/// Records on a job that is being queued again where its next attempt
/// resumes, and rewinds its run to that step.
pub async fn prepare(conn: &mut Tx, job_id: &str) -> Result<ResumePoint, Error> {
    let (run_id, attempt): (String, i64) = sql!(conn, |conn| {
        sqlx::query_as("SELECT run_id, attempt_count FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_one(conn)
            .await
    })?;
    let (path, step, node_id) = checkpoints::latest(conn, &run_id).await?.unwrap_or_default();
    let rewound = match step {
        Some(step) => rewind(conn, &run_id, attempt, step).await?,
        None => Rewound::default(),
    };
    sql!(conn, |conn| {
        sqlx::query("UPDATE jobs SET resume_path = $1, resume_step = $2, resume_node = $3 WHERE id = $4")
            .bind(&path)
            .bind(step)
            .bind(&node_id)
            .bind(job_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    if rewound != Rewound::default() {
        tracing::info!(
            job_id,
            run_id,
            step,
            points = rewound.points,
            texts = rewound.texts,
            "set aside what the run logged past the step its next attempt resumes from"
        );
    }
    Ok(ResumePoint { path, step, rewound })
}
