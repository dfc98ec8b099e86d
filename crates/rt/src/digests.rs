//! Digests a shared buffer remembers of its own bytes (the checksum tags of the 4 KiB
//! blocks a write carries): a mirror writes the same bytes to every copy, and each copy's
//! member would otherwise compute the same tags again. The bytes of a shared buffer (`SharedBuf`)
//! cannot change while a read-only window over them is out, and a digest is remembered only
//! by the holder of such a window; the buffer forgets them all when an exclusive window (the
//! only way to write) is lent, and when the buffer goes back to the pool.
//!
//! What a digest is, is the caller's: a `kind` (algorithm) and a block size key them, and
//! this module only keeps and finds them.

use smallvec::SmallVec;

/// Runs kept per buffer: a mirror's write has one per window; more are dropped oldest first.
const RUNS: usize = 4;

/// Digests of consecutive `block`-byte blocks from buffer byte `start`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    start: usize,
    block: usize,
    kind: u32,
    values: Vec<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct Digests {
    runs: SmallVec<[Run; RUNS]>,
}

impl Digests {
    pub(crate) fn clear(&mut self) {
        self.runs.clear();
    }

    /// The digests of `n` blocks from buffer byte `start`, if one run holds them all.
    pub(crate) fn find(&self, start: usize, block: usize, kind: u32, n: usize) -> Option<&[u32]> {
        self.runs.iter().find_map(|r| {
            if r.kind != kind || r.block != block || start < r.start {
                return None;
            }
            let skip = start - r.start;
            if !skip.is_multiple_of(block) {
                return None;
            }
            r.values.get(skip / block..skip / block + n)
        })
    }

    /// Remembers the digests of the blocks from buffer byte `start`, replacing a run that
    /// starts there (its bytes are the same: they cannot have changed while remembered).
    pub(crate) fn keep(&mut self, start: usize, block: usize, kind: u32, values: &[u32]) {
        debug_assert!(block > 0, "a block has bytes");
        self.runs
            .retain(|r| !(r.start == start && r.block == block && r.kind == kind));
        // The oldest run's vector is reused when the runs are full: no allocation then.
        let mut kept = if self.runs.len() == RUNS {
            self.runs.remove(0).values
        } else {
            Vec::new()
        };
        kept.clear();
        kept.extend_from_slice(values);
        self.runs.push(Run {
            start,
            block,
            kind,
            values: kept,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_only_for_the_same_kind_block_size_and_alignment() {
        let mut d = Digests::default();
        d.keep(4096, 4096, 1, &[10, 11, 12, 13]);
        assert_eq!(d.find(4096, 4096, 1, 4), Some(&[10, 11, 12, 13][..]));
        assert_eq!(d.find(8192, 4096, 1, 2), Some(&[11, 12][..]));
        assert_eq!(d.find(8192, 4096, 1, 4), None, "past the run");
        assert_eq!(d.find(0, 4096, 1, 1), None, "before the run");
        assert_eq!(
            d.find(4608, 4096, 1, 1),
            None,
            "blocks not aligned with the run's"
        );
        assert_eq!(d.find(4096, 4096, 2, 1), None, "another kind");
        assert_eq!(d.find(4096, 512, 1, 1), None, "another block size");
        d.clear();
        assert!(d.runs.is_empty());
        assert_eq!(d.find(4096, 4096, 1, 1), None);
    }

    #[test]
    fn runs_are_bounded_and_replaced_where_they_start() {
        let mut d = Digests::default();
        for k in 0..(RUNS + 3) {
            d.keep(k * 65536, 4096, 1, &[k as u32]);
        }
        assert_eq!(d.runs.len(), RUNS);
        assert_eq!(d.find(0, 4096, 1, 1), None, "the oldest went first");
        let last = (RUNS + 2) * 65536;
        assert_eq!(d.find(last, 4096, 1, 1), Some(&[(RUNS + 2) as u32][..]));
        d.keep(last, 4096, 1, &[7, 8]);
        assert_eq!(d.runs.len(), RUNS);
        assert_eq!(d.find(last, 4096, 1, 2), Some(&[7, 8][..]));
    }
}
