//! iSCSI through the CSI Node service (the tonic service the kubelet talks to), backed by the volume lifecycle over
//! the simulated host: request conversion (volume_context, secrets, capability fsType), CSI error codes, the
//! EXPAND_VOLUME capability and NodeExpandVolume end to end.

#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

use csi::v1::node_server::Node;
use csi::v1::{self as v1, node_service_capability::rpc::Type as RpcType};
use proxy_client::{ProxyClient, Transport};
use serde_json::json;
use sim::{HostOptions, Scenario, SimHost};
use tonic::{Code, Request};
use wincsi::host::KubeletRoot;
use wincsi::lifecycle::{Lifecycle, VolumeConfig};
use wincsi::node::{NodeCore, NodeInfo, NodeService};

const IQN: &str = "iqn.2024-01.io.example:node-test";
const SECRET: &str = "Node-S3cret-0042";
const GIB: u64 = 1 << 30;

fn staging() -> String {
    r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\pv1\globalmount".to_owned()
}

fn target() -> String {
    r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pv1\mount".to_owned()
}

fn capability(fs: &str) -> Option<v1::VolumeCapability> {
    Some(v1::VolumeCapability {
        access_type: Some(v1::volume_capability::AccessType::Mount(
            v1::volume_capability::MountVolume {
                fs_type: fs.to_owned(),
                ..Default::default()
            },
        )),
        access_mode: Some(v1::volume_capability::AccessMode {
            mode: v1::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
    })
}

fn stage(context: &[(&str, &str)], secret: &str, fs: &str) -> v1::NodeStageVolumeRequest {
    v1::NodeStageVolumeRequest {
        volume_id: "pv1".into(),
        staging_target_path: staging(),
        volume_capability: capability(fs),
        volume_context: context
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        secrets: HashMap::from([
            ("node.session.auth.username".to_owned(), "node-b".to_owned()),
            ("node.session.auth.password".to_owned(), secret.to_owned()),
        ]),
        ..Default::default()
    }
}

#[tokio::test]
async fn stage_publish_stats_expand_unstage_through_the_node_service() {
    let sandbox = tempfile::tempdir().expect("tmp");
    let socks = tempfile::tempdir().expect("tmp");
    let state = tempfile::tempdir().expect("tmp");
    let scenario = Scenario::from_json(
        &json!({"iscsi": {"portals": [{"address": "san.example.com", "targets": [
            {"iqn": IQN, "chap": {"mode": "one_way", "username": "node-b", "secret": SECRET},
             "luns": [{"lun": 4, "size": 8 * GIB}]}]}]}})
        .to_string(),
    )
    .expect("scenario");
    let sim = SimHost::new(&scenario, sandbox.path(), HostOptions::default()).expect("sim");
    let serve = sim::serve_unix(sim.clone(), socks.path()).expect("serve");
    let proxy = ProxyClient::new(Transport::UnixSockets {
        dir: socks.path().to_path_buf(),
    });
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let host = common::backend::host_for(&sim, proxy.clone(), state.path());
    let mgr = wincsi::backend::manager(host, cfg, state.path()).expect("manager");
    let lifecycle: Arc<dyn Lifecycle> = Arc::new(mgr);
    let node = NodeService::new(
        NodeCore::new(NodeInfo {
            node_id: "win-1".into(),
            max_volumes_per_node: 0,
            topology: BTreeMap::new(),
        })
        .with_volumes(lifecycle),
    );

    let caps = node
        .node_get_capabilities(Request::new(v1::NodeGetCapabilitiesRequest {}))
        .await
        .expect("caps")
        .into_inner();
    let has = |t: RpcType| {
        caps.capabilities.iter().any(|c| {
            matches!(&c.r#type, Some(v1::node_service_capability::Type::Rpc(r)) if r.r#type == t as i32)
        })
    };
    assert!(
        has(RpcType::ExpandVolume)
            && has(RpcType::StageUnstageVolume)
            && has(RpcType::VolumeCondition)
    );

    proxy
        .filesystem()
        .mkdir(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\pv1")
        .await
        .expect("kubelet mkdir");
    let ctx = [
        ("targetPortal", "san.example.com"),
        ("iqn", IQN),
        ("lun", "4"),
        ("sessionCHAPAuth", "true"),
    ];
    // CSI codes: a bad request, an unsupported file system, a wrong secret.
    let code = |r: Result<tonic::Response<v1::NodeStageVolumeResponse>, tonic::Status>| {
        let s = r.expect_err("must fail");
        assert!(
            !s.message().contains(SECRET) && !s.message().contains("Wrong-S3cret-1"),
            "{}",
            s.message()
        );
        s.code()
    };
    let bad_iqn = [
        ("targetPortal", "san.example.com"),
        ("iqn", "iqn.bad"),
        ("lun", "4"),
    ];
    assert_eq!(
        code(
            node.node_stage_volume(Request::new(stage(&bad_iqn, SECRET, "")))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            node.node_stage_volume(Request::new(stage(&ctx, SECRET, "ext4")))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            node.node_stage_volume(Request::new(stage(&ctx, "Wrong-S3cret-1", "")))
                .await
        ),
        Code::FailedPrecondition
    );
    node.node_stage_volume(Request::new(stage(&ctx, SECRET, "ntfs")))
        .await
        .expect("stage");
    proxy
        .filesystem()
        .mkdir(r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pv1")
        .await
        .expect("kubelet mkdir");
    node.node_publish_volume(Request::new(v1::NodePublishVolumeRequest {
        volume_id: "pv1".into(),
        staging_target_path: staging(),
        target_path: target(),
        volume_capability: capability("ntfs"),
        ..Default::default()
    }))
    .await
    .expect("publish");
    let stats = node
        .node_get_volume_stats(Request::new(v1::NodeGetVolumeStatsRequest {
            volume_id: "pv1".into(),
            volume_path: target(),
            ..Default::default()
        }))
        .await
        .expect("stats")
        .into_inner();
    let total = stats.usage[0].total;
    assert!(total > 7 * GIB as i64, "{stats:?}");
    assert!(!stats.volume_condition.expect("condition").abnormal);

    sim.with_state_mut(|s| s.set_disk_size(&format!("{IQN}/lun4"), 16 * GIB))
        .expect("grow the LUN");
    let expanded = node
        .node_expand_volume(Request::new(v1::NodeExpandVolumeRequest {
            volume_id: "pv1".into(),
            volume_path: target(),
            capacity_range: Some(v1::CapacityRange {
                required_bytes: 16 * GIB as i64,
                limit_bytes: 0,
            }),
            ..Default::default()
        }))
        .await
        .expect("expand")
        .into_inner();
    assert!(
        expanded.capacity_bytes > total + 7 * GIB as i64,
        "{expanded:?}"
    );

    node.node_unpublish_volume(Request::new(v1::NodeUnpublishVolumeRequest {
        volume_id: "pv1".into(),
        target_path: target(),
    }))
    .await
    .expect("unpublish");
    node.node_unstage_volume(Request::new(v1::NodeUnstageVolumeRequest {
        volume_id: "pv1".into(),
        staging_target_path: staging(),
    }))
    .await
    .expect("unstage");
    let report = sim.invariants();
    assert!(report.ok(), "{report:?}");
    serve.shutdown().await.expect("shutdown");
}
