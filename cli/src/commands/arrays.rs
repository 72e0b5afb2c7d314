//! Job arrays from the terminal: `gpuctl job submit --array 0-99%8`
//! queues a task per index; an array id (`arr_…`) given to `gpuctl job
//! show` or `gpuctl job cancel` shows or cancels every task, and `gpuctl
//! job list --array ID` lists them.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::array::{ArrayCancelled, JobArray};
use gpuplane_api::job::{CancelRequest, Job};

/// Whether `id` names a job array rather than a job.
pub fn is_array_id(id: &str) -> bool {
    id.starts_with("arr_")
}

pub async fn show(client: &Client, array_id: &str, out: &Output) -> Result<(), CliError> {
    let array: JobArray = client.get(&format!("arrays/{array_id}")).await?;
    out.emit(&array, render);
    Ok(())
}

pub async fn cancel(client: &Client, array_id: &str, out: &Output) -> Result<(), CliError> {
    let done: ArrayCancelled = client
        .post(
            &format!("arrays/{array_id}/cancel"),
            &CancelRequest { confirm: true },
        )
        .await?;
    out.emit(&done, |done| {
        format!(
            "Cancelled {} tasks of {} (running ones get SIGTERM, then SIGKILL after the grace period).\n{}",
            done.cancelled,
            done.array.id,
            render(&done.array)
        )
    });
    Ok(())
}

/// What `gpuctl job submit` says for the first task of a new array.
pub fn submitted(job: &Job) -> Option<String> {
    let array = job.array.as_ref()?;
    let limit = array
        .limit
        .map(|limit| format!(", at most {limit} at once"))
        .unwrap_or_default();
    Some(format!(
        "Submitted array {} ({} tasks{limit}; the first is {}).\nIts tasks: gpuctl job list --array {}",
        array.id, array.tasks, job.id, array.id
    ))
}

/// `gpuctl job show`'s line for a task: its index and its array.
pub fn task_line(job: &Job) -> Option<String> {
    let array = job.array.as_ref()?;
    Some(format!(
        "array      task {} of {} ({} tasks; gpuctl job show {})",
        array.index, array.id, array.tasks, array.id
    ))
}

fn render(array: &JobArray) -> String {
    let limit = array
        .limit
        .map(|limit| format!(", at most {limit} at once"))
        .unwrap_or_default();
    let states: Vec<String> = array
        .states
        .iter()
        .map(|(state, count)| format!("{count} {state}"))
        .collect();
    format!(
        "{}  {}  (project {})\ntasks      {} ({}{limit})\nstates     {}\nsubmitted  {} by {}\n",
        array.id,
        array.name,
        array.project,
        array.tasks,
        array.array,
        states.join(", "),
        array.created_at,
        array.submitted_by.as_deref().unwrap_or("-")
    )
}
