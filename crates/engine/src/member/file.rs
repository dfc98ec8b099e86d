//! Regular files (disk images) and block devices, through the thread's io_uring with
//! O_DIRECT, so data moves between the client's buffer and the device without the page cache.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use raidd_rt::{fs::File, Dispatch, IoVec, IoVecMut};

use super::contract::{assert_request, within, Member, MemberFuture, MemberInfo};
use super::syncs::Syncs;
use crate::error::{Error, Result};

/// How to open a member file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    pub write: bool,
    /// Bypass the page cache; `None` = use it if the filesystem allows, else warn once and
    /// fall back to buffered I/O (with an fdatasync on flush, durability is the same).
    pub direct: Option<bool>,
    /// Take an exclusive lock (O_EXCL on block devices, flock on files) so two processes
    /// cannot run the same member.
    pub exclusive: bool,
    /// An I/O that does not complete in this time fails (`io::ErrorKind::TimedOut`), as a
    /// hung disk's command is failed by the SCSI layer's timeout; the array then fails the
    /// member. `None`: I/O waits as long as the device takes.
    pub timeout: Option<Duration>,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            write: true,
            direct: None,
            exclusive: true,
            timeout: None,
        }
    }
}

pub struct FileMember {
    info: MemberInfo,
    path: PathBuf,
    file: File,
    direct: bool,
    is_block_device: bool,
    timeout: Option<Duration>,
    /// Flushes asked for while one runs share the next (see `syncs`).
    syncs: Syncs,
}

impl fmt::Debug for FileMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileMember")
            .field("path", &self.path)
            .field("size", &self.info.size_bytes)
            .field("direct", &self.direct)
            .finish()
    }
}

// ioctl numbers from <linux/fs.h>.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;

fn open_raw(path: &Path, opts: OpenOptions, direct: bool, bdev: bool) -> io::Result<fs::File> {
    let mut o = fs::OpenOptions::new();
    o.read(true).write(opts.write);
    let mut flags = libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    if bdev && opts.exclusive {
        flags |= libc::O_EXCL;
    }
    o.custom_flags(flags);
    o.open(path)
}

fn lock_file(f: &fs::File, path: &Path, opts: OpenOptions) -> Result<()> {
    if !opts.exclusive {
        return Ok(());
    }
    let op = if opts.write {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // A process killed with I/O in flight keeps its files (and their locks) for a moment
    // after it is reaped, while the kernel finishes that I/O: a restart right after a crash
    // waits that out (up to LOCK_WAIT) instead of setting its members aside.
    let started = std::time::Instant::now();
    loop {
        // SAFETY: plain syscall on an open descriptor.
        let r = unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock && started.elapsed() < LOCK_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        return Err(Error::new(
            crate::ErrorKind::Conflict,
            format!("{} is in use by another process ({e})", path.display()),
        ));
    }
}

/// How long opening a member waits for another process's lock on it to go.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn block_device_geometry(f: &fs::File) -> io::Result<(u64, u32)> {
    let mut size = 0u64;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut ssz: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKSSZGET, &mut ssz) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((size, u32::try_from(ssz).unwrap_or(512).max(512)))
}

/// One of a block device's queue attributes (`/sys/dev/block/MAJ:MIN/queue/NAME`).
fn queue_attr(meta: &fs::Metadata, name: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/queue/{name}"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn rotational(meta: &fs::Metadata) -> bool {
    queue_attr(meta, "rotational").is_some_and(|s| s == "1")
}

/// The largest request the kernel sends the device (`max_sectors_kb`), in bytes.
fn max_transfer(meta: &fs::Metadata) -> Option<u64> {
    let bytes = queue_attr(meta, "max_sectors_kb")?
        .parse::<u64>()
        .ok()
        .filter(|&kb| kb > 0 && kb < 1 << 40)
        .map(|kb| kb * 1024);
    debug_assert!(bytes.is_none_or(|b| b >= 1024), "at least a KiB when known");
    bytes
}

/// Checks that O_DIRECT I/O really works (some filesystems accept the flag at open and
/// refuse the I/O), with one aligned read at offset 0.
fn direct_io_works(f: &fs::File, len: u64) -> bool {
    if len < 4096 {
        return true;
    }
    let mut buf = raidd_rt::AlignedBuf::zeroed(4096);
    // SAFETY: reads at most 4096 bytes into a 4096-byte aligned buffer we own.
    let r = unsafe { libc::pread(f.as_raw_fd(), buf.as_mut_ptr().cast(), 4096, 0) };
    r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
}

/// How I/O on a file of the filesystem with magic number `fs_type` reaches the kernel:
/// tmpfs I/O is a memory copy that never waits (inline system calls); FUSE and network
/// filesystems block the submitting thread even when io_uring asks them not to (straight to
/// a kernel worker, so a server that hangs holds up only that I/O, which the member's
/// timeout then gives up on); everything else through the ring as usual.
fn dispatch_for(fs_type: i64) -> Dispatch {
    const TMPFS: i64 = 0x0102_1994;
    const FUSE: i64 = 0x6573_5546;
    const NFS: i64 = 0x6969;
    const CIFS: i64 = 0xff53_4d42;
    const SMB2: i64 = 0xfe53_4d42;
    const CEPH: i64 = 0x00c3_6400;
    const V9FS: i64 = 0x0102_1997;
    match fs_type {
        TMPFS => Dispatch::Inline,
        FUSE | NFS | CIFS | SMB2 | CEPH | V9FS => Dispatch::Worker,
        _ => Dispatch::Ring,
    }
}

/// The filesystem magic number of the file's filesystem (`None` if it cannot be read).
fn fs_type(f: &fs::File) -> Option<i64> {
    // SAFETY: statfs is plain data; fstatfs fills it for a descriptor we own.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) };
    (r == 0).then_some(st.f_type as i64)
}

impl FileMember {
    /// Opens an image file or block device.
    pub fn open(path: impl AsRef<Path>, opts: OpenOptions) -> Result<FileMember> {
        let path = path.as_ref();
        let ctx = || format!("opening {}", path.display());
        let meta = fs::metadata(path).map_err(|e| Error::io(ctx(), e))?;
        let bdev = meta.file_type().is_block_device();
        if !bdev && !meta.is_file() {
            return Err(Error::new(
                crate::ErrorKind::InvalidInput,
                format!(
                    "{} is neither a regular file nor a block device",
                    path.display()
                ),
            ));
        }
        let want_direct = opts.direct.unwrap_or(true);
        let (f, direct) = match open_raw(path, opts, want_direct, bdev) {
            Ok(f) if !want_direct || direct_io_works(&f, meta.len()) => (f, want_direct),
            Ok(_) if opts.direct == Some(true) => {
                return Err(Error::new(
                    crate::ErrorKind::Unsupported,
                    format!("{}: the filesystem refuses O_DIRECT I/O", path.display()),
                ))
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && opts.direct.is_none() => (
                open_raw(path, opts, false, bdev).map_err(|e| Error::io(ctx(), e))?,
                false,
            ),
            Ok(_) => (
                open_raw(path, opts, false, bdev).map_err(|e| Error::io(ctx(), e))?,
                false,
            ),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(Error::new(
                    crate::ErrorKind::Conflict,
                    format!(
                        "{} is in use (opened exclusively elsewhere: md, a mount, raidd)",
                        path.display()
                    ),
                ))
            }
            Err(e) => return Err(Error::io(ctx(), e)),
        };
        if want_direct && !direct {
            tracing::warn!(
                "{}: the filesystem refuses O_DIRECT; using buffered I/O (flushes still make \
                 writes durable, but reads and writes go through the page cache)",
                path.display()
            );
        }
        if !bdev {
            lock_file(&f, path, opts)?;
        }
        let (size_bytes, block_size) = if bdev {
            block_device_geometry(&f).map_err(|e| Error::io(ctx(), e))?
        } else {
            (meta.len(), 512)
        };
        let info = MemberInfo {
            name: path.display().to_string(),
            size_bytes: size_bytes / u64::from(block_size) * u64::from(block_size),
            block_size,
            rotational: bdev && rotational(&meta),
            max_transfer: if bdev { max_transfer(&meta) } else { None },
        };
        debug_assert!(
            info.block_size >= 512 && info.size_bytes.is_multiple_of(u64::from(info.block_size)),
            "a member is whole blocks of at least a sector"
        );
        let dispatch = match bdev {
            true => Dispatch::Ring,
            false => fs_type(&f).map_or(Dispatch::Ring, dispatch_for),
        };
        tracing::debug!("{}: I/O goes {dispatch:?}", path.display());
        let mut file = File::from(f);
        file.set_dispatch(dispatch);
        Ok(FileMember {
            info,
            path: path.to_owned(),
            file,
            direct,
            is_block_device: bdev,
            timeout: opts.timeout,
            syncs: Syncs::default(),
        })
    }

    /// Creates (or extends) a sparse image file of `size_bytes`.
    pub fn create_image(path: impl AsRef<Path>, size_bytes: u64) -> Result<()> {
        let path = path.as_ref();
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        f.set_len(size_bytes)
            .map_err(|e| Error::io(format!("sizing {}", path.display()), e))?;
        debug_assert_eq!(f.metadata().map(|m| m.len()).ok(), Some(size_bytes));
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How its I/O reaches the kernel: inline system calls (memory-backed files), through
    /// io_uring, or through io_uring straight to kernel workers (FUSE, network filesystems).
    pub fn dispatch(&self) -> Dispatch {
        self.file.dispatch()
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }
}

impl Member for FileMember {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        let total: u64 = iov.iter().map(|w| w.len() as u64).sum();
        assert_request(&self.info, offset, total);
        if self.timeout.is_none() {
            return MemberFuture::new(self.file.readv_exact_at(iov, offset));
        }
        // Timed out, the windows stay with the abandoned read (see `Member::read`).
        let read = self.file.readv_exact_at(iov, offset);
        MemberFuture::new(within(self.timeout, &self.info.name, read, |e| {
            (Err(e), IoVecMut::new())
        }))
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        let total: u64 = iov.iter().map(|w| w.len() as u64).sum();
        assert_request(&self.info, offset, total);
        MemberFuture::new(async move {
            let write = async {
                let (r, iov) = self.file.writev_all_at(iov, offset).await;
                raidd_rt::buf::give_iov(iov);
                r
            };
            within(self.timeout, &self.info.name, write, Err).await
        })
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        let sync = self.syncs.run(|| self.file.sync(true));
        MemberFuture::new(within(self.timeout, &self.info.name, sync, Err))
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        assert_request(&self.info, offset, len);
        MemberFuture::new(async move {
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            let punch = self.file.fallocate(mode, offset, len);
            match within(self.timeout, &self.info.name, punch, Err).await {
                // Discard is advisory: a device that cannot do it keeps the old data.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
                r => r,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filesystems_that_block_the_submitter_go_to_kernel_workers() {
        assert_eq!(dispatch_for(0x0102_1994), Dispatch::Inline, "tmpfs");
        for fuse_or_network in [0x6573_5546, 0x6969, 0xff53_4d42, 0xfe53_4d42] {
            assert_eq!(dispatch_for(fuse_or_network), Dispatch::Worker);
        }
        for local in [0xef53, 0x5846_5342, 0x9123_683e] {
            assert_eq!(dispatch_for(local), Dispatch::Ring, "ext4, xfs, btrfs");
        }
    }
}
