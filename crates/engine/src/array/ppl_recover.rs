//! Starting a partial parity log, as md's `ppl_load` does: after an unclean stop, the
//! newest unit of each member's log is read and each of its entries recovered (the
//! stripe rows it names get the parity their data has now: the XOR of the written chunks
//! and the logged partial parity); then every log is zeroed and given an empty header.
//!
//! An entry is not applied when its partial parity's checksum fails (md counts a
//! mismatch and goes on), or when it is one md never writes (`raidd_md::ppl::Skip`: sizes,
//! a range leaving its stripe or the array, a parity member other than the log's); a
//! block whose written chunks are not all readable (a member missing, or not rebuilt that
//! far) is left as it is, as md leaves it. Each is said in the log with the member and the
//! entry.

use raidd_layout::SECTOR_SIZE;
use raidd_md::ppl::{scan, EntryPlan, ParityGeometry, Skip};
use raidd_rt::AlignedBuf;

use super::host::Host;
use super::ppl::Ppl;
use crate::member::{read_bytes, write_bytes, Member};

/// What recovery did, over every log.
pub(crate) type Recovered = super::report::PplRecovered;

/// Recovers every log of a stopped array's members (`host` serves nothing yet).
pub(crate) async fn recover(host: &impl Host, ppl: &Ppl, name: &str) -> Recovered {
    let mut total = Recovered::default();
    let pg = host.parity_shape();
    let geometry = ParityGeometry {
        raid_disks: pg.members as u32,
        parity_disks: (pg.members - pg.data_members()) as u32,
        chunk_sectors: u64::from(pg.chunk_sectors),
        array_sectors: pg.array_sectors(),
    };
    for role in 0..host.slots().len() {
        let (Some(area), Some(member)) = (ppl.area(role), host.slots().member(role)) else {
            continue;
        };
        if !host.slots().in_sync(role) {
            continue;
        }
        let bytes = match read_bytes(&*member, area.at, area.area.bytes() as usize).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(array = %name, role, "reading the partial parity log: {e}");
                host.fail_member_io(role, &member, &e).await;
                total.not_applied += 1;
                continue;
            }
        };
        let found = scan::newest(&bytes, ppl.signature());
        let Some(unit) = found.newest else {
            tracing::warn!(array = %name, role, "partial parity log holds no valid header ({:?}): nothing recovered from it", found.end);
            total.not_applied += 1;
            continue;
        };
        for (i, e) in unit.header.entries.iter().enumerate() {
            let pp_at = (unit.pp_offset(i) * SECTOR_SIZE) as usize;
            let r = match pp_at.checked_add(e.pp_size as usize) {
                Some(end) if end <= bytes.len() => {
                    apply(host, &member, role, e, &bytes[pp_at..end], &geometry).await
                }
                _ => Err(Skip::PastArea),
            };
            match r {
                Ok(blocks) => {
                    total.entries += 1;
                    total.blocks += blocks;
                }
                Err(why) => {
                    tracing::warn!(array = %name, role, generation = unit.header.generation, entry = i,
                        data_sector = e.data_sector, "partial parity log entry not applied: {why}");
                    total.not_applied += 1;
                }
            }
        }
        if let Err(e) = member.flush().await {
            host.fail_member_io(role, &member, &e).await;
        }
    }
    total
}

/// Applies one entry of member `role`'s log; the blocks whose parity it rewrote.
async fn apply(
    host: &impl Host,
    log: &std::sync::Arc<dyn Member>,
    role: usize,
    e: &raidd_md::ppl::Entry,
    pp: &[u8],
    g: &ParityGeometry,
) -> Result<u64, Skip> {
    let computed = raidd_md::ppl::pp_checksum(pp);
    if computed != e.checksum {
        return Err(Skip::Checksum {
            stored: e.checksum,
            computed,
        });
    }
    let plan = EntryPlan::new(e, g)?;
    let pg = host.parity_shape();
    let (stripe, _, _) = pg.locate(plan.first);
    let parity = pg.stripe_map(stripe).p;
    if parity as u32 != e.parity_disk {
        return Err(Skip::ParityDisk {
            mapped: parity as u32,
            logged: e.parity_disk,
        });
    }
    if parity != role {
        return Err(Skip::WrongLog {
            log: role as u32,
            parity: parity as u32,
        });
    }
    let len = (plan.block_sectors * SECTOR_SIZE) as usize;
    let mut blocks = 0;
    'block: for b in plan.blocks() {
        debug_assert!(
            !b.sources.is_empty() && b.sources.len() as u64 <= plan.data_disks,
            "a block reads one to all of the entry's chunks"
        );
        let mut acc = AlignedBuf::zeroed(len);
        for &s in &b.sources {
            let (st, dd, off) = pg.locate(s);
            debug_assert_eq!(st, stripe, "an entry's sources lie in its stripe");
            let m = pg.stripe_map(st).data[dd];
            let sector = pg.member_sector(st, off);
            let Some(member) = host.slots().member(m) else {
                continue 'block;
            };
            if !host.in_sync_at(m, sector + plan.block_sectors) {
                continue 'block;
            }
            match read_bytes(&*member, host.member_offset(m, sector), len).await {
                Ok(d) => raidd_parity::xor_into(&mut acc, &d),
                Err(err) => {
                    host.fail_member_io(m, &member, &err).await;
                    continue 'block;
                }
            }
        }
        if plan.has_pp {
            let at = (b.offset * SECTOR_SIZE) as usize;
            raidd_parity::xor_into(&mut acc, &pp[at..at + len]);
        }
        let (st, _, off) = pg.locate(b.row_sector);
        let sector = pg.member_sector(st, off);
        if let Err(err) = write_bytes(&**log, host.member_offset(role, sector), acc).await {
            host.fail_member_io(role, log, &err).await;
            return Ok(blocks);
        }
        blocks += 1;
    }
    Ok(blocks)
}
