//! [`Metered`]: the host port with a meter on every call — a decorator over any [`Host`], applied by the composition
//! root to whatever backend it builds, so csi-proxy and a native backend are measured the same way.
//!
//! Each call is counted by backend, operation ([`HostOp`]) and outcome (`ok`, the [`HostErrorKind`] in snake case,
//! or `cancelled` when the caller stopped waiting: the request's deadline passed or kubelet gave up) and timed.
//! With metrics off the decorator holds no meter and a call costs one branch.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::{
    DiskIds, DiskLayout, DiskLocation, Host, HostCapabilities, HostErrorKind, HostObject, HostOp,
    HostPath, HostResult, InFlight, IscsiAuth, MpioClaim, PathSpace, Portal, Secret, SharedObject,
    SmbCredential, SmbMappingOptions, TargetPath, UncPath,
};
use crate::locks::Deadline;
use crate::metrics::Metrics;

/// A [`Host`] whose calls are counted and timed in [`Metrics`] under a backend name (`csi-proxy`, `native`).
#[derive(Clone, Debug)]
pub struct Metered<H> {
    inner: H,
    meter: Option<Meter>,
}

#[derive(Clone, Debug)]
struct Meter {
    metrics: Arc<Metrics>,
    backend: &'static str,
}

impl<H: Host> Metered<H> {
    /// `inner`, measured as `backend` in `metrics` (`None`: metrics off, calls pass straight through).
    pub fn new(inner: H, backend: &'static str, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            inner,
            meter: metrics.map(|metrics| Meter { metrics, backend }),
        }
    }

    /// The measured backend.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    fn call<T, F>(&self, op: HostOp, fut: F) -> impl Future<Output = HostResult<T>> + Send
    where
        F: Future<Output = HostResult<T>> + Send,
    {
        let meter = self.meter.as_ref();
        async move {
            let Some(meter) = meter else {
                return fut.await;
            };
            let mut guard = CallGuard {
                meter,
                op,
                start: Instant::now(),
                outcome: "cancelled",
            };
            let result = fut.await;
            guard.outcome = match &result {
                Ok(_) => "ok",
                Err(e) => kind_label(e.kind),
            };
            result
        }
    }
}

/// Records the call when dropped: after it finished, or when the caller dropped it unfinished (`cancelled`).
struct CallGuard<'a> {
    meter: &'a Meter,
    op: HostOp,
    start: Instant,
    outcome: &'static str,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.meter.metrics.observe_host_call(
            self.meter.backend,
            self.op.name(),
            self.outcome,
            self.start.elapsed().as_secs_f64(),
        );
    }
}

/// The `outcome` label of a failed call.
fn kind_label(kind: HostErrorKind) -> &'static str {
    match kind {
        HostErrorKind::NotFound => "not_found",
        HostErrorKind::NoPartition => "no_partition",
        HostErrorKind::NotSatisfiable => "not_satisfiable",
        HostErrorKind::AlreadyExists => "already_exists",
        HostErrorKind::NotEmpty => "not_empty",
        HostErrorKind::MultipleConnections => "multiple_connections",
        HostErrorKind::NetworkPathNotFound => "network_path_not_found",
        HostErrorKind::NetworkNameNotFound => "network_name_not_found",
        HostErrorKind::StaleMapping => "stale_mapping",
        HostErrorKind::LogonFailure => "logon_failure",
        HostErrorKind::AccessDenied => "access_denied",
        HostErrorKind::AlreadyLoggedIn => "already_logged_in",
        HostErrorKind::AccessPathInUse => "access_path_in_use",
        HostErrorKind::MayHoldData => "may_hold_data",
        HostErrorKind::SupportedSizeFailed => "supported_size_failed",
        HostErrorKind::TooManySessions => "too_many_sessions",
        HostErrorKind::InFlight => "in_flight",
        HostErrorKind::InvalidPath => "invalid_path",
        HostErrorKind::Unavailable => "unavailable",
        HostErrorKind::DeadlineExceeded => "deadline_exceeded",
        HostErrorKind::Other => "other",
    }
}

/// Forwards each listed [`Host`] method to the inner backend through [`Metered::call`].
macro_rules! metered {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $out:ty => $op:ident; )*) => {
        $(
            fn $name(
                &self,
                $($arg: $ty,)*
                deadline: Deadline,
            ) -> impl Future<Output = HostResult<$out>> + Send {
                self.call(HostOp::$op, self.inner.$name($($arg,)* deadline))
            }
        )*
    };
}

// Every method of `Host` is forwarded here, including any with a default body: a method left out would run the
// trait's default instead of the backend's own (`tests::every_host_method_is_forwarded` catches it).
impl<H: Host> Host for Metered<H> {
    fn capabilities(&self) -> HostCapabilities {
        self.inner.capabilities()
    }

    fn made_by_wincsi(&self, object: SharedObject<'_>) -> Option<bool> {
        self.inner.made_by_wincsi(object)
    }

    /// A ledger write, not a host call: not counted.
    fn claim(
        &self,
        object: SharedObject<'_>,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        self.inner.claim(object, deadline)
    }

    fn uptime(&self) -> Option<std::time::Duration> {
        self.inner.uptime()
    }

    fn windows_build(&self) -> Option<u32> {
        self.inner.windows_build()
    }

    metered! {
        path_exists(path: &HostPath) -> bool => PathExists;
        mkdir(path: &HostPath) -> () => Mkdir;
        rmdir(path: &HostPath, force: bool) -> () => Rmdir;
        create_symlink(link: &HostPath, points_to: &HostPath) -> () => CreateSymlink;
        is_symlink(path: &HostPath) -> bool => IsSymlink;
        new_smb_global_mapping(
            remote: &UncPath,
            link: Option<&HostPath>,
            credential: Option<&SmbCredential>
        ) -> () => NewSmbGlobalMapping;
        new_smb_global_mapping_with(
            remote: &UncPath,
            link: Option<&HostPath>,
            credential: Option<&SmbCredential>,
            options: &SmbMappingOptions
        ) -> () => NewSmbGlobalMapping;
        remove_smb_global_mapping(remote: &UncPath) -> () => RemoveSmbGlobalMapping;
        list_disk_locations() -> BTreeMap<u32, DiskLocation> => ListDiskLocations;
        list_disk_ids() -> BTreeMap<u32, DiskIds> => ListDiskIDs;
        rescan() -> () => Rescan;
        partition_disk(disk: u32) -> () => PartitionDisk;
        disk_size(disk: u32) -> u64 => GetDiskStats;
        set_disk_online(disk: u32, online: bool) -> () => SetDiskState;
        is_disk_online(disk: u32) -> bool => GetDiskState;
        list_volumes_on_disk(disk: u32) -> Vec<String> => ListVolumesOnDisk;
        mount_volume(volume_id: &str, path: &HostPath) -> () => MountVolume;
        unmount_volume(volume_id: &str, path: &HostPath) -> () => UnmountVolume;
        is_volume_formatted(volume_id: &str) -> bool => IsVolumeFormatted;
        format_volume(volume_id: &str) -> () => FormatVolume;
        resize_volume(volume_id: &str, size_bytes: u64) -> () => ResizeVolume;
        volume_stats(volume_id: &str) -> (u64, u64) => GetVolumeStats;
        volume_id_from_target_path(path: &HostPath) -> String => GetVolumeIDFromTargetPath;
        write_volume_cache(volume_id: &str) -> () => WriteVolumeCache;
        add_target_portal(portal: &Portal) -> () => AddTargetPortal;
        discover_target_portal(portal: &Portal) -> Vec<String> => DiscoverTargetPortal;
        connect_target(portal: &Portal, iqn: &str, auth: &IscsiAuth) -> () => ConnectTarget;
        disconnect_target(portal: &Portal, iqn: &str) -> () => DisconnectTarget;
        get_target_disks(portal: &Portal, iqn: &str) -> Vec<u32> => GetTargetDisks;
        set_mutual_chap_secret(secret: &Secret) -> () => SetMutualChapSecret;
        set_disk_online_writable(disk: u32) -> () => SetDiskState;
        set_disk_online_read_only(disk: u32) -> () => SetDiskState;
        in_flight(object: &HostObject) -> InFlight => InFlight;
        add_target_portal_with_chap(portal: &Portal, discovery: &IscsiAuth) -> () => AddTargetPortal;
        connect_target_persistent(portal: &Portal, iqn: &str, auth: &IscsiAuth) -> () => ConnectTarget;
        list_target_portals() -> Vec<Portal> => ListTargetPortals;
        disk_number_of_volume(volume_id: &str) -> u32 => GetDiskNumberFromVolumeID;
        read_link(path: &HostPath) -> Option<String> => ReadLink;
        remove_target_portal(portal: &Portal) -> () => RemoveTargetPortal;
        refresh_target_portal(portal: &Portal) -> () => RefreshTargetPortal;
        disk_layout(disk: u32) -> DiskLayout => DiskLayout;
        iscsi_sessions() -> Vec<String> => ListIscsiSessions;
        mpio_claim() -> MpioClaim => MultipathClaim;
        connect_target_multipath(
            portal: &Portal,
            iqn: &str,
            auth: &IscsiAuth,
            persistent: bool
        ) -> () => ConnectTarget;
        target_paths(iqn: &str) -> Vec<TargetPath> => TargetPaths;
        path_space(path: &HostPath) -> PathSpace => PathSpace;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::KubeletRoot;
    use crate::host::csi_proxy::CsiProxyHost;
    use crate::testing::{Env, KUBELET, d};

    fn env_and_host(metrics: Option<Arc<Metrics>>) -> (Env, Metered<CsiProxyHost>) {
        let env = Env::on(sim::wmi::TestBackend::CsiProxy, &serde_json::json!({}));
        let host = Metered::new(CsiProxyHost::new(env.inproc.client()), "test", metrics);
        (env, host)
    }

    fn path(p: &str) -> HostPath {
        KubeletRoot::new(KUBELET)
            .expect("root")
            .host_path(p)
            .expect("path")
    }

    fn count(text: &str, op: &str, outcome: &str) -> Option<u64> {
        let prefix = format!(
            "wincsi_host_calls_total{{backend=\"test\",operation=\"{op}\",outcome=\"{outcome}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|n| n.parse().expect("a count"))
    }

    #[tokio::test]
    async fn calls_are_counted_by_operation_and_outcome() {
        let metrics = Arc::new(Metrics::new());
        let (env, host) = env_and_host(Some(Arc::clone(&metrics)));
        let dir = path(r"C:\var\lib\kubelet\plugins\m");
        assert!(!host.path_exists(&dir, d()).await.expect("exists"));
        host.mkdir(&dir, d()).await.expect("mkdir");
        assert!(host.path_exists(&dir, d()).await.expect("exists"));
        let err = host
            .is_symlink(&path(r"C:\var\lib\kubelet\nope"), d())
            .await
            .expect_err("missing");
        let text = metrics.encode();
        assert_eq!(count(&text, "PathExists", "ok"), Some(2), "{text}");
        assert_eq!(count(&text, "Mkdir", "ok"), Some(1), "{text}");
        assert_eq!(
            count(&text, "IsSymlink", kind_label(err.kind)),
            Some(1),
            "{text}"
        );
        assert!(text.contains(
            "wincsi_host_call_duration_seconds_count{backend=\"test\",operation=\"PathExists\"} 2\n"
        ));
        // Exactly what the backend did: the decorator adds no call of its own.
        assert_eq!(
            env.ops(),
            [
                HostOp::PathExists,
                HostOp::Mkdir,
                HostOp::PathExists,
                HostOp::IsSymlink
            ]
        );
    }

    #[tokio::test]
    async fn a_call_dropped_unfinished_counts_as_cancelled() {
        let metrics = Arc::new(Metrics::new());
        let (env, host) = env_and_host(Some(Arc::clone(&metrics)));
        env.hold_nth(HostOp::Mkdir, 1);
        let dir = path(r"C:\var\lib\kubelet\plugins\m");
        // The call reaches the host and is held there; then it is dropped, as a passed deadline drops it.
        tokio::select! {
            r = host.mkdir(&dir, d()) => panic!("a held call finished: {r:?}"),
            () = env.hung() => {}
        }
        env.release();
        assert_eq!(count(&metrics.encode(), "Mkdir", "cancelled"), Some(1));
    }

    #[tokio::test]
    async fn without_metrics_calls_pass_through() {
        let (env, host) = env_and_host(None);
        assert!(
            !host
                .path_exists(&path(r"C:\var\lib\kubelet\x"), d())
                .await
                .expect("exists")
        );
        assert_eq!(host.capabilities(), host.inner().capabilities());
        assert_eq!(env.ops(), [HostOp::PathExists]);
    }

    /// The names of the `fn`s declared in `text` between `start` and the first line that is exactly `end`.
    fn fn_names(text: &str, start: &str, end: &str) -> Vec<String> {
        let body = &text[text.find(start).expect("start")..];
        let body = &body[..body.find(end).expect("end")];
        body.split("fn ")
            .skip(1)
            .map(|s| {
                s.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_host_method_is_forwarded() {
        let port = fn_names(
            include_str!("mod.rs"),
            "pub trait Host: Clone + Send + Sync + 'static {",
            "\n}\n",
        );
        assert!(port.len() > 20, "{port:?}");
        let this = include_str!("metered.rs");
        let imp = &this[this
            .find("impl<H: Host> Host for Metered<H> {")
            .expect("impl")..];
        for name in port {
            assert!(
                imp.contains(&format!("\n        {name}(")) || imp.contains(&format!("fn {name}(")),
                "Host::{name} is not forwarded by Metered: add it to the `metered!` list"
            );
        }
    }
}
