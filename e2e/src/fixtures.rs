//! The storage network every local scenario and the demo use, and the PersistentVolumes that point into it.

use sim::Scenario;

use crate::kubelet::Volume;

/// SMB file server.
pub const SMB_SERVER: &str = "files.e2e.test";
/// Share with credentials.
pub const SMB_SHARE: &str = "data";
/// Share open to guests (inline volumes without a Secret).
pub const SMB_GUEST_SHARE: &str = "public";
/// Domain of the SMB account.
pub const SMB_DOMAIN: &str = "E2E";
/// SMB account.
pub const SMB_USER: &str = "alice";
/// SMB password (a secret: must never appear in a log).
pub const SMB_PASSWORD: &str = "Sm8-e2e-p4ss!word";
/// iSCSI portal address.
pub const ISCSI_PORTAL: &str = "192.0.2.10";
/// Target with one-way CHAP and two LUNs.
pub const ISCSI_IQN: &str = "iqn.2026-01.test.e2e:storage";
/// Target without authentication.
pub const ISCSI_IQN_OPEN: &str = "iqn.2026-01.test.e2e:open";
/// CHAP user name.
pub const CHAP_USER: &str = "initiator1";
/// CHAP secret (12–16 characters as Windows requires; a secret).
pub const CHAP_SECRET: &str = "Ch4p-e2e-secret";
/// Size of every LUN (1 GiB).
pub const LUN_SIZE: u64 = 1 << 30;

/// Every secret value in the fixtures (for "never in a log" checks).
pub const SECRETS: &[&str] = &[SMB_PASSWORD, CHAP_SECRET];

/// The simulated node and its storage network: kubelet path `C:\var\lib\kubelet`, an SMB server with an
/// authenticated and a guest share, an iSCSI portal with a CHAP target (LUN 0 and 1, RAW) and an open target.
pub fn scenario() -> Scenario {
    let json = serde_json::json!({
        "host": {
            "kubelet_path": r"C:\var\lib\kubelet",
            "require_privacy": true,
            "directories": [r"C:\var\lib\kubelet\plugins", r"C:\var\lib\kubelet\pods"],
            "services": [
                { "name": "MSiSCSI", "start_type": "automatic", "status": "running" },
                { "name": "LanmanWorkstation", "start_type": "automatic", "status": "running" }
            ]
        },
        "smb": { "servers": [ {
            "name": SMB_SERVER,
            "accounts": [ { "user": SMB_USER, "password": SMB_PASSWORD, "domain": SMB_DOMAIN } ],
            "shares": [
                { "name": SMB_SHARE, "files": { "README.txt": "shared data\n" } },
                { "name": SMB_GUEST_SHARE, "guest": true }
            ]
        } ] },
        "iscsi": { "portals": [ {
            "address": ISCSI_PORTAL,
            "port": 3260,
            "targets": [
                {
                    "iqn": ISCSI_IQN,
                    "chap": { "mode": "one_way", "username": CHAP_USER, "secret": CHAP_SECRET },
                    "luns": [
                        { "lun": 0, "id": "lun0", "size": LUN_SIZE, "partition_style": "raw" },
                        { "lun": 1, "id": "lun1", "size": LUN_SIZE, "partition_style": "raw" }
                    ]
                },
                {
                    "iqn": ISCSI_IQN_OPEN,
                    "luns": [ { "lun": 0, "id": "open0", "size": LUN_SIZE, "partition_style": "raw" } ]
                }
            ]
        } ] }
    });
    // The literal above is a fixed, valid scenario; a failure here is a bug in this file.
    Scenario::from_json(&json.to_string()).expect("the e2e scenario is valid")
}

/// An SMB PV on `\\files.e2e.test\data` with `subDir` (templates allowed) and the account's credentials in its
/// node-stage Secret, bound to PVC `namespace/pvc`.
pub fn smb_volume(pv: &str, namespace: &str, pvc: &str, sub_dir: Option<&str>) -> Volume {
    let mut v = Volume::persistent(
        pv,
        &format!("{SMB_SERVER}#{SMB_SHARE}#{pv}"),
        namespace,
        pvc,
    )
    .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_SHARE}"))
    .stage_secret("username", SMB_USER)
    .stage_secret("password", SMB_PASSWORD)
    .stage_secret("domain", SMB_DOMAIN);
    if let Some(sub) = sub_dir {
        v = v.attr("subDir", sub);
    }
    v
}

/// An iSCSI PV for LUN `lun` of the CHAP target, with csi-driver-iscsi's attribute and secret keys.
pub fn iscsi_volume(pv: &str, namespace: &str, pvc: &str, lun: u32) -> Volume {
    let mut v = Volume::persistent(pv, &format!("{ISCSI_IQN}#lun-{lun}"), namespace, pvc)
        .attr("targetPortal", &format!("{ISCSI_PORTAL}:3260"))
        .attr("iqn", ISCSI_IQN)
        .attr("lun", &lun.to_string())
        .attr("sessionCHAPAuth", "true")
        .attr("discoveryCHAPAuth", "false")
        .stage_secret("node.session.auth.username", CHAP_USER)
        .stage_secret("node.session.auth.password", CHAP_SECRET)
        .mode(csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter);
    v.fs_type = "ntfs".to_owned();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_parses() {
        let s = scenario();
        assert_eq!(s.smb.servers.len(), 1);
        assert_eq!(s.iscsi.portals[0].targets.len(), 2);
    }
}
