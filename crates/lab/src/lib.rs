//! raidd's lab members: what tests, simulations and benchmarks put under an array in place
//! of real disks. Production arrays never use them, so the engine does not depend on this
//! crate (nor on `raidd-sim` or a random number generator); tests and `raidd-bench` do.
//!
//! - [`FaultMember`] wraps any member and injects errors, silent corruption, latency,
//!   disappearance and hangs on a schedule derived from a seed and the operation number,
//!   so a failing run replays exactly;
//! - [`SimMember`], made by a [`SimWorld`] from a `raidd-sim` topology, keeps its data in
//!   memory and completes each request when the world's simulated clock reaches the time
//!   the drive model gives it.
//!
//! Both implement the engine's [`raidd_engine::Member`] contract, and check their
//! requests with its [`raidd_engine::member::assert_request`].

mod fault;
mod sim;

pub use fault::{FaultControl, FaultMember, FaultPlan};
pub use sim::{SimMember, SimWorld};

/// What a lock that a panicking thread held says (see `raidd_engine`'s).
const POISONED: &str = "a thread panicked while holding this lock";
