//! Exit codes (documented in `raidd --help` and EXIT_CODES.md) and the error an operation
//! reports: one line and its exit code, whether the CLI or the daemon met it.

use std::fmt;
use std::process::ExitCode;

use serde::Serialize;

use raidd_engine::ErrorKind;

/// What `raidd` exits with. The numbers are a stable interface for scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    Success = 0,
    /// An I/O error or any other failure.
    Failure = 1,
    /// Bad command line: unknown option, bad value, unaligned or out-of-range offsets.
    Usage = 2,
    /// A member does not exist or carries no md superblock.
    NotFound = 3,
    /// Members of different arrays, the same member twice, a member in use, or an existing
    /// superblock without --force.
    Conflict = 4,
    /// Not enough members to run the array, or the array failed.
    Insufficient = 5,
    /// An md feature raidd does not implement.
    Unsupported = 6,
    /// Corrupt or inconsistent metadata.
    Corrupt = 7,
    /// `pattern verify` found bad data.
    BadData = 8,
}

/// The `after_help` text of `raidd --help`.
pub const HELP: &str = "\
Exit codes:
  0  success
  1  I/O error or other failure
  2  usage error (bad option or value, unaligned or out-of-range offset/length)
  3  member not found, or no md superblock on it
  4  conflict: members of different arrays, a member given twice, a member in use,
     an existing superblock without --force
  5  not enough members to run the array / array failed
  6  unsupported md feature
  7  corrupt metadata
  8  verification found bad data

Sizes accept bytes or K/M/G/T suffixes (powers of 1024). Logging goes to stderr:
warnings by default, -v for info, -vv for debug; RUST_LOG overrides.";

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The exit code for an engine error kind.
    pub fn from_kind(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::InvalidInput | ErrorKind::Unaligned | ErrorKind::OutOfRange => Exit::Usage,
            ErrorKind::ReadOnly | ErrorKind::Io | ErrorKind::Interrupted | ErrorKind::TimedOut => {
                Exit::Failure
            }
            ErrorKind::NotFound => Exit::NotFound,
            ErrorKind::Conflict => Exit::Conflict,
            ErrorKind::InsufficientMembers => Exit::Insufficient,
            ErrorKind::Unsupported => Exit::Unsupported,
            ErrorKind::BadMetadata => Exit::Corrupt,
        }
    }

    /// The code's meaning (a daemon's answer carries the number); unknown numbers are
    /// failures.
    pub fn from_code(code: u8) -> Exit {
        [
            Exit::Success,
            Exit::Failure,
            Exit::Usage,
            Exit::NotFound,
            Exit::Conflict,
            Exit::Insufficient,
            Exit::Unsupported,
            Exit::Corrupt,
            Exit::BadData,
        ]
        .into_iter()
        .find(|e| e.code() == code)
        .unwrap_or(Exit::Failure)
    }

    /// The short name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::Failure => "failure",
            Exit::Usage => "usage",
            Exit::NotFound => "not_found",
            Exit::Conflict => "conflict",
            Exit::Insufficient => "insufficient",
            Exit::Unsupported => "unsupported",
            Exit::Corrupt => "corrupt",
            Exit::BadData => "bad_data",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// A failure to report: one line for stderr and the exit code.
#[derive(Debug)]
pub struct AdminError {
    pub exit: Exit,
    pub message: String,
}

pub type AdminResult<T = ()> = Result<T, AdminError>;

impl AdminError {
    pub fn new(exit: Exit, message: impl Into<String>) -> AdminError {
        AdminError {
            exit,
            message: message.into(),
        }
    }

    /// A failure whose details were already printed on stderr: only the exit code remains.
    pub fn reported(exit: Exit) -> AdminError {
        AdminError::new(exit, "")
    }

    pub fn usage(message: impl Into<String>) -> AdminError {
        AdminError::new(Exit::Usage, message)
    }

    pub fn failure(message: impl Into<String>) -> AdminError {
        AdminError::new(Exit::Failure, message)
    }

    /// An I/O error on something other than a member (input/output files, stdout).
    pub fn io(context: impl fmt::Display, e: &std::io::Error) -> AdminError {
        let exit = match e.kind() {
            std::io::ErrorKind::NotFound => Exit::NotFound,
            _ => Exit::Failure,
        };
        AdminError::new(exit, format!("{context}: {e}"))
    }
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the message carries.
        let one_line: String = self
            .message
            .chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
            .collect();
        f.write_str(&one_line)
    }
}

impl From<raidd_engine::Error> for AdminError {
    fn from(e: raidd_engine::Error) -> AdminError {
        AdminError::new(Exit::from_kind(e.kind()), e.to_string())
    }
}

/// An error in JSON output.
#[derive(Debug, Serialize)]
pub struct ErrorJson {
    /// The exit code this error maps to.
    pub exit_code: u8,
    /// Short name of the exit code (`not_found`, `corrupt`, ...).
    pub kind: &'static str,
    pub message: String,
}

impl From<&AdminError> for ErrorJson {
    fn from(e: &AdminError) -> ErrorJson {
        ErrorJson {
            exit_code: e.exit.code(),
            kind: e.exit.name(),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_kinds_map_to_documented_codes() {
        let cases = [
            (ErrorKind::InvalidInput, 2),
            (ErrorKind::Unaligned, 2),
            (ErrorKind::OutOfRange, 2),
            (ErrorKind::ReadOnly, 1),
            (ErrorKind::Io, 1),
            (ErrorKind::TimedOut, 1),
            (ErrorKind::NotFound, 3),
            (ErrorKind::Conflict, 4),
            (ErrorKind::InsufficientMembers, 5),
            (ErrorKind::Unsupported, 6),
            (ErrorKind::BadMetadata, 7),
        ];
        for (kind, code) in cases {
            assert_eq!(Exit::from_kind(kind).code(), code, "{kind:?}");
            assert!(HELP.contains(&format!("  {code}  ")), "{code} documented");
        }
        assert_eq!(Exit::BadData.code(), 8);
    }

    #[test]
    fn messages_stay_on_one_line() {
        let e = AdminError::failure("a\nb\rc");
        assert_eq!(e.to_string(), "a b c");
    }
}
