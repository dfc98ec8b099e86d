//! `struct mdp_superblock_1`.

/// Errors from parsing or validating a superblock. The text is shown to users.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbError {
    #[error("no md superblock (magic {found:#010x}, expected 0xa92b4efc)")]
    BadMagic { found: u32 },
    #[error("md superblock major version {0} is not 1")]
    BadVersion(u32),
    #[error("md superblock checksum {stored:#010x} does not match computed {computed:#010x}")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("md superblock has unknown feature bits {0:#x}")]
    UnknownFeatures(u32),
    #[error("md superblock max_dev {0} is larger than the kernel's limit of 1920")]
    TooManyDevs(u32),
    #[error("md superblock super_offset {stored} is not where it was read ({read_at})")]
    WrongSuperOffset { stored: u64, read_at: u64 },
    #[error("md superblock data_size {0} is smaller than 10 sectors")]
    DataTooSmall(u64),
    #[error("md superblock has non-zero padding")]
    NonZeroPad,
    #[error("md superblock combines PPL with a bitmap or journal")]
    PplConflict,
    #[error("md superblock is truncated: {got} bytes, need {need}")]
    Truncated { got: usize, need: usize },
    #[error("md superblock field {field} is invalid: {why}")]
    Invalid { field: &'static str, why: String },
}

/// A member's role as recorded in `dev_roles[]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevRole {
    /// Active in slot n (0..=0xfeff).
    Active(u16),
    /// 0xffff
    Spare,
    /// 0xfffe
    Faulty,
    /// 0xfffd
    Journal,
}

impl DevRole {
    pub fn from_raw(v: u16) -> DevRole {
        todo!()
    }
    pub fn to_raw(self) -> u16 {
        todo!()
    }
}

/// Every field of `mdp_superblock_1`, decoded. `dev_roles.len()` is `max_dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub feature_map: u32,
    pub set_uuid: [u8; 16],
    /// Raw 32-byte name field ("host:name", NUL padded).
    pub set_name: [u8; 32],
    /// Low 40 bits seconds, high 24 bits microseconds.
    pub ctime: u64,
    pub level: i32,
    pub layout: u32,
    /// Component size in sectors ("Used Dev Size"); 0 for linear/RAID0.
    pub size: u64,
    pub chunksize: u32,
    pub raid_disks: u32,
    /// Signed sectors from the superblock (also the PPL offset/size union).
    pub bitmap_offset: i32,
    pub new_level: u32,
    pub reshape_position: u64,
    pub delta_disks: u32,
    pub new_layout: u32,
    pub new_chunk: u32,
    pub new_offset: u32,
    pub data_offset: u64,
    pub data_size: u64,
    pub super_offset: u64,
    pub recovery_offset: u64,
    pub dev_number: u32,
    pub cnt_corrected_read: u32,
    pub device_uuid: [u8; 16],
    pub devflags: u8,
    pub bblog_shift: u8,
    pub bblog_size: u16,
    pub bblog_offset: i32,
    pub utime: u64,
    pub events: u64,
    pub resync_offset: u64,
    pub dev_roles: Vec<u16>,
}

impl Superblock {
    /// Bytes md writes: ROUND_UP(256 + 2 * max_dev, 512).
    pub fn encoded_len(&self) -> usize {
        todo!()
    }

    /// Parses and validates with the kernel's rules (`super_1_load` / `super_1_validate`):
    /// magic, major version 1, checksum, known feature bits, zero pads, max_dev <= 1920,
    /// `super_offset == read_at_sector`, data_size >= 10, PPL not with bitmap/journal.
    /// `bytes` may be longer than the superblock (e.g. a whole 4 KiB read).
    pub fn parse(bytes: &[u8], read_at_sector: u64) -> Result<Superblock, SbError> {
        todo!()
    }

    /// Encodes with a freshly computed checksum; the result is [`Superblock::encoded_len`]
    /// bytes. `parse(encode(sb)) == sb` for every valid superblock.
    pub fn encode(&self) -> Vec<u8> {
        todo!()
    }

    /// md's checksum over an encoded superblock (sb_csum taken as zero).
    pub fn checksum(encoded: &[u8]) -> u32 {
        todo!()
    }

    /// The role of the member carrying this superblock (dev_roles[dev_number]).
    pub fn own_role(&self) -> DevRole {
        todo!()
    }

    /// The name after "host:" (or the whole field when there is no colon), without NULs.
    pub fn array_name(&self) -> String {
        todo!()
    }

    /// Sets the name field from "host:name" or "name" (truncated to 32 bytes).
    pub fn set_array_name(&mut self, name: &str) {
        todo!()
    }

    /// Whether the array was shut down cleanly (resync_offset == MAX_SECTOR).
    pub fn is_clean(&self) -> bool {
        todo!()
    }

    /// `ctime` / `utime` as (seconds, microseconds).
    pub fn split_time(t: u64) -> (u64, u32) {
        todo!()
    }
    pub fn join_time(secs: u64, micros: u32) -> u64 {
        todo!()
    }
}
