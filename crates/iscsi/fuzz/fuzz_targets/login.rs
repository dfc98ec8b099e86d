#![no_main]
//! Login requests built from the input into the login state machine, then Text requests
//! into `text_answer`; see `../body.rs`.

use libfuzzer_sys::fuzz_target;

#[path = "../body.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::login(data);
});
