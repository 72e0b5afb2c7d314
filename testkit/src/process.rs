//! The real `gpuplane-server` binary as a child process over a data dir
//! that outlives it: started, killed with SIGKILL (no shutdown code runs),
//! checked while it is down, and started again on the same address so its
//! agents and clients reconnect. For faults an in-process server cannot have.

use crate::binary;
use serde_json::Value;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct ServerProcess {
    /// The `gpuplane-server` binary it runs.
    program: PathBuf,
    pub data_dir: PathBuf,
    pub url: String,
    port: u16,
    flags: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl ServerProcess {
    /// Makes `dir/data` a data dir with an admin's write token and
    /// `agents` agent tokens, ready for [`ServerProcess::start`]; returns
    /// the data dir, the user token and the agent tokens.
    pub async fn bootstrap(dir: &Path, agents: usize) -> (PathBuf, String, Vec<String>) {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).expect("the data dir is made");
        let db = crate::open_store(&data).await;
        let token = crate::user_token(&db, "tester", gpuplane_api::auth::Scope::Write, true).await;
        let mut agent_tokens = Vec::new();
        for _ in 0..agents {
            agent_tokens.push(crate::agent_token(&db).await);
        }
        db.close().await;
        (data, token, agent_tokens)
    }

    /// Starts the server over `data_dir` (bootstrapped by the caller) on a
    /// free port with `flags` after `serve`; its log goes to `server.log`
    /// beside the data dir, appended across restarts.
    pub async fn start(data_dir: &Path, flags: &[&str]) -> ServerProcess {
        Self::start_program(binary("gpuplane-server"), data_dir, flags).await
    }

    /// [`ServerProcess::start`] with another build of the server (the
    /// benchmarks run the release binary).
    pub async fn start_program(program: PathBuf, data_dir: &Path, flags: &[&str]) -> ServerProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut server = ServerProcess {
            program,
            data_dir: data_dir.to_path_buf(),
            url: format!("http://127.0.0.1:{port}"),
            port,
            flags: flags.iter().map(|flag| flag.to_string()).collect(),
            log: data_dir.with_file_name("server.log"),
            child: None,
        };
        server.restart().await;
        server
    }

    /// Starts the process again (same data, address and flags) and waits
    /// until it answers its health check; returns how long that took.
    pub async fn restart(&mut self) -> Duration {
        assert!(self.child.is_none(), "the server is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the server log opens");
        let database_url = crate::postgres::database_for(&self.data_dir).await;
        let started = Instant::now();
        let mut command = Command::new(&self.program);
        match database_url {
            Some(url) => command.env("GPUPLANE_DATABASE_URL", url),
            None => command.env_remove("GPUPLANE_DATABASE_URL"),
        };
        let child = command
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["serve", "--bind", &format!("127.0.0.1:{}", self.port)])
            .args(&self.flags)
            .env("GPUPLANE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the server starts");
        self.child = Some(child);
        let http = reqwest::Client::new();
        while started.elapsed() < crate::WAIT {
            let health = http.get(format!("{}/api/v1/health", self.url)).send().await;
            if health.is_ok_and(|answer| answer.status().is_success()) {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "the server did not answer its health check; its log:\n{}",
            self.log()
        );
    }

    /// The running process's id (for its CPU time and memory).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: the process ends mid-whatever, as in a crash or an OOM kill.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for the graceful shutdown.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            assert!(status.is_ok_and(|s| s.success()), "kill -TERM");
            let _ = child.wait();
        }
    }

    /// The API (under `/api/v1`) with `token`; requests time out after 10 s.
    pub fn api(&self, token: &str) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
            url: format!("{}/api/v1", self.url),
            token: token.to_string(),
        }
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SQLite's `integrity_check` and `foreign_key_check` of the database
    /// while the server is down: `ok`, else what they found. On PostgreSQL
    /// (see [`crate::postgres::database_for`]), which checks foreign keys on
    /// every write itself, `amcheck`'s index and table checks.
    pub async fn integrity_check(&self) -> String {
        assert!(
            self.child.is_none(),
            "check the database while the server is down"
        );
        if let Some(url) = crate::postgres::database_for(&self.data_dir).await {
            return postgres_integrity(&url).await;
        }
        let path = self.data_dir.join(gpuplane_server::store::DATABASE_FILE);
        let mut conn = SqliteConnectOptions::new()
            .filename(&path)
            .connect()
            .await
            .expect("the database opens");
        let integrity: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_all(&mut conn)
            .await
            .expect("integrity_check runs");
        let foreign_keys: Vec<(String, Option<i64>, String, i64)> =
            sqlx::query_as("PRAGMA foreign_key_check")
                .fetch_all(&mut conn)
                .await
                .expect("foreign_key_check runs");
        conn.close().await.expect("the database closes");
        if integrity == ["ok"] && foreign_keys.is_empty() {
            "ok".to_string()
        } else {
            format!("integrity_check: {integrity:?}; foreign_key_check: {foreign_keys:?}")
        }
    }
}

/// PostgreSQL's own checks (the `amcheck` extension that Debian's package
/// ships): every B-tree index of the schema ordered and holding every row
/// of its table, every table's pages readable. "ok", else what they found.
async fn postgres_integrity(url: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("the database opens");
    sqlx::query("CREATE EXTENSION IF NOT EXISTS amcheck")
        .execute(&mut conn)
        .await
        .expect("amcheck is installed");
    // The schema's tables and B-tree indexes, each with whether it is an index.
    let relations: Vec<(String, bool)> = sqlx::query_as(
        "SELECT c.oid::regclass::text, c.relkind = 'i' FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         LEFT JOIN pg_am am ON am.oid = c.relam
         WHERE n.nspname = 'public' AND (c.relkind = 'r' OR (c.relkind = 'i' AND am.amname = 'btree'))
         ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .expect("the tables and indexes are listed");
    let (indexes, tables): (Vec<_>, Vec<_>) = relations.into_iter().partition(|(_, index)| *index);
    assert!(!indexes.is_empty() && !tables.is_empty(), "the schema is there");
    let mut problems = Vec::new();
    for (index, _) in &indexes {
        // With heapallindexed: every row of the table is found in the index.
        let checked = sqlx::query("SELECT bt_index_check($1::regclass, true)")
            .bind(index)
            .execute(&mut conn)
            .await;
        if let Err(error) = checked {
            problems.push(format!("{index}: {error}"));
        }
    }
    for (table, _) in &tables {
        let corrupt: Vec<String> = sqlx::query_scalar("SELECT msg FROM verify_heapam($1::regclass)")
            .bind(table)
            .fetch_all(&mut conn)
            .await
            .unwrap_or_else(|error| vec![error.to_string()]);
        problems.extend(corrupt.into_iter().map(|msg| format!("{table}: {msg}")));
    }
    conn.close().await.expect("the database closes");
    if problems.is_empty() {
        "ok".to_string()
    } else {
        problems.join("; ")
    }
}

/// A client of the API with one token. Errors are the transport's (the
/// server is down, say); answers are (status, JSON body or `null`).
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    /// Ends in `/api/v1`.
    pub url: String,
    pub token: String,
}

impl Api {
    pub async fn get(&self, path: &str) -> reqwest::Result<(u16, Value)> {
        self.send(self.http.get(format!("{}{path}", self.url))).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Result<(u16, Value)> {
        self.send(self.http.post(format!("{}{path}", self.url)).json(body))
            .await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> reqwest::Result<(u16, Value)> {
        let answer = request.bearer_auth(&self.token).send().await?;
        let status = answer.status().as_u16();
        let body = answer.bytes().await?;
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }

    /// Every item of a list (`/jobs?q=x`), all pages of 500, newest first;
    /// panics unless each page answers 200.
    pub async fn pages(&self, list: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut before: Option<i64> = None;
        loop {
            let cursor = before.map(|c| format!("&before={c}")).unwrap_or_default();
            let (status, page) = self
                .get(&format!("{list}&limit=500{cursor}"))
                .await
                .expect("the server answers");
            assert_eq!(status, 200, "{list}: {page}");
            items.extend(page["items"].as_array().into_iter().flatten().cloned());
            match page["next_before"].as_i64() {
                Some(cursor) => before = Some(cursor),
                None => return items,
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A real `gpuplane-agent` process with 4 simulated GPUs, its jobs under
/// `DIR/agents/NAME` and its log in `DIR/agent-NAME.log`; killed when
/// dropped.
pub struct AgentProcess(Child);

impl AgentProcess {
    pub fn start(dir: &Path, url: &str, name: &str, token: &str) -> AgentProcess {
        let log = std::fs::File::create(dir.join(format!("agent-{name}.log"))).unwrap();
        let child = Command::new(binary("gpuplane-agent"))
            .args([
                "--server",
                url,
                "--name",
                name,
                "--token",
                token,
                "--fake-gpus",
                "4",
            ])
            .arg("--jobs-dir")
            .arg(dir.join("agents").join(name))
            .args(["--disk-free-percent-override", "50"])
            .env("GPUPLANE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        AgentProcess(child)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
