#![no_main]
//! Arbitrary client bytes into the server handshake machine; see `../body.rs`.

use libfuzzer_sys::fuzz_target;

#[path = "../body.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::handshake(data);
});
