//! A multi-node attempt's members (`attempt_members`): one per node, rank 0
//! first, each with its node's GPUs and its own state. The scheduler stores
//! them with the attempt (whose row keeps rank 0's node and GPUs); each
//! member's agent reports its own part (`reports::members`); the attempt
//! ends at the first member that fails, or when every member has
//! succeeded, and `dispatch` then stops the others. A member holds its
//! GPUs until its own agent says its process is gone.

use crate::store::Error;
use crate::store::Tx;
use crate::store::sql;
use crate::store::time::rfc3339;
use gpuplane_api::job::{JobStatus, Member, signal_name};
use std::collections::HashMap;

/// An attempt as the node reporting about it sees it: the attempt's status
/// and, for a multi-node attempt, the rank of the node's member and its state.
#[derive(Debug, Clone, Copy)]
pub struct OnNode {
    pub attempt: JobStatus,
    pub member: Option<(i64, JobStatus)>,
}

/// The attempt's status if it runs on `node_id` (as a one-node attempt or
/// as one of its members), else None.
pub async fn on_node(
    conn: &mut Tx,
    node_id: &str,
    job_id: &str,
    attempt: i64,
) -> Result<Option<OnNode>, Error> {
    let row: Option<(String, Option<i64>, Option<String>)> = sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT a.status, m.node_rank, m.status FROM attempts a
             LEFT JOIN attempt_members m ON m.job_id = a.job_id AND m.attempt = a.n AND m.node_id = $3
             WHERE a.job_id = $1 AND a.n = $2 AND ((a.nodes = 1 AND a.node_id = $3) OR m.node_id IS NOT NULL)",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(node_id)
        .fetch_optional(conn)
        .await
    })?;
    let Some((status, rank, member_status)) = row else {
        return Ok(None);
    };
    let Ok(attempt) = status.parse() else {
        return Ok(None);
    };
    let member = match (rank, member_status.and_then(|s| s.parse().ok())) {
        (Some(rank), Some(state)) => Some((rank, state)),
        _ => None,
    };
    Ok(Some(OnNode { attempt, member }))
}

/// Stores a placed gang's members, rank 0 first, all DISPATCHING.
pub async fn insert(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    members: &[(&str, &[u32])],
) -> Result<(), Error> {
    for (rank, (node_id, gpus)) in members.iter().enumerate() {
        let gpus = serde_json::to_string(gpus).map_err(anyhow::Error::from)?;
        sql!(conn, |conn| {
            sqlx::query(
                "INSERT INTO attempt_members (job_id, attempt, node_rank, node_id, gpus, status)
                 VALUES ($1, $2, $3, $4, $5, 'DISPATCHING')",
            )
            .bind(job_id)
            .bind(attempt)
            .bind(rank as i64)
            .bind(*node_id)
            .bind(gpus)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
    }
    Ok(())
}

/// A member's process started; returns whether this changed its state. A
/// rank above 0 cannot have started before rank 0 chose the port it was
/// dispatched with: such a report changes nothing.
pub async fn started(conn: &mut Tx, job_id: &str, attempt: i64, rank: i64, time: i64) -> Result<bool, Error> {
    let changed = sql!(conn, |conn| {
        sqlx::query(
            "UPDATE attempt_members SET status = 'RUNNING', started_at = $1
             WHERE job_id = $2 AND attempt = $3 AND node_rank = $4 AND status = 'DISPATCHING'
               AND (node_rank = 0 OR EXISTS (SELECT 1 FROM attempts
                                             WHERE job_id = $2 AND n = $3 AND master_port IS NOT NULL))",
        )
        .bind(time)
        .bind(job_id)
        .bind(attempt)
        .bind(rank)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(changed > 0)
}

/// Rank 0's agent chose the rendezvous port: the other members may start.
pub async fn set_master_port(conn: &mut Tx, job_id: &str, attempt: i64, port: u16) -> Result<(), Error> {
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE attempts SET master_port = $1 WHERE job_id = $2 AND n = $3 AND master_port IS NULL",
        )
        .bind(i64::from(port))
        .bind(job_id)
        .bind(attempt)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// How one member ended.
#[derive(Debug, Clone, Copy)]
pub struct MemberEnd {
    pub status: JobStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub at: i64,
}

/// Records a member's end once; returns whether it was still active.
pub async fn end(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    rank: i64,
    end: MemberEnd,
) -> Result<bool, Error> {
    let changed = sql!(conn, |conn| {
        sqlx::query(
            "UPDATE attempt_members SET status = $1, exit_code = $2, signal = $3, ended_at = $4
             WHERE job_id = $5 AND attempt = $6 AND node_rank = $7 AND status IN ('DISPATCHING', 'RUNNING')",
        )
        .bind(end.status.as_str())
        .bind(end.exit_code.map(i64::from))
        .bind(end.signal.map(i64::from))
        .bind(end.at)
        .bind(job_id)
        .bind(attempt)
        .bind(rank)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(changed > 0)
}

/// A member's node went away (or its agent forgot it): the member is
/// LOST, and so is its attempt if it was still going (retried when
/// attempts remain; the other members are then stopped).
pub async fn lose(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    rank: i64,
    node_id: &str,
    detail: &str,
    now: i64,
) -> Result<(), Error> {
    let lost = MemberEnd {
        status: JobStatus::Lost,
        exit_code: None,
        signal: None,
        at: now,
    };
    end(conn, job_id, attempt, rank, lost).await?;
    let status: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT status FROM attempts WHERE job_id = $1 AND n = $2")
            .bind(job_id)
            .bind(attempt)
            .fetch_optional(conn)
            .await
    })?;
    if matches!(status.as_deref(), Some("DISPATCHING" | "RUNNING")) {
        let detail = format!("rank {rank}: {detail}");
        crate::jobs::lifecycle::lose_attempt(conn, job_id, attempt, node_id, &detail, now).await?;
    }
    Ok(())
}

/// Whether every member of the attempt has succeeded.
pub async fn all_succeeded(conn: &mut Tx, job_id: &str, attempt: i64) -> Result<bool, Error> {
    let others: i64 = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT count(*) FROM attempt_members WHERE job_id = $1 AND attempt = $2 AND status <> 'SUCCEEDED'",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_one(conn)
        .await
    })?;
    Ok(others == 0)
}

/// The nodes of an attempt's members (none for a one-node attempt).
pub async fn node_ids(conn: &mut Tx, job_id: &str, attempt: i64) -> Result<Vec<String>, Error> {
    Ok(sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT node_id FROM attempt_members WHERE job_id = $1 AND attempt = $2 ORDER BY node_rank",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_all(conn)
        .await
    })?)
}

/// A member as the hang monitor sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Placed {
    pub rank: i64,
    pub node_id: String,
    pub node: String,
    /// A JSON array of GPU indices.
    pub gpus: String,
    pub started_at: Option<i64>,
}

/// The members of an attempt with their nodes, in rank order (none for a
/// one-node attempt).
pub async fn placed(conn: &mut Tx, job_id: &str, attempt: i64) -> Result<Vec<Placed>, Error> {
    Ok(sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT m.node_rank AS rank, m.node_id, n.name AS node, m.gpus, m.started_at
             FROM attempt_members m JOIN nodes n ON n.id = m.node_id
             WHERE m.job_id = $1 AND m.attempt = $2 ORDER BY m.node_rank",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_all(conn)
        .await
    })?)
}

/// Where each member of the attempt is reached, in rank order: its node's
/// advertised address, else the host name its agent gave.
pub async fn addresses(conn: &mut Tx, job_id: &str, attempt: i64) -> Result<Vec<String>, Error> {
    Ok(sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT coalesce(n.address, n.hostname) FROM attempt_members m JOIN nodes n ON n.id = m.node_id
             WHERE m.job_id = $1 AND m.attempt = $2 ORDER BY m.node_rank",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_all(conn)
        .await
    })?)
}

/// The id, name and status of the node of one member.
pub async fn node_of(
    db: &crate::store::Db,
    job_id: &str,
    attempt: i64,
    rank: i64,
) -> Result<Option<(String, String, String)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT n.id, n.name, n.status FROM attempt_members m JOIN nodes n ON n.id = m.node_id
             WHERE m.job_id = $1 AND m.attempt = $2 AND m.node_rank = $3",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(rank)
        .fetch_optional(pool)
        .await
    })?)
}

#[derive(sqlx::FromRow)]
struct MemberRow {
    job_id: String,
    attempt: i64,
    node_rank: i64,
    node_id: String,
    node_name: String,
    address: Option<String>,
    gpus: String,
    status: String,
    started_at: Option<i64>,
    ended_at: Option<i64>,
    exit_code: Option<i64>,
    signal: Option<i64>,
}

/// The members of these jobs' attempts, keyed by (job, attempt), by rank.
pub async fn of_jobs(conn: &mut Tx, job_ids: &str) -> Result<HashMap<(String, i64), Vec<Member>>, Error> {
    let listed = conn.dialect().json_values("$1");
    let rows: Vec<MemberRow> = sql!(conn, |conn| {
        sqlx::query_as(&format!(
            "SELECT m.job_id, m.attempt, m.node_rank, m.node_id, n.name AS node_name, n.address, m.gpus,
                    m.status, m.started_at, m.ended_at, m.exit_code, m.signal
             FROM attempt_members m JOIN nodes n ON n.id = m.node_id
             WHERE m.job_id IN (SELECT value FROM {listed})
             ORDER BY m.job_id, m.attempt, m.node_rank"
        ))
        .bind(job_ids)
        .fetch_all(conn)
        .await
    })?;
    let mut members: HashMap<(String, i64), Vec<Member>> = HashMap::new();
    for row in rows {
        let signal = row.signal.map(|s| s as i32);
        members
            .entry((row.job_id, row.attempt))
            .or_default()
            .push(Member {
                rank: row.node_rank,
                node: row.node_name,
                node_id: row.node_id,
                address: row.address,
                gpus: serde_json::from_str(&row.gpus).unwrap_or_default(),
                state: row.status.parse().unwrap_or(JobStatus::Lost),
                started_at: row.started_at.map(rfc3339),
                ended_at: row.ended_at.map(rfc3339),
                exit_code: row.exit_code.map(|c| c as i32),
                signal,
                signal_name: signal.and_then(signal_name).map(str::to_string),
            });
    }
    Ok(members)
}
