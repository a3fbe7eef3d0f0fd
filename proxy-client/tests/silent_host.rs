//! A csi-proxy that accepts a connection and never answers on it (as a restarted csi-proxy did under Wine: the
//! driver's connections landed on pipe instances nobody served) must not wedge the API group: after a call's deadline
//! with nothing back, the next call dials a fresh connection. Over real Unix sockets, against a listener this test
//! controls: its first connection is read and discarded (never a byte back, not even HTTP/2 SETTINGS), the ones
//! after it are served by the fake csi-proxy.

#![cfg(unix)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proxy_client::{ApiGroup, ErrorKind, ProxyClient, Transport};
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The host: counts accepted connections; the first `silent` ones are black holes.
struct SilentHost {
    accepted: Arc<AtomicUsize>,
    /// One message per black-holed connection once its client closed it.
    closed: mpsc::UnboundedReceiver<usize>,
}

impl SilentHost {
    fn start(fake: &FakeProxy, dir: &Path, group: ApiGroup, silent: usize) -> SilentHost {
        let listener =
            UnixListener::bind(proxy_client::socket_path(dir, group)).expect("bind socket");
        let (served_tx, served_rx) = mpsc::unbounded_channel::<std::io::Result<_>>();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let router = fake.router(group);
        tokio::spawn(async move {
            let incoming = futures::stream::unfold(served_rx, |mut rx| async move {
                rx.recv().await.map(|conn| (conn, rx))
            });
            router.serve_with_incoming(incoming).await.expect("serve");
        });
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.expect("accept");
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= silent {
                    let closed_tx = closed_tx.clone();
                    tokio::spawn(async move {
                        // Read and discard until the client closes the connection.
                        let mut buf = [0u8; 4096];
                        while conn.read(&mut buf).await.is_ok_and(|read| read > 0) {}
                        let _ = closed_tx.send(n);
                    });
                } else if served_tx.send(Ok(conn)).is_err() {
                    return;
                }
            }
        });
        SilentHost { accepted, closed }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_millis(200)
}

/// A bound for calls the host answers at once (not a synchronisation: they complete in milliseconds).
fn generous() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn after_a_deadline_with_no_answer_the_next_call_goes_over_a_new_connection() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let mut host = SilentHost::start(&fake, dir.path(), ApiGroup::System, 1);
    let abandoned = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&abandoned);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path())).on_connection_abandoned(
        move |group| {
            assert_eq!(group, ApiGroup::System);
            count.fetch_add(1, Ordering::SeqCst);
        },
    );

    let err = proxy
        .with_deadline(soon())
        .system()
        .bios_serial()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err:?}");
    assert_eq!(host.accepted(), 1);

    // The next call reaches the host over a second connection and converges.
    let serial = proxy.with_deadline(generous()).system().bios_serial().await;
    assert_eq!(serial.expect("answered on a new connection"), BIOS_SERIAL);
    assert_eq!(host.accepted(), 2);
    assert_eq!(abandoned.load(Ordering::SeqCst), 1);
    // The silent connection is closed once no call uses it any more.
    let closed = tokio::time::timeout(Duration::from_secs(30), host.closed.recv()).await;
    assert_eq!(closed.expect("the abandoned connection is closed"), Some(1));
    // And the new connection is kept: further calls reuse it.
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    assert_eq!(host.accepted(), 2);
}

#[tokio::test]
async fn many_calls_timing_out_together_cost_one_new_connection() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let host = SilentHost::start(&fake, dir.path(), ApiGroup::Disk, 1);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let deadline = soon();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let proxy = proxy.with_deadline(deadline);
            tokio::spawn(async move { proxy.disk().is_online(DISK_B).await })
        })
        .collect();
    for call in calls {
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err:?}");
    }
    assert_eq!(host.accepted(), 1);
    let online = proxy
        .with_deadline(generous())
        .disk()
        .is_online(DISK_B)
        .await;
    assert!(online.expect("answered on a new connection"));
    assert_eq!(
        host.accepted(),
        2,
        "one new connection for sixteen deadlines"
    );
}

#[tokio::test]
async fn a_slow_call_on_a_connection_that_answers_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let host = SilentHost::start(&fake, dir.path(), ApiGroup::System, 0);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    // The slow call is sent first (one poll puts it on the connection) …
    let slow = proxy.with_deadline(soon());
    let slow = slow.system();
    let slow = slow.get_service(HANG_SERVICE);
    tokio::pin!(slow);
    assert!(futures::poll!(&mut slow).is_pending());
    // … another call on the same connection is answered meanwhile …
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    // … so its deadline is the host being slow, not the connection being dead.
    let err = slow.await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err:?}");
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    assert_eq!(host.accepted(), 1, "the answering connection is kept");
}

#[tokio::test]
async fn a_caller_that_drops_its_call_at_its_deadline_counts_as_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let host = SilentHost::start(&fake, dir.path(), ApiGroup::Filesystem, 1);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    // The driver bounds each host call by the RPC's deadline and drops it there (`lifecycle::Calls`); it passes
    // the same deadline down, so the drop counts.
    let deadline = soon();
    let dropped = tokio::time::timeout_at(
        deadline,
        proxy
            .with_deadline(deadline)
            .filesystem()
            .path_exists(POD_PATH),
    )
    .await;
    assert!(
        dropped.is_err() || dropped.is_ok_and(|r| r.is_err()),
        "no answer"
    );
    let exists = proxy
        .with_deadline(generous())
        .filesystem()
        .path_exists(POD_PATH)
        .await;
    assert!(exists.expect("answered on a new connection"));
    assert_eq!(host.accepted(), 2);
}

/// A call made to run to its end (`running_to`: a destructive call the driver must hear the answer of) on a connection
/// that goes silent: at its caller's deadline the connection is judged, so the caller's next attempt goes over a new
/// connection and converges at once; the long call is not cut (not at its caller's deadline, not at the client's
/// timeout) and keeps the old connection until it ends.
#[tokio::test]
async fn a_call_that_outlives_its_caller_does_not_keep_a_silent_connection_for_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let mut host = SilentHost::start(&fake, dir.path(), ApiGroup::System, 1);
    let abandoned = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&abandoned);
    // A short client timeout, so that the test shows the call outliving it too.
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()))
        .with_timeout(Duration::from_millis(300))
        .on_connection_abandoned(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        });
    let caller = soon();
    let long = proxy
        .with_deadline(caller)
        .running_to(Instant::now() + Duration::from_secs(600));
    // Boxed: dropped below to end the call.
    let mut long = Box::pin(async move { long.system().bios_serial().await });
    assert!(futures::poll!(&mut long).is_pending());
    // The caller's deadline and the client's timeout pass (virtual time: no real wait).
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(1)).await;
    tokio::time::resume();
    assert!(
        futures::poll!(&mut long).is_pending(),
        "the long call was cut"
    );

    // The caller's next attempt reaches the host over a second connection and converges.
    let serial = proxy.with_deadline(generous()).system().bios_serial().await;
    assert_eq!(serial.expect("answered on a new connection"), BIOS_SERIAL);
    assert_eq!(host.accepted(), 2);
    assert_eq!(abandoned.load(Ordering::SeqCst), 1);
    assert!(
        futures::poll!(&mut long).is_pending(),
        "the long call was cut"
    );
    assert!(
        host.closed.try_recv().is_err(),
        "the long call's connection was closed under it"
    );
    // The silent connection closes with the last call on it.
    drop(long);
    let closed = tokio::time::timeout(Duration::from_secs(30), host.closed.recv()).await;
    assert_eq!(closed.expect("the abandoned connection is closed"), Some(1));
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    assert_eq!(host.accepted(), 2);
}

/// A slow but live host: a long call on a connection that answers another call meanwhile keeps it; a long call alone
/// on its connection past its caller's deadline costs the group one new connection, and the calls after it keep that
/// one (no redial per call), while both long calls still wait.
#[tokio::test]
async fn long_calls_on_a_live_connection_cost_at_most_one_new_connection() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let host = SilentHost::start(&fake, dir.path(), ApiGroup::System, 0);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let far = || Instant::now() + Duration::from_secs(600);
    let first = proxy.with_deadline(soon()).running_to(far());
    let first = first.system();
    let first = first.get_service(HANG_SERVICE);
    tokio::pin!(first);
    assert!(futures::poll!(&mut first).is_pending());
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(1)).await;
    tokio::time::resume();
    assert!(futures::poll!(&mut first).is_pending());
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    assert_eq!(host.accepted(), 1, "a connection that answered is kept");

    let lone = proxy.with_deadline(soon()).running_to(far());
    let lone = lone.system();
    let lone = lone.get_service(HANG_SERVICE);
    tokio::pin!(lone);
    assert!(futures::poll!(&mut lone).is_pending());
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(1)).await;
    tokio::time::resume();
    for _ in 0..5 {
        assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    }
    assert_eq!(host.accepted(), 2, "one new connection, kept");
    assert!(futures::poll!(&mut first).is_pending());
    assert!(futures::poll!(&mut lone).is_pending());
}
