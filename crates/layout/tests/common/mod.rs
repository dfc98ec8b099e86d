//! Shared checkers and independent reference models for the layout tests.
//!
//! The reference models restate md's mapping code (raid0.c, raid10.c, raid5.c) as directly
//! as possible, in a different shape from the crate's implementation, so that the two can be
//! compared sector by sector.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use raidd_layout::{coalesce, Geometry, Level, Loc, Piece, Pieces, Reverse, StripeRole};

/// Copies every array sector has.
pub fn copies_per_sector(g: &Geometry) -> usize {
    match g {
        Geometry::Raid1(r) => r.members,
        Geometry::Raid10(r) => r.layout.copies(),
        _ => 1,
    }
}

/// The copies of one array sector, via `pieces`.
pub fn locs_of(g: &Geometry, sector: u64) -> Vec<Loc> {
    let pieces = g.pieces(sector, 1);
    assert_eq!(pieces.len(), 1, "one sector is one piece");
    assert_eq!((pieces[0].array_sector, pieces[0].sectors), (sector, 1));
    pieces[0].copies.to_vec()
}

/// Exhaustive check of a (small) geometry: `pieces` and `reverse` are inverse bijections
/// between (array sector, copy) and used member sectors, parity aside.
pub fn check_bijection(g: &Geometry) {
    let array = g.array_sectors();
    let copies = copies_per_sector(g);
    assert!(array > 0);
    // Forward: every (sector, copy) lands on a used member sector that maps back to it.
    for sector in 0..array {
        let locs = locs_of(g, sector);
        assert_eq!(locs.len(), copies, "{g:?} sector {sector}");
        let members: HashSet<usize> = locs.iter().map(|l| l.member).collect();
        assert_eq!(
            members.len(),
            copies,
            "copies of {sector} share a member: {locs:?}"
        );
        for (copy, loc) in locs.iter().enumerate() {
            assert!(loc.member < g.members());
            assert!(
                loc.sector < g.member_used_sectors(loc.member),
                "{g:?} {loc:?}"
            );
            let back = g.reverse(loc.member, loc.sector);
            assert_eq!(
                back,
                Reverse::Data {
                    array_sector: sector,
                    copy
                },
                "{g:?} {loc:?}"
            );
        }
    }
    // Backward: every used member sector holds data of exactly one (sector, copy), or parity
    // of exactly one stripe, or (RAID10 rounding only) nothing.
    let mut data = HashSet::new();
    let mut parity = HashSet::new();
    let mut unused = 0u64;
    for member in 0..g.members() {
        let used = g.member_used_sectors(member);
        for sector in 0..used {
            match g.reverse(member, sector) {
                Reverse::Data { array_sector, copy } => {
                    assert!(array_sector < array && copy < copies, "{member}@{sector}");
                    assert!(data.insert((array_sector, copy)), "{member}@{sector} twice");
                }
                Reverse::P { stripe, offset } => {
                    assert!(
                        parity.insert(('P', stripe, offset)),
                        "P {stripe}+{offset} twice"
                    );
                    check_parity_member(g, StripeRole::P, member, sector, stripe, offset);
                }
                Reverse::Q { stripe, offset } => {
                    assert!(
                        parity.insert(('Q', stripe, offset)),
                        "Q {stripe}+{offset} twice"
                    );
                    check_parity_member(g, StripeRole::Q, member, sector, stripe, offset);
                }
                Reverse::Unused => unused += 1,
            }
        }
        for beyond in [used, used + 1, used + 1000, u64::MAX] {
            assert_eq!(g.reverse(member, beyond), Reverse::Unused);
        }
    }
    assert_eq!(
        data.len() as u64,
        array * copies as u64,
        "every (sector, copy) once"
    );
    if g.level() != Level::Raid10 {
        assert_eq!(unused, 0, "{g:?} leaves holes in its used area");
    }
    if let Some(p) = g.as_parity() {
        let per_kind = p.stripes() * u64::from(p.chunk_sectors);
        let raid6 = p.level == Level::Raid6;
        assert_eq!(parity.len() as u64, per_kind * if raid6 { 2 } else { 1 });
        assert_eq!(array, p.stripes() * p.stripe_data_sectors());
    }
    assert_eq!(g.reverse(g.members(), 0), Reverse::Unused);
    assert_eq!(g.member_used_sectors(g.members()), 0);
}

fn check_parity_member(
    g: &Geometry,
    role: StripeRole,
    member: usize,
    sector: u64,
    stripe: u64,
    offset: u64,
) {
    let p = g.as_parity().expect("parity only on parity levels");
    assert!(stripe < p.stripes() && offset < u64::from(p.chunk_sectors));
    assert_eq!(p.member_sector(stripe, offset), sector);
    assert_eq!(p.stripe_map(stripe).role_of(member), role);
}

/// Checks every stripe map of a parity geometry against `pieces` and itself.
pub fn check_stripe_maps(g: &Geometry) {
    let Some(p) = g.as_parity() else { return };
    let k = p.data_members();
    let chunk = u64::from(p.chunk_sectors);
    for stripe in 0..p.stripes() {
        let map = p.stripe_map(stripe);
        assert_eq!(map.data.len(), k);
        let mut seen: Vec<usize> = map.data.to_vec();
        seen.push(map.p);
        seen.extend(map.q);
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..p.members).collect::<Vec<_>>(),
            "stripe {stripe}: {map:?}"
        );
        assert_eq!(map.q.is_some(), p.level == Level::Raid6);
        if p.level == Level::Raid6 {
            let mut coef: Vec<usize> = map.q_coef.iter().map(|&c| usize::from(c)).collect();
            coef.sort_unstable();
            assert_eq!(coef, (0..k).collect::<Vec<_>>(), "q_coef is a permutation");
        } else {
            assert!(map.q_coef.is_empty());
        }
        for (dd, &member) in map.data.iter().enumerate() {
            assert_eq!(map.role_of(member), StripeRole::Data(dd));
            for offset in [0, chunk - 1] {
                let sector = p.array_sector(stripe, dd, offset);
                assert_eq!(p.locate(sector), (stripe, dd, offset));
                let loc = Loc {
                    member,
                    sector: p.member_sector(stripe, offset),
                };
                assert_eq!(locs_of(g, sector), [loc]);
            }
        }
    }
}

/// `pieces` of a range: in array order, contiguous, covering it exactly, and contiguous on
/// every copy (checked sector by sector against one-sector mappings, sampled every `step`).
pub fn check_pieces(g: &Geometry, sector: u64, count: u64, step: u64) -> Pieces {
    let pieces = g.pieces(sector, count);
    let mut at = sector;
    for piece in &pieces {
        assert_eq!(piece.array_sector, at, "pieces are in order and contiguous");
        assert!(piece.sectors > 0);
        assert_eq!(piece.copies.len(), copies_per_sector(g));
        at += piece.sectors;
        let mut offset = 0;
        while offset < piece.sectors {
            let expect: Vec<Loc> = piece
                .copies
                .iter()
                .map(|l| Loc {
                    member: l.member,
                    sector: l.sector + offset,
                })
                .collect();
            assert_eq!(
                locs_of(g, piece.array_sector + offset),
                expect,
                "{g:?} {piece:?}"
            );
            offset += step.max(1);
        }
        // The last sector is always checked: the piece must not run past its contiguity.
        let last = piece.sectors - 1;
        let expect: Vec<Loc> = piece
            .copies
            .iter()
            .map(|l| Loc {
                member: l.member,
                sector: l.sector + last,
            })
            .collect();
        assert_eq!(locs_of(g, piece.array_sector + last), expect);
    }
    assert_eq!(at, sector + count, "pieces cover the range exactly");
    // Into a table that held other pieces: the same pieces, within the room announced.
    let room = g.piece_room(sector, count);
    assert!(
        pieces.len() <= room,
        "{} pieces, room for {room}",
        pieces.len()
    );
    let mut table = g.pieces(0, 1);
    table.reserve(room);
    let cap = table.capacity();
    g.pieces_into(sector, count, &mut table);
    assert_eq!(table, pieces, "pieces_into empties the table first");
    assert_eq!(table.capacity(), cap, "the room announced is enough");
    if let Some(p) = g.as_parity() {
        let chunk = u64::from(p.chunk_sectors);
        for piece in &pieces {
            assert_eq!(
                piece.array_sector / chunk,
                (piece.array_sector + piece.sectors - 1) / chunk
            );
        }
    }
    pieces
}

/// `coalesce` with a copy chooser: expanding the runs reproduces the chosen copy of every
/// sector exactly once, runs are contiguous, ordered, and within `max_segs`.
pub fn check_coalesce(pieces: &[Piece], max_segs: usize, choose: impl Fn(&Piece) -> usize) {
    let runs = coalesce(pieces, max_segs, &choose);
    let mut expected: HashMap<u64, Loc> = HashMap::new();
    for piece in pieces {
        let loc = piece.copies[choose(piece)];
        for i in 0..piece.sectors {
            expected.insert(
                piece.array_sector + i,
                Loc {
                    member: loc.member,
                    sector: loc.sector + i,
                },
            );
        }
    }
    let mut found: HashMap<u64, Loc> = HashMap::new();
    for (i, run) in runs.iter().enumerate() {
        assert!(
            !run.segs.is_empty() && run.segs.len() <= max_segs.max(1),
            "{run:?}"
        );
        if i > 0 {
            let prev = &runs[i - 1];
            assert!(
                (prev.member, prev.sector) < (run.member, run.sector),
                "runs are ordered"
            );
            assert!(prev.member != run.member || prev.sector + prev.sectors <= run.sector);
        }
        let mut member_sector = run.sector;
        for (j, seg) in run.segs.iter().enumerate() {
            assert!(seg.sectors > 0);
            if j > 0 {
                let prev = run.segs[j - 1];
                assert_ne!(
                    prev.array_sector + prev.sectors,
                    seg.array_sector,
                    "unmerged segs"
                );
            }
            for k in 0..seg.sectors {
                let loc = Loc {
                    member: run.member,
                    sector: member_sector + k,
                };
                assert!(
                    found.insert(seg.array_sector + k, loc).is_none(),
                    "sector twice"
                );
            }
            member_sector += seg.sectors;
        }
        assert_eq!(
            member_sector,
            run.sector + run.sectors,
            "run length = its segs"
        );
    }
    assert_eq!(found, expected);
}

// ---------------------------------------------------------------- reference models

/// raid5.c `raid5_compute_sector` restated case by case with md's layout numbers:
/// (P member, Q member, data member) of data chunk `dd` in `stripe`.
pub fn ref_parity(
    level: Level,
    algorithm: u32,
    n: usize,
    stripe: u64,
    dd: usize,
) -> (usize, Option<usize>, usize) {
    let data_disks = if level == Level::Raid6 { n - 2 } else { n - 1 };
    let turn = |width: usize| (stripe % width as u64) as usize;
    if level == Level::Raid4 {
        return (data_disks, None, dd);
    }
    if level == Level::Raid5 {
        let (pd, disk) = match algorithm {
            0 => {
                let pd = data_disks - turn(n);
                (pd, if dd >= pd { dd + 1 } else { dd })
            }
            1 => {
                let pd = turn(n);
                (pd, if dd >= pd { dd + 1 } else { dd })
            }
            2 => {
                let pd = data_disks - turn(n);
                (pd, (pd + 1 + dd) % n)
            }
            3 => {
                let pd = turn(n);
                (pd, (pd + 1 + dd) % n)
            }
            4 => (0, dd + 1),
            5 => (data_disks, dd),
            _ => panic!("raid5 layout {algorithm}"),
        };
        return (pd, None, disk);
    }
    let asym = |pd: usize| {
        let qd = pd + 1;
        if pd == n - 1 {
            (pd, 0, dd + 1)
        } else if dd >= pd {
            (pd, qd, dd + 2)
        } else {
            (pd, qd, dd)
        }
    };
    let (pd, qd, disk) = match algorithm {
        0 => asym(n - 1 - turn(n)),
        1 => asym(turn(n)),
        2 => {
            let pd = n - 1 - turn(n);
            (pd, (pd + 1) % n, (pd + 2 + dd) % n)
        }
        3 => {
            let pd = turn(n);
            (pd, (pd + 1) % n, (pd + 2 + dd) % n)
        }
        4 => (0, 1, dd + 2),
        5 => (data_disks, data_disks + 1, dd),
        16 => {
            let pd = data_disks - turn(n - 1);
            (pd, n - 1, if dd >= pd { dd + 1 } else { dd })
        }
        17 => {
            let pd = turn(n - 1);
            (pd, n - 1, if dd >= pd { dd + 1 } else { dd })
        }
        18 => {
            let pd = data_disks - turn(n - 1);
            (pd, n - 1, (pd + 1 + dd) % (n - 1))
        }
        19 => {
            let pd = turn(n - 1);
            (pd, n - 1, (pd + 1 + dd) % (n - 1))
        }
        20 => (0, n - 1, dd + 1),
        _ => panic!("raid6 layout {algorithm}"),
    };
    (pd, Some(qd), disk)
}

/// raid5.c's Q slot numbering (`raid6_d0` + `raid6_idx_to_slot`, non-DDF): walk the disks
/// from just after Q, counting only data disks.
pub fn ref_q_slots(n: usize, pd: usize, qd: usize) -> HashMap<usize, usize> {
    let mut disk = if qd == n - 1 { 0 } else { qd + 1 };
    let mut slots = HashMap::new();
    for _ in 0..n {
        if disk != pd && disk != qd {
            let next = slots.len();
            slots.insert(disk, next);
        }
        disk = (disk + 1) % n;
    }
    slots
}

/// raid10.c `__raid10_find_phys` restated: every (device, sector) of array sector `x`.
pub struct Raid10Ref {
    pub raid_disks: usize,
    pub near: usize,
    pub far: usize,
    pub offset: bool,
    pub far_set_size: usize,
    pub chunk: u64,
    pub stride: u64,
    pub array_sectors: u64,
    pub dev_sectors: u64,
}

impl Raid10Ref {
    /// md's sizes for component size `size` (calc_sectors, raid10_size).
    pub fn new(
        raid_disks: usize,
        near: usize,
        far: usize,
        offset: bool,
        mode: u8,
        chunk: u64,
        size: u64,
    ) -> Raid10Ref {
        let copies = (near * far) as u64;
        let chunks_in_array = size / chunk / far as u64 * raid_disks as u64 / near as u64;
        let used = (chunks_in_array * copies).div_ceil(raid_disks as u64);
        let stride = if offset {
            chunk
        } else {
            used / far as u64 * chunk
        };
        Raid10Ref {
            raid_disks,
            near,
            far,
            offset,
            far_set_size: if mode == 0 { raid_disks } else { near * far },
            chunk,
            stride,
            array_sectors: chunks_in_array * chunk,
            dev_sectors: used * chunk,
        }
    }

    pub fn phys(&self, x: u64) -> Vec<(usize, u64)> {
        let rd = self.raid_disks;
        let fss = self.far_set_size;
        let last_start = (rd / fss - 1) * fss;
        let last_size = fss + rd % fss;
        let mut chunk = x / self.chunk;
        let mut sector = x % self.chunk;
        chunk *= self.near as u64;
        let mut stripe = chunk / rd as u64;
        let mut dev = (chunk % rd as u64) as usize;
        if self.offset {
            stripe *= self.far as u64;
        }
        sector += stripe * self.chunk;
        let mut out = Vec::new();
        for _ in 0..self.near {
            let mut d = dev;
            let mut s = sector;
            out.push((d, s));
            for _ in 1..self.far {
                let set = d / fss;
                d += self.near;
                if !rd.is_multiple_of(fss) && d > last_start {
                    d = (d - last_start) % last_size + last_start;
                } else {
                    d = d % fss + fss * set;
                }
                s += self.stride;
                out.push((d, s));
            }
            dev += 1;
            if dev >= rd {
                dev = 0;
                sector += self.chunk;
            }
        }
        out
    }

    /// Whether md's mapping is usable: no two copies share a member sector, copies of a
    /// sector sit on distinct members, and everything fits in md's dev_sectors.
    pub fn collision_free(&self) -> bool {
        let mut seen = HashSet::new();
        (0..self.array_sectors / self.chunk).all(|ch| {
            let locs = self.phys(ch * self.chunk);
            let devs: HashSet<usize> = locs.iter().map(|l| l.0).collect();
            devs.len() == locs.len()
                && locs
                    .iter()
                    .all(|&l| l.1 < self.dev_sectors && seen.insert(l))
        })
    }
}

/// raid0.c restated with sorted distinct sizes: zone i spans member sectors
/// [size_{i-1}, size_i) on every member at least size_i long.
pub fn ref_raid0(sizes: &[u64], chunk: u64, original: bool, x: u64) -> (usize, u64) {
    let mut distinct: Vec<u64> = sizes.iter().map(|s| s / chunk * chunk).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut zone_start = 0u64;
    let mut prev = 0u64;
    for &size in &distinct {
        let members: Vec<usize> = (0..sizes.len())
            .filter(|&m| sizes[m] / chunk * chunk >= size)
            .collect();
        let zone_len = (size - prev) * members.len() as u64;
        if x < zone_start + zone_len {
            let z = x - zone_start;
            let pick_from = if original { x } else { z };
            let member = members[((pick_from / chunk) % members.len() as u64) as usize];
            let row = z / chunk / members.len() as u64;
            return (member, prev + row * chunk + x % chunk);
        }
        zone_start += zone_len;
        prev = size;
    }
    panic!("sector {x} beyond the array");
}
