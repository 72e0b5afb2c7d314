//! A metric query's answer as an Apache Arrow IPC stream
//! (`application/vnd.apache.arrow.stream`), for notebooks: `pyarrow` reads
//! it without parsing a number. Non-finite values are plain IEEE floats
//! there, bit for bit.
//!
//! Raw points are the columns `step` (int64), `time` (float64, seconds since
//! the epoch) and `value` (float64); buckets are the [`Bucket`] fields, with
//! `min` and `max` null where a bucket held no finite value. The schema's
//! metadata names the key and which of the two it is (`gpuplane.kind`).

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, UInt64Array};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, Field, Schema};
use gpuplane_api::metric::{Bucket, Series, SeriesPoint};
use std::collections::HashMap;
use std::sync::Arc;

/// The media type of an Arrow IPC stream.
pub const MEDIA_TYPE: &str = "application/vnd.apache.arrow.stream";

/// A series as one Arrow record batch in a stream.
pub fn encode(series: &Series) -> Result<Vec<u8>, ArrowError> {
    let (kind, columns) = match (&series.points, &series.buckets) {
        (_, Some(buckets)) => ("buckets", bucket_columns(buckets)),
        (points, None) => ("points", point_columns(points.as_deref().unwrap_or_default())),
    };
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), array.null_count() > 0))
        .collect();
    let metadata = HashMap::from([
        ("gpuplane.key".to_string(), series.key.clone()),
        ("gpuplane.kind".to_string(), kind.to_string()),
    ]);
    let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
    let batch = RecordBatch::try_new(
        schema.clone(),
        columns.into_iter().map(|(_, array)| array).collect(),
    )?;
    let mut writer = StreamWriter::try_new(Vec::new(), &schema)?;
    writer.write(&batch)?;
    writer.finish()?;
    writer.into_inner()
}

fn point_columns(points: &[SeriesPoint]) -> Vec<(&'static str, ArrayRef)> {
    vec![
        (
            "step",
            Arc::new(Int64Array::from_iter_values(points.iter().map(|p| p.step))),
        ),
        ("time", floats(points.iter().map(|p| p.wall_time))),
        ("value", floats(points.iter().map(|p| p.value.0))),
    ]
}

fn bucket_columns(buckets: &[Bucket]) -> Vec<(&'static str, ArrayRef)> {
    let counts = |count: fn(&Bucket) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(buckets.iter().map(count)))
    };
    vec![
        (
            "step_from",
            Arc::new(Int64Array::from_iter_values(buckets.iter().map(|b| b.step_from))),
        ),
        (
            "step_to",
            Arc::new(Int64Array::from_iter_values(buckets.iter().map(|b| b.step_to))),
        ),
        ("time_from", floats(buckets.iter().map(|b| b.time_from))),
        ("time_to", floats(buckets.iter().map(|b| b.time_to))),
        (
            "min",
            Arc::new(Float64Array::from_iter(
                buckets.iter().map(|b| b.min.map(|v| v.0)),
            )),
        ),
        (
            "max",
            Arc::new(Float64Array::from_iter(
                buckets.iter().map(|b| b.max.map(|v| v.0)),
            )),
        ),
        ("last", floats(buckets.iter().map(|b| b.last.0))),
        ("count", counts(|b| b.count)),
        ("non_finite", counts(|b| b.non_finite)),
    ]
}

fn floats(values: impl Iterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type};
    use arrow_ipc::reader::StreamReader;
    use gpuplane_api::metric::Value;

    fn read(bytes: &[u8]) -> RecordBatch {
        let mut reader = StreamReader::try_new(bytes, None).unwrap();
        let batch = reader.next().unwrap().unwrap();
        assert!(reader.next().is_none(), "one batch");
        batch
    }

    #[test]
    fn points_keep_their_bits_and_the_key() {
        let values = [1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0];
        let series = Series {
            key: "train/loss".into(),
            points: Some(
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| SeriesPoint {
                        step: i as i64 * 10,
                        wall_time: 1.7e9 + i as f64 * 0.001,
                        value: Value(*v),
                    })
                    .collect(),
            ),
            buckets: None,
        };
        let batch = read(&encode(&series).unwrap());
        let metadata = batch.schema().metadata().clone();
        assert_eq!(metadata["gpuplane.key"], "train/loss");
        assert_eq!(metadata["gpuplane.kind"], "points");
        let steps = batch.column_by_name("step").unwrap().as_primitive::<Int64Type>();
        assert_eq!(steps.values().to_vec(), vec![0, 10, 20, 30, 40]);
        let read_values = batch
            .column_by_name("value")
            .unwrap()
            .as_primitive::<Float64Type>();
        for (read, written) in read_values.values().iter().zip(values) {
            assert_eq!(read.to_bits(), written.to_bits());
        }
        let times = batch
            .column_by_name("time")
            .unwrap()
            .as_primitive::<Float64Type>();
        assert_eq!(times.value(4), 1.7e9 + 0.004);
    }

    #[test]
    fn buckets_without_a_finite_value_have_null_min_and_max() {
        let bucket = |min: Option<f64>, last: f64| Bucket {
            step_from: 0,
            step_to: 9,
            time_from: 1.0,
            time_to: 2.0,
            min: min.map(Value),
            max: min.map(Value),
            last: Value(last),
            count: 10,
            non_finite: u64::from(min.is_none()) * 10,
        };
        let series = Series {
            key: "k".into(),
            points: None,
            buckets: Some(vec![bucket(Some(0.5), 0.5), bucket(None, f64::NAN)]),
        };
        let batch = read(&encode(&series).unwrap());
        assert_eq!(batch.schema().metadata()["gpuplane.kind"], "buckets");
        assert_eq!(batch.num_rows(), 2);
        let min = batch.column_by_name("min").unwrap().as_primitive::<Float64Type>();
        assert!(min.is_valid(0) && min.is_null(1));
        assert!(
            batch
                .column_by_name("last")
                .unwrap()
                .as_primitive::<Float64Type>()
                .value(1)
                .is_nan()
        );
    }

    #[test]
    fn an_empty_series_is_an_empty_batch_of_points() {
        let series = Series {
            key: "none".into(),
            points: Some(Vec::new()),
            buckets: None,
        };
        let batch = read(&encode(&series).unwrap());
        assert_eq!(batch.num_rows(), 0);
        assert_eq!(batch.num_columns(), 3);
    }
}
