//! What every implementation provides (a table of safe function pointers) and the length
//! check their unsafe loops rely on.

use crate::gf::NibbleTables;

/// The kernels of one implementation. Callers (the `ops` layer) have already asserted equal
/// lengths; the kernels assert them again because their unsafe loops rely on it.
#[derive(Debug)]
pub(crate) struct KernelTable {
    /// `dst = srcs[0] ^ srcs[1] ^ ...`, or with `acc` set `dst ^= srcs[0] ^ ...`. At least one
    /// source.
    pub xor: fn(dst: &mut [u8], srcs: &[&[u8]], acc: bool),
    /// `p = XOR of data`, `q = sum g^i * data[i]`. At least one data block.
    pub gen_pq: fn(data: &[&[u8]], p: &mut [u8], q: &mut [u8]),
    /// `dst ^= c * src` for the constant whose tables are given.
    pub mul_acc: fn(tables: &NibbleTables, src: &[u8], dst: &mut [u8]),
}

/// Asserts the caller contract every kernel's unsafe loop relies on: every block is `len` long.
pub(super) fn assert_lengths(len: usize, blocks: &[&[u8]], what: &str) {
    for (i, block) in blocks.iter().enumerate() {
        assert_eq!(
            block.len(),
            len,
            "{what}[{i}] has {} bytes, expected {len}",
            block.len()
        );
    }
}
