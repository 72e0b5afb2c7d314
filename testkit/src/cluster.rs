//! A test cluster: a real server (in this process, on a free port, over a
//! temporary SQLite file) and real agent processes with simulated GPUs.

use crate::http::answer;
use crate::{WAIT, agent_token, binary, eventually, start_server_with, user_token};
use gpuplane_api::Page;
use gpuplane_api::auth::Scope;
use gpuplane_api::event::Event;
use gpuplane_api::job::{Job, JobStatus};
use gpuplane_api::log::Logs;
use gpuplane_api::paths::PREFIX;
use gpuplane_server::config::ServerConfig;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub server: gpuplane_server::RunningServer,
    pub http: reqwest::Client,
    pub token: String,
    /// Each node's own agent token (a token speaks for one node only).
    agent_tokens: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

/// An agent process, killed when the test ends.
pub struct Agent {
    pub child: Child,
    pub jobs_dir: PathBuf,
}

impl Agent {
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
        assert!(status.unwrap().success(), "kill -{signal}");
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Cluster {
    pub async fn start() -> Cluster {
        Cluster::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let server = start_server_with(&dir.path().join("server"), configure).await;
        let token = user_token(&server.state.db, "tester", Scope::Write, true).await;
        Cluster {
            dir,
            server,
            http: reqwest::Client::new(),
            token,
            agent_tokens: Default::default(),
        }
    }

    /// Stops the server (its tasks too, so nothing writes any more); the
    /// returned directory keeps its data until dropped.
    pub async fn stop_server(self) -> tempfile::TempDir {
        self.server.stop().await.unwrap();
        self.dir
    }

    /// The agent token of the node named `name`, made on first use.
    pub fn agent_token(&self, name: &str) -> String {
        let mut tokens = self.agent_tokens.lock().unwrap();
        tokens
            .entry(name.to_string())
            .or_insert_with(|| {
                let db = self.server.state.db.clone();
                tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(agent_token(&db)))
            })
            .clone()
    }

    /// Starts an agent named `name` with `gpus` simulated GPUs and its own jobs dir.
    pub fn agent(&self, name: &str, gpus: u32, extra: &[&str]) -> Agent {
        let jobs_dir = self.dir.path().join("agents").join(name);
        self.agent_in(name, gpus, &jobs_dir, extra)
    }

    /// Starts an agent over an existing jobs dir (a restarted agent).
    pub fn agent_in(&self, name: &str, gpus: u32, jobs_dir: &std::path::Path, extra: &[&str]) -> Agent {
        self.agent_at(&self.server.url, name, gpus, jobs_dir, extra)
    }

    /// Starts an agent that reaches the server at `server` (a
    /// [`crate::netcut::Link`] to it, say).
    pub fn agent_at(
        &self,
        server: &str,
        name: &str,
        gpus: u32,
        jobs_dir: &std::path::Path,
        extra: &[&str],
    ) -> Agent {
        let mut command = self.agent_command_at(server, name, gpus, jobs_dir);
        command.args(["--token", &self.agent_token(name)]).args(extra);
        // The test host's own disk may be nearly full; a DISK_LOW event
        // would then change what a failure is explained as. Tests of
        // DISK_LOW give their own reading.
        if !extra.contains(&"--disk-free-percent-override") {
            command.args(["--disk-free-percent-override", "50"]);
        }
        Agent {
            child: command.spawn().unwrap(),
            jobs_dir: jobs_dir.to_path_buf(),
        }
    }

    /// The command line of an agent named `name`, without its token, its
    /// log appended to `agent-NAME.log` (a restarted agent's follows the first's).
    pub fn agent_command(&self, name: &str, gpus: u32, jobs_dir: &std::path::Path) -> Command {
        self.agent_command_at(&self.server.url, name, gpus, jobs_dir)
    }

    fn agent_command_at(&self, server: &str, name: &str, gpus: u32, jobs_dir: &std::path::Path) -> Command {
        self.agent_command_from(&binary("gpuplane-agent"), server, name, gpus, jobs_dir)
    }

    /// Like [`Cluster::agent_command`], running the agent binary at `program`
    /// (a copy that a test replaces while it runs, say).
    pub fn agent_command_from(
        &self,
        program: &std::path::Path,
        server: &str,
        name: &str,
        gpus: u32,
        jobs_dir: &std::path::Path,
    ) -> Command {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("agent-{name}.log")))
            .unwrap();
        let mut command = Command::new(program);
        command
            .args(["--server", server, "--name", name])
            .args(["--fake-gpus", &gpus.to_string()])
            .arg("--jobs-dir")
            .arg(jobs_dir)
            .env("GPUPLANE_LOG", "info,gpuplane_agent=debug")
            .stdout(Stdio::null())
            .stderr(log);
        command
    }

    /// Every point of the run's `key` as (step, value), none thinned out.
    pub async fn series(&self, run_id: &str, key: &str) -> Vec<(i64, Value)> {
        let (status, body) = self
            .get(&format!("/runs/{run_id}/metrics?key={key}&max_points=100000"))
            .await;
        assert_eq!(status, 200, "{body}");
        body["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["step"].as_i64().unwrap(), p["value"].clone()))
            .collect()
    }

    /// Waits until `count` nodes are ONLINE.
    pub async fn wait_for_nodes(&self, count: usize) {
        eventually("nodes to come online", WAIT, || async {
            let nodes: Value = self.get("/nodes").await.1;
            let online = nodes["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["status"] == "ONLINE")
                .count();
            (online >= count).then_some(())
        })
        .await;
    }

    /// `GET` an API path (`/jobs`: under `/api/v1`) with the cluster's user token.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None, &self.token).await
    }

    /// The body of a `GET` of an API path as text (an SVG chart); panics
    /// unless it answers 200.
    pub async fn get_text(&self, path: &str) -> String {
        let response = self
            .http
            .get(format!("{}{PREFIX}{path}", self.server.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        assert_eq!(status.as_u16(), 200, "{path}: {body}");
        body
    }

    /// The kinds of a run's diagnosis findings, in order.
    pub async fn findings(&self, run_id: &str) -> Vec<String> {
        let (status, diagnosis) = self.get(&format!("/runs/{run_id}/diagnosis")).await;
        assert_eq!(status, 200, "{diagnosis}");
        diagnosis["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_string())
            .collect()
    }

    /// `POST` JSON to an API path (under `/api/v1`) with the cluster's user token.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body), &self.token)
            .await
    }

    /// Any request to an API path (under `/api/v1`) with `token`.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        token: &str,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{PREFIX}{path}", self.server.url))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let (status, body) = answer(request.send().await.unwrap()).await;
        (status.as_u16(), body)
    }

    /// Sets `project`'s node policy (`{"labels": …, "runners": […]}`) with
    /// the cluster's admin token; panics unless it is accepted.
    pub async fn set_node_policy(&self, project: &str, policy: Value) {
        let path = format!("/projects/{project}/node-policy");
        let (status, body) = self
            .call(reqwest::Method::PUT, &path, Some(policy), &self.token)
            .await;
        assert_eq!(status, 200, "{body}");
    }

    /// Submits a job spec; panics unless it is accepted.
    pub async fn submit(&self, spec: Value) -> Job {
        let (status, body) = self.post("/jobs", spec).await;
        assert_eq!(status, 201, "{body}");
        serde_json::from_value(body).unwrap()
    }

    pub async fn job(&self, id: &str) -> Job {
        let (status, body) = self.get(&format!("/jobs/{id}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }

    /// Waits until the job is in `status`; on timeout, or when it has
    /// ended in another state for 3 s, panics with the job as it last was, its output and
    /// the agents' logs, so a failure explains itself.
    pub async fn wait_for(&self, id: &str, status: JobStatus) -> Job {
        let started = std::time::Instant::now();
        // Ended otherwise, and still so a while later (a retry may requeue it).
        let mut ended_since = None;
        loop {
            let job = self.job(id).await;
            if job.status == status {
                return job;
            }
            let ended = job.status.is_terminal();
            let since = *ended_since.get_or_insert_with(std::time::Instant::now);
            if !ended {
                ended_since = None;
            } else if since.elapsed() > std::time::Duration::from_secs(3) {
                panic!(
                    "job {id} ended {} while the test waits for {status}:\n{}\nstdout: {:?}\nstderr: {:?}\n{}",
                    job.status,
                    serde_json::to_string_pretty(&job).unwrap_or_default(),
                    self.output(id, "stdout").await,
                    self.output(id, "stderr").await,
                    self.agent_logs()
                );
            }
            if started.elapsed() > WAIT {
                panic!(
                    "timed out after {WAIT:?} waiting for job {id} to be {status}; it is:\n{}\n{}",
                    serde_json::to_string_pretty(&job).unwrap_or_default(),
                    self.agent_logs()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits until the job's queued reason contains `part`.
    pub async fn wait_for_reason(&self, id: &str, part: &str) -> Job {
        self.wait_until(id, &format!("a queued reason with `{part}`"), |job| {
            job.queued_reason
                .as_deref()
                .is_some_and(|reason| reason.contains(part))
        })
        .await
    }

    /// Waits until `check` holds for the job.
    pub async fn wait_until(&self, id: &str, what: &str, check: impl Fn(&Job) -> bool) -> Job {
        eventually(what, WAIT, || async {
            let job = self.job(id).await;
            check(&job).then_some(job)
        })
        .await
    }

    pub async fn logs(&self, id: &str, query: &str) -> Logs {
        let (status, body) = self.get(&format!("/jobs/{id}/logs?{query}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }

    /// The text of a job's kept lines of one stream.
    pub async fn output(&self, id: &str, stream: &str) -> Vec<String> {
        self.logs(id, &format!("stream={stream}&tail=10000"))
            .await
            .lines
            .into_iter()
            .map(|l| l.text)
            .collect()
    }

    pub async fn events(&self, query: &str) -> Vec<Event> {
        let (status, body) = self.get(&format!("/events?{query}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value::<Page<Event>>(body).unwrap().items
    }

    /// Every agent's log, each under its file name (for failure messages).
    pub fn agent_logs(&self) -> String {
        let mut logs = String::new();
        let mut entries: Vec<_> = std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("agent-"))
            })
            .collect();
        entries.sort();
        for path in entries {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            logs.push_str(&format!("--- {}\n{text}", path.display()));
        }
        logs
    }

    /// The log of the agents named `name` (for failure messages).
    pub fn agent_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("agent-{name}.log"))).unwrap_or_default()
    }

    /// A fresh directory for a job to work in.
    pub fn workdir(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join("work").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

/// `["sh", "-c", script]`.
pub fn sh(script: &str) -> Value {
    serde_json::json!(["sh", "-c", script])
}
