//! Issue 37, "give up and unstage", for a multipath volume (native only: csi-proxy logs in once, `multipath.rs`): the
//! login through the second portal hangs until kubelet gives up, kubelet's NodeUnstage follows, then the login lands.
//! The unstage answers UNAVAILABLE while that login may still run — in the process that issued it, and in a restarted
//! driver, whose look asks for a session through every portal (the MPIO disk already shows through the first) — and
//! once it landed logs every session out: no session, no record left.

use super::*;

/// Native, whatever `WINCSI_TEST_HOST_BACKEND` says: [`env`]'s two portals on a node whose MPIO claims iSCSI disks.
fn native_env() -> Env {
    Env::with_on(sim::wmi::TestBackend::Native, |sc| {
        sc["host"] = json!({"mpio": CLAIMED});
        sc["iscsi"]["portals"]
            .as_array_mut()
            .expect("portals")
            .push(json!({"address": "10.0.0.6", "targets": [{"iqn": IQN}]}));
    })
}

/// Lets the hung login go when dropped: a test that fails while it hangs ends instead of waiting for ever for the
/// provider call's blocking thread (the runtime waits for it at shutdown).
struct ReleaseOnDrop(sim::SimHost);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release_hangs();
    }
}

/// A first stage of `v1` over both portals whose login through the second hangs; kubelet gives up (the RPC's future
/// is dropped) while it runs.
async fn stage_hung_at_the_second_login(env: &Env) {
    env.sim
        .hang_nth("MSFT_iSCSITarget.Connect", 2)
        .expect("hang");
    let req = two_portals("v1", 0);
    tokio::select! {
        r = env.mgr.stage(&req, d()) => panic!("finished despite the hung login: {r:?}"),
        () = env.sim.wait_hung(1) => {}
    }
    assert_eq!(session_portals(env), ["10.0.0.5"], "the first path is up");
}

/// The late login lands; kubelet's retried unstage logs out every session; a new pod's stage with the same inputs
/// then succeeds (nothing stranded).
async fn land_then_unstage_and_restage(env: &Env, when: &str) {
    env.sim.release_hangs();
    // The released call does its work on its blocking thread after this; the paused clock stands still meanwhile
    // (tokio does not advance it while a blocking task runs), and the unstage waits for what the login makes.
    env.sim.wait_unhung().await;
    tokio::time::pause();
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: the retried unstage: {e}"));
    // The late login had landed: the logout found a session through each portal.
    assert_eq!(
        env.sim.call_counts().get("MSFT_iSCSITarget.Disconnect"),
        Some(&2),
        "{when}: {:?}",
        env.sim.call_counts()
    );
    assert!(
        session_portals(env).is_empty(),
        "{when}: a session left: {:?}",
        session_portals(env)
    );
    env.assert_clean();
    env.mgr
        .stage(&two_portals("v1", 0), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: a later stage: {e}"));
    assert_eq!(session_portals(env), ["10.0.0.5", "10.0.0.6"], "{when}");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

fn assert_waits(r: &Result<(), Error>, when: &str) {
    assert!(
        matches!(r, Err(Error::Unavailable(m)) if m.contains("iSCSI login") && m.contains("has not finished")),
        "{when}: the unstage did not wait for the second portal's login: {r:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_portals_login_that_lands_after_kubelet_gave_up_is_waited_for_and_logged_out() {
    let env = native_env();
    let _release = ReleaseOnDrop(env.sim.clone());
    stage_hung_at_the_second_login(&env).await;
    // kubelet's NodeUnstage while the login may land. (Real time: the hung provider call holds a blocking thread, and
    // with it tokio's paused clock.)
    tokio::time::resume();
    let r = env
        .mgr
        .unstage(
            &unstage_req("v1"),
            Deadline::after(Duration::from_millis(300)),
        )
        .await;
    assert_waits(&r, "same process");
    let rec = env.record("v1");
    assert!(rec.creating.is_some(), "the login stays announced");
    assert_eq!(
        rec.session_portals,
        vec![portal(), Portal::parse("10.0.0.6", "test").expect("portal")]
    );
    land_then_unstage_and_restage(&env, "same process").await;
}

/// The driver restarts after kubelet gave up (a rollout): the new process did not issue the login, so only the host
/// tells. The target's disks show through the first session at once; a session through the second portal shows only
/// once the late login landed.
#[tokio::test(start_paused = true)]
async fn a_restarted_driver_waits_for_a_session_through_every_portal_before_it_logs_out() {
    let mut env = native_env();
    let _release = ReleaseOnDrop(env.sim.clone());
    stage_hung_at_the_second_login(&env).await;
    // The MPIO disk has arrived through the first session (paused time: its arrival delay passes), so the target's
    // disks show, which is what settles a single login: they must not settle this one.
    tokio::time::advance(Duration::from_secs(2)).await;
    let disks = env.script(|s| {
        s.tick(tokio::time::Instant::now()).expect("tick");
        s.get_target_disks("10.0.0.5", 3260, IQN)
    });
    assert!(
        disks.is_ok_and(|d| !d.is_empty()),
        "the first path shows the disk"
    );
    env.restart();
    tokio::time::resume();
    // Generous for a loaded machine (the look itself answers at once); nothing here depends on how long it takes.
    let r = env
        .mgr
        .unstage(&unstage_req("v1"), Deadline::after(Duration::from_secs(2)))
        .await;
    assert_waits(&r, "restarted");
    assert!(env.mgr.store().volume("v1").expect("read").is_some());
    land_then_unstage_and_restage(&env, "restarted").await;
}
