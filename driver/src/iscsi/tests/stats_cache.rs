//! The NodeGetVolumeStats cache (`--vol-stats-cache-expire-in-minutes`, `lifecycle/stats_cache.rs`) on iSCSI
//! volumes, whose answers cost two host calls (two PowerShell processes on csi-proxy v1.1.3 and v1.2.1): hits,
//! expiry, per-volume invalidation by expansion and unstage, never a stale answer after either.

use super::*;
use crate::lifecycle::ExpandRequest;

const EXPIRY: Duration = Duration::from_secs(5 * 60);

fn stats_req(id: &str, path: String) -> StatsRequest {
    StatsRequest {
        volume_id: id.into(),
        volume_path: path,
    }
}

/// Two staged LUNs of [`scenario`], the driver caching stats answers.
async fn cached_env() -> Env {
    let mut env = Env::new();
    env.set_stats_cache(EXPIRY);
    for (id, lun) in [("v1", 0), ("v2", 1)] {
        env.mgr
            .stage(&stage_req(id, lun, &[], &[]), d())
            .await
            .expect("stage");
    }
    env.ops();
    env
}

async fn stats(env: &Env, id: &str) -> crate::lifecycle::VolumeStats {
    env.mgr
        .stats(&stats_req(id, staging(id)), d())
        .await
        .expect("stats")
}

#[tokio::test(start_paused = true)]
async fn a_repeated_poll_is_answered_without_host_calls_until_it_expires() {
    let env = cached_env().await;
    let first = stats(&env, "v1").await;
    assert!(!first.abnormal, "{first:?}");
    assert_eq!(env.ops(), [GetVolumeIDFromTargetPath, GetVolumeStats]);
    assert_eq!(stats(&env, "v1").await, first);
    assert_eq!(env.ops(), [], "a hit asks the host nothing");
    // Another path of the volume has its own answer; an unknown path is NOT_FOUND, never a cached answer.
    let err = env
        .mgr
        .stats(&stats_req("v1", target("pod-x")), d())
        .await
        .expect_err("not a path of v1");
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    tokio::time::advance(EXPIRY - Duration::from_secs(1)).await;
    assert_eq!(stats(&env, "v1").await, first);
    assert_eq!(env.ops(), []);
    tokio::time::advance(Duration::from_secs(1)).await;
    stats(&env, "v1").await;
    assert_eq!(
        env.ops(),
        [GetVolumeIDFromTargetPath, GetVolumeStats],
        "expired"
    );
}

#[tokio::test(start_paused = true)]
async fn an_expansion_drops_its_volumes_answers_only() {
    let env = cached_env().await;
    let before = stats(&env, "v1").await;
    stats(&env, "v2").await;
    env.ops();
    env.script(|s| s.set_disk_size("lun0", 20 * GIB))
        .expect("grow");
    let req = ExpandRequest {
        volume_id: "v1".into(),
        volume_path: staging("v1"),
        required_bytes: (20 * GIB) as i64,
    };
    let capacity = env.mgr.expand(&req, d()).await.expect("expand");
    env.ops();
    let after = stats(&env, "v1").await;
    assert_eq!(
        after.usage.total, capacity,
        "the grown volume, not the cached size"
    );
    assert!(after.usage.total > before.usage.total);
    assert_eq!(env.ops(), [GetVolumeIDFromTargetPath, GetVolumeStats]);
    stats(&env, "v2").await;
    assert_eq!(env.ops(), [], "v2's answer is still cached");
}

#[tokio::test(start_paused = true)]
async fn after_an_unstage_no_cached_answer_is_served_not_even_to_a_restage() {
    let env = cached_env().await;
    let healthy = stats(&env, "v1").await;
    assert!(!healthy.abnormal);
    stats(&env, "v2").await;
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    let err = env
        .mgr
        .stats(&stats_req("v1", staging("v1")), d())
        .await
        .expect_err("unstaged");
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    // Staged again at the same path, then its disk goes offline: the answer is the host's, not the healthy one
    // cached before the unstage (still within its expiry).
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("restage");
    let n = env.disk("lun0").number.expect("present");
    env.script(|s| s.set_disk_state(n, false)).expect("offline");
    env.ops();
    let now = stats(&env, "v1").await;
    assert!(now.abnormal && now.message.contains("offline"), "{now:?}");
    assert_eq!(env.ops()[0], GetVolumeIDFromTargetPath);
    stats(&env, "v2").await;
    assert_eq!(env.ops(), [], "v2's answer is still cached");
}

#[tokio::test(start_paused = true)]
async fn publish_and_unpublish_drop_the_volumes_answers() {
    let env = cached_env().await;
    stats(&env, "v1").await;
    let publish = PublishRequest {
        volume_id: "v1".into(),
        staging_target_path: staging("v1"),
        target_path: target("pod1"),
        capability: cap(""),
        ..Default::default()
    };
    env.publish(&publish, d()).await.expect("publish");
    env.ops();
    stats(&env, "v1").await;
    assert_eq!(env.ops(), [GetVolumeIDFromTargetPath, GetVolumeStats]);
    env.mgr
        .unpublish(
            &UnpublishRequest {
                volume_id: "v1".into(),
                target_path: target("pod1"),
            },
            d(),
        )
        .await
        .expect("unpublish");
    env.ops();
    stats(&env, "v1").await;
    assert_eq!(env.ops(), [GetVolumeIDFromTargetPath, GetVolumeStats]);
}
