//! TensorBoard event files (and, in [`wandb`], W&B's offline run files),
//! read incrementally: TFRecord framing with masked
//! CRC32C checks, `Event` protos decoded by hand (only the fields scalars
//! need), and scalars in both forms — `simple_value` (tensorboardX,
//! PyTorch) and a scalar `TensorProto` under the `scalars` plugin (TF2,
//! whose plugin metadata appears only in a tag's first event).
//!
//! Hyperparameters come from the `hparams` plugin's session start info
//! (what `add_hparams` and Keras' HParams callback write).
//!
//! A record cut off at the end of a growing file is left for the next read;
//! a corrupt record stops the file there, every point before it kept.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One scalar read from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// The index of its tag in [`Found::tags`].
    pub tag: u32,
    pub step: i64,
    pub wall_time: f64,
    pub value: f64,
}

/// A record that failed its checks: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    pub offset: u64,
    pub reason: String,
}

/// An event file followed from `offset` on.
pub struct EventFile {
    pub path: PathBuf,
    pub offset: u64,
    /// Tags whose first event named the `scalars` plugin (TF2 writes the plugin once).
    scalar_tags: HashMap<String, bool>,
    pub corrupt: Option<Corruption>,
}

/// What one read found.
#[derive(Debug, Default)]
pub struct Found {
    pub scalars: Vec<Scalar>,
    /// The tags of the scalars, each once.
    pub tags: Vec<String>,
    /// Hyperparameters of the `hparams` plugin: numbers, strings, booleans.
    pub hparams: BTreeMap<String, serde_json::Value>,
    /// The offset just after the last complete record read.
    pub end: u64,
}

const MAX_READ: u64 = 64 << 20;
/// Bytes read from the file at once, into one buffer a read reuses (a
/// record longer than this is read in several).
const PIECE: u64 = 4 << 20;

impl EventFile {
    pub fn new(path: &Path, offset: u64) -> EventFile {
        EventFile {
            path: path.to_path_buf(),
            offset,
            scalar_tags: HashMap::new(),
            corrupt: None,
        }
    }

    /// Scalars in the complete records written since the last read (at most
    /// 64 MiB at a time). Advances `offset`.
    pub fn read(&mut self) -> std::io::Result<Found> {
        self.read_until(u64::MAX)
    }

    /// Like [`read`](Self::read), but not past `limit` (a byte offset).
    pub fn read_until(&mut self, limit: u64) -> std::io::Result<Found> {
        let mut found = Found {
            end: self.offset,
            ..Found::default()
        };
        if self.corrupt.is_some() {
            return Ok(found);
        }
        let Some(mut rest) = unread(&self.path, self.offset, limit)? else {
            return Ok(found);
        };
        // `buffer` holds the bytes from `self.offset` on that are not parsed
        // yet (at most the start of a record) and then the next piece.
        let mut buffer = Vec::new();
        while (&mut rest).take(PIECE).read_to_end(&mut buffer)? > 0 {
            let parsed = self.parse(&buffer, &mut found);
            self.offset += parsed as u64;
            if self.corrupt.is_some() {
                break;
            }
            buffer.drain(..parsed);
        }
        found.end = self.offset;
        Ok(found)
    }

    /// Parses the complete records at the start of `bytes` (which start at
    /// `self.offset`) into `found` and says how many bytes they took. A
    /// corrupt record sets `self.corrupt` and ends the parse before it.
    ///
    /// The records are framed here, then checked and decoded in order on
    /// one thread, or, when there are many, in contiguous groups on several
    /// whose results are joined in order.
    fn parse(&mut self, bytes: &[u8], found: &mut Found) -> usize {
        let mut records = Vec::new();
        let mut framed = 0;
        while let Some(size) = frame(&bytes[framed..]) {
            records.push((framed, size));
            framed += size;
        }
        // A length that fails its CRC is found by the decoder of its record
        // (the records framed after it are dropped), or here when it makes
        // the record look cut off.
        let bad_length = (bytes.len() - framed >= 12 && !length_is_intact(&bytes[framed..]))
            .then(|| (framed, BAD_LENGTH.to_string()));
        let threads = if records.len() >= PARALLEL_RECORDS {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
        } else {
            1
        };
        let groups: Vec<&[(usize, usize)]> = records.chunks(records.len().div_ceil(threads).max(1)).collect();
        let decoders: Vec<Decoder> = if groups.len() <= 1 {
            vec![Decoder::default().run(bytes, groups.first().copied().unwrap_or_default())]
        } else {
            std::thread::scope(|scope| {
                let running: Vec<_> = groups
                    .iter()
                    .map(|group| scope.spawn(move || Decoder::default().run(bytes, group)))
                    .collect();
                running
                    .into_iter()
                    .map(|thread| {
                        thread
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                    .collect()
            })
        };
        for decoder in decoders {
            let corrupt = decoder.corrupt.clone();
            self.join(decoder, found);
            if let Some((at, reason)) = corrupt {
                self.corrupt = Some(Corruption {
                    offset: self.offset + at as u64,
                    reason,
                });
                return at;
            }
        }
        if let Some((at, reason)) = bad_length {
            self.corrupt = Some(Corruption {
                offset: self.offset + at as u64,
                reason,
            });
        }
        framed
    }

    /// Adds what a decoder found after what came before it: its tensors of
    /// tags it saw no plugin for are scalars if the tag was last declared a
    /// `scalars` one before it, else dropped; its declarations then hold.
    fn join(&mut self, decoder: Decoder, found: &mut Found) {
        let Decoder {
            found: mut decoded,
            declared,
            pending,
            ..
        } = decoder;
        if !pending.is_empty() {
            let mut pending = pending.into_iter().peekable();
            let mut index = 0;
            decoded.scalars.retain(|scalar| {
                let keep = pending.next_if_eq(&index).is_none()
                    || self.scalar_tags.get(&decoded.tags[scalar.tag as usize]) == Some(&true);
                index += 1;
                keep
            });
        }
        self.scalar_tags.extend(declared);
        found.hparams.extend(decoded.hparams);
        // The decoder's tag numbers, renumbered in `found`.
        let numbers: Vec<u32> = decoded
            .tags
            .into_iter()
            .map(|tag| match found.tags.iter().position(|known| *known == tag) {
                Some(at) => at as u32,
                None => {
                    found.tags.push(tag);
                    found.tags.len() as u32 - 1
                }
            })
            .collect();
        if found.scalars.is_empty() && numbers.iter().enumerate().all(|(i, n)| i as u32 == *n) {
            found.scalars = decoded.scalars;
        } else {
            found
                .scalars
                .extend(decoded.scalars.into_iter().map(|scalar| Scalar {
                    tag: numbers[scalar.tag as usize],
                    ..scalar
                }));
        }
    }
}

/// Reads with at least this many records are decoded on several threads.
const PARALLEL_RECORDS: usize = 4096;
/// At most this many threads decode one read (the agent shares its host
/// with training jobs).
const MAX_THREADS: usize = 4;

/// Checks and decodes a run of records; one per thread.
#[derive(Default)]
struct Decoder {
    /// Its scalars, numbered by its own tags (`found.tags`).
    found: Found,
    /// The number of each tag, by its bytes in the file.
    numbers: rustc_hash::FxHashMap<Box<[u8]>, u32>,
    /// The plugin each tag was last declared with in these records.
    declared: HashMap<String, bool>,
    /// Indices in `found.scalars` of tensors whose tag was not declared in
    /// these records: scalars only if it was declared so before them.
    pending: Vec<usize>,
    /// The first record whose data fails its CRC: its offset and why.
    corrupt: Option<(usize, String)>,
}

impl Decoder {
    /// Checks and decodes `records` (offset and size in `bytes`) in order,
    /// up to the first whose data fails its CRC.
    fn run(mut self, bytes: &[u8], records: &[(usize, usize)]) -> Decoder {
        for &(start, size) in records {
            let record = &bytes[start..start + size];
            if !length_is_intact(record) {
                self.corrupt = Some((start, BAD_LENGTH.into()));
                break;
            }
            let (data, crc) = record[12..].split_at(size - 16);
            if masked_crc(data) != u32::from_le_bytes(crc.try_into().expect("four bytes")) {
                self.corrupt = Some((start, "the record's data fails its CRC".into()));
                break;
            }
            self.event(data);
        }
        self
    }

    fn event(&mut self, data: &[u8]) {
        let event = Fields::new(data);
        let (mut wall_time, mut step, mut summary) = (0.0, 0i64, None);
        for (field, value) in event {
            match (field, value) {
                (1, Wire::Fixed64(bits)) => wall_time = f64::from_bits(bits),
                (2, Wire::Varint(v)) => step = v as i64,
                (5, Wire::Bytes(bytes)) => summary = Some(bytes),
                _ => {}
            }
        }
        let Some(summary) = summary else { return };
        let values = Fields::new(summary);
        for (field, value) in values {
            let (1, Wire::Bytes(value)) = (field, value) else {
                continue;
            };
            let (tag, value) = match self.summary_value(value) {
                Some(Kept::Scalar(tag, value)) => (tag, value),
                Some(Kept::Undeclared(tag, value)) => {
                    self.pending.push(self.found.scalars.len());
                    (tag, value)
                }
                Some(Kept::Hparams(hparams)) => {
                    self.found.hparams.extend(hparams);
                    continue;
                }
                None => continue,
            };
            self.found.scalars.push(Scalar {
                tag,
                step,
                wall_time,
                value,
            });
        }
    }

    /// A `Summary.Value` when it is a scalar (or may be one) or the
    /// `hparams` plugin's session start info; its fields are read once.
    fn summary_value(&mut self, data: &[u8]) -> Option<Kept> {
        let fields = Fields::new(data);
        let (mut tag, mut simple, mut tensor, mut plugin) = (None, None, None, None);
        for (field, value) in fields {
            match (field, value) {
                (1, Wire::Bytes(bytes)) => tag = Some(bytes),
                (2, Wire::Fixed32(bits)) => simple = Some(f32::from_bits(bits) as f64),
                (8, Wire::Bytes(bytes)) => tensor = Some(bytes),
                (9, Wire::Bytes(metadata)) => plugin = plugin_data(metadata),
                _ => {}
            }
        }
        if let Some((b"hparams", content)) = plugin {
            return session_hparams(content).map(Kept::Hparams);
        }
        let tag = self.number(tag?);
        if let Some(value) = simple {
            return Some(Kept::Scalar(tag, value));
        }
        let declared = match plugin.map(|(name, _)| name) {
            Some(name) => {
                let scalars = name == b"scalars";
                self.declared
                    .insert(self.found.tags[tag as usize].clone(), scalars);
                Some(scalars)
            }
            None => self.declared.get(&self.found.tags[tag as usize]).copied(),
        };
        match declared {
            Some(false) => None,
            Some(true) => tensor_scalar(tensor?).map(|value| Kept::Scalar(tag, value)),
            None => tensor_scalar(tensor?).map(|value| Kept::Undeclared(tag, value)),
        }
    }

    /// The number of the tag of these bytes (not valid UTF-8: the lossy
    /// form), numbered on first sight.
    fn number(&mut self, bytes: &[u8]) -> u32 {
        if let Some(number) = self.numbers.get(bytes) {
            return *number;
        }
        let number = self.found.tags.len() as u32;
        self.found.tags.push(String::from_utf8_lossy(bytes).into_owned());
        self.numbers.insert(bytes.into(), number);
        number
    }
}

/// What one `Summary.Value` held that the reader keeps.
enum Kept {
    Scalar(u32, f64),
    /// A tensor of a tag with no plugin declared in the records decoded so far.
    Undeclared(u32, f64),
    Hparams(BTreeMap<String, serde_json::Value>),
}

/// A `SummaryMetadata`'s plugin name and content.
fn plugin_data(metadata: &[u8]) -> Option<(&[u8], &[u8])> {
    for (field, value) in Fields::new(metadata) {
        if let (1, Wire::Bytes(plugin_data)) = (field, value) {
            let (mut name, mut content) = (None, &[][..]);
            for (field, value) in Fields::new(plugin_data) {
                match (field, value) {
                    (1, Wire::Bytes(bytes)) => name = Some(bytes),
                    (2, Wire::Bytes(bytes)) => content = bytes,
                    _ => {}
                }
            }
            return name.map(|name| (name, content));
        }
    }
    None
}

/// The hyperparameters in the `hparams` plugin's content when it is the
/// session start info (`HParamsPluginData.session_start_info.hparams`, a map
/// of `google.protobuf.Value`); `None` for its other records.
fn session_hparams(content: &[u8]) -> Option<BTreeMap<String, serde_json::Value>> {
    let start = Fields::new(content).find_map(|(field, value)| match (field, value) {
        (3, Wire::Bytes(start)) => Some(start),
        _ => None,
    })?;
    let mut hparams = BTreeMap::new();
    for (field, value) in Fields::new(start) {
        let (1, Wire::Bytes(entry)) = (field, value) else {
            continue;
        };
        let (mut key, mut parsed) = (None, serde_json::Value::Null);
        for (field, value) in Fields::new(entry) {
            match (field, value) {
                (1, Wire::Bytes(bytes)) => key = Some(String::from_utf8_lossy(bytes).into_owned()),
                (2, Wire::Bytes(bytes)) => parsed = protobuf_value(bytes),
                _ => {}
            }
        }
        if let Some(key) = key {
            hparams.insert(key, parsed);
        }
    }
    Some(hparams)
}

/// A `google.protobuf.Value` that is null, a number, a string or a boolean
/// (a struct or list becomes its absence: null). Non-finite numbers become
/// their names, as config values are JSON.
fn protobuf_value(bytes: &[u8]) -> serde_json::Value {
    use serde_json::Value;
    let Some((field, value)) = Fields::new(bytes).next() else {
        return Value::Null;
    };
    match (field, value) {
        (2, Wire::Fixed64(bits)) => {
            let number = f64::from_bits(bits);
            match serde_json::Number::from_f64(number) {
                // Whole numbers stay whole: `depth = 12`, not 12.0.
                Some(_) if number.fract() == 0.0 && number.abs() < 9e15 => Value::from(number as i64),
                Some(finite) => Value::Number(finite),
                None => Value::String(gpuplane_api::metric::Value(number).describe()),
            }
        }
        (3, Wire::Bytes(text)) => Value::String(String::from_utf8_lossy(text).into_owned()),
        (4, Wire::Varint(flag)) => Value::Bool(flag != 0),
        _ => Value::Null,
    }
}

/// The value of a scalar (shape `[]` or all-ones) `TensorProto`.
fn tensor_scalar(data: &[u8]) -> Option<f64> {
    let fields = Fields::new(data);
    let (mut dtype, mut content, mut dims) = (0u64, None, 0usize);
    let mut first: Option<f64> = None;
    for (field, value) in fields {
        match (field, value) {
            (1, Wire::Varint(v)) => dtype = v,
            (2, Wire::Bytes(shape)) => {
                let shape_fields = Fields::new(shape);
                for (field, value) in shape_fields {
                    if let (2, Wire::Bytes(dim)) = (field, value) {
                        let dim_fields = Fields::new(dim);
                        for (field, value) in dim_fields {
                            if let (1, Wire::Varint(size)) = (field, value)
                                && size != 1
                            {
                                dims += 1;
                            }
                        }
                    }
                }
            }
            (4, Wire::Bytes(bytes)) => content = Some(bytes),
            // float_val, packed or not
            (5, Wire::Bytes(packed)) if packed.len() >= 4 => {
                first.get_or_insert(f32::from_le_bytes(packed[..4].try_into().ok()?) as f64);
            }
            (5, Wire::Fixed32(bits)) => {
                first.get_or_insert(f32::from_bits(bits) as f64);
            }
            // double_val
            (6, Wire::Bytes(packed)) if packed.len() >= 8 => {
                first.get_or_insert(f64::from_le_bytes(packed[..8].try_into().ok()?));
            }
            (6, Wire::Fixed64(bits)) => {
                first.get_or_insert(f64::from_bits(bits));
            }
            // int_val, int64_val, half_val (half and bfloat16 bits)
            (7 | 10 | 13, Wire::Bytes(packed)) => {
                let (v, _) = varint(packed)?;
                first.get_or_insert(from_int(dtype, v));
            }
            (7 | 10 | 13, Wire::Varint(v)) => {
                first.get_or_insert(from_int(dtype, v));
            }
            _ => {}
        }
    }
    if dims > 0 {
        return None;
    }
    if let Some(content) = content {
        return from_content(dtype, content);
    }
    first
}

fn from_int(dtype: u64, v: u64) -> f64 {
    match dtype {
        19 => half(v as u16),
        14 => f32::from_bits((v as u32) << 16) as f64,
        3 => v as u32 as i32 as f64,
        _ => v as i64 as f64,
    }
}

fn from_content(dtype: u64, bytes: &[u8]) -> Option<f64> {
    Some(match dtype {
        1 => f32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as f64,
        2 => f64::from_le_bytes(bytes.get(..8)?.try_into().ok()?),
        3 => i32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as f64,
        9 => i64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as f64,
        14 => f32::from_bits((u16::from_le_bytes(bytes.get(..2)?.try_into().ok()?) as u32) << 16) as f64,
        19 => half(u16::from_le_bytes(bytes.get(..2)?.try_into().ok()?)),
        _ => return None,
    })
}

/// IEEE 754 half precision to f64 (NaN and infinities kept).
fn half(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = (bits >> 10) & 0x1f;
    let fraction = (bits & 0x3ff) as f64;
    match exponent {
        0 => sign * fraction * 2f64.powi(-24),
        0x1f if fraction == 0.0 => sign * f64::INFINITY,
        0x1f => f64::NAN,
        e => sign * (1.0 + fraction / 1024.0) * 2f64.powi(e as i32 - 15),
    }
}

/// The size in bytes of the next complete record as its length says
/// (checked later); `None` when the record is not complete yet.
fn frame(bytes: &[u8]) -> Option<usize> {
    let length = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let total = 16usize.checked_add(usize::try_from(length).ok()?)?;
    (bytes.len() >= total).then_some(total)
}

const BAD_LENGTH: &str = "the record's length fails its CRC";

/// Whether a record's length (its first 8 bytes) matches the CRC after it.
fn length_is_intact(record: &[u8]) -> bool {
    let crc = u32::from_le_bytes(record[8..12].try_into().expect("four bytes"));
    masked_crc(&record[..8]) == crc
}

/// The bytes of `path` from `offset` on, up to `limit` and at most 64 MiB;
/// None when there are none.
pub(crate) fn unread(
    path: &Path,
    offset: u64,
    limit: u64,
) -> std::io::Result<Option<std::io::Take<std::fs::File>>> {
    let mut file = open_not_following(path)?;
    let length = file.metadata()?.len().min(limit);
    if length <= offset {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(offset))?;
    Ok(Some(file.take((length - offset).min(MAX_READ))))
}

/// Opens `path` for reading unless it is a symbolic link: a job writes the
/// files read here, and must not make its reader open another's.
pub(crate) fn open_not_following(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// TFRecord's masked CRC32C.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

pub(crate) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one protobuf message; stops at the first malformed one.
pub(crate) struct Fields<'a> {
    bytes: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Fields { bytes }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, Wire<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let (key, used) = varint(self.bytes)?;
        self.bytes = &self.bytes[used..];
        let field = key >> 3;
        let value = match key & 7 {
            0 => {
                let (v, used) = varint(self.bytes)?;
                self.bytes = &self.bytes[used..];
                Wire::Varint(v)
            }
            1 => {
                let raw = self.bytes.get(..8)?;
                self.bytes = &self.bytes[8..];
                Wire::Fixed64(u64::from_le_bytes(raw.try_into().ok()?))
            }
            2 => {
                let (length, used) = varint(self.bytes)?;
                let end = used.checked_add(length as usize)?;
                let data = self.bytes.get(used..end)?;
                self.bytes = &self.bytes[end..];
                Wire::Bytes(data)
            }
            5 => {
                let raw = self.bytes.get(..4)?;
                self.bytes = &self.bytes[4..];
                Wire::Fixed32(u32::from_le_bytes(raw.try_into().ok()?))
            }
            _ => return None,
        };
        Some((field, value))
    }
}

fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Whether a file name is a TensorBoard event file.
pub fn is_event_file(name: &str) -> bool {
    name.contains("tfevents")
}

pub mod wandb;

#[cfg(test)]
mod tests;
