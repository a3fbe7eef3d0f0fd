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
//!
//! # Calls that outlive their caller
//!
//! A call made to run to its end ([`crate::ProxyClient::running_to`]: a destructive call the driver must hear the
//! answer of even after the RPC that issued it gave up) waits far past its caller's deadline and the client's
//! timeout. It is **judged** at the earlier of those two (its *patience*) exactly as a call is judged at its deadline
//! — nothing back on its connection since it was sent leaves the connection for new calls — but it is not ended: it
//! keeps waiting for its answer on the old connection until its own deadline. Otherwise a silent connection under
//! such a call would take the group's next calls (kubelet's retry of the RPC) with it, each waiting out its own
//! deadline before the group dials again.
//!
//! A call's judgement is not left to its own task alone: [`Connections::call`] first judges every call in flight on
//! the group's connection whose judgement is due (its deadline or patience passed, nothing back since it was sent), so
//! a call that finds its connection silent never waits on it even if the task of the call that proves it has not run
//! yet (both timers fire together under load or paused time).
//!
//! Why not HTTP/2 PINGs, which would prove a connection alive under a lone long call (a `FormatVolume` of a big disk
//! answers nothing for minutes, so the rule above leaves its live connection for a fresh one: one redial per such
//! call, not a storm — the old connection keeps the call and closes after it)? Pings faster than grpc-go's five-minute
//! minimum earn csi-proxy's `GOAWAY ENHANCE_YOUR_CALM`, which closes the connection with the long call on it (above),
//! and hyper's keepalive (the only ping tonic's client sends) closes the connection when an ack is late, ending every
//! call on it too: both would cut the very call that must run to its end.

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

/// One connection of a group: the channel calls go through, how many calls ended on it, and the calls in flight on
/// it that have not been judged yet.
pub(crate) struct Conn {
    pub(crate) channel: Channel,
    ended: AtomicU64,
    waiting: Mutex<Vec<Waiting>>,
}

/// A call in flight, for [`Connections::call`]'s judgement of its connection.
struct Waiting {
    id: u64,
    /// When its connection is judged: its deadline, or its patience (a call that outlives its caller).
    judge_at: Instant,
    /// How many calls had ended on the connection when it was sent.
    seen: u64,
    sent: Instant,
}

impl Conn {
    fn waiting(&self) -> MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call in flight whose judgement is due, with nothing back on this connection since it was sent: how long it
    /// has waited.
    fn due_silence(&self, now: Instant) -> Option<Duration> {
        let ended = self.ended.load(Ordering::SeqCst);
        self.waiting()
            .iter()
            .filter(|w| w.judge_at <= now && w.seen == ended)
            .map(|w| now.saturating_duration_since(w.sent))
            .max()
    }
}

/// How a connection came to be judged silent (for the log).
#[derive(Clone, Copy)]
enum Judged {
    /// A call's deadline passed with nothing back.
    Deadline,
    /// A call that outlives its caller reached its patience with nothing back; it keeps waiting.
    Patience,
    /// A new call found a due judgement of a call in flight that its own task had not made yet.
    Due,
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
    next_id: AtomicU64,
}

impl Connections {
    pub(crate) fn new(on_abandoned: Option<AbandonHook>) -> Self {
        Connections {
            slots: Default::default(),
            on_abandoned,
            next_id: AtomicU64::new(0),
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

    /// The group's current connection, opened with `open` if it has none (or if a call in flight on it is due to
    /// be judged silent: module docs). The returned [`Call`] must be told how the call ended ([`Call::ended`],
    /// [`Call::timed_out`]); dropped untold, it counts as a call its caller gave up on (see the module docs).
    /// `patience`: the call outlives its caller (module docs) and is judged then, not at `deadline`.
    pub(crate) fn call(
        &self,
        group: ApiGroup,
        deadline: Instant,
        patience: Option<Instant>,
        open: impl FnOnce() -> Channel,
    ) -> Call<'_> {
        let now = Instant::now();
        let current = self.slot(group).conn.clone();
        if let Some(conn) = current
            && let Some(waited) = conn.due_silence(now)
        {
            self.silent(group, &conn, None, waited, Judged::Due);
        }
        let conn = Arc::clone(self.slot(group).conn.get_or_insert_with(|| {
            Arc::new(Conn {
                channel: open(),
                ended: AtomicU64::new(0),
                waiting: Mutex::new(Vec::new()),
            })
        }));
        let seen = conn.ended.load(Ordering::SeqCst);
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let judge_at = patience.map_or(deadline, |p| p.min(deadline));
        conn.waiting().push(Waiting {
            id,
            judge_at,
            seen,
            sent: now,
        });
        Call {
            connections: self,
            group,
            conn,
            id,
            seen,
            judge_at,
            sent: now,
            judged: false,
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

    /// A call's judgement on `conn` is due (`how`), and it had ended `seen` calls when the call was sent (`None`:
    /// already checked by [`Conn::due_silence`]).
    fn silent(
        &self,
        group: ApiGroup,
        conn: &Arc<Conn>,
        seen: Option<u64>,
        waited: Duration,
        how: Judged,
    ) {
        if seen.is_some_and(|seen| conn.ended.load(Ordering::SeqCst) != seen) {
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
        let waited_ms = waited.as_millis() as u64;
        match how {
            Judged::Deadline | Judged::Due => tracing::warn!(
                %group,
                waited_ms,
                "csi-proxy did not answer anything on this connection before the call's deadline: new calls of this \
                 group go over a new connection (calls in flight on the old one keep their own deadlines)"
            ),
            Judged::Patience => tracing::warn!(
                %group,
                waited_ms,
                "csi-proxy has answered nothing on this connection since a call that outlives its caller was sent, \
                 and its caller's deadline (or the client's timeout) has passed: new calls of this group go over a new \
                 connection; the call keeps waiting for its answer on the old one until its own deadline"
            ),
        }
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
    id: u64,
    seen: u64,
    /// Its deadline, or its patience (a call that outlives its caller).
    judge_at: Instant,
    sent: Instant,
    /// Its connection was judged at its patience already.
    judged: bool,
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
        self.judge(Judged::Deadline);
    }

    /// A call that outlives its caller reached its patience with no answer yet: its connection is judged, the call
    /// keeps waiting.
    pub(crate) fn patience_passed(&mut self) {
        self.judge(Judged::Patience);
    }

    fn judge(&mut self, how: Judged) {
        if std::mem::replace(&mut self.judged, true) {
            return;
        }
        self.conn.waiting().retain(|w| w.id != self.id);
        self.connections.silent(
            self.group,
            &self.conn,
            Some(self.seen),
            self.sent.elapsed(),
            how,
        );
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        // Dropped by the caller while waiting: at or after its deadline (or patience) it is one with no answer.
        if !self.settled && Instant::now() >= self.judge_at {
            self.judge(Judged::Deadline);
        }
        if !self.judged {
            self.conn.waiting().retain(|w| w.id != self.id);
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
            .map(|_| connections.call(ApiGroup::Disk, deadline(), None, open))
            .collect();
        tokio::time::advance(Duration::from_millis(100)).await;
        for c in calls {
            c.timed_out();
        }
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        // The next call opens the second connection; it is silent too, but within the interval it is kept.
        connections
            .call(ApiGroup::Disk, deadline(), None, open)
            .timed_out();
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        connections
            .call(ApiGroup::Disk, deadline(), None, open)
            .timed_out();
        assert_eq!(opened.load(Ordering::SeqCst), 2, "kept within the interval");
        // After the interval the next silent deadline leaves it.
        tokio::time::advance(REDIAL_INTERVAL).await;
        connections
            .call(ApiGroup::Disk, deadline(), None, open)
            .timed_out();
        assert_eq!(abandoned.load(Ordering::SeqCst), 2);
        let _c = connections.call(ApiGroup::Disk, deadline(), None, open);
        assert_eq!(opened.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_answers_other_calls_is_kept_and_early_drops_prove_nothing() {
        let connections = Connections::new(None);
        let opened = Arc::new(AtomicUsize::new(0));
        let open = || silent_channel(&opened);
        let deadline = Instant::now() + Duration::from_millis(100);
        let slow = connections.call(ApiGroup::Smb, deadline, None, open);
        // Another call on the same connection ends meanwhile: the connection delivers.
        connections
            .call(ApiGroup::Smb, deadline, None, open)
            .ended(false);
        tokio::time::advance(Duration::from_millis(100)).await;
        slow.timed_out();
        // (Calls from here on are in flight within their deadlines.)
        let deadline = Instant::now() + Duration::from_secs(5);
        // A caller that gives up before the deadline proves nothing either.
        drop(connections.call(
            ApiGroup::Smb,
            Instant::now() + Duration::from_secs(5),
            None,
            open,
        ));
        let _c = connections.call(ApiGroup::Smb, deadline, None, open);
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        // A caller that drops its call at the deadline counts like a timeout.
        let late = connections.call(ApiGroup::Smb, Instant::now(), None, open);
        drop(late);
        let _c = connections.call(ApiGroup::Smb, deadline, None, open);
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        // Groups are independent; a broken connection is dropped at once, a stale failure leaves the new one.
        let old = connections.call(ApiGroup::Iscsi, deadline, None, open);
        connections
            .call(ApiGroup::Iscsi, deadline, None, open)
            .ended(true);
        let _new = connections.call(ApiGroup::Iscsi, deadline, None, open);
        assert_eq!(opened.load(Ordering::SeqCst), 4);
        old.ended(true);
        let _same = connections.call(ApiGroup::Iscsi, deadline, None, open);
        assert_eq!(opened.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_outlives_its_caller_leaves_a_silent_connection_at_the_callers_deadline_and_keeps_waiting()
     {
        let opened = Arc::new(AtomicUsize::new(0));
        let abandoned = Arc::new(AtomicUsize::new(0));
        let (o, a) = (Arc::clone(&opened), Arc::clone(&abandoned));
        let proxy = crate::ProxyClient::with_channel_factory("test", move |_| silent_channel(&o))
            .on_connection_abandoned(move |g| {
                assert_eq!(g, ApiGroup::Volume);
                a.fetch_add(1, Ordering::SeqCst);
            });
        let start = Instant::now();
        let caller = start + Duration::from_secs(30);
        let end = start + Duration::from_secs(3600);
        // A FormatVolume run to its end: its caller (the RPC) gives up at 30 s, the call waits for an hour.
        let long = proxy.with_deadline(caller).running_to(end);
        let long = long.volume();
        let long = long.format(r"\\?\Volume{1}\");
        tokio::pin!(long);
        assert!(futures::poll!(&mut long).is_pending());
        assert_eq!(opened.load(Ordering::SeqCst), 1);

        // The caller's deadline passes with nothing back: its next attempt goes over a new connection at once, even
        // before the long call's own task has judged the old one.
        tokio::time::advance(Duration::from_secs(30)).await;
        let next = proxy.with_deadline(Instant::now() + Duration::from_secs(30));
        let next = next.volume();
        let next = next.is_formatted(r"\\?\Volume{1}\");
        tokio::pin!(next);
        assert!(futures::poll!(&mut next).is_pending());
        assert_eq!(opened.load(Ordering::SeqCst), 2, "a new connection");
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);

        // The long call is not cut: not at its caller's deadline, not at the client's timeout (120 s).
        assert!(futures::poll!(&mut long).is_pending());
        tokio::time::advance(crate::DEFAULT_TIMEOUT).await;
        assert!(
            futures::poll!(&mut long).is_pending(),
            "cut at the client's timeout"
        );
        assert_eq!(
            abandoned.load(Ordering::SeqCst),
            1,
            "its connection was left once"
        );
        // It ends at its own deadline.
        tokio::time::advance(end.saturating_duration_since(Instant::now())).await;
        let err = long.await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::DeadlineExceeded, "{err:?}");
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_call_on_a_connection_that_answers_keeps_it_and_a_lone_one_costs_one_new_connection()
     {
        let connections = Connections::new(None);
        let opened = Arc::new(AtomicUsize::new(0));
        let open = || silent_channel(&opened);
        let end = || Instant::now() + Duration::from_secs(3600);
        let patience = || Some(Instant::now() + Duration::from_secs(120));
        // A long call while another call on its connection answers: the connection delivers, whatever the wait.
        let mut first = connections.call(ApiGroup::Volume, end(), patience(), open);
        connections
            .call(ApiGroup::Volume, end(), None, open)
            .ended(false);
        tokio::time::advance(Duration::from_secs(120)).await;
        first.patience_passed();
        connections
            .call(ApiGroup::Volume, end(), None, open)
            .ended(false);
        assert_eq!(opened.load(Ordering::SeqCst), 1, "kept");
        // A lone long call that sees nothing back past its patience leaves the connection once; the calls after it
        // answer on the new one and keep it, however long the old call goes on.
        let mut lone = connections.call(ApiGroup::Volume, end(), patience(), open);
        tokio::time::advance(Duration::from_secs(120)).await;
        lone.patience_passed();
        for _ in 0..10 {
            connections
                .call(ApiGroup::Volume, end(), None, open)
                .ended(false);
            tokio::time::advance(Duration::from_secs(60)).await;
        }
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        // The old calls end late: nothing changes for the new connection.
        first.ended(false);
        lone.ended(false);
        let _c = connections.call(ApiGroup::Volume, end(), None, open);
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_callers_deadline_wins_over_the_clients_timeout_which_judges_the_connection() {
        let opened = Arc::new(AtomicUsize::new(0));
        let o = Arc::clone(&opened);
        let proxy = crate::ProxyClient::with_channel_factory("test", move |_| silent_channel(&o))
            .with_timeout(Duration::from_secs(10));
        // Without a caller's deadline, the client's timeout ends the call.
        let err = proxy.system().bios_serial().await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::DeadlineExceeded, "{err:?}");
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        // A caller's deadline past it: the call waits for it, and its connection is judged at the timeout.
        tokio::time::advance(REDIAL_INTERVAL).await;
        let caller = Instant::now() + Duration::from_secs(60);
        let long = proxy.with_deadline(caller);
        let long = long.system();
        let long = long.bios_serial();
        tokio::pin!(long);
        assert!(futures::poll!(&mut long).is_pending());
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            futures::poll!(&mut long).is_pending(),
            "cut at the client's timeout"
        );
        let next = proxy.with_deadline(Instant::now() + Duration::from_secs(5));
        let next = next.system();
        let next = next.bios_serial();
        tokio::pin!(next);
        assert!(futures::poll!(&mut next).is_pending());
        assert_eq!(opened.load(Ordering::SeqCst), 3, "a new connection");
        tokio::time::advance(caller.saturating_duration_since(Instant::now())).await;
        let err = long.await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::DeadlineExceeded, "{err:?}");
    }
}
