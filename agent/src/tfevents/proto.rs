//! The protobuf wire format, decoded by hand for the few fields of
//! `Event`, `Summary`, `SummaryMetadata`, `TensorProto` and the hparams
//! plugin's session start info that scalars and hyperparameters need.

use std::collections::BTreeMap;

pub(super) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one protobuf message; stops at the first malformed one.
pub(super) struct Fields<'a> {
    bytes: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
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

pub(super) fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A `SummaryMetadata`'s plugin name and content.
pub(super) fn plugin_data(metadata: &[u8]) -> Option<(&[u8], &[u8])> {
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
pub(super) fn session_hparams(content: &[u8]) -> Option<BTreeMap<String, serde_json::Value>> {
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
pub(super) fn protobuf_value(bytes: &[u8]) -> serde_json::Value {
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
pub(super) fn tensor_scalar(data: &[u8]) -> Option<f64> {
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

pub(super) fn from_int(dtype: u64, v: u64) -> f64 {
    match dtype {
        19 => half(v as u16),
        14 => f32::from_bits((v as u32) << 16) as f64,
        3 => v as u32 as i32 as f64,
        _ => v as i64 as f64,
    }
}

pub(super) fn from_content(dtype: u64, bytes: &[u8]) -> Option<f64> {
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
pub(super) fn half(bits: u16) -> f64 {
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
