//! A real Prometheus for tests: Debian's `prometheus` package, started in a
//! temporary directory with a generated `prometheus.yml` that scrapes the
//! given targets every half second. It runs as the `prometheus` user
//! (through `runuser`) when the tests run as root, else as the test's user.
//! [`Prometheus::query`] asks its HTTP API a PromQL question. Everything
//! stops when the value is dropped.

use crate::{free_port, is_root};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's binary (`apt-get install prometheus`; `./scripts/test.sh` does).
pub const BINARY: &str = "/usr/bin/prometheus";

/// What Prometheus scrapes: a job name, `host:port` and, for a target that
/// wants one, a bearer token.
pub struct Target {
    pub job: String,
    pub address: String,
    pub token: Option<String>,
}

pub struct Prometheus {
    dir: tempfile::TempDir,
    child: Child,
    pub url: String,
}

impl Prometheus {
    /// Starts Prometheus over `targets` and waits until it answers queries.
    pub async fn start(targets: &[Target]) -> Prometheus {
        assert!(
            Path::new(BINARY).exists(),
            "{BINARY} is missing: `apt-get install prometheus` (./scripts/test.sh does)"
        );
        let dir = tempfile::Builder::new()
            .prefix("gpuplane-prometheus-")
            .tempdir()
            .unwrap();
        let root = dir.path();
        let mut config =
            String::from("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n");
        for (n, target) in targets.iter().enumerate() {
            config.push_str(&format!(
                "  - job_name: {}\n    static_configs:\n      - targets: ['{}']\n",
                target.job, target.address
            ));
            if let Some(token) = &target.token {
                let file = root.join(format!("token-{n}"));
                std::fs::write(&file, token).unwrap();
                config.push_str(&format!(
                    "    authorization:\n      type: Bearer\n      credentials_file: {}\n",
                    file.display()
                ));
            }
        }
        std::fs::write(root.join("prometheus.yml"), config).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        let port = free_port();
        let mut command = if is_root() {
            let status = Command::new("chown")
                .args(["-R", "prometheus:"])
                .arg(root)
                .status()
                .unwrap();
            assert!(status.success(), "chown prometheus {}", root.display());
            let mut command = Command::new("runuser");
            command.args(["-u", "prometheus", "--", BINARY]);
            command
        } else {
            Command::new(BINARY)
        };
        command
            .arg(format!("--config.file={}", root.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", root.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("prometheus.log")).unwrap());
        let child = command.spawn().unwrap();
        let prometheus = Prometheus {
            dir,
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        loop {
            let ready = reqwest::get(format!("{}/-/ready", prometheus.url)).await;
            if ready.is_ok_and(|answer| answer.status().is_success()) {
                return prometheus;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "Prometheus is not ready after 30 s:\n{}",
                prometheus.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The `data.result` of an instant query.
    pub async fn query(&self, promql: &str) -> Vec<Value> {
        let answer: Value = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", promql)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["status"], "success", "{promql}: {answer}");
        answer["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The value of the first series `promql` answers, if any.
    pub async fn value(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql).await;
        result.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Waits (up to `within`) until `promql` answers a value that `accept`
    /// takes; panics with the last answer and the scrape targets' state.
    pub async fn wait_for(&self, promql: &str, within: Duration, accept: impl Fn(f64) -> bool) -> f64 {
        let started = Instant::now();
        loop {
            let value = self.value(promql).await;
            if let Some(value) = value.filter(|value| accept(*value)) {
                return value;
            }
            if started.elapsed() > within {
                let targets: Value = reqwest::get(format!("{}/api/v1/targets", self.url))
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                panic!(
                    "{promql} answered {value:?} after {within:?}; targets: {targets:#}\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    /// SIGTERM, which `runuser` passes on to Prometheus; SIGKILL after 5 s.
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
