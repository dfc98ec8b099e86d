//! How an array's stripe cache is set: its gathering policy and whether small writes may go
//! alone. Read from the config and the command line; the cache acts on them.

/// Default bytes of cached stripe contents per array.
pub const DEFAULT_CACHE_BYTES: usize = 16 << 20;

/// Default stripes with member I/O in flight under [`Gather::Limit`].
pub const DEFAULT_INFLIGHT_STRIPES: usize = 64;

/// How partial-stripe writes wait for company before their member I/O starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gather {
    /// Start at once (gathering happens only among writes that wait for a busy stripe).
    None,
    /// Wait until the thread has nothing else to run.
    Plug,
    /// At most this many stripes with member I/O in flight per array.
    Limit(usize),
}

impl Gather {
    pub(super) fn encode(self) -> (u8, usize) {
        match self {
            Gather::None => (0, 0),
            Gather::Plug => (1, 0),
            Gather::Limit(n) => (2, n.max(1)),
        }
    }
}

impl std::fmt::Display for Gather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gather::None => write!(f, "none"),
            Gather::Plug => write!(f, "plug"),
            Gather::Limit(n) => write!(f, "limit:{n}"),
        }
    }
}

impl std::str::FromStr for Gather {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Gather, String> {
        match s {
            "none" => Ok(Gather::None),
            "plug" => Ok(Gather::Plug),
            "limit" => Ok(Gather::Limit(DEFAULT_INFLIGHT_STRIPES)),
            _ => match s.strip_prefix("limit:").map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => Ok(Gather::Limit(n)),
                _ => Err(format!(
                    "unknown gather policy {s:?}: use none, plug, limit or limit:N (N > 0)"
                )),
            },
        }
    }
}

/// Whether a small write that finds its stripe idle skips the cache: written at once by
/// read-modify-write under the stripe's lock, with none of the gathering (plug, batch,
/// hand-off) that costs a random small write about a third of its time and gathers nothing
/// for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alone {
    /// Under [`Gather::Plug`], while gathering does not pay on this thread: each window of
    /// batches through the cache that gathered (and hit kept rows) for fewer than 1 in 16
    /// lets the next small writes go alone, then the cache is tried again. Never under the
    /// other policies, which say how to gather.
    Auto,
    /// Every write within one data chunk whose stripe is idle, under any policy.
    Always,
    /// None: every write goes through the cache.
    Never,
}

impl Alone {
    pub(super) fn encode(self) -> u8 {
        match self {
            Alone::Auto => 0,
            Alone::Always => 1,
            Alone::Never => 2,
        }
    }

    pub(super) fn decode(v: u8) -> Alone {
        match v {
            1 => Alone::Always,
            2 => Alone::Never,
            _ => Alone::Auto,
        }
    }
}

impl std::fmt::Display for Alone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Alone::Auto => "auto",
            Alone::Always => "always",
            Alone::Never => "never",
        })
    }
}

impl std::str::FromStr for Alone {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Alone, String> {
        match s {
            "auto" => Ok(Alone::Auto),
            "always" => Ok(Alone::Always),
            "never" => Ok(Alone::Never),
            _ => Err(format!(
                "unknown policy for small writes {s:?}: use auto, always or never"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_policies_parse() {
        assert_eq!("plug".parse::<Gather>(), Ok(Gather::Plug));
        assert_eq!("none".parse::<Gather>(), Ok(Gather::None));
        assert_eq!("limit:8".parse::<Gather>(), Ok(Gather::Limit(8)));
        assert_eq!(
            "limit".parse::<Gather>(),
            Ok(Gather::Limit(DEFAULT_INFLIGHT_STRIPES))
        );
        assert!("limit:0".parse::<Gather>().is_err());
        assert!("fast".parse::<Gather>().is_err());
        for g in [Gather::None, Gather::Plug, Gather::Limit(3)] {
            assert_eq!(g.to_string().parse::<Gather>(), Ok(g));
        }
    }
}
