//! Little-endian field access at fixed byte offsets.
//!
//! md's on-disk structures are little-endian at fixed offsets. Callers check lengths before
//! decoding, so an out-of-range access is a bug in this crate; it trips a debug assertion and
//! otherwise reads as zero / writes nothing rather than panicking on hostile input.

/// Copies `N` bytes at `off`, or zeros when the range is out of bounds.
fn array_at<const N: usize>(bytes: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    let range = bytes.get(off..off.saturating_add(N));
    debug_assert!(
        range.is_some(),
        "read of {N} bytes at {off} past {}",
        bytes.len()
    );
    if let Some(src) = range {
        out.copy_from_slice(src);
    }
    out
}

pub(crate) fn u16_at(bytes: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(array_at(bytes, off))
}

pub(crate) fn u32_at(bytes: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(array_at(bytes, off))
}

pub(crate) fn i32_at(bytes: &[u8], off: usize) -> i32 {
    i32::from_le_bytes(array_at(bytes, off))
}

pub(crate) fn u64_at(bytes: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(array_at(bytes, off))
}

pub(crate) fn bytes_at<const N: usize>(bytes: &[u8], off: usize) -> [u8; N] {
    array_at(bytes, off)
}

/// Writes `src` at `off`; the buffer is sized by the encoder, so the range always fits.
pub(crate) fn put(buf: &mut [u8], off: usize, src: &[u8]) {
    let len = buf.len();
    let range = buf.get_mut(off..off.saturating_add(src.len()));
    debug_assert!(
        range.is_some(),
        "write of {} bytes at {off} past {len}",
        src.len()
    );
    if let Some(dst) = range {
        dst.copy_from_slice(src);
    }
}

pub(crate) fn put_u16(buf: &mut [u8], off: usize, v: u16) {
    put(buf, off, &v.to_le_bytes());
}

pub(crate) fn put_u32(buf: &mut [u8], off: usize, v: u32) {
    put(buf, off, &v.to_le_bytes());
}

pub(crate) fn put_i32(buf: &mut [u8], off: usize, v: i32) {
    put(buf, off, &v.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], off: usize, v: u64) {
    put(buf, off, &v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xff];
        assert_eq!(u16_at(&b, 0), 0x0201);
        assert_eq!(u32_at(&b, 1), 0x0504_0302);
        assert_eq!(u64_at(&b, 0), 0x0807_0605_0403_0201);
        assert_eq!(i32_at(&[0xf8, 0xff, 0xff, 0xff], 0), -8);
    }

    #[test]
    fn writes_round_trip() {
        let mut b = [0u8; 16];
        put_u64(&mut b, 8, 0x1122_3344_5566_7788);
        put_i32(&mut b, 0, -2);
        put_u16(&mut b, 4, 0xbeef);
        assert_eq!(u64_at(&b, 8), 0x1122_3344_5566_7788);
        assert_eq!(i32_at(&b, 0), -2);
        assert_eq!(u16_at(&b, 4), 0xbeef);
        assert_eq!(b[6], 0, "neighbouring bytes untouched");
    }
}
