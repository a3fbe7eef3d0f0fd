//! One connection per API group, and when to leave it for a fresh one.
//!
//! Each group's calls share one HTTP/2 connection (a tonic [`Channel`]), opened lazily. tonic replaces a connection
//! that *breaks* (reset, closed, refused) by itself, and [`Connections::broken`] drops the group's channel after a
//! call failed that way. A connection can also go *silent*: it stays open and accepts requests, and nothing ever comes
//! back. Measured against the real csi-proxy under Wine, a restarted csi-proxy left the driver's new connections on
//! pipe instances nobody served, and the group's calls timed out for as long as anyone watched (ten minutes; it
//! ended only when csi-proxy was restarted again). HTTP/2 keepalive cannot find such a connection: csi-proxy's gRPC
//! server (`grpc.NewServer` without a keepalive enforcement policy, csi-proxy v1.1.3 `pkg/server/server.go:111`,
//! v1.3.0 `:122`) answers pings more frequent than grpc-go's default minimum of five minutes
//! (`defaultKeepalivePolicyMinTime = 5 * time.Minute`, grpc-go `internal/transport/defaults.go:40`) with
//! `GOAWAY ENHANCE_YOUR_CALM` ("too_many_pings").
//!
//! So every call is evidence about its connection. A call that *ends* (an answer, an error status, a reset) proves
//! the connection delivers; [`Conn`] counts those. A call whose deadline passes while **nothing at all** came back on
//! its connection since it was sent is the evidence of a silent connection: the group's channel is dropped, so the
//! next call dials a fresh connection, and calls still in flight on the old one keep it (and their own deadlines)
//! until they end; the old connection closes with the last of them. A host that is merely slow keeps answering
//! *other* calls on the connection, which keeps it (many calls timing out on a connection that still answers do not
//! leave it). A storm of dials is bounded twice: only the call that finds its connection still current replaces it
//! (many calls timing out together on one silent connection cost one dial), and a group replaces a silent connection
//! at most once per [`REDIAL_INTERVAL`].
//!
//! A call dropped by its caller at or after its deadline (the driver bounds every host call by the RPC's deadline)
//! counts like one that timed out here; a call dropped before its deadline (the caller lost interest) proves
//! nothing and is not counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

use crate::ApiGroup;

/// The least time between two replacements of a silent connection of one group.
pub(crate) const REDIAL_INTERVAL: Duration = Duration::from_secs(1);

/// Told the group whose connection was left for a fresh one (see [`crate::ProxyClient::on_connection_abandoned`]).
pub(crate) type AbandonHook = Arc<dyn Fn(ApiGroup) + Send + Sync>;

/// One connection of a group: the channel calls go through, and how many calls ended on it.
pub(crate) struct Conn {
    pub(crate) channel: Channel,
    ended: AtomicU64,
}

#[derive(Default)]
struct Slot {
    /// The connection new calls take (`None`: the next call opens one).
    conn: Option<Arc<Conn>>,
    /// When a silent connection of this group was last left.
    last_abandoned: Option<Instant>,
}

/// The connections of all groups.
pub(crate) struct Connections {
    slots: [Mutex<Slot>; ApiGroup::ALL.len()],
    on_abandoned: Option<AbandonHook>,
}

impl Connections {
    pub(crate) fn new(on_abandoned: Option<AbandonHook>) -> Self {
        Connections {
            slots: Default::default(),
            on_abandoned,
        }
    }

    pub(crate) fn hook(&self) -> Option<AbandonHook> {
        self.on_abandoned.clone()
    }

    fn slot(&self, group: ApiGroup) -> MutexGuard<'_, Slot> {
        self.slots[group.index()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The group's current connection, opened with `open` if it has none. The returned [`Call`] must be told how
    /// the call ended ([`Call::ended`], [`Call::timed_out`]); dropped untold, it counts as a call its caller gave up
    /// on (see the module docs).
    pub(crate) fn call(
        &self,
        group: ApiGroup,
        deadline: Instant,
        open: impl FnOnce() -> Channel,
    ) -> Call<'_> {
        let conn = Arc::clone(self.slot(group).conn.get_or_insert_with(|| {
            Arc::new(Conn {
                channel: open(),
                ended: AtomicU64::new(0),
            })
        }));
        let seen = conn.ended.load(Ordering::SeqCst);
        Call {
            connections: self,
            group,
            conn,
            seen,
            deadline,
            sent: Instant::now(),
            settled: false,
        }
    }

    /// Drops the group's connection if it is still `conn` (a late failure of an old connection leaves a newer one).
    fn forget(&self, group: ApiGroup, conn: &Arc<Conn>) -> bool {
        let mut slot = self.slot(group);
        if slot.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            slot.conn = None;
            return true;
        }
        false
    }

    /// A call's deadline passed on `conn`, which had ended `seen` calls when it was sent.
    fn silent(&self, group: ApiGroup, conn: &Arc<Conn>, seen: u64, waited: Duration) {
        if conn.ended.load(Ordering::SeqCst) != seen {
            // Something came back on this connection meanwhile: a slow host, a live connection.
            return;
        }
        let now = Instant::now();
        {
            let mut slot = self.slot(group);
            if !slot.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
                // Already left (another call's deadline, a broken connection).
                return;
            }
            if slot
                .last_abandoned
                .is_some_and(|t| now.saturating_duration_since(t) < REDIAL_INTERVAL)
            {
                tracing::debug!(%group, "csi-proxy connection silent again; next replacement after the redial interval");
                return;
            }
            slot.conn = None;
            slot.last_abandoned = Some(now);
        }
        tracing::warn!(
            %group,
            waited_ms = waited.as_millis() as u64,
            "csi-proxy did not answer anything on this connection before the call's deadline: new calls of this \
             group go over a new connection (calls in flight on the old one keep their own deadlines)"
        );
        if let Some(hook) = &self.on_abandoned {
            hook(group);
        }
    }
}

/// A call in flight on a group's connection.
pub(crate) struct Call<'a> {
    connections: &'a Connections,
    group: ApiGroup,
    conn: Arc<Conn>,
    seen: u64,
    deadline: Instant,
    sent: Instant,
    settled: bool,
}

impl Call<'_> {
    /// The channel to send the call on.
    pub(crate) fn channel(&self) -> Channel {
        self.conn.channel.clone()
    }

    /// The call ended before its deadline, whatever its outcome: the connection delivered. `broken`: the connection
    /// failed (refused, reset, closed), so the group's next call starts from a fresh channel.
    pub(crate) fn ended(mut self, broken: bool) {
        self.settled = true;
        self.conn.ended.fetch_add(1, Ordering::SeqCst);
        if broken {
            self.connections.forget(self.group, &self.conn);
        }
    }

    /// The call's deadline passed with no answer.
    pub(crate) fn timed_out(mut self) {
        self.settled = true;
        self.connections
            .silent(self.group, &self.conn, self.seen, self.sent.elapsed());
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        // Dropped by the caller while waiting: at or after the deadline it is a deadline with no answer.
        if !self.settled && Instant::now() >= self.deadline {
            self.connections
                .silent(self.group, &self.conn, self.seen, self.sent.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tonic::transport::Endpoint;

    use super::*;

    /// A channel whose connection never comes up: every call on it waits until its deadline.
    fn silent_channel(opened: &Arc<AtomicUsize>) -> Channel {
        opened.fetch_add(1, Ordering::SeqCst);
        Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
            |_: tonic::transport::Uri| {
                std::future::pending::<
                    std::io::Result<hyper_util::rt::TokioIo<tokio::io::DuplexStream>>,
                >()
            },
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_left_once_per_interval_however_many_calls_time_out() {
        let abandoned = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&abandoned);
        let hook: AbandonHook = Arc::new(move |g| {
            assert_eq!(g, ApiGroup::Disk);
            count.fetch_add(1, Ordering::SeqCst);
        });
        let connections = Connections::new(Some(hook));
        let opened = Arc::new(AtomicUsize::new(0));
        let open = || silent_channel(&opened);
        let deadline = || Instant::now() + Duration::from_millis(100);

        // Twenty calls in flight on the first connection time out together: one replacement.
        let calls: Vec<Call<'_>> = (0..20)
            .map(|_| connections.call(ApiGroup::Disk, deadline(), open))
            .collect();
        tokio::time::advance(Duration::from_millis(100)).await;
        for c in calls {
            c.timed_out();
        }
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        // The next call opens the second connection; it is silent too, but within the interval it is kept.
        connections
            .call(ApiGroup::Disk, deadline(), open)
            .timed_out();
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        connections
            .call(ApiGroup::Disk, deadline(), open)
            .timed_out();
        assert_eq!(opened.load(Ordering::SeqCst), 2, "kept within the interval");
        // After the interval the next silent deadline leaves it.
        tokio::time::advance(REDIAL_INTERVAL).await;
        connections
            .call(ApiGroup::Disk, deadline(), open)
            .timed_out();
        assert_eq!(abandoned.load(Ordering::SeqCst), 2);
        let _c = connections.call(ApiGroup::Disk, deadline(), open);
        assert_eq!(opened.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_answers_other_calls_is_kept_and_early_drops_prove_nothing() {
        let connections = Connections::new(None);
        let opened = Arc::new(AtomicUsize::new(0));
        let open = || silent_channel(&opened);
        let deadline = Instant::now() + Duration::from_millis(100);
        let slow = connections.call(ApiGroup::Smb, deadline, open);
        // Another call on the same connection ends meanwhile: the connection delivers.
        connections.call(ApiGroup::Smb, deadline, open).ended(false);
        tokio::time::advance(Duration::from_millis(100)).await;
        slow.timed_out();
        // A caller that gives up before the deadline proves nothing either.
        drop(connections.call(ApiGroup::Smb, Instant::now() + Duration::from_secs(5), open));
        let _c = connections.call(ApiGroup::Smb, deadline, open);
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        // A caller that drops its call at the deadline counts like a timeout.
        let late = connections.call(ApiGroup::Smb, Instant::now(), open);
        drop(late);
        let _c = connections.call(ApiGroup::Smb, deadline, open);
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        // Groups are independent; a broken connection is dropped at once, a stale failure leaves the new one.
        let old = connections.call(ApiGroup::Iscsi, deadline, open);
        connections
            .call(ApiGroup::Iscsi, deadline, open)
            .ended(true);
        let _new = connections.call(ApiGroup::Iscsi, deadline, open);
        assert_eq!(opened.load(Ordering::SeqCst), 4);
        old.ended(true);
        let _same = connections.call(ApiGroup::Iscsi, deadline, open);
        assert_eq!(opened.load(Ordering::SeqCst), 4);
    }
}
