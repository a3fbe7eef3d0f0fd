//! Issue 37, "give up and unstage" (iSCSI): a stage's login that hangs until kubelet gives up, then lands after
//! kubelet's NodeUnstage. The unstage answers UNAVAILABLE while the login may still run and logs the late session out
//! once it ended. Every csi-proxy release and the backend `WINCSI_TEST_HOST_BACKEND` names.

use super::*;

/// kubelet's NodeStageVolume of `req`, given up while its login is held; real time from then on (natively the held
/// provider call holds a blocking thread, and with it tokio's paused clock).
async fn given_up(env: &Env, req: &StageRequest, v: &CsiProxyVersion) {
    tokio::select! {
        r = env.mgr.stage(req, d()) => panic!("{v}: finished despite the held login: {r:?}"),
        () = env.sim.wait_hung(1) => {}
    }
    tokio::time::resume();
}

#[tokio::test(start_paused = true)]
async fn a_login_that_lands_after_kubelet_gave_up_is_waited_for_and_logged_out_by_the_unstage() {
    for v in CsiProxyVersion::ALL {
        let env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        let login = env.per_backend("ConnectTarget", "MSFT_iSCSITarget.Connect");
        env.sim.hang_nth(login, 1).expect("hang");
        let req = stage_req("v1", 0, &[], &[]);
        // kubelet gave up (the RPC is gone) and the pod was deleted: NodeUnstage while the login may still land.
        given_up(&env, &req, &v).await;
        let r = env
            .mgr
            .unstage(
                &unstage_req("v1"),
                Deadline::after(Duration::from_millis(300)),
            )
            .await;
        assert!(
            matches!(&r, Err(Error::Unavailable(m)) if m.contains("iSCSI login") && m.contains("has not finished")),
            "{v}: the unstage did not wait for the login: {r:?}"
        );
        assert!(
            env.mgr.store().volume("v1").expect("read").is_some(),
            "{v}: the record went while the login may land"
        );
        // The login lands; kubelet's retried unstage logs the session out.
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        tokio::time::pause();
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: the retried unstage: {e}"));
        env.assert_clean();
        // No volume stranded: a new pod with the same inputs.
        env.mgr
            .stage(&req, d())
            .await
            .unwrap_or_else(|e| panic!("{v}: a later stage: {e}"));
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

/// A login whose work landed while its answer does not come (its csi-proxy connection gone silent; natively a provider
/// call whose return is late): the login's task may wait up to the outlive bound, but kubelet's NodeUnstage sees the
/// target's disks on the host and goes on at once (logs the session out) instead of answering UNAVAILABLE at every
/// deadline until the task ends.
#[tokio::test(start_paused = true)]
async fn a_login_that_landed_while_its_answer_is_late_does_not_hold_up_the_unstage() {
    for v in CsiProxyVersion::ALL {
        let env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        let login = env.per_backend("ConnectTarget", "MSFT_iSCSITarget.Connect");
        env.sim.hang_answer_nth(login, 1).expect("hang");
        let req = stage_req("v1", 0, &[], &[]);
        given_up(&env, &req, &v).await;
        env.mgr
            .unstage(&unstage_req("v1"), Deadline::after(Duration::from_secs(10)))
            .await
            .unwrap_or_else(|e| {
                panic!("{v}: the unstage waited for a login whose work is done: {e}")
            });
        // The late answer changes nothing on the host.
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        tokio::time::pause();
        env.assert_clean();
        env.mgr
            .stage(&req, d())
            .await
            .unwrap_or_else(|e| panic!("{v}: a later stage: {e}"));
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}
