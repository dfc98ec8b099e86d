//! md's partial parity log on RAID5 arrays raidd creates and starts: the on-disk layout
//! mdadm gives it, a clean restart that recovers nothing, a log that bad entries do not
//! trick into changing anything, a member added later that gets a log of its own, and the
//! log switched on and off while the array serves.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use raidd_engine::assemble::{assemble, examine, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{read_bytes, write_bytes, MemMember};
use raidd_engine::{pattern, Array, ConsistencyPolicy, Member, SyncLimits};
use raidd_layout::Level;
use raidd_md::ppl::{self, Area, Entry, Header};
use raidd_md::{feature, Superblock};
use raidd_rt::AlignedBuf;

const MIB: u64 = 1 << 20;
const SEED: u64 = 0x0091;
/// 64 KiB chunks.
const CHUNK: u64 = 128;

fn mem(n: usize, tag: &str) -> Vec<Arc<MemMember>> {
    (0..n)
        .map(|i| Arc::new(MemMember::new(format!("{tag}{i}"), 8 * MIB)))
        .collect()
}

fn dyns(m: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    m.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

/// A RAID5 with a partial parity log over `members` (`None`: a slot left missing).
async fn new_array(members: Vec<Option<Arc<dyn Member>>>) -> Arc<Array> {
    new_array_with(members, true).await
}

async fn new_array_with(members: Vec<Option<Arc<dyn Member>>>, ppl: bool) -> Arc<Array> {
    create(CreateSpec {
        name: "ppl".into(),
        homehost: "test".into(),
        level: Level::Raid5,
        layout: None,
        chunk_sectors: Some(CHUNK as u32),
        members,
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl,
        journal: None,
        checksums: None,
    })
    .await
    .unwrap()
    .array
}

async fn fill(a: &Array, generation: u64) {
    let sectors = a.size_bytes() / 512;
    let mut buf = AlignedBuf::zeroed((sectors * 512) as usize);
    pattern::fill(&mut buf, 0, generation, SEED);
    a.write_buf(0, buf).await.unwrap();
}

async fn bad_sectors(a: &Array, generation: u64) -> usize {
    let sectors = a.size_bytes() / 512;
    let buf = a.read_to_buf(0, (sectors * 512) as usize).await.unwrap();
    pattern::verify(&buf, 0, SEED, |_| generation).len()
}

/// Where `m`'s log lies (bytes) and how large it is.
async fn log_of(m: &dyn Member) -> (Superblock, u64, Area) {
    let sb = examine(m).await.unwrap();
    let area = Area::of(&sb).expect("a log");
    (sb.clone(), area.sector(sb.super_offset) * 512, area)
}

#[test]
fn mdadm_s_layout_and_a_clean_restart() {
    raidd_rt::block_on(async {
        let m = mem(4, "c");
        let a = new_array(dyns(&m).into_iter().map(Some).collect()).await;
        fill(&a, 1).await;
        assert_eq!(a.consistency().policy(), ConsistencyPolicy::Ppl);
        a.close().await.unwrap();
        let (sb, at, area) = log_of(&*m[0]).await;
        // As mdadm makes it, and the kernel keeps it: 1 MiB at 8 sectors past the
        // superblock, several units (MULTIPLE_PPLS), no bitmap.
        assert_eq!(area, Area::MDADM);
        assert_eq!(at, (8 + 8) * 512);
        assert_eq!(
            sb.feature_map & (feature::MULTIPLE_PPLS | feature::BITMAP_OFFSET),
            feature::MULTIPLE_PPLS
        );
        assert!(
            sb.data_offset >= 8 + 8 + 2048 + 8,
            "data past the log and bad-block log"
        );
        let bytes = read_bytes(&*m[0], at, area.bytes() as usize).await.unwrap();
        assert!(
            ppl::scan::newest(&bytes, ppl::signature(&sb.set_uuid))
                .newest
                .is_some(),
            "a valid header at the log's start"
        );
        let a = assemble(dyns(&m), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let st = a.status().await;
        assert_eq!(st.consistency_policy, ConsistencyPolicy::Ppl);
        assert!(
            st.ppl_recovered.is_none() && !st.needs_resync,
            "clean: nothing to recover"
        );
        assert_eq!(bad_sectors(&a, 1).await, 0);
        a.close().await.unwrap();
    });
}

/// Entries a start must not apply: a checksum that fails, an entry past the array, an
/// entry whose parity is on another member, and a whole header of another array. The
/// array is degraded, so parity written wrongly would show in the data read back.
#[test]
fn bad_entries_are_skipped_and_change_nothing() {
    raidd_rt::block_on(async {
        let m = mem(3, "b");
        let mut slots: Vec<Option<Arc<dyn Member>>> = dyns(&m).into_iter().map(Some).collect();
        slots.push(None);
        let a = new_array(slots).await;
        fill(&a, 1).await;
        let array_sectors = a.size_bytes() / 512;
        a.close().await.unwrap();
        // Stripe 0's parity is on member 3 (missing); stripe 1's on member 2.
        let (sb, at, _) = log_of(&*m[2]).await;
        let sig = ppl::signature(&sb.set_uuid);
        let pp = vec![0x5a_u8; 4096];
        let good_sum = ppl::pp_checksum(&pp);
        let entry = |data_sector, checksum, parity_disk| Entry {
            data_sector,
            pp_size: 4096,
            data_size: 4096,
            parity_disk,
            checksum,
        };
        let stripe1 = 3 * CHUNK;
        let header = Header {
            signature: sig,
            generation: 1,
            entries: vec![
                entry(stripe1, good_sum ^ 1, 2),
                entry(array_sectors - 4, good_sum, 2),
                entry(stripe1 + CHUNK, good_sum, 1),
            ],
        };
        let mut unit = header.encode();
        for _ in 0..3 {
            unit.extend_from_slice(&pp);
        }
        let mut buf = AlignedBuf::zeroed(unit.len());
        buf.copy_from_slice(&unit);
        write_bytes(&*m[2], at, buf).await.unwrap();
        // Member 0's log: a header of another array.
        let (_, at0, _) = log_of(&*m[0]).await;
        let foreign = Header {
            signature: sig ^ 0xffff,
            generation: 9,
            entries: vec![entry(0, good_sum, 3)],
        };
        let mut buf = AlignedBuf::zeroed(4096);
        buf.copy_from_slice(&foreign.encode());
        write_bytes(&*m[0], at0, buf).await.unwrap();
        // Member 1's log: empty (what the fill left there is not this test's).
        let (_, at1, area1) = log_of(&*m[1]).await;
        let mut buf = AlignedBuf::zeroed(area1.bytes() as usize);
        buf[..4096].copy_from_slice(&Header::empty(sig).encode());
        write_bytes(&*m[1], at1, buf).await.unwrap();
        // An unclean stop, as the superblocks say.
        for member in &m {
            let mut sb = examine(&**member).await.unwrap();
            sb.resync_offset = 0;
            let bytes = sb.encode();
            let mut buf = AlignedBuf::zeroed(4096);
            buf[..bytes.len()].copy_from_slice(&bytes);
            write_bytes(&**member, sb.super_offset * 512, buf)
                .await
                .unwrap();
        }
        let a = assemble(dyns(&m), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let st = a.status().await;
        let r = st.ppl_recovered.expect("an unclean start recovers");
        assert_eq!((r.entries, r.blocks), (0, 0), "nothing applied: {r:?}");
        assert_eq!(r.not_applied, 4, "three entries and a foreign log: {r:?}");
        assert!(
            st.needs_resync,
            "a log that did not recover cleanly leaves a resync due"
        );
        assert_eq!(bad_sectors(&a, 1).await, 0, "no parity changed");
        a.close().await.unwrap();
    });
}

#[test]
fn a_member_added_later_gets_a_log_of_its_own() {
    raidd_rt::block_on(async {
        let m = mem(4, "a");
        let mut slots: Vec<Option<Arc<dyn Member>>> = dyns(&m[..3]).into_iter().map(Some).collect();
        slots.push(None);
        let a = new_array(slots).await;
        fill(&a, 1).await;
        // Leftovers of an earlier life where the log goes.
        let mut junk = AlignedBuf::zeroed(MIB as usize);
        junk.fill(0x33);
        write_bytes(&*m[3], 16 * 512, junk).await.unwrap();
        a.add_member(m[3].clone()).await.unwrap();
        a.recover(3, SyncLimits::UNLIMITED).await.unwrap();
        fill(&a, 2).await;
        a.close().await.unwrap();
        let (sb, at, area) = log_of(&*m[3]).await;
        let bytes = read_bytes(&*m[3], at, area.bytes() as usize).await.unwrap();
        let found = ppl::scan::newest(&bytes, ppl::signature(&sb.set_uuid));
        let unit = found.newest.expect("a log of this array");
        assert!(unit.header.generation > 0, "units were logged to it");
        assert!(
            unit.header.entries.iter().all(|e| e.parity_disk == 3),
            "only stripes whose parity it holds"
        );
        let a = assemble(dyns(&m), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert_eq!(bad_sectors(&a, 2).await, 0);
        a.close().await.unwrap();
    });
}

/// Small writes that arrive together share their log's unit, as md's raid5d gathers the
/// stripes of one pass into an io_unit: 32 writes of 4 KiB, one into each of 32 stripes,
/// all started at once over four members, leave each member's log with one unit holding
/// the entries of its 8 stripes (one unit per write would leave a single entry in the
/// newest), and read back.
#[test]
fn writes_that_arrive_together_share_a_unit() {
    raidd_rt::block_on(async {
        let m = mem(4, "g");
        let a = new_array(dyns(&m).into_iter().map(Some).collect()).await;
        fill(&a, 1).await;
        let stripe_bytes = 3 * CHUNK * 512;
        let writes = (0..32u64).map(|s| {
            let a = a.clone();
            async move {
                let at = s * stripe_bytes;
                let mut buf = AlignedBuf::zeroed(4096);
                pattern::fill(&mut buf, at / 512, 2, SEED);
                a.write_buf(at, buf).await.unwrap();
            }
        });
        futures::future::join_all(writes).await;
        a.close().await.unwrap();
        for member in &m {
            let (sb, at, area) = log_of(&**member).await;
            let bytes = read_bytes(&**member, at, area.bytes() as usize)
                .await
                .unwrap();
            let unit = ppl::scan::newest(&bytes, ppl::signature(&sb.set_uuid))
                .newest
                .expect("a log of this array");
            assert_eq!(
                unit.header.entries.len(),
                8,
                "{}: the newest unit holds the 8 stripes whose parity it keeps",
                member.info().name
            );
        }
        let a = reassemble(&m).await;
        let buf = a.read_to_buf(0, a.size_bytes() as usize).await.unwrap();
        let bad = pattern::verify(&buf, 0, SEED, |sector| {
            let written = sector % (stripe_bytes / 512) < 8 && sector < 32 * stripe_bytes / 512;
            if written {
                2
            } else {
                1
            }
        });
        assert!(bad.is_empty(), "{} sectors read back wrong", bad.len());
        a.close().await.unwrap();
    });
}

/// Writes generation `generation` over the whole array in 64 KiB pieces from another task,
/// so a switch meets writes in flight.
fn writer(a: &Arc<Array>, generation: u64) -> raidd_rt::JoinHandle<()> {
    let a = a.clone();
    raidd_rt::spawn_local(async move {
        let piece = 64 * 1024;
        let mut at = 0;
        while at < a.size_bytes() {
            let mut buf = AlignedBuf::zeroed(piece as usize);
            pattern::fill(&mut buf, at / 512, generation, SEED);
            a.write_buf(at, buf).await.unwrap();
            at += piece;
        }
    })
}

/// Switches the policy to `to` while a writer writes `generation` over the whole array;
/// every sector then reads back as that generation.
async fn switch_while_writing(a: &Arc<Array>, generation: u64, to: ConsistencyPolicy) {
    let w = writer(a, generation);
    raidd_rt::yield_now().await;
    a.consistency().set(to, None).await.unwrap();
    w.await;
    assert_eq!(a.consistency().policy(), to);
    assert_eq!(bad_sectors(a, generation).await, 0);
}

async fn reassemble(m: &[Arc<MemMember>]) -> Arc<Array> {
    assemble(dyns(m), AssembleOptions::default())
        .await
        .unwrap()
        .array
}

#[test]
fn the_log_switched_on_and_off_while_writes_run() {
    raidd_rt::block_on(async {
        let m = mem(4, "s");
        let a = new_array_with(dyns(&m).into_iter().map(Some).collect(), false).await;
        fill(&a, 1).await;
        let before = examine(&*m[0]).await.unwrap();
        assert_eq!(a.consistency().policy(), ConsistencyPolicy::Resync);
        // On, with writes in flight on both sides of the switch.
        switch_while_writing(&a, 2, ConsistencyPolicy::Ppl).await;
        let err = a
            .consistency()
            .set(ConsistencyPolicy::Ppl, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already ppl"), "{err}");
        for member in &m {
            let (sb, at, area) = log_of(&**member).await;
            // The small member's empty bad-block log moved to just before the data; the
            // log took the space from the superblock's 4 KiB to it.
            assert_eq!(area.offset, 8);
            assert_eq!(sb.bblog_offset as u64, sb.data_offset - 8 - 8);
            assert_eq!(u64::from(area.size), sb.data_offset - 8 - 8 - 8);
            assert_ne!(sb.feature_map & feature::MULTIPLE_PPLS, 0);
            assert!(sb.events > before.events);
            let bytes = read_bytes(&**member, at, area.bytes() as usize)
                .await
                .unwrap();
            assert!(ppl::scan::newest(&bytes, ppl::signature(&sb.set_uuid))
                .newest
                .is_some());
        }
        // Stopped without a clean close: the start recovers from the switched-on log and
        // needs no resync.
        fill(&a, 3).await;
        drop(a);
        let a = reassemble(&m).await;
        let st = a.status().await;
        assert_eq!(st.consistency_policy, ConsistencyPolicy::Ppl);
        assert!(st.ppl_recovered.is_some() && !st.needs_resync, "{st:?}");
        assert_eq!(bad_sectors(&a, 3).await, 0);
        // Off, with writes in flight: the superblocks drop the log's bits and area.
        switch_while_writing(&a, 4, ConsistencyPolicy::Resync).await;
        a.close().await.unwrap();
        for member in &m {
            let sb = examine(&**member).await.unwrap();
            assert_eq!(Area::of(&sb), None);
            assert_eq!(sb.feature_map & (feature::PPL | feature::MULTIPLE_PPLS), 0);
            assert_eq!(sb.bitmap_offset, 0);
        }
        let a = reassemble(&m).await;
        assert_eq!(a.consistency().policy(), ConsistencyPolicy::Resync);
        // A bitmap and the log exclude each other, as in md.
        a.consistency()
            .set(ConsistencyPolicy::Bitmap, None)
            .await
            .unwrap();
        let err = a
            .consistency()
            .set(ConsistencyPolicy::Ppl, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        assert_eq!(bad_sectors(&a, 4).await, 0);
        a.close().await.unwrap();
    });
}
