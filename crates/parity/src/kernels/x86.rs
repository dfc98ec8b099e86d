//! SSSE3, AVX2, AVX-512 (BW) and AVX-512 with GFNI vectors, and the kernel tables
//! instantiated from them.
//!
//! Every operation is a one- to four-instruction wrapper around an intrinsic. The wrappers carry
//! no `#[target_feature]` themselves; they are `#[inline(always)]` into the entry points below,
//! which do, so each loop compiles to straight SIMD code.

use std::arch::x86_64::*;

use super::loops;
use super::table::KernelTable;
use super::vector::{ByteVec, ConstMul, NibbleMul};
use crate::gf::NibbleTables;

/// 16 bytes in an SSE register. Multiplication needs `pshufb`, hence SSSE3.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sse(__m128i);

/// 32 bytes in an AVX2 register.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx(__m256i);

impl ByteVec for Sse {
    const BYTES: usize = 16;

    #[inline(always)]
    unsafe fn load(src: *const u8) -> Self {
        // SAFETY: the caller guarantees 16 readable bytes and SSSE3; loadu needs no alignment.
        Sse(unsafe { _mm_loadu_si128(src.cast()) })
    }

    #[inline(always)]
    unsafe fn store(self, dst: *mut u8) {
        // SAFETY: the caller guarantees 16 writable bytes; storeu needs no alignment. SSSE3 is
        // there because `self` exists (see `vector`).
        unsafe { _mm_storeu_si128(dst.cast(), self.0) }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        // SAFETY: an `Sse` exists only where SSSE3 (hence SSE2) was detected.
        Sse(unsafe { _mm_xor_si128(self.0, other.0) })
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        // SAFETY: an `Sse` exists only where SSSE3 (hence SSE2) was detected.
        unsafe {
            // Bytes with the top bit set are negative as i8: 0 > x gives 0xff exactly there.
            let overflow = _mm_cmpgt_epi8(_mm_setzero_si128(), self.0);
            let doubled = _mm_add_epi8(self.0, self.0);
            Sse(_mm_xor_si128(
                doubled,
                _mm_and_si128(overflow, _mm_set1_epi8(0x1d)),
            ))
        }
    }
}

impl NibbleMul for Sse {
    #[inline(always)]
    unsafe fn table(entries: &[u8; 16]) -> Self {
        // SAFETY: `entries` is 16 readable bytes; SSSE3 by the caller's contract.
        Sse(unsafe { _mm_loadu_si128(entries.as_ptr().cast()) })
    }

    #[inline(always)]
    fn nibble_mul(self, lo: Self, hi: Self) -> Self {
        // SAFETY: an `Sse` exists only where SSSE3 was detected.
        unsafe {
            let low_nibbles = _mm_set1_epi8(0x0f);
            let lo_idx = _mm_and_si128(self.0, low_nibbles);
            // There is no 8-bit shift: shift 16-bit lanes and mask off what crossed bytes.
            let hi_idx = _mm_and_si128(_mm_srli_epi16::<4>(self.0), low_nibbles);
            Sse(_mm_xor_si128(
                _mm_shuffle_epi8(lo.0, lo_idx),
                _mm_shuffle_epi8(hi.0, hi_idx),
            ))
        }
    }
}

impl ByteVec for Avx {
    const BYTES: usize = 32;

    #[inline(always)]
    unsafe fn load(src: *const u8) -> Self {
        // SAFETY: the caller guarantees 32 readable bytes and AVX2; loadu needs no alignment.
        Avx(unsafe { _mm256_loadu_si256(src.cast()) })
    }

    #[inline(always)]
    unsafe fn store(self, dst: *mut u8) {
        // SAFETY: the caller guarantees 32 writable bytes; storeu needs no alignment. AVX2 is
        // there because `self` exists (see `vector`).
        unsafe { _mm256_storeu_si256(dst.cast(), self.0) }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        // SAFETY: an `Avx` exists only where AVX2 was detected.
        Avx(unsafe { _mm256_xor_si256(self.0, other.0) })
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        // SAFETY: an `Avx` exists only where AVX2 was detected.
        unsafe {
            // Bytes with the top bit set are negative as i8: 0 > x gives 0xff exactly there.
            let overflow = _mm256_cmpgt_epi8(_mm256_setzero_si256(), self.0);
            let doubled = _mm256_add_epi8(self.0, self.0);
            Avx(_mm256_xor_si256(
                doubled,
                _mm256_and_si256(overflow, _mm256_set1_epi8(0x1d)),
            ))
        }
    }
}

impl NibbleMul for Avx {
    #[inline(always)]
    unsafe fn table(entries: &[u8; 16]) -> Self {
        // SAFETY: `entries` is 16 readable bytes; AVX2 by the caller's contract. vpshufb looks
        // up within each 128-bit lane, so both lanes get the same table.
        Avx(unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(entries.as_ptr().cast())) })
    }

    #[inline(always)]
    fn nibble_mul(self, lo: Self, hi: Self) -> Self {
        // SAFETY: an `Avx` exists only where AVX2 was detected.
        unsafe {
            let low_nibbles = _mm256_set1_epi8(0x0f);
            let lo_idx = _mm256_and_si256(self.0, low_nibbles);
            // There is no 8-bit shift: shift 16-bit lanes and mask off what crossed bytes.
            let hi_idx = _mm256_and_si256(_mm256_srli_epi16::<4>(self.0), low_nibbles);
            Avx(_mm256_xor_si256(
                _mm256_shuffle_epi8(lo.0, lo_idx),
                _mm256_shuffle_epi8(hi.0, hi_idx),
            ))
        }
    }
}

/// 64 bytes in an AVX-512 register. Byte shuffles and byte masks need AVX-512BW.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(__m512i);

impl ByteVec for Avx512 {
    const BYTES: usize = 64;

    #[inline(always)]
    unsafe fn load(src: *const u8) -> Self {
        // SAFETY: the caller guarantees 64 readable bytes and AVX-512F; loadu needs no
        // alignment.
        Avx512(unsafe { _mm512_loadu_si512(src.cast()) })
    }

    #[inline(always)]
    unsafe fn store(self, dst: *mut u8) {
        // SAFETY: the caller guarantees 64 writable bytes; storeu needs no alignment. AVX-512F
        // is there because `self` exists (see `vector`).
        unsafe { _mm512_storeu_si512(dst.cast(), self.0) }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        // SAFETY: an `Avx512` exists only where AVX-512F and BW were detected.
        Avx512(unsafe { _mm512_xor_si512(self.0, other.0) })
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        // SAFETY: an `Avx512` exists only where AVX-512F and BW were detected.
        unsafe {
            // The top bit of each byte, as a mask: those bytes overflow and take the
            // polynomial.
            let overflow = _mm512_movepi8_mask(self.0);
            let doubled = _mm512_add_epi8(self.0, self.0);
            Avx512(_mm512_xor_si512(
                doubled,
                _mm512_maskz_mov_epi8(overflow, _mm512_set1_epi8(0x1d)),
            ))
        }
    }
}

impl NibbleMul for Avx512 {
    #[inline(always)]
    unsafe fn table(entries: &[u8; 16]) -> Self {
        // SAFETY: `entries` is 16 readable bytes; AVX-512F by the caller's contract. vpshufb
        // looks up within each 128-bit lane, so every lane gets the same table.
        Avx512(unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(entries.as_ptr().cast())) })
    }

    #[inline(always)]
    fn nibble_mul(self, lo: Self, hi: Self) -> Self {
        // SAFETY: an `Avx512` exists only where AVX-512F and BW were detected.
        unsafe {
            let low_nibbles = _mm512_set1_epi8(0x0f);
            let lo_idx = _mm512_and_si512(self.0, low_nibbles);
            // There is no 8-bit shift: shift 16-bit lanes and mask off what crossed bytes.
            let hi_idx = _mm512_and_si512(_mm512_srli_epi16::<4>(self.0), low_nibbles);
            Avx512(_mm512_xor_si512(
                _mm512_shuffle_epi8(lo.0, lo_idx),
                _mm512_shuffle_epi8(hi.0, hi_idx),
            ))
        }
    }
}

/// 64 bytes in an AVX-512 register, multiplied by GFNI's affine transform: one instruction
/// for any constant (`Avx512` takes four for a doubling and six for a constant's table
/// look-ups). Loads, stores and XOR are `Avx512`'s.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gfni(Avx512);

/// Doubling in GF(2^8) mod 0x11d as an affine matrix (`NibbleTables::new(2).affine_matrix()`,
/// checked by a test).
const MUL2_MATRIX: i64 = 0x8001_8284_8810_2040_u64 as i64;

impl Gfni {
    /// Every byte times the constant whose matrix fills each 64-bit lane of `matrix`.
    #[inline(always)]
    fn affine(self, matrix: __m512i) -> Gfni {
        // SAFETY: a `Gfni` exists only where AVX-512F, BW and GFNI were detected.
        Gfni(Avx512(unsafe {
            _mm512_gf2p8affine_epi64_epi8::<0>(self.0 .0, matrix)
        }))
    }
}

impl ByteVec for Gfni {
    const BYTES: usize = 64;

    #[inline(always)]
    unsafe fn load(src: *const u8) -> Self {
        // SAFETY: the caller's contract, which covers AVX-512F and BW.
        Gfni(unsafe { Avx512::load(src) })
    }

    #[inline(always)]
    unsafe fn store(self, dst: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe { self.0.store(dst) }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        Gfni(self.0.xor(other.0))
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        // SAFETY: a `Gfni` exists only where AVX-512F was detected.
        self.affine(unsafe { _mm512_set1_epi64(MUL2_MATRIX) })
    }
}

impl ConstMul for Gfni {
    type By = __m512i;

    #[inline(always)]
    unsafe fn prepare(tables: &NibbleTables) -> __m512i {
        // SAFETY: AVX-512F by the caller's contract. Every 64-bit lane holds the same matrix.
        unsafe { _mm512_set1_epi64(tables.affine_matrix() as i64) }
    }

    #[inline(always)]
    fn mul_by(self, matrix: __m512i) -> Gfni {
        self.affine(matrix)
    }
}

/// Instantiates the generic loops for one vector type inside `#[target_feature]` functions and
/// wraps them in safe functions for a [`KernelTable`].
macro_rules! kernel_table {
    ($table:ident, $vec:ty, $feature:literal) => {
        pub(super) static $table: KernelTable = {
            #[target_feature(enable = $feature)]
            unsafe fn xor_tf(dst: &mut [u8], srcs: &[&[u8]], acc: bool) {
                // SAFETY: this function's target feature is the one the vector type needs.
                unsafe { loops::xor::<$vec>(dst, srcs, acc) }
            }
            #[target_feature(enable = $feature)]
            unsafe fn gen_pq_tf(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
                // SAFETY: this function's target feature is the one the vector type needs.
                unsafe { loops::gen_pq::<$vec>(data, p, q) }
            }
            #[target_feature(enable = $feature)]
            unsafe fn mul_acc_tf(tables: &NibbleTables, src: &[u8], dst: &mut [u8]) {
                // SAFETY: this function's target feature is the one the vector type needs.
                unsafe { loops::mul_acc::<$vec>(tables, src, dst) }
            }

            fn xor(dst: &mut [u8], srcs: &[&[u8]], acc: bool) {
                // SAFETY: reachable only through this table, which `kernels::table` hands out
                // only after detecting the feature.
                unsafe { xor_tf(dst, srcs, acc) }
            }
            fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
                // SAFETY: as for `xor`.
                unsafe { gen_pq_tf(data, p, q) }
            }
            fn mul_acc(tables: &NibbleTables, src: &[u8], dst: &mut [u8]) {
                // SAFETY: as for `xor`.
                unsafe { mul_acc_tf(tables, src, dst) }
            }

            KernelTable {
                xor,
                gen_pq,
                mul_acc,
            }
        };
    };
}

kernel_table!(SSSE3, Sse, "ssse3");
kernel_table!(AVX2, Avx, "avx2");
kernel_table!(AVX512, Avx512, "avx512f,avx512bw");
kernel_table!(GFNI, Gfni, "avx512f,avx512bw,gfni");

#[cfg(test)]
mod tests {
    use crate::gf::NibbleTables;

    #[test]
    fn the_doubling_matrix_is_the_fields() {
        assert_eq!(
            super::MUL2_MATRIX as u64,
            NibbleTables::new(2).affine_matrix()
        );
    }
}
