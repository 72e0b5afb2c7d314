//! What this server counts and times as it works, for Prometheus
//! (`GET /metrics`, see `scrape.rs`): requests by route, scheduling passes,
//! dispatch latency, attempts started, ingested points and bytes, and
//! agents' long polls. Everything here is in memory and
//! per server (each replica counts its own; Prometheus sums them); what the
//! database knows (queues, jobs ended, nodes, the store's size) is read at
//! scrape time.
//!
//! Label values come from closed sets only (routes as declared, methods,
//! status classes, failure reasons), so the number of series is bounded by
//! the code, never by users' data.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::time::Instant;

/// Labels of one series, as (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;

type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The counters, gauges and histograms of one server.
pub struct Observed {
    registry: Registry,
    requests: Histograms,
    pass_seconds: Histogram,
    dispatch_seconds: Histogram,
    jobs_started: Counter,
    points: Counter,
    ingest_bytes: Counter,
    agent_polls: Gauge,
}

/// From 0.5 ms to about 33 s, doubling: requests and dispatches.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// From 0.1 ms to about 3.3 s, doubling: scheduling passes.
fn pass_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

impl Default for Observed {
    fn default() -> Self {
        let requests: Histograms = Family::new_with_constructor(latency_histogram);
        let pass_seconds = pass_histogram();
        let dispatch_seconds = latency_histogram();
        let jobs_started = Counter::default();
        let points = Counter::default();
        let ingest_bytes = Counter::default();
        let agent_polls = Gauge::default();
        let mut registry = Registry::with_prefix("gpuplane");
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer an HTTP request, by route (as declared), method and status class",
            Unit::Seconds,
            requests.clone(),
        );
        registry.register_with_unit(
            "scheduling_pass_duration",
            "Time of one scheduling pass over the whole queue",
            Unit::Seconds,
            pass_seconds.clone(),
        );
        registry.register_with_unit(
            "dispatch_latency",
            "Time from a job's placement to its agent reporting it started",
            Unit::Seconds,
            dispatch_seconds.clone(),
        );
        registry.register(
            "jobs_started",
            "Attempts placed on nodes by this server's scheduler",
            jobs_started.clone(),
        );
        registry.register(
            "ingest_points",
            "Metric points stored from the API (SDK, MLflow, W&B, TensorBoard)",
            points.clone(),
        );
        registry.register_with_unit(
            "ingest_encoded",
            "Bytes of encoded chunks those points were stored as",
            Unit::Bytes,
            ingest_bytes.clone(),
        );
        registry.register(
            "agent_polls",
            "Agents' long polls open on this server (connected agents)",
            agent_polls.clone(),
        );
        Observed {
            registry,
            requests,
            pass_seconds,
            dispatch_seconds,
            jobs_started,
            points,
            ingest_bytes,
            agent_polls,
        }
    }
}

/// An agent's long poll, counted while it is open.
pub struct OpenPoll(Gauge);

impl Drop for OpenPoll {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Observed {
    pub fn scheduling_pass(&self, seconds: f64) {
        self.pass_seconds.observe(seconds);
    }

    pub fn dispatched(&self, attempts: usize) {
        self.jobs_started.inc_by(attempts as u64);
    }

    /// An attempt reported started `seconds` after it was placed.
    pub fn started_after(&self, seconds: f64) {
        self.dispatch_seconds.observe(seconds.max(0.0));
    }

    pub fn ingested(&self, points: u64, bytes: u64) {
        self.points.inc_by(points);
        self.ingest_bytes.inc_by(bytes);
    }

    pub fn open_poll(&self) -> OpenPoll {
        self.agent_polls.inc();
        OpenPoll(self.agent_polls.clone())
    }

    /// Appends this server's series in the Prometheus text format.
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::prometheus_text::encode(out, &self.registry)
    }
}

/// Middleware: times each request under its declared route (`/api/v1/jobs/{id}`,
/// never the path asked for, so a scanner cannot grow the series).
pub async fn time_request(State(observed): State<Arc<Observed>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |path| path.as_str())
        .to_string();
    let method = request.method().as_str().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let class = format!("{}xx", response.status().as_u16() / 100);
    let labels = vec![("route", route), ("method", method), ("status", class)];
    observed
        .requests
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_out_in_the_prometheus_text_format_under_one_prefix() {
        let observed = Observed::default();
        observed.dispatched(3);
        observed.ingested(10, 512);
        observed.scheduling_pass(0.004);
        let poll = observed.open_poll();
        let labels = vec![("route", "/api/v1/jobs".to_string())];
        observed.requests.get_or_create(&labels).observe(0.002);
        let mut text = String::new();
        observed.encode(&mut text).unwrap();
        assert!(text.contains("gpuplane_jobs_started_total 3\n"), "{text}");
        assert!(text.contains("gpuplane_ingest_points_total 10\n"), "{text}");
        assert!(
            text.contains("gpuplane_ingest_encoded_bytes_total 512\n"),
            "{text}"
        );
        assert!(
            text.contains("gpuplane_scheduling_pass_duration_seconds_count 1\n"),
            "{text}"
        );
        assert!(text.contains("gpuplane_agent_polls 1\n"), "{text}");
        assert!(
            text.contains(
                "gpuplane_http_request_duration_seconds_bucket{route=\"/api/v1/jobs\",le=\"0.002\"} 1\n"
            ),
            "{text}"
        );
        drop(poll);
        let mut text = String::new();
        observed.encode(&mut text).unwrap();
        assert!(text.contains("gpuplane_agent_polls 0\n"), "{text}");
    }
}
