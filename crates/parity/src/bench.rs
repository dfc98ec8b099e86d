//! The parity benchmark: XOR and P+Q throughput next to single-core memcpy, in one run.

/// One measured row.
#[derive(Clone, Debug)]
pub struct BenchRow {
    pub name: String,
    /// Bytes of *source data* processed per second (memcpy: bytes copied per second).
    pub bytes_per_sec: f64,
    /// bytes_per_sec / memcpy bytes_per_sec.
    pub ratio_to_memcpy: f64,
}

/// Runs memcpy, XOR (RAID5 P over `data_blocks` blocks) and P+Q (RAID6 over `data_blocks`)
/// for every available implementation, each for about `seconds`, alternating and taking the
/// median of several rounds. `block_bytes` is the chunk size (e.g. 64 KiB).
pub fn run(data_blocks: usize, block_bytes: usize, seconds: f64) -> Vec<BenchRow> {
    todo!()
}
