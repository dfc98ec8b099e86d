#![no_main]
//! Arbitrary bytes into the md superblock and bitmap parsers; see `../body.rs`.

use libfuzzer_sys::fuzz_target;

#[path = "../body.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::check(data);
});
