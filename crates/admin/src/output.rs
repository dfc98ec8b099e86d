//! Writing to stdout without panicking when the reader has gone away: text, and JSON.

use std::io::Write;

use crate::exit::{AdminError, AdminResult};
use serde::Serialize;

/// Writes `text` to stdout. A closed pipe (`raidd detail | head`) ends output quietly.
pub fn emit(text: &str) -> AdminResult {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(AdminError::io("writing to stdout", &e)),
    }
}

/// Pretty-printed JSON on stdout, newline-terminated.
pub fn emit_json(value: &impl Serialize) -> AdminResult {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| AdminError::failure(format!("encoding JSON output: {e}")))?;
    emit(&format!("{text}\n"))
}
