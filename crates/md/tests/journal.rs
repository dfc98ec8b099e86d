//! md's write journal as bytes: meta blocks round-trip and refuse what md refuses, and a
//! ring of units written in turn (wrapping round) reads back from its tail up to the first
//! unit that is torn, stale or misplaced.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use proptest::prelude::*;
use raidd_md::journal::scan::{check_pages, scan, Cursor, End};
use raidd_md::journal::{
    page_checksum, uuid_checksum, JournalError, MetaBlock, Payload, BLOCK, BLOCK_SECTORS, MAGIC,
};

fn sample(uuid_sum: u32) -> (MetaBlock, Vec<Vec<u8>>) {
    let pages: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i ^ 0x5a; BLOCK]).collect();
    let sum = |i: usize| page_checksum(uuid_sum, &pages[i]);
    let meta = MetaBlock {
        seq: 77,
        position: 16,
        payloads: vec![
            Payload::Data {
                flags: 0,
                location: 1024,
                checksum: sum(0),
            },
            Payload::Data {
                flags: 0,
                location: 1152,
                checksum: sum(1),
            },
            Payload::Parity {
                flags: 0,
                location: 512,
                checksums: vec![sum(2), sum(3)],
            },
            Payload::Flush {
                flags: 0,
                stripes: vec![8, 4096],
            },
        ],
    };
    (meta, pages)
}

#[test]
fn a_meta_block_round_trips_with_md_s_layout() {
    let uuid_sum = uuid_checksum(&common::sample_superblock().set_uuid);
    let (meta, pages) = sample(uuid_sum);
    let b = meta.encode(uuid_sum).unwrap();
    assert_eq!(b.len(), BLOCK);
    assert_eq!(&b[0..4], &MAGIC.to_le_bytes());
    assert_eq!(b[8], 1, "version");
    // Header, two data payloads (16 + 4), a RAID6 parity payload (16 + 8), a flush of two.
    let meta_size = 32 + 2 * 20 + 24 + 8 + 16;
    assert_eq!(meta.meta_size(), meta_size);
    assert_eq!(
        u32::from_le_bytes(b[12..16].try_into().unwrap()),
        meta_size as u32
    );
    assert!(b[meta_size..].iter().all(|&x| x == 0), "the rest is zero");
    // A data payload: type 0, size 8 sectors, its array sector, its checksum.
    assert_eq!(&b[32..36], &[0, 0, 0, 0]);
    assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), 8);
    assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 1024);
    assert_eq!(MetaBlock::decode(&b, uuid_sum), Ok(meta.clone()));
    assert_eq!(meta.pages(), 4);
    assert_eq!(meta.sectors(), 5 * BLOCK_SECTORS);
    let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
    assert_eq!(check_pages(&meta, &refs, uuid_sum), Ok(()));
}

#[test]
fn what_md_refuses_is_refused() {
    let uuid_sum = 0x1234_5678;
    let (meta, _) = sample(uuid_sum);
    let good = meta.encode(uuid_sum).unwrap();
    let with = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        MetaBlock::decode(&b, uuid_sum)
    };
    assert!(matches!(with(0, 0), Err(JournalError::BadMagic(_))));
    assert!(matches!(with(8, 2), Err(JournalError::BadVersion(2))));
    assert!(matches!(
        with(100, 1),
        Err(JournalError::BadChecksum { .. })
    ));
    assert!(matches!(
        MetaBlock::decode(&good, uuid_sum ^ 1),
        Err(JournalError::BadChecksum { .. })
    ));
    assert!(matches!(
        MetaBlock::decode(&good[..100], uuid_sum),
        Err(JournalError::Truncated(100))
    ));
    // Descriptors that are not md's, checksummed correctly so only they are wrong.
    let resum = |mut b: Vec<u8>| {
        b[4..8].fill(0);
        let s = !crc32c::crc32c_append(!uuid_sum, &b);
        b[4..8].copy_from_slice(&s.to_le_bytes());
        MetaBlock::decode(&b, uuid_sum)
    };
    let mut unknown = good.clone();
    unknown[32] = 9;
    assert!(matches!(
        resum(unknown),
        Err(JournalError::BadPayload { at: 32, .. })
    ));
    let mut two_page_data = good.clone();
    two_page_data[36] = 16;
    assert!(matches!(
        resum(two_page_data),
        Err(JournalError::BadPayload { .. })
    ));
    let mut huge = good.clone();
    huge[12..16].copy_from_slice(&5000u32.to_le_bytes());
    assert!(matches!(resum(huge), Err(JournalError::BadMetaSize(5000))));
    let mut short = good.clone();
    short[12..16].copy_from_slice(&40u32.to_le_bytes());
    assert!(matches!(resum(short), Err(JournalError::BadPayload { .. })));
    // Too many payloads for one block.
    let full = MetaBlock {
        seq: 1,
        position: 0,
        payloads: vec![
            Payload::Data {
                flags: 0,
                location: 0,
                checksum: 0
            };
            204
        ],
    };
    assert!(!full.fits(20));
    assert!(matches!(
        MetaBlock {
            payloads: [full.payloads.clone(), full.payloads].concat(),
            ..MetaBlock::empty(1, 0)
        }
        .encode(0),
        Err(JournalError::TooLarge(_))
    ));
}

/// A ring of `ring` sectors in memory, written unit after unit as md appends them.
struct Ring {
    blocks: Vec<Vec<u8>>,
    uuid_sum: u32,
    head: Cursor,
    seq: u64,
}

impl Ring {
    fn new(ring: u64, tail: u64, seq: u64, uuid_sum: u32) -> Ring {
        let mut c = Cursor::new(ring, tail);
        c.seq = Some(seq);
        Ring {
            blocks: vec![vec![0u8; BLOCK]; (ring / BLOCK_SECTORS) as usize],
            uuid_sum,
            head: c,
            seq,
        }
    }

    fn block(&mut self, position: u64) -> &mut Vec<u8> {
        &mut self.blocks[(position / BLOCK_SECTORS) as usize]
    }

    /// Appends a unit of `data` data pages (and one parity page); returns it.
    fn append(&mut self, data: usize, fill: u8) -> MetaBlock {
        let pages: Vec<Vec<u8>> = (0..=data).map(|i| vec![fill ^ i as u8; BLOCK]).collect();
        let sum = |p: &Vec<u8>| page_checksum(self.uuid_sum, p);
        let mut payloads: Vec<Payload> = pages[..data]
            .iter()
            .enumerate()
            .map(|(i, p)| Payload::Data {
                flags: 0,
                location: 8 * i as u64,
                checksum: sum(p),
            })
            .collect();
        payloads.push(Payload::Parity {
            flags: 0,
            location: 0,
            checksums: vec![sum(&pages[data])],
        });
        let meta = MetaBlock {
            seq: self.seq,
            position: self.head.position,
            payloads,
        };
        let at = self.head.page_positions(&meta);
        let encoded = meta.encode(self.uuid_sum).unwrap();
        let pos = self.head.position;
        *self.block(pos) = encoded;
        for (p, page) in at.into_iter().zip(pages) {
            *self.block(p) = page;
        }
        self.head.advance(&meta);
        self.seq += 1;
        meta
    }

    fn read(&self, position: u64) -> Vec<u8> {
        self.blocks[(position / BLOCK_SECTORS) as usize].clone()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Units appended round a ring (over older units of an earlier pass) read back in
    /// order from the tail; tearing one page of the newest unit ends the log before it.
    #[test]
    fn the_log_reads_back_to_its_head_and_no_further(
        blocks in 8u64..64,
        tail_block in 0u64..64,
        seq in any::<u64>(),
        sizes in prop::collection::vec(0usize..5, 1..12),
        tear in any::<prop::sample::Index>(),
    ) {
        let ring = blocks * BLOCK_SECTORS;
        let tail = (tail_block % blocks) * BLOCK_SECTORS;
        let uuid_sum = 0xdead_beef;
        // An earlier pass wrote units all round the ring.
        let mut old = Ring::new(ring, 0, seq.wrapping_sub(1000), uuid_sum);
        for _ in 0..blocks / 2 {
            old.append(0, 0x11);
        }
        let mut head = Cursor::new(ring, tail);
        head.seq = Some(seq);
        let mut r = Ring { head, seq, ..old };
        let mut written = Vec::new();
        let mut used = 0;
        for &n in &sizes {
            let need = (n as u64 + 2) * BLOCK_SECTORS;
            if used + need >= ring {
                break;
            }
            used += need;
            written.push(r.append(n, written.len() as u8));
        }
        let (units, end) = scan(ring, tail, uuid_sum, |p| r.read(p));
        let metas: Vec<MetaBlock> = units.iter().map(|(m, _)| m.clone()).collect();
        prop_assert_eq!(&metas, &written);
        let torn = matches!(end, End::PageChecksum { .. });
        prop_assert!(!torn, "{:?}", end);
        if let Some(last) = written.last() {
            // Tear one of the newest unit's pages.
            let mut c = Cursor::new(ring, last.position);
            c.seq = Some(last.seq);
            let pages = c.page_positions(last);
            let victim = pages[tear.index(pages.len())];
            r.blocks[(victim / BLOCK_SECTORS) as usize][100] ^= 0xff;
            let (units, end) = scan(ring, tail, uuid_sum, |p| r.read(p));
            prop_assert_eq!(units.len(), written.len() - 1);
            let torn = matches!(end, End::PageChecksum { .. });
            prop_assert!(torn, "{:?}", end);
        }
    }
}

#[test]
fn a_stale_unit_or_one_read_elsewhere_ends_the_log() {
    let uuid_sum = 7;
    let mut r = Ring::new(64 * BLOCK_SECTORS, 0, 100, uuid_sum);
    r.append(2, 1);
    r.append(1, 2);
    let head = r.head.position;
    // A unit of an older pass sits at the head: sequence 5, not 102.
    let stale = MetaBlock {
        seq: 5,
        position: head,
        payloads: Vec::new(),
    };
    *r.block(head) = stale.encode(uuid_sum).unwrap();
    let (units, end) = scan(64 * BLOCK_SECTORS, 0, uuid_sum, |p| r.read(p));
    assert_eq!(units.len(), 2);
    assert_eq!(
        end,
        End::OutOfSequence {
            found: 5,
            expected: 102
        }
    );
    // The right sequence but another position: a block copied from elsewhere.
    let moved = MetaBlock {
        seq: 102,
        position: head + 8,
        payloads: Vec::new(),
    };
    *r.block(head) = moved.encode(uuid_sum).unwrap();
    let (_, end) = scan(64 * BLOCK_SECTORS, 0, uuid_sum, |p| r.read(p));
    assert_eq!(
        end,
        End::Misplaced {
            found: head + 8,
            expected: head
        }
    );
    // Nothing written at the head.
    *r.block(head) = vec![0; BLOCK];
    let (_, end) = scan(64 * BLOCK_SECTORS, 0, uuid_sum, |p| r.read(p));
    assert_eq!(end, End::NotMeta(JournalError::BadMagic(0)));
}
