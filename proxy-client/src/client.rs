//! [`ProxyClient`]: lazy per-group channels, reconnect, deadlines, status → [`Error`] mapping.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

use crate::api::{
    DiskClient, FilesystemClient, IscsiClient, SmbClient, SystemClient, VolumeClient,
};
use crate::connections::{AbandonHook, Connections};
use crate::transport::{ConnectError, ConnectFailure};
use crate::{ApiGroup, Error, Transport};

/// Default deadline of every call. Generous because csi-proxy ≤ v1.2.1 starts a PowerShell
/// process per call and formatting a large volume takes a while.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A client for all six csi-proxy API groups.
///
/// Cheap to clone (an `Arc` inside); clones share connections. Connections are opened lazily,
/// one per group, on first use, and are re-established after csi-proxy restarts. Every call has a
/// deadline ([`DEFAULT_TIMEOUT`] unless set with [`ProxyClient::with_timeout`]; a caller's own
/// deadline, which wins over it, with [`ProxyClient::with_deadline`]; a call that outlives its
/// caller with [`ProxyClient::running_to`]). A connection on which nothing came back before a
/// call's deadline — or, for a call allowed longer, before the client's timeout or its caller's
/// deadline — is left for a fresh one (new calls dial again; calls in flight on it keep their
/// deadlines): a csi-proxy connection that stays open and silent cannot wedge its group.
///
/// Must be used inside a tokio runtime.
#[derive(Clone)]
pub struct ProxyClient {
    inner: Arc<Inner>,
    /// The caller's deadline for calls made through this handle ([`ProxyClient::with_deadline`]).
    deadline: Option<Instant>,
    /// Calls through this handle wait for their answer until then ([`ProxyClient::running_to`]).
    run_to: Option<Instant>,
}

struct Inner {
    source: Source,
    timeout: Duration,
    connections: Connections,
}

/// Opens a channel to one API group (see [`ProxyClient::with_channel_factory`]).
pub type ChannelFactory = Arc<dyn Fn(ApiGroup) -> Channel + Send + Sync>;

/// Where the channels come from.
#[derive(Clone)]
enum Source {
    Transport(Transport),
    Factory {
        /// Names the endpoints in errors: `<name>/csi-proxy-<group>-<version>`.
        name: String,
        open: ChannelFactory,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Transport(t) => std::fmt::Debug::fmt(t, f),
            Source::Factory { name, .. } => f.debug_struct("Factory").field("name", name).finish(),
        }
    }
}

impl std::fmt::Debug for ProxyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyClient")
            .field("transport", &self.inner.source)
            .field("timeout", &self.inner.timeout)
            .field("deadline", &self.deadline)
            .field("run_to", &self.run_to)
            .finish_non_exhaustive()
    }
}

impl ProxyClient {
    /// A client for the given transport with the default deadline. Does not connect.
    pub fn new(transport: Transport) -> Self {
        Self::build(Source::Transport(transport), DEFAULT_TIMEOUT, None)
    }

    /// A client whose channels come from `open` instead of a [`Transport`]: an in-process server in tests (the
    /// simulated host's `sim::inproc`). `name` names the endpoints in errors. Channels are opened lazily, one per
    /// group, and again after a connection failure, exactly as with a transport.
    pub fn with_channel_factory(
        name: impl Into<String>,
        open: impl Fn(ApiGroup) -> Channel + Send + Sync + 'static,
    ) -> Self {
        let source = Source::Factory {
            name: name.into(),
            open: Arc::new(open),
        };
        Self::build(source, DEFAULT_TIMEOUT, None)
    }

    /// The same client settings with a different per-call deadline (new connections).
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self::build(
            self.inner.source.clone(),
            timeout,
            self.inner.connections.hook(),
        )
    }

    /// The same client settings (new connections), telling `hook` the group whenever one of its connections is
    /// left for a fresh one because nothing came back on it before a call's deadline (for a metric; it runs on the
    /// caller's task and must not block).
    pub fn on_connection_abandoned(self, hook: impl Fn(ApiGroup) + Send + Sync + 'static) -> Self {
        let hook: AbandonHook = Arc::new(hook);
        Self::build(self.inner.source.clone(), self.inner.timeout, Some(hook))
    }

    /// This client (the same connections) with calls that end at `deadline` (the earlier one if the handle had a
    /// deadline already), sent to csi-proxy as `grpc-timeout`. A caller's deadline wins over the client's timeout,
    /// which bounds only calls made without one; a call still waiting at the client's timeout with nothing back on its
    /// connection since it was sent leaves the connection for new calls and goes on waiting (module `connections`).
    /// A caller that bounds its calls by a deadline of its own passes it here, so that a call reaching it counts as
    /// one with no answer (see [`ProxyClient`]) rather than as a call its caller lost interest in.
    pub fn with_deadline(&self, deadline: Instant) -> ProxyClient {
        ProxyClient {
            inner: Arc::clone(&self.inner),
            deadline: Some(self.deadline.map_or(deadline, |d| d.min(deadline))),
            run_to: self.run_to,
        }
    }

    /// This client (the same connections) with calls that run to `end`, past the client's timeout and the caller's
    /// deadline ([`ProxyClient::with_deadline`]): a call the caller must hear the answer of even after it stopped
    /// waiting (a destructive call csi-proxy runs to its end anyway; formatting a big volume may take minutes).
    ///
    /// Such a call is not cut at the caller's deadline or the client's timeout, but its connection is judged at the
    /// earlier of the two (its *patience*; the client's timeout from its start when the caller's deadline has already
    /// passed): if nothing at all came back on the connection since the call was sent, new calls of the group go over
    /// a new connection, while this call keeps waiting for its answer on the old one until `end`. So a silent
    /// connection under a long call does not take the caller's next attempt with it; a long call on a live connection
    /// that answers nothing else meanwhile costs the group one new connection. `grpc-timeout` carries `end`.
    pub fn running_to(&self, end: Instant) -> ProxyClient {
        ProxyClient {
            inner: Arc::clone(&self.inner),
            deadline: self.deadline,
            run_to: Some(end),
        }
    }

    fn build(source: Source, timeout: Duration, hook: Option<AbandonHook>) -> Self {
        ProxyClient {
            inner: Arc::new(Inner {
                source,
                timeout,
                connections: Connections::new(hook),
            }),
            deadline: None,
            run_to: None,
        }
    }

    /// The transport this client uses (`None` for a client built with [`ProxyClient::with_channel_factory`]).
    pub fn transport(&self) -> Option<&Transport> {
        match &self.inner.source {
            Source::Transport(t) => Some(t),
            Source::Factory { .. } => None,
        }
    }

    /// The per-call deadline.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The disk v1 API.
    pub fn disk(&self) -> DiskClient {
        DiskClient::new(self.clone())
    }

    /// The volume v1 API.
    pub fn volume(&self) -> VolumeClient {
        VolumeClient::new(self.clone())
    }

    /// The filesystem v1 API.
    pub fn filesystem(&self) -> FilesystemClient {
        FilesystemClient::new(self.clone())
    }

    /// The SMB v1 API.
    pub fn smb(&self) -> SmbClient {
        SmbClient::new(self.clone())
    }

    /// The iSCSI v1alpha2 API.
    pub fn iscsi(&self) -> IscsiClient {
        IscsiClient::new(self.clone())
    }

    /// The system v1alpha1 API.
    pub fn system(&self) -> SystemClient {
        SystemClient::new(self.clone())
    }

    fn open(&self, group: ApiGroup) -> Channel {
        match &self.inner.source {
            Source::Transport(t) => t.lazy_channel(group),
            Source::Factory { open, .. } => open(group),
        }
    }

    /// A call's deadline, and its patience (when its connection is judged, if before its deadline).
    ///
    /// * No caller deadline: the client's timeout, judged there.
    /// * A caller's deadline ([`ProxyClient::with_deadline`]): that deadline, even past the client's timeout (a
    ///   caller that asks for a long call gets it, and `grpc-timeout` says so); its connection is judged at the
    ///   client's timeout when the deadline is later (nothing back by then is a silent connection, module
    ///   `connections`).
    /// * [`ProxyClient::running_to`]: `end`; judged at the caller's deadline, or at the client's timeout when that
    ///   comes first or the caller's deadline has passed already.
    fn limits(&self, now: Instant) -> (Instant, Option<Instant>) {
        let by_timeout = now + self.inner.timeout;
        let (deadline, patience) = match (self.run_to, self.deadline) {
            (None, None) => (by_timeout, by_timeout),
            (None, Some(d)) => (d, by_timeout),
            (Some(end), Some(d)) if d > now => (end, d.min(by_timeout)),
            (Some(end), _) => (end, by_timeout),
        };
        (deadline, (patience < deadline).then_some(patience))
    }

    /// Runs one unary call with the deadline and maps the outcome.
    ///
    /// The group's connection learns how the call ended (`crate::connections`): any end proves it delivers; a
    /// connection failure drops it (tonic's channel reconnects by itself once it notices a dead connection; this is
    /// the belt to those braces for connections that broke mid-call); a deadline with nothing back on it leaves it
    /// for a fresh one.
    pub(crate) async fn unary<Req, Resp, F, Fut>(
        &self,
        group: ApiGroup,
        method: &'static str,
        request: Req,
        call: F,
    ) -> Result<Resp, Error>
    where
        F: FnOnce(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let now = Instant::now();
        let (deadline, patience) = self.limits(now);
        let timeout = deadline.saturating_duration_since(now);
        if timeout.is_zero() {
            // Never send a call that cannot be waited for: its outcome could not be reported.
            return Err(Error::DeadlineExceeded { method, timeout });
        }
        let mut pending = self
            .inner
            .connections
            .call(group, deadline, patience, || self.open(group));
        let mut request = tonic::Request::new(request);
        // Tells the server too (grpc-timeout header); the local timeout below is what counts.
        request.set_timeout(timeout);
        let answer = call(pending.channel(), request);
        tokio::pin!(answer);
        let result = match patience {
            // A call that outlives its caller: its connection is judged at its patience, the call goes on.
            Some(patience) => match tokio::time::timeout_at(patience, &mut answer).await {
                Ok(result) => Ok(result),
                Err(_patience) => {
                    pending.patience_passed();
                    tokio::time::timeout_at(deadline, answer).await
                }
            },
            None => tokio::time::timeout_at(deadline, answer).await,
        };
        match result {
            // Whichever timer notices the deadline first (this one, or tonic's for the grpc-timeout below).
            Err(_elapsed) => {
                pending.timed_out();
                Err(Error::DeadlineExceeded { method, timeout })
            }
            Ok(Ok(response)) => {
                pending.ended(false);
                Ok(response.into_inner())
            }
            Ok(Err(status)) => {
                let error = self.map_status(group, method, status, timeout);
                match error {
                    // tonic's channel enforces the grpc-timeout it sends too, and may notice the deadline first.
                    Error::DeadlineExceeded { .. } => pending.timed_out(),
                    Error::Unavailable { .. } | Error::PipeMissing { .. } => pending.ended(true),
                    _ => pending.ended(false),
                }
                tracing::debug!(%group, method, error = %error, "csi-proxy call failed");
                Err(error)
            }
        }
    }

    fn map_status(
        &self,
        group: ApiGroup,
        method: &'static str,
        status: tonic::Status,
        timeout: Duration,
    ) -> Error {
        let endpoint = || match &self.inner.source {
            Source::Transport(t) => t.address(group),
            Source::Factory { name, .. } => format!("{name}/{}", group.endpoint_name()),
        };
        if let Some(connect) = find_source::<ConnectError>(&status) {
            return match &connect.reason {
                ConnectFailure::Missing { hint } => Error::PipeMissing {
                    method,
                    endpoint: connect.endpoint.clone(),
                    hint,
                },
                ConnectFailure::Unsupported(_) => Error::Unsupported {
                    method,
                    message: connect.to_string(),
                },
                ConnectFailure::Io(..) => Error::Unavailable {
                    method,
                    endpoint: connect.endpoint.clone(),
                    message: connect.to_string(),
                },
            };
        }
        // csi-proxy reset this one stream and kept the connection (an answer over this client's header limit).
        if find_source::<h2::Error>(&status).is_some_and(|e| {
            e.is_reset() && e.is_remote() && e.reason() == Some(h2::Reason::INTERNAL_ERROR)
        }) {
            return Error::Reset { method };
        }
        // A status with a source was made on this side from a transport failure; statuses
        // sent by the server have none.
        let local = std::error::Error::source(&status).is_some();
        match status.code() {
            tonic::Code::DeadlineExceeded => Error::DeadlineExceeded { method, timeout },
            // tonic answers an expired grpc-timeout with CANCELLED "Timeout expired": its client channel (which
            // enforces the timeout it sends) and its servers (the simulated host).
            tonic::Code::Cancelled if status.message().contains("Timeout expired") => {
                Error::DeadlineExceeded { method, timeout }
            }
            tonic::Code::Unimplemented => Error::Unimplemented {
                method,
                endpoint: endpoint(),
                message: status.message().to_owned(),
            },
            tonic::Code::Unavailable => Error::Unavailable {
                method,
                endpoint: endpoint(),
                message: describe(&status),
            },
            _ if local => Error::Unavailable {
                method,
                endpoint: endpoint(),
                message: describe(&status),
            },
            code => Error::Proxy {
                method,
                code: code as i32,
                message: status.message().to_owned(),
            },
        }
    }
}

/// The status message plus its source chain (transport errors hide the useful part there).
fn describe(status: &tonic::Status) -> String {
    let mut text = status.message().to_owned();
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        let part = err.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = err.source();
    }
    text
}

fn find_source<T: std::error::Error + 'static>(status: &tonic::Status) -> Option<&T> {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        source = err.source();
    }
    None
}
