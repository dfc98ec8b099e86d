//! md's internal write-intent bitmap header (`bitmap_super_t`, version 4), stored 8 sectors
//! after a v1.2 superblock, followed by the bit array.

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
    pub fn parse(bytes: &[u8]) -> Result<BitmapSuper, BitmapError> {
        todo!()
    }
    /// 256 bytes.
    pub fn encode(&self) -> Vec<u8> {
        todo!()
    }
    /// Number of bits (chunks) covering `sync_size`.
    pub fn bits(&self) -> u64 {
        todo!()
    }
}
