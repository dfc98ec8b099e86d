//! Big-endian field access that cannot panic: fields beyond the end read as zero bits, which
//! callers avoid by checking lengths first; the fallback exists so no input can crash us.

/// The `n`-byte big-endian unsigned field at `at` (n <= 8).
pub(crate) fn be(b: &[u8], at: usize, n: usize) -> u64 {
    let field = at
        .checked_add(n)
        .and_then(|end| b.get(at..end))
        .unwrap_or(&[]);
    field.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    be(b, at, 2) as u16
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    be(b, at, 4) as u32
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    be(b, at, 8)
}

/// The byte at `at`, or 0 beyond the end.
pub(crate) fn byte(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// Writes `v` big-endian into `b[at..at+N]` if it fits; silently nothing otherwise (only used
/// on buffers this crate sized itself).
pub(crate) fn put<const N: usize>(b: &mut [u8], at: usize, v: [u8; N]) {
    if let Some(dst) = at.checked_add(N).and_then(|end| b.get_mut(at..end)) {
        dst.copy_from_slice(&v);
    }
}

/// Cuts a response to the allocation length.
pub(crate) fn truncate(mut v: Vec<u8>, alloc: u64) -> Vec<u8> {
    if let Ok(a) = usize::try_from(alloc) {
        v.truncate(a);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_bounds() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(be16(&b, 0), 0x0102);
        assert_eq!(be32(&b, 1), 0x0203_0405);
        assert_eq!(be64(&b, 1), 0x0203_0405_0607_0809);
        assert_eq!(be32(&b, 7), 0);
        assert_eq!(be(&b, usize::MAX, 2), 0);
        assert_eq!(byte(&b, 9), 0);
        let mut o = [0u8; 4];
        put(&mut o, 2, [0xaa, 0xbb]);
        put(&mut o, 3, [0xcc, 0xdd]);
        assert_eq!(o, [0, 0, 0xaa, 0xbb]);
        assert_eq!(truncate(vec![1, 2, 3], 2), vec![1, 2]);
        assert_eq!(truncate(vec![1, 2, 3], 9), vec![1, 2, 3]);
    }
}
