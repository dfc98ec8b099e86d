//! [`Parity`]: the parity operations bound to one implementation. The crate's free functions
//! use the cached best one; tests and benchmarks pick each implementation explicitly.

use std::ops::Range;
use std::sync::OnceLock;

use crate::gf::{self, NibbleTables};
use crate::kernels::{self, KernelTable};
use crate::Impl;

/// Bytes processed per step by operations that need scratch space (RMW, reconstruction): small
/// enough for a stack buffer that stays in L1, large enough to amortise a kernel call.
pub(crate) const SEGMENT_BYTES: usize = 4096;

/// The parity operations of one implementation (see the crate root for the conventions).
#[derive(Clone, Copy, Debug)]
pub struct Parity {
    imp: Impl,
    kernels: &'static KernelTable,
}

impl Parity {
    /// The operations of `imp`, or `None` if this CPU (or build) cannot run it.
    pub fn new(imp: Impl) -> Option<Parity> {
        kernels::table(imp).map(|kernels| Parity { imp, kernels })
    }

    /// The operations of [`Impl::best`], chosen once and cached.
    pub fn best() -> Parity {
        static BEST: OnceLock<Parity> = OnceLock::new();
        *BEST.get_or_init(|| {
            let imp = Impl::best();
            // `Impl::best` only returns available implementations; scalar is the safe fallback.
            Parity::new(imp).unwrap_or_else(Parity::scalar)
        })
    }

    /// The portable implementation, available everywhere.
    pub fn scalar() -> Parity {
        Parity {
            imp: Impl::Scalar,
            kernels: kernels::scalar_table(),
        }
    }

    /// Which implementation this is.
    pub fn imp(&self) -> Impl {
        self.imp
    }

    /// `dst ^= src`.
    pub fn xor_into(&self, dst: &mut [u8], src: &[u8]) {
        assert_same_len(dst.len(), src.len(), "xor_into: src");
        (self.kernels.xor)(dst, &[src], true);
    }

    /// `dst = srcs[0] ^ srcs[1] ^ ...` (at least one source).
    pub fn xor_gen(&self, dst: &mut [u8], srcs: &[&[u8]]) {
        assert!(!srcs.is_empty(), "xor_gen: needs at least one source");
        for src in srcs {
            assert_same_len(dst.len(), src.len(), "xor_gen: source");
        }
        (self.kernels.xor)(dst, srcs, false);
    }

    /// RAID6: P = XOR of data, Q = sum g^i * `data[i]`. At least one data block.
    pub fn gen_pq(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        assert!(!data.is_empty(), "gen_pq: needs at least one data block");
        assert_same_len(p.len(), q.len(), "gen_pq: q");
        for block in data {
            assert_same_len(p.len(), block.len(), "gen_pq: data block");
        }
        (self.kernels.gen_pq)(data, p, q);
    }

    /// Multiplies every byte of `src` by `c` in GF(2^8) and XORs it into `dst`.
    pub fn mul_acc(&self, c: u8, src: &[u8], dst: &mut [u8]) {
        assert_same_len(dst.len(), src.len(), "mul_acc: src");
        match c {
            0 => {}
            1 => (self.kernels.xor)(dst, &[src], true),
            _ => (self.kernels.mul_acc)(&NibbleTables::new(c), src, dst),
        }
    }

    /// Read-modify-write update for a change of data block `index` (Q order) from `old` to
    /// `new`: `p ^= old ^ new`, and if given, `q ^= g^index * (old ^ new)`.
    pub fn rmw_update(
        &self,
        index: usize,
        old: &[u8],
        new: &[u8],
        p: &mut [u8],
        q: Option<&mut [u8]>,
    ) {
        let len = p.len();
        assert_same_len(len, old.len(), "rmw_update: old");
        assert_same_len(len, new.len(), "rmw_update: new");
        let Some(q) = q else {
            (self.kernels.xor)(p, &[old, new], true);
            return;
        };
        assert_same_len(len, q.len(), "rmw_update: q");

        // The delta is formed once per segment in L1 and applied to both parities, so old and
        // new are each read once.
        let coef = gf::exp2(index);
        let tables = NibbleTables::new(coef);
        let mut delta = [0u8; SEGMENT_BYTES];
        for range in segments(len) {
            let delta = &mut delta[..range.len()];
            (self.kernels.xor)(delta, &[&old[range.clone()], &new[range.clone()]], false);
            (self.kernels.xor)(&mut p[range.clone()], &[delta], true);
            if coef == 1 {
                (self.kernels.xor)(&mut q[range], &[delta], true);
            } else {
                (self.kernels.mul_acc)(&tables, delta, &mut q[range]);
            }
        }
    }

    /// `dst ^= c * src` with tables precomputed once per operation (any `c`, 0 and 1 included).
    pub(crate) fn mul_acc_tables(&self, tables: &NibbleTables, src: &[u8], dst: &mut [u8]) {
        (self.kernels.mul_acc)(tables, src, dst);
    }

    /// `dst ^= srcs[0] ^ ...`.
    pub(crate) fn xor_acc(&self, dst: &mut [u8], srcs: &[&[u8]]) {
        (self.kernels.xor)(dst, srcs, true);
    }
}

/// The byte ranges of successive segments of a `len`-byte block.
pub(crate) fn segments(len: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len)
        .step_by(SEGMENT_BYTES)
        .map(move |start| start..len.min(start + SEGMENT_BYTES))
}

/// Length mismatches are caller-contract violations.
pub(crate) fn assert_same_len(expected: usize, actual: usize, what: &str) {
    assert_eq!(
        actual, expected,
        "{what} has {actual} bytes, expected {expected} (blocks differ in length)"
    );
}
