//! One drive's changing state: where its head is, what its read-ahead holds, when it is
//! free; and the service of one command against it. The bus and the other drives are the
//! world's (`world.rs`); this module sees only its own drive.
//!
//! The read-ahead is kept as a stream, not as sectors: from an anchor sector that started
//! under the head at a known time, the platter delivers the following sectors at the
//! drive's pace until the segment holds `segment` sectors the host has not read. A read
//! that finds its first sector in that stream waits only for what has not yet passed; one
//! that comes after the stream stopped waits for the platter to bring the sector round again:
//! the drive does not read ahead again on its own once its segment has filled, so a host
//! that cannot keep up with the platter loses a revolution each time it catches up (seed
//! 001's halving).

use crate::drive::{Drive, Place};

/// What the platter is delivering into the cache.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ReadAhead {
    /// First sector the cache holds.
    cached_from: u64,
    /// A sector that started under the head at `anchor_t`; the stream runs on from there.
    anchor: u64,
    anchor_t: f64,
    /// Where the stream stops: the segment is full.
    stop: u64,
}

/// A drive's state between commands.
#[derive(Clone, Debug, PartialEq)]
pub struct Disk {
    /// Platter angle (revolutions) at time 0: drives do not spin in step.
    phase: f64,
    /// When the drive finishes the command it has.
    pub free_at: f64,
    /// Where the head rests when no stream moves it.
    head: u64,
    ra: Option<ReadAhead>,
}

/// How a read went: when its first sector was in the drive's cache, when its last was, and
/// whether the cache served its head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadTiming {
    pub first: f64,
    pub last: f64,
    pub hit: bool,
}

impl Disk {
    pub fn new(phase: f64) -> Disk {
        Disk {
            phase,
            free_at: 0.0,
            head: 0,
            ra: None,
        }
    }

    /// Reads `[a, b)` for a command whose work starts at `t` (its overhead paid).
    pub fn read(&mut self, d: &Drive, a: u64, b: u64, t: f64) -> ReadTiming {
        assert!(a < b && b <= d.sectors(), "read {a}..{b} outside the drive");
        let seg = d.segment_sectors();
        if let Some(ra) = self.ra.filter(|ra| ra.cached_from <= a && a <= ra.stop) {
            // When sector `l - 1` has passed. Those before the anchor are in the cache:
            // the anchor is only ever set where the stream had been when a command ended,
            // or where it starts again after stopping.
            let phase = self.phase;
            let passed = |l: u64| {
                if l <= ra.anchor {
                    0.0
                } else {
                    d.stream_end(phase, ra.anchor, ra.anchor_t, l)
                }
            };
            if passed(ra.stop) >= t {
                // The stream still runs: it serves the request and goes on past `b`.
                let last = passed(b);
                let (_, anchor, anchor_t) = if b <= ra.anchor {
                    (b, ra.anchor, ra.anchor_t)
                } else {
                    d.stream_at(phase, ra.anchor, ra.anchor_t, last, b)
                };
                self.ra = Some(ReadAhead {
                    cached_from: a,
                    anchor,
                    anchor_t,
                    stop: (b + seg).max(ra.stop).min(d.sectors()),
                });
                return ReadTiming {
                    first: passed(a + 1).max(t),
                    last: last.max(t),
                    hit: true,
                };
            }
            // The segment filled and the platter went on without the drive.
            if b <= ra.stop {
                // All in the cache: served now. The drive stays stopped: reading resumes
                // only when a command needs the platter, which then waits for its sector.
                if let Some(x) = self.ra.as_mut() {
                    x.cached_from = a;
                }
                return ReadTiming {
                    first: t,
                    last: t,
                    hit: true,
                };
            }
            // The rest waits for its sectors to come round.
            let from = d.place(ra.stop - 1);
            let mut r = self.access(d, &from, ra.stop, b, t);
            if a < ra.stop {
                r.first = t;
                r.hit = true;
                if let Some(x) = self.ra.as_mut() {
                    x.cached_from = a;
                }
            }
            return r;
        }
        let from = self.head_at(d, t);
        self.access(d, &from, a, b, t)
    }

    /// Writes `[a, b)`, the data arriving from `data_at`, for a command whose work starts
    /// at `t`: when the last sector is on the platter. The cache is dropped (the drive
    /// keeps no written data, so nothing it serves can be stale).
    pub fn write(&mut self, d: &Drive, a: u64, b: u64, t: f64, data_at: f64) -> f64 {
        assert!(
            a < b && b <= d.sectors(),
            "write {a}..{b} outside the drive"
        );
        let from = self.head_at(d, t);
        let to = d.place(a);
        let ready = (t + d.seek_ns(&from, &to)).max(data_at);
        let start = d.next_pass(&to, self.phase, ready);
        let end = d.stream_end(self.phase, a, start, b);
        self.ra = None;
        self.head = b - 1;
        end
    }

    /// Moves the head from `from` to `a` and streams `[a, b)` off the platter; the
    /// read-ahead then runs on from `b`.
    fn access(&mut self, d: &Drive, from: &Place, a: u64, b: u64, t: f64) -> ReadTiming {
        let to = d.place(a);
        let start = d.next_pass(&to, self.phase, t + d.seek_ns(from, &to));
        let last = d.stream_end(self.phase, a, start, b);
        let (_, anchor, anchor_t) = d.stream_at(self.phase, a, start, last, b);
        self.ra = Some(ReadAhead {
            cached_from: a,
            anchor,
            anchor_t,
            stop: (b + d.segment_sectors()).min(d.sectors()),
        });
        ReadTiming {
            first: start + d.sector_ns(&to),
            last,
            hit: false,
        }
    }

    /// Where the head is at `t`: on the stream's current sector while it runs, else where
    /// it stopped.
    fn head_at(&mut self, d: &Drive, t: f64) -> Place {
        if let Some(ra) = self.ra {
            let (at, _, _) = d.stream_at(self.phase, ra.anchor, ra.anchor_t, t, ra.stop);
            self.head = at.min(d.sectors() - 1);
        }
        d.place(self.head)
    }
}
