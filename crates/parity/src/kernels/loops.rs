//! The generic loops. Each walks its blocks once, front to back, `UNROLL` vectors at a time (so
//! independent dependency chains keep the load ports busy), then one vector at a time, and
//! finishes the last `< BYTES` bytes with plain byte code.
//!
//! Everything here is `#[inline(always)]` so that it is compiled inside the `#[target_feature]`
//! entry point of its implementation, where the intrinsics can inline.

use super::table::assert_lengths;
use super::vector::{ByteVec, ConstMul};
use crate::gf::NibbleTables;

/// Vectors per iteration of the main loops. Four P and four Q accumulators plus the loaded data
/// and two constants still fit the 16 vector registers of SSE/AVX2.
const UNROLL: usize = 4;

/// `dst = srcs[0] ^ ...` or, with `acc`, `dst ^= srcs[0] ^ ...`: every source is read once and
/// `dst` written once.
///
/// # Safety
/// The CPU supports `V`'s feature.
#[inline(always)]
pub(super) unsafe fn xor<V: ByteVec>(dst: &mut [u8], srcs: &[&[u8]], acc: bool) {
    assert!(!srcs.is_empty(), "xor needs at least one source");
    let len = dst.len();
    assert_lengths(len, srcs, "srcs");

    let out = dst.as_mut_ptr();
    // The running value starts from dst itself when accumulating, else from the first source.
    let (first, rest): (*const u8, &[&[u8]]) = if acc {
        (out.cast_const(), srcs)
    } else {
        (srcs[0].as_ptr(), &srcs[1..])
    };

    let mut off = 0;
    while off + UNROLL * V::BYTES <= len {
        // SAFETY: off + UNROLL * BYTES <= len, and `first`, every source and dst are len bytes
        // long (asserted above); the CPU feature is our contract. The same holds for the other
        // unsafe blocks of this loop.
        let mut x = unsafe { load_n::<V>(first.add(off)) };
        for src in rest {
            // SAFETY: see the top of the loop.
            let s = unsafe { load_n::<V>(src.as_ptr().add(off)) };
            xor_n(&mut x, &s);
        }
        // SAFETY: see the top of the loop.
        unsafe { store_n(&x, out.add(off)) };
        off += UNROLL * V::BYTES;
    }
    while off + V::BYTES <= len {
        // SAFETY: off + BYTES <= len for `first`, every source and dst; CPU feature by contract.
        unsafe {
            let mut x = V::load(first.add(off));
            for src in rest {
                x = x.xor(V::load(src.as_ptr().add(off)));
            }
            x.store(out.add(off));
        }
        off += V::BYTES;
    }
    for i in off..len {
        let mut x = if acc { dst[i] } else { srcs[0][i] };
        for src in rest {
            x ^= src[i];
        }
        dst[i] = x;
    }
}

/// P and Q in one pass by Horner's rule from the highest Q index down:
/// `q = D[k-1]; q = 2q ^ D[i]` for `i = k-2 ..= 0`, which leaves `q = sum 2^i D[i]`.
///
/// # Safety
/// The CPU supports `V`'s feature.
#[inline(always)]
pub(super) unsafe fn gen_pq<V: ByteVec>(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    let Some((top, lower)) = data.split_last() else {
        panic!("gen_pq needs at least one data block");
    };
    let len = p.len();
    assert_lengths(len, &[q], "q");
    assert_lengths(len, data, "data");

    let (p_out, q_out) = (p.as_mut_ptr(), q.as_mut_ptr());
    let mut off = 0;
    while off + UNROLL * V::BYTES <= len {
        // SAFETY: off + UNROLL * BYTES <= len and every block is len bytes long (asserted
        // above); the CPU feature is our contract. The same holds for the other unsafe blocks of
        // this loop.
        let mut pv = unsafe { load_n::<V>(top.as_ptr().add(off)) };
        let mut qv = pv;
        for block in lower.iter().rev() {
            // SAFETY: see the top of the loop.
            let d = unsafe { load_n::<V>(block.as_ptr().add(off)) };
            xor_n(&mut pv, &d);
            for (qj, dj) in qv.iter_mut().zip(d) {
                *qj = qj.mul2().xor(dj);
            }
        }
        // SAFETY: see the top of the loop.
        unsafe {
            store_n(&pv, p_out.add(off));
            store_n(&qv, q_out.add(off));
        }
        off += UNROLL * V::BYTES;
    }
    while off + V::BYTES <= len {
        // SAFETY: off + BYTES <= len for every block, p and q; CPU feature by contract.
        unsafe {
            let mut pv = V::load(top.as_ptr().add(off));
            let mut qv = pv;
            for block in lower.iter().rev() {
                let d = V::load(block.as_ptr().add(off));
                pv = pv.xor(d);
                qv = qv.mul2().xor(d);
            }
            pv.store(p_out.add(off));
            qv.store(q_out.add(off));
        }
        off += V::BYTES;
    }
    for i in off..len {
        let (mut pb, mut qb) = (top[i], top[i]);
        for block in lower.iter().rev() {
            pb ^= block[i];
            qb = mul2_byte(qb) ^ block[i];
        }
        p[i] = pb;
        q[i] = qb;
    }
}

/// `dst ^= c * src`, with `c` given by its split-nibble tables.
///
/// # Safety
/// The CPU supports `V`'s feature.
#[inline(always)]
pub(super) unsafe fn mul_acc<V: ConstMul>(tables: &NibbleTables, src: &[u8], dst: &mut [u8]) {
    let len = dst.len();
    assert_lengths(len, &[src], "src");

    // SAFETY: the CPU feature is our contract.
    let by = unsafe { V::prepare(tables) };
    let out = dst.as_mut_ptr();
    let mut off = 0;
    while off + UNROLL * V::BYTES <= len {
        // SAFETY: off + UNROLL * BYTES <= len for src and dst (asserted equal above); CPU
        // feature by contract. The same holds for the other unsafe blocks of this loop.
        let s = unsafe { load_n::<V>(src.as_ptr().add(off)) };
        // SAFETY: see the top of the loop.
        let mut d = unsafe { load_n::<V>(out.add(off)) };
        for (dj, sj) in d.iter_mut().zip(s) {
            *dj = dj.xor(sj.mul_by(by));
        }
        // SAFETY: see the top of the loop.
        unsafe { store_n(&d, out.add(off)) };
        off += UNROLL * V::BYTES;
    }
    while off + V::BYTES <= len {
        // SAFETY: off + BYTES <= len for src and dst; CPU feature by contract.
        unsafe {
            let product = V::load(src.as_ptr().add(off)).mul_by(by);
            V::load(out.add(off)).xor(product).store(out.add(off));
        }
        off += V::BYTES;
    }
    for i in off..len {
        dst[i] ^= tables.mul(src[i]);
    }
}

/// `x * 2` in GF(2^8) for one byte (the tails of [`gen_pq`]).
#[inline(always)]
pub(super) fn mul2_byte(x: u8) -> u8 {
    let reduce = if x & 0x80 != 0 { 0x1d } else { 0 };
    (x << 1) ^ reduce
}

/// Loads `UNROLL` consecutive vectors.
///
/// # Safety
/// `src` is valid for reads of `UNROLL * BYTES` bytes; the CPU supports `V`'s feature.
#[inline(always)]
unsafe fn load_n<V: ByteVec>(src: *const u8) -> [V; UNROLL] {
    // SAFETY: vector j covers bytes j*BYTES .. (j+1)*BYTES <= UNROLL*BYTES, readable by contract.
    std::array::from_fn(|j| unsafe { V::load(src.add(j * V::BYTES)) })
}

/// Stores `UNROLL` consecutive vectors.
///
/// # Safety
/// `dst` is valid for writes of `UNROLL * BYTES` bytes.
#[inline(always)]
unsafe fn store_n<V: ByteVec>(v: &[V; UNROLL], dst: *mut u8) {
    for (j, x) in v.iter().enumerate() {
        // SAFETY: vector j covers bytes j*BYTES .. (j+1)*BYTES <= UNROLL*BYTES, writable by
        // contract.
        unsafe { x.store(dst.add(j * V::BYTES)) };
    }
}

#[inline(always)]
fn xor_n<V: ByteVec>(acc: &mut [V; UNROLL], other: &[V; UNROLL]) {
    for (a, b) in acc.iter_mut().zip(other) {
        *a = a.xor(*b);
    }
}
