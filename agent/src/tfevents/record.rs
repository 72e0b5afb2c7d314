//! TFRecord framing: each record is its length (8 bytes, little-endian),
//! the length's masked CRC32C, the data, and the data's masked CRC32C.

/// The size in bytes of the next complete record as its length says
/// (checked later); `None` when the record is not complete yet.
pub(super) fn frame(bytes: &[u8]) -> Option<usize> {
    let length = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let total = 16usize.checked_add(usize::try_from(length).ok()?)?;
    (bytes.len() >= total).then_some(total)
}

pub(super) const BAD_LENGTH: &str = "the record's length fails its CRC";

/// Whether a record's length (its first 8 bytes) matches the CRC after it.
pub(super) fn length_is_intact(record: &[u8]) -> bool {
    let crc = u32::from_le_bytes(record[8..12].try_into().expect("four bytes"));
    masked_crc(&record[..8]) == crc
}

/// TFRecord's masked CRC32C.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}
