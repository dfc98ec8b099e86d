//! Block kernels: the three loops every parity operation is built from (multi-source XOR, P+Q
//! generation by Horner's rule, multiply-accumulate by a constant), once per implementation.
//!
//! The loops are written once, generically over a vector of bytes ([`vector::ByteVec`]), and
//! instantiated for a 64-bit word (the portable scalar path), SSSE3, AVX2, AVX-512 and AVX-512
//! with GFNI (whose affine transform multiplies by any constant in one instruction). Each
//! implementation is exposed as a [`KernelTable`] of safe function pointers; a table whose code
//! needs a CPU feature is handed out only after run-time detection found that feature, which is
//! what makes calling through it sound.

mod loops;
mod scalar;
mod table;
mod vector;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::Impl;
pub(crate) use table::KernelTable;

/// The kernels of `imp`, or `None` when this CPU (or this build) cannot run them.
pub(crate) fn table(imp: Impl) -> Option<&'static KernelTable> {
    match imp {
        Impl::Scalar => Some(&scalar::TABLE),
        #[cfg(target_arch = "x86_64")]
        Impl::Ssse3 if std::arch::is_x86_feature_detected!("ssse3") => Some(&x86::SSSE3),
        #[cfg(target_arch = "x86_64")]
        Impl::Avx2 if std::arch::is_x86_feature_detected!("avx2") => Some(&x86::AVX2),
        #[cfg(target_arch = "x86_64")]
        Impl::Avx512
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw") =>
        {
            Some(&x86::AVX512)
        }
        #[cfg(target_arch = "x86_64")]
        Impl::Gfni
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("gfni") =>
        {
            Some(&x86::GFNI)
        }
        _ => None,
    }
}

/// The portable kernels, which every build and CPU can run.
pub(crate) fn scalar_table() -> &'static KernelTable {
    &scalar::TABLE
}
