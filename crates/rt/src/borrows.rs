//! The borrow table of a shared buffer: which byte ranges are lent out as windows, shared
//! (read-only) or exclusive. Pure bookkeeping; `buf.rs` holds one per buffer under a lock.
//!
//! A shared window conflicts only with an exclusive one, so while none is lent (a write
//! request's buffer lends only shared windows: dozens for a large write, one per chunk it
//! feeds to parity and one per member write) lending one is a push, not a scan of every
//! window out. Windows tend to come back in the reverse order of lending (a parity source
//! is dropped before the member writes lent after it), so returns search from the newest.

use std::ops::Range;

use smallvec::SmallVec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BorrowKind {
    Shared,
    Exclusive,
}

#[derive(Debug, Clone)]
struct Borrow {
    range: Range<usize>,
    kind: BorrowKind,
}

#[derive(Debug, Default)]
pub(crate) struct Borrows {
    /// Every window lent out, oldest first.
    list: SmallVec<[Borrow; 8]>,
    /// How many entries of `list` are exclusive.
    exclusive: usize,
}

impl Borrows {
    /// Lends `range` as `kind`, or returns the range of a window it would conflict with.
    #[inline]
    pub(crate) fn lend(
        &mut self,
        range: Range<usize>,
        kind: BorrowKind,
    ) -> Result<(), Range<usize>> {
        debug_assert!(range.start <= range.end, "inverted range {range:?}");
        if kind == BorrowKind::Exclusive || self.exclusive > 0 {
            let conflict = self.list.iter().find(|b| {
                let overlaps = b.range.start < range.end && range.start < b.range.end;
                overlaps && (kind == BorrowKind::Exclusive || b.kind == BorrowKind::Exclusive)
            });
            if let Some(b) = conflict {
                return Err(b.range.clone());
            }
        }
        if kind == BorrowKind::Exclusive {
            self.exclusive += 1;
        }
        self.list.push(Borrow { range, kind });
        debug_assert!(
            self.exclusive <= self.list.len(),
            "exclusive windows are lent ones"
        );
        Ok(())
    }

    /// Replaces the exclusive window `range` by its two halves at `mid`.
    pub(crate) fn split_exclusive(&mut self, range: &Range<usize>, mid: usize) {
        assert!(
            range.start <= mid && mid <= range.end,
            "split {range:?} at {mid}"
        );
        let pos = self
            .find(range, BorrowKind::Exclusive)
            .expect("split a window that was never lent");
        self.list[pos].range = range.start..mid;
        self.list.push(Borrow {
            range: mid..range.end,
            kind: BorrowKind::Exclusive,
        });
        self.exclusive += 1;
    }

    /// Replaces the exclusive windows `left` and `right`, which meet end to start, by one over
    /// both (the inverse of a split).
    pub(crate) fn join_exclusive(&mut self, left: &Range<usize>, right: &Range<usize>) {
        assert_eq!(left.end, right.start, "joining windows that do not meet");
        let r = self
            .find(right, BorrowKind::Exclusive)
            .expect("joined a window that was never lent");
        self.list.swap_remove(r);
        let l = self
            .find(left, BorrowKind::Exclusive)
            .expect("joined a window that was never lent");
        self.list[l].range = left.start..right.end;
        self.exclusive -= 1;
    }

    /// Takes back a window lent as `kind` over exactly `range`.
    #[inline]
    pub(crate) fn give_back(&mut self, range: &Range<usize>, kind: BorrowKind) {
        let pos = self
            .find(range, kind)
            .expect("released a borrow that was never taken");
        self.list.swap_remove(pos);
        if kind == BorrowKind::Exclusive {
            self.exclusive -= 1;
        }
        debug_assert!(
            self.exclusive <= self.list.len(),
            "exclusive windows are lent ones"
        );
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        debug_assert!(self.exclusive <= self.list.len());
        self.list.is_empty()
    }

    #[inline]
    fn find(&self, range: &Range<usize>, kind: BorrowKind) -> Option<usize> {
        self.list
            .iter()
            .rposition(|b| b.range == *range && b.kind == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use BorrowKind::{Exclusive, Shared};

    #[test]
    fn shared_windows_overlap_exclusive_ones_do_not() {
        let mut b = Borrows::default();
        b.lend(0..100, Shared).unwrap();
        b.lend(50..150, Shared).unwrap();
        assert_eq!(b.lend(140..200, Exclusive), Err(50..150));
        b.lend(150..200, Exclusive).unwrap();
        assert_eq!(b.lend(199..210, Shared), Err(150..200));
        assert_eq!(b.lend(160..170, Exclusive), Err(150..200));
        b.split_exclusive(&(150..200), 170);
        b.give_back(&(150..170), Exclusive);
        b.lend(160..170, Shared).unwrap();
        assert_eq!(b.lend(165..175, Shared), Err(170..200));
        for (r, k) in [
            (0..100, Shared),
            (50..150, Shared),
            (170..200, Exclusive),
            (160..170, Shared),
        ] {
            b.give_back(&r, k);
        }
        assert!(b.is_empty());
    }

    #[test]
    #[should_panic(expected = "never taken")]
    fn returning_the_wrong_kind_panics() {
        let mut b = Borrows::default();
        b.lend(0..10, Shared).unwrap();
        b.give_back(&(0..10), Exclusive);
    }

    /// A step of the property test: lend, split or return a window.
    #[derive(Debug, Clone)]
    enum Op {
        Lend(usize, usize, bool),
        Split(usize, usize),
        Join(usize),
        Return(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..64, 0usize..24, any::<bool>()).prop_map(|(s, n, x)| Op::Lend(s, n, x)),
            (any::<usize>(), any::<usize>()).prop_map(|(i, m)| Op::Split(i, m)),
            any::<usize>().prop_map(Op::Join),
            any::<usize>().prop_map(Op::Return),
        ]
    }

    proptest! {
        /// Against a model that scans every window for every lend: the same answers (and
        /// the same conflicting window where only one conflicts), whatever the order of
        /// lends, splits and returns.
        #[test]
        fn lends_like_a_full_scan(ops in proptest::collection::vec(op(), 1..200)) {
            let mut table = Borrows::default();
            let mut model: Vec<(Range<usize>, BorrowKind)> = Vec::new();
            for op in ops {
                match op {
                    Op::Lend(s, n, x) => {
                        let (r, k) = (s..s + n, if x { Exclusive } else { Shared });
                        let conflicts: Vec<_> = model
                            .iter()
                            .filter(|(m, mk)| {
                                m.start < r.end && r.start < m.end && (k == Exclusive || *mk == Exclusive)
                            })
                            .collect();
                        match table.lend(r.clone(), k) {
                            Ok(()) => {
                                prop_assert!(conflicts.is_empty(), "{r:?} {k:?} lent over {conflicts:?}");
                                model.push((r, k));
                            }
                            Err(held) => {
                                prop_assert!(
                                    conflicts.iter().any(|(m, _)| *m == held),
                                    "{r:?} {k:?} refused for {held:?}, conflicts {conflicts:?}"
                                );
                            }
                        }
                    }
                    Op::Split(i, m) => {
                        let ex: Vec<usize> = (0..model.len()).filter(|&j| model[j].1 == Exclusive).collect();
                        if ex.is_empty() {
                            continue;
                        }
                        let j = ex[i % ex.len()];
                        let r = model[j].0.clone();
                        let mid = r.start + m % (r.len() + 1);
                        table.split_exclusive(&r, mid);
                        model[j].0 = r.start..mid;
                        model.push((mid..r.end, Exclusive));
                    }
                    Op::Join(i) => {
                        // Exclusive windows that meet end to start (as a split leaves them).
                        let pairs: Vec<(usize, usize)> = (0..model.len())
                            .flat_map(|a| (0..model.len()).map(move |b| (a, b)))
                            .filter(|&(a, b)| {
                                a != b
                                    && model[a].1 == Exclusive
                                    && model[b].1 == Exclusive
                                    && model[a].0.end == model[b].0.start
                            })
                            .collect();
                        if pairs.is_empty() {
                            continue;
                        }
                        let (a, b) = pairs[i % pairs.len()];
                        let (l, r) = (model[a].0.clone(), model[b].0.clone());
                        table.join_exclusive(&l, &r);
                        model[a].0 = l.start..r.end;
                        model.swap_remove(b);
                    }
                    Op::Return(i) => {
                        if model.is_empty() {
                            continue;
                        }
                        let (r, k) = model.swap_remove(i % model.len());
                        table.give_back(&r, k);
                    }
                }
                prop_assert_eq!(table.list.len(), model.len());
                prop_assert_eq!(
                    table.exclusive,
                    model.iter().filter(|(_, k)| *k == Exclusive).count()
                );
            }
        }
    }
}
