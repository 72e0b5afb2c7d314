//! W&B's offline run files (`wandb/offline-run-*/run-*.wandb`, what the
//! `wandb` package writes with `WANDB_MODE=offline`), read incrementally
//! into the same [`Found`] as event files: history rows become scalars
//! (`_step` their step, `_timestamp` their time, nested keys joined with
//! `.` as W&B shows them), the run's config becomes the config, and values
//! a script sets on `run.summary` become config keys `summary.KEY`.
//!
//! The file is W&B's transaction log: a 7-byte header (`:W&B`, the magic
//! 0xBEE1, a version byte), then LevelDB's log framing in 32 KiB blocks —
//! each chunk a CRC32 (IEEE, of its type byte and data), a 16-bit length
//! and a type (full, or first, middle and last of a record split across
//! blocks), a block's tail shorter than a chunk header left as zeros —
//! around `wandb.internal.Record` protobufs, decoded by hand: only the
//! fields read here. A record cut off at the end of a growing file is left
//! for the next read; a corrupt one stops the file there.

use crate::{Corruption, Fields, Found, Scalar, Wire};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b":W&B\xe1\xbe";
const HEADER_LEN: usize = 7;
const BLOCK: u64 = 32 * 1024;
const CHUNK_HEADER: usize = 7;

/// Chunk types of LevelDB's log format.
const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;

/// `wandb.internal.Record` fields read here.
const RECORD_HISTORY: u64 = 2;
const RECORD_SUMMARY: u64 = 3;
const RECORD_CONFIG: u64 = 5;
const RECORD_RUN: u64 = 17;
/// `RunRecord.config`.
const RUN_CONFIG: u64 = 4;

/// Whether a file name is a W&B run file.
pub fn is_wandb_file(name: &str) -> bool {
    name.ends_with(".wandb")
}

/// A W&B run file followed from `offset` on.
pub struct WandbFile {
    pub path: PathBuf,
    pub offset: u64,
    pub corrupt: Option<Corruption>,
}

impl WandbFile {
    pub fn new(path: &Path, offset: u64) -> WandbFile {
        WandbFile {
            path: path.to_path_buf(),
            offset,
            corrupt: None,
        }
    }

    /// What the complete records written since the last read hold (at most
    /// 64 MiB at a time), not past `limit` (a byte offset). Advances `offset`.
    pub fn read_until(&mut self, limit: u64) -> std::io::Result<Found> {
        let mut found = Found {
            end: self.offset,
            ..Found::default()
        };
        if self.corrupt.is_some() {
            return Ok(found);
        }
        let Some(mut rest) = crate::unread(&self.path, self.offset, limit)? else {
            return Ok(found);
        };
        let mut bytes = Vec::new();
        rest.read_to_end(&mut bytes)?;
        let used = self.parse(&bytes, &mut found);
        self.offset += used as u64;
        found.end = self.offset;
        Ok(found)
    }

    /// Reads the complete records at the start of `bytes` (which start at
    /// `self.offset`) into `found`; says how many bytes they took. A
    /// corrupt chunk sets `self.corrupt` and ends the parse before it.
    fn parse(&mut self, bytes: &[u8], found: &mut Found) -> usize {
        let mut rows = Rows::default();
        let mut at = 0;
        let mut done = 0;
        if self.offset == 0 {
            if bytes.len() < HEADER_LEN {
                return 0;
            }
            if !bytes.starts_with(MAGIC) {
                self.corrupt = Some(Corruption {
                    offset: 0,
                    reason: "not a W&B run file (its header is not `:W&B`)".into(),
                });
                return 0;
            }
            at = HEADER_LEN;
            done = at;
        }
        // The record being put together from first, middle and last chunks.
        let mut pieces: Option<Vec<u8>> = None;
        while at < bytes.len() {
            let in_block = BLOCK - (self.offset + at as u64) % BLOCK;
            if in_block < CHUNK_HEADER as u64 {
                // The block's zeroed tail.
                let tail = in_block as usize;
                if bytes.len() - at < tail {
                    break;
                }
                at += tail;
                if pieces.is_none() {
                    done = at;
                }
                continue;
            }
            let Some(header) = bytes.get(at..at + CHUNK_HEADER) else {
                break;
            };
            let crc = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
            let length = u16::from_le_bytes([header[4], header[5]]) as usize;
            let kind = header[6];
            if crc == 0 && length == 0 && kind == 0 {
                // Not written yet.
                break;
            }
            let Some(data) = bytes.get(at + CHUNK_HEADER..at + CHUNK_HEADER + length) else {
                break;
            };
            let problem = if (CHUNK_HEADER + length) as u64 > in_block {
                Some("a chunk runs past its block".to_string())
            } else if chunk_crc(kind, data) != crc {
                Some("a chunk fails its CRC".to_string())
            } else {
                match (kind, &mut pieces) {
                    (FULL, None) => {
                        rows.record(data, found);
                        None
                    }
                    (FIRST, None) => {
                        pieces = Some(data.to_vec());
                        None
                    }
                    (MIDDLE, Some(record)) => {
                        record.extend_from_slice(data);
                        None
                    }
                    (LAST, Some(record)) => {
                        record.extend_from_slice(data);
                        rows.record(record, found);
                        pieces = None;
                        None
                    }
                    (kind, _) => Some(format!("a chunk of type {kind} where it cannot be")),
                }
            };
            if let Some(reason) = problem {
                self.corrupt = Some(Corruption {
                    offset: self.offset + at as u64,
                    reason,
                });
                break;
            }
            at += CHUNK_HEADER + length;
            if pieces.is_none() {
                done = at;
            }
        }
        // A record whose last chunk has not arrived was not decoded: it is
        // read again, whole, next time.
        done
    }
}

/// LevelDB log chunks' CRC as W&B writes it: CRC32 (IEEE) of the type byte,
/// then the data.
fn chunk_crc(kind: u8, data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[kind]);
    hasher.update(data);
    hasher.finalize()
}

/// What the records of one read add to `found`.
#[derive(Default)]
struct Rows {
    tags: HashMap<String, u32>,
}

impl Rows {
    fn record(&mut self, record: &[u8], found: &mut Found) {
        for (field, value) in Fields::new(record) {
            let Wire::Bytes(inner) = value else { continue };
            match field {
                RECORD_HISTORY => self.history(inner, found),
                RECORD_CONFIG => config(inner, &mut found.hparams, ""),
                RECORD_SUMMARY => config(inner, &mut found.hparams, "summary."),
                RECORD_RUN => {
                    for (field, value) in Fields::new(inner) {
                        if let (RUN_CONFIG, Wire::Bytes(run_config)) = (field, value) {
                            config(run_config, &mut found.hparams, "");
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// One `HistoryRecord`: its numbers at its `_step` and `_timestamp`.
    fn history(&mut self, history: &[u8], found: &mut Found) {
        let mut values = Vec::new();
        let (mut step, mut wall_time) = (None, 0.0);
        for (field, value) in Fields::new(history) {
            match (field, value) {
                (1, Wire::Bytes(item)) => {
                    let Some((key, value)) = item_of(item) else {
                        continue;
                    };
                    match key.as_str() {
                        "_step" => step = value.as_f64().map(|step| step as i64),
                        "_timestamp" => wall_time = value.as_f64().unwrap_or(0.0),
                        _ if key.starts_with('_') => {}
                        _ => flatten_numbers(key, &value, &mut values),
                    }
                }
                (2, Wire::Bytes(history_step)) if step.is_none() => {
                    for (field, value) in Fields::new(history_step) {
                        if let (1, Wire::Varint(num)) = (field, value) {
                            step = Some(num as i64);
                        }
                    }
                }
                _ => {}
            }
        }
        let step = step.unwrap_or(0);
        for (key, value) in values {
            let next = self.tags.len() as u32;
            let tag = *self.tags.entry(key.clone()).or_insert_with(|| {
                found.tags.push(key);
                next
            });
            found.scalars.push(Scalar {
                tag,
                step,
                wall_time,
                value,
            });
        }
    }
}

/// A history, config or summary item: (its key, nested keys joined with
/// `.`; its value). W&B writes non-finite numbers as the bare words `NaN`,
/// `Infinity`, `-Infinity`.
fn item_of(item: &[u8]) -> Option<(String, Number)> {
    let (mut key, mut nested, mut value) = (String::new(), Vec::new(), None);
    for (field, wire) in Fields::new(item) {
        match (field, wire) {
            (1, Wire::Bytes(text)) => key = String::from_utf8_lossy(text).into_owned(),
            (2, Wire::Bytes(text)) => nested.push(String::from_utf8_lossy(text).into_owned()),
            (16, Wire::Bytes(json)) => value = Some(Number::parse(&String::from_utf8_lossy(json))),
            _ => {}
        }
    }
    if key.is_empty() {
        key = nested.join(".");
    }
    (!key.is_empty()).then_some(())?;
    Some((key, value?))
}

/// A W&B value: JSON, or a non-finite number.
enum Number {
    Json(Value),
    NonFinite(f64),
}

impl Number {
    fn parse(text: &str) -> Number {
        match text.trim() {
            "NaN" => Number::NonFinite(f64::NAN),
            "Infinity" => Number::NonFinite(f64::INFINITY),
            "-Infinity" => Number::NonFinite(f64::NEG_INFINITY),
            other => Number::Json(serde_json::from_str(other).unwrap_or(Value::Null)),
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Number::NonFinite(value) => Some(*value),
            Number::Json(value) => value.as_f64(),
        }
    }
}

/// The numbers in a history value: itself, or the numeric leaves of an
/// object (not media: an object with `_type`), keys joined with `.`.
fn flatten_numbers(key: String, value: &Number, out: &mut Vec<(String, f64)>) {
    match value {
        Number::NonFinite(number) => out.push((key, *number)),
        Number::Json(Value::Number(number)) => out.push((key, number.as_f64().unwrap_or(f64::NAN))),
        Number::Json(Value::Object(fields)) if !fields.contains_key("_type") => {
            for (inner, value) in fields {
                flatten_numbers(format!("{key}.{inner}"), &Number::Json(value.clone()), out);
            }
        }
        _ => {}
    }
}

/// A `ConfigRecord` or `SummaryRecord`'s updates as flat config keys under
/// `prefix` (W&B's own `_wandb` and `_…` keys left out). Summary values the
/// history keeps up to date are written with nested keys; those a script
/// sets on `run.summary`, with a key: only those are kept.
fn config(record: &[u8], config: &mut BTreeMap<String, Value>, prefix: &str) {
    for (field, value) in Fields::new(record) {
        let (1, Wire::Bytes(item)) = (field, value) else {
            continue;
        };
        if !prefix.is_empty() && !has_plain_key(item) {
            continue;
        }
        let Some((key, value)) = item_of(item) else {
            continue;
        };
        if key.starts_with('_') {
            continue;
        }
        let value = match value {
            Number::Json(value) => value,
            Number::NonFinite(number) => Value::String(gpuplane_api::metric::Value(number).describe()),
        };
        flatten_config(format!("{prefix}{key}"), value, config);
    }
}

/// Whether an item names its key with field 1 (not nested keys).
fn has_plain_key(item: &[u8]) -> bool {
    Fields::new(item).any(|(field, value)| matches!((field, value), (1, Wire::Bytes(key)) if !key.is_empty()))
}

/// Config values are flat: objects become dotted keys, lists their JSON text.
fn flatten_config(key: String, value: Value, config: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(fields) => {
            for (inner, value) in fields {
                flatten_config(format!("{key}.{inner}"), value, config);
            }
        }
        Value::Array(_) => {
            config.insert(key, Value::String(value.to_string()));
        }
        value => {
            config.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests;
