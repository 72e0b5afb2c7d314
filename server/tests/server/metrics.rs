//! Metrics over HTTP with the real server and SQLite: NaN and ±Inf kept,
//! idempotent batches, downsampling that keeps spikes and non-finite counts,
//! LOSS_NAN once per key, and clear refusals that write nothing.

use gpuplane_api::auth::Scope;
use gpuplane_testkit::http::answer;
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

pub struct Fixture {
    pub server: TestServer,
    pub token: String,
}

impl Fixture {
    pub async fn new() -> Fixture {
        Fixture::with(|_| {}).await
    }

    pub async fn with(configure: impl FnOnce(&mut gpuplane_server::config::ServerConfig)) -> Fixture {
        let server = TestServer::start_with(configure).await;
        let token = server.user("ml", Scope::Write, false).await;
        Fixture { server, token }
    }

    /// `method` on an API path with a raw body (sent as JSON, valid or not).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<String>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .server
            .http
            .request(method.parse().unwrap(), self.server.api_url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        answer(request.send().await.unwrap()).await
    }

    pub async fn run(&self, name: &str) -> String {
        self.server.create_run(&self.token, name).await
    }

    pub async fn ingest(&self, run: &str, batch: Value) -> (StatusCode, Value) {
        self.server.ingest(&self.token, run, batch).await
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.send("GET", path, &self.token, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        body
    }
}

pub fn point(key: &str, step: i64, value: Value) -> Value {
    json!({"key": key, "step": step, "wall_time": 1_764_460_800.0 + step as f64, "value": value})
}

#[tokio::test(flavor = "multi_thread")]
async fn nan_and_infinities_survive_the_round_trip_and_flag_the_summary() {
    let f = Fixture::new().await;
    let run = f.run("nan-run").await;
    let points = vec![
        point("train/loss", 1, json!(0.9)),
        point("train/loss", 2, json!("NaN")),
        point("train/grad_norm", 1, json!("Infinity")),
        point("train/grad_norm", 2, json!("-Infinity")),
        point("eval/acc", 5, json!(0.75)),
        point("custom_namespace/thing", 1, json!(3)),
    ];
    let (status, body) = f.ingest(&run, json!({"batch_id": "b1", "points": points})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"accepted": 6, "duplicate": false}));

    let series = f.get(&format!("/runs/{run}/metrics?key=train/loss")).await;
    assert_eq!(series["points"][0]["value"], 0.9);
    assert_eq!(series["points"][1]["value"], "NaN");
    let grad = f.get(&format!("/runs/{run}/metrics?key=train/grad_norm")).await;
    assert_eq!(grad["points"][0]["value"], "Infinity");
    assert_eq!(grad["points"][1]["value"], "-Infinity");

    let summary = f.get(&format!("/runs/{run}")).await;
    let latest = &summary["latest"];
    assert_eq!(latest["train/loss"]["value"], "NaN");
    assert_eq!(latest["train/loss"]["non_finite"], true);
    assert_eq!(latest["train/loss"]["step"], 2);
    assert_eq!(latest["eval/acc"]["non_finite"], false);
    assert_eq!(
        latest["custom_namespace/thing"]["value"], 3.0,
        "every namespace is kept"
    );
    assert_eq!(summary["status"], "RUNNING");

    // LOSS_NAN: once for the loss key, with its step; not for grad_norm (not loss-like).
    let (_, more) = f
        .ingest(
            &run,
            json!({"batch_id": "b2", "points": [point("train/loss", 3, json!("NaN"))]}),
        )
        .await;
    assert_eq!(more["accepted"], 1);
    let events = f.get(&format!("/events?run_id={run}&kind=LOSS_NAN")).await;
    let events = events["items"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["severity"], "critical");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("train/loss became NaN at step 2")
    );

    // A batch of older steps, sent late, counts but leaves the latest point.
    let (_, late) = f
        .ingest(
            &run,
            json!({"batch_id": "b3", "points": [point("train/loss", 1, json!(0.5))]}),
        )
        .await;
    assert_eq!(late["accepted"], 1);
    let latest = &f.get(&format!("/runs/{run}")).await["latest"]["train/loss"];
    assert_eq!(
        (latest["step"].clone(), latest["count"].clone()),
        (json!(3), json!(4))
    );
    assert_eq!(latest["value"], "NaN");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_batch_adds_nothing() {
    let f = Fixture::new().await;
    let run = f.run("replay").await;
    let batch = json!({"batch_id": "same", "points": [point("train/loss", 1, json!(1.0)), point("train/loss", 2, json!(0.5))]});
    assert_eq!(
        f.ingest(&run, batch.clone()).await.1,
        json!({"accepted": 2, "duplicate": false})
    );
    assert_eq!(
        f.ingest(&run, batch).await.1,
        json!({"accepted": 0, "duplicate": true})
    );
    let series = f.get(&format!("/runs/{run}/metrics?key=train/loss")).await;
    assert_eq!(series["points"].as_array().unwrap().len(), 2);
    assert_eq!(
        f.get(&format!("/runs/{run}")).await["latest"]["train/loss"]["count"],
        2
    );
}

/// Batches waiting for the writer at the same moment are stored in one
/// transaction; each gets its own answer, a resent batch id within the
/// group adds nothing, and a batch that fails fails alone.
#[tokio::test(flavor = "multi_thread")]
async fn batches_sent_at_once_are_stored_together_and_one_that_fails_fails_alone() {
    use gpuplane_api::metric::Batch;
    use gpuplane_server::metrics::prepare;
    let f = Fixture::new().await;
    let (a, b) = (f.run("group-a").await, f.run("group-b").await);
    let state = &f.server.server.state;
    let batch = |id: &str, key: &str, value: Value| -> Batch {
        serde_json::from_value(json!({"batch_id": id, "points": [point(key, 1, value)]})).unwrap()
    };
    let send = |run: &str, batch: Batch| {
        let writer = state.metric_writer.clone();
        let run = run.to_string();
        let batch = prepare(batch.batch_id, &batch.points, batch.texts).expect("a valid batch");
        tokio::spawn(async move { writer.store((run, batch)).await })
    };

    // The writer takes the first batch and waits for the write lock, held
    // here; the others queue behind it and are stored as one group.
    let turn = gpuplane_server::store::write(&state.db).await.unwrap();
    let first = send(&a, batch("first", "train/acc", json!(0.5)));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let group = [
        send(&a, batch("twice", "train/loss", json!(1.0))),
        send(&a, batch("twice", "train/loss", json!(1.0))),
        // A NaN loss of a run that does not exist: raising LOSS_NAN fails.
        send("no-such-run", batch("bad", "train/loss", json!("NaN"))),
        send(&b, batch("other", "train/loss", json!(2.0))),
    ];
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    drop(turn);

    let first = first.await.unwrap().unwrap();
    assert!(!first.duplicate);
    let mut answers = Vec::new();
    for sent in group {
        answers.push(sent.await.unwrap());
    }
    let twice: Vec<bool> = answers[..2]
        .iter()
        .map(|answer| answer.as_ref().unwrap().duplicate)
        .collect();
    assert_eq!(
        twice.iter().filter(|d| **d).count(),
        1,
        "one of the two sends of a batch id is the duplicate"
    );
    assert!(answers[2].is_err(), "the bad batch fails");
    assert_eq!(answers[3].as_ref().unwrap().accepted, 1);
    let loss = |run: &str| format!("/runs/{run}/metrics?key=train/loss");
    assert_eq!(f.get(&loss(&a)).await["points"].as_array().unwrap().len(), 1);
    assert_eq!(f.get(&loss(&b)).await["points"][0]["value"], 2.0);
    let stored: i64 = sql!(&state.db, |pool| {
        sqlx::query_scalar("SELECT COUNT(*) FROM metric_batches WHERE run_id = 'no-such-run'")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(stored, 0, "nothing of the bad batch was kept");
}

#[tokio::test(flavor = "multi_thread")]
async fn downsampling_keeps_spikes_counts_and_non_finite_points() {
    let f = Fixture::new().await;
    let run = f.run("big").await;
    let total = 100_000;
    for batch in 0..10 {
        let points: Vec<Value> = (batch * 10_000..(batch + 1) * 10_000)
            .map(|step| {
                let value = match step {
                    31_337 => json!(1e6),
                    77_777 | 77_778 => json!("NaN"),
                    90_001 => json!("-Infinity"),
                    _ => json!((step % 100) as f64 / 100.0),
                };
                point("train/loss", step, value)
            })
            .collect();
        let (status, body) = f
            .ingest(&run, json!({"batch_id": format!("b{batch}"), "points": points}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let series = f
        .get(&format!("/runs/{run}/metrics?key=train/loss&max_points=200"))
        .await;
    assert!(series.get("points").is_none());
    let buckets = series["buckets"].as_array().unwrap();
    assert!(buckets.len() <= 200 && buckets.len() >= 190, "{}", buckets.len());
    let count: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    let non_finite: u64 = buckets.iter().map(|b| b["non_finite"].as_u64().unwrap()).sum();
    let max = buckets
        .iter()
        .filter_map(|b| b["max"].as_f64())
        .fold(f64::MIN, f64::max);
    assert_eq!(count, total as u64, "every point is counted");
    assert_eq!(non_finite, 3);
    assert_eq!(max, 1e6, "the spike survives");
    let spike = buckets.iter().find(|b| b["max"].as_f64() == Some(1e6)).unwrap();
    assert!(spike["step_from"].as_i64().unwrap() <= 31_337 && spike["step_to"].as_i64().unwrap() >= 31_337);
    let last = buckets.last().unwrap();
    assert_eq!(last["step_to"], 99_999);

    // Zoomed in: raw points, NaN included.
    let zoom = f
        .get(&format!(
            "/runs/{run}/metrics?key=train/loss&max_points=200&from=77770&to=77790"
        ))
        .await;
    let points = zoom["points"].as_array().unwrap();
    assert_eq!(points.len(), 21);
    assert_eq!(points[7]["value"], "NaN");
    assert_eq!(points[7]["step"], 77_777);

    // A zoom that still needs buckets is exact at its edges.
    let edge = f
        .get(&format!(
            "/runs/{run}/metrics?key=train/loss&max_points=10&from=1000&to=1999"
        ))
        .await;
    let count: u64 = edge["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(count, 1000);

    // By wall time.
    let by_time = f
        .get(&format!(
            "/runs/{run}/metrics?key=train/loss&max_points=50&x=time"
        ))
        .await;
    let count: u64 = by_time["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(count, total as u64);
}

fn text(key: &str, step: i64, text: &str) -> Value {
    json!({"key": key, "step": step, "wall_time": 1.7e9, "text": text})
}

#[tokio::test(flavor = "multi_thread")]
async fn texts_ride_in_batches_once_and_bad_ones_are_refused_clearly() {
    let f = Fixture::new().await;
    let run = f.run("texts").await;
    let batch = json!({"batch_id": "b1",
        "points": [point("train/loss", 1, json!(1.0))],
        "texts": [text("samples", 1, "first"), text("samples", 2, "second"), text("prompts", 1, "a prompt")]});
    assert_eq!(
        f.ingest(&run, batch.clone()).await.1,
        json!({"accepted": 4, "duplicate": false})
    );
    assert_eq!(
        f.ingest(&run, batch).await.1,
        json!({"accepted": 0, "duplicate": true})
    );
    // A batch of texts only.
    let only = json!({"batch_id": "b2", "texts": [text("samples", 3, "third")]});
    assert_eq!(
        f.ingest(&run, only).await.1,
        json!({"accepted": 1, "duplicate": false})
    );

    let page = f.get(&format!("/runs/{run}/texts")).await;
    assert_eq!(page["keys"], json!(["prompts", "samples"]));
    let listed: Vec<(i64, &str)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["step"].as_i64().unwrap(), t["text"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [(3, "third"), (2, "second"), (1, "a prompt"), (1, "first")]
    );
    let samples = f.get(&format!("/runs/{run}/texts?key=samples&limit=2")).await;
    assert_eq!(samples["items"].as_array().unwrap().len(), 2);
    let rest = f
        .get(&format!(
            "/runs/{run}/texts?key=samples&limit=2&before={}",
            samples["next_before"]
        ))
        .await;
    assert_eq!(rest["items"][0]["text"], "first");
    assert_eq!(rest["next_before"], Value::Null);

    let long = "x".repeat(64 * 1024 + 1);
    let many: Vec<Value> = (0..1001).map(|i| text("samples", i, "t")).collect();
    let cases = [
        (
            json!({"batch_id": "x", "texts": [text("", 1, "t")]}),
            "texts[0].key",
        ),
        (
            json!({"batch_id": "x", "texts": [text("k", 1, &long)]}),
            "texts[0].text",
        ),
        (json!({"batch_id": "x", "texts": many}), "texts"),
        (
            json!({"batch_id": "x", "texts": [{"key": "k", "step": 1, "wall_time": 1.0}]}),
            "texts[0]",
        ),
        (
            json!({"batch_id": "x", "points": [point("train/loss", 9, json!(1.0))], "texts": [text("k\n", 1, "t")]}),
            "texts[0].key",
        ),
    ];
    for (batch, field) in cases {
        let (status, body) = f.ingest(&run, batch.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["error"]["details"][0]["field"], field, "{body}");
    }
    let rows: i64 = sql!(f.server.db(), |pool| {
        sqlx::query_scalar("SELECT count(*) FROM run_texts")
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(rows, 4, "refused batches wrote no text");
    assert_eq!(
        f.get(&format!("/runs/{run}")).await["latest"]["train/loss"]["count"],
        1
    );

    let (status, body) = f
        .send("GET", &format!("/runs/{run}/texts?limit=0"), &f.token, None)
        .await;
    assert_eq!(
        (status, &body["error"]["details"][0]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("limit"))
    );
    let (status, _) = f.send("GET", "/runs/run_nonexistent/texts", &f.token, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A run of a project the caller is not in reads as missing.
    let root = user_token(f.server.db(), "root", Scope::Write, true).await;
    let (status, _) = f
        .send(
            "POST",
            "/projects",
            &root,
            Some(json!({"name": "hidden"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, hidden) = f
        .send(
            "POST",
            "/runs",
            &root,
            Some(json!({"project": "hidden", "name": "h"}).to_string()),
        )
        .await;
    let hidden_id = hidden["id"].as_str().unwrap();
    for path in ["texts", "system", "system.svg?field=utilization_percent"] {
        let (status, body) = f
            .send("GET", &format!("/runs/{hidden_id}/{path}"), &f.token, None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    // The same for its metrics in every format, Arrow included.
    let (status, body) = f
        .send(
            "GET",
            &format!("/runs/{hidden_id}/metrics?key=k&format=columns"),
            &f.token,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let arrow = f
        .server
        .http
        .get(f.server.api_url(&format!("/runs/{hidden_id}/metrics?key=k")))
        .bearer_auth(&f.token)
        .header("accept", "application/vnd.apache.arrow.stream")
        .send()
        .await
        .unwrap();
    assert_eq!(arrow.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_batches_are_refused_clearly_and_write_nothing() {
    let f = Fixture::new().await;
    let run = f.run("strict").await;
    let url = format!("/runs/{run}/metrics");
    let bare_nan =
        r#"{"batch_id": "x", "points": [{"key": "train/loss", "step": 1, "wall_time": 1.0, "value": NaN}]}"#;
    let (status, body) = f.send("POST", &url, &f.token, Some(bare_nan.into())).await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a bare NaN is never read as zero: {body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("\"NaN\""));

    let cases = [
        (
            json!({"batch_id": "x", "points": [{"key": "k", "step": 1, "wall_time": 1.0, "value": "nan"}]}),
            "points[0].value",
        ),
        (
            json!({"batch_id": "x", "points": [{"key": "k", "step": 1, "wall_time": 1.0, "value": "1.5"}]}),
            "points[0].value",
        ),
        (
            json!({"batch_id": "x", "points": [{"key": "k", "wall_time": 1.0, "value": 1.0}]}),
            "points[0]",
        ),
        (
            json!({"batch_id": "x", "points": [{"key": "k", "step": 9_223_372_036_854_775_808_u64, "wall_time": 1.0, "value": 1.0}]}),
            "points[0].step",
        ),
        (
            json!({"batch_id": "x", "points": [{"key": "", "step": 1, "wall_time": 1.0, "value": 1.0}]}),
            "points[0].key",
        ),
        (json!({"points": []}), "body"),
    ];
    for (batch, field) in cases {
        let (status, body) = f.ingest(&run, batch.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{batch}: {body}");
        assert_eq!(body["error"]["details"][0]["field"], field, "{batch}: {body}");
    }
    // A valid point next to a bad one: the whole batch is refused.
    let (status, _) = f
        .ingest(&run, json!({"batch_id": "mixed", "points": [point("train/loss", 1, json!(1.0)), {"key": "", "step": 2, "wall_time": 1.0, "value": 1.0}]}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // 10 MB is over the limit.
    let huge: Vec<Value> = (0..140_000)
        .map(|i| point("train/loss_with_a_rather_long_name", i, json!(0.123456789)))
        .collect();
    let body = json!({"batch_id": "huge", "points": huge}).to_string();
    assert!(body.len() > 10_000_000);
    let (status, answer) = f.send("POST", &url, &f.token, Some(body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");

    let (status, _) = f
        .ingest("run_nonexistent", json!({"batch_id": "x", "points": []}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let db = f.server.db();
    for table in ["metric_chunks", "metric_series", "metric_batches"] {
        let rows: i64 = sql!(db, |pool| {
            sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(pool)
                .await
        })
        .unwrap();
        assert_eq!(rows, 0, "nothing written to {table}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_token_reaches_only_its_run_and_read_tokens_cannot_ingest() {
    let f = Fixture::new().await;
    let mine = f.run("mine").await;
    let other = f.run("other").await;
    let db = f.server.db();
    // What the scheduler gives a job: an sdk token limited to the job's run.
    let job_token = user_token(db, "job-owner", Scope::Sdk, false).await;
    sql!(db, |pool| {
        sqlx::query("UPDATE api_tokens SET run_id = $1 WHERE token_hash = $2")
            .bind(&mine)
            .bind(gpuplane_server::identity::credentials::hash_token(&job_token))
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    let batch = json!({"batch_id": "j", "points": [point("train/loss", 1, json!(0.1))]}).to_string();
    let (status, _) = f
        .send(
            "POST",
            &format!("/runs/{mine}/metrics"),
            &job_token,
            Some(batch.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = f
        .send(
            "POST",
            &format!("/runs/{other}/metrics"),
            &job_token,
            Some(batch.clone()),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "another run does not exist for a job's token"
    );
    let (status, _) = f
        .send(
            "POST",
            "/runs",
            &job_token,
            Some(json!({"name": "escape"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f.send("GET", &format!("/runs/{mine}"), &job_token, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "sdk tokens only ingest");

    let reader = user_token(db, "reader", Scope::Read, false).await;
    let (status, _) = f
        .send("POST", &format!("/runs/{mine}/metrics"), &reader, Some(batch))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let (status, run) = f
        .send("POST", &format!("/runs/{mine}/finish"), &f.token, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "FINISHED");
}

/// Runs and jobs rank by their primary metric: a project default, a run's
/// own overriding it, the first step of the best finite value (NaN never
/// wins), and clear refusals.
#[tokio::test(flavor = "multi_thread")]
async fn runs_and_jobs_sort_by_their_primary_metric() {
    let f = Fixture::new().await;
    let db = f.server.db();
    let admin = user_token(db, "lead", Scope::Write, true).await;
    // Jobs stay QUEUED (no agent); their runs take metrics like any other.
    let mut runs = Vec::new();
    for name in ["a", "b", "c"] {
        let (status, job) = f
            .send(
                "POST",
                "/jobs",
                &f.token,
                Some(json!({"name": name, "command": ["true"]}).to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
        runs.push((
            job["id"].as_str().unwrap().to_string(),
            job["run_id"].as_str().unwrap().to_string(),
        ));
    }
    let accuracy = |values: &[(i64, Value)]| {
        let points: Vec<Value> = values
            .iter()
            .map(|(s, v)| point("eval/accuracy", *s, v.clone()))
            .collect();
        json!({"batch_id": "acc", "points": points})
    };
    let [(job_a, a), (job_b, b), (job_c, c)] = runs.try_into().unwrap();
    f.ingest(&a, accuracy(&[(1, json!(0.5)), (2, json!(0.8)), (3, json!(0.7))]))
        .await;
    f.ingest(
        &b,
        accuracy(&[(1, json!(0.9)), (2, json!("NaN")), (3, json!("Infinity"))]),
    )
    .await;
    f.ingest(&c, accuracy(&[(1, json!(0.6))])).await;
    // A second batch ties C's best at a later step: the first step stays.
    f.ingest(
        &c,
        json!({"batch_id": "more", "points": [point("eval/accuracy", 5, json!(0.6))]}),
    )
    .await;

    let (status, body) = f
        .send(
            "POST",
            "/projects/default/primary-metric",
            &f.token,
            Some(json!({"key": "eval/accuracy", "goal": "max"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "project admins only: {body}");
    let (status, project) = f
        .send(
            "POST",
            "/projects/default/primary-metric",
            &admin,
            Some(json!({"key": "eval/accuracy", "goal": "max"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{project}");
    assert_eq!(
        project["primary_metric"],
        json!({"key": "eval/accuracy", "goal": "max"})
    );

    let ranked = f.get("/runs?sort=primary_metric").await;
    let order: Vec<&str> = ranked["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(order, [b.as_str(), a.as_str(), c.as_str()]);
    assert_eq!(
        ranked["items"][0]["primary_metric"],
        json!({"key": "eval/accuracy", "goal": "max", "set_on": "project", "best": {"step": 1, "value": 0.9}})
    );
    assert_eq!(
        ranked["items"][2]["primary_metric"]["best"],
        json!({"step": 1, "value": 0.6})
    );
    let jobs = f.get("/jobs?sort=primary_metric").await;
    let order: Vec<&str> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(order, [job_b.as_str(), job_a.as_str(), job_c.as_str()]);
    assert_eq!(jobs["next_before"], Value::Null);

    // A run's own primary metric wins over the project's: C by lowest loss.
    f.ingest(&c, json!({"batch_id": "loss", "points": [
        point("train/loss", 1, json!(2.0)), point("train/loss", 2, json!("NaN")), point("train/loss", 3, json!(0.25))
    ]}))
    .await;
    let (status, run) = f
        .send(
            "POST",
            &format!("/runs/{c}/primary-metric"),
            &f.token,
            Some(json!({"key": "train/loss", "goal": "min"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(
        run["primary_metric"],
        json!({"key": "train/loss", "goal": "min", "set_on": "run", "best": {"step": 3, "value": 0.25}})
    );
    // Newest first stays the default, with pages.
    let newest = f.get("/runs?limit=2").await;
    assert_eq!(newest["items"][0]["id"], c.as_str());
    assert!(newest["next_before"].is_i64());

    // A key not logged yet is allowed: the run waits for its first value.
    let (status, run) = f
        .send(
            "POST",
            &format!("/runs/{a}/primary-metric"),
            &f.token,
            Some(json!({"key": "eval/f1", "goal": "max"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["primary_metric"]["best"], Value::Null);
    let ranked = f.get("/runs?sort=primary_metric").await;
    assert_eq!(ranked["items"][2]["id"], a.as_str(), "no value ranks last");

    for (body, field) in [
        (json!({"key": "", "goal": "max"}), "key"),
        (json!({"key": "eval/accuracy", "goal": "bigger"}), "goal"),
    ] {
        let (status, error) = f
            .send(
                "POST",
                &format!("/runs/{a}/primary-metric"),
                &f.token,
                Some(body.to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
        assert!(error.to_string().contains(field), "{error}");
    }
    // Any other word is a metric key; an empty config key is no column.
    let (status, error) = f.send("GET", "/runs?sort=config.", &f.token, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert_eq!(error["error"]["details"][0]["field"], "sort");
    let reader = user_token(db, "reader", Scope::Read, false).await;
    let (status, _) = f
        .send(
            "POST",
            &format!("/runs/{a}/primary-metric"),
            &reader,
            Some(json!({"key": "x", "goal": "max"}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
