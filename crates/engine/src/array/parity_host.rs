//! What an array lends its parity path ([`Host`]): the parity path sees members as slots
//! that are current or not, and member I/O that fails a member on error, and nothing else
//! of the array.

use std::future::Future;
use std::io;

use raidd_rt::{BufSlice, BufSliceMut};

use super::counters::Counters;
use super::join::Results;
use super::parity::Host;
use super::Array;
use crate::error::{Error, Result};
use crate::iov::{MemberIos, ReadBack, Tagged};

impl Host for Array {
    fn in_sync_at(&self, role: usize, end: u64) -> bool {
        Array::in_sync_at(self, role, end)
    }

    fn member_offset(&self, role: usize, sector: u64) -> u64 {
        Array::member_offset(self, role, sector)
    }

    fn parity_trusted(&self, end: u64) -> bool {
        Array::parity_trusted(self, end)
    }

    fn check_alive(&self) -> Result<()> {
        Array::check_alive(self)
    }

    fn lost_error(&self) -> Error {
        Array::lost_error(self)
    }

    fn lost_windows(&self, role: usize) -> Error {
        Array::lost_windows(self, role)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn issue_reads(
        &self,
        ios: MemberIos<Tagged>,
    ) -> impl Future<Output = Results<(usize, io::Result<()>, ReadBack)>> {
        Array::issue_reads(self, ios)
    }

    fn issue_scratch_reads(
        &self,
        ios: MemberIos<BufSliceMut>,
    ) -> impl Future<Output = Results<(usize, io::Result<()>)>> {
        Array::issue_scratch_reads(self, ios)
    }

    fn issue_writes(
        &self,
        ios: MemberIos<BufSlice>,
    ) -> impl Future<Output = Results<(usize, io::Result<()>)>> {
        Array::issue_writes(self, ios)
    }
}
