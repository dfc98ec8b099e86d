//! Members named on the command line: opening them, refusing the same member twice, and a
//! size-limited view for `create --size`.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use raidd_engine::member::{FileMember, MemberFuture, OpenOptions};
use raidd_engine::{Member, MemberInfo};
use raidd_rt::{IoVec, IoVecMut};

use crate::exit::{AdminError, AdminResult, Exit};

/// The word that stands for an absent member in `create`.
pub const MISSING: &str = "missing";

/// How a command uses its members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Look only (examine): shared, no lock at all, so members in use can be examined.
    Inspect,
    /// Assemble read-only: a shared lock.
    ReadOnly,
    /// Assemble read-write or create: an exclusive lock.
    ReadWrite,
}

/// Opens one member file or block device.
pub fn open(path: &Path, access: Access) -> AdminResult<Arc<dyn Member>> {
    open_timed(path, access, None)
}

/// Opens one member file or block device whose I/O fails after `timeout` (see
/// [`OpenOptions::timeout`]).
pub fn open_timed(
    path: &Path,
    access: Access,
    timeout: Option<std::time::Duration>,
) -> AdminResult<Arc<dyn Member>> {
    let opts = OpenOptions {
        write: access == Access::ReadWrite,
        direct: None,
        exclusive: access != Access::Inspect,
        timeout,
    };
    let m = FileMember::open(path, opts)?;
    Ok(Arc::new(m))
}

/// Refuses the same file given twice (also through another name: a symlink, `./x` vs
/// `x`, a hard link). Paths that do not exist are compared by their absolute form.
pub fn check_distinct<'a>(paths: impl IntoIterator<Item = &'a Path>) -> AdminResult {
    let mut seen: HashMap<Identity, &Path> = HashMap::new();
    for p in paths {
        let id = identity(p);
        if let Some(first) = seen.insert(id, p) {
            let msg = if first == p {
                format!("{} is given twice", p.display())
            } else {
                format!(
                    "{} and {} are the same member given twice",
                    first.display(),
                    p.display()
                )
            };
            return Err(AdminError::new(Exit::Conflict, msg));
        }
    }
    Ok(())
}

/// `paths` with each file kept once, under the first name it was given.
pub fn distinct(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    paths
        .into_iter()
        .filter(|p| seen.insert(identity(p)))
        .collect()
}

/// What makes two names one file: its inode, or for a name that does not exist its
/// absolute form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Identity {
    Inode { dev: u64, ino: u64 },
    Path(PathBuf),
}

pub(crate) fn identity(p: &Path) -> Identity {
    match std::fs::metadata(p) {
        Ok(m) if m.file_type().is_file() || is_block(&m) => Identity::Inode {
            dev: m.dev(),
            ino: m.ino(),
        },
        _ => Identity::Path(absolute(p)),
    }
}

/// Whether `p` is something a member can be: a regular file or a block device (following
/// links).
pub fn is_member_like(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_file() || is_block(&m))
}

fn is_block(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    m.file_type().is_block_device()
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The machine's hostname (md's "homehost"), empty if unknown.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the buffer we own.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A member seen through a window of its first `size_bytes` bytes: `create --size` on a
/// larger member uses only that much of it (for every level, linear and RAID0 included).
pub struct Limited {
    inner: Arc<dyn Member>,
    info: MemberInfo,
}

impl Limited {
    /// `size_bytes` must not exceed the member's size; it is rounded down to the member's
    /// block size.
    pub fn new(inner: Arc<dyn Member>, size_bytes: u64) -> Limited {
        let mut info = inner.info().clone();
        let bs = u64::from(info.block_size.max(1));
        info.size_bytes = size_bytes.min(info.size_bytes) / bs * bs;
        Limited { inner, info }
    }
}

impl fmt::Debug for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limited")
            .field("member", &self.info.name)
            .field("size", &self.info.size_bytes)
            .finish()
    }
}

impl Member for Limited {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        self.inner.read(offset, iov)
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        self.inner.write(offset, iov)
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        self.inner.discard(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_file_twice_is_a_conflict() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.img");
        std::fs::write(&a, b"x").expect("write");
        let link = dir.path().join("link.img");
        std::os::unix::fs::symlink(&a, &link).expect("symlink");
        let b = dir.path().join("b.img");
        std::fs::write(&b, b"x").expect("write");
        assert!(check_distinct([a.as_path(), b.as_path()]).is_ok());
        let e = check_distinct([a.as_path(), a.as_path()]).expect_err("twice");
        assert_eq!(e.exit, Exit::Conflict);
        assert!(e.message.contains("given twice"), "{}", e.message);
        let e = check_distinct([a.as_path(), link.as_path()]).expect_err("symlink");
        assert!(e.message.contains("same member"), "{}", e.message);
        let missing = dir.path().join("new.img");
        assert!(check_distinct([missing.as_path(), missing.as_path()]).is_err());
    }

    #[test]
    fn hostname_is_printable() {
        let h = hostname();
        assert!(!h.contains('\0'));
    }
}
