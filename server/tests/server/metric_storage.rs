//! How metric points are kept and read back: compaction, merged chunks and
//! coarse summaries, old chunk formats, bit-exact values, columns and Arrow.

use crate::metrics::{Fixture, point};
use gpuplane_testkit::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn many_small_batches_are_compacted_without_changing_any_answer() {
    let f = Fixture::with(|config| config.compaction_delay = std::time::Duration::from_secs(3600)).await;
    let run = f.run("chatty").await;
    for batch in 0..40 {
        let points: Vec<Value> = (batch * 50..(batch + 1) * 50)
            .map(|step| {
                let value = if step == 1_234 {
                    json!("NaN")
                } else {
                    json!(step as f64 * 0.5)
                };
                point("train/loss", step, value)
            })
            .collect();
        let (status, body) = f
            .ingest(&run, json!({"batch_id": format!("s{batch}"), "points": points}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let db = f.server.db();
    let chunks = || async {
        sql!(db, |pool| {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM metric_chunks WHERE run_id = $1")
                .bind(&run)
                .fetch_one(pool)
                .await
        })
        .unwrap()
    };
    let answers = || async {
        [
            f.get(&format!("/runs/{run}/metrics?key=train/loss&max_points=100000"))
                .await,
            f.get(&format!("/runs/{run}/metrics?key=train/loss&max_points=7"))
                .await,
            f.get(&format!("/runs/{run}/metrics?key=train/loss&from=1200&to=1300"))
                .await,
            f.get(&format!("/runs/{run}")).await["latest"].clone(),
        ]
    };
    let before = answers().await;
    assert_eq!(chunks().await, 40);

    let mut seen = 0;
    let compacted = gpuplane_server::metrics::compact::pass(db, &mut seen)
        .await
        .unwrap();
    assert_eq!(compacted, 1);
    assert_eq!(chunks().await, 1, "2,000 points fit one chunk");
    let after = answers().await;
    assert_eq!(after[0], before[0], "every point, in order");
    assert_eq!(after[2], before[2], "a zoomed range");
    assert_eq!(after[3], before[3], "the latest values");
    // Buckets are made of sub-buckets, whose edges move with the chunks:
    // the totals, the extremes and the non-finite count stay.
    assert_eq!(bucket_totals(&after[1]), bucket_totals(&before[1]));
    assert_eq!(bucket_totals(&before[1]), (2_000, 1, 0.0, 999.5));
    assert_eq!(before[0]["points"].as_array().unwrap().len(), 2_000);
    assert_eq!(before[0]["points"][1_234]["value"], "NaN");

    // Nothing new: nothing to do.
    assert_eq!(
        gpuplane_server::metrics::compact::pass(db, &mut seen)
            .await
            .unwrap(),
        0
    );
    // New points after compaction still land and are read.
    let (status, _) = f
        .ingest(
            &run,
            json!({"batch_id": "late", "points": [point("train/loss", 2_000, json!(7.0))]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let all = f
        .get(&format!("/runs/{run}/metrics?key=train/loss&max_points=100000"))
        .await;
    assert_eq!(all["points"].as_array().unwrap().len(), 2_001);

    // Tiny chunks are merged among themselves: the 2,000-point chunk is not
    // rewritten for them.
    let merged_id: i64 = sql!(db, |pool| {
        sqlx::query_scalar("SELECT id FROM metric_chunks WHERE run_id = $1 AND count = 2000")
            .bind(&run)
            .fetch_one(pool)
            .await
    })
    .unwrap();
    for batch in 0..15 {
        let points: Vec<Value> = (0..10)
            .map(|i| point("train/loss", 3_000 + batch * 10 + i, json!(1.0)))
            .collect();
        let (status, _) = f
            .ingest(&run, json!({"batch_id": format!("t{batch}"), "points": points}))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(
        gpuplane_server::metrics::compact::pass(db, &mut seen)
            .await
            .unwrap(),
        1
    );
    let sizes: Vec<(i64, i64)> = sql!(db, |pool| {
        sqlx::query_as("SELECT id, count FROM metric_chunks WHERE run_id = $1 ORDER BY step_min")
            .bind(&run)
            .fetch_all(pool)
            .await
    })
    .unwrap();
    assert_eq!(
        sizes.iter().map(|(_, count)| *count).collect::<Vec<_>>(),
        [2_000, 151]
    );
    assert_eq!(sizes[0].0, merged_id);
    let all = f
        .get(&format!("/runs/{run}/metrics?key=train/loss&max_points=100000"))
        .await;
    assert_eq!(all["points"].as_array().unwrap().len(), 2_151);
}

/// Bucket totals that do not depend on where sub-bucket edges fall.
fn bucket_totals(answer: &Value) -> (u64, u64, f64, f64) {
    let buckets = answer["buckets"].as_array().expect("buckets");
    let sum = |field: &str| buckets.iter().map(|b| b[field].as_u64().unwrap()).sum::<u64>();
    let extreme = |field: &str, pick: fn(f64, f64) -> f64| {
        buckets
            .iter()
            .filter_map(|b| b[field].as_f64())
            .fold(f64::NAN, pick)
    };
    (
        sum("count"),
        sum("non_finite"),
        extreme("min", f64::min),
        extreme("max", f64::max),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn long_series_are_merged_into_big_chunks_and_read_through_coarse_summaries() {
    let f = Fixture::with(|config| config.compaction_delay = std::time::Duration::from_secs(3600)).await;
    let run = f.run("long").await;
    let total = 163_840;
    for batch in 0..20 {
        let points: Vec<Value> = (batch * 8192..(batch + 1) * 8192)
            .map(|step| {
                let value = match step {
                    100_000 => json!(1e9),
                    150_000 => json!("NaN"),
                    _ => json!((step % 1000) as f64),
                };
                point("train/loss", step, value)
            })
            .collect();
        let (status, body) = f
            .ingest(&run, json!({"batch_id": format!("b{batch}"), "points": points}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let db = f.server.db();
    let sizes = || async {
        sql!(db, |pool| {
            sqlx::query_scalar::<_, i64>(
                "SELECT count FROM metric_chunks WHERE run_id = $1 ORDER BY step_min",
            )
            .bind(&run)
            .fetch_all(pool)
            .await
        })
        .unwrap()
    };
    assert_eq!(sizes().await, vec![4096; 40], "ingest writes chunks of 4,096");
    // 5 buckets of 32,768 points read the 8,192-point level, 20 the
    // 1,024-point one, 200 the 128-point one; a zoom decodes its edges.
    let queries = [
        "max_points=5",
        "max_points=20",
        "max_points=200",
        "max_points=200&x=time",
        "max_points=3&from=70001&to=140001",
    ];
    let answers = || async {
        let mut answers = Vec::new();
        for query in queries {
            answers.push(
                f.get(&format!("/runs/{run}/metrics?key=train/loss&{query}"))
                    .await,
            );
        }
        answers.push(
            f.get(&format!("/runs/{run}/metrics?key=train/loss&from=65530&to=65540"))
                .await,
        );
        answers
    };
    let before = answers().await;
    for answer in &before[..4] {
        assert_eq!(bucket_totals(answer), (total, 1, 0.0, 1e9), "{answer}");
    }
    assert_eq!(bucket_totals(&before[4]).0, 70_001, "exact at the zoom's edges");
    assert_eq!(before[5]["points"].as_array().unwrap().len(), 11);

    let mut seen = 0;
    let compacted = gpuplane_server::metrics::compact::pass(db, &mut seen)
        .await
        .unwrap();
    assert_eq!(compacted, 1);
    assert_eq!(sizes().await, [131_072, 32_768]);
    let after = answers().await;
    for (before, after) in before.iter().zip(&after) {
        if before.get("buckets").is_some() {
            assert_eq!(bucket_totals(after), bucket_totals(before), "{after}");
        } else {
            assert_eq!(after, before);
        }
    }
    let spike = after[0]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["max"].as_f64() == Some(1e9))
        .unwrap();
    assert!(spike["step_from"].as_i64().unwrap() <= 100_000 && spike["step_to"].as_i64().unwrap() >= 100_000);
    // Merged chunks are not merged again.
    assert_eq!(
        gpuplane_server::metrics::compact::pass(db, &mut seen)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chunks_written_before_compression_and_summary_levels_still_read() {
    use gpuplane_server::metrics::chunk::{RawPoint, encode_summary};
    let f = Fixture::new().await;
    let run = f.run("old").await;
    // As chunks were stored before: raw points (24 bytes each), 64-point
    // sub-buckets, no coarser levels, wall times finer than a millisecond.
    for part in 0..5i64 {
        let points: Vec<RawPoint> = (part * 4096..(part + 1) * 4096)
            .map(|step| RawPoint {
                step,
                wall: 1_764_460_800.000_25 + step as f64,
                value: if step == 5_000 { f64::NAN } else { step as f64 },
            })
            .collect();
        let mut raw = Vec::new();
        for p in &points {
            raw.extend(p.step.to_le_bytes());
            raw.extend(p.wall.to_le_bytes());
            raw.extend(p.value.to_le_bytes());
        }
        sql!(f.server.db(), |pool| { sqlx::query(
            "INSERT INTO metric_chunks (run_id, key, step_min, step_max, time_min, time_max, count, summary, points)
             VALUES ($1, 'old/loss', $2, $3, $4, $5, 4096, $6, $7)",
        )
        .bind(&run)
        .bind(points[0].step)
        .bind(points[4095].step)
        .bind(points[0].wall)
        .bind(points[4095].wall)
        .bind(encode_summary(&points, 64))
        .bind(raw)
        .execute(pool)
        .await.map(|_| ()) })
        .unwrap();
    }
    let read = |max_points: usize, from: Option<f64>| {
        let query = gpuplane_server::metrics::Query {
            key: "old/loss".into(),
            max_points,
            axis: gpuplane_server::metrics::Axis::Step,
            from,
            to: None,
        };
        let db = f.server.db().clone();
        let run = run.clone();
        async move { gpuplane_server::metrics::query(&db, &run, &query).await.unwrap() }
    };
    // One bucket reads the coarsest level, 4 the middle one, 40 the finest.
    for max_points in [1, 4, 40] {
        let series = serde_json::to_value(read(max_points, None).await).unwrap();
        assert_eq!(bucket_totals(&series), (20_480, 1, 0.0, 20_479.0), "{max_points}");
    }
    let tail = read(100, Some(20_400.0)).await;
    let points = tail.points.unwrap();
    assert_eq!(points.len(), 80);
    assert_eq!(
        points[0].wall_time,
        1_764_460_800.000_25 + 20_400.0,
        "kept as it was"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn values_come_back_bit_for_bit() {
    let f = Fixture::new().await;
    let run = f.run("exact").await;
    // Float32 values as Python prints them: a JSON parser that is not
    // correctly rounded reads some of these one bit off.
    let texts = [
        "0.41152817010879517",
        "1.8265191316604614",
        "5e-324",
        "1.7976931348623157e308",
        "0.1",
        "-2.2250738585072014e-308",
    ];
    let points: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(step, value)| {
            format!(r#"{{"key": "train/loss", "step": {step}, "wall_time": 1764460800.5, "value": {value}}}"#)
        })
        .collect();
    let body = format!(r#"{{"batch_id": "exact", "points": [{}]}}"#, points.join(","));
    let (status, answer) = f
        .send("POST", &format!("/runs/{run}/metrics"), &f.token, Some(body))
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let series = f.get(&format!("/runs/{run}/metrics?key=train/loss")).await;
    for (point, text) in series["points"].as_array().unwrap().iter().zip(texts) {
        let expected: f64 = text.parse().unwrap();
        assert_eq!(
            point["value"].as_f64().unwrap().to_bits(),
            expected.to_bits(),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn columns_and_arrow_answer_what_objects_do() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type, UInt64Type};

    let f = Fixture::new().await;
    let run = f.run("columns").await;
    let points: Vec<Value> = (0..300)
        .map(|step| {
            let value = match step {
                7 => json!("NaN"),
                8 => json!("Infinity"),
                9 => json!("-Infinity"),
                _ => json!(1.0 / (step as f64 + 1.0)),
            };
            point("train/loss", step, value)
        })
        .collect();
    let (status, body) = f.ingest(&run, json!({"batch_id": "b", "points": points})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let path = format!("/runs/{run}/metrics?key=train/loss");

    // Points: the same steps, times and values, NaN and infinities as strings.
    let objects = f.get(&path).await;
    let columns = f.get(&format!("{path}&format=columns")).await;
    let objects = objects["points"].as_array().unwrap();
    assert!(columns.get("buckets").is_none());
    assert_eq!(columns["key"], "train/loss");
    for (i, point) in objects.iter().enumerate() {
        assert_eq!(columns["steps"][i], point["step"]);
        assert_eq!(columns["times"][i], point["wall_time"]);
        assert_eq!(columns["values"][i], point["value"]);
    }
    assert_eq!(columns["values"][7], "NaN");
    assert_eq!(columns["steps"].as_array().unwrap().len(), 300);

    // Buckets: one array per field.
    let objects = f.get(&format!("{path}&max_points=100")).await;
    let columns = f.get(&format!("{path}&max_points=100&format=columns")).await;
    assert!(columns.get("steps").is_none());
    let buckets = objects["buckets"].as_array().unwrap();
    for field in [
        "step_from",
        "step_to",
        "time_from",
        "time_to",
        "min",
        "max",
        "last",
        "count",
        "non_finite",
    ] {
        let column: Vec<&Value> = columns["buckets"][field].as_array().unwrap().iter().collect();
        let expected: Vec<&Value> = buckets.iter().map(|b| &b[field]).collect();
        assert_eq!(column, expected, "{field}");
    }

    // Arrow: the same, with IEEE NaN and infinities.
    let arrow = |max_points: usize| {
        let request = f
            .server
            .http
            .get(f.server.api_url(&format!("{path}&max_points={max_points}")))
            .bearer_auth(&f.token)
            .header("accept", "application/vnd.apache.arrow.stream");
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(
                response.headers()["content-type"],
                "application/vnd.apache.arrow.stream"
            );
            let bytes = response.bytes().await.unwrap();
            let mut reader = arrow_ipc::reader::StreamReader::try_new(&bytes[..], None).unwrap();
            reader.next().unwrap().unwrap()
        }
    };
    let batch = arrow(1000).await;
    assert_eq!(batch.schema().metadata()["gpuplane.kind"], "points");
    let steps = batch.column_by_name("step").unwrap().as_primitive::<Int64Type>();
    let values = batch
        .column_by_name("value")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(steps.len(), 300);
    assert_eq!(steps.value(299), 299);
    assert!(values.value(7).is_nan());
    assert_eq!(values.value(8), f64::INFINITY);
    assert_eq!(values.value(9), f64::NEG_INFINITY);
    assert_eq!(values.value(3), 0.25);
    let batch = arrow(100).await;
    assert_eq!(batch.schema().metadata()["gpuplane.kind"], "buckets");
    let counts = batch
        .column_by_name("count")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(counts.values().iter().sum::<u64>(), 300);
    assert_eq!(batch.num_rows(), buckets.len());

    // Limits by format, and an unknown format named.
    let (status, body) = f
        .send("GET", &format!("{path}&max_points=200000"), &f.token, None)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.to_string().contains("between 1 and 100000"), "{body}");
    let columns = f.get(&format!("{path}&max_points=1000000&format=columns")).await;
    assert_eq!(columns["steps"].as_array().unwrap().len(), 300);
    let (status, body) = f.send("GET", &format!("{path}&format=csv"), &f.token, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["details"][0]["field"], "format", "{body}");
}

/// A run rewound to the step its next attempt resumes from (#46): what it
/// logged past that step is set aside (a chunk that straddles it is split,
/// a key left empty disappears), the summaries are those of what stays,
/// and a second rewind to the same step changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_rewind_sets_aside_every_point_and_text_past_the_step_and_recounts_what_stays() {
    let f = Fixture::with(|config| config.compaction_delay = std::time::Duration::from_secs(3600)).await;
    let run = f.run("resumed").await;
    for batch in 0..4 {
        let mut points: Vec<Value> = (batch * 25..(batch + 1) * 25)
            .map(|step| {
                let value = if step == 60 {
                    json!("NaN")
                } else {
                    json!(100 - step)
                };
                point("train/loss", step, value)
            })
            .collect();
        if batch == 3 {
            points.extend((80..100).map(|step| point("eval/acc", step, json!(0.5))));
        }
        if batch == 0 {
            points.extend((0..20).map(|step| point("lr", step * 2, json!(0.1))));
        }
        let texts = [
            json!({"key": "sample", "step": batch * 25 + 10, "wall_time": 1.8e9, "text": format!("at {}", batch * 25 + 10)}),
        ];
        let (status, body) = f
            .ingest(
                &run,
                json!({"batch_id": format!("b{batch}"), "points": points, "texts": texts}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let latest_lr = f.get(&format!("/runs/{run}")).await["latest"]["lr"].clone();
    let db = f.server.db();
    let mut tx = gpuplane_server::store::write(db).await.unwrap();
    let rewound = gpuplane_server::metrics::rewind::rewind(&mut tx, &run, 1, 40)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // train/loss: 41..=99 (59 points, a chunk split at 40); eval/acc: all 20; texts at 60 and 85.
    assert_eq!((rewound.points, rewound.texts), (79, 2));

    let curve = f
        .get(&format!(
            "/runs/{run}/metrics?key=train/loss&max_points=100000&format=columns"
        ))
        .await;
    assert_eq!(curve["steps"], json!((0..=40).collect::<Vec<i64>>()));
    let run_json = f.get(&format!("/runs/{run}")).await;
    let loss = &run_json["latest"]["train/loss"];
    assert_eq!(
        (
            &loss["step"],
            &loss["value"],
            &loss["count"],
            &loss["non_finite_count"]
        ),
        (&json!(40), &json!(60.0), &json!(41), &json!(0)),
        "the NaN at step 60 went with the rest"
    );
    assert!(run_json["latest"].get("eval/acc").is_none(), "{run_json}");
    assert_eq!(
        run_json["latest"]["lr"], latest_lr,
        "a key wholly before the step is untouched"
    );
    let texts = f.get(&format!("/runs/{run}/texts?limit=100")).await;
    let texts: Vec<&str> = texts["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["at 35", "at 10"]);
    // Downsampled reads see the same.
    let buckets = f
        .get(&format!("/runs/{run}/metrics?key=train/loss&max_points=7"))
        .await;
    assert_eq!(
        buckets["buckets"].as_array().unwrap().last().unwrap()["step_to"],
        json!(40)
    );

    // Nothing acknowledged is lost: the set-aside points decode to what was sent.
    let aside: Vec<(String, i64, Vec<u8>)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT key, count, points FROM metric_points_rewound WHERE run_id = $1 ORDER BY key, step_min",
        )
        .bind(&run)
        .fetch_all(pool)
        .await
    })
    .unwrap();
    let mut loss = Vec::new();
    for (key, count, blob) in &aside {
        let mut points = Vec::new();
        gpuplane_server::metrics::chunk::decode_points(blob, &mut points).unwrap();
        assert_eq!(points.len() as i64, *count);
        if key == "train/loss" {
            loss.extend(points);
        }
    }
    let steps: Vec<i64> = loss.iter().map(|p| p.step).collect();
    assert_eq!(steps, (41..100).collect::<Vec<i64>>());
    assert!(loss.iter().all(|p| (p.step == 60) == p.value.is_nan()));

    let mut tx = gpuplane_server::store::write(db).await.unwrap();
    let again = gpuplane_server::metrics::rewind::rewind(&mut tx, &run, 2, 40)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((again.points, again.texts), (0, 0));
}
