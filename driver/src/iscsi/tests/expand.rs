//! Issue 41 item 2: expansion while the Optimize Drives service (`defragsvc`) is disabled, which makes
//! `MSFT_Partition.GetSupportedSize` fail (kubernetes-sigs/aws-ebs-csi-driver#2877). The native backend computes how
//! far the partition may grow from the disk's layout and expands anyway; csi-proxy (every release asks
//! `Get-PartitionSupportedSize` for a resize to the maximum) answers UNAVAILABLE naming the service, and grows once
//! the service is back.

use sim::{ServiceStatus, StartType};

use super::*;
use crate::lifecycle::ExpandRequest;

fn req(bytes: u64) -> ExpandRequest {
    ExpandRequest {
        volume_id: "v1".into(),
        volume_path: staging("v1"),
        required_bytes: bytes as i64,
    }
}

/// A staged, 10 GiB LUN grown to 20 GiB on the array, on a node whose `defragsvc` is disabled.
async fn grown_with_defrag_disabled() -> Env {
    let env = Env::new();
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("stage");
    env.script(|s| {
        s.set_service("defragsvc", StartType::Disabled, ServiceStatus::Stopped);
        s.set_disk_size("lun0", 20 * GIB)
    })
    .expect("grow");
    env.ops();
    env
}

#[tokio::test(start_paused = true)]
async fn expansion_with_defragsvc_disabled_grows_natively_and_names_the_service_through_csi_proxy()
{
    let env = grown_with_defrag_disabled().await;
    let vid = env.record("v1").volume.expect("volume");
    let grown = (20 * GIB - 18 * (1 << 20)) as i64;
    match env.backend {
        sim::wmi::TestBackend::Native => {
            let cap = env.mgr.expand(&req(20 * GIB), d()).await.expect("expand");
            assert_eq!(
                cap, grown,
                "grown to Windows' SizeMax, computed from the layout"
            );
            let calls = env.calls_text();
            assert!(
                !calls.contains("GetSupportedSize"),
                "the native backend asked GetSupportedSize, which fails without defragsvc:\n{calls}"
            );
        }
        sim::wmi::TestBackend::CsiProxy => {
            let err = env
                .mgr
                .expand(&req(20 * GIB), d())
                .await
                .expect_err("GetSupportedSize fails");
            assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
            let text = err.to_string();
            for want in ["defragsvc", "Start-Service defragsvc", "mode: hostProcess"] {
                assert!(text.contains(want), "{want:?} not in: {text}");
            }
            // Nothing was resized, and the announcement was settled: the retry after the operator started the
            // service grows the volume at once.
            assert_eq!(
                env.state(|s| s.partition_sizes(&vid)).expect("sizes").0,
                10 * GIB - 18 * (1 << 20) - 48_640
            );
            env.script(|s| s.set_service("defragsvc", StartType::Manual, ServiceStatus::Stopped));
            let cap = env.mgr.expand(&req(20 * GIB), d()).await.expect("expand");
            assert_eq!(cap, grown);
        }
    }
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}
