//! GF(2^8) with polynomial 0x11d and generator 2 (the field Linux md's RAID6 uses):
//! scalar arithmetic and the tables the SIMD code is built from.

/// a * b in GF(2^8).
pub fn mul(a: u8, b: u8) -> u8 {
    todo!()
}

/// g^n for the generator g = 2.
pub fn exp2(n: usize) -> u8 {
    todo!()
}

/// Multiplicative inverse (a != 0).
pub fn inv(a: u8) -> u8 {
    todo!()
}
