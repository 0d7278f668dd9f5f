//! Bounds-checked little-endian reads from a byte slice: every read of the table goes through
//! these, so corrupt offsets give `None`, never a panic.

/// `len` bytes at `off`.
pub(crate) fn slice(data: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    data.get(off..off.checked_add(len)?)
}

/// A little-endian `u32` at `off`.
pub(crate) fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(slice(data, off, 4)?.try_into().ok()?))
}

/// A little-endian `i32` at `off`.
pub(crate) fn i32_at(data: &[u8], off: usize) -> Option<i32> {
    u32_at(data, off).map(|v| v as i32)
}

/// A little-endian `i16` at `off`.
pub(crate) fn i16_at(data: &[u8], off: usize) -> Option<i16> {
    Some(i16::from_le_bytes(slice(data, off, 2)?.try_into().ok()?))
}

/// A little-endian pointer-sized word (4 or 8 bytes) at `off`.
pub(crate) fn word_at(data: &[u8], off: usize, ptr_size: u8) -> Option<u64> {
    match ptr_size {
        8 => Some(u64::from_le_bytes(slice(data, off, 8)?.try_into().ok()?)),
        4 => u32_at(data, off).map(u64::from),
        _ => None,
    }
}

/// A NUL-terminated UTF-8 string at `off`, of at most `max` bytes before the NUL.
pub(crate) fn cstr_at(data: &[u8], off: usize, max: usize) -> Option<&str> {
    let rest = data.get(off..)?;
    let rest = &rest[..rest.len().min(max + 1)];
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// An unsigned LEB128 varint of at most 32 bits at `*off`, advancing `*off`.
pub(crate) fn uvarint(data: &[u8], off: &mut usize) -> Option<u32> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let b = *data.get(*off)?;
        *off += 1;
        value |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded() {
        let d = [1u8, 0, 0, 0, 0xff];
        assert_eq!(u32_at(&d, 0), Some(1));
        assert_eq!(u32_at(&d, 2), None);
        assert_eq!(u32_at(&d, usize::MAX), None);
        assert_eq!(word_at(&d, 0, 8), None);
        assert_eq!(word_at(&d, 0, 3), None);
        assert_eq!(cstr_at(b"ab\0", 0, 10), Some("ab"));
        assert_eq!(cstr_at(b"abc", 0, 10), None, "no NUL");
        assert_eq!(cstr_at(b"abcd\0", 0, 2), None, "longer than the cap");
    }

    #[test]
    fn varints() {
        let mut off = 0;
        assert_eq!(uvarint(&[0x96, 0x01], &mut off), Some(150));
        assert_eq!(off, 2);
        let mut off = 0;
        assert_eq!(uvarint(&[0x80, 0x80], &mut off), None, "truncated");
        let mut off = 0;
        assert_eq!(
            uvarint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut off),
            None,
            "too long"
        );
    }
}
