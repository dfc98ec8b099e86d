//! Gathering of the positioned reads and writes a thread queues for its ring: contiguous
//! ones on the same file, in the same direction, go to the kernel as one vectored
//! operation.
//!
//! Seed 002 lists "lost write clustering" among the costs of a RAID layer: the layers above
//! split a client's sequential stream into requests, and requests into member extents, and
//! nothing joins them again. The driver holds every such operation until it next enters the
//! kernel anyway (see `Driver::park`), so this is where separate requests that meet on a
//! member are put back together. The grouping is pure bookkeeping on numbers; the driver
//! builds the iovec arrays and splits the completion.

use std::os::fd::RawFd;

use smallvec::SmallVec;

/// The most bytes one gathered operation carries. Past this size an operation's fixed cost
/// is already small beside its copy or transfer, and a larger one would only make the first
/// of its parts wait for the last.
pub(crate) const MAX_BYTES: u64 = 1 << 20;
/// The most iovecs one gathered operation carries (the kernel allows 1024).
pub(crate) const MAX_IOVS: usize = 256;
/// How many of the most recent runs a new operation is compared with. Requests in flight
/// together touch a few members each; a sequential stream meets its predecessor among the
/// last few runs, and the search stays short for random I/O that merges with nothing.
const LOOKBACK: usize = 8;

/// Where a positioned operation reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub fd: RawFd,
    pub write: bool,
    pub offset: u64,
    pub len: u64,
    /// iovecs the operation contributes.
    pub iovs: usize,
}

/// Operations queued together that cover `start..end` of one file in one direction,
/// `parts` in file order.
#[derive(Debug)]
pub(crate) struct Run<P> {
    pub fd: RawFd,
    pub write: bool,
    pub start: u64,
    pub end: u64,
    pub iovs: usize,
    pub parts: SmallVec<[P; 4]>,
}

impl<P> Run<P> {
    /// What the run covers, as one extent.
    fn extent(&self) -> Extent {
        debug_assert!(
            self.start < self.end && !self.parts.is_empty(),
            "a run holds something"
        );
        debug_assert!(self.end - self.start <= MAX_BYTES && self.iovs <= MAX_IOVS);
        Extent {
            fd: self.fd,
            write: self.write,
            offset: self.start,
            len: self.end - self.start,
            iovs: self.iovs,
        }
    }

    /// Whether `e` may go out in one operation with this run (were it adjacent).
    fn fits(&self, e: &Extent) -> bool {
        self.fd == e.fd
            && self.write == e.write
            && self.end - self.start + e.len <= MAX_BYTES
            && self.iovs + e.iovs <= MAX_IOVS
    }
}

/// The queued operations of one thread, grouped into runs.
#[derive(Debug)]
pub(crate) struct Plug<P> {
    runs: Vec<Run<P>>,
    parts: usize,
}

impl<P> Default for Plug<P> {
    fn default() -> Self {
        Plug {
            runs: Vec::new(),
            parts: 0,
        }
    }
}

impl<P> Plug<P> {
    /// Operations queued.
    pub fn len(&self) -> usize {
        self.parts
    }

    pub fn is_empty(&self) -> bool {
        self.parts == 0
    }

    /// Queues `part`, which covers `e`: at the end of a recent run that stops where it
    /// starts, at the front of one that starts where it stops, or as a run of its own. A run
    /// it extends that now meets another recent run is joined with it.
    pub fn add(&mut self, e: Extent, part: P) {
        assert!(e.len > 0 && e.iovs > 0, "empty positioned operation {e:?}");
        self.parts += 1;
        let end = e.offset.checked_add(e.len).expect("extent past 2^64");
        let recent = self.runs.len().saturating_sub(LOOKBACK);
        for i in (recent..self.runs.len()).rev() {
            let run = &mut self.runs[i];
            if !run.fits(&e) {
                continue;
            }
            if run.end == e.offset {
                run.end = end;
                run.iovs += e.iovs;
                run.parts.push(part);
                debug_assert!(run.end - run.start <= MAX_BYTES, "a run fits one operation");
                self.join(i, recent);
                return;
            }
            if end == run.start {
                run.start = e.offset;
                run.iovs += e.iovs;
                run.parts.insert(0, part);
                debug_assert!(run.end - run.start <= MAX_BYTES, "a run fits one operation");
                self.join(i, recent);
                return;
            }
        }
        let mut parts = SmallVec::new();
        parts.push(part);
        self.runs.push(Run {
            fd: e.fd,
            write: e.write,
            start: e.offset,
            end,
            iovs: e.iovs,
            parts,
        });
    }

    /// Joins run `i` with a run among `recent..` that it now meets end to end, if the two
    /// fit in one operation.
    fn join(&mut self, i: usize, recent: usize) {
        let e = self.runs[i].extent();
        let end = e.offset + e.len;
        let Some(j) = (recent..self.runs.len()).find(|&j| {
            let o = &self.runs[j];
            j != i && o.fits(&e) && (o.start == end || o.end == e.offset)
        }) else {
            return;
        };
        let (first, second) = if self.runs[j].start == end {
            (i, j)
        } else {
            (j, i)
        };
        let later = self.runs.remove(second);
        let first = if second < first { first - 1 } else { first };
        let run = &mut self.runs[first];
        debug_assert_eq!(run.end, later.start, "joined runs meet end to end");
        run.end = later.end;
        run.iovs += later.iovs;
        run.parts.extend(later.parts);
        debug_assert!(run.iovs <= MAX_IOVS && run.end - run.start <= MAX_BYTES);
    }

    /// Takes every run out, leaving the plug empty.
    pub fn take(&mut self) -> Vec<Run<P>> {
        debug_assert_eq!(
            self.runs.iter().map(|r| r.parts.len()).sum::<usize>(),
            self.parts,
            "every queued operation is in one run"
        );
        self.parts = 0;
        std::mem::take(&mut self.runs)
    }

    /// Gives back an emptied vector from [`Plug::take`], so the next round reuses its
    /// storage (kept only when nothing was queued meanwhile).
    pub fn give_back(&mut self, mut runs: Vec<Run<P>>) {
        runs.clear();
        if self.runs.is_empty() && self.runs.capacity() < runs.capacity() {
            self.runs = runs;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ext(fd: RawFd, write: bool, offset: u64, len: u64) -> Extent {
        Extent {
            fd,
            write,
            offset,
            len,
            iovs: 1,
        }
    }

    #[test]
    fn a_sequential_stream_becomes_one_run_in_order() {
        let mut p = Plug::default();
        for i in 0..16u64 {
            p.add(ext(3, true, i * 4096, 4096), i);
        }
        assert_eq!(p.len(), 16);
        let runs = p.take();
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].start, runs[0].end), (0, 65536));
        assert_eq!(runs[0].parts.to_vec(), (0..16).collect::<Vec<_>>());
        assert!(p.is_empty());
    }

    #[test]
    fn a_predecessor_queued_later_goes_to_the_front() {
        let mut p = Plug::default();
        p.add(ext(3, false, 8192, 4096), 'b');
        p.add(ext(3, false, 4096, 4096), 'a');
        p.add(ext(3, false, 12288, 4096), 'c');
        let runs = p.take();
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].start, runs[0].end), (4096, 16384));
        assert_eq!(runs[0].parts.to_vec(), vec!['a', 'b', 'c']);
    }

    #[test]
    fn a_part_that_bridges_two_runs_joins_them() {
        // Added after or before the run it extends first: both ways end as one run.
        for order in [['a', 'c', 'b'], ['c', 'a', 'b']] {
            let mut p = Plug::default();
            for name in order {
                let at = (name as u64 - 'a' as u64) * 4096;
                p.add(ext(3, true, at, 4096), name);
            }
            let runs = p.take();
            assert_eq!(runs.len(), 1, "{order:?}");
            assert_eq!((runs[0].start, runs[0].end, runs[0].iovs), (0, 12288, 3));
            assert_eq!(runs[0].parts.to_vec(), vec!['a', 'b', 'c']);
        }
    }

    #[test]
    fn other_files_directions_gaps_and_overlaps_stay_apart() {
        let mut p = Plug::default();
        p.add(ext(3, true, 0, 4096), 0);
        p.add(ext(4, true, 4096, 4096), 1); // another file
        p.add(ext(3, false, 4096, 4096), 2); // a read after a write
        p.add(ext(3, true, 8192, 4096), 3); // a gap
        p.add(ext(3, true, 2048, 4096), 4); // overlaps the first
        p.add(ext(3, true, 0, 4096), 5); // the same extent again
        assert_eq!(p.take().len(), 6);
    }

    #[test]
    fn runs_stop_at_the_size_and_iovec_limits() {
        let mut p = Plug::default();
        let n = 2 * MAX_BYTES / 65536;
        for i in 0..n {
            p.add(ext(3, true, i * 65536, 65536), i);
        }
        let runs = p.take();
        assert_eq!(runs.len(), 2);
        assert!(runs.iter().all(|r| r.end - r.start == MAX_BYTES));

        let mut p = Plug::default();
        for i in 0..(MAX_IOVS as u64 + 1) {
            p.add(ext(3, true, i * 512, 512), i);
        }
        let runs = p.take();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].iovs, MAX_IOVS);
    }

    #[test]
    fn storage_is_reused_only_when_empty() {
        let mut p = Plug::default();
        p.add(ext(3, true, 0, 512), 0);
        p.add(ext(3, true, 4096, 512), 1);
        let runs = p.take();
        let cap = runs.capacity();
        p.give_back(runs);
        assert!(p.runs.capacity() >= cap);
        p.add(ext(3, true, 0, 512), 0);
        let runs = p.take();
        p.add(ext(3, true, 0, 512), 1);
        p.give_back(runs);
        assert_eq!(p.len(), 1, "a run queued meanwhile is kept");
    }

    proptest! {
        /// Whatever arrives, every part comes out exactly once, each run is contiguous in
        /// file order, within the limits, of one file and one direction.
        #[test]
        fn runs_partition_the_parts_contiguously(
            ops in proptest::collection::vec((0..3i32, any::<bool>(), 0u64..64, 1u64..9, 1usize..40), 0..200)
        ) {
            let mut p = Plug::default();
            let mut extents = Vec::new();
            for (i, &(fd, write, block, blocks, iovs)) in ops.iter().enumerate() {
                let e = Extent { fd, write, offset: block * 4096, len: blocks * 4096, iovs };
                extents.push(e);
                p.add(e, i);
            }
            prop_assert_eq!(p.len(), ops.len());
            let mut seen = vec![false; ops.len()];
            for run in p.take() {
                prop_assert!(run.end - run.start <= MAX_BYTES || run.parts.len() == 1);
                prop_assert!(run.iovs <= MAX_IOVS || run.parts.len() == 1);
                let mut at = run.start;
                let mut iovs = 0;
                for &i in &run.parts {
                    let e = extents[i];
                    prop_assert!(!seen[i]);
                    seen[i] = true;
                    prop_assert_eq!((e.fd, e.write, e.offset), (run.fd, run.write, at));
                    at += e.len;
                    iovs += e.iovs;
                }
                prop_assert_eq!(at, run.end);
                prop_assert_eq!(iovs, run.iovs);
            }
            prop_assert!(seen.iter().all(|&s| s));
        }
    }
}
