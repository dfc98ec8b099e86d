//! Parity for raidd: md-compatible RAID5 XOR and RAID6 P+Q.
//!
//! Conventions shared by every function:
//! - Blocks are byte slices of equal length (any length; SIMD handles the bulk, scalar code the
//!   tail). Functions assert equal lengths.
//! - RAID6 data blocks are given in *Q order*: block `i` contributes `g^i * D_i` to Q, with
//!   g = 2 in GF(2^8) with polynomial 0x11d (md / Linux `lib/raid6`). The engine maps md's
//!   slot order to this index via `raidd_layout::StripeMap::q_coef`.
//! - Implementations are chosen once at run time from CPU features (AVX-512 with GFNI,
//!   AVX-512BW, AVX2, SSSE3, scalar) and can be forced with [`Impl`] (or the
//!   `RAIDD_PARITY_IMPL` environment variable) for tests and benchmarks.
//!
//! The free functions dispatch through [`Parity::best`] (a cached choice: one load and an
//! indirect call per operation); [`Parity::new`] gives the same operations for one explicit
//! implementation.

pub mod bench;
pub mod gf;
mod kernels;
mod ops;
mod recover;
mod select;

pub use ops::Parity;
pub use recover::MAX_RAID6_DATA_BLOCKS;
pub use select::IMPL_ENV;

/// Which code path computes parity.
///
/// [`Impl::best`] picks the fastest the CPU runs (`Avx512` needs AVX-512F and BW, `Gfni`
/// those and GFNI); `RAIDD_PARITY_IMPL` forces another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Impl {
    Scalar,
    Ssse3,
    Avx2,
    Avx512,
    /// AVX-512 whose GF(2^8) multiplications are GFNI affine transforms.
    Gfni,
}

/// `dst ^= src`.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    Parity::best().xor_into(dst, src);
}

/// `dst = srcs[0] ^ srcs[1] ^ ...` (at least one source). This is RAID5 P generation and
/// RAID5 single-block reconstruction.
pub fn xor_gen(dst: &mut [u8], srcs: &[&[u8]]) {
    Parity::best().xor_gen(dst, srcs);
}

/// RAID6: P = XOR of data, Q = sum g^i * `data[i]`. At least one data block.
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    Parity::best().gen_pq(data, p, q);
}

/// Read-modify-write update for a change of data block `index` (Q order) from `old` to `new`:
/// `p ^= old ^ new`, and if given, `q ^= g^index * (old ^ new)`.
pub fn rmw_update(index: usize, old: &[u8], new: &[u8], p: &mut [u8], q: Option<&mut [u8]>) {
    Parity::best().rmw_update(index, old, new, p, q);
}

/// What a RAID6 stripe has lost (indices are Q-order data indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    Data(usize),
    P,
    Q,
    DataData(usize, usize),
    DataP(usize),
    DataQ(usize),
    PQ,
}

/// Rebuilds the lost blocks of a RAID5/6 stripe in place. `data` holds the k data blocks in Q
/// order, `p` and `q` the parity blocks (`q` is `None` for RAID5). The contents of the lost
/// blocks on input are ignored; on output they hold the reconstructed data. RAID5 accepts only
/// `Lost::Data` and `Lost::P`.
pub fn reconstruct(data: &mut [&mut [u8]], p: &mut [u8], q: Option<&mut [u8]>, lost: Lost) {
    Parity::best().reconstruct(data, p, q, lost);
}

/// Multiplies every byte of `src` by `c` in GF(2^8) and XORs it into `dst`.
pub fn mul_acc(c: u8, src: &[u8], dst: &mut [u8]) {
    Parity::best().mul_acc(c, src, dst);
}
