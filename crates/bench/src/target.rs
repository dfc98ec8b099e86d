//! What a benchmark drives, shared by `bench io` and `bench sweep`: members in memory, in
//! files or simulated, used raw or as an array made over them; and the process facts a
//! benchmark reports (CPU time, memory available).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{FileMember, MemMember, OpenOptions};
use raidd_engine::{Alone, Array, Gather, Member};
use raidd_lab::SimWorld;
use raidd_layout::Level;
use raidd_rt::{IoVec, IoVecMut};

use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::size;

/// Where the members come from.
#[derive(Clone, Debug)]
pub enum MemberKind {
    /// Filled with data up front, so every page is mapped before the clock starts.
    Memory { size: u64 },
    /// `raidd-bench-N.img` in a directory, filled once and reused by later runs.
    File { dir: PathBuf, size: u64 },
    /// Drives of a simulated machine, in simulated time.
    Sim(Arc<SimWorld>),
}

/// Opens `n` members of `kind`; and whether file members use direct I/O.
pub fn open_members(kind: &MemberKind, n: usize) -> AdminResult<(Vec<Arc<dyn Member>>, bool)> {
    match kind {
        MemberKind::Memory { size } => {
            let m = (0..n)
                .map(|i| {
                    let m = MemMember::new(format!("mem{i}"), *size);
                    let mut block = vec![0u8; 1 << 20];
                    let mut x = 0x5eed_0000 + i as u64;
                    let mut at = 0;
                    while at < *size {
                        fill_block(&mut block, &mut x);
                        let n = (*size - at).min(block.len() as u64) as usize;
                        m.write_sync(at, &block[..n]);
                        at += n as u64;
                    }
                    Arc::new(m) as Arc<dyn Member>
                })
                .collect();
            Ok((m, false))
        }
        MemberKind::File { dir, size } => {
            let mut members = Vec::new();
            let mut direct = true;
            for path in member_files(dir, n, *size)? {
                let opts = OpenOptions {
                    write: true,
                    direct: None,
                    exclusive: true,
                    timeout: None,
                };
                let m = FileMember::open(&path, opts)?;
                direct &= m.is_direct();
                members.push(Arc::new(m) as Arc<dyn Member>);
            }
            Ok((members, direct))
        }
        MemberKind::Sim(world) => {
            let all = world.members();
            if all.len() != n {
                return Err(AdminError::usage(format!(
                    "the simulated machine has {} drives, not {n}",
                    all.len()
                )));
            }
            Ok((
                all.into_iter()
                    .map(|m| Arc::new(m) as Arc<dyn Member>)
                    .collect(),
                true,
            ))
        }
    }
}

/// The members with `latency` added to every I/O (the fault member's delay; none for
/// zero): a latency-bound member, a disk across a network, on real files.
pub fn with_latency(
    members: Vec<Arc<dyn Member>>,
    latency: std::time::Duration,
) -> Vec<Arc<dyn Member>> {
    if latency.is_zero() {
        return members;
    }
    let us = latency.as_micros() as u64;
    members
        .into_iter()
        .map(|m| {
            let plan = raidd_lab::FaultPlan {
                delay_us: Some((us, us)),
                ..Default::default()
            };
            Arc::new(raidd_lab::FaultMember::new(m, plan)) as Arc<dyn Member>
        })
        .collect()
}

/// How an array made for a benchmark is set up.
#[derive(Clone, Copy, Debug)]
pub struct ArraySetup {
    pub level: Level,
    pub chunk: u64,
    pub stripe_cache: u64,
    pub gather: Gather,
    pub alone: Alone,
    /// RAID4/5/6 reads straight into the client's buffers (see `Array::set_read_bypass`).
    pub read_bypass: bool,
    /// What keeps the array consistent across an unclean stop (md's consistency policy).
    pub policy: Policy,
    /// CRC32C tags of every 4 KiB block (`raidd create --checksums`).
    pub checksums: bool,
}

/// md's consistency policies a benchmark array may have.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// Nothing on the write path: the whole array is resynced after an unclean stop.
    #[default]
    Resync,
    /// An internal write-intent bitmap (64 MiB chunks, mdadm's default).
    Bitmap,
    /// RAID5's partial parity log.
    Ppl,
    /// md's write journal (write-through) on a memory member of its own: a fast journal
    /// device, as it is meant to be deployed.
    Journal,
    /// The same journal in write-back mode: writes acknowledged once logged.
    #[value(name = "journal-wb")]
    JournalWb,
}

/// The journal member a [`Policy::Journal`] array gets: 256 MiB of memory.
const JOURNAL_BYTES: u64 = 256 << 20;

/// Makes an array over `members` (clean: no initial sync), on this thread; with simulated
/// members, in simulated time.
pub fn make_array(
    members: Vec<Arc<dyn Member>>,
    setup: ArraySetup,
    sim: Option<&Arc<SimWorld>>,
) -> AdminResult<Arc<Array>> {
    let spec = CreateSpec {
        name: "bench".into(),
        homehost: raidd_admin::members::hostname(),
        level: setup.level,
        layout: None,
        chunk_sectors: Some((setup.chunk / size::SECTOR) as u32),
        members: members.into_iter().map(Some).collect(),
        size_sectors: None,
        assume_clean: true,
        force: true,
        bitmap_chunk: (setup.policy == Policy::Bitmap).then_some(64 << 20),
        ppl: setup.policy == Policy::Ppl,
        journal: matches!(setup.policy, Policy::Journal | Policy::JournalWb).then(|| {
            Arc::new(raidd_engine::member::MemMember::new(
                "bench-journal",
                JOURNAL_BYTES,
            )) as Arc<dyn Member>
        }),
        checksums: setup
            .checksums
            .then_some(raidd_engine::ChecksumAlgorithm::Crc32c),
    };
    let made = match sim {
        Some(w) => {
            let w = w.clone();
            raidd_rt::block_on(async move { w.run(create(spec)).await })
        }
        None => raidd_rt::block_on(create(spec)),
    };
    let array = made?.array;
    if setup.policy == Policy::JournalWb {
        let a = array.clone();
        let on = async move {
            a.consistency()
                .set_journal_mode(raidd_engine::JournalMode::WriteBack)
                .await
        };
        match sim {
            Some(w) => {
                let w = w.clone();
                raidd_rt::block_on(async move { w.run(on).await })?
            }
            None => raidd_rt::block_on(on)?,
        }
    }
    array.set_stripe_cache(setup.stripe_cache as usize, setup.gather);
    array.set_write_alone(setup.alone);
    array.set_read_bypass(setup.read_bypass);
    Ok(array)
}

/// Closes an array made by [`make_array`].
pub fn close_array(array: &Arc<Array>, sim: Option<&Arc<SimWorld>>) -> AdminResult {
    let a = array.clone();
    let close = async move { a.close().await.map(|_| ()) };
    match sim {
        Some(w) => {
            let w = w.clone();
            raidd_rt::block_on(async move { w.run(close).await })?
        }
        None => raidd_rt::block_on(close)?,
    }
    Ok(())
}

/// The raw target's addressing: block `offset / bs` lives on member `block % members`, at
/// that member's block `block / members`.
pub fn raw_place(offset: u64, bs: u64, members: usize) -> (usize, u64) {
    let block = offset / bs;
    let n = members as u64;
    ((block % n) as usize, block / n * bs)
}

/// What the load runs against.
pub enum Device {
    Raw {
        members: Vec<Arc<dyn Member>>,
        bs: u64,
    },
    Array(Arc<Array>),
}

impl Device {
    pub fn size(&self) -> u64 {
        match self {
            Device::Raw { members, bs } => {
                let smallest = members
                    .iter()
                    .map(|m| m.info().size_bytes)
                    .min()
                    .unwrap_or(0);
                smallest / bs * bs * members.len() as u64
            }
            Device::Array(a) => a.size_bytes(),
        }
    }

    pub async fn read(&self, offset: u64, iov: IoVecMut) -> Result<(), String> {
        match self {
            Device::Raw { members, bs } => {
                let (m, at) = raw_place(offset, *bs, members.len());
                let (r, _iov) = members[m].read(at, iov).await;
                r.map_err(|e| format!("{}: read at {at}: {e}", members[m].info().name))
            }
            Device::Array(a) => {
                let (r, _iov) = a.read(offset, iov).await;
                r.map_err(|e| e.to_string())
            }
        }
    }

    pub async fn write(&self, offset: u64, iov: IoVec) -> Result<(), String> {
        match self {
            Device::Raw { members, bs } => {
                let (m, at) = raw_place(offset, *bs, members.len());
                members[m]
                    .write(at, iov)
                    .await
                    .map_err(|e| format!("{}: write at {at}: {e}", members[m].info().name))
            }
            Device::Array(a) => a.write(offset, iov).await.map_err(|e| e.to_string()),
        }
    }
}

/// Member files in `dir`, created and filled with data when missing or of another size
/// (written under a temporary name, so a file of the right name is always complete).
pub fn member_files(dir: &Path, n: usize, size: u64) -> AdminResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| AdminError::io(format_args!("cannot create {}", dir.display()), &e))?;
    let mut paths = Vec::new();
    for i in 0..n {
        let path = dir.join(format!("raidd-bench-{i}.img"));
        let ok = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == size);
        if !ok {
            eprintln!("bench: filling {} ({})", path.display(), size::short(size));
            fill_file(&path, size, i as u64)?;
        }
        paths.push(path);
    }
    Ok(paths)
}

fn fill_file(path: &Path, size: u64, seed: u64) -> AdminResult {
    use std::io::Write;
    let tmp = path.with_extension("filling");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        let mut block = vec![0u8; 1 << 20];
        let mut x = 0x5eed_0000 + seed;
        let mut left = size;
        while left > 0 {
            fill_block(&mut block, &mut x);
            let n = left.min(block.len() as u64) as usize;
            f.write_all(&block[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        // A half-written file (a full disk, most likely) is not left behind.
        let _ = std::fs::remove_file(&tmp);
        AdminError::io(format_args!("cannot fill {}", tmp.display()), &e)
    })
}

/// Pseudo-random member contents (an LCG: cheap, never all zero).
pub fn fill_block(block: &mut [u8], x: &mut u64) {
    for w in block.chunks_exact_mut(8) {
        *x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        w.copy_from_slice(&x.to_le_bytes());
    }
}

/// Bytes of memory available for new allocations (`MemAvailable` in `/proc/meminfo`).
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&text)
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
pub fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// CPU seconds (user + system) this process has used, from `/proc/self/stat`.
pub fn cpu_seconds() -> Option<f64> {
    process_cpu_seconds("self")
}

/// CPU seconds (user + system) process `pid` (or "self") has used, from its `stat`.
pub fn process_cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // USER_HZ, the unit of these fields, is 100 on Linux whatever the kernel tick.
    cpu_ticks(&stat).map(|t| t as f64 / 100.0)
}

/// utime + stime from a `/proc/PID/stat` line (fields 14 and 15, counted after the
/// command name, which may hold spaces and parentheses).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_placement_goes_round_the_members() {
        let bs = 4096;
        let placed: Vec<(usize, u64)> = (0..8).map(|b| raw_place(b * bs, bs, 3)).collect();
        assert_eq!(
            placed,
            [
                (0, 0),
                (1, 0),
                (2, 0),
                (0, 4096),
                (1, 4096),
                (2, 4096),
                (0, 8192),
                (1, 8192)
            ]
        );
    }

    #[test]
    fn cpu_ticks_parse_past_odd_command_names() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0 1 0";
        assert_eq!(cpu_ticks(line), Some(280));
        assert_eq!(cpu_ticks("garbage"), None);
        assert_eq!(cpu_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn meminfo_gives_available_bytes() {
        let text = "MemTotal:       24558044 kB\nMemFree:  100 kB\nMemAvailable:   20000 kB\n";
        assert_eq!(meminfo_available(text), Some(20000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: lots\n"), None);
    }
}
