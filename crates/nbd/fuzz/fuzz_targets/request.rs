#![no_main]
//! Arbitrary request headers and limits into parse and validate; see `../body.rs`.

use libfuzzer_sys::fuzz_target;

#[path = "../body.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::request(data);
});
