//! The portable path: the generic loops over 64-bit words (SWAR: "SIMD within a register"),
//! and a table-driven byte loop for multiplication by a constant.

use super::loops;
use super::table::{assert_lengths, KernelTable};
use super::vector::ByteVec;
use crate::gf::NibbleTables;

pub(super) static TABLE: KernelTable = KernelTable {
    xor,
    gen_pq,
    mul_acc,
};

/// Eight bytes in a `u64`; byte order does not matter because every operation is bytewise.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Word(u64);

const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const POLY_LOW: u64 = 0x1d; // the polynomial without its x^8 term

impl ByteVec for Word {
    const BYTES: usize = 8;

    #[inline(always)]
    unsafe fn load(src: *const u8) -> Self {
        // SAFETY: the caller guarantees 8 readable bytes; read_unaligned needs no alignment.
        Word(unsafe { src.cast::<u64>().read_unaligned() })
    }

    #[inline(always)]
    unsafe fn store(self, dst: *mut u8) {
        // SAFETY: the caller guarantees 8 writable bytes; write_unaligned needs no alignment.
        unsafe { dst.cast::<u64>().write_unaligned(self.0) }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        Word(self.0 ^ other.0)
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        let top = self.0 & HIGH_BITS;
        // (top >> 7) has 0x01 in exactly the bytes whose top bit was set; times 0x1d spreads the
        // reduction into those bytes without carrying into neighbours (0x1d < 0x100).
        let reduce = (top >> 7) * POLY_LOW;
        let shifted = (self.0 << 1) & !0x0101_0101_0101_0101;
        Word(shifted ^ reduce)
    }
}

fn xor(dst: &mut [u8], srcs: &[&[u8]], acc: bool) {
    // SAFETY: Word needs no CPU feature.
    unsafe { loops::xor::<Word>(dst, srcs, acc) }
}

fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    // SAFETY: Word needs no CPU feature.
    unsafe { loops::gen_pq::<Word>(data, p, q) }
}

/// `dst ^= c * src` through a full 256-entry row built from the nibble tables: one look-up per
/// byte instead of two, which pays for the 256 entries after a few hundred bytes.
fn mul_acc(tables: &NibbleTables, src: &[u8], dst: &mut [u8]) {
    assert_lengths(dst.len(), &[src], "src");
    let mut row = [0u8; 256];
    for (x, product) in (0..=255u8).zip(row.iter_mut()) {
        *product = tables.mul(x);
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[usize::from(*s)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gf;

    #[test]
    fn word_mul2_doubles_every_byte() {
        for base in (0..=255u8).step_by(8) {
            let bytes: [u8; 8] = std::array::from_fn(|i| base.wrapping_add(i as u8));
            let doubled = Word(u64::from_ne_bytes(bytes)).mul2();
            let expected = bytes.map(|b| gf::mul(b, 2));
            assert_eq!(doubled.0.to_ne_bytes(), expected);
        }
    }
}
