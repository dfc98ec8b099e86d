//! Parity throughput next to single-core memcpy.
//!
//! `cargo run --release -p raidd-parity --example parity_bench [seconds_per_row]`
//! (default 1.0). Rows: memcpy, then per implementation xor (RAID5 P), pq (RAID6 P+Q),
//! mul_acc (one block times a constant) and recov2 (RAID6 two-data-block rebuild).

use raidd_parity::{bench, Impl};

fn main() {
    let seconds = match std::env::args().nth(1) {
        Some(arg) => match arg.parse::<f64>() {
            Ok(s) if s > 0.0 => s,
            _ => {
                eprintln!("usage: parity_bench [seconds_per_row > 0]");
                std::process::exit(2);
            }
        },
        None => 1.0,
    };
    let available: Vec<String> = Impl::available().iter().map(|i| i.to_string()).collect();
    println!(
        "available: {}   best: {}",
        available.join(", "),
        Impl::best()
    );

    const KIB: usize = 1024;
    // 64 KiB: md's default chunk, a stripe-cache-sized (in-cache) working set;
    // 4 MiB: a working set far beyond the caches, so memory bandwidth decides.
    for (data_blocks, block_bytes) in [
        (4, 64 * KIB),
        (8, 64 * KIB),
        (4, 4096 * KIB),
        (8, 4096 * KIB),
    ] {
        println!();
        println!("data blocks {data_blocks}, block {} KiB", block_bytes / KIB);
        println!("{:<16} {:>8} {:>10}", "row", "GB/s", "x memcpy");
        for row in bench::run(data_blocks, block_bytes, seconds) {
            println!(
                "{:<16} {:>8.2} {:>10.2}",
                row.name,
                row.bytes_per_sec / 1e9,
                row.ratio_to_memcpy
            );
        }
    }
}
