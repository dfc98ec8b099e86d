//! `raidd bench parity`: XOR (RAID5 P) and P+Q (RAID6) throughput next to single-core
//! memcpy, for every parity implementation this CPU has.

use raidd_parity::bench;
use serde::Serialize;

use raidd_admin::exit::AdminResult;
use raidd_admin::output;
use raidd_admin::size;

/// The configurations measured: (data blocks, block bytes).
pub const CONFIGS: [(usize, usize); 4] =
    [(4, 64 << 10), (8, 64 << 10), (4, 1 << 20), (8, 512 << 10)];

/// One row of `bench parity --json`.
#[derive(Debug, Serialize)]
pub struct RowJson {
    pub data_blocks: usize,
    pub block_bytes: usize,
    /// Implementation (`scalar`, `ssse3`, `avx2`, ...; `baseline` for memcpy).
    #[serde(rename = "impl")]
    pub imp: String,
    /// `memcpy`, `xor`, `pq`, `mul_acc`, `recov2`.
    pub op: String,
    pub bytes_per_sec: f64,
    pub gb_per_s: f64,
    pub ratio_to_memcpy: f64,
}

/// Splits the benchmark's row name ("avx2 xor", "memcpy") into implementation and operation.
pub fn split_name(name: &str) -> (String, String) {
    match name.split_once(' ') {
        Some((imp, op)) => (imp.to_string(), op.to_string()),
        None => ("baseline".to_string(), name.to_string()),
    }
}

pub fn run(seconds: f64, json: bool) -> AdminResult {
    let mut rows = Vec::new();
    for (data_blocks, block_bytes) in CONFIGS {
        for r in bench::run(data_blocks, block_bytes, seconds) {
            let (imp, op) = split_name(&r.name);
            rows.push(RowJson {
                data_blocks,
                block_bytes,
                imp,
                op,
                bytes_per_sec: r.bytes_per_sec,
                gb_per_s: r.bytes_per_sec / 1e9,
                ratio_to_memcpy: r.ratio_to_memcpy,
            });
        }
    }
    if json {
        #[derive(Serialize)]
        struct Out {
            seconds_per_row: f64,
            rows: Vec<RowJson>,
        }
        return output::emit_json(&Out {
            seconds_per_row: seconds,
            rows,
        });
    }
    let mut text = String::new();
    let mut last = None;
    for r in &rows {
        if last != Some((r.data_blocks, r.block_bytes)) {
            if last.is_some() {
                text.push('\n');
            }
            text.push_str(&format!(
                "{} data blocks of {}:\n{:<10} {:<8} {:>8} {:>9}\n",
                r.data_blocks,
                size::short(r.block_bytes as u64),
                "impl",
                "op",
                "GB/s",
                "x memcpy"
            ));
            last = Some((r.data_blocks, r.block_bytes));
        }
        text.push_str(&format!(
            "{:<10} {:<8} {:>8.2} {:>9.2}\n",
            r.imp, r.op, r.gb_per_s, r.ratio_to_memcpy
        ));
    }
    output::emit(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_names_split() {
        assert_eq!(
            split_name("avx2 xor"),
            ("avx2".to_string(), "xor".to_string())
        );
        assert_eq!(
            split_name("memcpy"),
            ("baseline".to_string(), "memcpy".to_string())
        );
    }
}
