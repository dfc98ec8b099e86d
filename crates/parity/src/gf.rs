//! GF(2^8) with polynomial 0x11d and generator 2 (the field Linux md's RAID6 uses):
//! scalar arithmetic and the tables the SIMD code is built from.
//!
//! Multiplication goes through logarithm tables built at compile time: `a * b =
//! g^(log a + log b)`. The exponent table is stored twice over (510 entries) so that the sum of
//! two logarithms indexes it without a `% 255`.

/// The field polynomial x^8 + x^4 + x^3 + x^2 + 1 (md / Linux `lib/raid6`).
pub const POLY: u16 = 0x11d;

/// The multiplicative group has 255 elements, so powers of the generator repeat with this period.
pub const ORDER: usize = 255;

/// `EXP[i] = g^i` for `i < 2 * ORDER`.
const EXP: [u8; 2 * ORDER] = build_exp();

/// `LOG[a] = i` with `g^i = a`, for `a != 0` (`LOG[0]` is unused and 0).
const LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 2 * ORDER] {
    let mut table = [0u8; 2 * ORDER];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 2 * ORDER {
        table[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    table
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < ORDER {
        table[exp[i] as usize] = i as u8;
        i += 1;
    }
    table
}

// 2 generates the whole group: its powers must run through all 255 non-zero elements before
// coming back to 1, otherwise LOG would be ambiguous and Q could not recover two blocks.
const _: () = assert!(EXP[0] == 1 && EXP[ORDER] == 1);
const _: () = {
    let mut i = 1;
    while i < ORDER {
        assert!(EXP[i] != 1);
        i += 1;
    }
};

/// a * b in GF(2^8).
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// g^n for the generator g = 2.
pub fn exp2(n: usize) -> u8 {
    EXP[n % ORDER]
}

/// Multiplicative inverse (a != 0).
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "GF(2^8): zero has no multiplicative inverse");
    // g^(255 - log a) * g^(log a) = g^255 = 1; for a = 1 the index is 255, which EXP holds.
    EXP[ORDER - LOG[a as usize] as usize]
}

/// a / b in GF(2^8) (b != 0).
pub fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// Split-nibble multiplication tables for one constant `c`: `c * x = lo[x & 15] ^ hi[x >> 4]`,
/// because multiplication distributes over the XOR of the two nibbles of `x`. Sixteen entries
/// each is what one `pshufb` looks up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NibbleTables {
    /// `lo[i] = c * i`.
    pub lo: [u8; 16],
    /// `hi[i] = c * (i << 4)`.
    pub hi: [u8; 16],
}

impl NibbleTables {
    /// The tables for multiplication by `c`.
    pub fn new(c: u8) -> NibbleTables {
        let mut lo = [0u8; 16];
        let mut hi = [0u8; 16];
        for i in 0..16u8 {
            lo[usize::from(i)] = mul(c, i);
            hi[usize::from(i)] = mul(c, i << 4);
        }
        NibbleTables { lo, hi }
    }

    /// `c * x` by two table look-ups (the scalar form of what the SIMD code does per byte).
    pub fn mul(&self, x: u8) -> u8 {
        self.lo[usize::from(x & 0x0f)] ^ self.hi[usize::from(x >> 4)]
    }

    /// Multiplication by `c` as the bit matrix of GFNI's affine transform (`gf2p8affineqb`),
    /// which multiplies every byte by it in one instruction whatever the polynomial (GFNI's
    /// own multiply, `gf2p8mulb`, is fixed to AES's 0x11b, not RAID6's 0x11d).
    ///
    /// Multiplying by `c` is linear over GF(2): input bit `j` contributes the byte
    /// `c * 2^j`, so output bit `i` is the parity of the input bits `j` whose `c * 2^j` has
    /// bit `i`. That set is row `i`, which the instruction takes from byte `7 - i` of the
    /// 64-bit matrix.
    pub fn affine_matrix(&self) -> u64 {
        let mut matrix = 0u64;
        for i in 0..8 {
            let mut row = 0u64;
            for j in 0..8 {
                if self.mul(1 << j) & (1 << i) != 0 {
                    row |= 1 << j;
                }
            }
            matrix |= row << (8 * (7 - i));
        }
        matrix
    }
}

/// What `gf2p8affineqb` with constant 0 does to one byte, written from its definition
/// (output bit `i` is the parity of `x` AND byte `7 - i` of the matrix): the scalar check of
/// [`NibbleTables::affine_matrix`].
pub fn affine_byte(matrix: u64, x: u8) -> u8 {
    let mut out = 0u8;
    for i in 0..8 {
        let row = (matrix >> (8 * (7 - i))) as u8;
        out |= (((row & x).count_ones() & 1) as u8) << i;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_matrices_multiply_like_the_field() {
        for c in 0..=255u8 {
            let m = NibbleTables::new(c).affine_matrix();
            for x in 0..=255u8 {
                assert_eq!(affine_byte(m, x), mul(c, x), "{c:#04x} * {x:#04x}");
            }
        }
        // The identity is the matrix Intel documents for it; a row order or bit order
        // mistake would still multiply by 1 correctly with some other layout, but not give
        // this constant.
        assert_eq!(NibbleTables::new(1).affine_matrix(), 0x0102_0408_1020_4080);
    }

    /// Multiplication written independently of the tables: shift-and-add with reduction by the
    /// polynomial after every doubling ("Russian peasant").
    fn mul_bitwise(mut a: u8, mut b: u8) -> u8 {
        let mut product = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                product ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLY & 0xff) as u8;
            }
            b >>= 1;
        }
        product
    }

    fn all() -> impl Iterator<Item = u8> + Clone {
        0..=255u8
    }

    #[test]
    fn mul_matches_bitwise_reference_for_every_pair() {
        for a in all() {
            for b in all() {
                assert_eq!(mul(a, b), mul_bitwise(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn mul_is_commutative() {
        for a in all() {
            for b in all() {
                assert_eq!(mul(a, b), mul(b, a));
            }
        }
    }

    #[test]
    fn mul_is_associative_and_distributive() {
        // All triples are 16M checks; a stride through b and c keeps the test fast while still
        // covering every a against many partners.
        for a in all() {
            for b in all().step_by(7) {
                for c in all().step_by(11) {
                    assert_eq!(mul(mul(a, b), c), mul(a, mul(b, c)), "assoc {a} {b} {c}");
                    assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c), "distrib {a} {b} {c}");
                }
            }
        }
    }

    #[test]
    fn zero_and_one() {
        for a in all() {
            assert_eq!(mul(a, 0), 0);
            assert_eq!(mul(a, 1), a);
        }
    }

    #[test]
    fn inverse_of_every_non_zero_element() {
        for a in 1..=255u8 {
            assert_eq!(mul(inv(a), a), 1, "inv({a})");
            assert_eq!(div(a, a), 1);
        }
    }

    #[test]
    #[should_panic(expected = "zero has no multiplicative inverse")]
    fn inverse_of_zero_panics() {
        inv(0);
    }

    #[test]
    fn exp2_cycles_with_period_255() {
        let mut seen = [false; 256];
        let mut x = 1u8;
        for n in 0..ORDER {
            assert_eq!(exp2(n), x, "g^{n}");
            assert!(!seen[usize::from(x)], "g^{n} repeats early");
            seen[usize::from(x)] = true;
            x = mul_bitwise(x, 2);
        }
        assert!(!seen[0]);
        assert_eq!(exp2(ORDER), 1);
        for n in 0..3 * ORDER {
            assert_eq!(exp2(n), exp2(n + ORDER));
        }
        assert_eq!(exp2(1), 2);
        assert_eq!(exp2(8), 0x1d);
    }

    #[test]
    fn nibble_tables_multiply() {
        for c in all() {
            let t = NibbleTables::new(c);
            for x in all() {
                assert_eq!(t.mul(x), mul_bitwise(c, x), "{c} * {x}");
            }
        }
    }
}
