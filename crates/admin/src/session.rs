//! Assembling the arrays named by members on the command line (nested arrays included),
//! finding the outermost one, moving bytes in and out of it, and closing everything.

use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;

use raidd_engine::assemble::{assemble_all, examine, AssembleOptions, Assembled};
use raidd_engine::{Array, Closed, Extent, Member};
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use crate::exit::{AdminError, AdminResult, Exit};
use crate::members::{self, Access};

/// How the arrays are started.
#[derive(Clone, Copy, Debug, Default)]
pub struct Start {
    /// Start the array even if it was not shut down cleanly and is degraded (RAID4/5/6;
    /// md's `start_dirty_degraded`). Where writes were in flight, data of the missing
    /// member may then read back wrong.
    pub dirty_degraded: bool,
    /// Member I/O that does not complete in this time fails the member (see
    /// [`raidd_engine::member::OpenOptions::timeout`]); `None`: it waits.
    pub member_timeout: Option<std::time::Duration>,
    /// A DMA-aligned buffer in front of every member, one pool for them all.
    pub dab: Option<DabSetting>,
    /// The outermost array's write journal mode once started (md starts every array
    /// write-through); write-back on an array without a working journal is an error.
    pub journal_mode: raidd_engine::JournalMode,
    /// Bytes of checksum tags held in memory per array (0: the engine's default).
    pub tag_cache: u64,
    /// Checksum tags not trusted at assembly are re-derived while the arrays serve (the
    /// daemon), not before [`assemble`] returns (a command that writes offline).
    pub rederive_in_background: bool,
}

/// A DMA-aligned buffer's memory and block size, in bytes, and how writes meet it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DabSetting {
    pub budget: u64,
    /// `None`: the members' largest transfer ([`raidd_engine::member::block_for`]).
    pub block: Option<u64>,
    pub mode: raidd_engine::member::DabMode,
}

/// Largest single request to the array: large and aligned, so it reaches the members as
/// few big I/Os.
pub const IO_CHUNK: usize = 4 << 20;

/// Bytes of the next request at `pos` with `remaining` to go: up to [`IO_CHUNK`], ending on
/// a multiple of it, so requests after the first are aligned to 4 MiB (whole stripes for
/// the usual chunk sizes). Block-size alignment is kept: `IO_CHUNK` is a multiple of every
/// block size.
pub fn step(pos: u64, remaining: u64) -> usize {
    let chunk = IO_CHUNK as u64;
    remaining.min(chunk - pos % chunk) as usize
}

/// A member named on the command line that could not be used at all (not opened, or no
/// readable superblock). `detail` reports these and goes on with the rest.
#[derive(Debug)]
pub struct Unavailable {
    pub member: String,
    pub error: AdminError,
}

/// The arrays put together from the members.
#[derive(Debug)]
pub struct Session {
    /// As `assemble_all` returns them: inner arrays first.
    pub arrays: Vec<Assembled>,
    /// Index of the outermost array.
    pub root: usize,
    pub unavailable: Vec<Unavailable>,
}

impl Session {
    pub fn root(&self) -> &Arc<Array> {
        &self.arrays[self.root].array
    }

    /// Shutdown, outermost array first (it writes through the inner ones): how the array
    /// that was left least clean was left (see [`Array::close`]). Returns the first error
    /// after trying every array.
    pub async fn close(&self) -> AdminResult<Closed> {
        let mut first = None;
        let mut worst = Closed::Clean;
        for a in self.arrays.iter().rev() {
            match a.array.close().await {
                Ok(Closed::Clean) => {}
                Ok(c) => worst = c,
                Err(e) => {
                    first.get_or_insert(AdminError::from(e));
                }
            }
        }
        first.map_or(Ok(worst), Err)
    }
}

fn same_array(m: &Arc<dyn Member>, a: &Arc<Array>) -> bool {
    ptr::addr_eq(Arc::as_ptr(m), Arc::as_ptr(a))
}

/// Which assembled arrays sit in the slots of `arrays[index]`: (role, index).
pub fn children(arrays: &[Assembled], index: usize) -> Vec<(Option<usize>, usize)> {
    let outer = &arrays[index].array;
    let mut out = Vec::new();
    for role in 0..outer.geometry().members() {
        if let Some(m) = outer.slots().member(role) {
            if let Some(i) = arrays.iter().position(|a| same_array(&m, &a.array)) {
                out.push((Some(role), i));
            }
        }
    }
    out
}

/// Indexes of the arrays no other array uses as a member (in a slot, as a spare, or left
/// out of it as stale and the like: every member assembly saw is in its report).
fn roots(arrays: &[Assembled]) -> Vec<usize> {
    let n = arrays.len();
    (0..n)
        .filter(|&i| {
            let name = &arrays[i].array.info().name;
            !(0..n).any(|j| {
                j != i
                    && (children(arrays, j).iter().any(|&(_, c)| c == i)
                        || arrays[j].report.iter().any(|r| &r.member == name))
            })
        })
        .collect()
}

/// Opens the members and assembles every array they make up. With `lenient`, members that
/// cannot be opened or carry no valid superblock are set aside (reported in
/// `unavailable`) instead of failing the command; the rest must still make one array.
/// `start`: see [`AssembleOptions::start_dirty_degraded`].
pub async fn assemble(
    paths: &[PathBuf],
    access: Access,
    lenient: bool,
    start: Start,
) -> AdminResult<Session> {
    members::check_distinct(paths.iter().map(PathBuf::as_path))?;
    let (opened, unavailable) = open_members(paths, access, lenient, start).await?;
    if opened.is_empty() {
        return Err(match unavailable.into_iter().next() {
            Some(u) => u.error,
            None => AdminError::usage("no members given"),
        });
    }
    let (opened, dab) = behind_dab(opened, start.dab);
    let opts = AssembleOptions {
        read_only: access != Access::ReadWrite,
        start_dirty_degraded: start.dirty_degraded,
        tag_cache: start.tag_cache,
    };
    // Too few members: say which were set aside and why (busy, unreadable), the likely
    // cause.
    let arrays = assemble_all(opened, opts).await.map_err(|e| {
        let mut e = AdminError::from(e);
        if !unavailable.is_empty() {
            let why: Vec<String> = unavailable
                .iter()
                .map(|u| format!("{}: {}", u.member, u.error.message))
                .collect();
            e.message = format!("{}; members not used: {}", e.message, why.join("; "));
        }
        e
    })?;
    let root = outermost(&arrays)?;
    if let Some(pool) = &dab {
        refuse_unsafe_write_back(pool, &arrays)?;
    }
    for a in &arrays {
        if let Some(pool) = &dab {
            a.array.set_dab(pool.clone());
        }
        tracing::info!(
            "assembled {} ({}, {} of {} slots in use, {} bytes){}",
            a.array.name(),
            a.array.geometry().level(),
            (0..a.array.geometry().members())
                .filter(|&r| a.array.slots().state(r) == raidd_engine::SlotState::InSync)
                .count(),
            a.array.geometry().members(),
            a.array.size_bytes(),
            if opts.read_only { ", read-only" } else { "" }
        );
    }
    if !opts.read_only && !start.rederive_in_background {
        for a in &arrays {
            raidd_engine::array::rederive::rederive_checksums(
                &a.array,
                raidd_engine::SyncLimits::UNLIMITED,
                &|| true,
            )
            .await?;
        }
    }
    if start.journal_mode != raidd_engine::JournalMode::WriteThrough {
        arrays[root]
            .array
            .consistency()
            .set_journal_mode(start.journal_mode)
            .await?;
    }
    Ok(Session {
        arrays,
        root,
        unavailable,
    })
}

/// The one outermost array the members make up (the others are inside it).
fn outermost(arrays: &[Assembled]) -> AdminResult<usize> {
    let roots = roots(arrays);
    match roots.as_slice() {
        [one] => Ok(*one),
        [] => Err(AdminError::failure(
            "the members form no outermost array (a cycle?)",
        )),
        many => {
            let names: Vec<String> = many
                .iter()
                .map(|&i| {
                    let a = &arrays[i];
                    format!(
                        "{} ({})",
                        a.superblock.full_name(),
                        raidd_engine::array::uuid_string(&a.superblock.set_uuid)
                    )
                })
                .collect();
            Err(AdminError::new(
                Exit::Conflict,
                format!(
                    "the members belong to {} different arrays: {}; name the members of one",
                    many.len(),
                    names.join(", ")
                ),
            ))
        }
    }
}

/// Opens the members; with `lenient`, those that cannot be opened or carry no valid
/// superblock are set aside with why.
async fn open_members(
    paths: &[PathBuf],
    access: Access,
    lenient: bool,
    start: Start,
) -> AdminResult<(Vec<Arc<dyn Member>>, Vec<Unavailable>)> {
    let mut opened: Vec<Arc<dyn Member>> = Vec::new();
    let mut unavailable = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        let m = match members::open_timed(p, access, start.member_timeout) {
            Ok(m) => m,
            Err(error) if lenient => {
                unavailable.push(Unavailable {
                    member: name,
                    error,
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        if lenient {
            if let Err(e) = examine(&*m).await {
                let error = AdminError::from(e);
                unavailable.push(Unavailable {
                    member: name,
                    error,
                });
                continue;
            }
        }
        opened.push(m);
    }
    Ok((opened, unavailable))
}

/// A write-back DAB holds acknowledged writes in memory: over an array that has no
/// redundancy (linear, RAID0) a member that fails takes them with it, so that needs
/// `write-back-unsafe`. An array that is only degraded starts with the buffer holding no
/// writes until it is redundant again (the engine's `DabPool::set_redundant`).
fn refuse_unsafe_write_back(
    pool: &raidd_engine::member::DabPool,
    arrays: &[Assembled],
) -> AdminResult {
    if pool.mode() != raidd_engine::member::DabMode::WriteBack {
        return Ok(());
    }
    for a in arrays {
        let g = a.array.geometry();
        let behind =
            (0..g.members()).any(|r| a.array.slots().member(r).is_some_and(|m| m.dab().is_some()));
        if behind && g.redundancy() == 0 {
            return Err(AdminError::usage(format!(
                "array {:?}: dab_mode = \"write-back\" acknowledges writes it holds in memory, \
                 and a {} has no redundancy to rebuild them when a member fails: use \
                 dab_mode = \"write-through\", or \"write-back-unsafe\" to accept losing them",
                a.array.name(),
                g.level()
            )));
        }
    }
    Ok(())
}

/// The members behind one DMA-aligned buffer they share, when `dab` asks for one: below the
/// RAID mapping, so each member's reads and writes pass its own blocks.
fn behind_dab(
    opened: Vec<Arc<dyn Member>>,
    dab: Option<DabSetting>,
) -> (
    Vec<Arc<dyn Member>>,
    Option<Arc<raidd_engine::member::DabPool>>,
) {
    if let Some(d) = dab {
        let block = d.block.unwrap_or_else(|| {
            let b = raidd_engine::member::block_for(
                opened.iter().map(|m| m.info().max_transfer),
                raidd_engine::member::DAB_DEFAULT_BLOCK,
            );
            // A budget under the members' transfer: the largest block it holds.
            b.min(1 << (63 - d.budget.leading_zeros()))
        });
        let pool = raidd_engine::member::DabPool::new(d.budget, block, d.mode);
        let wrapped = opened
            .into_iter()
            .map(|m| Arc::new(pool.wrap(m)) as Arc<dyn Member>)
            .collect();
        return (wrapped, Some(pool));
    }
    (opened, None)
}

/// Checks a byte range against an extent (an array, or a volume of one): offset and length
/// multiples of the block size, within it. `length` `None` = to the end. Returns the length.
pub fn check_range(target: &Extent, offset: u64, length: Option<u64>) -> AdminResult<u64> {
    let bs = u64::from(target.block_size());
    let size = target.size_bytes();
    let name = if target.is_whole() {
        "the array".to_string()
    } else {
        format!("volume {}", target.name())
    };
    if !offset.is_multiple_of(bs) {
        return Err(AdminError::usage(format!(
            "offset {offset} is not a multiple of {name}'s block size ({bs} bytes)"
        )));
    }
    if let Some(len) = length {
        if !len.is_multiple_of(bs) {
            return Err(AdminError::usage(format!(
                "length {len} is not a multiple of {name}'s block size ({bs} bytes)"
            )));
        }
    }
    if offset > size {
        return Err(AdminError::usage(format!(
            "offset {offset} is beyond the end of {name} ({size} bytes)"
        )));
    }
    let len = length.unwrap_or(size - offset);
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(AdminError::usage(format!(
            "{len} bytes at offset {offset} run past the end of {name} ({size} bytes)"
        )));
    }
    Ok(len)
}

/// Reads `buf.len()` bytes at `offset` of `target` into `buf` and hands it back.
pub async fn read_at(target: &Extent, offset: u64, buf: AlignedBuf) -> AdminResult<AlignedBuf> {
    let len = buf.len();
    let shared = SharedBuf::new(buf);
    let mut iov = IoVecMut::new();
    iov.push(
        shared
            .slice_mut(0..len)
            .map_err(|e| AdminError::failure(format!("internal buffer error: {e}")))?,
    );
    let (r, iov) = target.read(offset, iov).await;
    drop(iov);
    r?;
    match shared.try_into_inner() {
        Ok(buf) => Ok(buf),
        // Someone still holds a handle: copy the bytes out (never hand back other data).
        Err(shared) => shared
            .slice(0..len)
            .map(|w| AlignedBuf::from_slice(w.as_slice()))
            .map_err(|e| AdminError::failure(format!("internal buffer error: {e}"))),
    }
}

/// Writes `buf` at `offset` of `target`; hands the buffer back for reuse when the engine is
/// done with it (a fresh one otherwise).
pub async fn write_at(target: &Extent, offset: u64, buf: AlignedBuf) -> AdminResult<AlignedBuf> {
    let len = buf.len();
    let shared = SharedBuf::new(buf);
    let mut iov = IoVec::new();
    iov.push(
        shared
            .slice(0..len)
            .map_err(|e| AdminError::failure(format!("internal buffer error: {e}")))?,
    );
    target.write(offset, iov).await?;
    Ok(shared
        .try_into_inner()
        .unwrap_or_else(|_| AlignedBuf::zeroed(len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_align_to_the_io_chunk() {
        let c = IO_CHUNK as u64;
        assert_eq!(step(0, 10 * c), IO_CHUNK);
        assert_eq!(step(4096, 10 * c), IO_CHUNK - 4096);
        assert_eq!(step(c + 512, 100), 100);
        assert_eq!(step(c - 512, c), 512);
        assert_eq!(step(0, 0), 0);
    }
}
