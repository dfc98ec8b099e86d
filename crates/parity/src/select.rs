//! Choosing the implementation: CPU feature detection, the `RAIDD_PARITY_IMPL` override, and
//! the cached choice the free functions dispatch through.

use std::fmt;
use std::sync::OnceLock;

use crate::kernels;
use crate::Impl;

/// Environment variable that forces an implementation (`scalar`, `ssse3`, `avx2`, `avx512`,
/// `gfni`), for benchmarks that compare paths and for tools such as valgrind that lack some
/// instructions.
pub const IMPL_ENV: &str = "RAIDD_PARITY_IMPL";

/// Every implementation, slowest first.
const ALL: [Impl; 5] = [
    Impl::Scalar,
    Impl::Ssse3,
    Impl::Avx2,
    Impl::Avx512,
    Impl::Gfni,
];

impl Impl {
    /// The fastest implementation this CPU supports.
    ///
    /// Chosen once per process: `RAIDD_PARITY_IMPL` is read on the first call, and a forced
    /// implementation the CPU lacks falls back to the best available with a message on stderr.
    pub fn best() -> Impl {
        static BEST: OnceLock<Impl> = OnceLock::new();
        *BEST.get_or_init(|| {
            let requested = std::env::var(IMPL_ENV).ok();
            let (imp, warning) = choose(requested.as_deref(), &Impl::available());
            if let Some(warning) = warning {
                eprintln!("raidd-parity: {warning}");
            }
            imp
        })
    }

    /// Every implementation this CPU supports (for tests that compare them).
    pub fn available() -> Vec<Impl> {
        ALL.into_iter().filter(|imp| imp.is_available()).collect()
    }

    /// Whether this CPU (and this build) can run `self` (`Avx512` needs AVX-512F and BW,
    /// `Gfni` those and GFNI).
    pub fn is_available(self) -> bool {
        kernels::table(self).is_some()
    }

    /// The lower-case name `RAIDD_PARITY_IMPL` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Scalar => "scalar",
            Impl::Ssse3 => "ssse3",
            Impl::Avx2 => "avx2",
            Impl::Avx512 => "avx512",
            Impl::Gfni => "gfni",
        }
    }

    /// The implementation called `name` (as [`Impl::name`] spells it).
    pub fn from_name(name: &str) -> Option<Impl> {
        ALL.into_iter().find(|imp| imp.name() == name)
    }
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The implementation to use given the override (if any) and what the CPU supports, and a
/// warning when the override could not be honoured. `available` is slowest first and holds at
/// least the scalar path.
fn choose(requested: Option<&str>, available: &[Impl]) -> (Impl, Option<String>) {
    let best = available.last().copied().unwrap_or(Impl::Scalar);
    let Some(requested) = requested.map(str::trim).filter(|r| !r.is_empty()) else {
        return (best, None);
    };
    match Impl::from_name(&requested.to_ascii_lowercase()) {
        Some(imp) if available.contains(&imp) => (imp, None),
        Some(imp) => (
            best,
            Some(format!(
                "{IMPL_ENV}={requested}: this CPU or build cannot run {imp}; using {best}"
            )),
        ),
        None => (
            best,
            Some(format!(
                "{IMPL_ENV}={requested}: unknown implementation \
                 (expected scalar, ssse3, avx2, avx512 or gfni); using {best}"
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_BUT_512: [Impl; 3] = [Impl::Scalar, Impl::Ssse3, Impl::Avx2];

    #[test]
    fn no_override_picks_the_fastest() {
        assert_eq!(choose(None, &ALL_BUT_512), (Impl::Avx2, None));
        assert_eq!(choose(Some(""), &ALL_BUT_512), (Impl::Avx2, None));
        assert_eq!(choose(None, &[Impl::Scalar]), (Impl::Scalar, None));
    }

    #[test]
    fn override_is_honoured_when_available() {
        assert_eq!(choose(Some("scalar"), &ALL_BUT_512), (Impl::Scalar, None));
        assert_eq!(choose(Some(" SSSE3 "), &ALL_BUT_512), (Impl::Ssse3, None));
    }

    #[test]
    fn unavailable_or_unknown_override_falls_back_with_a_warning() {
        let (imp, warning) = choose(Some("avx512"), &ALL_BUT_512);
        assert_eq!(imp, Impl::Avx2);
        assert!(warning.is_some_and(|w| w.contains("cannot run avx512")));
        let (imp, warning) = choose(Some("neon"), &[Impl::Scalar, Impl::Ssse3]);
        assert_eq!(imp, Impl::Ssse3);
        assert!(warning.is_some_and(|w| w.contains("unknown implementation")));
    }

    #[test]
    fn names_round_trip() {
        for imp in ALL {
            assert_eq!(Impl::from_name(imp.name()), Some(imp));
            assert_eq!(imp.to_string(), imp.name());
        }
    }

    #[test]
    fn available_matches_cpu_features() {
        let available = Impl::available();
        assert_eq!(available.first(), Some(&Impl::Scalar));
        assert!(available.contains(&Impl::best()));
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw");
            let avx2 = std::arch::is_x86_feature_detected!("avx2");
            let ssse3 = std::arch::is_x86_feature_detected!("ssse3");
            let gfni = avx512 && std::arch::is_x86_feature_detected!("gfni");
            assert_eq!(available.contains(&Impl::Gfni), gfni);
            assert_eq!(available.contains(&Impl::Avx512), avx512);
            assert_eq!(available.contains(&Impl::Avx2), avx2);
            assert_eq!(available.contains(&Impl::Ssse3), ssse3);
        }
    }
}
