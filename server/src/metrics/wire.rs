//! The one way a metric batch is checked and prepared for the store.
//! Points are grouped by key as they come, keys are borrowed (no
//! allocation per point) and each distinct key is checked once. The API
//! reads its bodies with [`WireBatch`] in one pass, which reads exactly the
//! JSON that [`Batch`](gpuplane_api::metric::Batch) describes (a fuzz test
//! holds the two parsers to the same results); points already parsed (an
//! agent's TensorBoard points, an evaluation's metrics) go through
//! [`prepare`].

use super::chunk::RawPoint;
use super::validate::{MAX_POINT_ERRORS, batch_errors, check_time, key_error, key_is_valid};
use super::{PreparedBatch, codec};
use crate::store::Error;
use gpuplane_api::error::FieldError;
use gpuplane_api::metric::{Point, Text, Value};
use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// A metrics batch as its body holds it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireBatch<'a> {
    batch_id: String,
    #[serde(default, borrow)]
    points: GroupedPoints<'a>,
    #[serde(default)]
    texts: Vec<Text>,
}

/// One point of the body: [`Point`](gpuplane_api::metric::Point) with its
/// key borrowed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WirePoint<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    step: i64,
    wall_time: f64,
    value: Value,
}

/// The body's points by key, with the errors of their fields.
#[derive(Default)]
struct GroupedPoints<'a> {
    count: usize,
    /// Each key's points in body order, and whether the key is valid.
    by_key: BTreeMap<Cow<'a, str>, (Vec<RawPoint>, bool)>,
    errors: Vec<FieldError>,
}

impl<'de: 'a, 'a> Deserialize<'de> for GroupedPoints<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Group<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Group<'a> {
            type Value = GroupedPoints<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of points")
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
                let mut grouped = GroupedPoints::default();
                while let Some(point) = seq.next_element::<WirePoint<'a>>()? {
                    grouped.add(point);
                }
                Ok(grouped)
            }
        }
        deserializer.deserialize_seq(Group(std::marker::PhantomData))
    }
}

impl<'a> GroupedPoints<'a> {
    fn add(&mut self, point: WirePoint<'a>) {
        let at = self.count;
        self.count += 1;
        let raw = RawPoint {
            step: point.step,
            wall: codec::to_millis(point.wall_time),
            value: point.value.0,
        };
        let key_ok = match self.by_key.get_mut(point.key.as_ref()) {
            Some((points, ok)) => {
                points.push(raw);
                *ok
            }
            None => {
                let ok = key_is_valid(&point.key);
                self.by_key.insert(point.key, (vec![raw], ok));
                ok
            }
        };
        if self.errors.len() < MAX_POINT_ERRORS {
            if !key_ok {
                self.errors.push(key_error("points", at));
            }
            check_time("points", at, point.wall_time, &mut self.errors);
        }
    }
}

impl WireBatch<'_> {
    /// Checks and prepares the batch; one error per bad field.
    pub fn prepare(self) -> Result<PreparedBatch, Error> {
        checked(self.batch_id, self.points, self.texts)
    }
}

/// Checks and prepares a batch whose points are already parsed, exactly as
/// [`WireBatch::prepare`] does a body holding them.
pub fn prepare(batch_id: String, points: &[Point], texts: Vec<Text>) -> Result<PreparedBatch, Error> {
    let mut grouped = GroupedPoints::default();
    for point in points {
        grouped.add(WirePoint {
            key: Cow::Borrowed(&point.key),
            step: point.step,
            wall_time: point.wall_time,
            value: point.value,
        });
    }
    checked(batch_id, grouped, texts)
}

fn checked(batch_id: String, points: GroupedPoints<'_>, texts: Vec<Text>) -> Result<PreparedBatch, Error> {
    let errors = batch_errors(&batch_id, points.count, points.errors, &texts);
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let by_key = points.by_key.into_iter().map(|(key, (points, _))| (key, points));
    Ok(super::ingest::prepared(batch_id, points.count, texts, by_key))
}
