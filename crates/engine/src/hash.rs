//! A hasher for the engine's maps keyed by numbers (stripe numbers, block numbers): one
//! multiplication per word. SipHash, the default, cost more than the rest of a stripe-cache
//! attach or a DAB hit. The keys are not an adversary's to choose to any profit: a client
//! that made them collide would only slow its own requests.

use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of each word written; hashbrown takes its control bits from the top.
#[derive(Default)]
pub(crate) struct NumberHasher(u64);

const PHI: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for NumberHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(PHI);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(PHI);
    }
}

/// A `HashMap` keyed by numbers, hashed by [`NumberHasher`].
pub(crate) type NumberMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<NumberHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<NumberHasher>::default().hash_one(t)
    }

    #[test]
    fn neighbouring_keys_spread_over_the_top_bits() {
        // hashbrown's control byte is the top 7 bits: consecutive keys must not share them.
        let tops: std::collections::HashSet<u64> = (0..128u64).map(|n| hash(&n) >> 57).collect();
        assert!(tops.len() > 64, "{} distinct", tops.len());
        let pairs: std::collections::HashSet<u64> =
            (0..128u64).map(|n| hash(&(3u32, n)) >> 57).collect();
        assert!(pairs.len() > 64, "{} distinct", pairs.len());
        assert_ne!(hash(&(1u32, 2u64)), hash(&(2u32, 1u64)));
    }
}
