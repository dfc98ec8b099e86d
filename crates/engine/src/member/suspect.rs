//! The blocks of a checksummed member whose tags are not yet known to match their data
//! (after a crash, after the kernel wrote to the array, on a member that has just joined):
//! sorted, disjoint block ranges. A read there that does not match takes the data's tag
//! instead of reporting it; the set shrinks only from its front, as the pass that re-derives
//! the tags (or a rebuild writing the member in order) moves past it, so however clients
//! read and write in the meantime it never holds more ranges than it started with.

use std::collections::VecDeque;
use std::ops::Range;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Suspect {
    /// Sorted, disjoint, none empty, none touching the next.
    ranges: VecDeque<Range<u64>>,
}

impl Suspect {
    /// Every block of `blocks`.
    pub(crate) fn all(blocks: u64) -> Suspect {
        Suspect::of(std::iter::once(0..blocks))
    }

    /// The blocks of `ranges`, in any order, overlapping or not.
    pub(crate) fn of(ranges: impl IntoIterator<Item = Range<u64>>) -> Suspect {
        let mut v: Vec<Range<u64>> = ranges.into_iter().filter(|r| r.start < r.end).collect();
        v.sort_by_key(|r| r.start);
        let mut out: VecDeque<Range<u64>> = VecDeque::with_capacity(v.len());
        for r in v {
            match out.back_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => out.push_back(r),
            }
        }
        let s = Suspect { ranges: out };
        s.assert_sorted();
        s
    }

    fn assert_sorted(&self) {
        debug_assert!(
            self.ranges.iter().all(|r| r.start < r.end)
                && self
                    .ranges
                    .iter()
                    .zip(self.ranges.iter().skip(1))
                    .all(|(a, b)| a.end < b.start),
            "suspect ranges sorted and apart: {:?}",
            self.ranges
        );
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many blocks are suspect.
    pub(crate) fn blocks(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    pub(crate) fn contains(&self, block: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= block);
        self.ranges.get(i).is_some_and(|r| r.start <= block)
    }

    /// The first suspect range, where the pass goes next.
    pub(crate) fn first(&self) -> Option<Range<u64>> {
        self.ranges.front().cloned()
    }

    /// Blocks `r` are known to match their tags now: what of the set's front they cover
    /// is no longer suspect (elsewhere the set stays as it is, so it never splits).
    pub(crate) fn settle(&mut self, r: Range<u64>) {
        while let Some(front) = self.ranges.front_mut() {
            if r.start > front.start || r.end <= front.start {
                break;
            }
            if r.end >= front.end {
                self.ranges.pop_front();
            } else {
                front.start = r.end;
                break;
            }
        }
        self.assert_sorted();
    }

    /// Only the blocks also in `keep` stay suspect.
    pub(crate) fn narrow(&mut self, keep: &Suspect) {
        let mut out = VecDeque::new();
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < keep.ranges.len() {
            let (a, b) = (&self.ranges[i], &keep.ranges[j]);
            let (start, end) = (a.start.max(b.start), a.end.min(b.end));
            if start < end {
                out.push_back(start..end);
            }
            if a.end < b.end {
                i += 1;
            } else {
                j += 1;
            }
        }
        self.ranges = out;
        self.assert_sorted();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn model(ranges: &[Range<u64>]) -> Vec<bool> {
        let mut m = vec![false; 64];
        for r in ranges {
            for b in r.clone() {
                m[b as usize] = true;
            }
        }
        m
    }

    fn blocks_of(s: &Suspect) -> Vec<bool> {
        (0..64).map(|b| s.contains(b)).collect()
    }

    fn ranges() -> impl Strategy<Value = Vec<Range<u64>>> {
        prop::collection::vec((0u64..64, 0u64..16), 0..8)
            .prop_map(|v| v.into_iter().map(|(s, n)| s..(s + n).min(64)).collect())
    }

    proptest! {
        #[test]
        fn of_holds_exactly_the_union(rs in ranges()) {
            let s = Suspect::of(rs.clone());
            prop_assert_eq!(blocks_of(&s), model(&rs));
            prop_assert_eq!(s.blocks(), model(&rs).iter().filter(|&&b| b).count() as u64);
        }

        #[test]
        fn narrow_is_the_intersection(a in ranges(), b in ranges()) {
            let mut s = Suspect::of(a.clone());
            s.narrow(&Suspect::of(b.clone()));
            let want: Vec<bool> = model(&a).iter().zip(model(&b)).map(|(x, y)| *x && y).collect();
            prop_assert_eq!(blocks_of(&s), want);
        }

        /// Settling removes only blocks of the front it covers, never splits, and a pass
        /// that settles the first range piece by piece empties the set.
        #[test]
        fn settle_shrinks_from_the_front(rs in ranges(), at in 0u64..64, n in 0u64..20) {
            let mut s = Suspect::of(rs.clone());
            let before = s.ranges.len();
            let was = blocks_of(&s);
            s.settle(at..at + n);
            prop_assert!(s.ranges.len() <= before);
            for (b, (&then, now)) in was.iter().zip(blocks_of(&s)).enumerate() {
                prop_assert!(!now || then, "block {b} became suspect");
                if then && !now {
                    prop_assert!((at..at + n).contains(&(b as u64)), "block {b} left though not settled");
                }
            }
            let mut steps = 0;
            while let Some(f) = s.first() {
                s.settle(f.start..(f.start + 3).min(f.end));
                steps += 1;
                prop_assert!(steps < 64, "the pass ends");
            }
            prop_assert!(s.is_empty());
        }
    }

    #[test]
    fn a_read_in_the_middle_does_not_split() {
        let mut s = Suspect::all(100);
        s.settle(10..20);
        assert_eq!(s.blocks(), 100);
        s.settle(0..30);
        assert_eq!(s.first(), Some(30..100));
        assert!(!s.contains(29) && s.contains(30) && s.contains(99) && !s.contains(100));
    }
}
