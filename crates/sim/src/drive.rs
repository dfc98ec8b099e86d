//! One drive's mechanics as numbers: its geometry (zones of tracks, heads, skew), where
//! each sector passes under the head in time, and how long a seek takes. Pure functions of
//! the model; the drive's changing state (the head, the read-ahead) lives in `disk.rs`.
//!
//! Times are nanoseconds as `f64`: every operation is IEEE arithmetic and `sqrt`, which is
//! correctly rounded, so the same model and requests give the same times on any machine.

use serde::Deserialize;

/// A drive as a model file gives it (TOML, or one of the built-in models).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriveSpec {
    pub name: String,
    /// What the model stands for and which of its values are assumptions.
    #[serde(default)]
    pub note: String,
    pub rpm: f64,
    /// Recording surfaces: tracks per cylinder.
    pub heads: u32,
    /// From the outer edge inwards; transfer rate falls with sectors per track.
    pub zones: Vec<ZoneSpec>,
    /// Seek curve: one cylinder, the mean over random pairs of cylinders, the full stroke.
    pub seek_track_ms: f64,
    pub seek_average_ms: f64,
    pub seek_full_ms: f64,
    /// Time to switch from one head to the next in a cylinder (head skew covers it, as the
    /// track skew covers a one-cylinder seek).
    pub head_switch_ms: f64,
    /// Fixed cost of every command: host driver, controller set-up, drive firmware.
    pub overhead_us: f64,
    /// The most one command moves (256 sectors for ATA's 8-bit sector count).
    pub max_transfer_sectors: u32,
    /// Read-ahead segment: after a read the drive goes on reading into its cache until this
    /// much lies there unread by the host, then stops.
    pub segment_kib: u64,
    /// The drive's interface rate (UDMA/66: 66).
    pub interface_mb_s: f64,
    /// Writes complete when their data reaches the drive (true) or the platter (false).
    #[serde(default)]
    pub write_cache: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ZoneSpec {
    pub cylinders: u32,
    pub sectors_per_track: u32,
}

/// One zone, placed: where it starts, and its skews in sectors.
#[derive(Clone, Debug, PartialEq)]
struct Zone {
    first_lba: u64,
    first_cyl: u32,
    cylinders: u32,
    spt: u32,
    head_skew: u32,
    cyl_skew: u32,
    /// Angle (revolutions) at which the zone's first track starts.
    base: f64,
}

/// Where a sector lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    zone: usize,
    pub cylinder: u32,
    pub head: u32,
    /// Sector within its track.
    pub sector: u32,
    /// LBA of the track's first sector.
    pub track_lba: u64,
    pub spt: u32,
}

/// A validated model with its geometry worked out.
#[derive(Clone, Debug, PartialEq)]
pub struct Drive {
    spec: DriveSpec,
    zones: Vec<Zone>,
    sectors: u64,
    cylinders: u32,
    rev_ns: f64,
    /// Seek curve beyond one cylinder: `track + a·√x + b·x`, x the distance as a share of
    /// the full stroke.
    seek_a: f64,
    seek_b: f64,
}

pub const SECTOR: u64 = 512;
const NS_PER_MS: f64 = 1e6;

/// `x` modulo 1, in [0, 1).
fn frac(x: f64) -> f64 {
    x - x.floor()
}

impl Drive {
    pub fn new(spec: DriveSpec) -> Result<Drive, String> {
        check_spec(&spec)?;
        let rev_ns = 60e9 / spec.rpm;
        let heads = spec.heads;
        let mut zones = Vec::with_capacity(spec.zones.len());
        let (mut lba, mut cyl, mut angle) = (0u64, 0u32, 0.0f64);
        for z in &spec.zones {
            let st = rev_ns / f64::from(z.sectors_per_track);
            // The fewest whole sectors that more than cover the switch: the next track's
            // first sector arrives just after the head does, with part of a sector to spare
            // (a skew exactly as long as the switch would lose a revolution to rounding).
            let skew =
                |ms: f64| ((ms * NS_PER_MS / st).floor() as u32 + 1).min(z.sectors_per_track - 1);
            let zone = Zone {
                first_lba: lba,
                first_cyl: cyl,
                cylinders: z.cylinders,
                spt: z.sectors_per_track,
                head_skew: skew(spec.head_switch_ms),
                cyl_skew: skew(spec.seek_track_ms),
                base: 0.0,
            };
            // A zone's first track follows the last of the one before as any next cylinder
            // does: one cylinder skew after that track's start.
            let base = frac(angle + f64::from(zone.cyl_skew) / f64::from(zone.spt));
            let zone = Zone { base, ..zone };
            let last = (u64::from(z.cylinders) * u64::from(heads) - 1) as u32;
            angle = zone_track_angle(&zone, heads, last);
            lba += u64::from(z.cylinders) * u64::from(heads) * u64::from(z.sectors_per_track);
            cyl += z.cylinders;
            zones.push(zone);
        }
        let (t, avg, full) = (
            spec.seek_track_ms * NS_PER_MS,
            spec.seek_average_ms * NS_PER_MS,
            spec.seek_full_ms * NS_PER_MS,
        );
        // For two cylinders drawn uniformly the distance x (a share of the stroke) has
        // density 2(1 - x): E[√x] = 8/15 and E[x] = 1/3. The curve through one cylinder and
        // the full stroke whose mean is the average seek has a = 5 (avg - t - (full - t)/3).
        let seek_a = 5.0 * (avg - t - (full - t) / 3.0);
        let seek_b = full - t - seek_a;
        if seek_a < 0.0 || seek_a / 2.0 + seek_b < 0.0 {
            return Err(format!(
                "{}: no rising seek curve has track {} ms, average {} ms and full stroke {} ms",
                spec.name, spec.seek_track_ms, spec.seek_average_ms, spec.seek_full_ms
            ));
        }
        Ok(Drive {
            sectors: lba,
            cylinders: cyl,
            zones,
            rev_ns,
            seek_a,
            seek_b,
            spec,
        })
    }

    pub fn spec(&self) -> &DriveSpec {
        &self.spec
    }

    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    pub fn bytes(&self) -> u64 {
        self.sectors * SECTOR
    }

    pub fn revolution_ns(&self) -> f64 {
        self.rev_ns
    }

    pub fn overhead_ns(&self) -> f64 {
        self.spec.overhead_us * 1e3
    }

    pub fn segment_sectors(&self) -> u64 {
        self.spec.segment_kib * 1024 / SECTOR
    }

    pub fn max_transfer_sectors(&self) -> u64 {
        u64::from(self.spec.max_transfer_sectors)
    }

    /// Bytes per nanosecond across the drive's interface.
    pub fn interface_rate(&self) -> f64 {
        self.spec.interface_mb_s * 1e-3
    }

    /// Where `lba` (below [`Drive::sectors`]) lies.
    pub fn place(&self, lba: u64) -> Place {
        assert!(
            lba < self.sectors,
            "{}: LBA {lba} beyond the drive",
            self.spec.name
        );
        let zone = self.zones.partition_point(|z| z.first_lba <= lba) - 1;
        let z = &self.zones[zone];
        let within = lba - z.first_lba;
        let track = within / u64::from(z.spt);
        let heads = u64::from(self.spec.heads);
        Place {
            zone,
            cylinder: z.first_cyl + (track / heads) as u32,
            head: (track % heads) as u32,
            sector: (within % u64::from(z.spt)) as u32,
            track_lba: z.first_lba + track * u64::from(z.spt),
            spt: z.spt,
        }
    }

    /// Nanoseconds one sector takes to pass under the head in `p`'s zone.
    pub fn sector_ns(&self, p: &Place) -> f64 {
        self.rev_ns / f64::from(p.spt)
    }

    /// The angle (revolutions, fixed to the platter) at which `p`'s sector starts.
    pub fn angle(&self, p: &Place) -> f64 {
        let z = &self.zones[p.zone];
        let track = (p.cylinder - z.first_cyl) * self.spec.heads + p.head;
        frac(zone_track_angle(z, self.spec.heads, track) + f64::from(p.sector) / f64::from(p.spt))
    }

    /// The first moment at or after `t` when `p`'s sector starts passing under the head of a
    /// drive whose platter stood at angle `phase` at time 0.
    pub fn next_pass(&self, p: &Place, phase: f64, t: f64) -> f64 {
        let now = frac(t / self.rev_ns + phase);
        t + frac(self.angle(p) - now) * self.rev_ns
    }

    /// Time to move the head from `from` to `to`.
    pub fn seek_ns(&self, from: &Place, to: &Place) -> f64 {
        let d = from.cylinder.abs_diff(to.cylinder);
        if d == 0 {
            return if from.head == to.head {
                0.0
            } else {
                self.spec.head_switch_ms * NS_PER_MS
            };
        }
        let t = self.spec.seek_track_ms * NS_PER_MS;
        if self.cylinders <= 2 {
            return t;
        }
        // From one cylinder (x = 0) to the full stroke (x = 1).
        let x = f64::from(d - 1) / f64::from(self.cylinders - 2);
        t + self.seek_a * x.sqrt() + self.seek_b * x
    }

    /// Reads sectors `[from, to)` as one stream whose first sector starts under the head at
    /// `t0`: when the last of them has passed. Each new track costs its switch and the wait
    /// for its first sector (the skew).
    pub fn stream_end(&self, phase: f64, from: u64, t0: f64, to: u64) -> f64 {
        assert!(from <= to && to <= self.sectors);
        let mut t = t0;
        let mut lba = from;
        while lba < to {
            let p = self.place(lba);
            let track_end = p.track_lba + u64::from(p.spt);
            let n = track_end.min(to) - lba;
            t += n as f64 * self.sector_ns(&p);
            lba += n;
            if lba < to {
                t = self.next_track(phase, &p, t);
            }
        }
        t
    }

    /// The stream of [`Drive::stream_end`], asked the other way: how many sectors from
    /// `from` have wholly passed by time `t` (at most `limit`), and when the track holding
    /// the next one starts (its first sector under the head, or `from`'s start): a place to
    /// restart the reckoning from, so later questions walk few tracks.
    pub fn stream_at(&self, phase: f64, from: u64, t0: f64, t: f64, limit: u64) -> (u64, u64, f64) {
        let (mut lba, mut start) = (from, t0);
        let (mut anchor, mut anchor_t) = (from, t0);
        while lba < limit {
            let p = self.place(lba);
            let st = self.sector_ns(&p);
            let track_end = (p.track_lba + u64::from(p.spt)).min(limit);
            let end = start + (track_end - lba) as f64 * st;
            if end > t {
                let done = if t <= start {
                    0
                } else {
                    (((t - start) / st).floor() as u64).min(track_end - lba)
                };
                return (lba + done, anchor, anchor_t);
            }
            lba = track_end;
            if lba < limit {
                start = self.next_track(phase, &p, end);
                anchor = lba;
                anchor_t = start;
            }
        }
        (limit, anchor, anchor_t)
    }

    /// After the last sector of `p`'s track passes at `t`: when the next track's first sector
    /// starts under the head.
    fn next_track(&self, phase: f64, p: &Place, t: f64) -> f64 {
        let next = self.place(p.track_lba + u64::from(p.spt));
        let ready = t + self.seek_ns(p, &next);
        self.next_pass(&next, phase, ready)
    }

    /// The rate a long sequential read sustains in the zone holding `lba`, counting the
    /// skew of every track switch: bytes per nanosecond.
    pub fn zone_rate(&self, lba: u64) -> f64 {
        let p = self.place(lba);
        let z = &self.zones[p.zone];
        let heads = f64::from(self.spec.heads);
        let skews = (heads - 1.0) * f64::from(z.head_skew) + f64::from(z.cyl_skew);
        let per_cyl = heads * f64::from(z.spt);
        per_cyl * SECTOR as f64 / ((per_cyl + skews) * self.sector_ns(&p))
    }
}

/// The angle at which track `track` (counted from the zone's first) starts: each head switch
/// before it adds a head skew, each cylinder switch a cylinder skew.
fn zone_track_angle(z: &Zone, heads: u32, track: u32) -> f64 {
    let (c, h) = (u64::from(track / heads), u64::from(track % heads));
    let skewed =
        (c * u64::from(heads - 1) + h) * u64::from(z.head_skew) + c * u64::from(z.cyl_skew);
    frac(z.base + (skewed % u64::from(z.spt)) as f64 / f64::from(z.spt))
}

fn check_spec(s: &DriveSpec) -> Result<(), String> {
    let bad = |what: &str| Err(format!("drive model {:?}: {what}", s.name));
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(s.rpm) || s.rpm > 100_000.0 {
        return bad("rpm must be above 0 and at most 100000");
    }
    if s.heads == 0 || s.heads > 255 {
        return bad("heads must be 1 to 255");
    }
    if s.zones.is_empty() || s.zones.len() > 1024 {
        return bad("give 1 to 1024 zones");
    }
    let mut sectors: u64 = 0;
    for z in &s.zones {
        if z.cylinders == 0
            || z.cylinders > 1 << 20
            || !(1..=1 << 16).contains(&z.sectors_per_track)
        {
            return bad("a zone needs 1 to 1048576 cylinders and 1 to 65536 sectors per track");
        }
        sectors += u64::from(z.cylinders) * u64::from(s.heads) * u64::from(z.sectors_per_track);
    }
    if sectors > 1 << 40 {
        return bad("more than 512 TiB");
    }
    let times = [
        s.seek_track_ms,
        s.seek_average_ms,
        s.seek_full_ms,
        s.head_switch_ms,
    ];
    if times
        .iter()
        .any(|&t| !t.is_finite() || !(0.0..=10_000.0).contains(&t))
    {
        return bad("seek and switch times must be 0 to 10000 ms");
    }
    if !(s.seek_track_ms <= s.seek_average_ms && s.seek_average_ms <= s.seek_full_ms) {
        return bad("seeks must grow: track <= average <= full stroke");
    }
    if !s.overhead_us.is_finite() || !(0.0..=1e6).contains(&s.overhead_us) {
        return bad("overhead_us must be 0 to 1000000");
    }
    if s.max_transfer_sectors == 0 || s.max_transfer_sectors > 1 << 16 {
        return bad("max_transfer_sectors must be 1 to 65536");
    }
    if s.segment_kib > 1 << 20 {
        return bad("segment_kib must be at most 1 GiB");
    }
    if !positive(s.interface_mb_s) || s.interface_mb_s > 1e6 {
        return bad("interface_mb_s must be above 0 and at most 1000000");
    }
    Ok(())
}
