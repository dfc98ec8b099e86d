//! Text that came from the network, made safe to log: control characters (a newline that
//! would start a forged log line, escape sequences for a terminal) are written escaped, as
//! Rust's `escape_debug` does, and very long text is cut.

use std::fmt;

/// Longest text written; the rest is left out with a note.
const MAX_CHARS: usize = 256;

/// Displays the text escaped.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.chars().enumerate() {
            if i == MAX_CHARS {
                return write!(f, "...({} bytes in all)", self.0.len());
            }
            if c.is_control() || c == '\\' {
                write!(f, "{}", c.escape_debug())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        let forged = "iqn.x\nINFO raidd: admin logged in\x1b[2J";
        let shown = Escaped(forged).to_string();
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert_eq!(shown, "iqn.x\\nINFO raidd: admin logged in\\u{1b}[2J");
        assert_eq!(Escaped("a\\b").to_string(), "a\\\\b");
        let long = "x".repeat(1000);
        let s = Escaped(&long).to_string();
        assert!(s.len() < 300 && s.ends_with("(1000 bytes in all)"), "{s}");
    }
}
