//! The chunk format: the points of one series sorted by step, compressed
//! without loss ([`codec`]: NaN and ±∞ keep their exact bits), plus
//! summaries of consecutive sub-buckets at three [`LEVELS`], which wide
//! queries aggregate instead of decoding points. Ingest writes chunks of up
//! to [`CHUNK_POINTS`]; compaction merges them into chunks of up to
//! [`MERGED_CHUNK_POINTS`], so a long series has few rows and a query over
//! all of it reads a few coarse summaries per bucket.

use super::codec;
use byteorder::{ByteOrder, LittleEndian};

pub const CHUNK_POINTS: usize = 4096;
pub const MERGED_CHUNK_POINTS: usize = 131_072;
const POINT_BYTES: usize = 24;
const SUB_BYTES: usize = 72;

/// A summary level: its column and how many points each of its sub-buckets covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub column: &'static str,
    pub sub_points: usize,
}

/// The summary levels, finest first. Chunks written before the coarser
/// levels existed have them empty, and their finest level has sub-buckets
/// of 64 points.
pub const LEVELS: [Level; 3] = [
    Level {
        column: "summary",
        sub_points: 128,
    },
    Level {
        column: "summary_mid",
        sub_points: 1024,
    },
    Level {
        column: "summary_coarse",
        sub_points: 8192,
    },
];

pub use super::codec::RawPoint;

/// Aggregates of consecutive points (in step order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sub {
    pub step_from: i64,
    pub step_to: i64,
    pub time_min: f64,
    pub time_max: f64,
    /// Of finite values; NaN when there were none.
    pub min: f64,
    pub max: f64,
    pub last_step: i64,
    pub last: f64,
    pub count: u32,
    pub non_finite: u32,
}

impl Sub {
    pub fn of(points: &[RawPoint]) -> Sub {
        let mut sub = Sub {
            step_from: i64::MAX,
            step_to: i64::MIN,
            time_min: f64::INFINITY,
            time_max: f64::NEG_INFINITY,
            min: f64::NAN,
            max: f64::NAN,
            last_step: i64::MIN,
            last: f64::NAN,
            count: 0,
            non_finite: 0,
        };
        for point in points {
            sub.add(point);
        }
        sub
    }

    pub fn add(&mut self, point: &RawPoint) {
        self.step_from = self.step_from.min(point.step);
        self.step_to = self.step_to.max(point.step);
        self.time_min = self.time_min.min(point.wall);
        self.time_max = self.time_max.max(point.wall);
        if point.value.is_finite() {
            self.min = if self.min.is_nan() {
                point.value
            } else {
                self.min.min(point.value)
            };
            self.max = if self.max.is_nan() {
                point.value
            } else {
                self.max.max(point.value)
            };
        } else {
            self.non_finite += 1;
        }
        if point.step >= self.last_step {
            self.last_step = point.step;
            self.last = point.value;
        }
        self.count += 1;
    }

    /// Folds another aggregate into this one.
    pub fn merge(&mut self, other: &Sub) {
        self.step_from = self.step_from.min(other.step_from);
        self.step_to = self.step_to.max(other.step_to);
        self.time_min = self.time_min.min(other.time_min);
        self.time_max = self.time_max.max(other.time_max);
        if !other.min.is_nan() {
            self.min = if self.min.is_nan() {
                other.min
            } else {
                self.min.min(other.min)
            };
            self.max = if self.max.is_nan() {
                other.max
            } else {
                self.max.max(other.max)
            };
        }
        if other.last_step >= self.last_step {
            self.last_step = other.last_step;
            self.last = other.last;
        }
        self.count += other.count;
        self.non_finite += other.non_finite;
    }
}

/// Encodes points (already sorted by step) as a chunk's `points` blob:
/// compressed ([`codec`]) when that is exact and smaller, else raw, 24
/// bytes a point (step i64, wall f64, value f64, little-endian). A raw blob
/// is a multiple of 24 bytes long and a compressed one never is, which is
/// how a reader tells them apart (chunks written before compression are raw).
pub fn encode_points(points: &[RawPoint]) -> Vec<u8> {
    let raw_len = points.len() * POINT_BYTES;
    if let Some(mut bytes) = codec::encode(points).filter(|bytes| bytes.len() < raw_len) {
        if bytes.len().is_multiple_of(POINT_BYTES) {
            bytes.push(0);
        }
        return bytes;
    }
    let mut bytes = vec![0u8; raw_len];
    for (point, out) in points.iter().zip(bytes.chunks_exact_mut(POINT_BYTES)) {
        LittleEndian::write_i64(&mut out[0..8], point.step);
        LittleEndian::write_f64(&mut out[8..16], point.wall);
        LittleEndian::write_f64(&mut out[16..24], point.value);
    }
    bytes
}

/// Appends the points of a `points` blob, raw or compressed, to `out`.
pub fn decode_points(bytes: &[u8], out: &mut Vec<RawPoint>) -> Result<(), codec::Corrupt> {
    decode_steps(bytes, i64::MIN, i64::MAX, out)
}

/// Like [`decode_points`], but a compressed blob decodes only the blocks
/// that may hold steps in `from..=to`: the caller filters.
pub fn decode_steps(bytes: &[u8], from: i64, to: i64, out: &mut Vec<RawPoint>) -> Result<(), codec::Corrupt> {
    if !bytes.len().is_multiple_of(POINT_BYTES) {
        return codec::decode_steps(bytes, from, to, out);
    }
    out.reserve(bytes.len() / POINT_BYTES);
    for raw in bytes.chunks_exact(POINT_BYTES) {
        out.push(RawPoint {
            step: LittleEndian::read_i64(&raw[0..8]),
            wall: LittleEndian::read_f64(&raw[8..16]),
            value: LittleEndian::read_f64(&raw[16..24]),
        });
    }
    Ok(())
}

/// A summary blob: one [`Sub`] per `sub_points` points.
pub fn encode_summary(points: &[RawPoint], sub_points: usize) -> Vec<u8> {
    let subs: Vec<Sub> = points.chunks(sub_points).map(Sub::of).collect();
    let mut bytes = vec![0u8; subs.len() * SUB_BYTES];
    for (sub, out) in subs.iter().zip(bytes.chunks_exact_mut(SUB_BYTES)) {
        LittleEndian::write_i64(&mut out[0..8], sub.step_from);
        LittleEndian::write_i64(&mut out[8..16], sub.step_to);
        LittleEndian::write_f64(&mut out[16..24], sub.time_min);
        LittleEndian::write_f64(&mut out[24..32], sub.time_max);
        LittleEndian::write_f64(&mut out[32..40], sub.min);
        LittleEndian::write_f64(&mut out[40..48], sub.max);
        LittleEndian::write_i64(&mut out[48..56], sub.last_step);
        LittleEndian::write_f64(&mut out[56..64], sub.last);
        LittleEndian::write_u32(&mut out[64..68], sub.count);
        LittleEndian::write_u32(&mut out[68..72], sub.non_finite);
    }
    bytes
}

pub fn decode_summary(bytes: &[u8], out: &mut Vec<Sub>) {
    for raw in bytes.chunks_exact(SUB_BYTES) {
        out.push(Sub {
            step_from: LittleEndian::read_i64(&raw[0..8]),
            step_to: LittleEndian::read_i64(&raw[8..16]),
            time_min: LittleEndian::read_f64(&raw[16..24]),
            time_max: LittleEndian::read_f64(&raw[24..32]),
            min: LittleEndian::read_f64(&raw[32..40]),
            max: LittleEndian::read_f64(&raw[40..48]),
            last_step: LittleEndian::read_i64(&raw[48..56]),
            last: LittleEndian::read_f64(&raw[56..64]),
            count: LittleEndian::read_u32(&raw[64..68]),
            non_finite: LittleEndian::read_u32(&raw[68..72]),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_and_summaries_round_trip_with_non_finite_values_intact() {
        let points: Vec<RawPoint> = (0..150)
            .map(|i| RawPoint {
                step: i,
                wall: 1000.0 + i as f64,
                value: match i {
                    7 => f64::NAN,
                    8 => f64::INFINITY,
                    100 => f64::NEG_INFINITY,
                    _ => i as f64 * 0.5,
                },
            })
            .collect();
        let mut back = Vec::new();
        decode_points(&encode_points(&points), &mut back).unwrap();
        assert_eq!(back.len(), 150);
        assert!(back[7].value.is_nan());
        assert_eq!(back[8].value, f64::INFINITY);
        assert_eq!(back[100].value, f64::NEG_INFINITY);
        assert_eq!(back[149], points[149]);

        let mut subs = Vec::new();
        decode_summary(&encode_summary(&points, 64), &mut subs);
        assert_eq!(subs.len(), 3, "64 + 64 + 22 points");
        assert_eq!(
            (
                subs[0].step_from,
                subs[0].step_to,
                subs[0].count,
                subs[0].non_finite
            ),
            (0, 63, 64, 2)
        );
        assert_eq!((subs[0].min, subs[0].max), (0.0, 31.5));
        assert_eq!(subs[1].non_finite, 1);
        assert_eq!((subs[2].count, subs[2].last_step, subs[2].last), (22, 149, 74.5));
        let mut all = subs[0];
        all.merge(&subs[1]);
        all.merge(&subs[2]);
        assert_eq!(
            (all.count, all.non_finite, all.step_from, all.step_to),
            (150, 3, 0, 149)
        );
    }

    #[test]
    fn an_all_nan_sub_has_no_min_or_max() {
        let sub = Sub::of(&[RawPoint {
            step: 1,
            wall: 0.0,
            value: f64::NAN,
        }]);
        assert!(sub.min.is_nan() && sub.max.is_nan());
        assert!(sub.last.is_nan());
        assert_eq!(sub.non_finite, 1);
    }
}
