//! Starting a write journal, as md's `r5l_recovery_log` does: the log is read from the
//! superblock's tail while each unit is whole and next in sequence, and each unit is
//! replayed in order: a row logged with its parity has its data and parity pages written
//! straight to the slots (which makes the row consistent whatever the stop tore, degraded
//! or not); a data page logged without parity (md's write-back) is written through the
//! array, which computes its parity. Then the log starts afresh past what was read: an
//! empty meta block there with a sequence number well past the last (so no stale unit
//! further on can pass for the next), and the tail moved to it.
//!
//! The plan for a unit ([`plan_unit`]) is pure; [`replay`] is the I/O around it.

use std::collections::BTreeMap;

use raidd_layout::ParityGeometry;
use raidd_md::journal::scan::{check_pages, Cursor, End};
use raidd_md::journal::{MetaBlock, Payload, BLOCK, BLOCK_SECTORS};
use raidd_rt::AlignedBuf;
use smallvec::SmallVec;

/// One page for slot `role` at member sector `sector`.
pub(crate) type PageWrite = (usize, u64, Vec<u8>);

/// What recovery writes for one unit, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Replay {
    /// A row with its parity: every page straight to its slot.
    Row(Vec<PageWrite>),
    /// A data page at array sector `sector` logged without parity: written through the
    /// array.
    Data { sector: u64, page: Vec<u8> },
    /// A payload md never writes (a location off the array or not on a page, parity pages
    /// the level does not have): said in the log and left.
    Skip { payload: usize, why: &'static str },
}

/// The writes that replay `meta`'s unit (`pages` in payload order) on an array of shape
/// `pg`.
pub(crate) fn plan_unit(pg: &ParityGeometry, meta: &MetaBlock, pages: Vec<Vec<u8>>) -> Vec<Replay> {
    let chunk = u64::from(pg.chunk_sectors);
    let member_sectors = pg.array_sectors() / pg.data_members() as u64;
    let parity_pages = pg.members - pg.data_members();
    let mut out = Vec::new();
    // Data pages waiting for their row's parity, by the row's member sector.
    let mut rows: BTreeMap<u64, SmallVec<[(u64, PageWrite); 4]>> = BTreeMap::new();
    let mut pages = pages.into_iter();
    for (i, p) in meta.payloads.iter().enumerate() {
        let mine: SmallVec<[Vec<u8>; 2]> = (0..p.pages()).filter_map(|_| pages.next()).collect();
        debug_assert_eq!(
            mine.len() as u64,
            p.pages(),
            "a page for each the payload names"
        );
        match p {
            Payload::Data { location, .. } => {
                let a = *location;
                if !a.is_multiple_of(BLOCK_SECTORS) || a + BLOCK_SECTORS > pg.array_sectors() {
                    out.push(Replay::Skip {
                        payload: i,
                        why: "a data page off the array or not on a 4 KiB block",
                    });
                    continue;
                }
                let (stripe, dd, off) = pg.locate(a);
                debug_assert_eq!(pg.array_sector(stripe, dd, off), a, "located where it lies");
                let role = pg.stripe_map(stripe).data[dd];
                let row = pg.member_sector(stripe, off);
                let page = mine.into_iter().next().expect("one page");
                let list = rows.entry(row).or_default();
                list.retain(|(_, (r, _, _))| *r != role);
                list.push((a, (role, row, page)));
            }
            Payload::Parity { location, .. } => {
                let s = *location;
                if !s.is_multiple_of(BLOCK_SECTORS) || s + BLOCK_SECTORS > member_sectors {
                    out.push(Replay::Skip {
                        payload: i,
                        why: "a parity row off the members or not on a 4 KiB block",
                    });
                    continue;
                }
                if mine.len() != parity_pages {
                    out.push(Replay::Skip {
                        payload: i,
                        why: "parity pages other than the level has (P, and Q on RAID6)",
                    });
                    continue;
                }
                let map = pg.stripe_map(s / chunk);
                let mut w: Vec<PageWrite> = rows
                    .remove(&s)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(_, pw)| pw)
                    .collect();
                let parity_roles = std::iter::once(map.p).chain(map.q);
                for (role, page) in parity_roles.zip(mine) {
                    w.push((role, s, page));
                }
                out.push(Replay::Row(w));
            }
            Payload::Flush { .. } => {}
        }
    }
    for (_, list) in rows {
        for (sector, (_, _, page)) in list {
            out.push(Replay::Data { sector, page });
        }
    }
    out
}

/// What a start read from the log and wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JournalRecovered {
    /// Units read from the tail, whole and in sequence.
    pub units: u64,
    /// Rows written with their parity, and data pages written through the array.
    pub rows: u64,
    pub data_pages: u64,
    /// Payloads not applied (said in the log).
    pub skipped: u64,
}

/// Reads the unit at the cursor: its meta block and pages, checked; `Err` where the log
/// ends.
pub(crate) async fn read_unit(
    member: &dyn crate::member::Member,
    data_at: u64,
    cur: &Cursor,
    uuid_sum: u32,
) -> std::io::Result<Result<(MetaBlock, Vec<Vec<u8>>), End>> {
    let at = |pos: u64| data_at + pos * 512;
    debug_assert!(
        cur.position.is_multiple_of(BLOCK_SECTORS),
        "units start on blocks"
    );
    let block = crate::member::read_bytes(member, at(cur.position), BLOCK).await?;
    let meta = match cur.meta(&block, uuid_sum) {
        Ok(m) => m,
        Err(end) => return Ok(Err(end)),
    };
    let positions = cur.page_positions(&meta);
    let contiguous = positions.windows(2).all(|w| w[1] == w[0] + BLOCK_SECTORS);
    let mut pages = Vec::with_capacity(positions.len());
    if let (true, Some(&first)) = (contiguous, positions.first()) {
        let all = crate::member::read_bytes(member, at(first), BLOCK * positions.len()).await?;
        pages.extend(all.chunks(BLOCK).map(<[u8]>::to_vec));
    } else {
        for p in positions {
            pages.push(
                crate::member::read_bytes(member, at(p), BLOCK)
                    .await?
                    .to_vec(),
            );
        }
    }
    let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
    Ok(check_pages(&meta, &refs, uuid_sum).map(|()| (meta, pages)))
}

/// The empty meta block a log starts from at `position` with `seq` (md's
/// `r5l_log_write_empty_meta_block`).
pub(crate) fn empty_block(uuid_sum: u32, seq: u64, position: u64) -> AlignedBuf {
    let b = MetaBlock::empty(seq, position)
        .encode(uuid_sum)
        .expect("an empty meta block fits");
    AlignedBuf::from_slice(&b)
}

/// Where the log goes on after recovery read it to `end` (the cursor past the last whole
/// unit): an empty block at the cursor, ten sequence numbers past the next (md skips
/// ahead so that a unit of the old pass further on is never taken for the next one). A log
/// whose tail held no unit at all starts afresh at its start with `fresh_seq`.
pub(crate) fn restart_point(cur: &Cursor, fresh_seq: u64) -> (u64, u64) {
    match cur.seq {
        Some(next) => (cur.position, next.wrapping_add(10)),
        None => (0, fresh_seq),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_layout::{Geometry, Level, ParityLayout};

    /// RAID5 over 4 (left-symmetric), 64 KiB chunks, 1 MiB per member.
    fn raid5() -> ParityGeometry {
        let g = Geometry::parity(Level::Raid5, 4, ParityLayout::LeftSymmetric, 128, 2048)
            .expect("a geometry");
        g.as_parity().expect("parity").clone()
    }

    fn data(location: u64) -> Payload {
        Payload::Data {
            flags: 0,
            location,
            checksum: 0,
        }
    }

    fn parity(location: u64, pages: usize) -> Payload {
        Payload::Parity {
            flags: 0,
            location,
            checksums: vec![0; pages],
        }
    }

    fn page(b: u8) -> Vec<u8> {
        vec![b; BLOCK]
    }

    /// Data pages join the parity of their row, each to its member; the parity goes to P.
    #[test]
    fn a_row_s_data_and_parity_go_to_their_members() {
        let pg = raid5();
        // Array sector 136 (stripe 0, data chunk 1, row 8) and 264 (data chunk 2, row 8).
        let (s1, s2) = (136, 264);
        let map = pg.stripe_map(0);
        let meta = MetaBlock {
            seq: 1,
            position: 0,
            payloads: vec![data(s1), data(s2), parity(8, 1)],
        };
        let plan = plan_unit(&pg, &meta, vec![page(1), page(2), page(9)]);
        let want: Vec<PageWrite> = vec![
            (map.data[1], 8, page(1)),
            (map.data[2], 8, page(2)),
            (map.p, 8, page(9)),
        ];
        assert_eq!(plan, vec![Replay::Row(want)]);
    }

    /// A page logged twice before its parity is written once, newest; a page without
    /// parity goes through the array; payloads md never writes are skipped.
    #[test]
    fn newest_pages_data_alone_and_what_md_never_writes() {
        let pg = raid5();
        let map = pg.stripe_map(0);
        let meta = MetaBlock {
            seq: 1,
            position: 0,
            payloads: vec![
                data(136),
                data(136),
                parity(8, 1),
                data(16),
                data(pg.array_sectors()),
                data(3),
                parity(8, 2),
                parity(1 << 40, 1),
            ],
        };
        let pages = vec![
            page(1),
            page(2),
            page(9),
            page(3),
            page(4),
            page(5),
            page(6),
            page(7),
            page(8),
        ];
        let plan = plan_unit(&pg, &meta, pages);
        let row: Vec<PageWrite> = vec![(map.data[1], 8, page(2)), (map.p, 8, page(9))];
        assert_eq!(plan[0], Replay::Row(row));
        assert!(matches!(plan[1], Replay::Skip { payload: 4, .. }));
        assert!(matches!(plan[2], Replay::Skip { payload: 5, .. }));
        assert!(matches!(plan[3], Replay::Skip { payload: 6, .. }));
        assert!(matches!(plan[4], Replay::Skip { payload: 7, .. }));
        assert_eq!(
            plan[5],
            Replay::Data {
                sector: 16,
                page: page(3)
            }
        );
        assert_eq!(plan.len(), 6);
    }

    /// Recovery goes on past the last whole unit, ten sequence numbers ahead; a log with
    /// nothing at its tail starts afresh at its start.
    #[test]
    fn the_log_restarts_past_what_was_read() {
        let mut cur = Cursor::new(64, 16);
        assert_eq!(restart_point(&cur, 77), (0, 77));
        cur.advance(&MetaBlock::empty(5, 16));
        assert_eq!(restart_point(&cur, 77), (24, 16));
        let b = empty_block(3, 9, 24);
        let m = MetaBlock::decode(&b, 3).expect("a meta block");
        assert_eq!((m.seq, m.position, m.payloads.len()), (9, 24, 0));
    }
}
