//! Drives on channels, channels on controllers, controllers on one bus, and the host: the
//! whole simulated machine, and the timing of every command through it.
//!
//! Each command is timed when it is submitted, from the state its predecessors left: the
//! drive serves its commands one at a time, in order, and each link a transfer crosses
//! keeps a calendar of the times it is busy, for the bytes it carries at its rate (so links
//! shared by drives that stream at once share their rate). A transfer takes the first time
//! every link on its way is free; a request submitted later may take a gap before one
//! submitted earlier, as on a real bus. A PATA channel without overlap is held by one
//! command, from its start to its end, whichever of its two drives it is for. A request longer than the
//! drive's largest transfer goes out as several commands, one after another, as a host
//! driver splits it.

use std::sync::Arc;

use crate::disk::Disk;
use crate::drive::{Drive, SECTOR};
use crate::topology::Topology;

/// A link a transfer crosses: its rate (bytes per nanosecond; `None`: unlimited) and the
/// times it is booked.
#[derive(Clone, Debug, PartialEq)]
struct Link {
    rate: Option<f64>,
    busy: Calendar,
}

impl Link {
    fn new(mb_s: Option<f64>) -> Link {
        Link {
            rate: mb_s.map(|r| r * 1e-3),
            busy: Calendar::default(),
        }
    }

    /// How long `bytes` keep it busy.
    fn hold(&self, bytes: f64) -> f64 {
        self.rate.map_or(0.0, |r| bytes / r)
    }
}

/// Busy intervals `[start, end)`, in order, none overlapping.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calendar {
    busy: Vec<(f64, f64)>,
}

impl Calendar {
    /// Forgets intervals that ended before `now`: nothing can be booked before it.
    pub fn prune(&mut self, now: f64) {
        let gone = self.busy.partition_point(|&(_, e)| e <= now);
        self.busy.drain(..gone);
    }

    /// The earliest start at or after `t` of `len` free nanoseconds.
    pub fn fit(&self, t: f64, len: f64) -> f64 {
        let mut s = t;
        let first = self.busy.partition_point(|&(_, e)| e <= s);
        for &(b, e) in &self.busy[first..] {
            if s + len <= b {
                break;
            }
            s = s.max(e);
        }
        s
    }

    /// Carrying `len` nanoseconds of work from `t` in whatever free time comes first, as a
    /// bus shares itself among transfers: when it is done, and the pieces it takes.
    pub fn fill(&self, t: f64, len: f64) -> (f64, Vec<(f64, f64)>) {
        let mut pieces = Vec::new();
        let (mut at, mut left) = (t, len);
        let first = self.busy.partition_point(|&(_, e)| e <= at);
        for &(b, e) in &self.busy[first..] {
            if left <= 0.0 {
                break;
            }
            if b > at {
                let n = (b - at).min(left);
                pieces.push((at, at + n));
                left -= n;
            }
            at = at.max(e);
        }
        if left > 0.0 {
            pieces.push((at, at + left));
            at += left;
        } else if let Some(&(_, e)) = pieces.last() {
            at = e;
        }
        (at, pieces)
    }

    /// Books `[s, e)`, which [`Calendar::fit`] or [`Calendar::fill`] found free.
    pub fn book(&mut self, s: f64, e: f64) {
        if e <= s {
            return;
        }
        let at = self.busy.partition_point(|&(b, _)| b < s);
        debug_assert!(at == 0 || self.busy[at - 1].1 <= s, "booked twice");
        debug_assert!(
            at == self.busy.len() || e <= self.busy[at].0,
            "booked twice"
        );
        self.busy.insert(at, (s, e));
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Channel {
    link: Link,
    /// Commands to its drives may overlap (SATA, SCSI); false for PATA master and slave.
    overlap: bool,
    controller: usize,
}

#[derive(Clone, Debug, PartialEq)]
struct Slot {
    model: usize,
    disk: Disk,
    channel: usize,
    stats: DriveStats,
}

/// What one drive did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveStats {
    pub commands: u64,
    /// Reads whose first sector the read-ahead held.
    pub cache_hits: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
}

/// Which link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinkId {
    Channel(usize),
    Controller(usize),
    Bus,
    Host,
}

/// The pieces of time each link would carry a transfer in.
type Bookings = Vec<(LinkId, Vec<(f64, f64)>)>;

/// A command worked out before it is carried out.
#[derive(Clone, Debug)]
struct Plan {
    disk: Disk,
    /// The times each link carries its data.
    bookings: Bookings,
    bytes: f64,
    done: f64,
    hit: bool,
    write: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// The simulated machine.
#[derive(Clone, Debug, PartialEq)]
pub struct World {
    /// Shared, so a command can hold its drive's model while it books the links.
    models: Arc<Vec<Drive>>,
    drives: Vec<Slot>,
    channels: Vec<Channel>,
    controllers: Vec<Link>,
    bus: Link,
    host: Link,
}

impl World {
    pub fn new(topology: &Topology) -> World {
        let mut w = World {
            models: Arc::new(topology.models.clone()),
            drives: Vec::new(),
            channels: Vec::new(),
            controllers: Vec::new(),
            bus: Link::new(topology.bus_mb_s),
            host: Link::new(topology.host_mb_s),
        };
        for (ci, c) in topology.controllers.iter().enumerate() {
            w.controllers.push(Link::new(c.mb_s));
            for ch in &c.channels {
                let channel = w.channels.len();
                w.channels.push(Channel {
                    link: Link::new(ch.mb_s),
                    overlap: ch.overlap,
                    controller: ci,
                });
                for &model in &ch.drives {
                    // Spindles start at angles spread by the golden ratio: no two in step.
                    let phase = (w.drives.len() as f64 * 0.618_033_988_749_895).fract();
                    w.drives.push(Slot {
                        model,
                        disk: Disk::new(phase),
                        channel,
                        stats: DriveStats::default(),
                    });
                }
            }
        }
        w
    }

    pub fn drives(&self) -> usize {
        self.drives.len()
    }

    pub fn drive_model(&self, drive: usize) -> &Drive {
        &self.models[self.drives[drive].model]
    }

    pub fn stats(&self, drive: usize) -> DriveStats {
        self.drives[drive].stats
    }

    /// Submits `len` bytes at `offset` of `drive` at time `now` (nanoseconds): when the
    /// request completes. Offsets and lengths are whole sectors within the drive.
    pub fn submit(&mut self, drive: usize, op: Op, offset: u64, len: u64, now: u64) -> u64 {
        let m = &self.models[self.drives[drive].model];
        assert!(
            offset.is_multiple_of(SECTOR) && len.is_multiple_of(SECTOR) && len > 0,
            "request {offset}+{len} is not whole sectors"
        );
        assert!(
            offset + len <= m.bytes(),
            "request {offset}+{len} beyond the drive"
        );
        let (mut a, end) = (offset / SECTOR, (offset + len) / SECTOR);
        let most = m.max_transfer_sectors();
        let mut t = now as f64;
        self.prune(t);
        while a < end {
            let b = end.min(a + most);
            t = self.command(drive, op, a, b, t);
            a = b;
        }
        t.ceil() as u64
    }

    /// One command of at most the drive's largest transfer, issued at `t`.
    fn command(&mut self, drive: usize, op: Op, a: u64, b: u64, t: f64) -> f64 {
        let chi = self.drives[drive].channel;
        let mut start = t.max(self.drives[drive].disk.free_at);
        loop {
            let plan = self.plan(drive, op, a, b, start);
            let ch = &self.channels[chi];
            if !ch.overlap {
                // The command holds its PATA channel throughout: it starts when the
                // channel is free for all of it.
                let free = ch.link.busy.fit(start, plan.done - start);
                if free > start {
                    start = free;
                    continue;
                }
            }
            return self.commit(drive, plan, start);
        }
    }

    /// What a command started at `start` would do: pure, the world unchanged.
    fn plan(&self, drive: usize, op: Op, a: u64, b: u64, start: f64) -> Plan {
        let slot = &self.drives[drive];
        let m = &self.models[slot.model];
        let mut disk = slot.disk.clone();
        let work = start + m.overhead_ns();
        let bytes = ((b - a) * SECTOR) as f64;
        let rate = self.path_rate(drive);
        match op {
            Op::Read => {
                let r = disk.read(m, a, b, work);
                let (links_done, bookings) = self.transfer(drive, r.first, bytes);
                // Data leaves the drive no faster than the path allows, no sooner than the
                // platter gives it, and no sooner than the links carry it.
                let done = (r.first + bytes / rate)
                    .max(r.last + SECTOR as f64 / rate)
                    .max(links_done);
                disk.free_at = done;
                Plan {
                    disk,
                    bookings,
                    bytes,
                    done,
                    hit: r.hit,
                    write: false,
                }
            }
            Op::Write => {
                let (links_done, bookings) = self.transfer(drive, work, bytes);
                let arrived = (work + bytes / rate).max(links_done);
                let first = work + SECTOR as f64 / rate;
                let on_platter = disk.write(m, a, b, work, first).max(arrived);
                disk.free_at = on_platter;
                Plan {
                    disk,
                    bookings,
                    bytes,
                    done: if m.spec().write_cache {
                        arrived
                    } else {
                        on_platter
                    },
                    hit: false,
                    write: true,
                }
            }
        }
    }

    /// Carries out a planned command: the drive's new state, the links booked.
    fn commit(&mut self, drive: usize, plan: Plan, start: f64) -> f64 {
        let chi = self.drives[drive].channel;
        if !self.channels[chi].overlap {
            self.channels[chi].link.busy.book(start, plan.done);
        }
        let bytes = plan.bytes;
        for (id, pieces) in &plan.bookings {
            let link = match *id {
                LinkId::Channel(i) => &mut self.channels[i].link,
                LinkId::Controller(i) => &mut self.controllers[i],
                LinkId::Bus => &mut self.bus,
                LinkId::Host => &mut self.host,
            };
            for &(s, e) in pieces {
                link.busy.book(s, e);
            }
        }
        let slot = &mut self.drives[drive];
        slot.disk = plan.disk;
        slot.stats.commands += 1;
        if plan.write {
            slot.stats.written_bytes += bytes as u64;
        } else {
            slot.stats.read_bytes += bytes as u64;
            slot.stats.cache_hits += u64::from(plan.hit);
        }
        plan.done
    }

    /// Forgets bookings that ended before `now`.
    fn prune(&mut self, now: f64) {
        for l in self
            .controllers
            .iter_mut()
            .chain([&mut self.bus, &mut self.host])
            .chain(self.channels.iter_mut().map(|c| &mut c.link))
        {
            l.busy.prune(now);
        }
    }

    /// The slowest rate on `drive`'s way to the host: bytes per nanosecond.
    fn path_rate(&self, drive: usize) -> f64 {
        let slot = &self.drives[drive];
        let ch = &self.channels[slot.channel];
        [
            Some(self.models[slot.model].interface_rate()),
            ch.link.rate,
            self.controllers[ch.controller].rate,
            self.bus.rate,
            self.host.rate,
        ]
        .into_iter()
        .flatten()
        .fold(f64::INFINITY, f64::min)
    }

    /// A transfer of `bytes` between `drive` and the host from `ready`: each link carries
    /// them in its first free time at its own rate. When the last link is done, and what
    /// each would book.
    fn transfer(&self, drive: usize, ready: f64, bytes: f64) -> (f64, Bookings) {
        let chi = self.drives[drive].channel;
        let ch = &self.channels[chi];
        let mut links = vec![
            (
                LinkId::Controller(ch.controller),
                &self.controllers[ch.controller],
            ),
            (LinkId::Bus, &self.bus),
            (LinkId::Host, &self.host),
        ];
        if ch.overlap {
            links.push((LinkId::Channel(chi), &ch.link));
        }
        let mut done = ready;
        let mut bookings = Vec::new();
        for (id, l) in links {
            if l.rate.is_none() {
                continue;
            }
            let (end, pieces) = l.busy.fill(ready, l.hold(bytes));
            done = done.max(end);
            bookings.push((id, pieces));
        }
        (done, bookings)
    }
}
