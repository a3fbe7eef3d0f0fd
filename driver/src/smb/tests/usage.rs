//! An SMB volume's usage (issue 40 item 4): the native backend measures the share through the volume's path
//! (`GetDiskFreeSpaceExW`, quota-aware), csiProxy mode answers zeros and says why.

use super::*;
use crate::lifecycle::StatsRequest;

const MIB: u64 = 1 << 20;
const CAPACITY: u64 = 10 << 30;
const QUOTA: u64 = 4 * MIB;

/// Server `srv` with share `share` on a 10 GiB file system: a directory quota of 4 MiB on `team-a` (FSRM), 1 MiB of
/// data in it, 2 MiB beside it; account `CORP\bob`.
fn env() -> Env {
    let mib = |n: usize| "x".repeat(n * MIB as usize);
    Env::on(
        sim::wmi::TestBackend::from_env_or_panic(),
        &serde_json::json!({
            "smb": {"servers": [
                {"name": "srv",
                 "accounts": [{"user": "bob", "password": "pw-1", "domain": "CORP"}],
                 "shares": [{"name": "share", "capacity": CAPACITY, "quotas": {"Team-A": QUOTA},
                             "files": {"team-a/data.bin": mib(1), "other/big.bin": mib(2)}}]}
            ]}
        }),
    )
}

fn stats(id: &str, pod: &str) -> StatsRequest {
    StatsRequest {
        volume_id: id.into(),
        volume_path: target(pod),
    }
}

async fn staged(env: &Env, id: &str, sub_dir: Option<&str>, pod: &str) {
    env.stage(&stage_req(id, SHARE, sub_dir, "bob"), d())
        .await
        .expect("stage");
    env.publish(&publish_req(id, pod), d())
        .await
        .expect("publish");
}

fn usage(total: u64, used: u64) -> Usage {
    let i = |b: u64| i64::try_from(b).expect("fits");
    Usage {
        total: i(total),
        available: i(total - used),
        used: i(used),
    }
}

#[tokio::test]
async fn a_share_reports_its_real_usage_on_the_native_backend_and_zeros_on_csi_proxy() {
    let env = env();
    staged(&env, "whole", None, "p1").await;
    staged(&env, "team", Some("team-a"), "p2").await;
    env.clear_calls();

    let whole = env
        .mgr
        .stats(&stats("whole", "p1"), d())
        .await
        .expect("stats");
    assert!(!whole.abnormal, "{whole:?}");
    let team = env
        .mgr
        .stats(&stats("team", "p2"), d())
        .await
        .expect("stats");
    assert!(!team.abnormal, "{team:?}");
    assert_eq!(
        env.take_ops(),
        env.per_backend(
            vec![PathExists, IsSymlink, PathExists, IsSymlink],
            vec![
                PathExists, IsSymlink, PathSpace, PathExists, IsSymlink, PathSpace
            ]
        )
    );
    // Without a quota the share's file system (everything on it counts); under the subDir's quota, the quota.
    assert_eq!(
        (whole.usage, team.usage),
        env.per_backend(
            (Usage::default(), Usage::default()),
            (usage(CAPACITY, 3 * MIB), usage(QUOTA, MIB))
        )
    );
    for s in [&whole, &team] {
        assert_eq!(
            s.message.contains("mode hostProcess does"),
            env.per_backend(true, false),
            "{s:?}"
        );
    }

    // What pods write shows at the next poll.
    env.script(|s| s.write_share_file("srv", "share", "team-a/more.bin", &[7; MIB as usize]))
        .expect("write");
    let team = env
        .mgr
        .stats(&stats("team", "p2"), d())
        .await
        .expect("stats");
    assert_eq!(
        team.usage,
        env.per_backend(Usage::default(), usage(QUOTA, 2 * MIB))
    );

    // A share that no longer answers is abnormal and not measured (no PathSpace call).
    env.sim.reboot().expect("reboot");
    env.clear_calls();
    let down = env
        .mgr
        .stats(&stats("team", "p2"), d())
        .await
        .expect("stats");
    assert!(down.abnormal, "{down:?}");
    assert_eq!(down.usage, Usage::default());
    assert_eq!(env.take_ops(), vec![PathExists, IsSymlink]);
}

#[tokio::test]
async fn a_measurement_windows_refuses_answers_zeros_with_the_reason_and_one_cut_short_fails() {
    let env = env();
    if env.per_backend(true, false) {
        return; // csiProxy mode never measures (the test above).
    }
    staged(&env, "team", Some("team-a"), "p1").await;
    // Windows' own answers, at the Windows view (the native backend's classification runs).
    env.sim
        .fail_nth("GetDiskFreeSpaceExW", 1, "win32:5")
        .expect("fault");
    let refused = env
        .mgr
        .stats(&stats("team", "p1"), d())
        .await
        .expect("stats");
    assert!(!refused.abnormal, "{refused:?}");
    assert_eq!(refused.usage, Usage::default());
    assert!(
        refused.message.contains("usage not measured") && refused.message.contains('5'),
        "{refused:?}"
    );

    // Cut short (RPC server unavailable): an error, never zeros a cache would keep; the next poll measures.
    env.sim
        .fail_nth("GetDiskFreeSpaceExW", 1, "hresult:0x800706BA")
        .expect("fault");
    let err = env.mgr.stats(&stats("team", "p1"), d()).await;
    assert!(matches!(err, Err(Error::Unavailable(_))), "{err:?}");
    let ok = env
        .mgr
        .stats(&stats("team", "p1"), d())
        .await
        .expect("stats");
    assert_eq!(ok.usage, usage(QUOTA, MIB));
}
