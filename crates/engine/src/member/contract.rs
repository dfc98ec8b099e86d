//! The contract between an array and its members: the [`Member`] trait, what a member is
//! (its [`MemberInfo`]), the requests it must accept, and helpers on any member.

use std::fmt;
use std::io;
use std::sync::Arc;

use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

/// Reads `len` bytes at `offset` of a member into a new buffer (whole-buffer reads:
/// metadata, copies, tools).
pub async fn read_bytes(member: &dyn Member, offset: u64, len: usize) -> io::Result<AlignedBuf> {
    // Every byte is overwritten by a successful read; a failed one drops the buffer.
    let buf = SharedBuf::new(AlignedBuf::for_overwrite(len));
    let mut iov = IoVecMut::new();
    iov.push(buf.slice_mut(0..len).expect("fresh buffer"));
    let (r, iov) = member.read(offset, iov).await;
    drop(iov);
    r?;
    Ok(buf.try_into_inner().expect("read released the buffer"))
}

/// Writes `data` at `offset` of a member.
pub async fn write_bytes(member: &dyn Member, offset: u64, data: AlignedBuf) -> io::Result<()> {
    let len = data.len();
    let buf = SharedBuf::new(data);
    let mut iov = IoVec::new();
    iov.push(buf.slice(0..len).expect("fresh buffer"));
    member.write(offset, iov).await
}

/// Whether a member read's result says its windows did not come back: it timed out, and
/// the device may still write into them, so that memory must not be read or reused.
pub fn windows_lost(r: &io::Result<()>) -> bool {
    matches!(r, Err(e) if e.kind() == io::ErrorKind::TimedOut)
}

/// Whether a read error says the medium could not give these blocks (EIO, ENODATA,
/// EILSEQ, EBADMSG: an unreadable sector, a failed checksum), which rewriting them from
/// redundancy may cure, rather than that the device is gone or does not answer (ENODEV,
/// ENXIO, a timeout), which fails the member.
pub fn medium_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::ENODATA | libc::EILSEQ | libc::EBADMSG)
    ) || known_bad(e)
}

/// What a member's superblock says that its checksum tags must agree with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagFacts {
    pub array_uuid: [u8; 16],
    pub device_uuid: [u8; 16],
    /// md's data area (sectors).
    pub data_offset: u64,
    pub data_size: u64,
    /// The array's event count now.
    pub events: u64,
}

impl TagFacts {
    /// A member's superblock, at the array's event count `events`.
    pub fn of(sb: &raidd_md::Superblock, events: u64) -> TagFacts {
        TagFacts {
            array_uuid: sb.set_uuid,
            device_uuid: sb.device_uuid,
            data_offset: sb.data_offset,
            data_size: sb.data_size,
            events,
        }
    }
}

/// What the array asks of a member's checksum tags (`ChecksummedMember`).
pub trait Checksums: Send + Sync {
    /// How the tags are computed (`crc32c`).
    fn algorithm_name(&self) -> &'static str;
    /// What the tags found and did.
    fn counts(&self) -> ChecksumCounts;
    /// Where the array marks its superblocks clean at `events`, after flushing: every tag
    /// goes to the member and the tag header says clean at `events`, durably. `Ok(false)`
    /// when a write came in meanwhile, or tags are still suspect (the header stays dirty).
    fn close(&self, events: u64) -> MemberFuture<'_, io::Result<bool>>;
    /// The array marked its superblocks dirty at `events`: the tag header says so, durably.
    fn dirty_at(&self, events: u64) -> MemberFuture<'_, io::Result<()>>;
    /// After a crash of raidd's, only these blocks (the regions the write-intent bitmap
    /// marks) stay suspect; whether that applied.
    fn narrow(&self, keep: &[std::ops::Range<u64>]) -> bool;
    /// Re-derives the tags of the next suspect blocks from the data: the suspect blocks left.
    fn rederive_step(&self) -> MemberFuture<'_, io::Result<u64>>;
    /// `inner`, joining the array with a superblock that says `facts`, with tags like these.
    fn joining(&self, inner: Arc<dyn Member>, facts: &TagFacts) -> io::Result<Arc<dyn Member>>;
}

/// What a member's checksum tags found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChecksumCounts {
    /// Blocks read that matched their tags.
    pub verified_blocks: u64,
    /// Blocks that did not (each once until it is rewritten).
    pub mismatches: u64,
    pub pages_read: u64,
    pub pages_written: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Blocks whose tags are not known to match their data yet (being re-derived).
    pub unverified_blocks: u64,
    /// Tags re-derived from data that did not match them.
    pub rederived: u64,
}

/// A block a member's checksum tags reported bad before, read again before anything
/// rewrote it (no good copy of it was found): a medium error that says nothing new about
/// the member, so it counts neither as an error nor against the member's limit.
#[derive(Debug)]
pub struct KnownBad;

impl fmt::Display for KnownBad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a block whose checksum failed before, not rewritten since")
    }
}

impl std::error::Error for KnownBad {}

/// Whether `e` is a [`KnownBad`] block's read error.
pub fn known_bad(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<KnownBad>())
}

/// Runs a member operation within `limit` (none: as long as it takes): `lost` makes its
/// result from the timeout's error when it gives up (`io::ErrorKind::TimedOut`, naming the
/// member). The operation is dropped then; what it lent the device stays with it.
pub async fn within<T>(
    limit: Option<std::time::Duration>,
    name: &str,
    op: impl std::future::Future<Output = T>,
    lost: impl FnOnce(io::Error) -> T,
) -> T {
    let Some(limit) = limit else {
        return op.await;
    };
    match raidd_rt::time::timeout(limit, op).await {
        Some(v) => v,
        None => lost(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{name}: no answer within {limit:?}"),
        )),
    }
}

/// Static facts about a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// How the user named it (a path, "mem:3", "array:name").
    pub name: String,
    pub size_bytes: u64,
    /// Smallest I/O unit (512 or 4096); every offset and length is a multiple of it.
    pub block_size: u32,
    /// Spinning media (seek-bound): exported so clients can schedule for it.
    pub rotational: bool,
    /// The largest single transfer the device takes, in bytes, where it says (a block
    /// device's `max_sectors_kb`, a simulated drive's model): a DMA-aligned buffer's block.
    pub max_transfer: Option<u64>,
}

/// A device an array stores data on.
///
/// Offsets and lengths are bytes, multiples of [`MemberInfo::block_size`], within
/// [`MemberInfo::size_bytes`]; callers (the arrays) guarantee this and implementations may
/// assert it. The windows of an I/O are released when the returned future completes; if it
/// is dropped early they are released when the device is done with them.
/// A member operation in flight: boxed (the trait is used as an object), its block from the
/// thread's pool ([`raidd_rt::PooledFuture`]), so a request's member I/O allocates nothing.
pub type MemberFuture<'a, T> = raidd_rt::PooledFuture<'a, T>;

pub trait Member: Send + Sync + fmt::Debug {
    fn info(&self) -> &MemberInfo;
    /// Fills the windows of `iov`, in order, from `offset`, and hands the windows back (possibly
    /// split further, always covering the same bytes in the same order) so that a failed read
    /// can be retried elsewhere into the same client buffer. The one exception is a read
    /// that timed out (`io::ErrorKind::TimedOut`): the device may still write into its
    /// windows, so they stay with the abandoned operation and none come back (see
    /// [`windows_lost`]).
    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)>;
    /// Writes the windows of `iov`, in order, at `offset`.
    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>>;
    /// Makes every completed write durable.
    fn flush(&self) -> MemberFuture<'_, io::Result<()>>;
    /// Tells the device the range is unused; later reads return zeros or the old data.
    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>>;
    /// What a DMA-aligned buffer in front of the device did (`DabMember`); none
    /// for other members.
    fn dab(&self) -> Option<DabCounts> {
        None
    }
    /// The member's checksum tags, where it has them (`ChecksummedMember`, itself or
    /// below a buffer); none for other members.
    fn checksums(&self) -> Option<&dyn Checksums> {
        None
    }
}

/// Checks a member request against the member's contract (caller bugs panic here, in every
/// implementation, so a broken array mapping stops loudly in tests).
pub fn assert_request(info: &MemberInfo, offset: u64, len: u64) {
    let bs = u64::from(info.block_size);
    assert!(
        offset.is_multiple_of(bs) && len.is_multiple_of(bs),
        "{}: request {offset}+{len} not aligned to {bs}",
        info.name
    );
    assert!(
        offset
            .checked_add(len)
            .is_some_and(|end| end <= info.size_bytes),
        "{}: request {offset}+{len} beyond size {}",
        info.name,
        info.size_bytes
    );
}

/// What a DMA-aligned buffer in front of a member did (`DabMember`; a snapshot of
/// its `DabCounters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DabCounts {
    pub hits: u64,
    pub head_hits: u64,
    pub tail_hits: u64,
    pub misses: u64,
    pub prefetched_bytes: u64,
    pub bypassed: u64,
    pub evicted: u64,
    /// Writes held in memory (write-back mode).
    pub absorbed: u64,
    /// Dirty blocks written back to the member.
    pub dirty_flushed: u64,
    /// Small writes are held in memory now (write-back, and the array can lose a member).
    pub holds_writes: bool,
}

impl DabCounts {
    /// What happened since `before` (a snapshot of the same counters).
    pub fn since(&self, before: &DabCounts) -> DabCounts {
        DabCounts {
            hits: self.hits - before.hits,
            head_hits: self.head_hits - before.head_hits,
            tail_hits: self.tail_hits - before.tail_hits,
            misses: self.misses - before.misses,
            prefetched_bytes: self.prefetched_bytes - before.prefetched_bytes,
            bypassed: self.bypassed - before.bypassed,
            evicted: self.evicted - before.evicted,
            absorbed: self.absorbed - before.absorbed,
            dirty_flushed: self.dirty_flushed - before.dirty_flushed,
            holds_writes: self.holds_writes,
        }
    }

    pub(crate) fn add(&mut self, o: &DabCounts) {
        self.hits += o.hits;
        self.head_hits += o.head_hits;
        self.tail_hits += o.tail_hits;
        self.misses += o.misses;
        self.prefetched_bytes += o.prefetched_bytes;
        self.bypassed += o.bypassed;
        self.evicted += o.evicted;
        self.absorbed += o.absorbed;
        self.dirty_flushed += o.dirty_flushed;
        self.holds_writes |= o.holds_writes;
    }
}
