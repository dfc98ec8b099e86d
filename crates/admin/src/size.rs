//! Sizes on the command line and in output: `4096`, `64K`, `1M`, `2GiB`, `1t` (powers of
//! 1024), and the human-readable forms that detail/examine print.

/// Bytes per sector (md counts in 512-byte sectors whatever the device's block size).
pub const SECTOR: u64 = 512;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;

/// Parses a byte count: decimal digits with an optional suffix `K`, `M`, `G`, `T`, `P`
/// (case-insensitive, powers of 1024, optionally followed by `B` or `iB`), or a plain `B`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("invalid size {text:?}: {why}");
    if text.is_empty() {
        return Err(bad("empty"));
    }
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad("expected a number, e.g. 4096, 64K, 1M, 2G"));
    }
    let number: u64 = digits.parse().map_err(|_| bad("the number is too large"))?;
    let lower = suffix.to_ascii_lowercase();
    let unit_letter = lower.chars().next();
    let rest = unit_letter.map_or("", |c| &lower[c.len_utf8()..]);
    let multiplier = match unit_letter {
        None => 1,
        Some('b') if rest.is_empty() => 1,
        Some(c) => {
            let m = match c {
                'k' => KIB,
                'm' => MIB,
                'g' => GIB,
                't' => TIB,
                'p' => 1024 * TIB,
                _ => return Err(bad("unknown unit (use K, M, G, T or P for powers of 1024)")),
            };
            if !matches!(rest, "" | "b" | "ib") {
                return Err(bad("unknown unit (use K, M, G, T or P for powers of 1024)"));
            }
            m
        }
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| bad("the size is too large"))
}

/// A size that must be a whole number of 512-byte sectors (`--size`).
pub fn parse_sector_multiple(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if bytes == 0 {
        return Err(format!("invalid size {text:?}: must be larger than 0"));
    }
    if !bytes.is_multiple_of(SECTOR) {
        return Err(format!(
            "invalid size {text:?}: {bytes} bytes is not a multiple of 512"
        ));
    }
    Ok(bytes)
}

/// A chunk size: a power of two of at least 4 KiB that fits md's 32-bit sector count.
/// Returns bytes.
pub fn parse_chunk(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if bytes < 4 * KIB || !bytes.is_power_of_two() {
        return Err(format!(
            "invalid chunk size {text:?}: must be a power of two of at least 4K"
        ));
    }
    if bytes / SECTOR > u64::from(u32::MAX) {
        return Err(format!("invalid chunk size {text:?}: too large"));
    }
    Ok(bytes)
}

/// A duration in seconds: a positive finite decimal (`0.2`, `3`).
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() && s <= 86_400.0 => Ok(s),
        _ => Err(format!(
            "invalid duration {text:?}: expected seconds, a number > 0 (e.g. 0.5)"
        )),
    }
}

/// A chunk size the way mdadm prints it: `512K`, `64K`, `4096K` (KiB, no fraction).
pub fn chunk_text(bytes: u64) -> String {
    format!("{}K", bytes / KIB)
}

/// Two decimals of `value / unit`, computed in integers (no float rounding surprises).
fn two_decimals(value: u64, unit: u64) -> String {
    let hundredths = (u128::from(value) * 100 / u128::from(unit)) as u64;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

/// mdadm's parenthesised note: binary and decimal units, e.g. `63.00 MiB 66.06 MB`.
/// Below 1 MiB the note is just KiB.
pub fn human(bytes: u64) -> String {
    let (bin, bin_unit, dec, dec_unit) = if bytes >= 2 * TIB {
        (TIB, "TiB", 1_000_000_000_000, "TB")
    } else if bytes >= 2 * GIB {
        (GIB, "GiB", 1_000_000_000, "GB")
    } else if bytes >= MIB {
        (MIB, "MiB", 1_000_000, "MB")
    } else {
        return format!("{} KiB", two_decimals(bytes, KIB));
    };
    format!(
        "{} {bin_unit} {} {dec_unit}",
        two_decimals(bytes, bin),
        two_decimals(bytes, dec)
    )
}

/// `N sectors (63.00 MiB 66.06 MB)` as examine prints device sizes.
pub fn sectors_text(sectors: u64) -> String {
    format!(
        "{sectors} sectors ({})",
        human(sectors.saturating_mul(SECTOR))
    )
}

/// `N KiB (189.00 MiB 198.18 MB)` as detail/examine print array sizes.
pub fn kib_text(bytes: u64) -> String {
    format!("{} KiB ({})", bytes / KIB, human(bytes))
}

/// Short form for progress lines: `12.5 MiB`, `3.00 GiB`.
pub fn short(bytes: u64) -> String {
    if bytes >= TIB {
        format!("{} TiB", two_decimals(bytes, TIB))
    } else if bytes >= GIB {
        format!("{} GiB", two_decimals(bytes, GIB))
    } else if bytes >= MIB {
        format!("{} MiB", two_decimals(bytes, MIB))
    } else if bytes >= KIB {
        format!("{} KiB", two_decimals(bytes, KIB))
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_numbers_and_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512b"), Ok(512));
        assert_eq!(parse_size("64K"), Ok(64 * 1024));
        assert_eq!(parse_size("64k"), Ok(64 * 1024));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("64kb"), Ok(64 * 1024));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("3t"), Ok(3 << 40));
        assert_eq!(parse_size("1P"), Ok(1 << 50));
    }

    #[test]
    fn refuses_bad_sizes_with_a_reason() {
        for bad in [
            "", "K", "-1", "1.5M", " 1M", "1M ", "1 M", "1X", "1MM", "1Mi", "1KiBs", "0x10", "1e6",
            "１", "M1",
        ] {
            let e = parse_size(bad).expect_err(bad);
            assert!(e.contains("invalid size"), "{bad}: {e}");
        }
        assert!(parse_size("99999999999999999999")
            .expect_err("overflow")
            .contains("too large"));
        assert!(parse_size("20000000P")
            .expect_err("overflow")
            .contains("too large"));
    }

    #[test]
    fn sector_multiples_and_chunks() {
        assert_eq!(parse_sector_multiple("1M"), Ok(1 << 20));
        assert!(parse_sector_multiple("1000").is_err());
        assert!(parse_sector_multiple("0").is_err());
        assert_eq!(parse_chunk("64K"), Ok(65536));
        assert_eq!(parse_chunk("4096"), Ok(4096));
        for bad in ["2K", "96K", "0", "1000", "4T", "x"] {
            assert!(parse_chunk(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_sizes_pick_the_largest_unit() {
        assert_eq!(short(512), "512 B");
        assert_eq!(short(64 << 10), "64.00 KiB");
        assert_eq!(short(3 << 29), "1.50 GiB");
        assert_eq!(short(4 << 50), "4096.00 TiB");
        assert_eq!(short(u64::MAX), "16777215.99 TiB"); // truncated, never rounded up
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.2"), Ok(0.2));
        assert_eq!(parse_seconds("3"), Ok(3.0));
        for bad in ["0", "-1", "nan", "inf", "", "x", "1e9"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn human_forms_like_mdadm() {
        assert_eq!(human(129_024 * 512), "63.00 MiB 66.06 MB");
        assert_eq!(human(512 * 1024), "512.00 KiB");
        assert_eq!(human(3 << 30), "3.00 GiB 3.22 GB");
        assert_eq!(human(4 << 40), "4.00 TiB 4.39 TB");
        assert_eq!(sectors_text(2048), "2048 sectors (1.00 MiB 1.04 MB)");
        assert_eq!(
            kib_text(193_536 * 1024),
            "193536 KiB (189.00 MiB 198.18 MB)"
        );
        assert_eq!(chunk_text(512 * 1024), "512K");
        assert_eq!(short(1536), "1.50 KiB");
        assert_eq!(short(100), "100 B");
        assert_eq!(short(5 << 20), "5.00 MiB");
        assert_eq!(short(u64::MAX), "16777215.99 TiB");
    }
}
