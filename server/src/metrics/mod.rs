//! Metrics: ingest (idempotent by batch id, durable when acknowledged),
//! chart queries that downsample without hiding spikes or non-finite
//! values, and per-run summaries. NaN, +∞ and −∞ are stored with their
//! exact bits and never become null or zero.

pub mod arrow;
pub mod chart;
pub mod chunk;
pub mod codec;
pub mod compact;
pub mod group;
mod ingest;
mod query;
pub mod rewind;
pub mod texts;
mod validate;
pub mod wire;

pub use ingest::*;
pub use query::*;
pub use validate::*;
pub use wire::prepare;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Error;
    use gpuplane_api::metric::Batch;

    fn parse<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    fn prepare_parsed(batch: Batch) -> Result<PreparedBatch, Error> {
        prepare(batch.batch_id, &batch.points, batch.texts)
    }

    /// What a body becomes: not a batch, an invalid one (its errors), or a prepared one (everything it stores).
    type Outcome =
        Result<Result<(String, usize, Vec<String>, Vec<(String, Vec<Vec<u8>>)>), Vec<String>>, String>;

    fn outcome(parsed: Result<Result<PreparedBatch, Error>, serde_json::Error>) -> Outcome {
        match parsed {
            Err(_) => Err("not a batch".into()),
            Ok(Err(Error::Invalid(fields))) => Ok(Err(fields
                .iter()
                .map(|f| format!("{}: {}", f.field, f.message))
                .collect())),
            Ok(Err(other)) => panic!("preparing a batch touches no database: {other}"),
            Ok(Ok(prepared)) => Ok(Ok((
                prepared.batch_id,
                prepared.points,
                prepared.texts.iter().map(|t| format!("{t:?}")).collect(),
                prepared
                    .series
                    .into_iter()
                    .map(|(key, chunks, update)| {
                        let mut bytes: Vec<Vec<u8>> = chunks.into_iter().map(|c| c.points).collect();
                        bytes.push(
                            format!("{} {} {:?}", update.points, update.non_finite, update.first_bad)
                                .into_bytes(),
                        );
                        (key, bytes)
                    })
                    .collect(),
            ))),
        }
    }

    /// Fuzz: any request body goes through the ingest decoder the API uses
    /// ([`wire::WireBatch`]) without a panic and to exactly what parsing a
    /// [`Batch`] and [`prepare`] make of it: the same refusals, the same
    /// field errors, the same chunks. What it accepts
    /// decodes back to its points, bit for bit (below).
    #[test]
    fn fuzz_metric_batch() {
        bolero::check!().for_each(|bytes: &[u8]| {
            let by_batch = parse::<Batch>(bytes).map(prepare_parsed);
            let by_wire = parse::<wire::WireBatch>(bytes).map(wire::WireBatch::prepare);
            assert_eq!(outcome(by_wire), outcome(by_batch));
        });
        // Steps at the edges of i64 (delta-of-delta encoding's hard cases)
        // half of the time; any value bits, non-finite sent as "NaN".
        type Points = Vec<(u8, (u8, i64), u32, u64)>;
        let encoded = std::sync::atomic::AtomicUsize::new(0);
        bolero::check!().with_type::<Points>().for_each(|points| {
            let edges = [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX];
            let points: Vec<serde_json::Value> = points
                .iter()
                .map(|(key, (pick, raw), wall, bits)| {
                    let step = if pick % 2 == 0 { edges[(*pick as usize / 2) % edges.len()] } else { *raw };
                    let value = f64::from_bits(*bits);
                    let value = if value.is_finite() { serde_json::json!(value) } else { serde_json::json!("NaN") };
                    let wall = 1.7e9 + *wall as f64 / 1000.0;
                    serde_json::json!({"key": format!("k{}", key % 4), "step": step, "wall_time": wall, "value": value})
                })
                .collect();
            let body = serde_json::json!({"batch_id": "fuzz", "points": points}).to_string();
            let batch = parse::<Batch>(body.as_bytes()).expect("a well-formed batch parses");
            let prepared = prepare_parsed(batch.clone()).expect("a well-formed batch is valid");
            for (key, chunks, _) in prepared.series {
                let mut decoded = Vec::new();
                for chunk in &chunks {
                    chunk::decode_points(&chunk.points, &mut decoded).expect("a chunk it wrote decodes");
                }
                let mut sent: Vec<(i64, u64)> = batch
                    .points
                    .iter()
                    .filter(|p| p.key == key)
                    .map(|p| (p.step, p.value.0.to_bits()))
                    .collect();
                let mut got: Vec<(i64, u64)> = decoded.iter().map(|p| (p.step, p.value.to_bits())).collect();
                sent.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, sent, "{key}: every point once, its value bit for bit");
            }
            encoded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(encoded.into_inner() > 0);
        // Bodies near the rules: keys empty, too long, with a control
        // character or an escape, points in any order, batch ids empty or not.
        let keys = [
            "k0",
            "k1",
            "",
            "\u{1}k",
            "k/\"q\"",
            "é",
            &"x".repeat(MAX_KEY_LEN + 1),
            &"y".repeat(MAX_KEY_LEN),
        ];
        bolero::check!().with_type::<(bool, Vec<(u8, i64, u16)>)>().for_each(|(named, points)| {
            let points: Vec<serde_json::Value> = points
                .iter()
                .map(|(key, step, wall)| {
                    serde_json::json!({"key": keys[*key as usize % keys.len()], "step": step, "wall_time": *wall as f64, "value": *step as f64})
                })
                .collect();
            let body = serde_json::json!({"batch_id": if *named { "b" } else { " " }, "points": points}).to_string();
            let by_batch = parse::<Batch>(body.as_bytes()).map(prepare_parsed);
            let by_wire = parse::<wire::WireBatch>(body.as_bytes()).map(wire::WireBatch::prepare);
            assert_eq!(outcome(by_wire), outcome(by_batch));
        });
    }

    /// Fuzz: stored chunk bytes that are not what the encoder wrote (a
    /// damaged database) are an error, never a panic or an endless loop.
    #[test]
    fn fuzz_chunk_decoder() {
        bolero::check!()
            .with_type::<(Vec<u8>, i64, i64)>()
            .for_each(|(bytes, from, to)| {
                let mut out = Vec::new();
                let _ = chunk::decode_points(bytes, &mut out);
                let _ = chunk::decode_steps(bytes, *from, *to, &mut out);
                let mut subs = Vec::new();
                chunk::decode_summary(bytes, &mut subs);
            });
    }

    #[test]
    fn loss_patterns_are_globs() {
        assert!(matches_pattern("*loss*", "train/loss"));
        assert!(matches_pattern("*loss*", "eval/Loss_total"));
        assert!(!matches_pattern("*loss*", "train/accuracy"));
        assert!(matches_pattern("train/*", "train/lr"));
        assert!(!matches_pattern("train/*", "eval/lr"));
        assert!(matches_pattern("exact", "EXACT"));
    }
}
