//! Secret hygiene of the whole e2e flow: SMB and iSCSI (one-way CHAP) volumes mounted and torn down, an inline
//! ephemeral volume, and the failure paths (wrong SMB password, wrong CHAP secret, a second principal on the same
//! server — Windows error 1219 —, a credential misplaced in a volume attribute and in mount options; a democratic-csi
//! SMB volume whose account is in the PV's mount options, as democratic-csi reads it, with the right password and a
//! wrong one), with the driver at `--log-level trace`. Every driver log line (stdout and stderr, across restarts), the simulator's
//! output, every gRPC status message kubelet received and the simulator's audit log are scanned for every secret
//! value used: zero hits. A positive control proves the scan finds what it looks for (non-secret values such as the
//! CHAP user name and the server name are found in the same texts).
#![cfg(unix)]

use wincsi_e2e::fixtures::{
    self, CHAP_SECRET, CHAP_USER, ISCSI_IQN, SMB_GUEST_SHARE, SMB_PASSWORD, SMB_SERVER, SMB_SHARE,
};
use wincsi_e2e::{Pod, TestNode, Volume, binaries};

const WRONG_SMB_PASSWORD: &str = "Wr0ng-e2e-Sm8-pw";
const OTHER_USER_PASSWORD: &str = "B0b-e2e-0ther-pw";
const WRONG_CHAP_SECRET: &str = "Wr0ng-chap-5ec1";
const MISPLACED_PASSWORD: &str = "M1splaced-attr-pw";
const MISPLACED_OPTION: &str = "M1splaced-opt-pw";
const WRONG_OPTION_PASSWORD: &str = "Wr0ng-m0unt-0pt-pw";

const SECRETS: [&str; 8] = [
    SMB_PASSWORD,
    CHAP_SECRET,
    WRONG_SMB_PASSWORD,
    OTHER_USER_PASSWORD,
    WRONG_CHAP_SECRET,
    MISPLACED_PASSWORD,
    MISPLACED_OPTION,
    WRONG_OPTION_PASSWORD,
];

fn hits(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_value_in_any_log_status_message_or_audit_entry() {
    let mut node = TestNode::start(&binaries!(), &fixtures::scenario())
        .await
        .expect("node starts");
    assert_eq!(
        node.driver_options().log_level,
        "trace",
        "the most verbose level"
    );
    let pod = Pod::new("team-a", "app-0");

    // ---- happy paths ----
    {
        let (k, host) = (node.kubelet(), node.host());
        let smb = fixtures::smb_volume("pv-smb", "team-a", "data", Some("${pvc.metadata.name}"));
        let lun = fixtures::iscsi_volume("pv-lun0", "team-a", "db", 0);
        let smb_t = k.mount(host, &pod, &smb).await.expect("smb mount");
        let lun_t = k.mount(host, &pod, &lun).await.expect("iscsi mount");
        host.write_file(&format!(r"{smb_t}\a.txt"), "a")
            .await
            .expect("write");
        host.write_file(&format!(r"{lun_t}\b.txt"), "b")
            .await
            .expect("write");

        // ---- failure paths (each one attempt, as kubelet's first try) ----
        // 1219: another principal on a server that already has a mapping.
        let bob = Volume::persistent(
            "pv-bob",
            &format!("{SMB_SERVER}#{SMB_SHARE}#bob"),
            "team-a",
            "bob",
        )
        .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_SHARE}"))
        .stage_secret("username", "bob")
        .stage_secret("password", OTHER_USER_PASSWORD)
        .stage_secret("domain", "E2E");
        k.stage_once(host, &bob)
            .await
            .expect_err("second principal refused");

        k.unmount(host, &pod, &smb).await.expect("smb unmount");
        k.unmount(host, &pod, &lun).await.expect("iscsi unmount");
        // Inline ephemeral (guest share: no other principal may be mapped on the server meanwhile).
        let inline = Volume::inline(&pod, "scratch")
            .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_GUEST_SHARE}"));
        if host
            .csi_proxy_status()
            .await
            .expect("status")
            .version
            .is_powershell()
        {
            // csi-proxy ≤ v1.2.1 cannot map without credentials: the refusal's text is scanned too.
            k.mount(host, &pod, &inline)
                .await
                .expect_err("no credentials on a PowerShell-era csi-proxy");
            k.tear_down(host, &pod, &inline)
                .await
                .expect("inline tear-down");
        } else {
            k.mount(host, &pod, &inline).await.expect("inline mount");
            k.unmount(host, &pod, &inline)
                .await
                .expect("inline unmount");
        }

        // democratic-csi's SMB volume with its account in the PV's mountOptions (its example PV's form): the
        // password travels as a mount flag, and must be redacted exactly as a Secret value.
        let dcsi = |name: &str, password: &str| {
            let mut v = Volume::persistent(name, &format!("{name}-handle"), "team-a", name)
                .attr("node_attach_driver", "smb")
                .attr("server", SMB_SERVER)
                .attr("share", SMB_SHARE)
                .attr("provisioner_driver", "node-manual");
            v.fs_type = "cifs".to_owned();
            v.mount_flags = vec![
                format!("username={}", fixtures::SMB_USER),
                format!("password={password},vers=3.0"),
                format!("domain={}", fixtures::SMB_DOMAIN),
            ];
            v
        };
        let opts_ok = dcsi("pv-dcsi-opts", SMB_PASSWORD);
        let t = k
            .mount(host, &pod, &opts_ok)
            .await
            .expect("democratic-csi account in mountOptions");
        host.write_file(&format!(r"{t}\c.txt"), "c")
            .await
            .expect("write");
        k.unmount(host, &pod, &opts_ok).await.expect("unmount");
        let opts_wrong = dcsi("pv-dcsi-opts-wrong", WRONG_OPTION_PASSWORD);
        k.stage_once(host, &opts_wrong)
            .await
            .expect_err("wrong password in mountOptions");
        k.unmount_device(host, &opts_wrong)
            .await
            .expect("unstage after a failed stage");

        // Wrong SMB password (no mapping on the server now: the host answers logon failure).
        let wrong = Volume::persistent(
            "pv-wrong",
            &format!("{SMB_SERVER}#{SMB_SHARE}#w"),
            "team-a",
            "w",
        )
        .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_SHARE}"))
        .stage_secret("username", fixtures::SMB_USER)
        .stage_secret("password", WRONG_SMB_PASSWORD)
        .stage_secret("domain", fixtures::SMB_DOMAIN);
        k.stage_once(host, &wrong)
            .await
            .expect_err("wrong password");
        k.unmount_device(host, &wrong)
            .await
            .expect("unstage after a failed stage");

        // Wrong CHAP secret.
        let bad_chap = Volume::persistent("pv-chap", &format!("{ISCSI_IQN}#lun-1"), "team-a", "c")
            .attr("targetPortal", &format!("{}:3260", fixtures::ISCSI_PORTAL))
            .attr("iqn", ISCSI_IQN)
            .attr("lun", "1")
            .attr("sessionCHAPAuth", "true")
            .stage_secret("node.session.auth.username", CHAP_USER)
            .stage_secret("node.session.auth.password", WRONG_CHAP_SECRET)
            // A mode iSCSI serves, so the stage reaches the login the wrong secret fails.
            .mode(csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter);
        k.stage_once(host, &bad_chap)
            .await
            .expect_err("wrong CHAP secret");
        k.unmount_device(host, &bad_chap)
            .await
            .expect("unstage after a failed stage");

        // Credentials where they do not belong: refused without echoing them.
        let attr = fixtures::smb_volume("pv-attr", "team-a", "attr", None)
            .attr("password", MISPLACED_PASSWORD);
        k.stage_once(host, &attr)
            .await
            .expect_err("credential in a volume attribute");
        let opts = fixtures::smb_volume("pv-opts", "team-a", "opts", None).attr(
            "mountOptions",
            &format!("vers=3,password={MISPLACED_OPTION}"),
        );
        k.stage_once(host, &opts)
            .await
            .expect_err("credential in mount options");
    }
    // A crash and restart at trace level too (startup reconciliation logs).
    node.restart_driver().await.expect("restart");

    node.check_clean().await.expect("nothing left on the host");

    // ---- the scan ----
    let driver_logs = node.driver_logs();
    let sim_output = node.sim().log().text();
    let statuses: String = node
        .kubelet()
        .calls()
        .iter()
        .filter_map(|c| {
            c.error
                .as_ref()
                .map(|(code, msg)| format!("{code:?}: {msg}\n"))
        })
        .collect();
    let entries = node.host().audit(0).await.expect("audit");
    // One entry per line, so the report counts entries.
    let audit = entries
        .iter()
        .map(|e| serde_json::to_string(e).expect("audit json"))
        .collect::<Vec<_>>()
        .join("\n");
    let sources = [
        ("driver logs", &driver_logs),
        ("simulator output", &sim_output),
        ("gRPC status messages", &statuses),
        ("simulator audit log", &audit),
    ];
    let mut report = Vec::new();
    for (name, text) in &sources {
        let found: usize = SECRETS.iter().map(|s| hits(text, s)).sum();
        report.push(format!(
            "{name}: {} lines/entries, {found} secret hits",
            text.lines().count()
        ));
        for s in SECRETS {
            assert_eq!(
                hits(text, s),
                0,
                "a secret value (length {}) appears in the {name}",
                s.len()
            );
        }
    }
    println!("secret hygiene scan: {}", report.join("; "));

    // ---- positive controls: the scan sees what is there ----
    assert!(
        driver_logs.contains("TRACE") || driver_logs.contains("\"trace\""),
        "trace-level lines were captured"
    );
    assert!(
        hits(&driver_logs, SMB_SERVER) > 0,
        "the server name is in the driver logs"
    );
    assert!(
        hits(&driver_logs, CHAP_USER) > 0 || hits(&audit, CHAP_USER) > 0,
        "the CHAP user is visible"
    );
    assert!(
        hits(&audit, SMB_SERVER) > 0 && hits(&audit, ISCSI_IQN) > 0,
        "the audit log names the objects"
    );
    assert!(
        statuses.lines().count() >= 5,
        "every failure path produced a status: {statuses}"
    );
    assert!(
        hits(&statuses, "mountOptions") + hits(&statuses, "mount option") > 0,
        "{statuses}"
    );
    assert!(
        hits(&audit, "redacted") > 0,
        "the audit log shows where secrets were"
    );
    // The same scan would fail on a leak.
    let leaked = format!("{driver_logs}\nstage failed: {SMB_PASSWORD}");
    assert_eq!(hits(&leaked, SMB_PASSWORD), 1);
    node.shutdown().await;
}
