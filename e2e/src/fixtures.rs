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
/// SMB server of the node's domain, whose share `machine` only the node's computer account may use.
pub const SMB_MACHINE_SERVER: &str = "corp-files.e2e.test";
/// The node's computer account (the node is domain-joined).
pub const NODE_ACCOUNT: &str = r"E2E\WINNODE$";
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
    // The literal below is a fixed, valid scenario; a failure here is a bug in this file.
    Scenario::from_json(&scenario_json().to_string()).expect("the e2e scenario is valid")
}

fn scenario_json() -> serde_json::Value {
    serde_json::json!({
        "host": {
            "kubelet_path": r"C:\var\lib\kubelet",
            "require_privacy": true,
            "directories": [r"C:\var\lib\kubelet\plugins", r"C:\var\lib\kubelet\pods"],
            "services": [
                { "name": "MSiSCSI", "start_type": "automatic", "status": "running" },
                { "name": "LanmanWorkstation", "start_type": "automatic", "status": "running" }
            ]
        },
        "smb": { "node_account": NODE_ACCOUNT, "servers": [ {
            "name": SMB_SERVER,
            "accounts": [ { "user": SMB_USER, "password": SMB_PASSWORD, "domain": SMB_DOMAIN } ],
            "shares": [
                { "name": SMB_SHARE, "files": { "README.txt": "shared data\n" } },
                { "name": SMB_GUEST_SHARE, "guest": true }
            ]
        }, {
            "name": SMB_MACHINE_SERVER,
            "computers": [ NODE_ACCOUNT ],
            "shares": [ { "name": "machine", "users": [ "WINNODE$" ] } ]
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
    })
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

/// An SMB PV on `\\corp-files.e2e.test\machine\<pv>` mapped as the node's computer account (`authentication:
/// machine`, no Secret), bound to PVC `namespace/pvc`.
pub fn smb_machine_volume(pv: &str, namespace: &str, pvc: &str) -> Volume {
    Volume::persistent(
        pv,
        &format!("{SMB_MACHINE_SERVER}#machine#{pv}"),
        namespace,
        pvc,
    )
    .attr("source", &format!(r"\\{SMB_MACHINE_SERVER}\machine"))
    .attr("subDir", pv)
    .attr("authentication", "machine")
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

/// democratic-csi's TrueNAS file server (`smb.shareHost` in its controller's configuration).
pub const DCSI_SMB_SERVER: &str = "truenas.e2e.test";
/// The share freenas-api-smb made for a volume (one share per volume).
pub const DCSI_SMB_SHARE: &str = "pvc-dcsi-smb";
/// A share whose volumes are directories, as controller-smb-client writes them (`share: tank/k8s/<volume>`).
pub const DCSI_SMB_TANK: &str = "tank";
/// The server's local account (democratic-csi logs on as `server\user`).
pub const DCSI_SMB_USER: &str = "k8s-smb";
/// Its password (a secret).
pub const DCSI_SMB_PASSWORD: &str = "Dcsi-smb-p4ss=word";
/// democratic-csi's iSCSI portal (`iscsi.targetPortal`).
pub const DCSI_PORTAL: &str = "192.0.2.20";
/// A second portal of the same storage (`iscsi.targetPortals`), reaching the same targets (the array's portal group).
pub const DCSI_PORTAL_2: &str = "192.0.2.21";
/// The target freenas-api-iscsi made for a volume (`<basename>:<name>`, default basename), one-way CHAP.
pub const DCSI_IQN: &str = "iqn.2005-10.org.freenas.ctl:pvc-dcsi-lun";
/// A target with mutual CHAP.
pub const DCSI_IQN_MUTUAL: &str = "iqn.2005-10.org.freenas.ctl:pvc-dcsi-mutual";
/// CHAP user name of both targets.
pub const DCSI_CHAP_USER: &str = "dcsi-initiator";
/// CHAP secret of both targets (12–16 characters; a secret).
pub const DCSI_CHAP_SECRET: &str = "Dcsi-chap-secr3t";
/// The secret the mutual target answers with, the initiator's mutual secret (a secret).
pub const DCSI_CHAP_SECRET_IN: &str = "Dcsi-mutual-s3c";
/// democratic-csi's `instance_id` of the controller that made the volumes (the secret-key prefix).
pub const DCSI_INSTANCE: &str = "truenas-1";

/// The file server of democratic-csi's `node-manual` example PV (`examples/node-manual-smb-pv.yaml`, whose `server:
/// host or ip` is the one placeholder a user fills in).
pub const DCSI_MANUAL_SERVER: &str = "nas.e2e.test";
/// The example PV's share and account, as it writes them (`share: someshare`, `mountOptions: [username=foo,
/// password=bar]`).
pub const DCSI_MANUAL_SHARE: &str = "someshare";
/// The example's user name.
pub const DCSI_MANUAL_USER: &str = "foo";
/// The example's password (too common a string to scan logs for: see [`DCSI_MANUAL_SCAN_PASSWORD`]).
pub const DCSI_MANUAL_PASSWORD: &str = "bar";
/// A second account on the example's server, for a PV of the example's shape whose password the secret scans look for.
pub const DCSI_MANUAL_SCAN_USER: &str = "k8s-manual";
/// Its password (in the PV's `mountOptions`).
pub const DCSI_MANUAL_SCAN_PASSWORD: &str = "M0unt-0pt10ns-pw=x";

/// Every secret value of the democratic-csi fixtures.
pub const DCSI_SECRETS: &[&str] = &[
    DCSI_SMB_PASSWORD,
    DCSI_CHAP_SECRET,
    DCSI_CHAP_SECRET_IN,
    DCSI_MANUAL_SCAN_PASSWORD,
];

/// [`scenario`] plus democratic-csi's TrueNAS: an SMB server with a local account, a share per volume and a share
/// holding volume directories, the `node-manual` example's file server (its account and a second one), and two iSCSI
/// portals, the first with a one-way CHAP and a mutual CHAP target.
pub fn democratic_scenario() -> Scenario {
    let mut json = scenario_json();
    let lun = |id: &str| serde_json::json!({ "lun": 0, "id": id, "size": LUN_SIZE, "partition_style": "raw" });
    json["smb"]["servers"]
        .as_array_mut()
        .expect("servers")
        .push(serde_json::json!({
            "name": DCSI_SMB_SERVER,
            "accounts": [ { "user": DCSI_SMB_USER, "password": DCSI_SMB_PASSWORD } ],
            "shares": [
                { "name": DCSI_SMB_SHARE },
                { "name": DCSI_SMB_TANK, "files": { "k8s/pvc-dcsi-dir/.keep": "" } }
            ]
        }));
    json["smb"]["servers"]
        .as_array_mut()
        .expect("servers")
        .push(serde_json::json!({
            "name": DCSI_MANUAL_SERVER,
            "accounts": [
                { "user": DCSI_MANUAL_USER, "password": DCSI_MANUAL_PASSWORD },
                { "user": DCSI_MANUAL_SCAN_USER, "password": DCSI_MANUAL_SCAN_PASSWORD }
            ],
            "shares": [ { "name": DCSI_MANUAL_SHARE } ]
        }));
    json["iscsi"]["portals"]
        .as_array_mut()
        .expect("portals")
        .extend([
            serde_json::json!({
                "address": DCSI_PORTAL,
                "port": 3260,
                "targets": [
                    {
                        "iqn": DCSI_IQN,
                        "chap": { "mode": "one_way", "username": DCSI_CHAP_USER, "secret": DCSI_CHAP_SECRET },
                        "luns": [ lun("dcsi0") ]
                    },
                    {
                        "iqn": DCSI_IQN_MUTUAL,
                        "chap": {
                            "mode": "mutual",
                            "username": DCSI_CHAP_USER,
                            "secret": DCSI_CHAP_SECRET,
                            "target_secret": DCSI_CHAP_SECRET_IN
                        },
                        "luns": [ lun("dcsi-mutual0") ]
                    }
                ]
            }),
            serde_json::json!({
                "address": DCSI_PORTAL_2,
                "port": 3260,
                "targets": [ { "iqn": DCSI_IQN }, { "iqn": DCSI_IQN_MUTUAL } ]
            }),
        ]);
    // A volume naming both portals logs in through each natively (multipath), which needs MPIO claiming iSCSI
    // disks, as democratic-csi's own Windows node needs it (its disk `Path` must be `\\?\mpio#…`).
    json["host"]["mpio"] = serde_json::json!({ "installed": true, "claim_iscsi": true });
    Scenario::from_json(&json.to_string()).expect("the democratic-csi scenario is valid")
}

/// The volume context democratic-csi's SMB controllers write (`freenas/api.js:658-662`, plus the keys
/// `controller-zfs/index.js:1230-1233` adds) for share `share` (`share/dir` for controller-smb-client).
pub fn democratic_smb_volume(pv: &str, namespace: &str, pvc: &str, share: &str) -> Volume {
    let mut v = Volume::persistent(pv, &format!("{pv}-handle"), namespace, pvc)
        .attr("node_attach_driver", "smb")
        .attr("server", DCSI_SMB_SERVER)
        .attr("share", share)
        .attr("provisioner_driver", "freenas-api-smb")
        .attr("provisioner_driver_instance_id", DCSI_INSTANCE)
        // The account as democratic-csi's docs put it: in the node-stage secret's mount_flags, under the
        // instance's prefix.
        .stage_secret(
            &format!("democratic-csi.org/{DCSI_INSTANCE}/mount_flags"),
            &format!("vers=3.0,username={DCSI_SMB_USER},password={DCSI_SMB_PASSWORD}"),
        );
    v.fs_type = "cifs".to_owned();
    v
}

/// The volume context democratic-csi's iSCSI controllers write (`freenas/api.js:1362-1371`: `portal`, `portals`
/// comma-separated, `interface`, `iqn`, `lun` 0) with its CHAP secret under `node-db.node.session.auth.*`, the keys
/// spread over democratic-csi's prefixes; `mutual` adds `.username_in`/`.password_in`.
pub fn democratic_iscsi_volume(
    pv: &str,
    namespace: &str,
    pvc: &str,
    iqn: &str,
    mutual: bool,
) -> Volume {
    let mut v = Volume::persistent(pv, &format!("{pv}-handle"), namespace, pvc)
        .attr("node_attach_driver", "iscsi")
        .attr("portal", DCSI_PORTAL)
        .attr("portals", &format!("{DCSI_PORTAL}:3260,{DCSI_PORTAL_2}"))
        .attr("interface", "")
        .attr("iqn", iqn)
        .attr("lun", "0")
        .attr("provisioner_driver", "freenas-api-iscsi")
        .attr("provisioner_driver_instance_id", DCSI_INSTANCE)
        .stage_secret("node-db.node.session.auth.authmethod", "CHAP")
        .stage_secret(
            "democratic-csi.org/freenas-api-iscsi/node-db.node.session.auth.username",
            DCSI_CHAP_USER,
        )
        .stage_secret(
            &format!("democratic-csi.org/{DCSI_INSTANCE}/node-db.node.session.auth.password"),
            DCSI_CHAP_SECRET,
        )
        .mode(csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter);
    if mutual {
        v = v
            .stage_secret("node-db.node.session.auth.username_in", "truenas")
            .stage_secret(
                "democratic-csi.org/node-db.node.session.auth.password_in",
                DCSI_CHAP_SECRET_IN,
            );
    }
    v.fs_type = "ntfs".to_owned();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_parses() {
        let s = scenario();
        assert_eq!(
            s.smb.servers.len(),
            2,
            "the file server and the one that grants the node's computer account"
        );
        assert_eq!(s.iscsi.portals[0].targets.len(), 2);
        let d = democratic_scenario();
        assert_eq!(
            d.smb.servers.len(),
            4,
            "scenario()'s two, the TrueNAS, and the node-manual example's server"
        );
        assert_eq!(d.iscsi.portals.len(), 3);
    }
}
