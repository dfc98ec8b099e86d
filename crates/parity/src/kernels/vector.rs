//! The vector-of-bytes abstraction the generic loops are written against.
//!
//! Operations on values are safe: a value of an implementing type only comes into existence
//! through `load` or `table`, whose contracts require the CPU feature the type needs, so holding
//! one proves the feature is there.

use crate::gf::NibbleTables;

/// A register of `BYTES` bytes with the operations XOR and P+Q generation need.
pub(crate) trait ByteVec: Copy {
    /// Bytes per vector.
    const BYTES: usize;

    /// Loads `BYTES` bytes (no alignment needed).
    ///
    /// # Safety
    /// `src` is valid for reads of `BYTES` bytes, and the CPU supports this type's feature.
    unsafe fn load(src: *const u8) -> Self;

    /// Stores `BYTES` bytes (no alignment needed).
    ///
    /// # Safety
    /// `dst` is valid for writes of `BYTES` bytes.
    unsafe fn store(self, dst: *mut u8);

    /// Bytewise XOR.
    fn xor(self, other: Self) -> Self;

    /// Multiplies every byte by 2 in GF(2^8): shift left, and where the top bit fell out,
    /// reduce by the polynomial (XOR 0x1d).
    fn mul2(self) -> Self;
}

/// A vector that can multiply every byte by an arbitrary constant: RAID6 read-modify-write
/// and recovery.
pub(crate) trait ConstMul: ByteVec {
    /// What multiplying by one constant needs in registers, prepared once per block.
    type By: Copy;

    /// The constant whose tables are given, ready for [`ConstMul::mul_by`].
    ///
    /// # Safety
    /// The CPU supports this type's feature.
    unsafe fn prepare(tables: &NibbleTables) -> Self::By;

    /// `c * x` for every byte `x` of `self`.
    fn mul_by(self, by: Self::By) -> Self;
}

/// Split-nibble look-ups (`pshufb`) are how SSSE3, AVX2 and AVX-512BW multiply.
impl<V: NibbleMul> ConstMul for V {
    type By = (V, V);

    #[inline(always)]
    unsafe fn prepare(tables: &NibbleTables) -> (V, V) {
        // SAFETY: the CPU feature is the caller's contract, as `table` requires.
        unsafe { (V::table(&tables.lo), V::table(&tables.hi)) }
    }

    #[inline(always)]
    fn mul_by(self, (lo, hi): (V, V)) -> V {
        self.nibble_mul(lo, hi)
    }
}

/// A vector that can also multiply by an arbitrary constant with split-nibble table look-ups.
pub(crate) trait NibbleMul: ByteVec {
    /// A 16-entry table, repeated in every 16-byte lane (byte shuffles look up within a lane).
    ///
    /// # Safety
    /// The CPU supports this type's feature.
    unsafe fn table(entries: &[u8; 16]) -> Self;

    /// `lo[x & 15] ^ hi[x >> 4]` for every byte `x` of `self`.
    fn nibble_mul(self, lo: Self, hi: Self) -> Self;
}
