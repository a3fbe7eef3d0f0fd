//! iSCSI volumes (portal lists, IQN, LUN, CHAP secrets): `parse_volume` never panics, never echoes a secret value
//! in an error, and what it accepts is what the host calls get (portals re-parse to themselves, the IQN is valid,
//! the LUN fits one byte, CHAP secrets have 12–16 characters).
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use wincsi::host::{IscsiAuth, Portal};
use wincsi::iscsi::{CHAP_SECRET_LEN, MAX_LUN, check_iqn, parse_volume};

fuzz_target!(|data: &[u8]| {
    let (ctx, secrets, _) = common::context_and_secrets(data);
    match parse_volume(&ctx, &secrets) {
        Err(e) => {
            common::assert_no_secret(&e.to_string(), "error");
            common::assert_no_secret(&format!("{e:?}"), "Debug of the error");
        }
        Ok(vol) => {
            assert!(!vol.portals.is_empty());
            for p in &vol.portals {
                let again = Portal::parse(&p.to_string(), "again").expect("portal text valid");
                assert_eq!(
                    &again, p,
                    "portal changed between validation and the host call"
                );
            }
            check_iqn(&vol.iqn).expect("accepted IQN is valid");
            assert!(vol.lun <= MAX_LUN);
            let dbg = format!("{vol:?}");
            match &vol.auth {
                IscsiAuth::None => {}
                IscsiAuth::OneWay { secret, .. } | IscsiAuth::Mutual { secret, .. } => {
                    let n = secret.expose().len();
                    assert!(CHAP_SECRET_LEN.contains(&n));
                    assert!(
                        !dbg.contains(secret.expose()),
                        "Debug shows the CHAP secret"
                    );
                }
            }
            if let Some(m) = &vol.mutual_secret {
                assert!(!dbg.contains(m.expose()), "Debug shows the mutual secret");
            }
        }
    }
});
