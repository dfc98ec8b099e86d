//! `struct mdp_superblock_1`.
//!
//! [`Superblock::parse`] = structural checks on the bytes (`codec::check_bytes`), decoding
//! (`codec::decode`), then the kernel's semantic checks (`validate`). [`Superblock::encode`]
//! is the exact inverse of decoding, so every valid superblock round-trips byte for byte.

mod codec;
mod fields;
mod layout;
mod validate;

pub use fields::{
    DevRole, SbError, Superblock, ROLE_FAULTY, ROLE_JOURNAL, ROLE_MAX_SLOT, ROLE_SPARE,
};

impl Superblock {
    /// Bytes md writes: ROUND_UP(256 + 2 * max_dev, 512).
    pub fn encoded_len(&self) -> usize {
        layout::encoded_len(self.dev_roles.len())
    }

    /// `max_dev`: the number of role slots (`dev_roles.len()`).
    pub fn max_dev(&self) -> usize {
        self.dev_roles.len()
    }

    /// Parses and validates with the kernel's rules (`super_1_load` / `super_1_validate`):
    /// magic, major version 1, checksum, known feature bits, zero pads, max_dev <= 1920,
    /// `super_offset == read_at_sector`, data_size >= 10, PPL not with bitmap/journal.
    /// `bytes` may be longer than the superblock (e.g. a whole 4 KiB read).
    ///
    /// Also refused, as by the kernel: a data area (or reshape target) overlapping the
    /// superblock, recorded bad blocks without a loadable log, RAID0_LAYOUT on another
    /// level, and a journal role without the journal feature ([`SbError::Invalid`]).
    pub fn parse(bytes: &[u8], read_at_sector: u64) -> Result<Superblock, SbError> {
        codec::check_bytes(bytes)?;
        let sb = codec::decode(bytes);
        sb.validate(read_at_sector)?;
        Ok(sb)
    }

    /// The semantic half of [`Superblock::parse`], for superblocks built in memory: check
    /// one before writing it to a member read back at `read_at_sector`.
    pub fn validate(&self, read_at_sector: u64) -> Result<(), SbError> {
        validate::validate(self, read_at_sector)
    }

    /// Encodes with a freshly computed checksum; the result is [`Superblock::encoded_len`]
    /// bytes. `parse(encode(sb)) == sb` for every valid superblock.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// md's checksum over an encoded superblock (sb_csum taken as zero).
    ///
    /// Meaningful on a complete superblock; on shorter input the missing bytes count as
    /// zero (never panics).
    pub fn checksum(encoded: &[u8]) -> u32 {
        codec::checksum(encoded)
    }

    /// The role of the member carrying this superblock (`dev_roles[dev_number]`).
    ///
    /// A dev_number outside `dev_roles` reads as a spare, as the kernel treats it.
    pub fn own_role(&self) -> DevRole {
        usize::try_from(self.dev_number)
            .ok()
            .and_then(|i| self.dev_roles.get(i))
            .map_or(DevRole::Spare, |&raw| DevRole::from_raw(raw))
    }

    /// The name after "host:" (or the whole field when there is no colon), without NULs.
    pub fn array_name(&self) -> String {
        let full = self.full_name();
        match full.split_once(':') {
            Some((_host, name)) => name.to_string(),
            None => full,
        }
    }

    /// The whole name field ("host:name") up to the first NUL; invalid UTF-8 is replaced.
    pub fn full_name(&self) -> String {
        let end = self
            .set_name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.set_name.len());
        String::from_utf8_lossy(&self.set_name[..end]).into_owned()
    }

    /// Sets the name field from "host:name" or "name" (truncated to 32 bytes).
    ///
    /// Truncation happens at a character boundary so the field stays valid UTF-8; the rest
    /// of the field is NUL-filled (md's strncpy).
    pub fn set_array_name(&mut self, name: &str) {
        let mut len = name.len().min(self.set_name.len());
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        self.set_name = [0; 32];
        self.set_name[..len].copy_from_slice(&name.as_bytes()[..len]);
    }

    /// Whether the array was shut down cleanly (resync_offset == MAX_SECTOR).
    pub fn is_clean(&self) -> bool {
        self.resync_offset == crate::MAX_SECTOR
    }

    /// `ctime` / `utime` as (seconds, microseconds).
    pub fn split_time(t: u64) -> (u64, u32) {
        let micros = (t >> TIME_SECS_BITS) as u32;
        (t & TIME_SECS_MASK, micros)
    }

    /// Inverse of [`Superblock::split_time`]. Seconds beyond 40 bits and microseconds beyond
    /// 24 bits do not fit the field and are masked off.
    pub fn join_time(secs: u64, micros: u32) -> u64 {
        let micros = u64::from(micros) & TIME_MICROS_MASK;
        (secs & TIME_SECS_MASK) | (micros << TIME_SECS_BITS)
    }
}

/// md packs times as 40 bits of seconds with 24 bits of microseconds above them.
const TIME_SECS_BITS: u32 = 40;
const TIME_SECS_MASK: u64 = (1 << TIME_SECS_BITS) - 1;
const TIME_MICROS_MASK: u64 = (1 << (64 - TIME_SECS_BITS)) - 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_role_raw_values() {
        assert_eq!(DevRole::from_raw(0), DevRole::Active(0));
        assert_eq!(DevRole::from_raw(0xfeff), DevRole::Active(0xfeff));
        assert_eq!(DevRole::from_raw(0xffff), DevRole::Spare);
        assert_eq!(DevRole::from_raw(0xfffe), DevRole::Faulty);
        assert_eq!(DevRole::from_raw(0xfffd), DevRole::Journal);
        for raw in (0..=u16::MAX)
            .step_by(7)
            .chain([0xfffc, 0xfffd, 0xfffe, 0xffff])
        {
            assert_eq!(DevRole::from_raw(raw).to_raw(), raw, "raw {raw:#x}");
        }
    }

    #[test]
    fn time_packing() {
        let t = Superblock::join_time(1_795_355_699, 654_321);
        assert_eq!(t & ((1 << 40) - 1), 1_795_355_699);
        assert_eq!(t >> 40, 654_321);
        assert_eq!(Superblock::split_time(t), (1_795_355_699, 654_321));
        // Out-of-range parts are masked, never spill into each other.
        assert_eq!(Superblock::join_time(u64::MAX, 0), (1 << 40) - 1);
        assert_eq!(
            Superblock::split_time(Superblock::join_time(0, u32::MAX)).1,
            0xff_ffff
        );
    }
}
