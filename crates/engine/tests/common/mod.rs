#![allow(clippy::unwrap_used, dead_code)] // test helpers: a failed unwrap is a failed test

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use raidd_engine::member::MemMember;
use raidd_engine::pattern;
use raidd_engine::{Array, ArrayParts, Member, SlotParts};
use raidd_layout::{Geometry, Level, ParityLayout, Raid0Layout, Raid10Layout};
use raidd_rt::AlignedBuf;

pub const DATA_OFFSET: u64 = 8192;

/// A geometry to test, with the member sizes (data sectors) it needs.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub geometry: Geometry,
    pub member_sectors: Vec<u64>,
}

pub fn specs() -> Vec<Spec> {
    let mut v = Vec::new();
    let mut add = |name: String, geometry: Geometry, member_sectors: Vec<u64>| {
        v.push(Spec {
            name,
            geometry,
            member_sectors,
        });
    };
    let unequal = vec![40 * 8, 64 * 8, 48 * 8];
    add(
        "linear-3".into(),
        Geometry::linear(&unequal, 0).unwrap(),
        unequal.clone(),
    );
    add(
        "raid0-3-equal".into(),
        Geometry::raid0(&[256; 3], 8, Raid0Layout::Original).unwrap(),
        vec![256; 3],
    );
    for l in [Raid0Layout::Original, Raid0Layout::Alternate] {
        add(
            format!("raid0-3-zones-{l:?}"),
            Geometry::raid0(&unequal, 16, l).unwrap(),
            unequal.clone(),
        );
    }
    for n in [2, 3] {
        add(
            format!("raid1-{n}"),
            Geometry::raid1(n, 300).unwrap(),
            vec![300; n],
        );
    }
    for (lay, n) in [
        ("n2", 4),
        ("n2", 3),
        ("f2", 4),
        ("o2", 3),
        ("n3", 3),
        ("f2", 5),
    ] {
        let layout = Raid10Layout::parse(lay).unwrap();
        let g = Geometry::raid10(n, layout, 8, 256).unwrap();
        let used = (0..n).map(|m| g.member_used_sectors(m)).max().unwrap();
        add(format!("raid10-{lay}-{n}"), g, vec![used.max(256); n]);
    }
    add(
        "raid4-4".into(),
        Geometry::parity(Level::Raid4, 4, ParityLayout::ParityLast, 8, 256).unwrap(),
        vec![256; 4],
    );
    for layout in ParityLayout::ALL
        .iter()
        .copied()
        .filter(|l| l.valid_for(Level::Raid5))
    {
        add(
            format!("raid5-4-{layout}"),
            Geometry::parity(Level::Raid5, 4, layout, 16, 256).unwrap(),
            vec![256; 4],
        );
    }
    for n in [2, 3, 5] {
        let g = Geometry::parity(Level::Raid5, n, ParityLayout::LeftSymmetric, 8, 256).unwrap();
        add(format!("raid5-{n}-ls"), g, vec![256; n]);
    }
    for layout in ParityLayout::ALL.iter().copied() {
        add(
            format!("raid6-5-{layout}"),
            Geometry::parity(Level::Raid6, 5, layout, 8, 256).unwrap(),
            vec![256; 5],
        );
    }
    for n in [4, 6] {
        let g = Geometry::parity(Level::Raid6, n, ParityLayout::LeftSymmetric, 16, 256).unwrap();
        add(format!("raid6-{n}-ls"), g, vec![256; n]);
    }
    v
}

pub fn mem_members(spec: &Spec) -> Vec<Arc<MemMember>> {
    spec.member_sectors
        .iter()
        .enumerate()
        .map(|(i, s)| Arc::new(MemMember::new(format!("mem{i}"), DATA_OFFSET + s * 512)))
        .collect()
}

pub fn array_over(spec: &Spec, members: &[Arc<dyn Member>], missing: &[usize]) -> Array {
    let slots = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            (!missing.contains(&i)).then(|| SlotParts {
                member: m.clone(),
                data_offset: DATA_OFFSET,
                recovered: None,
                by_bitmap: false,
                write_mostly: false,
            })
        })
        .collect();
    Array::new(ArrayParts {
        name: spec.name.clone(),
        uuid: [7; 16],
        geometry: spec.geometry.clone(),
        slots,
        spares: Vec::new(),
        journal: None,
        ppl: None,
        read_only: false,
    })
    .unwrap_or_else(|e| panic!("{}: {e}", spec.name))
}

/// Every set of members whose loss the geometry survives (including none).
pub fn survivable_losses(g: &Geometry) -> Vec<Vec<usize>> {
    let n = g.members();
    let mut out = Vec::new();
    for mask in 0u32..(1 << n) {
        let missing: Vec<bool> = (0..n).map(|i| mask & (1 << i) != 0).collect();
        if mask.count_ones() as usize <= g.redundancy().max(n) && g.survives(&missing) {
            out.push((0..n).filter(|&i| missing[i]).collect());
        }
    }
    out
}

/// What each array sector should hold: the generation last written (0 = never written).
pub struct Model {
    pub generation: Vec<u64>,
    pub next: u64,
    pub seed: u64,
}

impl Model {
    pub fn new(sectors: u64, seed: u64) -> Model {
        Model {
            generation: vec![0; sectors as usize],
            next: 1,
            seed,
        }
    }
}

/// splitmix64 stream for deterministic workloads.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes a pattern range of `sectors` at `sector` with a fresh generation.
pub async fn write_pattern(a: &Array, m: &mut Model, sector: u64, sectors: u64) {
    let g = m.next;
    m.next += 1;
    let mut buf = AlignedBuf::zeroed((sectors * 512) as usize);
    pattern::fill(&mut buf, sector, g, m.seed);
    a.write_buf(sector * 512, buf)
        .await
        .unwrap_or_else(|e| panic!("write {sector}+{sectors}: {e}"));
    for s in sector..sector + sectors {
        m.generation[s as usize] = g;
    }
}

/// Random writes of 1 sector up to a few stripes.
pub async fn random_writes(a: &Array, m: &mut Model, rng: &mut Rng, count: usize) {
    let total = a.size_bytes() / 512;
    let max_len =
        (a.geometry().chunk_sectors().max(8) as u64 * a.geometry().members() as u64 * 3).min(total);
    for _ in 0..count {
        let len = 1 + rng.below(max_len);
        let start = rng.below(total - len + 1);
        write_pattern(a, m, start, len).await;
    }
}

/// Reads the whole array (in requests of varying size) and checks every sector.
pub async fn verify_all(a: &Array, m: &Model, what: &str) {
    let total = a.size_bytes() / 512;
    let mut pos = 0;
    let mut step = 1;
    while pos < total {
        let n = step.min(total - pos);
        let buf = a
            .read_to_buf(pos * 512, (n * 512) as usize)
            .await
            .unwrap_or_else(|e| panic!("{what}: read {pos}+{n}: {e}"));
        let bad: Vec<_> = pattern::verify(&buf, pos, m.seed, |s| m.generation[s as usize])
            .into_iter()
            .filter(|mm| {
                !(m.generation[mm.sector as usize] == 0 && mm.problem == pattern::Problem::Zero)
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: {} bad sectors, first: {}",
            bad.len(),
            bad[0]
        );
        pos += n;
        step = step * 3 % 97 + 1;
    }
}

/// One of `clients` concurrent clients of a seeded workload: `ops` operations on runs of up
/// to `unit` sectors inside the units it owns (every `clients`-th, so clients share
/// stripes), one in `read_one_in` a read checked against the model (sectors never written
/// may read as anything), the rest writes of a fresh generation recorded in the model.
#[allow(clippy::too_many_arguments)]
pub async fn client(
    array: Arc<Array>,
    model: Rc<RefCell<Model>>,
    seed: u64,
    c: u64,
    clients: u64,
    unit: u64,
    ops: usize,
    read_one_in: u64,
    what: String,
) {
    let sectors = array.size_bytes() / 512;
    let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(c));
    let units = sectors / unit;
    for _ in 0..ops {
        let first = rng.below(units / clients) * clients + c;
        let len = 1 + rng.below(unit);
        let start = first * unit + rng.below(unit - len + 1);
        if rng.below(read_one_in) == 0 {
            let buf = array
                .read_to_buf(start * 512, (len * 512) as usize)
                .await
                .unwrap();
            let m = model.borrow();
            let bad: Vec<_> = pattern::verify(&buf, start, seed, |s| m.generation[s as usize])
                .into_iter()
                .filter(|b| m.generation[b.sector as usize] != 0)
                .collect();
            assert!(bad.is_empty(), "{what}: client {c} read {}", bad[0]);
            continue;
        }
        let g = {
            let mut m = model.borrow_mut();
            m.next += 1;
            m.next
        };
        let mut buf = AlignedBuf::zeroed((len * 512) as usize);
        pattern::fill(&mut buf, start, g, seed);
        array
            .write_buf(start * 512, buf)
            .await
            .unwrap_or_else(|e| panic!("{what}: write: {e}"));
        let mut m = model.borrow_mut();
        for s in start..start + len {
            m.generation[s as usize] = g;
        }
    }
}
