//! Byte sizes: the one grammar every size numaplace reads goes through
//! (`docs/formats/request.md#sizes`), libvirt's `unit=` words, the kernel's
//! own spellings, and the rounding used to show a size to people.
//!
//! The grammar follows libvirt's domain XML: `KB`, `MB`, ... are powers of
//! 1000 and `KiB`, `K`, `MiB`, `M`, ... powers of 1024, case-sensitive, so
//! `4GB` means the same (4 x 10^9 bytes) to every command that takes a size.

/// Units of the size grammar and their multipliers. Case matters: `KB` is
/// 1000 and `K`/`k`/`KiB` 1024; `kB` is left out on purpose (the kernel
/// writes it for KiB, SI for 1000), see [`parse_kernel_size`].
const UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("B", 1),
    ("bytes", 1),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("PB", 1_000_000_000_000_000),
    ("EB", 1_000_000_000_000_000_000),
    ("KiB", 1 << 10),
    ("K", 1 << 10),
    ("k", 1 << 10),
    ("MiB", 1 << 20),
    ("M", 1 << 20),
    ("m", 1 << 20),
    ("GiB", 1 << 30),
    ("G", 1 << 30),
    ("g", 1 << 30),
    ("TiB", 1 << 40),
    ("T", 1 << 40),
    ("PiB", 1 << 50),
    ("P", 1 << 50),
    ("EiB", 1 << 60),
    ("E", 1 << 60),
];

/// The units a size may carry, as error messages list them.
pub const SIZE_UNITS: &str =
    "B, KB, MB, GB, TB, PB, EB (powers of 1000) or KiB, MiB, GiB, TiB, PiB, EiB, K, M, G, T, P, E (powers of 1024)";

/// A size that could not be read. The messages are whole sentences about
/// the text; callers add which flag or field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Nothing, or only a unit.
    #[error("`{0}` has no number; expected a size such as 4GiB or 512MiB")]
    NoNumber(String),
    /// A minus sign: sizes are never negative.
    #[error("`{0}` is negative; a size is 0 or more")]
    Negative(String),
    /// The number part is not a plain decimal number.
    #[error("`{0}` is not a number; expected digits with an optional fraction, such as 4 or 1.5")]
    BadNumber(String),
    /// `kB`: 1000 bytes to SI, 1024 to the kernel.
    #[error("unit `kB` is ambiguous; write KB for 1000 bytes or KiB for 1024")]
    AmbiguousKb,
    /// A unit not in the table.
    #[error("unknown unit `{0}`; units are case-sensitive: {SIZE_UNITS}")]
    UnknownUnit(String),
    /// More than 2^64 - 1 bytes.
    #[error("`{0}` is more than 16 EiB, the largest size numaplace can count")]
    TooLarge(String),
}

/// Parses a byte size as users and files write it: `64GiB`, `512 MiB`,
/// `1.5TiB`, `10GB`, `4096` (bytes). `KB`, `MB`, ... are powers of 1000;
/// `KiB`/`K`/`k`, `MiB`/`M`/`m`, ... powers of 1024; a fraction is rounded
/// to the nearest byte. `None` when [`try_parse_size`] gives an error.
pub fn parse_size(text: &str) -> Option<u64> {
    try_parse_size(text).ok()
}

/// [`parse_size`] with the reason a text is refused.
pub fn try_parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let (num, unit) = split_number(t);
    let unit = unit.trim();
    if t.starts_with('-') {
        return Err(SizeError::Negative(t.to_string()));
    }
    if num.is_empty() {
        return Err(SizeError::NoNumber(t.to_string()));
    }
    if unit == "kB" {
        return Err(SizeError::AmbiguousKb);
    }
    let mult = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, m)| *m)
        .ok_or_else(|| SizeError::UnknownUnit(unit.to_string()))?;
    scale(num, mult).ok_or_else(|| if is_number(num) { SizeError::TooLarge(t.to_string()) } else { bad_number(num) })
}

/// A size in the kernel's own spellings (`/proc/meminfo`'s `2048 kB`, a
/// cache's `32K`, `hugepages-2048kB`): `kB`, `K`, `k`, `KiB` and the larger
/// binary letters all mean powers of 1024 here, as the kernel means them.
/// For kernel text only: what people type goes through [`parse_size`].
pub fn parse_kernel_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, unit) = split_number(t);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "kB" | "k" | "K" | "KiB" => 1 << 10,
        "mB" | "M" | "MiB" => 1 << 20,
        "gB" | "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => return None,
    };
    if num.is_empty() || num.contains('.') {
        return None;
    }
    scale(num, mult)
}

/// Multiplier of a libvirt `unit=` attribute (`KiB`, `G`, `MB`, `bytes`),
/// by libvirt's own rules (`virScaleInteger`, and the `unit` pattern of its
/// schema): `b`, `byte`, `bytes`; a letter K, M, G, T, P, E alone or with
/// `iB` for powers of 1024, with `B` for powers of 1000; case does not
/// matter (libvirt compares case-insensitively, so `kib` is KiB and `mb`
/// is 10^6). `None` for anything else, including no unit: callers know
/// their element's default.
pub fn libvirt_unit_bytes(unit: &str) -> Option<u64> {
    let u = unit.trim().to_ascii_lowercase();
    if matches!(u.as_str(), "b" | "byte" | "bytes") {
        return Some(1);
    }
    let mut chars = u.chars();
    let power = match chars.next()? {
        'k' => 1,
        'm' => 2,
        'g' => 3,
        't' => 4,
        'p' => 5,
        'e' => 6,
        _ => return None,
    };
    let base: u64 = match chars.as_str() {
        "" | "ib" => 1024,
        "b" => 1000,
        _ => return None,
    };
    base.checked_pow(power)
}

/// Splits `1.5 GiB` into the number's characters and the rest.
fn split_number(t: &str) -> (&str, &str) {
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    t.split_at(end)
}

/// Digits with at most one `.` and at least one digit.
fn is_number(num: &str) -> bool {
    num.bytes().filter(|&b| b == b'.').count() <= 1 && num.bytes().any(|b| b.is_ascii_digit())
}

fn bad_number(num: &str) -> SizeError {
    SizeError::BadNumber(num.to_string())
}

/// `num` x `mult`, exactly: the whole part in integers, the fraction in
/// decimal digits (no binary floating point, so `0.1KB` is 100 bytes and
/// a 20-digit byte count is not rounded), rounded to the nearest byte.
/// `None` when `num` is not a number or the result passes 2^64 - 1.
fn scale(num: &str, mult: u64) -> Option<u64> {
    if !is_number(num) {
        return None;
    }
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse::<u64>().ok()?.into() };
    // 19 digits of fraction are more than any byte count needs (2^64 has
    // 20 digits and a fraction only matters below one unit).
    let frac = &frac[..frac.len().min(19)];
    let mut bytes = whole.checked_mul(u128::from(mult))?;
    if !frac.is_empty() {
        let digits: u128 = frac.parse::<u64>().ok()?.into();
        let denom = 10u128.pow(frac.len() as u32);
        // digits < 10^19 and mult <= 2^60: the product fits in u128.
        bytes += (digits * u128::from(mult) + denom / 2) / denom;
    }
    u64::try_from(bytes).ok()
}

/// Formats bytes for people, rounded to the nearest tenth below 100 of a
/// unit and to the nearest whole above: `64 GiB`, `1.5 GiB`, `126 GiB`
/// (for 125.98 GiB), `512 MiB`. A value that rounds up to 1024 of a unit
/// is shown as 1 of the next (1023.99 MiB is `1 GiB`), except in TiB, the
/// largest unit shown.
pub fn format_size(bytes: u64) -> String {
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let Some(mut power) = (0..NAMES.len()).rev().find(|&p| bytes >= 1u64 << (10 * p)) else {
        return "0 B".to_string();
    };
    loop {
        let unit = 1u128 << (10 * power);
        let b = u128::from(bytes);
        // Tenths of the unit, rounded half up, in integers (exact).
        let tenths = (b * 10 + unit / 2) / unit;
        if tenths < 1000 {
            return if tenths.is_multiple_of(10) {
                format!("{} {}", tenths / 10, NAMES[power])
            } else {
                format!("{}.{} {}", tenths / 10, tenths % 10, NAMES[power])
            };
        }
        let whole = (b + unit / 2) / unit;
        if whole >= 1024 && power + 1 < NAMES.len() {
            // Rounded up to the next unit's boundary: say `1 GiB`, not
            // `1024 MiB`; the next round shows it.
            power += 1;
            continue;
        }
        return format!("{whole} {}", NAMES[power]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn decimal_and_binary_units_differ() {
        assert_eq!(parse_size("4GB"), Some(4_000_000_000));
        assert_eq!(parse_size("4G"), Some(4 * GIB));
        assert_eq!(parse_size("4GiB"), Some(4 * GIB));
        assert_eq!(parse_size("4g"), Some(4 * GIB));
        assert_eq!(parse_size("10KB"), Some(10_000));
        assert_eq!(parse_size("10k"), Some(10 * KIB));
        assert_eq!(parse_size("2PB"), Some(2_000_000_000_000_000));
        assert_eq!(parse_size("2PiB"), Some(2 << 50));
        assert_eq!(parse_size("1EB"), Some(1_000_000_000_000_000_000));
        assert_eq!(parse_size("15EiB"), Some(15 << 60));
    }

    #[test]
    fn bytes_spacing_and_fractions() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4096 bytes"), Some(4096));
        assert_eq!(parse_size("7b"), Some(7));
        assert_eq!(parse_size("7 B"), Some(7));
        assert_eq!(parse_size(" 512 MiB "), Some(512 * MIB));
        assert_eq!(parse_size("1.5GiB"), Some(3 * GIB / 2));
        assert_eq!(parse_size("1.5TiB"), Some(3 << 39));
        assert_eq!(parse_size("0.1KB"), Some(100));
        assert_eq!(parse_size(".5K"), Some(512));
        assert_eq!(parse_size("2.5"), Some(3), "a fraction of a byte rounds to the nearest");
        // Exact in integers, where a float would round the last digits.
        assert_eq!(parse_size("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_size("0.000000001GB"), Some(1));
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(try_parse_size("GiB"), Err(SizeError::NoNumber("GiB".into())));
        assert_eq!(try_parse_size(""), Err(SizeError::NoNumber(String::new())));
        assert_eq!(try_parse_size("-4GiB"), Err(SizeError::Negative("-4GiB".into())));
        assert_eq!(try_parse_size("1.2.3GiB"), Err(SizeError::BadNumber("1.2.3".into())));
        assert_eq!(try_parse_size("2048 kB"), Err(SizeError::AmbiguousKb));
        for unit in ["gb", "gib", "Gb", "GIB", "kb", "t", "e", "parsecs", "iB"] {
            assert_eq!(try_parse_size(&format!("4{unit}")), Err(SizeError::UnknownUnit(unit.into())), "{unit}");
        }
        assert_eq!(try_parse_size("16EiB"), Err(SizeError::TooLarge("16EiB".into())));
        assert_eq!(try_parse_size("99999999999999TiB"), Err(SizeError::TooLarge("99999999999999TiB".into())));
        assert_eq!(try_parse_size("18446744073709551616"), Err(SizeError::TooLarge("18446744073709551616".into())));
        let msg = try_parse_size("4XB").expect_err("XB is no unit").to_string();
        assert_eq!(msg, format!("unknown unit `XB`; units are case-sensitive: {SIZE_UNITS}"));
        assert!(try_parse_size("2048 kB").expect_err("kB is ambiguous").to_string().contains("KiB for 1024"));
    }

    #[test]
    fn kernel_text_keeps_kb_as_kib() {
        assert_eq!(parse_kernel_size("2048 kB"), Some(2 * MIB));
        assert_eq!(parse_kernel_size("32K"), Some(32 * KIB));
        assert_eq!(parse_kernel_size("1048576kB"), Some(GIB));
        assert_eq!(parse_kernel_size("4096"), Some(4096));
        assert_eq!(parse_kernel_size("lots kB"), None);
        assert_eq!(parse_kernel_size("1.5 kB"), None);
        assert_eq!(parse_kernel_size("99999999999999999 kB"), None);
    }

    #[test]
    fn libvirt_units_follow_libvirt() {
        assert_eq!(libvirt_unit_bytes("b"), Some(1));
        assert_eq!(libvirt_unit_bytes("bytes"), Some(1));
        assert_eq!(libvirt_unit_bytes("KB"), Some(1000));
        assert_eq!(libvirt_unit_bytes("k"), Some(1024));
        assert_eq!(libvirt_unit_bytes("KiB"), Some(1024));
        assert_eq!(libvirt_unit_bytes("M"), Some(MIB));
        assert_eq!(libvirt_unit_bytes("MB"), Some(1_000_000));
        assert_eq!(libvirt_unit_bytes("G"), Some(GIB));
        assert_eq!(libvirt_unit_bytes("TB"), Some(1_000_000_000_000));
        assert_eq!(libvirt_unit_bytes("PiB"), Some(1 << 50));
        assert_eq!(libvirt_unit_bytes("P"), Some(1 << 50));
        assert_eq!(libvirt_unit_bytes("EB"), Some(1_000_000_000_000_000_000));
        assert_eq!(libvirt_unit_bytes("EiB"), Some(1 << 60));
        // libvirt compares units case-insensitively: `kib` is KiB and
        // `mb` a million bytes to libvirt, so to numaplace too.
        assert_eq!(libvirt_unit_bytes("kib"), Some(1024));
        assert_eq!(libvirt_unit_bytes("mb"), Some(1_000_000));
        assert_eq!(libvirt_unit_bytes("BYTES"), Some(1));
        for bad in ["", "KiBs", "Ki", "iB", "kibibytes", "x", "Z", "ZiB", "1K"] {
            assert_eq!(libvirt_unit_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formats_round_to_nearest() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(64 * GIB), "64 GiB");
        assert_eq!(format_size(3 * GIB / 2), "1.5 GiB");
        assert_eq!(format_size(125 * GIB + 98 * GIB / 100), "126 GiB");
        assert_eq!(format_size(196 * GIB / 100), "2 GiB");
        assert_eq!(format_size(194 * GIB / 100), "1.9 GiB");
        assert_eq!(format_size(1996 * MIB / 100), "20 MiB");
        assert_eq!(format_size(9996 * MIB / 100), "100 MiB");
        assert_eq!(format_size(100 * MIB + MIB / 2), "101 MiB");
        assert_eq!(format_size(1024 * MIB - MIB / 100), "1 GiB");
        assert_eq!(format_size(1023 * MIB + MIB / 4), "1023 MiB");
        assert_eq!(format_size(1024 * KIB - 1), "1 MiB");
        assert_eq!(format_size(1 << 50), "1024 TiB");
        assert_eq!(format_size(u64::MAX), "16777216 TiB");
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_read_or_refused_without_panic(s in "[0-9.\\- ]{0,30}\\PC{0,12}") {
            let _ = try_parse_size(&s);
            let _ = parse_kernel_size(&s);
            let _ = libvirt_unit_bytes(&s);
        }

        #[test]
        fn whole_numbers_scale_exactly(n in 0u64..1 << 40, unit in 0usize..UNITS.len()) {
            let (name, mult) = UNITS[unit];
            proptest::prop_assert_eq!(parse_size(&format!("{n}{name}")), n.checked_mul(mult));
        }
    }

    #[test]
    fn formatting_never_goes_backwards() {
        // Rounding is monotonic across unit changes: a larger size never
        // reads smaller (what "1.9 GiB < 2 GiB" comparisons rely on).
        let value = |s: &str| -> f64 {
            let (n, u) = s.split_once(' ').unwrap_or((s, "B"));
            let mult =
                [("B", 1.0), ("KiB", 1024.0), ("MiB", 1048576.0), ("GiB", 1073741824.0), ("TiB", 1099511627776.0)]
                    .iter()
                    .find(|(name, _)| *name == u)
                    .map_or(0.0, |(_, m)| *m);
            n.parse::<f64>().unwrap_or(0.0) * mult
        };
        let mut last = 0.0;
        let mut b: u64 = 1;
        while b < 1 << 45 {
            let shown = value(&format_size(b));
            assert!(shown >= last, "{b} bytes shows as {}, below the previous", format_size(b));
            last = shown;
            b += b / 97 + 1;
        }
    }
}
