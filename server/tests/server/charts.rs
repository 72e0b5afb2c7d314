//! Charts and live run updates over HTTP with the real server: SVG charts
//! that mark and name non-finite values (raw and downsampled), compare runs,
//! refuse bad views by field, and a run stream that says when a run changed.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

struct Fixture {
    server: TestServer,
    token: String,
}

impl Fixture {
    async fn new() -> Fixture {
        let server = TestServer::start().await;
        let token = server.user("ml", Scope::Write, false).await;
        Fixture { server, token }
    }

    fn url(&self, path: &str) -> String {
        self.server.api_url(path)
    }

    async fn run(&self, name: &str, values: &[Value]) -> String {
        let id = self.server.create_run(&self.token, name).await;
        self.ingest(&id, "b0", values).await;
        id
    }

    async fn ingest(&self, run: &str, batch_id: &str, values: &[Value]) {
        let points: Vec<Value> = values
            .iter()
            .enumerate()
            .map(|(step, value)| json!({"key": "train/loss", "step": step, "wall_time": 1_764_460_800.0 + step as f64, "value": value}))
            .collect();
        let batch = json!({"batch_id": batch_id, "points": points});
        let (status, answer) = self.server.ingest(&self.token, run, batch).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }

    async fn chart(&self, run: &str, query: &str) -> (StatusCode, String, String) {
        let response = self
            .server
            .http
            .get(self.url(&format!("/runs/{run}/chart.svg?{query}")))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let kind = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, kind, response.text().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chart_breaks_at_non_finite_values_and_names_them() {
    let f = Fixture::new().await;
    let run = f
        .run(
            "nan",
            &[
                json!(1.0),
                json!(0.8),
                json!("NaN"),
                json!(0.6),
                json!("Infinity"),
                json!(0.5),
            ],
        )
        .await;
    let (status, kind, svg) = f.chart(&run, "key=train/loss").await;
    assert_eq!(status, StatusCode::OK, "{svg}");
    assert_eq!(kind, "image/svg+xml");
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(
        svg.contains("NaN at step 2") && svg.contains("+Inf at step 4"),
        "{svg}"
    );

    // Zoomed past the NaN: it is no longer drawn.
    let (_, _, zoomed) = f
        .chart(&run, "key=train/loss&from=3&to=5&smooth=0.6&x=step")
        .await;
    assert!(
        !zoomed.contains("NaN at step") && zoomed.contains("+Inf at step 4"),
        "{zoomed}"
    );

    let (_, _, by_time) = f.chart(&run, "key=train/loss&x=time").await;
    assert!(by_time.contains("seconds since start"), "{by_time}");

    let (_, _, unknown) = f.chart(&run, "key=eval/nothing").await;
    assert!(unknown.contains("no points in this range"), "{unknown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_downsampled_chart_still_marks_a_lone_nan() {
    let f = Fixture::new().await;
    let values: Vec<Value> = (0..5_000)
        .map(|step| {
            if step == 3_333 {
                json!("NaN")
            } else {
                json!(1.0 / (step + 1) as f64)
            }
        })
        .collect();
    let run = f.run("long", &values).await;
    let (status, _, svg) = f.chart(&run, "key=train/loss&width=200").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        svg.contains("1 non-finite at step 3333"),
        "the bucket holding step 3333 is marked, with the exact step: {svg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn compared_runs_share_a_chart_with_a_legend() {
    let f = Fixture::new().await;
    let first = f.run("baseline", &[json!(1.0), json!(0.5)]).await;
    let second = f.run("bigger-lr", &[json!(1.0), json!(0.9)]).await;
    let (status, _, svg) = f.chart(&first, &format!("key=train/loss&compare={second}")).await;
    assert_eq!(status, StatusCode::OK, "{svg}");
    assert!(
        svg.contains("default/baseline") && svg.contains("default/bigger-lr"),
        "{svg}"
    );

    let (status, _, body) = f.chart(&first, "key=train/loss&compare=run_nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_views_are_refused_by_field() {
    let f = Fixture::new().await;
    let run = f.run("r", &[json!(1.0)]).await;
    for (query, field) in [
        ("key=train/loss&smooth=1.5", "smooth"),
        ("key=train/loss&width=10", "width"),
        ("key=train/loss&height=99999", "height"),
        ("key=train/loss&x=epoch", "x"),
        ("key=train/loss&from=9&to=1", "from"),
        ("smooth=0.5", "key"),
    ] {
        let (status, _, body) = f.chart(&run, query).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        assert!(body.contains(field), "{query}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_stream_says_when_points_arrive_and_resumes_from_the_last_version() {
    let f = Fixture::new().await;
    let run = f.run("live", &[json!(1.0)]).await;
    let open = |last: Option<String>| {
        let mut request = f
            .server
            .http
            .get(f.url(&format!("/runs/{run}/stream")))
            .bearer_auth(&f.token);
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        request.send()
    };
    // A new client hears the current version at once, then each change.
    let mut first = open(None).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let version = until(&mut first, "1 ").await;
    f.ingest(&run, "b1", &[json!(0.5), json!(0.25)]).await;
    let version_after = until(&mut first, "3 ").await;
    drop(first);
    assert_ne!(version, version_after);

    // A client that reconnects with the last version it heard hears of what
    // changed while it was away.
    f.ingest(&run, "b2", &[json!(0.1)]).await;
    let mut resumed = open(Some(version_after)).await.unwrap();
    until(&mut resumed, "4 ").await;
}

/// Reads a run stream until an event whose data starts with `prefix`; its id.
async fn until(response: &mut reqwest::Response, prefix: &str) -> String {
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(at) = seen.find(&format!("data: {prefix}")) {
            let id = seen[..at].rsplit("id: ").next().unwrap().lines().next().unwrap();
            return id.to_string();
        }
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no event with data {prefix:?} within 10 s: {seen}"))
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_chart_comes_as_png() {
    let f = Fixture::new().await;
    let run = f.run("png", &[json!(1.0), json!("NaN"), json!(0.5)]).await;
    let response = f
        .server
        .http
        .get(f.url(&format!(
            "/runs/{run}/chart.png?key=train/loss&width=400&height=200"
        )))
        .bearer_auth(&f.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "image/png");
    let png = response.bytes().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The IHDR chunk holds the size asked for.
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 400);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 200);
    let anonymous = f
        .server
        .http
        .get(f.url(&format!("/runs/{run}/chart.png?key=train/loss")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loss_falling_over_decades_reads_on_a_log_scale_and_bad_ranges_are_refused() {
    let f = Fixture::new().await;
    let values: Vec<Value> = (0..60).map(|step| json!(500.0 * 0.7f64.powi(step))).collect();
    let run = f.run("decades", &values).await;
    let (status, _, svg) = f.chart(&run, "key=train/loss&y_scale=log").await;
    assert_eq!(status, StatusCode::OK);
    assert!(svg.contains("train/loss (log scale)"), "{svg}");
    for tick in ["\n0.01\n", "\n1\n", "\n100\n"] {
        assert!(svg.contains(tick), "a tick per decade, {tick:?}: {svg}");
    }
    let (status, _, svg) = f.chart(&run, "key=train/loss&y_min=1&y_max=10").await;
    assert_eq!(status, StatusCode::OK, "{svg}");
    for (query, field) in [
        ("y_scale=cubic", "y_scale"),
        ("y_scale=log&y_min=0", "y_min"),
        ("y_min=2&y_max=1", "y_min"),
    ] {
        let (status, _, body) = f.chart(&run, &format!("key=train/loss&{query}")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["details"][0]["field"], field, "{query}");
    }
}
