//! A journal unit's meta block (`struct r5l_meta_block` and its payloads, md_p.h): 32 bytes
//! of header, then payload descriptors up to `meta_size`, the rest of the 4 KiB zero.

use super::block::{raw_crc, BLOCK, BLOCK_SECTORS, MAGIC, VERSION};
use crate::le;

const HEADER: usize = 32;
/// A data or parity payload before its checksums: type, flags, size, location.
const DATA_PARITY: usize = 16;
/// A flush payload before its stripes: type, flags, size.
const FLUSH: usize = 8;

const TYPE_DATA: u16 = 0;
const TYPE_PARITY: u16 = 1;
const TYPE_FLUSH: u16 = 2;

/// What a meta block lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A page of new data for the data block at array sector `location`.
    Data {
        flags: u16,
        location: u64,
        checksum: u32,
    },
    /// A stripe's new parity at stripe (member) sector `location`: P, and Q on RAID6.
    Parity {
        flags: u16,
        location: u64,
        checksums: Vec<u32>,
    },
    /// Stripes whose cached data reached the members (write-back): recovery forgets them.
    Flush { flags: u16, stripes: Vec<u64> },
}

impl Payload {
    /// Bytes its descriptor takes in the meta block.
    pub fn descriptor_len(&self) -> usize {
        match self {
            Payload::Data { .. } => DATA_PARITY + 4,
            Payload::Parity { checksums, .. } => DATA_PARITY + 4 * checksums.len(),
            Payload::Flush { stripes, .. } => FLUSH + 8 * stripes.len(),
        }
    }

    /// Pages it brings after the meta block.
    pub fn pages(&self) -> u64 {
        match self {
            Payload::Data { .. } => 1,
            Payload::Parity { checksums, .. } => checksums.len() as u64,
            Payload::Flush { .. } => 0,
        }
    }
}

/// A meta block: its sequence number, its position (sectors into the journal's data area)
/// and its payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaBlock {
    pub seq: u64,
    pub position: u64,
    pub payloads: Vec<Payload>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("journal meta block is truncated ({0} bytes, {BLOCK} needed)")]
    Truncated(usize),
    #[error("no journal meta block here (magic {0:#010x})")]
    BadMagic(u32),
    #[error("journal meta block version {0}; md writes {VERSION}")]
    BadVersion(u8),
    #[error(
        "journal meta block checksum {stored:#010x} does not match its bytes ({computed:#010x})"
    )]
    BadChecksum { stored: u32, computed: u32 },
    #[error("journal meta block says {0} bytes of metadata; a block holds {BLOCK}")]
    BadMetaSize(u32),
    #[error("journal payload at byte {at}: {why}")]
    BadPayload { at: usize, why: &'static str },
    #[error("journal payloads take {0} bytes; a meta block holds {BLOCK}")]
    TooLarge(usize),
}

impl MetaBlock {
    /// An empty unit: what md writes at the tail when it starts a fresh log.
    pub fn empty(seq: u64, position: u64) -> MetaBlock {
        MetaBlock {
            seq,
            position,
            payloads: Vec::new(),
        }
    }

    /// Bytes of the block in use (md's `meta_size`).
    pub fn meta_size(&self) -> usize {
        HEADER
            + self
                .payloads
                .iter()
                .map(Payload::descriptor_len)
                .sum::<usize>()
    }

    /// Whether a payload of `descriptor_len` bytes still fits.
    pub fn fits(&self, descriptor_len: usize) -> bool {
        self.meta_size() + descriptor_len <= BLOCK
    }

    /// Pages that follow the block.
    pub fn pages(&self) -> u64 {
        self.payloads.iter().map(Payload::pages).sum()
    }

    /// Sectors the unit takes in the ring: the block and its pages.
    pub fn sectors(&self) -> u64 {
        (1 + self.pages()) * BLOCK_SECTORS
    }

    /// The 4 KiB block, checksummed with `uuid_sum` (the UUID's, `uuid_checksum`).
    pub fn encode(&self, uuid_sum: u32) -> Result<Vec<u8>, JournalError> {
        let mut b = vec![0u8; BLOCK];
        self.encode_into(uuid_sum, &mut b)?;
        Ok(b)
    }

    /// [`MetaBlock::encode`] into `b` (its first [`BLOCK`] bytes; every one of them is
    /// written), for a writer that owns the buffer the block goes out in.
    pub fn encode_into(&self, uuid_sum: u32, b: &mut [u8]) -> Result<(), JournalError> {
        let size = self.meta_size();
        if size > BLOCK {
            return Err(JournalError::TooLarge(size));
        }
        if b.len() < BLOCK {
            return Err(JournalError::Truncated(b.len()));
        }
        let b = &mut b[..BLOCK];
        b.fill(0);
        le::put_u32(b, 0, MAGIC);
        b[8] = VERSION;
        le::put_u32(b, 12, size as u32);
        le::put_u64(b, 16, self.seq);
        le::put_u64(b, 24, self.position);
        let mut at = HEADER;
        for p in &self.payloads {
            at += put_payload(&mut b[at..], p);
        }
        debug_assert_eq!(at, size, "every descriptor where meta_size says");
        debug_assert!(
            b[4..8].iter().all(|&x| x == 0),
            "summed with its checksum zero"
        );
        let sum = raw_crc(uuid_sum, b);
        le::put_u32(b, 4, sum);
        Ok(())
    }

    /// Reads a meta block, checking what md checks (magic, version, checksum, size) and
    /// every payload descriptor.
    pub fn decode(block: &[u8], uuid_sum: u32) -> Result<MetaBlock, JournalError> {
        if block.len() < BLOCK {
            return Err(JournalError::Truncated(block.len()));
        }
        let b = &block[..BLOCK];
        let magic = le::u32_at(b, 0);
        if magic != MAGIC {
            return Err(JournalError::BadMagic(magic));
        }
        if b[8] != VERSION {
            return Err(JournalError::BadVersion(b[8]));
        }
        let stored = le::u32_at(b, 4);
        let mut zeroed = b.to_vec();
        zeroed[4..8].fill(0);
        let computed = raw_crc(uuid_sum, &zeroed);
        if stored != computed {
            return Err(JournalError::BadChecksum { stored, computed });
        }
        let size = le::u32_at(b, 12);
        if (size as usize) < HEADER || size as usize > BLOCK {
            return Err(JournalError::BadMetaSize(size));
        }
        let mut payloads = Vec::new();
        let mut at = HEADER;
        while at < size as usize {
            let (p, len) = get_payload(&b[..size as usize], at)?;
            payloads.push(p);
            at += len;
        }
        debug_assert_eq!(at, size as usize, "the descriptors end at meta_size");
        Ok(MetaBlock {
            seq: le::u64_at(b, 16),
            position: le::u64_at(b, 24),
            payloads,
        })
    }
}

/// Writes one descriptor at the start of `out`; its length.
fn put_payload(out: &mut [u8], p: &Payload) -> usize {
    let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
    let (kind, flags) = match p {
        Payload::Data { flags, .. } => (TYPE_DATA, *flags),
        Payload::Parity { flags, .. } => (TYPE_PARITY, *flags),
        Payload::Flush { flags, .. } => (TYPE_FLUSH, *flags),
    };
    put(0, &kind.to_le_bytes());
    put(2, &flags.to_le_bytes());
    let sums: &[u32] = match p {
        Payload::Data { checksum, .. } => std::slice::from_ref(checksum),
        Payload::Parity { checksums, .. } => checksums,
        Payload::Flush { stripes, .. } => {
            put(4, &((8 * stripes.len()) as u32).to_le_bytes());
            for (i, s) in stripes.iter().enumerate() {
                put(FLUSH + 8 * i, &s.to_le_bytes());
            }
            return p.descriptor_len();
        }
    };
    let location = match p {
        Payload::Data { location, .. } | Payload::Parity { location, .. } => *location,
        Payload::Flush { .. } => unreachable!("returned above"),
    };
    put(
        4,
        &((sums.len() as u64 * BLOCK_SECTORS) as u32).to_le_bytes(),
    );
    put(8, &location.to_le_bytes());
    for (i, s) in sums.iter().enumerate() {
        put(DATA_PARITY + 4 * i, &s.to_le_bytes());
    }
    p.descriptor_len()
}

/// Reads the descriptor at `at` of the block's used bytes `b`; it and its length.
fn get_payload(b: &[u8], at: usize) -> Result<(Payload, usize), JournalError> {
    let bad = |why| JournalError::BadPayload { at, why };
    if at + FLUSH > b.len() {
        return Err(bad("its header runs past meta_size"));
    }
    let (kind, flags, size) = (
        le::u16_at(b, at),
        le::u16_at(b, at + 2),
        le::u32_at(b, at + 4),
    );
    if kind == TYPE_FLUSH {
        if size % 8 != 0 {
            return Err(bad("a flush's size is not whole stripe numbers"));
        }
        let end = at + FLUSH + size as usize;
        if end > b.len() {
            return Err(bad("its stripes run past meta_size"));
        }
        let stripes = (at + FLUSH..end)
            .step_by(8)
            .map(|o| le::u64_at(b, o))
            .collect();
        return Ok((Payload::Flush { flags, stripes }, end - at));
    }
    if kind != TYPE_DATA && kind != TYPE_PARITY {
        return Err(bad("unknown payload type"));
    }
    let pages = u64::from(size) / BLOCK_SECTORS;
    let fits = match kind {
        TYPE_DATA => pages == 1,
        _ => pages == 1 || pages == 2,
    };
    if u64::from(size) % BLOCK_SECTORS != 0 || !fits {
        return Err(bad(
            "a data payload is one page, a parity payload one or two",
        ));
    }
    let end = at + DATA_PARITY + 4 * pages as usize;
    if end > b.len() {
        return Err(bad("its checksums run past meta_size"));
    }
    let location = le::u64_at(b, at + 8);
    let sums: Vec<u32> = (0..pages as usize)
        .map(|i| le::u32_at(b, at + DATA_PARITY + 4 * i))
        .collect();
    let p = if kind == TYPE_DATA {
        Payload::Data {
            flags,
            location,
            checksum: sums[0],
        }
    } else {
        Payload::Parity {
            flags,
            location,
            checksums: sums,
        }
    };
    Ok((p, end - at))
}
