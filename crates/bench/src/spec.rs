//! Access specifications as Iometer has them, and the requests they make: pure numbers,
//! no I/O. A spec says how big each request is, how many read, how many go somewhere
//! random rather than on from the last, how they are aligned, and whether they come in
//! bursts with a pause between.

use raidd_admin::size;

/// The request sizes of a sweep from `1K,4K,64K` (a list) or `1K..1M` (every power of two
/// between, both included): whole sectors, at most 64 MiB, without repeats, in order given.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, String> {
    let one = |s: &str| -> Result<u64, String> {
        let b = size::parse_sector_multiple(s.trim())?;
        if b > 64 << 20 {
            return Err(format!("request size {s:?} is over 64M"));
        }
        Ok(b)
    };
    let sizes = if let Some((lo, hi)) = text.split_once("..") {
        let (lo, hi) = (one(lo)?, one(hi)?);
        if !lo.is_power_of_two() || !hi.is_power_of_two() || lo > hi {
            return Err(format!(
                "{text:?}: a range runs from one power of two up to another (1K..1M)"
            ));
        }
        std::iter::successors(Some(lo), |&s| (s < hi).then_some(s * 2)).collect()
    } else {
        text.split(',').map(one).collect::<Result<Vec<_>, _>>()?
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = sizes.iter().find(|s| !seen.insert(**s)) {
        return Err(format!("request size {} is given twice", size::short(*dup)));
    }
    if sizes.is_empty() || sizes.len() > 64 {
        return Err("give 1 to 64 request sizes".into());
    }
    Ok(sizes)
}

/// A named mix: fio's names for the four pure ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    pub read_pct: u8,
    pub random_pct: u8,
}

impl Mix {
    pub fn parse(s: &str) -> Result<Mix, String> {
        let (read_pct, random_pct) = match s {
            "read" => (100, 0),
            "write" => (0, 0),
            "randread" => (100, 100),
            "randwrite" => (0, 100),
            _ => {
                return Err(format!(
                    "unknown pattern {s:?}: use read, write, randread or randwrite"
                ))
            }
        };
        Ok(Mix {
            read_pct,
            random_pct,
        })
    }

    /// The name of the mix: fio's for the pure ones, `70r/30w-50rnd` style otherwise.
    pub fn name(&self) -> String {
        match (self.read_pct, self.random_pct) {
            (100, 0) => "read".into(),
            (0, 0) => "write".into(),
            (100, 100) => "randread".into(),
            (0, 100) => "randwrite".into(),
            (r, x) => format!("{r}r/{}w-{x}rnd", 100 - r),
        }
    }
}

/// One access specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub bs: u64,
    pub mix: Mix,
    /// Random requests start on multiples of this (whole sectors).
    pub align: u64,
    /// Requests a slot issues back to back before it pauses `delay_ns`.
    pub burst: u32,
    pub delay_ns: u64,
}

/// A deterministic generator (xorshift64*): the same seed, the same requests.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Never zero; seeds close together still start far apart.
        Rng((seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0), without modulo bias worth measuring at 64 bits.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// True with `pct` percent probability.
    pub fn percent(&mut self, pct: u8) -> bool {
        self.below(100) < u64::from(pct)
    }
}

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    pub write: bool,
    pub offset: u64,
}

/// The requests of one worker. A sequential request starts where the worker's last one
/// ended, as Iometer's do; a random one anywhere on the device. A purely sequential worker
/// streams through its own share of the device (each worker its own region), wrapping at
/// its end.
#[derive(Clone, Debug)]
pub struct Stream {
    access: Access,
    size: u64,
    first: u64,
    share: u64,
    /// Where the next sequential request starts, and whether the run it continues is in
    /// the worker's share (it wraps at the share's end) or elsewhere (at the device's).
    cursor: u64,
    in_share: bool,
    rng: Rng,
}

impl Stream {
    /// `None` when the device cannot hold one request per worker.
    pub fn new(access: Access, size: u64, worker: u64, workers: u64, seed: u64) -> Option<Stream> {
        let share = size / workers / access.bs * access.bs;
        if share == 0 || access.align == 0 || size < access.bs {
            return None;
        }
        Some(Stream {
            access,
            size,
            first: worker * share,
            share,
            cursor: worker * share,
            in_share: true,
            rng: Rng::new(seed.wrapping_add(worker.wrapping_mul(0x1000_0001))),
        })
    }

    pub fn next_req(&mut self) -> Req {
        let a = self.access;
        let write = !self.rng.percent(a.mix.read_pct);
        let share_end = self.first + self.share;
        let offset = if self.rng.percent(a.mix.random_pct) {
            let slots = (self.size - a.bs) / a.align + 1;
            let at = self.rng.below(slots) * a.align;
            self.in_share = (self.first..share_end).contains(&at);
            at
        } else {
            let end = if self.in_share { share_end } else { self.size };
            if self.cursor + a.bs > end {
                self.cursor = self.first;
                self.in_share = true;
            }
            self.cursor
        };
        self.cursor = offset + a.bs;
        debug_assert!(offset + a.bs <= self.size);
        Req { write, offset }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_lists_and_power_of_two_ranges() {
        assert_eq!(parse_sizes("1K,2K,4K").unwrap(), [1024, 2048, 4096]);
        assert_eq!(
            parse_sizes("1K..16K").unwrap(),
            [1024, 2048, 4096, 8192, 16384]
        );
        assert_eq!(parse_sizes("4K..4K").unwrap(), [4096]);
        assert_eq!(parse_sizes("512").unwrap(), [512]);
        for bad in [
            "", "1K,,2K", "1000", "3K..8K", "8K..1K", "1K,1K", "128M", "x",
        ] {
            assert!(parse_sizes(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn mixes_name_themselves() {
        for n in ["read", "write", "randread", "randwrite"] {
            assert_eq!(Mix::parse(n).unwrap().name(), n);
        }
        assert_eq!(
            Mix {
                read_pct: 70,
                random_pct: 50
            }
            .name(),
            "70r/30w-50rnd"
        );
        assert!(Mix::parse("trim").is_err());
    }

    fn access(bs: u64, read_pct: u8, random_pct: u8) -> Access {
        Access {
            bs,
            mix: Mix {
                read_pct,
                random_pct,
            },
            align: bs,
            burst: 1,
            delay_ns: 0,
        }
    }

    #[test]
    fn sequential_requests_stream_through_each_workers_share() {
        let size = 10 * 4096;
        let mut a = Stream::new(access(4096, 100, 0), size, 0, 2, 1).unwrap();
        let mut b = Stream::new(access(4096, 100, 0), size, 1, 2, 1).unwrap();
        let got_a: Vec<u64> = (0..7).map(|_| a.next_req().offset / 4096).collect();
        let got_b: Vec<u64> = (0..6).map(|_| b.next_req().offset / 4096).collect();
        assert_eq!(got_a, [0, 1, 2, 3, 4, 0, 1]);
        assert_eq!(got_b, [5, 6, 7, 8, 9, 5]);
        assert!(Stream::new(access(4096, 100, 0), 4096, 0, 2, 1).is_none());
    }

    #[test]
    fn mixes_come_out_in_their_proportions_aligned_and_in_range() {
        let size = 1 << 30;
        let mut a = access(8192, 70, 30);
        a.align = 4096;
        let mut s = Stream::new(a, size, 0, 1, 42).unwrap();
        let (mut writes, mut off_seq) = (0, 0);
        let mut last = None;
        let n = 100_000;
        for _ in 0..n {
            let r = s.next_req();
            assert_eq!(r.offset % 4096, 0);
            assert!(r.offset + 8192 <= size);
            writes += u32::from(r.write);
            if last.is_some_and(|l| r.offset != l + 8192) {
                off_seq += 1;
            }
            last = Some(r.offset);
        }
        let w = f64::from(writes) / f64::from(n);
        assert!((w - 0.30).abs() < 0.01, "{w}");
        // A request leaves the sequence only when it is random itself.
        let jumps = f64::from(off_seq) / f64::from(n);
        assert!((jumps - 0.30).abs() < 0.01, "{jumps}");
    }

    #[test]
    fn the_same_seed_gives_the_same_requests() {
        let a = access(4096, 50, 50);
        let run = |seed| {
            let mut s = Stream::new(a, 1 << 24, 0, 1, seed).unwrap();
            (0..1000).map(|_| s.next_req()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
