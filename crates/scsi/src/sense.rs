//! SCSI status codes and sense data (SPC-4 4.5), in both fixed and descriptor format.

/// Command completion status (SAM-5 5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// GOOD.
    Good,
    /// CHECK CONDITION: sense data accompanies the status.
    CheckCondition,
    /// CONDITION MET (PRE-FETCH when the range fits in the cache).
    ConditionMet,
    /// BUSY.
    Busy,
    /// RESERVATION CONFLICT: sent without sense data.
    ReservationConflict,
    /// TASK SET FULL.
    TaskSetFull,
    /// TASK ABORTED.
    TaskAborted,
}

impl Status {
    /// The status byte as sent on the wire.
    pub fn code(self) -> u8 {
        match self {
            Status::Good => 0x00,
            Status::CheckCondition => 0x02,
            Status::ConditionMet => 0x04,
            Status::Busy => 0x08,
            Status::ReservationConflict => 0x18,
            Status::TaskSetFull => 0x28,
            Status::TaskAborted => 0x40,
        }
    }
}

/// Sense keys (SPC-4 table 27).
pub mod key {
    /// NO SENSE.
    pub const NO_SENSE: u8 = 0x0;
    /// RECOVERED ERROR.
    pub const RECOVERED_ERROR: u8 = 0x1;
    /// NOT READY.
    pub const NOT_READY: u8 = 0x2;
    /// MEDIUM ERROR.
    pub const MEDIUM_ERROR: u8 = 0x3;
    /// HARDWARE ERROR.
    pub const HARDWARE_ERROR: u8 = 0x4;
    /// ILLEGAL REQUEST.
    pub const ILLEGAL_REQUEST: u8 = 0x5;
    /// UNIT ATTENTION.
    pub const UNIT_ATTENTION: u8 = 0x6;
    /// DATA PROTECT.
    pub const DATA_PROTECT: u8 = 0x7;
    /// ABORTED COMMAND.
    pub const ABORTED_COMMAND: u8 = 0xB;
    /// MISCOMPARE.
    pub const MISCOMPARE: u8 = 0xE;
}

/// The sense-key-specific field pointer of an ILLEGAL REQUEST (SPC-4 4.5.2.4.2): which byte
/// (and optionally bit) of the CDB or parameter list was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldPointer {
    /// C/D: true when the pointer is into the CDB, false for the parameter list.
    pub cdb: bool,
    /// The bit within the byte (0..=7), when one bit is to blame.
    pub bit: Option<u8>,
    /// Byte offset of the field.
    pub field: u16,
}

impl FieldPointer {
    fn bytes(&self) -> [u8; 3] {
        let mut b0 = 0x80; // SKSV
        if self.cdb {
            b0 |= 0x40;
        }
        if let Some(bit) = self.bit {
            b0 |= 0x08 | (bit & 0x07);
        }
        let f = self.field.to_be_bytes();
        [b0, f[0], f[1]]
    }
}

/// Sense data for a CHECK CONDITION. Build one with the named constructors and encode it with
/// [`Sense::fixed`] or [`Sense::descriptor`] according to the control mode page's D_SENSE.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("sense key {key:#x} asc {asc:#04x} ascq {ascq:#04x}")]
pub struct Sense {
    /// Sense key (see [`key`]).
    pub key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// INFORMATION field: the failing LBA for medium errors, the byte offset for a miscompare.
    pub information: Option<u64>,
    /// Sense-key-specific field pointer for ILLEGAL REQUEST.
    pub field_pointer: Option<FieldPointer>,
}

/// Length of fixed-format sense data as built here.
pub const FIXED_SENSE_LEN: usize = 18;

impl Sense {
    /// Sense with the given key/ASC/ASCQ and nothing else.
    pub const fn new(key: u8, asc: u8, ascq: u8) -> Sense {
        Sense {
            key,
            asc,
            ascq,
            information: None,
            field_pointer: None,
        }
    }

    /// Fixed-format sense data (response code 70h), 18 bytes. VALID is set only when the
    /// INFORMATION value fits the 32-bit field; larger values need descriptor format.
    pub fn fixed(&self) -> Vec<u8> {
        let mut b = vec![0u8; FIXED_SENSE_LEN];
        b[0] = 0x70;
        b[2] = self.key & 0x0f;
        if let Some(info) = self.information {
            if let Ok(v) = u32::try_from(info) {
                b[0] |= 0x80;
                b[3..7].copy_from_slice(&v.to_be_bytes());
            }
        }
        b[7] = (FIXED_SENSE_LEN - 8) as u8;
        b[12] = self.asc;
        b[13] = self.ascq;
        if let Some(fp) = self.field_pointer {
            b[15..18].copy_from_slice(&fp.bytes());
        }
        b
    }

    /// Descriptor-format sense data (response code 72h) with an information descriptor and a
    /// sense-key-specific descriptor when those are present.
    pub fn descriptor(&self) -> Vec<u8> {
        let mut b = vec![0x72, self.key & 0x0f, self.asc, self.ascq, 0, 0, 0, 0];
        if let Some(info) = self.information {
            b.extend_from_slice(&[0x00, 0x0a, 0x80, 0x00]);
            b.extend_from_slice(&info.to_be_bytes());
        }
        if let Some(fp) = self.field_pointer {
            b.extend_from_slice(&[0x02, 0x06, 0x00, 0x00]);
            b.extend_from_slice(&fp.bytes());
            b.push(0);
        }
        b[7] = (b.len() - 8) as u8;
        b
    }

    /// Encodes in descriptor format when `descriptor` (D_SENSE=1), else fixed format.
    pub fn encode(&self, descriptor: bool) -> Vec<u8> {
        if descriptor {
            self.descriptor()
        } else {
            self.fixed()
        }
    }

    /// Adds an INFORMATION value.
    pub fn with_information(mut self, information: u64) -> Sense {
        self.information = Some(information);
        self
    }

    fn with_pointer(mut self, cdb: bool, field: u16, bit: Option<u8>) -> Sense {
        self.field_pointer = Some(FieldPointer {
            cdb,
            bit: bit.map(|b| b & 7),
            field,
        });
        self
    }

    /// NO SENSE (0/00/00): what REQUEST SENSE returns when nothing is pending.
    pub const fn no_sense() -> Sense {
        Sense::new(key::NO_SENSE, 0, 0)
    }
    /// INVALID COMMAND OPERATION CODE (5/20/00).
    pub const fn invalid_opcode() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x20, 0)
    }
    /// INVALID FIELD IN CDB (5/24/00) pointing at `byte` (and `bit`) of the CDB.
    pub fn invalid_field_in_cdb(byte: u16, bit: Option<u8>) -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x24, 0).with_pointer(true, byte, bit)
    }
    /// INVALID FIELD IN PARAMETER LIST (5/26/00) pointing at `byte` (and `bit`) of the
    /// parameter list.
    pub fn invalid_field_in_parameter_list(byte: u16, bit: Option<u8>) -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x26, 0).with_pointer(false, byte, bit)
    }
    /// PARAMETER LIST LENGTH ERROR (5/1A/00).
    pub const fn parameter_list_length_error() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x1a, 0)
    }
    /// LOGICAL BLOCK ADDRESS OUT OF RANGE (5/21/00).
    pub const fn lba_out_of_range() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x21, 0)
    }
    /// LOGICAL UNIT NOT SUPPORTED (5/25/00): a command to a LUN that does not exist.
    pub const fn invalid_lun() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x25, 0)
    }
    /// Alias of [`Sense::invalid_lun`].
    pub const fn logical_unit_not_supported() -> Sense {
        Sense::invalid_lun()
    }
    /// WRITE PROTECTED (7/27/00).
    pub const fn write_protected() -> Sense {
        Sense::new(key::DATA_PROTECT, 0x27, 0)
    }
    /// UNRECOVERED READ ERROR (3/11/00) at `lba`.
    pub fn unrecovered_read_error(lba: u64) -> Sense {
        Sense::new(key::MEDIUM_ERROR, 0x11, 0).with_information(lba)
    }
    /// WRITE ERROR (3/0C/00) at `lba`.
    pub fn write_error(lba: u64) -> Sense {
        Sense::new(key::MEDIUM_ERROR, 0x0c, 0).with_information(lba)
    }
    /// MISCOMPARE DURING VERIFY OPERATION (E/1D/00); INFORMATION is the offset of the first
    /// mismatching byte in the compared data.
    pub fn miscompare(byte_offset: u64) -> Sense {
        Sense::new(key::MISCOMPARE, 0x1d, 0).with_information(byte_offset)
    }
    /// POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (6/29/00).
    pub const fn power_on_reset() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x29, 0)
    }
    /// BUS DEVICE RESET FUNCTION OCCURRED (6/29/03): what SAM has a LOGICAL UNIT RESET
    /// leave for every I_T nexus.
    pub const fn lun_reset() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x29, 0x03)
    }
    /// I_T NEXUS LOSS OCCURRED (6/29/07).
    pub const fn it_nexus_loss() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x29, 0x07)
    }
    /// MODE PARAMETERS CHANGED (6/2A/01).
    pub const fn parameters_changed() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x2a, 0x01)
    }
    /// RESERVATIONS PREEMPTED (6/2A/03).
    pub const fn reservations_preempted() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x2a, 0x03)
    }
    /// RESERVATIONS RELEASED (6/2A/04).
    pub const fn reservations_released() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x2a, 0x04)
    }
    /// REGISTRATIONS PREEMPTED (6/2A/05).
    pub const fn registrations_preempted() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x2a, 0x05)
    }
    /// CAPACITY DATA HAS CHANGED (6/2A/09), e.g. after the array grew.
    pub const fn capacity_changed() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x2a, 0x09)
    }
    /// COMMANDS CLEARED BY ANOTHER INITIATOR (6/2F/00), for tasks aborted by PREEMPT AND ABORT.
    pub const fn commands_cleared_by_another_initiator() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x2f, 0)
    }
    /// REPORTED LUNS DATA HAS CHANGED (6/3F/0E).
    pub const fn reported_luns_changed() -> Sense {
        Sense::new(key::UNIT_ATTENTION, 0x3f, 0x0e)
    }
    /// SAVING PARAMETERS NOT SUPPORTED (5/39/00).
    pub const fn saving_parameters_not_supported() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x39, 0)
    }
    /// INSUFFICIENT REGISTRATION RESOURCES (5/55/04).
    pub const fn insufficient_registration_resources() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x55, 0x04)
    }
    /// INVALID RELEASE OF PERSISTENT RESERVATION (5/26/04).
    pub const fn invalid_release() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x04)
    }
    /// LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE (2/04/00), e.g. while the array is stopping.
    pub const fn not_ready() -> Sense {
        Sense::new(key::NOT_READY, 0x04, 0)
    }
    /// INTERNAL TARGET FAILURE (4/44/00), for failures that are not a medium error.
    pub const fn internal_target_failure() -> Sense {
        Sense::new(key::HARDWARE_ERROR, 0x44, 0)
    }
    /// WRITE SAME/UNMAP style resource exhaustion on a thin LUN: SPACE ALLOCATION FAILED
    /// WRITE PROTECT (7/27/07).
    pub const fn space_allocation_failed() -> Sense {
        Sense::new(key::DATA_PROTECT, 0x27, 0x07)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes() {
        let all = [
            (Status::Good, 0x00),
            (Status::CheckCondition, 0x02),
            (Status::ConditionMet, 0x04),
            (Status::Busy, 0x08),
            (Status::ReservationConflict, 0x18),
            (Status::TaskSetFull, 0x28),
            (Status::TaskAborted, 0x40),
        ];
        for (s, c) in all {
            assert_eq!(s.code(), c);
        }
    }

    #[test]
    fn fixed_invalid_field_in_cdb() {
        let b = Sense::invalid_field_in_cdb(1, Some(3)).fixed();
        assert_eq!(b.len(), 18);
        assert_eq!(b[0], 0x70);
        assert_eq!(b[2], 0x05);
        assert_eq!(b[7], 10);
        assert_eq!((b[12], b[13]), (0x24, 0x00));
        // SKSV | C/D | BPV | bit 3, field 0x0001
        assert_eq!(&b[15..18], &[0xcb, 0x00, 0x01]);
    }

    #[test]
    fn fixed_parameter_list_pointer_has_cd_clear() {
        let b = Sense::invalid_field_in_parameter_list(20, None).fixed();
        assert_eq!(&b[15..18], &[0x80, 0x00, 20]);
        assert_eq!((b[12], b[13]), (0x26, 0x00));
    }

    #[test]
    fn fixed_information_valid_only_when_32_bit() {
        let b = Sense::unrecovered_read_error(0x1234_5678).fixed();
        assert_eq!(b[0], 0xf0);
        assert_eq!(&b[3..7], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(b[2], 3);
        assert_eq!(b[12], 0x11);
        let b = Sense::unrecovered_read_error(1 << 40).fixed();
        assert_eq!(b[0], 0x70);
        assert_eq!(&b[3..7], &[0, 0, 0, 0]);
    }

    #[test]
    fn descriptor_format() {
        let s = Sense::miscompare(0x1_0000_0002);
        let b = s.descriptor();
        assert_eq!(&b[..4], &[0x72, 0x0e, 0x1d, 0x00]);
        assert_eq!(b[7] as usize, b.len() - 8);
        assert_eq!(&b[8..12], &[0x00, 0x0a, 0x80, 0x00]);
        assert_eq!(&b[12..20], &0x1_0000_0002u64.to_be_bytes());

        let b = Sense::invalid_field_in_cdb(2, None).descriptor();
        assert_eq!(b.len(), 16);
        assert_eq!(&b[8..16], &[0x02, 0x06, 0, 0, 0xc0, 0x00, 0x02, 0]);

        let b = Sense::no_sense().descriptor();
        assert_eq!(b, vec![0x72, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn encode_follows_d_sense() {
        let s = Sense::lba_out_of_range();
        assert_eq!(s.encode(false)[0], 0x70);
        assert_eq!(s.encode(true)[0], 0x72);
    }
}
