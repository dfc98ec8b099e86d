//! md's internal write-intent bitmap put on a running array and taken off again while
//! writes run: the bits start clear, writes after the switch set them, an unclean stop
//! then resyncs only the chunks they mark, and the data reads back throughout.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use raidd_engine::assemble::{assemble, examine, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{pattern, Array, ConsistencyPolicy, Member};
use raidd_layout::Level;
use raidd_md::feature;
use raidd_rt::AlignedBuf;

const MIB: u64 = 1 << 20;
const SEED: u64 = 0x0b17;

fn dyns(m: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    m.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

async fn write(a: &Array, at: u64, len: u64, generation: u64) {
    let mut buf = AlignedBuf::zeroed(len as usize);
    pattern::fill(&mut buf, at / 512, generation, SEED);
    a.write_buf(at, buf).await.unwrap();
}

/// Sectors that do not hold generation `first` in the first MiB, 2 in the third and fourth
/// (the write across the switch on), and 1 elsewhere.
async fn bad(a: &Array, first: u64) -> usize {
    let buf = a.read_to_buf(0, a.size_bytes() as usize).await.unwrap();
    let sectors = |mib: u64| mib * MIB / 512;
    pattern::verify(&buf, 0, SEED, |s| match s {
        s if s < sectors(1) => first,
        s if (sectors(2)..sectors(4)).contains(&s) => 2,
        _ => 1,
    })
    .len()
}

#[test]
fn a_bitmap_put_on_while_writing_narrows_the_next_resync_and_comes_off_again() {
    raidd_rt::block_on(async {
        let m: Vec<Arc<MemMember>> = (0..3)
            .map(|i| Arc::new(MemMember::new(format!("b{i}"), 16 * MIB)))
            .collect();
        let slots = dyns(&m).into_iter().map(Some).collect();
        let a = create(CreateSpec {
            name: "bm".into(),
            homehost: "test".into(),
            level: Level::Raid5,
            layout: None,
            chunk_sectors: Some(128),
            members: slots,
            size_sectors: None,
            assume_clean: true,
            force: false,
            bitmap_chunk: None,
            ppl: false,
            journal: None,
            checksums: None,
        })
        .await
        .unwrap()
        .array;
        write(&a, 0, a.size_bytes(), 1).await;
        // On, with a write in flight across the switch.
        let w = {
            let a = a.clone();
            raidd_rt::spawn_local(async move { write(&a, 2 * MIB, 2 * MIB, 2).await })
        };
        raidd_rt::yield_now().await;
        a.consistency()
            .set(ConsistencyPolicy::Bitmap, Some(MIB as u32))
            .await
            .unwrap();
        w.await;
        assert_eq!(a.consistency().policy(), ConsistencyPolicy::Bitmap);
        let sb = examine(&*m[0]).await.unwrap();
        assert_ne!(sb.feature_map & feature::BITMAP_OFFSET, 0);
        assert_eq!(sb.bitmap_offset, 8);
        // A write after it sets the bits of its chunks only (member space: 1 MiB of
        // array data over two data members is 512 KiB per member, within one chunk).
        write(&a, 0, MIB, 3).await;
        let (set, total) = a.write_intent().unwrap();
        assert!((1..=2).contains(&set) && total >= 14, "{set} of {total}");
        // Stopped without a clean close: the next start resyncs the marked chunks only.
        drop(a);
        let a = assemble(dyns(&m), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let st = a.status().await;
        assert_eq!(st.consistency_policy, ConsistencyPolicy::Bitmap);
        assert!(st.needs_resync, "{st:?}");
        let (set, _) = a.write_intent().unwrap();
        assert!(set <= 2, "only the chunks written since the switch: {set}");
        a.resync(|_, _| {}).await.unwrap();
        assert_eq!(bad(&a, 3).await, 0);
        // Off again with writes running; the superblocks drop it.
        let w = {
            let a = a.clone();
            raidd_rt::spawn_local(async move { write(&a, 0, MIB, 4).await })
        };
        raidd_rt::yield_now().await;
        a.consistency()
            .set(ConsistencyPolicy::Resync, None)
            .await
            .unwrap();
        w.await;
        assert_eq!(a.write_intent(), None);
        assert_eq!(bad(&a, 4).await, 0);
        a.close().await.unwrap();
        let sb = examine(&*m[1]).await.unwrap();
        assert_eq!(sb.feature_map & feature::BITMAP_OFFSET, 0);
        assert_eq!(sb.bitmap_offset, 0);
    });
}
