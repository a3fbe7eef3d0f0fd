//! Portals, IQNs, LUN-like numbers and fsType alone: never panic; accepted portals round-trip through their
//! host-call text; accepted IQNs are within 223 bytes and start with iqn./eui./naa.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wincsi::host::Portal;
use wincsi::iscsi::{check_fs_type, check_iqn};

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    if let Ok(p) = Portal::parse(&raw, "targetPortal") {
        assert!(p.port > 0 && !p.address.is_empty());
        let again = Portal::parse(&p.to_string(), "again").expect("portal text valid");
        assert_eq!(again, p);
    }
    if check_iqn(&raw).is_ok() {
        assert!(raw.len() <= 223);
        let l = raw.to_ascii_lowercase();
        assert!(l.starts_with("iqn.") || l.starts_with("eui.") || l.starts_with("naa."));
        assert!(!raw.chars().any(|c| c.is_control() || c == ' '));
    }
    let _ = check_fs_type(&raw);
});
