//! What the driver reports when csi-proxy's answer never arrives whole: csi-proxy's gRPC server resets a call whose
//! error text exceeds the header-list limit the driver's client announces (16 KiB), and keeps the connection (the
//! reference's F6, modelled by the simulated host per `sim/src/serve/grpc_go.rs`). The RPC must fail with a CSI code
//! that says what happened (INTERNAL, naming the reset and where the text is), not UNAVAILABLE ("csi-proxy did not
//! answer"), and kubelet's retry must converge over the same connection.

#![cfg(unix)]

mod common;

use common::{Env, d, staging, unstage_req};

use proxy_client::ApiGroup;
use sim::Scenario;
use wincsi::lifecycle::{AccessType, Capability, StageRequest};
use wincsi::smb::Secrets;

const PW: &str = "Bob-R3set-S3cret!";

fn stage_req() -> StageRequest {
    StageRequest {
        volume_id: "v1".into(),
        staging_target_path: staging("v1"),
        capability: Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 5,
        }),
        volume_context: [("source".to_owned(), r"\\fs1\data".to_owned())].into(),
        secrets: Secrets::new([("username", "bob"), ("password", PW), ("domain", "CORP")]),
    }
}

#[tokio::test]
async fn an_error_text_over_the_header_limit_is_internal_and_the_retry_converges() {
    let scenario = Scenario::from_json(
        &serde_json::json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
            "shares": [{"name": "data"}]}]}})
        .to_string(),
    )
    .expect("scenario");
    let mut env = Env::with_scenario(&scenario).await;
    // A PowerShell-era text with a long output (v1.1.x errors embed the command and its output).
    let text = format!(
        "NewSmbGlobalMapping failed. output: \"{}\", err: exit status 1",
        "New-SmbGlobalMapping : The network path was not found. ".repeat(300)
    );
    assert!(text.len() > 16_384);
    env.sim
        .fail_nth("NewSmbGlobalMapping", 1, &text)
        .expect("fault");
    let err = env
        .stage(&stage_req())
        .await
        .expect_err("the call was reset");
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    let message = status.message();
    assert!(
        message.contains("NewSmbGlobalMapping")
            && message.contains("reset the call without an answer")
            && message.contains("csi-proxy's log"),
        "{message}"
    );
    assert!(message.len() < 1_024, "{message}");
    // kubelet's retry converges, over the same connection.
    env.stage(&stage_req()).await.expect("retry");
    assert_eq!(env.sim.connections_accepted(ApiGroup::Smb), 1);
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    let report = env.sim.invariants();
    assert!(report.ok(), "{report:?}");
    env.shutdown().await;
}
