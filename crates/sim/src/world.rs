//! Drives on channels, channels on controllers, controllers on one bus, and the host: the
//! whole simulated machine, and the timing of every command through it.
//!
//! Each command is timed when it is submitted, from the state its predecessors left: the
//! drive serves one command at a time, and each link a transfer crosses is a server with a
//! rate that is busy for the bytes it carries (so links shared by drives that stream at
//! once share their rate). A PATA channel without overlap is held by one command, from its
//! start to its end, whichever of its two drives it is for. A request longer than the
//! drive's largest transfer goes out as several commands, one after another, as a host
//! driver splits it.

use std::sync::Arc;

use crate::disk::Disk;
use crate::drive::{Drive, SECTOR};
use crate::topology::Topology;

/// A link a transfer crosses: its rate (bytes per nanosecond; `None`: unlimited) and when
/// it is next free.
#[derive(Clone, Debug, PartialEq)]
struct Link {
    rate: Option<f64>,
    free_at: f64,
}

impl Link {
    fn new(mb_s: Option<f64>) -> Link {
        Link {
            rate: mb_s.map(|r| r * 1e-3),
            free_at: 0.0,
        }
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
        while a < end {
            let b = end.min(a + most);
            t = self.command(drive, op, a, b, t);
            a = b;
        }
        t.ceil() as u64
    }

    /// One command of at most the drive's largest transfer, issued at `t`.
    fn command(&mut self, drive: usize, op: Op, a: u64, b: u64, t: f64) -> f64 {
        let models = self.models.clone();
        let slot = &self.drives[drive];
        let m = &models[slot.model];
        let ch = &self.channels[slot.channel];
        let mut start = t.max(slot.disk.free_at);
        if !ch.overlap {
            start = start.max(ch.link.free_at);
        }
        let work = start + m.overhead_ns();
        let bytes = ((b - a) * SECTOR) as f64;
        let rate = self.path_rate(drive);
        let done = match op {
            Op::Read => {
                let r = self.drives[drive].disk.read(m, a, b, work);
                let ts = self.reserve(drive, r.first, bytes);
                let s = &mut self.drives[drive].stats;
                s.cache_hits += u64::from(r.hit);
                s.read_bytes += bytes as u64;
                // Data leaves the drive no faster than the path allows and no sooner than
                // the platter gives it.
                let done = (ts + bytes / rate).max(r.last + SECTOR as f64 / rate);
                self.drives[drive].disk.free_at = done;
                done
            }
            Op::Write => {
                let ts = self.reserve(drive, work, bytes);
                let arrived = ts + bytes / rate;
                let first = ts + SECTOR as f64 / rate;
                let on_platter = self.drives[drive]
                    .disk
                    .write(m, a, b, work, first)
                    .max(arrived);
                self.drives[drive].stats.written_bytes += bytes as u64;
                self.drives[drive].disk.free_at = on_platter;
                if m.spec().write_cache {
                    arrived
                } else {
                    on_platter
                }
            }
        };
        self.drives[drive].stats.commands += 1;
        let ch = &mut self.channels[self.drives[drive].channel];
        if !ch.overlap {
            ch.link.free_at = done;
        }
        done
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

    /// Books a transfer of `bytes` on every link from `drive` to the host, starting no
    /// sooner than `ready`: when it starts. Each link is busy for the bytes at its own rate.
    fn reserve(&mut self, drive: usize, ready: f64, bytes: f64) -> f64 {
        let chi = self.drives[drive].channel;
        let ci = self.channels[chi].controller;
        let overlap = self.channels[chi].overlap;
        let mut links: [Option<&mut Link>; 4] = [None, None, None, None];
        let ch = &mut self.channels[chi];
        if overlap {
            links[0] = Some(&mut ch.link);
        }
        links[1] = Some(&mut self.controllers[ci]);
        links[2] = Some(&mut self.bus);
        links[3] = Some(&mut self.host);
        let start = links.iter().flatten().fold(ready, |t, l| {
            if l.rate.is_some() {
                t.max(l.free_at)
            } else {
                t
            }
        });
        for l in links.into_iter().flatten() {
            if let Some(r) = l.rate {
                l.free_at = start + bytes / r;
            }
        }
        start
    }
}
