//! Known answers: P and Q of small stripes worked out by hand, and P and Q as the Linux kernel's
//! md driver wrote them (fixture a5: RAID6, left-symmetric, 5 members, 64 KiB chunks).

mod common;

use std::io::Read;
use std::path::Path;

use common::*;
use raidd_parity::{Lost, Parity};

/// gen_pq of one-byte data blocks (in Q order) with every implementation.
fn pq_of(data: &[u8]) -> Vec<(u8, u8)> {
    all_impls()
        .into_iter()
        .map(|parity| {
            let blocks: Vec<[u8; 1]> = data.iter().map(|&d| [d]).collect();
            let srcs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
            let (mut p, mut q) = ([0u8], [0u8]);
            parity.gen_pq(&srcs, &mut p, &mut q);
            (p[0], q[0])
        })
        .collect()
}

fn assert_pq(data: &[u8], p: u8, q: u8) {
    for (got_p, got_q) in pq_of(data) {
        assert_eq!(
            (got_p, got_q),
            (p, q),
            "data {data:?}: want P {p:#x} Q {q:#x}"
        );
    }
}

#[test]
fn hand_computed_vectors() {
    // P = 1^2^3 = 0; Q = 1*1 ^ 2*2 ^ 4*3 = 1 ^ 4 ^ 12 = 9.
    assert_pq(&[1, 2, 3], 0, 9);
    // One block: P = Q = D0.
    assert_pq(&[0xab], 0xab, 0xab);
    // 0x80 * 2 overflows: 0x100 ^ 0x11d = 0x1d, so Q = 0x80 ^ 0x1d = 0x9d.
    assert_pq(&[0x80, 0x80], 0, 0x9d);
    // 0xff * 2 = 0x1fe ^ 0x11d = 0xe3.
    assert_pq(&[0, 0xff], 0xff, 0xe3);
    // g^8 = x^8 = x^4 + x^3 + x^2 + 1 = 0x1d.
    assert_pq(&[0, 0, 0, 0, 0, 0, 0, 0, 1], 1, 0x1d);
    // Linear: doubling every block doubles P and Q (2*9 = 18).
    assert_pq(&[2, 4, 6], 0, 18);
}

#[test]
fn hand_computed_vectors_at_vector_widths() {
    // The same stripe [1],[2],[3] repeated across 100 bytes hits the vector loops and the tails.
    for parity in all_impls() {
        let data = [vec![1u8; 100], vec![2u8; 100], vec![3u8; 100]];
        let (mut p, mut q) = (vec![0xee; 100], vec![0xee; 100]);
        parity.gen_pq(&slices(&data), &mut p, &mut q);
        assert!(p.iter().all(|&b| b == 0), "{parity:?} P");
        assert!(q.iter().all(|&b| b == 9), "{parity:?} Q");
    }
}

const CHUNK: usize = 64 * 1024;
const MEMBERS: usize = 5;
const DATA_OFFSET: usize = 2048 * 512;
const STRIPES: usize = 240; // component size 30720 sectors / 128 sectors per chunk
const PATTERN_K: u64 = 0x5241_4944_4400_0005;

fn load_members() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/md-kernel/a5");
    (0..MEMBERS)
        .map(|m| {
            let path = dir.join(format!("m{m}.img.xz"));
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let mut image = Vec::new();
            xz2::read::XzDecoder::new(file)
                .read_to_end(&mut image)
                .expect("decompress member");
            assert_eq!(image.len(), 16 << 20, "{path:?} is a 16 MiB member image");
            image
        })
        .collect()
}

/// Where stripe `s` keeps P, Q and data block `dd` (Q order = md's data slot for
/// left-symmetric): pd = (n-1) - s mod n, qd = pd + 1, data dd on disk pd + 2 + dd.
fn left_symmetric(s: usize) -> (usize, usize, [usize; MEMBERS - 2]) {
    let pd = MEMBERS - 1 - s % MEMBERS;
    let qd = (pd + 1) % MEMBERS;
    (pd, qd, std::array::from_fn(|dd| (pd + 2 + dd) % MEMBERS))
}

fn chunk(member: &[u8], stripe: usize) -> &[u8] {
    let start = DATA_OFFSET + stripe * CHUNK;
    &member[start..start + CHUNK]
}

#[test]
fn linux_md_raid6_fixture_parity_matches() {
    let members = load_members();
    let impls = all_impls();
    for s in 0..STRIPES {
        let (pd, qd, data_disks) = left_symmetric(s);
        let data: Vec<&[u8]> = data_disks.iter().map(|&d| chunk(&members[d], s)).collect();

        // The mapping is right if the data chunks hold the array pattern where md put them:
        // array sector of data block dd of stripe s is ((s * 3 + dd) * CHUNK) / 512.
        for (dd, block) in data.iter().enumerate() {
            let sector = ((s * (MEMBERS - 2) + dd) * CHUNK / 512) as u64;
            let word = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
            assert_eq!(word, sector ^ PATTERN_K, "stripe {s} data {dd}");
        }

        let (kernel_p, kernel_q) = (chunk(&members[pd], s), chunk(&members[qd], s));
        for parity in &impls {
            let (mut p, mut q) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
            parity.gen_pq(&data, &mut p, &mut q);
            assert!(
                p == kernel_p,
                "{:?} stripe {s}: P differs from the kernel's",
                parity.imp()
            );
            assert!(
                q == kernel_q,
                "{:?} stripe {s}: Q differs from the kernel's",
                parity.imp()
            );
        }
    }
}

#[test]
fn linux_md_raid6_fixture_two_data_blocks_rebuild() {
    let members = load_members();
    for s in [0, 1, 2, 3, 4, 117, 239] {
        let (pd, qd, data_disks) = left_symmetric(s);
        let data: Vec<Vec<u8>> = data_disks
            .iter()
            .map(|&d| chunk(&members[d], s).to_vec())
            .collect();
        let (kernel_p, kernel_q) = (chunk(&members[pd], s), chunk(&members[qd], s));
        for lost in [
            Lost::DataData(0, 2),
            Lost::DataData(1, 0),
            Lost::DataP(1),
            Lost::DataQ(2),
        ] {
            let mut d2 = data.clone();
            let (mut p, mut q) = (kernel_p.to_vec(), kernel_q.to_vec());
            match lost {
                Lost::DataData(x, y) => {
                    d2[x].fill(0);
                    d2[y].fill(0);
                }
                Lost::DataP(x) => {
                    d2[x].fill(0);
                    p.fill(0);
                }
                Lost::DataQ(x) => {
                    d2[x].fill(0);
                    q.fill(0);
                }
                _ => unreachable!(),
            }
            Parity::best().reconstruct(&mut slices_mut(&mut d2), &mut p, Some(&mut q), lost);
            assert!(d2 == data, "stripe {s} {lost:?}: data");
            assert!(
                p == kernel_p && q == kernel_q,
                "stripe {s} {lost:?}: parity"
            );
        }
    }
}
