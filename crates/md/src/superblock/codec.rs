//! Bytes <-> [`Superblock`]: field placement and md's checksum. No semantic checks here
//! (see `validate`), only what is needed to read the bytes safely.

use super::fields::{SbError, Superblock};
use super::layout as off;
use crate::le;

/// md's checksum (`calc_sb_1_csum`): the sum of the le32 words of the first
/// `256 + 2*max_dev` bytes with `sb_csum` read as zero, plus a trailing le16 when `max_dev`
/// is odd, folded to 32 bits by adding the high half to the low half.
///
/// Total on any input: `max_dev` is read from the bytes (0 if they are too short to hold
/// it) and bytes past the end of `encoded` count as zero.
pub(crate) fn checksum(encoded: &[u8]) -> u32 {
    let max_dev = if encoded.len() >= off::MAX_DEV + 4 {
        le::u32_at(encoded, off::MAX_DEV) as usize
    } else {
        0
    };
    let len = off::used_len(max_dev).min(encoded.len());
    let mut sum: u64 = 0;
    for (index, word) in encoded[..len].chunks(4).enumerate() {
        if index * 4 == off::SB_CSUM {
            continue;
        }
        // A 2-byte tail (odd max_dev) zero-extended is exactly md's trailing le16.
        let mut padded = [0u8; 4];
        padded[..word.len()].copy_from_slice(word);
        sum = sum.wrapping_add(u64::from(u32::from_le_bytes(padded)));
    }
    // Truncating casts are md's arithmetic: the fold is done in u32.
    (sum as u32).wrapping_add((sum >> 32) as u32)
}

/// Reads the fields after the caller has checked that `bytes` holds the header and all
/// `max_dev` roles.
pub(crate) fn decode(bytes: &[u8]) -> Superblock {
    let max_dev = le::u32_at(bytes, off::MAX_DEV) as usize;
    debug_assert!(bytes.len() >= off::used_len(max_dev));
    let roles = bytes
        .get(off::DEV_ROLES..off::used_len(max_dev))
        .unwrap_or(&[]);
    let dev_roles = roles
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    Superblock {
        feature_map: le::u32_at(bytes, off::FEATURE_MAP),
        set_uuid: le::bytes_at(bytes, off::SET_UUID),
        set_name: le::bytes_at(bytes, off::SET_NAME),
        ctime: le::u64_at(bytes, off::CTIME),
        level: le::i32_at(bytes, off::LEVEL),
        layout: le::u32_at(bytes, off::LAYOUT),
        size: le::u64_at(bytes, off::SIZE),
        chunksize: le::u32_at(bytes, off::CHUNKSIZE),
        raid_disks: le::u32_at(bytes, off::RAID_DISKS),
        bitmap_offset: le::i32_at(bytes, off::BITMAP_OFFSET),
        new_level: le::u32_at(bytes, off::NEW_LEVEL),
        reshape_position: le::u64_at(bytes, off::RESHAPE_POSITION),
        delta_disks: le::u32_at(bytes, off::DELTA_DISKS),
        new_layout: le::u32_at(bytes, off::NEW_LAYOUT),
        new_chunk: le::u32_at(bytes, off::NEW_CHUNK),
        new_offset: le::u32_at(bytes, off::NEW_OFFSET),
        data_offset: le::u64_at(bytes, off::DATA_OFFSET),
        data_size: le::u64_at(bytes, off::DATA_SIZE),
        super_offset: le::u64_at(bytes, off::SUPER_OFFSET),
        recovery_offset: le::u64_at(bytes, off::RECOVERY_OFFSET),
        dev_number: le::u32_at(bytes, off::DEV_NUMBER),
        cnt_corrected_read: le::u32_at(bytes, off::CNT_CORRECTED_READ),
        device_uuid: le::bytes_at(bytes, off::DEVICE_UUID),
        devflags: le::bytes_at::<1>(bytes, off::DEVFLAGS)[0],
        bblog_shift: le::bytes_at::<1>(bytes, off::BBLOG_SHIFT)[0],
        bblog_size: le::u16_at(bytes, off::BBLOG_SIZE),
        bblog_offset: le::i32_at(bytes, off::BBLOG_OFFSET),
        utime: le::u64_at(bytes, off::UTIME),
        events: le::u64_at(bytes, off::EVENTS),
        resync_offset: le::u64_at(bytes, off::RESYNC_OFFSET),
        dev_roles,
    }
}

/// Writes every field at md's offsets, zero pads, and the checksum last.
pub(crate) fn encode(sb: &Superblock) -> Vec<u8> {
    let mut buf = vec![0u8; off::encoded_len(sb.dev_roles.len())];
    put_header(sb, &mut buf);
    for (i, role) in sb.dev_roles.iter().enumerate() {
        le::put_u16(&mut buf, off::DEV_ROLES + 2 * i, *role);
    }
    let csum = checksum(&buf);
    le::put_u32(&mut buf, off::SB_CSUM, csum);
    debug_assert_eq!(
        checksum(&buf),
        csum,
        "sb_csum must not feed its own checksum"
    );
    debug_assert_eq!(buf.len() % off::SECTOR_BYTES, 0);
    buf
}

fn put_header(sb: &Superblock, buf: &mut [u8]) {
    // max_dev is the role count by construction: the two cannot disagree on disk.
    let max_dev = u32::try_from(sb.dev_roles.len()).unwrap_or(u32::MAX);
    le::put_u32(buf, off::MAGIC, crate::MD_SB_MAGIC);
    le::put_u32(buf, off::MAJOR_VERSION, 1);
    le::put_u32(buf, off::FEATURE_MAP, sb.feature_map);
    le::put(buf, off::SET_UUID, &sb.set_uuid);
    le::put(buf, off::SET_NAME, &sb.set_name);
    le::put_u64(buf, off::CTIME, sb.ctime);
    le::put_i32(buf, off::LEVEL, sb.level);
    le::put_u32(buf, off::LAYOUT, sb.layout);
    le::put_u64(buf, off::SIZE, sb.size);
    le::put_u32(buf, off::CHUNKSIZE, sb.chunksize);
    le::put_u32(buf, off::RAID_DISKS, sb.raid_disks);
    le::put_i32(buf, off::BITMAP_OFFSET, sb.bitmap_offset);
    le::put_u32(buf, off::NEW_LEVEL, sb.new_level);
    le::put_u64(buf, off::RESHAPE_POSITION, sb.reshape_position);
    le::put_u32(buf, off::DELTA_DISKS, sb.delta_disks);
    le::put_u32(buf, off::NEW_LAYOUT, sb.new_layout);
    le::put_u32(buf, off::NEW_CHUNK, sb.new_chunk);
    le::put_u32(buf, off::NEW_OFFSET, sb.new_offset);
    le::put_u64(buf, off::DATA_OFFSET, sb.data_offset);
    le::put_u64(buf, off::DATA_SIZE, sb.data_size);
    le::put_u64(buf, off::SUPER_OFFSET, sb.super_offset);
    le::put_u64(buf, off::RECOVERY_OFFSET, sb.recovery_offset);
    le::put_u32(buf, off::DEV_NUMBER, sb.dev_number);
    le::put_u32(buf, off::CNT_CORRECTED_READ, sb.cnt_corrected_read);
    le::put(buf, off::DEVICE_UUID, &sb.device_uuid);
    le::put(buf, off::DEVFLAGS, &[sb.devflags, sb.bblog_shift]);
    le::put_u16(buf, off::BBLOG_SIZE, sb.bblog_size);
    le::put_i32(buf, off::BBLOG_OFFSET, sb.bblog_offset);
    le::put_u64(buf, off::UTIME, sb.utime);
    le::put_u64(buf, off::EVENTS, sb.events);
    le::put_u64(buf, off::RESYNC_OFFSET, sb.resync_offset);
    le::put_u32(buf, off::MAX_DEV, max_dev);
}

/// Structural checks on raw bytes, in an order chosen so that corruption is reported as
/// corruption: "not md at all" (magic) and "cannot even size it" (version, max_dev, length)
/// first, then the checksum, and only then the pads (which the checksum covers).
pub(crate) fn check_bytes(bytes: &[u8]) -> Result<(), SbError> {
    check_len(bytes, off::HEADER_LEN)?;
    let magic = le::u32_at(bytes, off::MAGIC);
    if magic != crate::MD_SB_MAGIC {
        return Err(SbError::BadMagic { found: magic });
    }
    let version = le::u32_at(bytes, off::MAJOR_VERSION);
    if version != 1 {
        return Err(SbError::BadVersion(version));
    }
    let max_dev = le::u32_at(bytes, off::MAX_DEV);
    if max_dev > crate::MAX_DEV_LIMIT {
        return Err(SbError::TooManyDevs(max_dev));
    }
    check_len(bytes, off::used_len(max_dev as usize))?;
    let stored = le::u32_at(bytes, off::SB_CSUM);
    let computed = checksum(bytes);
    if stored != computed {
        return Err(SbError::BadChecksum { stored, computed });
    }
    check_pads(bytes)
}

fn check_len(bytes: &[u8], need: usize) -> Result<(), SbError> {
    if bytes.len() < need {
        return Err(SbError::Truncated {
            got: bytes.len(),
            need,
        });
    }
    Ok(())
}

/// pad0 and pad3 must be zero: the kernel reads non-zero padding as an unknown new feature.
fn check_pads(bytes: &[u8]) -> Result<(), SbError> {
    let pad0 = le::u32_at(bytes, off::PAD0);
    let pad3 = le::bytes_at::<{ off::PAD3_LEN }>(bytes, off::PAD3);
    if pad0 != 0 || pad3.iter().any(|&b| b != 0) {
        return Err(SbError::NonZeroPad);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checksum of a buffer of words computed the long way, as md describes it.
    fn reference(words: &[u32], tail: Option<u16>) -> u32 {
        let mut sum: u64 = words.iter().map(|&w| u64::from(w)).sum();
        sum += tail.map_or(0, u64::from);
        ((sum & 0xffff_ffff) + (sum >> 32)) as u32
    }

    fn buffer(max_dev: u32, fill: u8) -> Vec<u8> {
        let mut b = vec![fill; off::encoded_len(max_dev as usize)];
        le::put_u32(&mut b, off::MAX_DEV, max_dev);
        b
    }

    #[test]
    fn checksum_skips_its_own_field_and_folds_carry() {
        let mut b = buffer(2, 0xff);
        let before = checksum(&b);
        le::put_u32(&mut b, off::SB_CSUM, 0x1234_5678);
        assert_eq!(checksum(&b), before, "sb_csum is read as zero");
        // 64 words minus sb_csum plus 1 word of roles, all 0xffffffff except max_dev.
        let mut words = vec![0xffff_ffffu32; 64 + 1];
        words[off::SB_CSUM / 4] = 0;
        words[off::MAX_DEV / 4] = 2;
        assert_eq!(checksum(&b), reference(&words, None));
    }

    #[test]
    fn odd_max_dev_adds_a_trailing_u16_only() {
        let mut b = buffer(3, 0);
        le::put_u16(&mut b, off::DEV_ROLES + 4, 0xabcd); // the odd role
        le::put_u16(&mut b, off::DEV_ROLES + 6, 0x7777); // beyond max_dev: not summed
        assert_eq!(checksum(&b), 3 + 0xabcd);
    }

    #[test]
    fn short_input_never_panics() {
        for len in 0..300 {
            let b = vec![0xa5u8; len];
            let _ = checksum(&b);
            assert!(check_bytes(&b).is_err());
        }
    }
}
