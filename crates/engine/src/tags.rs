//! The checksum tags of an array's members while it runs (their bytes on the members are
//! `raidd_md::tags`): a cache of tag pages bounded in bytes, so that a 4 KiB read costs no
//! second member read on a hit, and a member's written blocks change their tags in memory
//! until the pages are written back (before a flush completes, or when the cache makes
//! room).
//!
//! The cache holds no I/O: it says which page a block's tag is on, answers from the pages
//! it holds, takes pages read from a member, and names the dirty pages that must be written
//! (all of them at a flush; those it would evict when full). The array does the reads and
//! writes around it.

use rustc_hash::FxHashMap;

use raidd_md::tags::{self, Algorithm, Geometry, PAGE};

/// A tag page of one member: its role (slot) and its index in the member's tag area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId {
    pub role: usize,
    pub page: u64,
}

#[derive(Debug)]
struct Held {
    bytes: Box<[u8]>,
    dirty: bool,
    /// The cache's clock when it was last used: the least recently used goes first.
    used: u64,
}

/// Tag pages held in memory, at most `limit` of them. Keyed with FxHash: every verified
/// read and tagged write looks a page up, and a page id is two integers that no client
/// chooses freely enough to flood one bucket (a member's pages are dense from 0).
#[derive(Debug)]
pub struct TagCache {
    algorithm: Algorithm,
    limit: usize,
    pages: FxHashMap<PageId, Held>,
    clock: u64,
    hits: u64,
    misses: u64,
}

/// What a block's data said against its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Good,
    /// The block's bytes do not match its tag: the member returned something else than was
    /// written there (a flipped bit, a misdirected or lost write).
    Bad {
        block: u64,
        tag: u32,
        computed: u32,
    },
    /// Its tag page is not in the cache: read it, [`TagCache::insert`] it, and ask again.
    Missing(PageId),
}

impl TagCache {
    /// A cache of `limit_bytes` of tag pages (at least a page per member of `members`, so
    /// that a write to every member at once always fits).
    pub fn new(algorithm: Algorithm, limit_bytes: u64, members: usize) -> TagCache {
        let limit = usize::try_from(limit_bytes / PAGE as u64)
            .unwrap_or(usize::MAX)
            .max(members.max(1));
        TagCache {
            algorithm,
            limit,
            pages: FxHashMap::default(),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Pages it holds at most.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Pages held now.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Lookups answered from memory, and those that needed a page read.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The page holding block `block`'s tag on member `role` (used now, a hit) and the
    /// tag's slot on it; `Err` names the page when the cache does not hold it (a miss).
    fn lookup(&mut self, role: usize, g: &Geometry, block: u64) -> Result<(&Held, usize), PageId> {
        let place = g.place(block);
        let id = PageId {
            role,
            page: place.page,
        };
        let now = self.tick();
        let Some(held) = self.pages.get_mut(&id) else {
            self.misses += 1;
            return Err(id);
        };
        held.used = now;
        self.hits += 1;
        Ok((held, place.offset / tags::TAG_BYTES))
    }

    /// Block `block`'s tag on member `role` (of geometry `g`); `Err` names its page when the
    /// cache does not hold it.
    pub fn tag(&mut self, role: usize, g: &Geometry, block: u64) -> Result<u32, PageId> {
        let (held, slot) = self.lookup(role, g, block)?;
        Ok(tags::get(&held.bytes, slot))
    }

    /// Sets block `block`'s tag on member `role` (its page dirty); `Err` names its page
    /// when the cache does not hold it.
    pub fn put(&mut self, role: usize, g: &Geometry, block: u64, tag: u32) -> Result<(), PageId> {
        let place = g.place(block);
        let id = PageId {
            role,
            page: place.page,
        };
        let now = self.tick();
        let held = self.pages.get_mut(&id).ok_or(id)?;
        tags::set(&mut held.bytes, place.offset / tags::TAG_BYTES, tag);
        held.dirty = true;
        held.used = now;
        Ok(())
    }

    /// Whether the cache holds page `id`.
    pub fn holds(&self, id: PageId) -> bool {
        self.pages.contains_key(&id)
    }

    /// The first of the blocks from `first` whose tag is not `computed`'s (`None`: all
    /// match), looked up a page at a time: a large read costs a lookup per 4 MiB of data.
    /// `Err` names a page the cache does not hold, before which all matched.
    pub fn first_mismatch(
        &mut self,
        role: usize,
        g: &Geometry,
        first: u64,
        computed: &[u32],
    ) -> Result<Option<usize>, PageId> {
        let mut k = 0;
        while k < computed.len() {
            let (held, slot) = self.lookup(role, g, first + k as u64)?;
            let n = (computed.len() - k).min(tags::TAGS_PER_PAGE as usize - slot);
            let on_page = held.bytes[slot * tags::TAG_BYTES..(slot + n) * tags::TAG_BYTES]
                .chunks_exact(tags::TAG_BYTES);
            if let Some(j) = on_page
                .zip(&computed[k..k + n])
                .position(|(t, &c)| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) != c)
            {
                return Ok(Some(k + j));
            }
            k += n;
        }
        Ok(None)
    }

    /// Checks whole blocks read from member `role`'s data area (`data` starts at block
    /// `first` of its geometry `g`), stopping at the first bad block or missing page.
    pub fn check(&mut self, role: usize, g: &Geometry, first: u64, data: &[u8]) -> Check {
        debug_assert_eq!(data.len() % tags::BLOCK, 0, "whole blocks are checked");
        for (k, block) in data.chunks_exact(tags::BLOCK).enumerate() {
            let b = first + k as u64;
            if b >= g.blocks() {
                break; // a tail shorter than a block has no tag
            }
            let tag = match self.tag(role, g, b) {
                Ok(t) => t,
                Err(id) => return Check::Missing(id),
            };
            let computed = self.algorithm.tag(block);
            if tag != computed {
                return Check::Bad {
                    block: b,
                    tag,
                    computed,
                };
            }
        }
        Check::Good
    }

    /// Sets the tags of whole blocks written to member `role` (`data` at block `first`);
    /// `Err` names the first page not in the cache (read it, insert it, set again: pages
    /// set before it stay set).
    pub fn set(
        &mut self,
        role: usize,
        g: &Geometry,
        first: u64,
        data: &[u8],
    ) -> Result<(), PageId> {
        debug_assert_eq!(data.len() % tags::BLOCK, 0, "whole blocks are tagged");
        for (k, block) in data.chunks_exact(tags::BLOCK).enumerate() {
            let b = first + k as u64;
            if b >= g.blocks() {
                break;
            }
            self.put(role, g, b, self.algorithm.tag(block))?;
        }
        Ok(())
    }

    /// Takes a page read from its member. When the cache is full the least recently used
    /// page makes room: a clean one is dropped, a dirty one is returned with its bytes, to
    /// be written before anything else may read it from the member. A page already held
    /// stays as it is (it may hold tags newer than the member's).
    pub fn insert(&mut self, id: PageId, bytes: &[u8]) -> Option<(PageId, Box<[u8]>)> {
        assert_eq!(bytes.len(), PAGE, "a tag page is {PAGE} bytes");
        let now = self.tick();
        if let Some(h) = self.pages.get_mut(&id) {
            h.used = now;
            return None;
        }
        let evicted = if self.pages.len() >= self.limit {
            self.evict()
        } else {
            None
        };
        self.pages.insert(
            id,
            Held {
                bytes: bytes.into(),
                dirty: false,
                used: now,
            },
        );
        debug_assert!(self.pages.len() <= self.limit, "the cache keeps its bound");
        evicted
    }

    /// Removes the least recently used page; its bytes when they must be written.
    fn evict(&mut self) -> Option<(PageId, Box<[u8]>)> {
        let (&id, _) = self.pages.iter().min_by_key(|(id, h)| (h.used, **id))?;
        let h = self.pages.remove(&id)?;
        h.dirty.then_some((id, h.bytes))
    }

    /// The dirty pages with their bytes (copies), in member and page order: what a flush
    /// writes. They stay dirty until [`TagCache::written`] says so.
    pub fn dirty(&self) -> Vec<(PageId, Box<[u8]>)> {
        let mut d: Vec<_> = self
            .pages
            .iter()
            .filter(|(_, h)| h.dirty)
            .map(|(id, h)| (*id, h.bytes.clone()))
            .collect();
        d.sort_by_key(|(id, _)| *id);
        d
    }

    /// Whether some page holds tags its member does not have yet.
    pub fn has_dirty(&self) -> bool {
        self.pages.values().any(|h| h.dirty)
    }

    /// Page `id` as written at `bytes` is on its member: clean, unless its tags changed
    /// since the copy was taken.
    pub fn written(&mut self, id: PageId, bytes: &[u8]) {
        if let Some(h) = self.pages.get_mut(&id) {
            if *h.bytes == *bytes {
                h.dirty = false;
            }
        }
    }

    /// Member `role` left its slot (failed, removed, replaced): its pages go, dirty or not
    /// (a new member's tags are built as it is rebuilt).
    pub fn forget(&mut self, role: usize) {
        self.pages.retain(|id, _| id.role != role);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        // 64 MiB of data: 16384 blocks, 16 tag pages.
        Geometry::of(2048, 64 << 11)
    }

    fn block(fill: u8) -> Vec<u8> {
        vec![fill; tags::BLOCK]
    }

    /// A page whose tags are those of blocks filled with their block number's low byte.
    fn page_of(g: &Geometry, page: u64) -> Vec<u8> {
        let mut p = vec![0u8; PAGE];
        for b in g.page_blocks(page) {
            let slot = (b % tags::TAGS_PER_PAGE) as usize;
            tags::set(&mut p, slot, Algorithm::Crc32c.tag(&block(b as u8)));
        }
        p
    }

    /// Across page boundaries, a page at a time: the first block whose tag differs, or the
    /// first page not held.
    #[test]
    fn the_first_mismatch_is_found_a_page_at_a_time() {
        let g = geometry();
        let mut c = TagCache::new(Algorithm::Crc32c, 1 << 20, 1);
        for page in 0..3 {
            c.insert(PageId { role: 0, page }, &page_of(&g, page));
        }
        let tags_of = |r: std::ops::Range<u64>| -> Vec<u32> {
            r.map(|b| Algorithm::Crc32c.tag(&block(b as u8))).collect()
        };
        let span = 1000..2100; // pages 0, 1 and 2
        let mut computed = tags_of(span.clone());
        assert_eq!(c.first_mismatch(0, &g, span.start, &computed), Ok(None));
        for bad in [0usize, 23, 24, 1047, 1048, 1099] {
            let mut wrong = computed.clone();
            wrong[bad] ^= 1;
            assert_eq!(c.first_mismatch(0, &g, span.start, &wrong), Ok(Some(bad)));
        }
        computed.extend(tags_of(2100..3100)); // into page 3, not held
        assert_eq!(
            c.first_mismatch(0, &g, span.start, &computed),
            Err(PageId { role: 0, page: 3 })
        );
    }

    #[test]
    fn reads_are_checked_once_their_page_is_in() {
        let g = geometry();
        let mut c = TagCache::new(Algorithm::Crc32c, 1 << 20, 4);
        let data: Vec<u8> = (1030..1033u64).flat_map(|b| block(b as u8)).collect();
        let id = PageId { role: 2, page: 1 };
        assert_eq!(c.check(2, &g, 1030, &data), Check::Missing(id));
        assert_eq!(c.insert(id, &page_of(&g, 1)), None);
        assert_eq!(c.check(2, &g, 1030, &data), Check::Good);
        // One flipped bit in the middle block.
        let mut bad = data.clone();
        bad[tags::BLOCK + 77] ^= 4;
        assert!(matches!(
            c.check(2, &g, 1030, &bad),
            Check::Bad { block: 1031, .. }
        ));
        // A misdirected read: block 1030's bytes where 1031's belong.
        let swapped: Vec<u8> = [1030u64, 1030, 1032]
            .iter()
            .flat_map(|&b| block(b as u8))
            .collect();
        assert!(matches!(
            c.check(2, &g, 1030, &swapped),
            Check::Bad { block: 1031, .. }
        ));
        // Another member's page is another page.
        assert_eq!(
            c.check(3, &g, 1030, &data),
            Check::Missing(PageId { role: 3, page: 1 })
        );
    }

    #[test]
    fn writes_change_tags_and_dirty_pages_are_written_back() {
        let g = geometry();
        let mut c = TagCache::new(Algorithm::Crc32c, 1 << 20, 4);
        let id = PageId { role: 0, page: 0 };
        assert_eq!(c.set(0, &g, 5, &block(9)), Err(id));
        c.insert(id, &page_of(&g, 0));
        c.set(0, &g, 5, &block(9)).unwrap();
        assert_eq!(c.check(0, &g, 5, &block(9)), Check::Good);
        assert!(matches!(c.check(0, &g, 5, &block(5)), Check::Bad { .. }));
        let d = c.dirty();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0, id);
        // Written, but changed again meanwhile: still dirty.
        c.set(0, &g, 6, &block(1)).unwrap();
        c.written(id, &d[0].1);
        assert_eq!(c.dirty().len(), 1);
        let d = c.dirty();
        c.written(id, &d[0].1);
        assert!(c.dirty().is_empty());
        // Read back as written: the page tells block 5's new bytes.
        let mut fresh = TagCache::new(Algorithm::Crc32c, 1 << 20, 4);
        fresh.insert(id, &d[0].1);
        assert_eq!(fresh.check(0, &g, 5, &block(9)), Check::Good);
    }

    #[test]
    fn the_bound_holds_and_dirty_pages_are_handed_back_not_lost() {
        let g = geometry();
        let mut c = TagCache::new(Algorithm::Crc32c, 3 * PAGE as u64, 1);
        assert_eq!(c.limit(), 3);
        for page in 0..3 {
            c.insert(PageId { role: 0, page }, &page_of(&g, page));
        }
        c.set(0, &g, 0, &block(7)).unwrap(); // page 0 dirty, and now the newest used
        let _ = c.check(0, &g, tags::TAGS_PER_PAGE, &block(0)); // page 1 used after
                                                                // Page 2 is the least recently used and clean: dropped.
        assert_eq!(c.insert(PageId { role: 0, page: 3 }, &page_of(&g, 3)), None);
        assert_eq!(c.len(), 3);
        // Then page 0 (dirty) before page 1: handed back with its tag.
        let _ = c.check(0, &g, tags::TAGS_PER_PAGE, &block(1));
        let _ = c.check(0, &g, 3 * tags::TAGS_PER_PAGE, &block(0));
        let (id, bytes) = c
            .insert(PageId { role: 0, page: 4 }, &page_of(&g, 4))
            .unwrap();
        assert_eq!(id, PageId { role: 0, page: 0 });
        assert_eq!(tags::get(&bytes, 0), Algorithm::Crc32c.tag(&block(7)));
        assert_eq!(c.len(), 3);
        // At least a page per member, whatever the configured bytes.
        assert_eq!(TagCache::new(Algorithm::Crc32c, 0, 6).limit(), 6);
    }

    #[test]
    fn a_held_page_is_not_replaced_by_an_older_read_and_a_member_leaving_drops_its_pages() {
        let g = geometry();
        let mut c = TagCache::new(Algorithm::Crc32c, 1 << 20, 4);
        let id = PageId { role: 1, page: 0 };
        c.insert(id, &page_of(&g, 0));
        c.set(1, &g, 0, &block(42)).unwrap();
        c.insert(id, &page_of(&g, 0)); // a read that raced the write
        assert_eq!(c.check(1, &g, 0, &block(42)), Check::Good);
        c.insert(PageId { role: 2, page: 0 }, &page_of(&g, 0));
        c.forget(1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.check(1, &g, 0, &block(42)), Check::Missing(id));
        let (hits, misses) = c.hits_and_misses();
        assert!(hits >= 1 && misses >= 1);
    }

    #[test]
    fn a_tail_shorter_than_a_block_is_not_checked() {
        // 3 blocks and a half: the half has no tag.
        let g = Geometry::of(2048, 28);
        let mut c = TagCache::new(Algorithm::Crc32c, 1 << 20, 1);
        c.insert(PageId { role: 0, page: 0 }, &page_of(&g, 0));
        let data: Vec<u8> = (0..4u64).flat_map(|b| block(b as u8 ^ 0xff)).collect();
        assert!(matches!(
            c.check(0, &g, 0, &data),
            Check::Bad { block: 0, .. }
        ));
        let good: Vec<u8> = (0..3u64)
            .flat_map(|b| block(b as u8))
            .chain(block(0xee))
            .collect();
        assert_eq!(c.check(0, &g, 0, &good), Check::Good);
    }
}
