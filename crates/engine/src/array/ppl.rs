//! The partial parity log at work (md's PPL; its bytes are `raidd_md::ppl`): each RAID5
//! stripe write logs its entries and partial parity to the log in its parity member's
//! metadata area, durably, before any of its data or parity goes out.
//!
//! Each member's log holds a queue of units. A batch's entries join the unit that is still
//! gathering at the back of each log it logs to, all at once under one lock ([`Ppl::
//! append`]), so that batches take their places in every log in one order. A unit is
//! written when the one before it has *finished*: every batch in it wrote its members and
//! those members were flushed. That is md's rule, and what lets recovery trust only the
//! newest unit of each log. Whichever batch first waits for a ready unit writes it
//! ([`Ticket::durable`]); the batch that releases a unit last flushes the members its
//! batches wrote and readies the next ([`Ticket::release`]).
//!
//! No batch waits on a unit behind one of its own: a batch takes one unit per log, and by
//! the order of appends every unit before one of its units holds only batches appended
//! before it, which wait on nothing of later ones.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use raidd_md::ppl::{Area, Cursor, Entry, UnitBuilder};
use raidd_rt::AlignedBuf;
use smallvec::SmallVec;

use super::latch::Latch;
use super::member_io::Owner;
use super::report::PplRecovered;
use crate::member::{write_bytes, Member};

/// Where one member's log lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogArea {
    /// Byte offset of the area on the member.
    pub(crate) at: u64,
    pub(crate) area: Area,
}

/// One entry a batch logs, with its partial parity: to the log of member `role` (its
/// stripe's parity member).
#[derive(Debug)]
pub(crate) struct LogItem {
    pub(crate) role: usize,
    pub(crate) entry: Entry,
    pub(crate) pp: Vec<u8>,
}

/// The array's partial parity log: a log per member. Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Ppl {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    signature: u32,
    /// Where a member's log lies relative to its superblock, as every member's superblock
    /// says (mdadm and raidd place them alike): for members that take a slot later.
    template: LogArea,
    /// Partial parity one batch may log to one member (a chunk's at most).
    max_pp: usize,
    /// md's `seq`: one count over every log, from 1 at each start.
    generation: AtomicU64,
    logs: Mutex<Vec<LogQueue>>,
    /// What the start recovered, after an unclean stop.
    recovered: Mutex<Option<PplRecovered>>,
}

#[derive(Debug)]
struct LogQueue {
    /// Where the slot's member keeps its log (`None`: the slot has no member with one).
    area: Option<LogArea>,
    cursor: Cursor,
    /// Oldest first: the front is written or about to be, the back may still gather.
    units: VecDeque<Arc<Unit>>,
}

#[derive(Debug)]
struct Unit {
    role: usize,
    st: Mutex<UnitState>,
    /// The unit before it finished (or there was none).
    ready: Latch,
    /// Its bytes are on the member (or the write failed and the member with it).
    written: Latch,
}

#[derive(Debug)]
struct UnitState {
    /// Entries gathered until it is written.
    builder: Option<UnitBuilder>,
    /// Batches holding it, not yet released.
    tickets: usize,
    /// Members its batches wrote: flushed before the next unit goes out.
    wrote: SmallVec<[usize; 8]>,
    /// Every batch in it is done: it leaves the queue once those before it have.
    done: bool,
}

impl Ppl {
    /// A log on each member with an area (`areas[role]`), for an array whose headers
    /// carry `signature`; `None` when no member has one.
    pub(crate) fn new(signature: u32, areas: Vec<Option<LogArea>>) -> Option<Ppl> {
        let template = areas.iter().flatten().next().copied()?;
        let max_pp = areas
            .iter()
            .flatten()
            .map(|a| a.area.unit_space())
            .min()
            .unwrap_or(0);
        let logs = areas
            .iter()
            .map(|&area| LogQueue {
                area,
                cursor: Cursor::new(area.unwrap_or(template).area),
                units: VecDeque::new(),
            })
            .collect();
        Some(Ppl {
            shared: Arc::new(Shared {
                signature,
                template,
                max_pp,
                generation: AtomicU64::new(0),
                logs: Mutex::new(logs),
                recovered: Mutex::new(None),
            }),
        })
    }

    /// Where member `role`'s log lives, if it has one.
    pub(crate) fn area(&self, role: usize) -> Option<LogArea> {
        self.shared.logs.lock().expect(crate::POISONED)[role].area
    }

    /// Records what the start recovered.
    pub(crate) fn recovered(&self, r: PplRecovered) {
        *self.shared.recovered.lock().expect(crate::POISONED) = Some(r);
    }

    /// What the start recovered, if it recovered.
    pub(crate) fn last_recovery(&self) -> Option<PplRecovered> {
        *self.shared.recovered.lock().expect(crate::POISONED)
    }

    pub(crate) fn signature(&self) -> u32 {
        self.shared.signature
    }

    /// Bytes of partial parity a batch may log to one member's log: a stripe logs at most
    /// a chunk's rows, and the array is refused PPL where a chunk is more than this.
    pub(crate) fn max_pp(&self) -> usize {
        self.shared.max_pp
    }

    /// `member` now holds slot `role` (admitted, or a replacement completed): its log
    /// starts empty (zeroed, an empty header) where every member's lies, and the next unit
    /// goes to its start. Written before the member takes writes.
    pub(crate) async fn attach(&self, member: &dyn Member, role: usize) -> std::io::Result<()> {
        let area = self.shared.template;
        write_empty(member, area, self.shared.signature).await?;
        let mut logs = self.shared.logs.lock().expect(crate::POISONED);
        let q = &mut logs[role];
        q.area = Some(area);
        q.cursor = Cursor::new(area.area);
        Ok(())
    }

    /// Adds a batch's entries to the logs (items for one member join one unit); the ticket
    /// says when they are durable and must be released once the batch's member writes are
    /// done.
    pub(crate) fn append(&self, items: impl IntoIterator<Item = LogItem>) -> Ticket {
        let mut items: SmallVec<[LogItem; 2]> = items.into_iter().collect();
        items.sort_by_key(|i| i.role);
        let mut units: SmallVec<[Arc<Unit>; 2]> = SmallVec::new();
        let mut logs = self.shared.logs.lock().expect(crate::POISONED);
        let mut items = items.into_iter().peekable();
        while let Some(first) = items.next() {
            let role = first.role;
            let mut mine: SmallVec<[LogItem; 2]> = smallvec::smallvec![first];
            while let Some(i) = items.next_if(|i| i.role == role) {
                mine.push(i);
            }
            let (count, pp) = (mine.len(), mine.iter().map(|i| i.pp.len()).sum::<usize>());
            let q = &mut logs[role];
            let Some(area) = q.area else {
                continue; // no member with a log holds the slot: nothing to protect there
            };
            // The back unit takes them if it still gathers and has room: checked and
            // filled under its lock in one go, since a ticket holder on another worker may
            // take its builder to write it (without the logs' lock) at any moment.
            let mut mine = Some(mine);
            if let Some(back) = q.units.back() {
                let mut st = back.st.lock().expect(crate::POISONED);
                if let Some(b) = st.builder.as_mut().filter(|b| b.takes(count, pp)) {
                    for i in mine.take().into_iter().flatten() {
                        b.push(i.entry, i.pp);
                    }
                    debug_assert!(
                        !back.written.is_set(),
                        "entries join a unit not yet written"
                    );
                    st.tickets += 1;
                }
            }
            let unit = match mine {
                None => q.units.back().expect("joined just now").clone(),
                Some(mine) => {
                    // A new unit, filled before anyone else can see it.
                    let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
                    let space = pp.max(area.area.entry_space() as usize);
                    assert!(
                        space <= area.area.unit_space(),
                        "a batch's partial parity fits its log's area"
                    );
                    let mut builder = UnitBuilder::new(self.shared.signature, generation, space);
                    for i in mine {
                        builder.push(i.entry, i.pp);
                    }
                    let unit = Arc::new(Unit {
                        role,
                        st: Mutex::new(UnitState {
                            builder: Some(builder),
                            tickets: 1,
                            wrote: SmallVec::new(),
                            done: false,
                        }),
                        ready: Latch::default(),
                        written: Latch::default(),
                    });
                    if q.units.is_empty() {
                        unit.ready.set();
                    }
                    q.units.push_back(unit.clone());
                    unit
                }
            };
            units.push(unit);
        }
        drop(logs);
        Ticket {
            shared: self.shared.clone(),
            units,
            released: false,
        }
    }

    /// Starts member `role`'s log afresh, as md does for each when an array starts:
    /// zeroes its area and writes an empty header at its start (generation 0).
    pub(crate) async fn reset_member(
        &self,
        member: &dyn Member,
        role: usize,
    ) -> std::io::Result<()> {
        let Some(a) = self.area(role) else {
            return Ok(());
        };
        write_empty(member, a, self.shared.signature).await
    }
}

/// Where a superblock places its member's log, checked as md checks it; and a chunk must
/// fit one unit of it (a stripe write logs up to a chunk of partial parity at once).
pub(crate) fn log_area(sb: &raidd_md::Superblock, name: &str) -> crate::Result<LogArea> {
    use crate::error::{Error, ErrorKind};
    let bad = |why: String| Error::new(ErrorKind::BadMetadata, format!("{name}: {why}"));
    let area = Area::of(sb)
        .ok_or_else(|| bad("no partial parity log, though the array keeps one".into()))?
        .validate(
            sb.super_offset,
            sb.encoded_len(),
            sb.data_offset,
            sb.data_size,
        )
        .map_err(|e| bad(e.to_string()))?;
    let chunk = u64::from(sb.chunksize) * 512;
    if chunk > area.unit_space() as u64 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{name}: a chunk of {chunk} bytes is more than its partial parity log holds \
                 in one unit ({} bytes)",
                area.unit_space()
            ),
        ));
    }
    Ok(LogArea {
        at: area.sector(sb.super_offset) * 512,
        area,
    })
}

/// An empty log: the area zeroed, an empty header at its start (md's `ppl_write_empty_header`,
/// mdadm's `write_init_ppl1`); durable on return.
pub(crate) async fn write_empty(
    member: &dyn Member,
    a: LogArea,
    signature: u32,
) -> std::io::Result<()> {
    let mut buf = AlignedBuf::zeroed(a.area.bytes() as usize);
    let header = raidd_md::ppl::Header::empty(signature).encode();
    buf[..header.len()].copy_from_slice(&header);
    write_bytes(member, a.at, buf).await?;
    member.flush().await
}

impl Unit {
    /// Whether nobody has taken it to write yet.
    fn gathering(&self) -> bool {
        self.st.lock().expect(crate::POISONED).builder.is_some()
    }
}

/// A batch's place in the logs.
#[derive(Debug)]
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    units: SmallVec<[Arc<Unit>; 2]>,
    released: bool,
}

impl Ticket {
    /// Returns once every unit holding the batch's entries is on its member. A unit whose
    /// write fails fails its member (through `owner`); the batch goes on, as md's does: a
    /// stripe whose parity member is gone has no parity to protect.
    pub(crate) async fn durable(&self, owner: &impl Owner) {
        // Its units (one per log) go out together.
        futures::future::join_all(self.units.iter().map(|unit| async move {
            unit.ready.wait().await;
            // The batches this executor is already running join the unit before it goes
            // out, as md's raid5d gathers the stripes of one pass into an io_unit: one
            // header, one log write and one round of flushes for all of them. A lone
            // batch waits one turn of the executor.
            if unit.gathering() {
                raidd_rt::unplugged().await;
            }
            let builder = unit.st.lock().expect(crate::POISONED).builder.take();
            match builder {
                Some(b) => {
                    self.write(owner, unit, b).await;
                    unit.written.set();
                }
                None => unit.written.wait().await,
            }
        }))
        .await;
    }

    async fn write(&self, owner: &impl Owner, unit: &Unit, b: UnitBuilder) {
        debug_assert!(
            !b.is_empty(),
            "a unit is written with the entries that made it"
        );
        let (area, at) = {
            let mut logs = self.shared.logs.lock().expect(crate::POISONED);
            let q = &mut logs[unit.role];
            let area = q.area.expect("a unit of a member with a log");
            (area, q.cursor.place(b.sectors()))
        };
        assert!(
            at + b.sectors() <= u64::from(area.area.size),
            "a unit lies inside its log's area"
        );
        let Some(member) = owner.slots().member(unit.role) else {
            return;
        };
        let mut buf = AlignedBuf::for_overwrite(b.len());
        b.finish_into(&mut buf);
        let r = match write_bytes(&*member, area.at + at * 512, buf).await {
            Ok(()) => member.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            owner.fail_member_io(unit.role, &member, &e).await;
        }
    }

    /// The batch's member writes are done (`wrote`: the members written): each unit the
    /// batch was the last in flushes the members its batches wrote and lets the next unit
    /// of its log go.
    pub(crate) async fn release(mut self, owner: &impl Owner, wrote: &[usize]) {
        self.released = true;
        let units = std::mem::take(&mut self.units);
        // The units this batch was the last of, and the members their batches wrote: each
        // flushed once, all at once, however many of the units wrote it.
        let mut last: SmallVec<[Arc<Unit>; 2]> = SmallVec::new();
        let mut members: SmallVec<[usize; 8]> = SmallVec::new();
        for unit in units {
            let mut st = unit.st.lock().expect(crate::POISONED);
            st.wrote.extend_from_slice(wrote);
            assert!(st.tickets > 0, "a unit released more often than joined");
            st.tickets -= 1;
            if st.tickets == 0 {
                debug_assert!(unit.written.is_set(), "released before it was written");
                members.extend(std::mem::take(&mut st.wrote));
                drop(st);
                last.push(unit);
            }
        }
        if last.is_empty() {
            return;
        }
        members.sort_unstable();
        members.dedup();
        futures::future::join_all(members.into_iter().map(|role| async move {
            if let Some(m) = owner.slots().member(role) {
                if let Err(e) = m.flush().await {
                    owner.fail_member_io(role, &m, &e).await;
                }
            }
        }))
        .await;
        for unit in &last {
            finish(&self.shared, unit);
        }
    }
}

impl Drop for Ticket {
    /// A batch dropped before its release (its request was cancelled): units it was the
    /// last of finish without the flush (a batch dropped before its unit was written
    /// issued no member writes; one dropped after may have, and only a power loss between
    /// here and the next flush could tell).
    fn drop(&mut self) {
        if self.released {
            return;
        }
        for unit in std::mem::take(&mut self.units) {
            let last = {
                let mut st = unit.st.lock().expect(crate::POISONED);
                assert!(st.tickets > 0, "a unit dropped more often than joined");
                st.tickets -= 1;
                st.tickets == 0
            };
            if last {
                if !unit.written.is_set() {
                    // Nobody waits for its bytes: every batch in it is gone unwritten.
                    unit.st.lock().expect(crate::POISONED).builder = None;
                    unit.written.set();
                }
                finish(&self.shared, &unit);
            }
        }
    }
}

/// A unit whose batches are all done leaves its log's queue once every unit before it has
/// (one whose batches were all cancelled may be done before them); the first unit left
/// may then be written.
fn finish(shared: &Shared, unit: &Arc<Unit>) {
    let mut logs = shared.logs.lock().expect(crate::POISONED);
    unit.st.lock().expect(crate::POISONED).done = true;
    let q = &mut logs[unit.role];
    debug_assert!(
        q.units.iter().any(|u| Arc::ptr_eq(u, unit)),
        "a finished unit is in its queue"
    );
    while q
        .units
        .front()
        .is_some_and(|u| u.st.lock().expect(crate::POISONED).done)
    {
        q.units.pop_front();
    }
    if let Some(next) = q.units.front() {
        next.ready.set();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_md::ppl::{Area, Entry, HEADER_SIZE};

    /// Batches appended on two threads while each takes the units it joined to write them,
    /// as `Ticket::durable` does on any worker: a batch joins the back unit only while that
    /// unit still gathers, never one another thread has just taken (that was a panic, "the
    /// back unit gathers", seen in the ublk guest with two workers).
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_unit_taken_on_another_thread_is_never_joined() {
        let area = LogArea {
            at: 8192,
            area: Area::MDADM,
        };
        let ppl = Ppl::new(1, vec![Some(area)]).unwrap();
        let joined = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (ppl, joined) = (&ppl, &joined);
                s.spawn(move || {
                    for k in 0..100_000u64 {
                        let entry = Entry {
                            data_sector: (t * 100_000 + k) * 8,
                            pp_size: 4096,
                            data_size: 4096,
                            parity_disk: 1,
                            checksum: 0,
                        };
                        let ticket = ppl.append([LogItem {
                            role: 0,
                            entry,
                            pp: vec![0; 4096],
                        }]);
                        assert_eq!(ticket.units.len(), 1, "one log, one unit");
                        for unit in &ticket.units {
                            let taken = unit.st.lock().unwrap().builder.take();
                            if let Some(b) = taken {
                                // Partial parity bytes: 4096 per entry.
                                joined.fetch_add((b.len() - HEADER_SIZE) as u64, Ordering::Relaxed);
                                unit.written.set();
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(
            joined.load(Ordering::Relaxed),
            200_000 * 4096,
            "every entry in a unit taken"
        );
    }
}
