//! What a fetched I/O descriptor asks for, checked against the device: an operation raidd
//! serves, on bytes inside the device, no larger than the tag's buffer. Anything else is a
//! negative errno to commit, never a panic and never I/O outside the device.

use crate::abi::IoDesc;

const OP_READ: u8 = 0;
const OP_WRITE: u8 = 1;
const OP_FLUSH: u8 = 2;
const OP_DISCARD: u8 = 3;
const OP_WRITE_ZEROES: u8 = 5;
/// `UBLK_IO_F_FUA`, in the descriptor's flags.
const F_FUA: u32 = 1 << 13;
/// `UBLK_IO_F_NOUNMAP`: write zeros, do not deallocate.
const F_NOUNMAP: u32 = 1 << 15;

pub const EIO: i32 = 5;
pub const EOPNOTSUPP: i32 = 95;

/// What a request asks for, in bytes of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read `len` bytes at `offset` into the tag's buffer.
    Read {
        offset: u64,
        len: u32,
    },
    /// Write the tag's buffer's first `len` bytes at `offset`; `fua`: durable before the
    /// commit.
    Write {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Flush,
    Discard {
        offset: u64,
        len: u64,
    },
    /// `unmap`: the range may be deallocated (the kernel did not say NOUNMAP).
    WriteZeroes {
        offset: u64,
        len: u64,
        unmap: bool,
    },
}

/// The device a request must fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub size_bytes: u64,
    pub block: u32,
    /// Each tag's buffer.
    pub max_io_bytes: u32,
    pub read_only: bool,
}

/// The action `d` asks for, or the negative errno to commit it with.
pub fn decode(d: &IoDesc, l: &Limits) -> Result<Action, i32> {
    let op = (d.op_flags & 0xff) as u8;
    let flags = d.op_flags >> 8 << 8;
    if op == OP_FLUSH {
        return Ok(Action::Flush);
    }
    let offset = d.start_sector.checked_mul(512).ok_or(-EIO)?;
    let len = u64::from(d.nr_sectors) * 512;
    let end = offset.checked_add(len).ok_or(-EIO)?;
    let block = u64::from(l.block);
    if end > l.size_bytes || !offset.is_multiple_of(block) || !len.is_multiple_of(block) {
        return Err(-EIO);
    }
    let writes = matches!(op, OP_WRITE | OP_DISCARD | OP_WRITE_ZEROES);
    if writes && l.read_only {
        return Err(-EIO);
    }
    match op {
        OP_READ | OP_WRITE => {
            if len == 0 || len > u64::from(l.max_io_bytes) {
                return Err(-EIO);
            }
            let len = len as u32;
            Ok(if op == OP_READ {
                Action::Read { offset, len }
            } else {
                Action::Write {
                    offset,
                    len,
                    fua: flags & F_FUA != 0,
                }
            })
        }
        OP_DISCARD => Ok(Action::Discard { offset, len }),
        OP_WRITE_ZEROES => Ok(Action::WriteZeroes {
            offset,
            len,
            unmap: flags & F_NOUNMAP == 0,
        }),
        _ => Err(-EOPNOTSUPP),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: Limits = Limits {
        size_bytes: 1 << 30,
        block: 512,
        max_io_bytes: 1 << 20,
        read_only: false,
    };

    fn desc(op: u8, flags: u32, start: u64, n: u32) -> IoDesc {
        IoDesc {
            op_flags: u32::from(op) | flags,
            nr_sectors: n,
            start_sector: start,
            addr: 0,
        }
    }

    #[test]
    fn each_operation() {
        assert_eq!(
            decode(&desc(0, 0, 8, 8), &L),
            Ok(Action::Read {
                offset: 4096,
                len: 4096
            })
        );
        assert_eq!(
            decode(&desc(1, F_FUA, 0, 2048), &L),
            Ok(Action::Write {
                offset: 0,
                len: 1 << 20,
                fua: true
            })
        );
        assert_eq!(decode(&desc(2, 0, 0, 0), &L), Ok(Action::Flush));
        assert_eq!(
            decode(&desc(3, 0, 16, 1 << 16), &L),
            Ok(Action::Discard {
                offset: 8192,
                len: 32 << 20
            })
        );
        assert_eq!(
            decode(&desc(5, F_NOUNMAP, 0, 8), &L),
            Ok(Action::WriteZeroes {
                offset: 0,
                len: 4096,
                unmap: false
            })
        );
        assert_eq!(
            decode(&desc(4, 0, 0, 8), &L),
            Err(-EOPNOTSUPP),
            "WRITE_SAME"
        );
        assert_eq!(
            decode(&desc(18, 0, 0, 8), &L),
            Err(-EOPNOTSUPP),
            "zone report"
        );
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        let end = L.size_bytes / 512;
        assert_eq!(decode(&desc(0, 0, end - 8, 8), &L).map(|_| ()), Ok(()));
        assert_eq!(decode(&desc(0, 0, end - 7, 8), &L), Err(-EIO));
        assert_eq!(
            decode(&desc(1, 0, 0, 2049), &L),
            Err(-EIO),
            "larger than the buffer"
        );
        assert_eq!(decode(&desc(0, 0, 0, 0), &L), Err(-EIO));
        assert_eq!(decode(&desc(0, 0, u64::MAX / 256, 8), &L), Err(-EIO));
        let four_k = Limits { block: 4096, ..L };
        assert_eq!(decode(&desc(0, 0, 1, 8), &four_k), Err(-EIO));
        let ro = Limits {
            read_only: true,
            ..L
        };
        assert_eq!(decode(&desc(1, 0, 0, 8), &ro), Err(-EIO));
        assert_eq!(decode(&desc(3, 0, 0, 8), &ro), Err(-EIO));
        assert!(decode(&desc(0, 0, 0, 8), &ro).is_ok());
    }

    proptest! {
        /// Whatever the kernel's descriptor says, an action stays inside the device and a
        /// read or write inside the tag's buffer.
        #[test]
        fn actions_stay_inside(op in 0u8..20, flags in any::<u32>(), start in any::<u64>(), n in any::<u32>()) {
            let d = desc(op, flags & !0xff, start, n);
            match decode(&d, &L) {
                Ok(Action::Read { offset, len }) | Ok(Action::Write { offset, len, .. }) => {
                    prop_assert!(len <= L.max_io_bytes && offset + u64::from(len) <= L.size_bytes);
                }
                Ok(Action::Discard { offset, len }) | Ok(Action::WriteZeroes { offset, len, .. }) => {
                    prop_assert!(offset + len <= L.size_bytes);
                }
                Ok(Action::Flush) => prop_assert_eq!(op, 2),
                Err(e) => prop_assert!(e == -EIO || e == -EOPNOTSUPP),
            }
        }
    }
}
