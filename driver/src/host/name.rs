//! How Windows compares names: case-insensitively, through its upcase table, for every character.
//!
//! NTFS and the SMB server compare file, directory and share names by mapping both sides through an *upcase
//! table* and comparing the results code unit by code unit: NTFS keeps one in the `$UpCase` system file of every
//! volume (65,536 UTF-16 entries, one per code unit of the Basic Multilingual Plane), and the kernel's
//! `RtlUpcaseUnicodeChar` / `FsRtlAreNamesEqual` (`IgnoreCase = TRUE`, "converting both strings to uppercase before
//! they are compared") use the system's table of the same shape. The rule this module implements is therefore:
//!
//! * every UTF-16 code unit of the Basic Multilingual Plane maps to its **simple uppercase mapping** (Unicode's
//!   `UnicodeData.txt`, field 12): `ä` → `Ä`, `σ` and `ς` → `Σ`, `ǅ` → `Ǆ`, `ᾳ` → `ᾼ`;
//! * there is **no full case mapping or folding**: `ß` stays `ß` (never `SS`), `ﬁ` stays `ﬁ`, the Kelvin sign `K`
//!   is not `k`, and nothing is normalised (`é` precomposed differs from `e` + combining acute);
//! * characters outside the BMP (UTF-16 surrogate pairs) are compared **unchanged**: a per-code-unit table cannot
//!   map them, so `𐐨` (U+10428) and `𐐀` (U+10400) are different names on Windows.
//!
//! Sources: Microsoft's `FsRtlAreNamesEqual` and `RtlUpcaseUnicodeChar` documentation (an upcase table indexed by the
//! UTF-16 character); the NTFS `$UpCase` file (128 KiB: 65,536 two-byte entries). The table is per Windows version
//! (a volume keeps the one of the Windows that formatted it), so characters whose case pairing was added to Unicode
//! later than that table (e.g. Georgian Mtavruli, Unicode 11) may compare equal here and different on an old volume.
//! That direction is the safe one for what the driver keys by these names: two names it treats as one share a
//! reference count and a lock, so a mapping is kept longer, never removed under another user.
//!
//! [`name_key`] is the canonical form used as a key: the upcased text with ASCII letters shown in lower case. Two
//! names are equal for Windows exactly when their keys are equal (lower-casing ASCII is a bijection on the upcased
//! text, which has no lower-case ASCII letters), and for ASCII-only names the key is the plain lower-cased text the
//! driver has always used, so keys persisted by earlier versions stay valid.

/// The Windows upcase of one character (see the module docs for the rule).
pub fn upcase(c: char) -> char {
    // ASCII's simple uppercase mapping is its ASCII one (a fast path: the record scans compare every share name).
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    if u32::from(c) > 0xFFFF {
        return c;
    }
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(u), None) if u32::from(u) <= 0xFFFF => u,
        // `to_uppercase` is the *full* mapping; where it expands to several characters the simple mapping is either
        // the character itself or, for the Greek letters with ypogegrammeni, the single titlecase letter below.
        _ => simple_greek_iota(c).unwrap_or(c),
    }
}

/// The simple uppercase mappings that differ from a one-character full mapping: Greek small letters with
/// ypogegrammeni map to the capital letters with prosgegrammeni (`UnicodeData.txt`; their full mapping is two
/// letters, e.g. U+1F80 → U+1F08 U+0399).
fn simple_greek_iota(c: char) -> Option<char> {
    let cp = u32::from(c);
    let mapped = match cp {
        0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => cp + 8,
        0x1FB3 => 0x1FBC,
        0x1FC3 => 0x1FCC,
        0x1FF3 => 0x1FFC,
        _ => return None,
    };
    char::from_u32(mapped)
}

/// The canonical key of a Windows name: every character upcased the Windows way, then ASCII letters lower-cased.
/// `name_key(a) == name_key(b)` exactly when Windows considers `a` and `b` the same name.
pub fn name_key(name: &str) -> String {
    name.chars()
        .map(|c| upcase(c).to_ascii_lowercase())
        .collect()
}

/// Whether Windows considers `a` and `b` the same name (case-insensitive through the upcase table).
pub fn names_equal(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    equal_by_char(a, b)
}

/// [`names_equal`] character by character (what its ASCII fast path must agree with).
fn equal_by_char(a: &str, b: &str) -> bool {
    a.chars().map(upcase).eq(b.chars().map(upcase))
}

/// Whether `name` starts with `prefix` for Windows (case-insensitively, character by character).
pub fn starts_with_name(name: &str, prefix: &str) -> bool {
    if name.is_ascii() && prefix.is_ascii() {
        return name
            .as_bytes()
            .get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()));
    }
    starts_by_char(name, prefix)
}

/// [`starts_with_name`] character by character (what its ASCII fast path must agree with).
fn starts_by_char(name: &str, prefix: &str) -> bool {
    let mut name = name.chars().map(upcase);
    prefix.chars().map(upcase).all(|p| name.next() == Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ascii_fast_paths_agree_with_the_general_rule() {
        for b in 0u8..=0x7f {
            let c = char::from(b);
            let mut full = c.to_uppercase();
            assert_eq!(Some(upcase(c)), full.next(), "{c:?}");
            assert_eq!(full.next(), None);
        }
        for (a, b) in [
            (r"\\srv\Share", r"\\SRV\share"),
            (r"\\srv\share", r"\\srv\shar"),
            ("", ""),
            ("a", ""),
            ("[x]", "[X]"),
            ("@", "`"),
        ] {
            assert_eq!(names_equal(a, b), equal_by_char(a, b), "{a:?} {b:?}");
            assert_eq!(
                starts_with_name(a, b),
                starts_by_char(a, b),
                "{a:?} starts with {b:?}"
            );
        }
    }

    #[test]
    fn every_character_not_ascii_only() {
        for (a, b) in [
            (r"\\fs1\Ärzte", r"\\fs1\ärzte"),
            (r"\\FS1\ÄRZTE", r"\\fs1\ärzte"),
            ("ΣΟΦΊΑ", "σοφία"),
            ("σ", "ς"),
            ("ǅ", "ǆ"),
            ("Ǆ", "ǅ"),
            ("ᾳ", "ᾼ"),
            ("ᾀ", "ᾈ"),
            ("ı", "I"),
            ("ſ", "S"),
            ("Ωmega", "ωMEGA"),
            ("C:\\var\\lib\\kubelet", "c:\\VAR\\Lib\\KUBELET"),
        ] {
            assert!(names_equal(a, b), "{a} vs {b}");
            assert_eq!(name_key(a), name_key(b), "{a} vs {b}");
        }
    }

    #[test]
    fn simple_mapping_only_no_folding_no_normalisation_no_supplementary() {
        for (a, b) in [
            ("straße", "STRASSE"),
            ("ﬁle", "FILE"),
            ("\u{212A}", "k"),
            ("\u{00E9}", "e\u{0301}"),
            ("\u{10428}", "\u{10400}"),
            ("a", "b"),
            ("ab", "a"),
        ] {
            assert!(!names_equal(a, b), "{a:?} vs {b:?}");
            assert_ne!(name_key(a), name_key(b), "{a:?} vs {b:?}");
        }
        assert_eq!(upcase('ß'), 'ß');
        assert_eq!(upcase('\u{10428}'), '\u{10428}');
    }

    #[test]
    fn keys_keep_the_historical_ascii_form() {
        assert_eq!(name_key(r"\\SRV\Share"), r"\\srv\share");
        assert_eq!(name_key(r"\\srv\Ärzte"), r"\\srv\Ärzte");
        assert_eq!(name_key(r"\\srv\ärzte"), r"\\srv\Ärzte");
        // A key persisted by an earlier version (ASCII lower-cased only) keys to the same value.
        let old = r"\\srv\ärzte".to_ascii_lowercase();
        assert_eq!(name_key(&old), name_key(r"\\SRV\ÄRZTE"));
    }

    #[test]
    fn key_equality_is_windows_equality_for_every_bmp_character() {
        for cp in (0..=0xFFFF_u32).filter_map(char::from_u32) {
            let up = upcase(cp);
            // Idempotent, and the key of a character is the key of its upcase.
            assert_eq!(upcase(up), up, "U+{:04X}", u32::from(cp));
            assert_eq!(name_key(&cp.to_string()), name_key(&up.to_string()));
            assert!(names_equal(&cp.to_string(), &up.to_string()));
            // Never maps into or out of the BMP, never expands.
            assert!(u32::from(up) <= 0xFFFF);
        }
    }

    #[test]
    fn prefixes() {
        assert!(starts_with_name(r"\\FS1\Ärzte\x", r"\\fs1\ärzte"));
        assert!(starts_with_name("abc", ""));
        assert!(!starts_with_name("ab", "abc"));
        assert!(!starts_with_name(r"\\fs2\x", r"\\fs1\"));
    }
}
