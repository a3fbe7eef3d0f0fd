//! A LUN another system formatted directly on the device (no partition table: Windows calls it RAW): the native
//! backend reads its first and last sectors and refuses it; csi-proxy cannot read sectors, so through it the LUN is
//! initialised and formatted as if new — the documented limit, which the simulated host records as data loss.

use std::collections::BTreeMap;

use serde_json::json;
use sim::CsiProxyVersion;
use sim::wmi::TestBackend;

use crate::error::Error;
use crate::host::HostOp::*;
use crate::lifecycle::{AccessType, Capability, Secrets, StageRequest, UnstageRequest};
use crate::testing::{Env, d};

const IQN: &str = "iqn.2024-01.io.example:moved-from-linux";
const GIB: u64 = 1 << 30;

fn scenario(content: &serde_json::Value) -> serde_json::Value {
    json!({
        "disks": [{"number": 0, "id": "os", "size": 100 * GIB, "partition_style": "gpt"}],
        "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
            {"iqn": IQN, "luns": [{"lun": 0, "id": "lun0", "size": 8 * GIB, "content": content}]}
        ]}]}
    })
}

fn staging() -> String {
    r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\v1\globalmount".to_owned()
}

fn stage_req() -> StageRequest {
    let c: BTreeMap<String, String> = [
        ("targetPortal", "10.0.0.5:3260"),
        ("iqn", IQN),
        ("lun", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    StageRequest {
        volume_id: "v1".into(),
        staging_target_path: staging(),
        capability: Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 1,
        }),
        volume_context: c,
        secrets: Secrets::new(std::iter::empty::<(&str, &str)>()),
    }
}

/// The formats a LUN moved from a Linux (or other) node may carry on the whole device, and what the native refusal
/// names.
const FORMATS: &[(&str, &str)] = &[
    ("ext4", "ext2/ext3/ext4 superblock at byte 1080"),
    ("xfs", "XFS superblock at byte 0"),
    ("btrfs", "Btrfs superblock at byte 65600"),
    ("lvm2", "LVM2 physical volume label at byte 536"),
    ("luks1", "LUKS header at byte 0"),
    ("zfs", "ZFS label at byte 16384"),
    ("ntfs", "NTFS boot sector at byte 3"),
    ("exfat", "exFAT boot sector at byte 3"),
    ("swap", "Linux swap signature at byte 4086"),
];

/// Native: every format is refused with FAILED_PRECONDITION naming it and where, before `Initialize`; the session is
/// rolled back, nothing is written or lost, and kubelet's retry is refused the same way. csi-proxy, on every release:
/// the documented limit — the stage initialises, partitions and formats the LUN, and the simulated host records the
/// loss.
#[tokio::test(start_paused = true)]
async fn a_lun_formatted_whole_by_another_system_is_refused_natively_and_lost_through_csi_proxy() {
    let backend = TestBackend::from_env_or_panic();
    for (format, what) in FORMATS {
        let content = json!([{ "signature": format }]);
        match backend {
            TestBackend::Native => {
                let env = Env::on(TestBackend::Native, &scenario(&content));
                for attempt in ["stage", "kubelet's retry"] {
                    let err = env.mgr.stage(&stage_req(), d()).await.expect_err("refused");
                    let Error::FailedPrecondition(m) = &err else {
                        panic!("{format}, {attempt}: {err:?}");
                    };
                    assert!(
                        m.contains("refusing to initialise")
                            && m.contains(what)
                            && m.contains("wipe the LUN"),
                        "{format}, {attempt}: {m}"
                    );
                    let ops = env.take_ops();
                    assert!(
                        ops.contains(&PartitionDisk) && !ops.contains(&FormatVolume),
                        "{format}: {ops:?}"
                    );
                }
                assert!(
                    env.data_loss().is_empty(),
                    "{format}: {:?}",
                    env.data_loss()
                );
                assert!(
                    env.state(|s| s
                        .disks()
                        .iter()
                        .any(|x| x.id == "lun0" && x.partitions.is_empty())),
                    "{format}: the LUN is untouched"
                );
                assert!(
                    !env.sim
                        .audit(0)
                        .iter()
                        .any(|e| e.rpc == "MSFT_Disk.Initialize"),
                    "{format}: Initialize was called"
                );
                env.assert_clean();
            }
            TestBackend::CsiProxy => {
                for v in CsiProxyVersion::ALL {
                    let env = Env::on(TestBackend::CsiProxy, &scenario(&content));
                    env.sim.set_csi_proxy_version(v).expect("release");
                    env.mgr
                        .stage(&stage_req(), d())
                        .await
                        .unwrap_or_else(|e| panic!("{format}, {v}: {e}"));
                    let loss = env.sim.data_loss_events();
                    assert_eq!(loss.len(), 1, "{format}, {v}: {loss:?}");
                    assert_eq!(
                        (loss[0].rpc.as_str(), loss[0].disk_id.as_str()),
                        ("PartitionDisk", "lun0"),
                        "{format}, {v}"
                    );
                    env.mgr
                        .unstage(
                            &UnstageRequest {
                                volume_id: "v1".into(),
                                staging_target_path: staging(),
                            },
                            d(),
                        )
                        .await
                        .expect("unstage");
                }
            }
        }
    }
}

/// A blank LUN (the scenario's bytes all zero) is no data: both backends initialise it.
#[tokio::test]
async fn a_blank_lun_is_initialised_by_both_backends() {
    let env = Env::new(&scenario(&json!([{"offset": 1080, "hex": "0000"}])));
    env.mgr.stage(&stage_req(), d()).await.expect("stage");
    assert!(env.data_loss().is_empty());
    assert!(env.state(|s| {
        s.disks()
            .iter()
            .any(|x| x.id == "lun0" && !x.partitions.is_empty())
    }));
}
