//! Extents (volumes) of an array: each one's I/O lands in its own range, addressed from its
//! start, and nothing a client of one sends reaches another's sectors: writes and discards
//! that run past its end are refused whole, and writing a whole extent leaves its
//! neighbours' pattern intact, sector by sector.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use raidd_engine::{pattern, ErrorKind, Extent, Member};
use raidd_rt::{AlignedBuf, SharedBuf};

const SEED: u64 = 0x5eed;

fn raid5() -> Arc<raidd_engine::Array> {
    let spec = specs()
        .into_iter()
        .find(|s| s.name.starts_with("raid5-4-"))
        .unwrap();
    let members: Vec<Arc<dyn Member>> = mem_members(&spec)
        .into_iter()
        .map(|m| m as Arc<dyn Member>)
        .collect();
    Arc::new(array_over(&spec, &members, &[]))
}

/// Three extents splitting the array, with gaps between (sectors).
fn thirds(a: &Arc<raidd_engine::Array>) -> Vec<Extent> {
    let total = a.size_bytes() / 512;
    let third = total / 3;
    (0..3)
        .map(|i| {
            Extent::part(
                a.clone(),
                (i * third + 1) * 512,
                (third - 2) * 512,
                [i as u8; 16],
                format!("v{i}"),
            )
            .unwrap()
        })
        .collect()
}

async fn write(e: &Extent, sector: u64, sectors: u64, generation: u64) -> raidd_engine::Result<()> {
    let mut buf = AlignedBuf::zeroed((sectors * 512) as usize);
    pattern::fill(&mut buf, sector, generation, SEED);
    let len = buf.len();
    let shared = SharedBuf::new(buf);
    let mut iov = raidd_rt::IoVec::new();
    iov.push(shared.slice(0..len).unwrap());
    e.write(sector * 512, iov).await
}

/// Every sector of `e` holds generation `g(sector)` of the pattern, addressed from its start.
async fn verify(e: &Extent, g: impl Fn(u64) -> u64) {
    let sectors = e.size_bytes() / 512;
    let buf = e.read_new(0, e.size_bytes() as usize).await.unwrap();
    let bad = pattern::verify(buf.slice(0..buf.len()).unwrap().as_slice(), 0, SEED, g);
    assert!(
        bad.is_empty(),
        "{}: {} of {sectors} sectors bad, first {}",
        e.name(),
        bad.len(),
        bad[0]
    );
}

#[test]
fn each_extent_is_addressed_from_its_start_and_confined_to_it() {
    raidd_rt::block_on(async {
        let a = raid5();
        let parts = thirds(&a);
        for (i, e) in parts.iter().enumerate() {
            write(e, 0, e.size_bytes() / 512, i as u64 + 1)
                .await
                .unwrap();
        }
        for (i, e) in parts.iter().enumerate() {
            verify(e, |_| i as u64 + 1).await;
        }
        // The same bytes through the whole array: extent 1's sector 0 is its first sector.
        let whole = Extent::whole(a.clone());
        let first = whole.read_new(parts[1].offset(), 512).await.unwrap();
        assert!(
            pattern::verify(first.slice(0..512).unwrap().as_slice(), 0, SEED, |_| 2).is_empty()
        );
        // Past the end: refused whole, nothing written.
        let e = &parts[0];
        let last = e.size_bytes() / 512 - 1;
        for (sector, n) in [(last, 2), (last + 1, 1), (u64::MAX / 512 - 1, 1)] {
            let err = write(e, sector, n, 9).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::OutOfRange, "{err}");
            assert_eq!(
                e.discard(sector * 512, n * 512).await.unwrap_err().kind(),
                ErrorKind::OutOfRange
            );
            assert_eq!(
                e.flush_range(sector * 512, n * 512)
                    .await
                    .unwrap_err()
                    .kind(),
                ErrorKind::OutOfRange
            );
        }
        assert_eq!(
            e.read_new(last * 512, 1024).await.unwrap_err().kind(),
            ErrorKind::OutOfRange
        );
        for (i, e) in parts.iter().enumerate() {
            verify(e, |_| i as u64 + 1).await;
        }
    });
}

#[test]
fn extents_that_do_not_fit_the_array_are_refused() {
    let a = raid5();
    let size = a.size_bytes();
    for (offset, len) in [
        (0, 0),
        (1, 512),
        (0, 100),
        (size, 512),
        (size - 512, 1024),
        (u64::MAX - 511, 512),
    ] {
        assert!(
            Extent::part(a.clone(), offset, len, [0; 16], "x".into()).is_err(),
            "{offset}+{len}"
        );
    }
    let w = Extent::whole(a.clone());
    assert!(w.is_whole() && w.size_bytes() == size && w.id() == a.uuid());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random writes to one extent, in and across its end, never change the others.
    #[test]
    fn random_writes_stay_inside_their_extent(ops in prop::collection::vec((0u64..400, 1u64..40), 1..12)) {
        raidd_rt::block_on(async {
            let a = raid5();
            let parts = thirds(&a);
            for (i, e) in parts.iter().enumerate() {
                write(e, 0, e.size_bytes() / 512, i as u64 + 1).await.unwrap();
            }
            let mid = &parts[1];
            let sectors = mid.size_bytes() / 512;
            let mut gen = vec![2u64; sectors as usize];
            for (k, (start, n)) in ops.into_iter().enumerate() {
                let g = 10 + k as u64;
                let fits = start + n <= sectors;
                let r = write(mid, start, n, g).await;
                assert_eq!(r.is_ok(), fits, "{start}+{n} of {sectors}");
                if fits {
                    (start..start + n).for_each(|s| gen[s as usize] = g);
                }
            }
            verify(&parts[0], |_| 1).await;
            verify(mid, |s| gen[s as usize]).await;
            verify(&parts[2], |_| 3).await;
        });
    }
}
