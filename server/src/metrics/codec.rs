//! The compressed form of a chunk's points (after Gorilla, Pelkonen et al.,
//! VLDB 2015): steps and wall times (as whole milliseconds) as
//! delta-of-deltas, values as the XOR of their bits with a prediction. It is
//! lossless: every value keeps its exact bits (NaN payloads, ±Inf, -0.0),
//! and a chunk whose wall times are not whole milliseconds is not encoded
//! at all (see [`encode`]).
//!
//! Layout: a version byte (1), a byte saying whether values are 32-bit
//! words (1) or 64 (0), the point count as a LEB128 varint, an index of
//! blocks of [`BLOCK_POINTS`] points (each block's first step as i64 and
//! its length in bytes as u32, little-endian), then the blocks. A block is
//! a bit stream, most significant bit first, that stands alone: its first
//! point's step and wall milliseconds as 64 bits each and its value bits,
//! 2 bits naming the value form of the block (see [`Values`]; a merged
//! chunk whose curve changes character changes form with it), then for
//! every further point a step delta-of-delta, a wall delta-of-delta and
//! its value against a prediction. A reader that wants a few steps of a
//! big chunk decodes only the blocks that hold them ([`decode_steps`]).

mod bits;
mod values;

pub use bits::Corrupt;
use bits::{BitReader, BitWriter, DeltaOfDelta, read_varint, write_varint};
use values::{ValueCoder, Values, is_float32};

/// One point of a series, as the codec packs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawPoint {
    pub step: i64,
    pub wall: f64,
    pub value: f64,
}

const VERSION: u8 = 1;

/// Points that share a value form.
const BLOCK_POINTS: usize = 1024;
/// Points of a block tried with every form before one is chosen.
const SAMPLE_POINTS: usize = 128;

/// Encoded points, or None when the points cannot be encoded exactly (a
/// wall time that is not a whole number of milliseconds).
pub fn encode(points: &[RawPoint]) -> Option<Vec<u8>> {
    let float32 = points.iter().all(|p| is_float32(p.value));
    encode_with(points, float32, |coder, sample| {
        Values::all(float32)
            .into_iter()
            .min_by_key(|&form| coder.bits_for(form, sample))
            .expect("four forms")
    })
}

/// Encodes with the value form `choose` picks for each block (from the
/// coder's state and the block's first points).
fn encode_with(
    points: &[RawPoint],
    float32: bool,
    mut choose: impl FnMut(&ValueCoder, &[RawPoint]) -> Values,
) -> Option<Vec<u8>> {
    let blocks = points
        .chunks(BLOCK_POINTS)
        .map(|block| encode_block(block, float32, &mut choose))
        .collect::<Option<Vec<Vec<u8>>>>()?;
    let mut out = Vec::with_capacity(points.len() * 5 + 16);
    out.push(VERSION);
    out.push(u8::from(float32));
    write_varint(&mut out, points.len() as u64);
    for (block, bytes) in points.chunks(BLOCK_POINTS).zip(&blocks) {
        out.extend(block[0].step.to_le_bytes());
        out.extend((bytes.len() as u32).to_le_bytes());
    }
    for bytes in blocks {
        out.extend(bytes);
    }
    Some(out)
}

/// One block's bit stream: its first point whole, then its value form and
/// every further point against the ones before.
fn encode_block(
    points: &[RawPoint],
    float32: bool,
    choose: &mut impl FnMut(&ValueCoder, &[RawPoint]) -> Values,
) -> Option<Vec<u8>> {
    let mut out = BitWriter::with_capacity(points.len() * 5 + 16);
    let mut steps = DeltaOfDelta::default();
    let mut walls = DeltaOfDelta::default();
    let mut values = ValueCoder::new(Values::all(float32)[0]);
    for (i, point) in points.iter().enumerate() {
        let millis = whole_millis(point.wall)?;
        let bits = values.form.bits(point.value);
        if i == 0 {
            out.write(point.step as u64, 64);
            out.write(millis as u64, 64);
            out.write(bits, values.form.width());
            steps.first(point.step);
            walls.first(millis);
            values.first(bits);
            continue;
        }
        if i == 1 {
            let sample = &points[1..(1 + SAMPLE_POINTS).min(points.len())];
            values.form = choose(&values, sample);
            out.write(values.form.block_code(), 2);
        }
        steps.write(&mut out, point.step);
        walls.write(&mut out, millis);
        values.write(&mut out, bits);
    }
    Some(out.finish())
}

/// Appends the points of an encoded blob to `out`.
pub fn decode(bytes: &[u8], out: &mut Vec<RawPoint>) -> Result<(), Corrupt> {
    decode_steps(bytes, i64::MIN, i64::MAX, out)
}

/// Appends the points of an encoded blob to `out`, decoding only the
/// blocks that may hold steps in `from..=to` (so some points outside it
/// come too: callers filter).
pub fn decode_steps(bytes: &[u8], from: i64, to: i64, out: &mut Vec<RawPoint>) -> Result<(), Corrupt> {
    let [version, flags, rest @ ..] = bytes else {
        return Err(Corrupt("too short"));
    };
    if *version != VERSION {
        return Err(Corrupt("unknown version"));
    }
    if *flags > 1 {
        return Err(Corrupt("unknown value width"));
    }
    let form = Values::all(*flags == 1)[0];
    let (count, rest) = read_varint(rest).ok_or(Corrupt("bad count"))?;
    let blocks = count.div_ceil(BLOCK_POINTS as u64);
    // Each block takes 12 bytes of index: a count beyond that is a lie.
    if blocks > rest.len() as u64 / BLOCK_INDEX_BYTES as u64 {
        return Err(Corrupt("count beyond the data"));
    }
    let (index, mut data) = rest.split_at(blocks as usize * BLOCK_INDEX_BYTES);
    let entries: Vec<(i64, usize)> = index
        .chunks_exact(BLOCK_INDEX_BYTES)
        .map(|entry| {
            let step = i64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(entry[8..].try_into().expect("4 bytes"));
            (step, len as usize)
        })
        .collect();
    for (i, &(first_step, len)) in entries.iter().enumerate() {
        if len > data.len() {
            return Err(Corrupt("block beyond the data"));
        }
        let (block, after) = data.split_at(len);
        data = after;
        // Steps are sorted: a block's run up to the next block's first.
        let last_step = entries.get(i + 1).map_or(i64::MAX, |next| next.0);
        if first_step > to || last_step < from {
            continue;
        }
        let points = if i + 1 < entries.len() {
            BLOCK_POINTS as u64
        } else {
            count - (blocks - 1) * BLOCK_POINTS as u64
        };
        decode_block(block, form, points, out)?;
    }
    Ok(())
}

const BLOCK_INDEX_BYTES: usize = 12;

fn decode_block(bytes: &[u8], form: Values, count: u64, out: &mut Vec<RawPoint>) -> Result<(), Corrupt> {
    out.reserve(count as usize);
    let mut input = BitReader::new(bytes);
    let mut steps = DeltaOfDelta::default();
    let mut walls = DeltaOfDelta::default();
    let mut values = ValueCoder::new(form);
    for i in 0..count {
        let (step, millis, bits) = if i == 0 {
            let (step, millis, bits) = (
                input.read(64)? as i64,
                input.read(64)? as i64,
                input.read(form.width())?,
            );
            steps.first(step);
            walls.first(millis);
            values.first(bits);
            (step, millis, bits)
        } else {
            if i == 1 {
                values.form = form.with_block_code(input.read(2)?);
            }
            (
                steps.read(&mut input)?,
                walls.read(&mut input)?,
                values.read(&mut input)?,
            )
        };
        out.push(RawPoint {
            step,
            wall: millis as f64 / 1000.0,
            value: form.value(bits),
        });
    }
    Ok(())
}

/// A wall time in whole milliseconds, when that is exactly what it is.
fn whole_millis(wall: f64) -> Option<i64> {
    if !wall.is_finite() || wall.abs() > 1e12 {
        return None;
    }
    let millis = (wall * 1000.0).round() as i64;
    (((millis as f64) / 1000.0).to_bits() == wall.to_bits()).then_some(millis)
}

/// A wall time as metrics keep it: rounded to the millisecond (times
/// beyond any calendar are kept as they are).
pub fn to_millis(wall: f64) -> f64 {
    if !wall.is_finite() || wall.abs() > 1e12 {
        return wall;
    }
    ((wall * 1000.0).round() as i64) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn point(step: i64, wall: f64, value: f64) -> RawPoint {
        RawPoint { step, wall, value }
    }

    /// Every block in one form.
    fn encode_as(points: &[RawPoint], form: Values) -> Option<Vec<u8>> {
        encode_with(points, form.float32, |_, _| form)
    }

    fn round_trip(points: &[RawPoint]) -> Vec<RawPoint> {
        let bytes = encode(points).expect("encodable");
        let mut back = Vec::new();
        decode(&bytes, &mut back).expect("decodes");
        back
    }

    fn same_bits(a: &[RawPoint], b: &[RawPoint]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(a, b)| {
                a.step == b.step
                    && a.wall.to_bits() == b.wall.to_bits()
                    && a.value.to_bits() == b.value.to_bits()
            })
    }

    #[test]
    fn every_value_keeps_its_exact_bits() {
        let odd_values = [
            f64::NAN,
            f64::from_bits(0x7ff8_dead_beef_0001), // a NaN with a payload
            f64::from_bits(0xfff0_0000_0000_0001), // a signalling, negative NaN
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.0,
            f64::MIN_POSITIVE / 4.0, // subnormal
            f64::MAX,
            f64::MIN,
            1.0,
            1.0,
            0.1f32 as f64,
        ];
        let points: Vec<RawPoint> = odd_values
            .iter()
            .enumerate()
            .map(|(i, &value)| point(i as i64, 1_764_460_800.0 + i as f64 * 0.125, value))
            .collect();
        assert!(same_bits(&points, &round_trip(&points)));
    }

    #[test]
    fn float32_values_and_smooth_curves_take_their_own_forms() {
        let float32: Vec<RawPoint> = [f32::NAN, f32::INFINITY, -0.0, 0.5, 0.25, f32::MIN_POSITIVE, 0.1]
            .iter()
            .enumerate()
            .map(|(i, &v)| point(i as i64, i as f64, f64::from(v)))
            .collect();
        assert!(same_bits(&float32, &round_trip(&float32)));
        assert_eq!(encode(&float32).unwrap()[1], 1, "32-bit words");

        let schedule: Vec<RawPoint> = (0..4096)
            .map(|i| {
                point(
                    i,
                    i as f64,
                    3e-4 * 0.5 * (1.0 + (i as f64 / 4096.0 * std::f64::consts::PI).cos()),
                )
            })
            .collect();
        assert!(same_bits(&schedule, &round_trip(&schedule)));
        let linear = encode(&schedule).unwrap();
        assert_eq!(linear[1], 0, "64-bit words");
        let previous = encode_as(
            &schedule,
            Values {
                float32: false,
                linear: false,
                delta: true,
            },
        )
        .unwrap();
        assert!(linear.len() < previous.len());
    }

    #[test]
    fn a_curve_that_changes_character_changes_form_by_block() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let points: Vec<RawPoint> = (0..8192)
            .map(|i| {
                // Round values first (XOR of their bits is small), then
                // jitter across a power of two (their difference is small).
                let value = if i < 4096 {
                    (i / 512) as f64
                } else {
                    f64::from(0.25 + rng.random_range(-0.001..0.001f32))
                };
                point(i, i as f64, value)
            })
            .collect();
        let chosen = encode(&points).unwrap();
        assert!(same_bits(&points, &round_trip(&points)));
        for form in Values::all(true) {
            let single = encode_as(&points, form).unwrap();
            assert!(
                chosen.len() < single.len(),
                "{form:?}: {} vs {}",
                chosen.len(),
                single.len()
            );
        }
    }

    #[test]
    fn a_few_steps_of_a_big_chunk_decode_only_their_blocks() {
        let points: Vec<RawPoint> = (0..5000)
            .map(|i| point(i * 2, i as f64, (i as f64).sqrt()))
            .collect();
        let bytes = encode(&points).unwrap();
        let mut some = Vec::new();
        decode_steps(&bytes, 4100, 4200, &mut some).unwrap();
        assert_eq!(some.len(), BLOCK_POINTS, "one block");
        some.retain(|p| (4100..=4200).contains(&p.step));
        assert!(same_bits(&some, &points[2050..=2100]));
        // Ranges at the blocks' edges (a block is taken to run up to the
        // next one's first step) and beyond the ends.
        let ranges = [
            (2046, 2048, 2),
            (2049, 2050, 1),
            (2040, 2046, 1),
            (-10, -1, 0),
            (9998, 20000, 1),
        ];
        for (from, to, blocks) in ranges {
            let mut found = Vec::new();
            decode_steps(&bytes, from, to, &mut found).unwrap();
            let expected: Vec<RawPoint> = points
                .iter()
                .filter(|p| (from..=to).contains(&p.step))
                .copied()
                .collect();
            let blocks_read = found.len().div_ceil(BLOCK_POINTS);
            found.retain(|p| (from..=to).contains(&p.step));
            assert!(same_bits(&found, &expected), "{from}..={to}");
            assert_eq!(blocks_read, blocks, "{from}..={to}");
        }
    }

    #[test]
    fn steps_and_times_round_trip_at_any_distance() {
        let points = vec![
            point(i64::MIN, -1e12, 1.0),
            point(-5, 0.0, 2.0),
            point(0, 0.001, 3.0),
            point(0, 0.001, 3.0),
            point(7, 1e12, 4.0),
            point(i64::MAX, -0.5, 5.0),
            point(i64::MAX - 1_000_000, 12.345, 6.0),
            point(1 << 40, 1_764_460_800.999, 7.0),
        ];
        assert!(same_bits(&points, &round_trip(&points)));
        assert!(same_bits(&points[..1], &round_trip(&points[..1])));
        assert!(round_trip(&[]).is_empty());
    }

    #[test]
    fn random_series_round_trip() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(18);
        for _ in 0..200 {
            let len = rng.random_range(1..3000);
            let mut step = rng.random_range(-1000i64..1000);
            let mut millis = rng.random_range(0i64..2_000_000_000_000);
            let points: Vec<RawPoint> = (0..len)
                .map(|_| {
                    step += rng.random_range(0..3i64) * rng.random_range(1..1_000_000i64);
                    millis += rng.random_range(-5..200_000i64);
                    let value = match rng.random_range(0..6) {
                        0 => f64::from_bits(rng.random()),
                        1 => rng.random::<f32>() as f64,
                        2 => rng.random_range(-1e6..1e6),
                        3 => f64::NAN,
                        _ => (step as f64).sqrt(),
                    };
                    point(step, millis as f64 / 1000.0, value)
                })
                .collect();
            let points: Vec<RawPoint> = if rng.random_bool(0.3) {
                let float32 = |p: &RawPoint| point(p.step, p.wall, f64::from(p.value as f32));
                points.iter().map(float32).collect()
            } else {
                points
            };
            assert!(same_bits(&points, &round_trip(&points)));
            let forms = Values::all(false).into_iter().chain(Values::all(true));
            for form in forms {
                if form.float32 && !points.iter().all(|p| is_float32(p.value)) {
                    continue;
                }
                let mut back = Vec::new();
                decode(&encode_as(&points, form).unwrap(), &mut back).unwrap();
                assert!(same_bits(&points, &back), "{form:?}");
            }
        }
    }

    #[test]
    fn times_finer_than_a_millisecond_are_not_encoded() {
        assert!(encode(&[point(1, 1_764_460_800.000_1, 1.0)]).is_none());
        assert!(encode(&[point(1, f64::NAN, 1.0)]).is_none());
        assert!(
            encode(&[point(1, -0.0, 1.0)]).is_none(),
            "-0.0 would come back as 0.0"
        );
        assert_eq!(to_millis(1_764_460_800.000_4), 1_764_460_800.0);
        assert!(encode(&[point(1, to_millis(1_764_460_800.123_456), 1.0)]).is_some());
    }

    #[test]
    fn broken_blobs_are_errors_not_panics() {
        let points: Vec<RawPoint> = (0..300)
            .map(|i| point(i, 1_764_460_800.0 + i as f64 * 0.1, (i as f64).sin()))
            .collect();
        let bytes = encode(&points).unwrap();
        let mut out = Vec::new();
        for cut in 0..bytes.len() - 1 {
            out.clear();
            assert!(decode(&bytes[..cut], &mut out).is_err(), "cut at {cut}");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..2000 {
            let mut noise: Vec<u8> = (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
            if rng.random_bool(0.5) && noise.len() > 1 {
                noise[0] = VERSION;
                noise[1] %= 2;
            }
            out.clear();
            let _ = decode(&noise, &mut out);
        }
        let mut flipped = bytes.clone();
        flipped[2] = 0xff; // a count far beyond the data
        assert!(decode(&flipped, &mut out).is_err());
    }

    #[test]
    fn a_training_curve_takes_a_few_bytes_a_point() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let points: Vec<RawPoint> = (0..4096)
            .map(|i| {
                let loss = (2.5 * (-(i as f64) / 2000.0).exp() + rng.random_range(0.0..0.05)) as f32;
                let wall = to_millis(1_764_460_800.0 + i as f64 * 0.1 + rng.random_range(0.0..0.004));
                point(i, wall, loss as f64)
            })
            .collect();
        let bytes = encode(&points).unwrap();
        let per_point = bytes.len() as f64 / points.len() as f64;
        assert!(per_point < 6.0, "{per_point:.2} bytes a point");
    }
}
