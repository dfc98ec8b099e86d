//! One error type for the engine: a small matchable kind, a message with the context a user
//! needs (which member, which offset), and the underlying OS error when there is one.
//! Protocol front ends map the kind to NBD errno values and SCSI sense data.

use std::fmt;
use std::io;

/// What went wrong, coarsely, for callers that must react (or map to a protocol error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments or configuration from the user.
    InvalidInput,
    /// An I/O request not aligned to the array's block size.
    Unaligned,
    /// An I/O request beyond the end of the array.
    OutOfRange,
    /// A write to a read-only array.
    ReadOnly,
    /// Data could not be read or written even with the redundancy left.
    Io,
    /// A member or file does not exist / has no md superblock.
    NotFound,
    /// On-disk metadata is corrupt, inconsistent or unsupported.
    BadMetadata,
    /// Members disagree (different arrays, duplicates, stale event counts) in a way that
    /// needs the user to decide.
    Conflict,
    /// Not enough members to run the array.
    InsufficientMembers,
    /// A feature raidd does not implement.
    Unsupported,
    /// Background work stopped on request (it resumes where it stopped).
    Interrupted,
    /// A member did not answer in time and was failed. A read's windows did not come back
    /// (the member may still write into them): read again, into new ones.
    TimedOut,
}

/// An engine error. `Display` gives the whole story in one line.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<io::Error>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// An OS-level failure with context, e.g. `Error::io("reading /dev/sdb at 4096", e)`.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        let kind = match source.kind() {
            io::ErrorKind::NotFound => ErrorKind::NotFound,
            io::ErrorKind::InvalidInput => ErrorKind::InvalidInput,
            io::ErrorKind::TimedOut => ErrorKind::TimedOut,
            _ => ErrorKind::Io,
        };
        Error {
            kind,
            message: context.into(),
            source: Some(source),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The errno a block protocol should report for this error.
    pub fn errno(&self) -> i32 {
        match self.kind {
            ErrorKind::InvalidInput | ErrorKind::Unaligned => libc::EINVAL,
            ErrorKind::OutOfRange => libc::ENOSPC,
            ErrorKind::ReadOnly => libc::EPERM,
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::Unsupported => libc::EOPNOTSUPP,
            ErrorKind::Interrupted => libc::EINTR,
            ErrorKind::Io
            | ErrorKind::TimedOut
            | ErrorKind::BadMetadata
            | ErrorKind::Conflict
            | ErrorKind::InsufficientMembers => libc::EIO,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}, {self})", self.kind)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

impl From<raidd_layout::LayoutError> for Error {
    fn from(e: raidd_layout::LayoutError) -> Error {
        Error::new(ErrorKind::InvalidInput, e.to_string())
    }
}
