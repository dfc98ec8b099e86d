//! `raidd bench io`: an in-process load generator. It drives an array, or the same members
//! directly (`--target raw`), with the same requests from the same code, so the cost of the
//! RAID layer shows as a plain ratio, free of any client or network. Each thread runs its
//! own executor (and io_uring) with `--qd` requests in flight, as the server's workers do.
//!
//! The raw target spreads requests over the members as a RAID0 whose chunk is one request
//! would: consecutive blocks go round the members, so a sequential load streams every
//! member at once and a random one spreads evenly. That is the members' aggregate, measured
//! by the same tool.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use raidd_engine::{Alone, Gather};
use raidd_layout::Level;
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};
use serde::Serialize;

use super::target::{
    close_array, cpu_seconds, make_array, mem_available, open_members, with_latency, ArraySetup,
    Device, MemberKind,
};
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::md_names::parse_level;
use raidd_admin::output;
use raidd_admin::size;

#[derive(Args, Debug)]
pub struct IoArgs {
    /// What to drive: a RAID level (raid0, raid5, ...) over the members, or `raw` for the
    /// members themselves.
    #[arg(long, default_value = "raid0", value_parser = parse_target)]
    pub target: Target,
    /// Number of members.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub members: u16,
    /// Members are files in DIR (raidd-bench-N.img: filled with data once, kept and reused
    /// by later runs of the same size; O_DIRECT where the filesystem allows) instead of
    /// memory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Size of each member.
    #[arg(long, default_value = "256M", value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub member_size: u64,
    /// Chunk size of striped levels.
    #[arg(long, default_value = "64K", value_parser = size::parse_chunk, value_name = "SIZE")]
    pub chunk: u64,
    /// read, write (sequential), randread or randwrite.
    #[arg(long, default_value = "randread", value_parser = parse_rw)]
    pub rw: Rw,
    /// Bytes per request.
    #[arg(long, default_value = "4K", value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub bs: u64,
    /// Requests in flight per thread.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub qd: u32,
    /// Threads, each with its own executor and ring.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: u16,
    /// Seconds measured (after a ramp of a fifth of that, at most 0.5 s, not counted).
    #[arg(long, default_value = "3", value_parser = size::parse_seconds, value_name = "S")]
    pub seconds: f64,
    /// Time added to every member I/O (e.g. 1ms, 250us): a latency-bound member.
    #[arg(long, default_value = "0", value_parser = super::sweep::parse_latency, value_name = "TIME")]
    pub member_latency: std::time::Duration,
    #[command(flatten)]
    pub buffer: super::sweep::DabArgs,
    /// RAID4/5/6 stripe cache size (0: keep no rows).
    #[arg(long, default_value = "16M", value_parser = size::parse_size, value_name = "SIZE")]
    pub stripe_cache: u64,
    /// RAID4/5/6 gathering: none, plug, limit or limit:N.
    #[arg(long, default_value = "plug", value_parser = parse_gather)]
    pub gather: Gather,
    /// RAID4/5/6 small writes that find their stripe idle skip the cache: auto (while
    /// gathering does not pay, under plug), always or never.
    #[arg(long, default_value = "auto", value_parser = parse_alone)]
    pub alone: Alone,
    /// What keeps the array consistent across an unclean stop: resync (nothing on the
    /// write path), bitmap (an internal write-intent bitmap, 64 MiB chunks) or ppl
    /// (RAID5's partial parity log).
    #[arg(long, value_enum, default_value_t = super::target::Policy::Resync)]
    pub consistency_policy: super::target::Policy,
    /// CRC32C tags of every 4 KiB block, verified on every read (`raidd create
    /// --checksums`): what checksums cost.
    #[arg(long)]
    pub checksums: bool,
    /// Buffer memory registered with every thread's io_uring, as `raidd serve` does by
    /// default (0: none): file members' reads and writes into it go out as fixed-buffer
    /// operations.
    #[arg(long, default_value = "64M", value_parser = size::parse_size, value_name = "SIZE")]
    pub registered: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Raw,
    Array(Level),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Raw => f.write_str("raw"),
            Target::Array(l) => write!(f, "{l}"),
        }
    }
}

fn parse_target(s: &str) -> Result<Target, String> {
    if s == "raw" {
        return Ok(Target::Raw);
    }
    parse_level(s).map(Target::Array)
}

/// The request pattern, with fio's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
    RandRead,
    RandWrite,
}

impl Rw {
    fn writes(self) -> bool {
        matches!(self, Rw::Write | Rw::RandWrite)
    }

    fn random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite)
    }

    fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
        }
    }
}

fn parse_rw(s: &str) -> Result<Rw, String> {
    match s {
        "read" => Ok(Rw::Read),
        "write" => Ok(Rw::Write),
        "randread" => Ok(Rw::RandRead),
        "randwrite" => Ok(Rw::RandWrite),
        _ => Err(format!(
            "unknown pattern {s:?}: use read, write, randread or randwrite"
        )),
    }
}

fn parse_gather(s: &str) -> Result<Gather, String> {
    s.parse()
}

fn parse_alone(s: &str) -> Result<Alone, String> {
    s.parse()
}

/// Where one thread's requests go: sequentially through the thread's share of the device
/// (wrapping at its end), or uniformly at random over all of it; whole blocks either way.
#[derive(Debug)]
pub struct Offsets {
    random: bool,
    bs: u64,
    first: u64,
    blocks: u64,
    next: u64,
    rng: u64,
}

impl Offsets {
    /// `None` when the device holds fewer blocks than there are threads.
    pub fn new(rw: Rw, bs: u64, size: u64, thread: u64, threads: u64) -> Option<Offsets> {
        let total = size / bs;
        let share = total / threads;
        if share == 0 {
            return None;
        }
        let (first, blocks) = if rw.random() {
            (0, total)
        } else {
            (thread * share, share)
        };
        Some(Offsets {
            random: rw.random(),
            bs,
            first,
            blocks,
            next: 0,
            // Distinct, non-zero xorshift seeds per thread.
            rng: 0x9e37_79b9_7f4a_7c15 ^ (thread + 1).wrapping_mul(0x2545_f491_4f6c_dd1d),
        })
    }

    pub fn next_offset(&mut self) -> u64 {
        let b = if self.random {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng % self.blocks
        } else {
            let b = self.next;
            self.next = (self.next + 1) % self.blocks;
            b
        };
        (self.first + b) * self.bs
    }
}

/// The phases of a run, which the main thread moves through while the load runs; reading
/// a flag that rarely changes costs the load less than a clock read per request.
const RAMP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// What every thread's requests share: requests that complete in the measured phase are
/// counted; none starts after the stop.
#[derive(Clone)]
struct Window {
    rw: Rw,
    bs: u64,
    phase: Arc<AtomicU8>,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    /// Requests completed inside the measured window.
    counted: u64,
    /// Every request completed (the CPU time is divided by these).
    all: u64,
    /// File members: positioned reads and writes the thread started, and the operations
    /// the kernel got for them once contiguous ones were gathered.
    file_ops: u64,
    kernel_ops: u64,
    fixed_ops: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, t: Tally) {
        self.counted += t.counted;
        self.all += t.all;
        self.file_ops += t.file_ops;
        self.kernel_ops += t.kernel_ops;
        self.fixed_ops += t.fixed_ops;
    }
}

/// One request slot of a thread: issues back to back until the window ends, reusing one
/// buffer (no allocation per request on the generator's side).
async fn slot(
    dev: Arc<Device>,
    offsets: Rc<RefCell<Offsets>>,
    w: Window,
    seed: u64,
) -> Result<Tally, String> {
    let len = w.bs as usize;
    let mut data = AlignedBuf::for_overwrite(len);
    // Non-zero data, different per slot, so nothing can shortcut zero blocks.
    let mut x = seed | 1;
    for chunk in data.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    let buf = SharedBuf::new(data);
    let mut tally = Tally::default();
    while w.phase.load(Ordering::Relaxed) != STOP {
        let offset = offsets.borrow_mut().next_offset();
        if w.rw.writes() {
            let mut iov = IoVec::new();
            iov.push(
                buf.slice(0..len)
                    .expect("the previous request returned the buffer"),
            );
            dev.write(offset, iov).await?;
        } else {
            let mut iov = IoVecMut::new();
            iov.push(
                buf.slice_mut(0..len)
                    .expect("the previous request returned the buffer"),
            );
            dev.read(offset, iov).await?;
        }
        tally.all += 1;
        if w.phase.load(Ordering::Relaxed) == MEASURE {
            tally.counted += 1;
        }
    }
    Ok(tally)
}

async fn thread_load(
    dev: Arc<Device>,
    w: Window,
    qd: u32,
    thread: u64,
    threads: u64,
) -> Result<Tally, String> {
    let offsets = Offsets::new(w.rw, w.bs, dev.size(), thread, threads)
        .ok_or_else(|| "the device is too small for this many threads".to_string())?;
    let offsets = Rc::new(RefCell::new(offsets));
    let slots: Vec<_> = (0..u64::from(qd))
        .map(|i| {
            raidd_rt::spawn_local(slot(
                dev.clone(),
                offsets.clone(),
                w.clone(),
                (thread << 32) + i + 1,
            ))
        })
        .collect();
    let io0 = raidd_rt::io_stats();
    let mut total = Tally::default();
    for s in slots {
        let t = s.await?;
        total += t;
    }
    let io = raidd_rt::io_stats();
    total.file_ops = io.file_ops - io0.file_ops;
    total.kernel_ops = io.kernel_ops() - io0.kernel_ops();
    total.fixed_ops = io.fixed - io0.fixed;
    Ok(total)
}

/// Counters of the array that say how requests were served, as totals over the run.
#[derive(Debug, Default, Serialize)]
pub struct EngineCounts {
    pub copied_bytes: u64,
    pub full_stripe_writes: u64,
    pub rmw_writes: u64,
    pub rcw_writes: u64,
    /// Member blocks whose checksum tags a read verified, and tag pages read from members
    /// because the tag cache did not hold them.
    pub verified_blocks: u64,
    pub tag_cache_misses: u64,
}

/// `raidd bench io --json`.
#[derive(Debug, Serialize)]
pub struct IoReport {
    pub target: String,
    pub members: u16,
    /// `memory` or `file`.
    pub member_kind: &'static str,
    /// File members opened with O_DIRECT.
    pub direct: bool,
    pub member_size: u64,
    pub chunk: u64,
    pub rw: Rw,
    pub bs: u64,
    pub qd: u32,
    pub threads: u16,
    pub gather: String,
    pub alone: String,
    pub stripe_cache: u64,
    pub seconds: f64,
    /// Requests completed in the measured window.
    pub ops: u64,
    /// Every request completed, the ramp included.
    pub ops_total: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub mib_per_s: f64,
    /// Process CPU (user + system) per completed request, microseconds.
    pub cpu_us_per_io: Option<f64>,
    /// Array targets: copies per request the layout forced (bytes).
    pub copied_bytes_per_io: Option<f64>,
    /// File members: member reads and writes per request, and the operations the kernel
    /// got for them per request once contiguous ones were gathered.
    pub member_ios_per_io: Option<f64>,
    pub kernel_ios_per_io: Option<f64>,
    /// File members: the share of kernel operations that used registered buffers.
    pub fixed_share: Option<f64>,
    pub engine: Option<EngineCounts>,
    /// Array targets: the state one request in flight holds in the engine (the futures of
    /// `Array::read` and `Array::write`, before any member I/O of their own), bytes.
    pub read_state_bytes: Option<usize>,
    pub write_state_bytes: Option<usize>,
}

fn future_bytes<F: std::future::Future>(_: &F) -> usize {
    std::mem::size_of::<F>()
}

pub fn run(args: IoArgs, json: bool) -> AdminResult {
    check_args(&args)?;
    if args.registered > 0 {
        let bytes = usize::try_from(args.registered).unwrap_or(usize::MAX);
        raidd_rt::register_arena(bytes)
            .map_err(|e| AdminError::usage(format!("--registered: {e}")))?;
    }
    let (dev, direct) = device(&args)?;
    if dev.size() / args.bs < u64::from(args.threads) {
        return Err(AdminError::usage(
            "the device holds fewer requests of --bs than there are threads",
        ));
    }
    let dev = Arc::new(dev);
    let before = engine_counts(&dev);
    let cpu0 = cpu_seconds();
    let load = load(&args, &dev);
    let cpu = cpu0.zip(cpu_seconds()).map(|(a, b)| b - a);
    let after = engine_counts(&dev);
    if let Device::Array(a) = &*dev {
        close_array(a, None)?;
    }
    let (total, measured) = load?;
    let member_kind = if args.dir.is_some() { "file" } else { "memory" };
    let iops = total.counted as f64 / measured;
    let per_io = |x: f64| (total.all > 0).then(|| x / total.all as f64);
    let engine = before.zip(after).map(|(b, a)| EngineCounts {
        copied_bytes: a.copied_bytes - b.copied_bytes,
        full_stripe_writes: a.full_stripe_writes - b.full_stripe_writes,
        rmw_writes: a.rmw_writes - b.rmw_writes,
        rcw_writes: a.rcw_writes - b.rcw_writes,
        verified_blocks: a.verified_blocks - b.verified_blocks,
        tag_cache_misses: a.tag_cache_misses - b.tag_cache_misses,
    });
    let (read_state_bytes, write_state_bytes) = match &*dev {
        Device::Array(a) => {
            // Built, never polled: only their size is wanted.
            let r = a.read(0, IoVecMut::new());
            let w = a.write(0, IoVec::new());
            (Some(future_bytes(&r)), Some(future_bytes(&w)))
        }
        Device::Raw { .. } => (None, None),
    };
    let report = IoReport {
        target: args.target.to_string(),
        members: args.members,
        member_kind,
        direct,
        member_size: args.member_size,
        chunk: args.chunk,
        rw: args.rw,
        bs: args.bs,
        qd: args.qd,
        threads: args.threads,
        gather: args.gather.to_string(),
        alone: args.alone.to_string(),
        stripe_cache: args.stripe_cache,
        seconds: args.seconds,
        ops: total.counted,
        ops_total: total.all,
        iops,
        bytes_per_sec: iops * args.bs as f64,
        mib_per_s: iops * args.bs as f64 / f64::from(1 << 20),
        cpu_us_per_io: cpu.and_then(|c| per_io(c * 1e6)),
        copied_bytes_per_io: engine.as_ref().and_then(|e| per_io(e.copied_bytes as f64)),
        member_ios_per_io: (total.file_ops > 0)
            .then(|| per_io(total.file_ops as f64))
            .flatten(),
        kernel_ios_per_io: (total.file_ops > 0)
            .then(|| per_io(total.kernel_ops as f64))
            .flatten(),
        fixed_share: (total.kernel_ops > 0)
            .then(|| total.fixed_ops as f64 / total.kernel_ops as f64),
        engine,
        read_state_bytes,
        write_state_bytes,
    };
    if json {
        return output::emit_json(&report);
    }
    output::emit(&text_report(&report))
}

/// Refuses arguments the run cannot honour, before anything is allocated.
fn check_args(args: &IoArgs) -> AdminResult {
    args.buffer.check()?;
    if args.bs > 64 << 20 {
        return Err(AdminError::usage("--bs is at most 64M"));
    }
    if args.member_size < args.bs * 4 {
        return Err(AdminError::usage(
            "--member-size must hold at least four requests of --bs",
        ));
    }
    if args.dir.is_none() {
        // Memory members are allocated up front: refuse what would not fit rather than
        // let the allocation abort the process.
        let want = u64::from(args.members).saturating_mul(args.member_size);
        if let Some(avail) = mem_available() {
            if want > avail / 10 * 9 {
                return Err(AdminError::usage(format!(
                    "{} members of {} need {} of memory; {} is available (use --dir for file \
                     members, or a smaller --member-size)",
                    args.members,
                    size::short(args.member_size),
                    size::short(want),
                    size::short(avail)
                )));
            }
        }
    }
    Ok(())
}

/// The device under load: the members, raw or as an array; and whether file members use
/// direct I/O.
fn device(args: &IoArgs) -> AdminResult<(Device, bool)> {
    let kind = match &args.dir {
        Some(dir) => MemberKind::File {
            dir: dir.clone(),
            size: args.member_size,
        },
        None => MemberKind::Memory {
            size: args.member_size,
        },
    };
    let (members, direct) = open_members(&kind, usize::from(args.members))?;
    let members = with_latency(members, args.member_latency);
    let (members, _pool) = args.buffer.wrap(members);
    let dev = match args.target {
        Target::Raw => Device::Raw {
            members,
            bs: args.bs,
        },
        Target::Array(level) => {
            let setup = ArraySetup {
                level,
                chunk: args.chunk,
                stripe_cache: args.stripe_cache,
                gather: args.gather,
                alone: args.alone,
                read_bypass: true,
                policy: args.consistency_policy,
                checksums: args.checksums,
            };
            Device::Array(make_array(members, setup, None)?)
        }
    };
    Ok((dev, direct))
}

/// Runs the load threads: a ramp, then `args.seconds` measured. What they did in the
/// measured time, and how long that was (seconds); a thread's failure is the error.
fn load(args: &IoArgs, dev: &Arc<Device>) -> AdminResult<(Tally, f64)> {
    let ramp = Duration::from_secs_f64((args.seconds / 5.0).min(0.5));
    let w = Window {
        rw: args.rw,
        bs: args.bs,
        phase: Arc::new(AtomicU8::new(RAMP)),
    };
    let threads: Vec<_> = (0..u64::from(args.threads))
        .map(|t| {
            let dev = dev.clone();
            let w = w.clone();
            let qd = args.qd;
            let n = u64::from(args.threads);
            std::thread::Builder::new()
                .name(format!("raidd-bench-{t}"))
                .spawn(move || raidd_rt::block_on(thread_load(dev, w, qd, t, n)))
                .map_err(|e| AdminError::io("cannot start a load thread", &e))
        })
        .collect::<AdminResult<_>>()?;
    std::thread::sleep(ramp);
    w.phase.store(MEASURE, Ordering::Relaxed);
    let measure = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    w.phase.store(STOP, Ordering::Relaxed);
    let measured = measure.elapsed().as_secs_f64();
    let mut total = Tally::default();
    let mut failure = None;
    for t in threads {
        match t.join() {
            Ok(Ok(t)) => total += t,
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some("a load thread panicked".to_string()),
        }
    }
    match failure {
        Some(e) => Err(AdminError::new(
            raidd_admin::exit::Exit::Failure,
            format!("bench: {e}"),
        )),
        None => Ok((total, measured)),
    }
}

fn engine_counts(dev: &Device) -> Option<EngineCounts> {
    let Device::Array(a) = dev else { return None };
    let a = a.clone();
    let st = {
        let a = a.clone();
        raidd_rt::block_on(async move { a.status().await })
    };
    let tags: Vec<_> = (0..st.slots.len())
        .filter_map(|role| a.slots().member(role))
        .filter_map(|m| m.checksums().map(|t| t.counts()))
        .collect();
    let c = st.counters;
    Some(EngineCounts {
        verified_blocks: tags.iter().map(|t| t.verified_blocks).sum(),
        tag_cache_misses: tags.iter().map(|t| t.cache_misses).sum(),
        copied_bytes: c.copied_bytes,
        full_stripe_writes: c.full_stripe_writes,
        rmw_writes: c.rmw_writes,
        rcw_writes: c.rcw_writes,
    })
}

fn text_report(r: &IoReport) -> String {
    let mut s = format!(
        "{} over {} {} members{}, {} {} QD{} x {} thread{}, {} s\n",
        r.target,
        r.members,
        r.member_kind,
        if r.member_kind == "file" && !r.direct {
            " (buffered)"
        } else {
            ""
        },
        r.rw.name(),
        size::short(r.bs),
        r.qd,
        r.threads,
        if r.threads == 1 { "" } else { "s" },
        r.seconds
    );
    s.push_str(&format!("  IOPS {:.0}   {:.1} MiB/s", r.iops, r.mib_per_s));
    if let Some(c) = r.cpu_us_per_io {
        s.push_str(&format!("   CPU {c:.2} us/IO"));
    }
    if let Some(c) = r.copied_bytes_per_io {
        s.push_str(&format!("   copied {c:.0} B/IO"));
    }
    s.push('\n');
    if let (Some(m), Some(k)) = (r.member_ios_per_io, r.kernel_ios_per_io) {
        s.push_str(&format!(
            "  member I/Os per request {m:.2}, kernel operations per request {k:.2} \
             (contiguous ones gathered){}\n",
            r.fixed_share
                .filter(|&f| f > 0.0)
                .map(|f| format!(", {:.0}% fixed-buffer", f * 100.0))
                .unwrap_or_default()
        ));
    }
    if let (Some(rb), Some(wb)) = (r.read_state_bytes, r.write_state_bytes) {
        s.push_str(&format!(
            "  engine state per request in flight: read {rb} B, write {wb} B\n"
        ));
    }
    if let Some(e) = &r.engine {
        if e.full_stripe_writes + e.rmw_writes + e.rcw_writes > 0 {
            s.push_str(&format!(
                "  stripe writes: {} full, {} read-modify-write, {} reconstruct-write\n",
                e.full_stripe_writes, e.rmw_writes, e.rcw_writes
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_offsets_stream_through_each_threads_share() {
        let size = 10 * 4096;
        let mut a = Offsets::new(Rw::Read, 4096, size, 0, 2).unwrap();
        let mut b = Offsets::new(Rw::Read, 4096, size, 1, 2).unwrap();
        let got_a: Vec<u64> = (0..7).map(|_| a.next_offset() / 4096).collect();
        let got_b: Vec<u64> = (0..6).map(|_| b.next_offset() / 4096).collect();
        assert_eq!(got_a, [0, 1, 2, 3, 4, 0, 1]);
        assert_eq!(got_b, [5, 6, 7, 8, 9, 5]);
        assert!(Offsets::new(Rw::Read, 4096, 4096, 0, 2).is_none());
    }

    #[test]
    fn random_offsets_are_aligned_in_range_and_spread() {
        let blocks = 64u64;
        let mut o = Offsets::new(Rw::RandWrite, 8192, blocks * 8192, 0, 1).unwrap();
        let mut seen = vec![0u32; blocks as usize];
        for _ in 0..64_000 {
            let off = o.next_offset();
            assert_eq!(off % 8192, 0);
            assert!(off < blocks * 8192);
            seen[(off / 8192) as usize] += 1;
        }
        // Uniform: each block near 1000 hits.
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
        let mut other = Offsets::new(Rw::RandWrite, 8192, blocks * 8192, 1, 2).unwrap();
        let mut o = Offsets::new(Rw::RandWrite, 8192, blocks * 8192, 0, 2).unwrap();
        let same = (0..100)
            .filter(|_| o.next_offset() == other.next_offset())
            .count();
        assert!(same < 10, "threads draw different sequences");
    }

    #[test]
    fn targets_and_patterns_parse() {
        assert_eq!(parse_target("raw"), Ok(Target::Raw));
        assert_eq!(parse_target("raid5"), Ok(Target::Array(Level::Raid5)));
        assert!(parse_target("raid7").is_err());
        for rw in [Rw::Read, Rw::Write, Rw::RandRead, Rw::RandWrite] {
            assert_eq!(parse_rw(rw.name()), Ok(rw));
        }
        assert!(parse_rw("trim").is_err());
    }
}
