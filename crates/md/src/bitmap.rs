//! md's internal write-intent bitmap header (`bitmap_super_t`, version 4), stored 8 sectors
//! after a v1.2 superblock, followed by the bit array.
//!
//! Layout (mdadm bitmap.h, little-endian): magic @0, version @4, `uuid[16]` @8, events @24,
//! events_cleared @32, sync_size @40, state @48, chunksize @52, daemon_sleep @56,
//! write_behind @60, sectors_reserved @64, nodes @68, `cluster_name[64]` @72, zero pad to 256.

use crate::le;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitmapError {
    #[error("no bitmap (magic {0:#010x}, expected 0x6d746962)")]
    BadMagic(u32),
    #[error("bitmap version {0} is not supported (3 or 4)")]
    BadVersion(u32),
    #[error("bitmap chunk size {0} is not a power of two of at least 512 bytes")]
    BadChunk(u32),
    #[error("bitmap header is truncated")]
    Truncated,
}

pub const BITMAP_MAGIC: u32 = 0x6d74_6962;
/// Bytes of `bitmap_super_t`; the bit array starts right after it.
pub const BITMAP_SUPER_LEN: usize = 256;
/// Oldest version md reads (bits in host order; identical to 4 on little-endian hosts).
pub const BITMAP_VERSION_LO: u32 = 3;
/// The version md writes (bits in little-endian order).
pub const BITMAP_VERSION_HI: u32 = 4;
/// `state` bit: the bitmap is out of date and must not be trusted (BITMAP_STALE).
pub const BITMAP_STATE_STALE: u32 = 2;

/// Smallest bitmap chunk md accepts (one sector).
const MIN_CHUNK_BYTES: u32 = 512;

mod off {
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 4;
    pub(super) const UUID: usize = 8;
    pub(super) const EVENTS: usize = 24;
    pub(super) const EVENTS_CLEARED: usize = 32;
    pub(super) const SYNC_SIZE: usize = 40;
    pub(super) const STATE: usize = 48;
    pub(super) const CHUNKSIZE: usize = 52;
    pub(super) const DAEMON_SLEEP: usize = 56;
    pub(super) const WRITE_BEHIND: usize = 60;
    pub(super) const SECTORS_RESERVED: usize = 64;
    pub(super) const NODES: usize = 68;
    pub(super) const CLUSTER_NAME: usize = 72;
    pub(super) const CLUSTER_NAME_LEN: usize = 64;
    /// First byte of the zero pad (`pad[256 - 136]` in bitmap.h).
    pub(super) const PAD: usize = CLUSTER_NAME + CLUSTER_NAME_LEN;
}

const _: () = assert!(off::PAD == 136);
const _: () = assert!(off::PAD < BITMAP_SUPER_LEN);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitmapSuper {
    pub version: u32,
    pub uuid: [u8; 16],
    pub events: u64,
    pub events_cleared: u64,
    /// Sectors covered (the member's used size).
    pub sync_size: u64,
    pub state: u32,
    /// Bytes of array data per bit.
    pub chunksize: u32,
    pub daemon_sleep: u32,
    pub write_behind: u32,
    pub sectors_reserved: u32,
    pub nodes: u32,
    pub cluster_name: [u8; 64],
}

impl BitmapSuper {
    /// Parses the first 256 bytes of `bytes` (which may hold the bit array after them).
    /// Checks magic, version (3 or 4; 5 is md-cluster's) and chunk size as the kernel does
    /// (`md_bitmap_read_sb`); the pad after `cluster_name` is ignored.
    pub fn parse(bytes: &[u8]) -> Result<BitmapSuper, BitmapError> {
        if bytes.len() < BITMAP_SUPER_LEN {
            return Err(BitmapError::Truncated);
        }
        let magic = le::u32_at(bytes, off::MAGIC);
        if magic != BITMAP_MAGIC {
            return Err(BitmapError::BadMagic(magic));
        }
        let sb = decode(bytes);
        if !(BITMAP_VERSION_LO..=BITMAP_VERSION_HI).contains(&sb.version) {
            return Err(BitmapError::BadVersion(sb.version));
        }
        if sb.chunksize < MIN_CHUNK_BYTES || !sb.chunksize.is_power_of_two() {
            return Err(BitmapError::BadChunk(sb.chunksize));
        }
        Ok(sb)
    }

    /// 256 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = vec![0u8; BITMAP_SUPER_LEN];
        le::put_u32(&mut buf, off::MAGIC, BITMAP_MAGIC);
        le::put_u32(&mut buf, off::VERSION, self.version);
        le::put(&mut buf, off::UUID, &self.uuid);
        le::put_u64(&mut buf, off::EVENTS, self.events);
        le::put_u64(&mut buf, off::EVENTS_CLEARED, self.events_cleared);
        le::put_u64(&mut buf, off::SYNC_SIZE, self.sync_size);
        le::put_u32(&mut buf, off::STATE, self.state);
        le::put_u32(&mut buf, off::CHUNKSIZE, self.chunksize);
        le::put_u32(&mut buf, off::DAEMON_SLEEP, self.daemon_sleep);
        le::put_u32(&mut buf, off::WRITE_BEHIND, self.write_behind);
        le::put_u32(&mut buf, off::SECTORS_RESERVED, self.sectors_reserved);
        le::put_u32(&mut buf, off::NODES, self.nodes);
        le::put(&mut buf, off::CLUSTER_NAME, &self.cluster_name);
        debug_assert!(buf[off::PAD..].iter().all(|&b| b == 0));
        buf
    }

    /// Number of bits (chunks) covering `sync_size`: ceil(sync_size * 512 / chunksize)
    /// (mdadm's `bitmap_bits`). 0 for a chunk size of 0, which `parse` never returns;
    /// saturates instead of overflowing on absurd values.
    pub fn bits(&self) -> u64 {
        if self.chunksize == 0 {
            return 0;
        }
        let bytes = u128::from(self.sync_size) * 512;
        let bits = bytes.div_ceil(u128::from(self.chunksize));
        u64::try_from(bits).unwrap_or(u64::MAX)
    }

    /// Bytes of the bit array: ceil(bits / 8).
    pub fn bitmap_bytes(&self) -> u64 {
        self.bits().div_ceil(8)
    }

    /// Header plus bit array rounded up to `boundary` bytes (mdadm's `calc_bitmap_size`):
    /// the space the bitmap occupies on a member. `boundary` 0 means no rounding.
    pub fn stored_len(&self, boundary: u64) -> u64 {
        let len = self.bitmap_bytes().saturating_add(BITMAP_SUPER_LEN as u64);
        if boundary == 0 {
            return len;
        }
        len.div_ceil(boundary).saturating_mul(boundary)
    }

    /// Whether the kernel marked the bitmap stale (it then resyncs everything).
    pub fn is_stale(&self) -> bool {
        self.state & BITMAP_STATE_STALE != 0
    }

    /// Whether the bits cannot be trusted for an array at `array_events`: marked stale, or
    /// older than the superblocks (writes went on that it did not record). The kernel then
    /// counts every chunk as dirty ("bitmap file is out of date -- forcing full recovery").
    pub fn is_out_of_date(&self, array_events: u64) -> bool {
        self.is_stale() || self.events < array_events
    }

    /// Marks the header stale, or clears the mark.
    pub fn set_stale(&mut self, stale: bool) {
        if stale {
            self.state |= BITMAP_STATE_STALE;
        } else {
            self.state &= !BITMAP_STATE_STALE;
        }
    }

    /// Counts the set ("dirty") bits among the first [`BitmapSuper::bits`] bits of
    /// `bit_array` (the bytes after the header; bit i is bit i%8 of byte i/8). Bits past
    /// `bits()` are ignored: md leaves them set in the last byte.
    pub fn count_dirty(&self, bit_array: &[u8]) -> u64 {
        let bits = self.bits();
        let whole_bytes = usize::try_from(bits / 8).unwrap_or(usize::MAX);
        let full = bit_array.get(..whole_bytes).unwrap_or(bit_array);
        let mut dirty: u64 = full.iter().map(|b| u64::from(b.count_ones())).sum();
        let tail_bits = (bits % 8) as u32;
        if tail_bits > 0 && full.len() == whole_bytes {
            if let Some(&last) = bit_array.get(whole_bytes) {
                let mask = (1u8 << tail_bits) - 1;
                dirty += u64::from((last & mask).count_ones());
            }
        }
        dirty
    }
}

fn decode(bytes: &[u8]) -> BitmapSuper {
    debug_assert!(bytes.len() >= BITMAP_SUPER_LEN);
    BitmapSuper {
        version: le::u32_at(bytes, off::VERSION),
        uuid: le::bytes_at(bytes, off::UUID),
        events: le::u64_at(bytes, off::EVENTS),
        events_cleared: le::u64_at(bytes, off::EVENTS_CLEARED),
        sync_size: le::u64_at(bytes, off::SYNC_SIZE),
        state: le::u32_at(bytes, off::STATE),
        chunksize: le::u32_at(bytes, off::CHUNKSIZE),
        daemon_sleep: le::u32_at(bytes, off::DAEMON_SLEEP),
        write_behind: le::u32_at(bytes, off::WRITE_BEHIND),
        sectors_reserved: le::u32_at(bytes, off::SECTORS_RESERVED),
        nodes: le::u32_at(bytes, off::NODES),
        cluster_name: le::bytes_at(bytes, off::CLUSTER_NAME),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_date_by_flag_or_events() {
        let mut b = sample();
        assert!(!b.is_out_of_date(9) && !b.is_out_of_date(8));
        assert!(b.is_out_of_date(10), "older than the superblocks");
        b.set_stale(true);
        assert!(b.is_stale() && b.is_out_of_date(9));
        assert_eq!(
            BitmapSuper::parse(&b.encode()).unwrap().state,
            BITMAP_STATE_STALE
        );
        b.set_stale(false);
        assert!(!b.is_stale() && b.state == 0);
    }

    fn sample() -> BitmapSuper {
        BitmapSuper {
            version: 4,
            uuid: [7; 16],
            events: 9,
            events_cleared: 3,
            sync_size: 129_024,
            state: 0,
            chunksize: 1 << 20,
            daemon_sleep: 5,
            write_behind: 0,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
        }
    }

    #[test]
    fn bits_round_up() {
        let mut b = sample();
        assert_eq!(b.bits(), 63, "63 MiB in 1 MiB chunks");
        b.sync_size += 1;
        assert_eq!(b.bits(), 64, "one more sector needs one more bit");
        b.chunksize = 512;
        assert_eq!(b.bits(), b.sync_size);
        b.chunksize = 0;
        assert_eq!(b.bits(), 0);
        b.chunksize = 1;
        b.sync_size = u64::MAX;
        assert_eq!(b.bits(), u64::MAX, "saturates");
    }

    #[test]
    fn stored_len_matches_mdadm_rounding() {
        let b = sample();
        assert_eq!(b.bitmap_bytes(), 8);
        assert_eq!(b.stored_len(4096), 4096);
        assert_eq!(b.stored_len(512), 512);
        assert_eq!(b.stored_len(0), 264);
    }

    #[test]
    fn counts_only_bits_inside_the_array() {
        let b = sample(); // 63 bits
        let mut bits = [0u8; 16];
        bits[7] = 0x80; // bit 63: past the end
        bits[8..].fill(0xff);
        assert_eq!(b.count_dirty(&bits), 0);
        bits[0] = 0x01;
        bits[7] |= 0x40; // bit 62: the last real one
        assert_eq!(b.count_dirty(&bits), 2);
        assert_eq!(
            b.count_dirty(&bits[..3]),
            1,
            "short input counts what is there"
        );
    }

    #[test]
    fn rejects_bad_headers() {
        let good = sample().encode();
        assert_eq!(BitmapSuper::parse(&good), Ok(sample()));
        assert_eq!(
            BitmapSuper::parse(&good[..255]),
            Err(BitmapError::Truncated)
        );
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(matches!(
            BitmapSuper::parse(&bad),
            Err(BitmapError::BadMagic(_))
        ));
        for (version, ok) in [(2, false), (3, true), (4, true), (5, false)] {
            let mut b = sample();
            b.version = version;
            let parsed = BitmapSuper::parse(&b.encode());
            assert_eq!(parsed.is_ok(), ok, "version {version}");
            if !ok {
                assert_eq!(parsed, Err(BitmapError::BadVersion(version)));
            }
        }
        for chunk in [0, 256, 511, 513, 3 << 20] {
            let mut b = sample();
            b.chunksize = chunk;
            assert_eq!(
                BitmapSuper::parse(&b.encode()),
                Err(BitmapError::BadChunk(chunk))
            );
        }
    }
}
