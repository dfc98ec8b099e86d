//! A ublk device's parameters (`struct ublk_params`, BASIC and DISCARD) from what raidd
//! knows of the array or volume it serves, checked as the kernel will check them.

/// Bytes of `struct ublk_params` up to and including the zoned parameters: every kernel
/// with ublk knows at least this much of it, and takes what it knows of a longer one.
pub const PARAMS_LEN: usize = 112;

const TYPE_BASIC: u32 = 1 << 0;
const TYPE_DISCARD: u32 = 1 << 1;

const ATTR_READ_ONLY: u32 = 1 << 0;
const ATTR_ROTATIONAL: u32 = 1 << 1;
const ATTR_VOLATILE_CACHE: u32 = 1 << 2;
const ATTR_FUA: u32 = 1 << 3;

/// What the device is, in raidd's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    pub size_bytes: u64,
    /// The array's block size (512 or 4096).
    pub logical_block: u32,
    /// The members' largest physical block.
    pub physical_block: u32,
    /// The chunk (0: none): the smallest I/O that avoids splitting.
    pub io_min: u32,
    /// The data of a full stripe (0: none): the I/O that avoids a read-modify-write.
    pub io_opt: u32,
    /// The most bytes one request may carry (each tag's buffer).
    pub max_io_bytes: u32,
    pub rotational: bool,
    pub read_only: bool,
    /// DISCARD reaches the members (levels without parity).
    pub discard: bool,
    /// WRITE_ZEROES is served (written as zeros where the level cannot discard).
    pub write_zeroes: bool,
}

fn shift_of(v: u32) -> Option<u8> {
    (v.is_power_of_two()).then(|| v.trailing_zeros() as u8)
}

/// The largest power of two that divides `v` (0 for 0).
fn pow2_floor_divisor(v: u32) -> u32 {
    if v == 0 {
        0
    } else {
        1 << v.trailing_zeros()
    }
}

/// The parameters' bytes for SET_PARAMS; an error for a device the kernel would refuse.
pub fn encode(d: &Device) -> Result<[u8; PARAMS_LEN], String> {
    let logical = shift_of(d.logical_block)
        .filter(|s| (9..=12).contains(s))
        .ok_or_else(|| {
            format!(
                "block size {} is not 512 to 4096 bytes, a power of two",
                d.logical_block
            )
        })?;
    let physical = shift_of(d.physical_block.max(d.logical_block))
        .ok_or_else(|| format!("physical block {} is not a power of two", d.physical_block))?;
    if !d.size_bytes.is_multiple_of(u64::from(d.logical_block)) || d.size_bytes == 0 {
        return Err(format!(
            "{} bytes are not whole blocks of {}",
            d.size_bytes, d.logical_block
        ));
    }
    if d.max_io_bytes < d.logical_block.max(4096) || !d.max_io_bytes.is_multiple_of(4096) {
        return Err(format!(
            "a request of at most {} bytes is too small",
            d.max_io_bytes
        ));
    }
    // ublk takes the hints as powers of two: the chunk, and the stripe where it is one
    // (a three-data-member stripe is not; the chunk is then the better hint).
    let io_min = pow2_floor_divisor(d.io_min).max(d.logical_block);
    let io_opt = match pow2_floor_divisor(d.io_opt) {
        o if o == d.io_opt && o >= io_min => o,
        _ => io_min,
    };
    let mut b = [0u8; PARAMS_LEN];
    let mut types = TYPE_BASIC;
    let mut attrs = ATTR_VOLATILE_CACHE | ATTR_FUA;
    if d.rotational {
        attrs |= ATTR_ROTATIONAL;
    }
    if d.read_only {
        attrs |= ATTR_READ_ONLY;
    }
    let max_sectors = d.max_io_bytes / 512;
    // basic, at 8
    b[8..12].copy_from_slice(&attrs.to_le_bytes());
    b[12] = logical;
    b[13] = physical.max(logical);
    b[14] = io_opt.trailing_zeros() as u8;
    b[15] = io_min.trailing_zeros() as u8;
    b[16..20].copy_from_slice(&max_sectors.to_le_bytes());
    b[24..32].copy_from_slice(&(d.size_bytes / 512).to_le_bytes());
    // discard, at 40
    if (d.discard || d.write_zeroes) && !d.read_only {
        types |= TYPE_DISCARD;
        let granularity = io_min.max(d.logical_block);
        b[44..48].copy_from_slice(&granularity.to_le_bytes());
        let discard = if d.discard { max_sectors } else { 0 };
        let zeroes = if d.write_zeroes { max_sectors } else { 0 };
        b[48..52].copy_from_slice(&discard.to_le_bytes());
        b[52..56].copy_from_slice(&zeroes.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
    }
    b[0..4].copy_from_slice(&(PARAMS_LEN as u32).to_le_bytes());
    b[4..8].copy_from_slice(&types.to_le_bytes());
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid5() -> Device {
        Device {
            size_bytes: 3 << 30,
            logical_block: 512,
            physical_block: 4096,
            io_min: 512 << 10,
            io_opt: 3 * (512 << 10),
            max_io_bytes: 1 << 20,
            rotational: false,
            read_only: false,
            discard: false,
            write_zeroes: true,
        }
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn a_raid5_is_described_as_the_kernel_expects() {
        let b = encode(&raid5()).unwrap();
        assert_eq!(u32_at(&b, 0), 112);
        assert_eq!(u32_at(&b, 4), TYPE_BASIC | TYPE_DISCARD);
        assert_eq!(u32_at(&b, 8), ATTR_VOLATILE_CACHE | ATTR_FUA);
        assert_eq!(
            &b[12..16],
            &[9, 12, 19, 19],
            "a stripe of three chunks hints the chunk"
        );
        assert_eq!(u32_at(&b, 16), 2048);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 3 << 21);
        assert_eq!(u32_at(&b, 44), 512 << 10);
        assert_eq!(u32_at(&b, 48), 0, "parity levels do not discard");
        assert_eq!(u32_at(&b, 52), 2048);
        assert_eq!(u16::from_le_bytes([b[56], b[57]]), 1);
    }

    #[test]
    fn hints_flags_and_refusals() {
        let four = Device {
            io_opt: 4 * (64 << 10),
            io_min: 64 << 10,
            rotational: true,
            discard: true,
            ..raid5()
        };
        let b = encode(&four).unwrap();
        assert_eq!(&b[14..16], &[18, 16]);
        assert_eq!(u32_at(&b, 8) & ATTR_ROTATIONAL, ATTR_ROTATIONAL);
        assert_eq!(u32_at(&b, 48), 2048);
        let ro = encode(&Device {
            read_only: true,
            ..four
        })
        .unwrap();
        assert_eq!(u32_at(&ro, 8) & ATTR_READ_ONLY, ATTR_READ_ONLY);
        assert_eq!(
            u32_at(&ro, 4),
            TYPE_BASIC,
            "nothing to discard on a read-only device"
        );
        let linear = encode(&Device {
            io_min: 0,
            io_opt: 0,
            ..four
        })
        .unwrap();
        assert_eq!(&linear[14..16], &[9, 9]);
        for bad in [
            Device {
                logical_block: 1024 * 8,
                ..raid5()
            },
            Device {
                logical_block: 520,
                ..raid5()
            },
            Device {
                size_bytes: 1000,
                ..raid5()
            },
            Device {
                size_bytes: 0,
                ..raid5()
            },
            Device {
                max_io_bytes: 2048,
                ..raid5()
            },
        ] {
            assert!(encode(&bad).is_err(), "{bad:?}");
        }
    }
}
