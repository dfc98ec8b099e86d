//! The decoded form of every command this crate understands.

use crate::LunInfo;

/// A decoded, validated CDB. Produced by [`crate::decode`]; everything in it has passed the
/// range, field and limit checks, so the shell can act on it directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// TEST UNIT READY.
    TestUnitReady,
    /// INQUIRY: standard data, or the VPD page `page` when `evpd`.
    Inquiry {
        /// EVPD bit.
        evpd: bool,
        /// VPD page code (0 for standard data).
        page: u8,
        /// Allocation length.
        alloc: u16,
    },
    /// REQUEST SENSE.
    RequestSense {
        /// DESC bit: descriptor-format sense wanted.
        descriptor: bool,
        /// Allocation length.
        alloc: u8,
    },
    /// READ CAPACITY (10).
    ReadCapacity10,
    /// READ CAPACITY (16) (SERVICE ACTION IN(16) 10h).
    ReadCapacity16 {
        /// Allocation length.
        alloc: u32,
    },
    /// READ (6/10/12/16). READ (6) with a transfer length of 0 arrives here as 256 blocks.
    Read {
        /// First block.
        lba: u64,
        /// Number of blocks (may be 0: nothing to transfer).
        blocks: u32,
        /// FUA bit.
        fua: bool,
    },
    /// WRITE (6/10/12/16).
    Write {
        /// First block.
        lba: u64,
        /// Number of blocks (may be 0).
        blocks: u32,
        /// FUA bit: the data must be durable before GOOD.
        fua: bool,
    },
    /// VERIFY (10/12/16). Without `bytchk` the medium is only checked for readability.
    Verify {
        /// First block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
        /// BYTCHK=1: compare Data-Out (`blocks * block_size` bytes) with the medium.
        bytchk: bool,
    },
    /// WRITE AND VERIFY (10/12/16).
    WriteAndVerify {
        /// First block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
        /// BYTCHK bit (the written data is compared after writing).
        bytchk: bool,
    },
    /// SYNCHRONIZE CACHE (10/16). `blocks == 0` means "from `lba` to the end of the LUN".
    SynchronizeCache {
        /// First block.
        lba: u64,
        /// Number of blocks, 0 = to the end.
        blocks: u32,
        /// IMMED bit: GOOD may be returned before the flush finishes.
        immed: bool,
    },
    /// PRE-FETCH (10/16). `blocks == 0` means "to the end". Answer CONDITION MET when the
    /// range would fit the cache, GOOD otherwise (SBC-3 5.9).
    PreFetch {
        /// First block.
        lba: u64,
        /// Number of blocks, 0 = to the end.
        blocks: u32,
        /// IMMED bit.
        immed: bool,
    },
    /// WRITE SAME (10/16). A CDB length of 0 arrives here as the blocks to the end (WSNZ=0).
    WriteSame {
        /// First block.
        lba: u64,
        /// Number of blocks, at least 1.
        blocks: u32,
        /// UNMAP bit (only accepted on a thin LUN). Writing is always a correct answer;
        /// unmapping instead is only correct where a later read would return the same data
        /// as the write, because LBPRZ is 0.
        unmap: bool,
        /// ANCHOR bit (always false: anchoring is refused in decode).
        anchor: bool,
        /// NDOB (WRITE SAME 16): no Data-Out; the block written is all zeroes.
        ndob: bool,
    },
    /// UNMAP; the parameter list is parsed by [`crate::parse_unmap`].
    Unmap {
        /// ANCHOR bit (always false: refused in decode).
        anchor: bool,
        /// Parameter list length.
        param_len: u16,
    },
    /// COMPARE AND WRITE: Data-Out is `2 * blocks * block_size` (verify data, then write data).
    CompareAndWrite {
        /// First block.
        lba: u64,
        /// Number of blocks (0 means compare nothing and write nothing).
        blocks: u8,
        /// FUA bit.
        fua: bool,
    },
    /// ORWRITE (16): the Data-Out is ORed into the blocks (read, OR, write, atomically as
    /// COMPARE AND WRITE is).
    OrWrite {
        /// First block.
        lba: u64,
        /// Blocks (0: nothing is transferred).
        blocks: u32,
        /// FUA bit.
        fua: bool,
    },
    /// RESERVE (6): SPC-2's reservation of the whole logical unit for one I_T nexus.
    Reserve6,
    /// RELEASE (6).
    Release6,
    /// GET LBA STATUS (SERVICE ACTION IN(16) 12h).
    GetLbaStatus {
        /// Starting LBA.
        lba: u64,
        /// Allocation length.
        alloc: u32,
    },
    /// MODE SENSE (6 or 10).
    ModeSense {
        /// MODE SENSE (10).
        ten: bool,
        /// DBD: no block descriptor.
        dbd: bool,
        /// LLBAA: long LBA block descriptor allowed (10 only).
        llbaa: bool,
        /// Page control: 0 current, 1 changeable, 2 default, 3 saved.
        pc: u8,
        /// Page code.
        page: u8,
        /// Subpage code.
        subpage: u8,
        /// Allocation length.
        alloc: u16,
    },
    /// MODE SELECT (6 or 10); the parameter list goes to [`crate::mode_select`].
    ModeSelect {
        /// MODE SELECT (10).
        ten: bool,
        /// PF bit.
        pf: bool,
        /// SP bit (always false: refused in decode).
        sp: bool,
        /// Parameter list length.
        param_len: u16,
    },
    /// REPORT LUNS.
    ReportLuns {
        /// SELECT REPORT.
        select: u8,
        /// Allocation length.
        alloc: u32,
    },
    /// REPORT SUPPORTED OPERATION CODES (MAINTENANCE IN 0Ch).
    ReportSupportedOpcodes {
        /// RCTD: return command timeouts descriptors.
        rctd: bool,
        /// REPORTING OPTIONS (0..=3).
        options: u8,
        /// REQUESTED OPERATION CODE.
        opcode: u8,
        /// REQUESTED SERVICE ACTION.
        service_action: u16,
        /// Allocation length.
        alloc: u32,
    },
    /// START STOP UNIT: nothing to do for an array; answered GOOD.
    StartStopUnit {
        /// IMMED bit.
        immed: bool,
        /// START bit.
        start: bool,
        /// LOEJ bit.
        loej: bool,
        /// POWER CONDITION field.
        power_condition: u8,
    },
    /// PERSISTENT RESERVE IN.
    PersistentReserveIn {
        /// Service action (0..=3).
        action: u8,
        /// Allocation length.
        alloc: u16,
    },
    /// PERSISTENT RESERVE OUT.
    PersistentReserveOut {
        /// Service action (0..=6).
        action: u8,
        /// SCOPE field.
        scope: u8,
        /// TYPE field.
        kind: u8,
        /// Parameter list length (24 after decode).
        param_len: u32,
    },
}

impl Op {
    /// Bytes of Data-Out the command needs. The shell should fail a command whose expected
    /// data transfer length disagrees (iSCSI residuals), and must read exactly this much.
    pub fn data_out_len(&self, lun: &LunInfo) -> u64 {
        let bs = u64::from(lun.block_size);
        match *self {
            Op::Write { blocks, .. }
            | Op::WriteAndVerify { blocks, .. }
            | Op::OrWrite { blocks, .. } => u64::from(blocks) * bs,
            Op::Verify {
                blocks,
                bytchk: true,
                ..
            } => u64::from(blocks) * bs,
            Op::CompareAndWrite { blocks, .. } => 2 * u64::from(blocks) * bs,
            Op::WriteSame { ndob: false, .. } => bs,
            Op::Unmap { param_len, .. } | Op::ModeSelect { param_len, .. } => u64::from(param_len),
            Op::PersistentReserveOut { param_len, .. } => u64::from(param_len),
            _ => 0,
        }
    }

    /// Whether the command modifies the medium (write protection applies).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Write { .. }
                | Op::WriteAndVerify { .. }
                | Op::WriteSame { .. }
                | Op::Unmap { .. }
                | Op::CompareAndWrite { .. }
                | Op::OrWrite { .. }
        )
    }

    /// Whether the command reads the medium (for the exclusive-access reservation types).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Op::Read { .. }
                | Op::Verify { .. }
                | Op::GetLbaStatus { .. }
                | Op::PreFetch { .. }
                | Op::CompareAndWrite { .. }
                | Op::OrWrite { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lun::test_lun;

    #[test]
    fn data_out_lengths() {
        let lun = test_lun();
        let w = Op::Write {
            lba: 0,
            blocks: 8,
            fua: false,
        };
        assert_eq!(w.data_out_len(&lun), 4096);
        let v = Op::Verify {
            lba: 0,
            blocks: 8,
            bytchk: false,
        };
        assert_eq!(v.data_out_len(&lun), 0);
        let caw = Op::CompareAndWrite {
            lba: 0,
            blocks: 2,
            fua: false,
        };
        assert_eq!(caw.data_out_len(&lun), 2048);
        let ws = Op::WriteSame {
            lba: 0,
            blocks: 100,
            unmap: false,
            anchor: false,
            ndob: false,
        };
        assert_eq!(ws.data_out_len(&lun), 512);
        let ws = Op::WriteSame {
            lba: 0,
            blocks: 100,
            unmap: true,
            anchor: false,
            ndob: true,
        };
        assert_eq!(ws.data_out_len(&lun), 0);
        let r = Op::Read {
            lba: 0,
            blocks: 8,
            fua: false,
        };
        assert_eq!(r.data_out_len(&lun), 0);
        let pr = Op::PersistentReserveOut {
            action: 0,
            scope: 0,
            kind: 0,
            param_len: 24,
        };
        assert_eq!(pr.data_out_len(&lun), 24);
    }

    #[test]
    fn write_classification() {
        assert!(Op::Unmap {
            anchor: false,
            param_len: 24
        }
        .is_write());
        assert!(!Op::SynchronizeCache {
            lba: 0,
            blocks: 0,
            immed: false
        }
        .is_write());
        assert!(!Op::TestUnitReady.is_write());
    }
}
