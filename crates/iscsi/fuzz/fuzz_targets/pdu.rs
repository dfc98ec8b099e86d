#![no_main]
//! Any BHS and AHS bytes into framing, parsing, the builders and CRC32C; see `../body.rs`.

use libfuzzer_sys::fuzz_target;

#[path = "../body.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::pdu(data);
});
