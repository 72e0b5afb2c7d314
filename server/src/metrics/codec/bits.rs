//! The bit-level pieces of a block: delta-of-delta integers, bit streams
//! written and read most significant bit first, LEB128 varints, and the
//! error a stream that does not decode gives.

/// A blob that does not decode: the database was changed behind our back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a metric chunk does not decode: {0}")]
pub struct Corrupt(pub(super) &'static str);

/// Delta-of-delta of an integer sequence: `0` for an unchanged delta, then
/// prefixes `10`, `110`, `1110`, `11110` for 5, 9, 16 and 32 signed bits,
/// `11111` for all 64 (wrapping, so any i64 sequence round-trips).
#[derive(Default)]
pub(super) struct DeltaOfDelta {
    pub(super) previous: i64,
    pub(super) delta: i64,
}

/// (prefix, prefix bits, value bits), smallest first.
pub(super) const DOD_CLASSES: [(u64, u32, u32); 4] =
    [(0b10, 2, 5), (0b110, 3, 9), (0b1110, 4, 16), (0b11110, 5, 32)];

impl DeltaOfDelta {
    pub(super) fn first(&mut self, value: i64) {
        self.previous = value;
        self.delta = 0;
    }

    pub(super) fn write(&mut self, out: &mut BitWriter, value: i64) {
        let delta = value.wrapping_sub(self.previous);
        let dod = delta.wrapping_sub(self.delta);
        (self.previous, self.delta) = (value, delta);
        if dod == 0 {
            out.write(0, 1);
            return;
        }
        for (prefix, prefix_bits, bits) in DOD_CLASSES {
            let limit = 1i64 << (bits - 1);
            if (-limit..limit).contains(&dod) {
                out.write(prefix, prefix_bits);
                out.write(dod as u64, bits);
                return;
            }
        }
        out.write(0b11111, 5);
        out.write(dod as u64, 64);
    }

    pub(super) fn read(&mut self, input: &mut BitReader) -> Result<i64, Corrupt> {
        let dod = if !input.bit()? {
            0
        } else {
            let mut bits = 64;
            for (_, _, class_bits) in DOD_CLASSES {
                if !input.bit()? {
                    bits = class_bits;
                    break;
                }
            }
            sign_extend(input.read(bits)?, bits)
        };
        self.delta = self.delta.wrapping_add(dod);
        self.previous = self.previous.wrapping_add(self.delta);
        Ok(self.previous)
    }
}

pub(super) fn sign_extend(value: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((value << shift) as i64) >> shift
}

pub(super) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub(super) fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

pub(super) struct BitWriter {
    pub(super) bytes: Vec<u8>,
    pub(super) pending: u128,
    pub(super) pending_bits: u32,
    /// Only counts what would be written (to compare forms).
    pub(super) counting: bool,
    pub(super) bits_written: usize,
}

impl BitWriter {
    pub(super) fn with_capacity(bytes: usize) -> BitWriter {
        BitWriter {
            bytes: Vec::with_capacity(bytes),
            pending: 0,
            pending_bits: 0,
            counting: false,
            bits_written: 0,
        }
    }

    pub(super) fn counting() -> BitWriter {
        BitWriter {
            counting: true,
            ..BitWriter::with_capacity(0)
        }
    }

    /// Appends the low `bits` bits of `value` (0 to 64).
    pub(super) fn write(&mut self, value: u64, bits: u32) {
        self.bits_written += bits as usize;
        if bits == 0 || self.counting {
            return;
        }
        self.pending = (self.pending << bits) | u128::from(value & mask(bits));
        self.pending_bits += bits;
        while self.pending_bits >= 8 {
            self.pending_bits -= 8;
            self.bytes.push((self.pending >> self.pending_bits) as u8);
        }
        self.pending &= (1u128 << self.pending_bits) - 1;
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        if self.pending_bits > 0 {
            self.bytes.push((self.pending << (8 - self.pending_bits)) as u8);
        }
        self.bytes
    }
}

pub(super) struct BitReader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) next: usize,
    pub(super) pending: u128,
    pub(super) pending_bits: u32,
}

impl<'a> BitReader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> BitReader<'a> {
        BitReader {
            bytes,
            next: 0,
            pending: 0,
            pending_bits: 0,
        }
    }

    pub(super) fn read(&mut self, bits: u32) -> Result<u64, Corrupt> {
        while self.pending_bits < bits {
            let byte = *self.bytes.get(self.next).ok_or(Corrupt("ends early"))?;
            self.next += 1;
            self.pending = (self.pending << 8) | u128::from(byte);
            self.pending_bits += 8;
        }
        self.pending_bits -= bits;
        let value = (self.pending >> self.pending_bits) as u64 & mask(bits);
        self.pending &= (1u128 << self.pending_bits) - 1;
        Ok(value)
    }

    pub(super) fn bit(&mut self) -> Result<bool, Corrupt> {
        Ok(self.read(1)? == 1)
    }
}

pub(super) fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

pub(super) fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(super) fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}
