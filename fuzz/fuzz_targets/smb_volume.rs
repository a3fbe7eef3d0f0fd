//! SMB volumes (source, subDir templates, mount options, the secrets map): `parse_volume` and `check_mount_flags`
//! never panic, never echo a secret value in an error, never accept a credential outside the secrets map, and an
//! accepted subDir has no `.`/`..` segment (after template substitution).
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use wincsi::host::UncPath;
use wincsi::lifecycle::check_mount_flags;
use wincsi::smb::parse_volume;

fuzz_target!(|data: &[u8]| {
    let (ctx, secrets, values) = common::context_and_secrets(data);
    common::assert_no_secret(&format!("{secrets:?}"), "Debug of the secrets map");
    // Secret-looking mount options must be refused without echoing their value.
    let flags: Vec<String> = values.iter().map(|v| format!("password={v}")).collect();
    if !flags.is_empty() {
        let e = check_mount_flags(&flags).expect_err("password= in mount options is refused");
        common::assert_no_secret(&e.to_string(), "mount option error");
    }
    match parse_volume(&ctx, &secrets) {
        Err(e) => {
            common::assert_no_secret(&e.to_string(), "error");
            common::assert_no_secret(&format!("{e:?}"), "Debug of the error");
        }
        Ok(vol) => {
            let dbg = format!("{vol:?}");
            assert!(
                !dbg.contains(common::PW_MARK),
                "Debug shows the password: {dbg}"
            );
            for c in &vol.sub_dir {
                assert!(!common::bad_component(c), "subDir segment {c:?} accepted");
            }
            let full = vol.full_path();
            let again = UncPath::parse(&full.to_string(), "again").expect("full path valid");
            assert_eq!(again, full);
            assert!(full.to_string().starts_with(&vol.source.to_string()));
        }
    }
});
