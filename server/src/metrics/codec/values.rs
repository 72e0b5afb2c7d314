//! How a block's values are coded: the forms a block may take (32- or
//! 64-bit words, XOR or delta against the value before or a line) and
//! the coder that writes and reads them.

use super::RawPoint;
use super::bits::{BitReader, BitWriter, Corrupt, mask, sign_extend, unzigzag, zigzag};

/// How a block of values is stored; [`encode`] picks, for each block, the
/// form that takes the fewest bits on its first points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Values {
    /// Every value is exactly a float32 (what PyTorch and TensorBoard
    /// scalars are): 32-bit words.
    pub(super) float32: bool,
    /// Predict each value on the line through the two before it (smooth
    /// curves such as a learning-rate schedule), not as the one before.
    pub(super) linear: bool,
    /// Store the difference from the prediction in the values' order
    /// (noisy curves), not the XOR of their bits (repeated or round values).
    pub(super) delta: bool,
}

impl Values {
    /// The 2 bits that start a block.
    pub(super) fn block_code(self) -> u64 {
        u64::from(self.linear) | u64::from(self.delta) << 1
    }

    pub(super) fn with_block_code(self, code: u64) -> Values {
        Values {
            float32: self.float32,
            linear: code & 1 != 0,
            delta: code & 2 != 0,
        }
    }

    /// Every form for values of this width.
    pub(super) fn all(float32: bool) -> [Values; 4] {
        let plain = Values {
            float32,
            linear: false,
            delta: false,
        };
        [0, 1, 2, 3].map(|code| plain.with_block_code(code))
    }

    pub(super) fn width(self) -> u32 {
        if self.float32 { 32 } else { 64 }
    }

    /// The stored bits of a value.
    pub(super) fn bits(self, value: f64) -> u64 {
        if self.float32 {
            u64::from((value as f32).to_bits())
        } else {
            value.to_bits()
        }
    }

    pub(super) fn value(self, bits: u64) -> f64 {
        if self.float32 {
            f64::from(f32::from_bits(bits as u32))
        } else {
            f64::from_bits(bits)
        }
    }
}

/// Whether a value survives the trip through float32 bit for bit.
pub(super) fn is_float32(value: f64) -> bool {
    f64::from(value as f32).to_bits() == value.to_bits()
}

/// A chunk's values, each against a prediction (the value before, or the
/// line through the two before). In XOR form (Gorilla): `0` for the same
/// bits; `10` and the meaningful bits when they fit the previous window of
/// leading and trailing zeros; else `11`, the count of leading zeros, the
/// length - 1, and the bits. In delta form, on the values' order (the
/// bits mapped so that larger floats are larger integers): `0` for the
/// predicted value, else `1`, the length - 1 of the zigzagged difference,
/// and its bits below the top one. Counts and lengths take 5 bits for
/// 32-bit words, 6 for 64.
#[derive(Clone)]
pub(super) struct ValueCoder {
    pub(super) form: Values,
    pub(super) previous: u64,
    pub(super) before: Option<u64>,
    /// The current XOR window (leading, trailing zeros), once there is one.
    pub(super) window: Option<(u32, u32)>,
}

impl ValueCoder {
    pub(super) fn new(form: Values) -> ValueCoder {
        ValueCoder {
            form,
            previous: 0,
            before: None,
            window: None,
        }
    }

    pub(super) fn first(&mut self, bits: u64) {
        self.previous = bits;
    }

    /// The bits `points` would take in `form`, from this state.
    pub(super) fn bits_for(&self, form: Values, points: &[RawPoint]) -> usize {
        let mut trial = ValueCoder { form, ..self.clone() };
        let mut out = BitWriter::counting();
        for point in points {
            trial.write(&mut out, form.bits(point.value));
        }
        out.bits_written
    }

    pub(super) fn field_bits(&self) -> u32 {
        if self.form.float32 { 5 } else { 6 }
    }

    pub(super) fn advance(&mut self, bits: u64) {
        self.before = Some(self.previous);
        self.previous = bits;
    }

    /// The XOR form's prediction: float arithmetic, the same on both sides.
    pub(super) fn predict_bits(&self) -> u64 {
        match self.before {
            Some(before) if self.form.linear => {
                if self.form.float32 {
                    let (a, b) = (
                        f32::from_bits(self.previous as u32),
                        f32::from_bits(before as u32),
                    );
                    u64::from((2.0 * a - b).to_bits())
                } else {
                    let (a, b) = (f64::from_bits(self.previous), f64::from_bits(before));
                    (2.0 * a - b).to_bits()
                }
            }
            _ => self.previous,
        }
    }

    /// The delta form's prediction, in the values' order (wrapping integers).
    pub(super) fn predict_order(&self) -> u64 {
        let previous = self.order(self.previous);
        match self.before {
            Some(before) if self.form.linear => {
                previous.wrapping_mul(2).wrapping_sub(self.order(before)) & mask(self.form.width())
            }
            _ => previous,
        }
    }

    /// Bits mapped to integers in the order of their floats.
    pub(super) fn order(&self, bits: u64) -> u64 {
        let sign = 1u64 << (self.form.width() - 1);
        let ordered = if bits & sign != 0 { !bits } else { bits | sign };
        ordered & mask(self.form.width())
    }

    pub(super) fn unorder(&self, ordered: u64) -> u64 {
        let sign = 1u64 << (self.form.width() - 1);
        let bits = if ordered & sign != 0 {
            ordered & !sign
        } else {
            !ordered
        };
        bits & mask(self.form.width())
    }

    pub(super) fn write(&mut self, out: &mut BitWriter, bits: u64) {
        if self.form.delta {
            self.write_delta(out, bits);
        } else {
            self.write_xor(out, bits);
        }
        self.advance(bits);
    }

    pub(super) fn read(&mut self, input: &mut BitReader) -> Result<u64, Corrupt> {
        let bits = if self.form.delta {
            self.read_delta(input)?
        } else {
            self.read_xor(input)?
        };
        self.advance(bits);
        Ok(bits)
    }

    pub(super) fn write_delta(&mut self, out: &mut BitWriter, bits: u64) {
        let width = self.form.width();
        let difference = self.order(bits).wrapping_sub(self.predict_order()) & mask(width);
        let zigzag = zigzag(sign_extend(difference, width));
        if zigzag == 0 {
            out.write(0, 1);
            return;
        }
        let length = 64 - zigzag.leading_zeros();
        out.write(1, 1);
        out.write(u64::from(length - 1), self.field_bits());
        out.write(zigzag, length - 1);
    }

    pub(super) fn read_delta(&mut self, input: &mut BitReader) -> Result<u64, Corrupt> {
        let width = self.form.width();
        let zigzag = if !input.bit()? {
            0
        } else {
            let length = input.read(self.field_bits())? as u32 + 1;
            (1u64 << (length - 1)) | input.read(length - 1)?
        };
        let ordered = self.predict_order().wrapping_add(unzigzag(zigzag) as u64) & mask(width);
        Ok(self.unorder(ordered))
    }

    pub(super) fn write_xor(&mut self, out: &mut BitWriter, bits: u64) {
        let width = self.form.width();
        let xor = bits ^ self.predict_bits();
        if xor == 0 {
            out.write(0, 1);
            return;
        }
        let leading = xor.leading_zeros() - (64 - width);
        let trailing = xor.trailing_zeros();
        match self.window {
            Some((lead, trail)) if leading >= lead && trailing >= trail => {
                out.write(0b10, 2);
                out.write(xor >> trail, width - lead - trail);
            }
            _ => {
                let length = width - leading - trailing;
                out.write(0b11, 2);
                out.write(u64::from(leading), self.field_bits());
                out.write(u64::from(length - 1), self.field_bits());
                out.write(xor >> trailing, length);
                self.window = Some((leading, trailing));
            }
        }
    }

    pub(super) fn read_xor(&mut self, input: &mut BitReader) -> Result<u64, Corrupt> {
        let width = self.form.width();
        let xor = if !input.bit()? {
            0
        } else {
            let (lead, trail) = if input.bit()? {
                let leading = input.read(self.field_bits())? as u32;
                let length = input.read(self.field_bits())? as u32 + 1;
                if leading + length > width {
                    return Err(Corrupt("bad xor window"));
                }
                let window = (leading, width - leading - length);
                self.window = Some(window);
                window
            } else {
                self.window.ok_or(Corrupt("xor window before any"))?
            };
            input.read(width - lead - trail)? << trail
        };
        Ok((self.predict_bits() ^ xor) & mask(width))
    }
}
