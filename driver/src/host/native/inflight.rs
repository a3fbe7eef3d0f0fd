//! What the native backend knows of its own calls that may outlive their callers ([`Host::in_flight`]).
//!
//! The iSCSI protocol announces a destructive call (`PartitionDisk`, `FormatVolume`, `ResizeVolume`) and a logout
//! (`DisconnectTarget`) in the volume's record before it issues it, and learns its outcome afterwards
//! (`crate::lifecycle::outlive`). Through csi-proxy the call runs in csi-proxy's process, out of the driver's sight:
//! only its outcome, a reboot or the one-hour bound end the wait. Natively the operation's sequence of WMI calls runs
//! in the driver's own process, so the backend knows more:
//!
//! * **in this process**, an operation that may outlive its caller is registered while its facade calls run (they
//!   run to their end even when the caller stopped waiting, [`NativeHost::run_to_end`]): while it runs it is
//!   [`InFlight::Running`]; once it returned, nothing of it can still change the host;
//! * **after a restart** (the process was killed, a rollout), the sequence died with the process. What can still be
//!   running is a WMI *method* that was in flight in its provider (`WmiPrvSE`/the storage service finish a method
//!   whose caller died: unverified, real-node checks 28 and N37), never the sequence's next step. So every method that changes
//!   the host — `MSFT_Disk.Initialize`, `MSFT_Disk.CreatePartition`, `MSFT_Volume.Format`, `MSFT_Partition.Resize`,
//!   `MSFT_iSCSITarget.Disconnect`, `MSFT_SmbGlobalMapping.Remove`, and the creating methods a stage announces
//!   (`MSFT_SmbGlobalMapping.Create`, `MSFT_iSCSITarget.Connect`) — is written to a durable ledger ([`LEDGER_FILE`])
//!   before it is called and removed when it answered. An entry left by an earlier process is in flight until its
//!   outcome shows on the host (the disk has a partition table, a data partition, the volume a file system or its
//!   size, the target no session or, for a login, a session, the share no global mapping or, for a creation, one),
//!   a reboot (the node's uptime is lower than the entry's) or [`OUTLIVE_BOUND`] from its start; none left means
//!   [`InFlight::Ended`].
//!
//! So a driver killed during the reads of a first stage (the `SELECT`s, the raw-sector read, `Refresh`) or between
//! two methods is not waited for at all, and one killed inside `Initialize` only until the disk shows its partition
//! table. The reads carry no entry: they change nothing.
//!
//! [`Host::in_flight`]: crate::host::Host::in_flight
//! [`NativeHost::run_to_end`]: super::NativeHost

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::ledger::Ledger;
use super::{HostErrorKind, HostOp, HostResult, Ops};
use crate::host::{BootStamp, HostObject, InFlight, OUTLIVE_BOUND, Portal, Since};

/// The ledger of WMI methods in flight, in the state directory.
pub const LEDGER_FILE: &str = "native-calls-in-flight.json";

/// The methods that change the host, as the ledger and the sim's audit name them.
pub(super) const INITIALIZE: &str = "MSFT_Disk.Initialize";
pub(super) const CREATE_PARTITION: &str = "MSFT_Disk.CreatePartition";
pub(super) const FORMAT: &str = "MSFT_Volume.Format";
pub(super) const RESIZE: &str = "MSFT_Partition.Resize";
pub(super) const DISCONNECT: &str = "MSFT_iSCSITarget.Disconnect";
pub(super) const REMOVE_MAPPING: &str = "MSFT_SmbGlobalMapping.Remove";
/// The creating methods a stage announces (`crate::lifecycle::creation`): their outcome is the object appearing.
pub(super) const CREATE_MAPPING: &str = "MSFT_SmbGlobalMapping.Create";
pub(super) const CONNECT: &str = "MSFT_iSCSITarget.Connect";

/// One method in flight, as the ledger keeps it (a JSON string per entry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The method ([`INITIALIZE`] …).
    method: String,
    /// The object it changes ([`HostObject::key`]).
    object: String,
    /// For a disk: its `UniqueId` when it was called (a disk number names another disk after a re-attach).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disk_id: Option<String>,
    /// `Resize`: the partition's size asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    /// `Connect`: the portal it logs in through (`address:port`): a multipath login's session is one through it, the
    /// target's other sessions show at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    portal: Option<Portal>,
    /// The node's uptime when it was called (absent: unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boot: Option<BootStamp>,
    /// The backend instance (process) that called it.
    instance: String,
}

/// The native backend's calls that may outlive their callers (module docs). Shared by the backend's clones.
pub(crate) struct InFlightCalls {
    instance: String,
    running: Mutex<HashMap<String, Vec<HostOp>>>,
    ledger: Ledger,
}

/// An operation of this process registered as running on an object until dropped.
pub(crate) struct Running {
    calls: Arc<InFlightCalls>,
    key: String,
    op: HostOp,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self.calls.lock();
        if let Some(ops) = running.get_mut(&self.key) {
            if let Some(i) = ops.iter().position(|o| *o == self.op) {
                ops.swap_remove(i);
            }
            if ops.is_empty() {
                running.remove(&self.key);
            }
        }
    }
}

/// A method written to the ledger until dropped (when it answered).
pub(crate) struct Method<'a> {
    calls: &'a InFlightCalls,
    key: String,
}

impl Drop for Method<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.calls.ledger.set(&self.key, false) {
            // Kept: the next look finds it this process's and drops it then (the method answered).
            warn!(error = %e, "cannot remove an answered WMI method from the in-flight ledger");
        }
    }
}

impl InFlightCalls {
    /// The ledger in `dir` (in memory without one), for a new backend instance.
    pub(crate) fn open(dir: Option<&std::path::Path>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            instance: format!(
                "{}.{started}.{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            running: Mutex::default(),
            ledger: Ledger::open(dir, LEDGER_FILE, "WMI method in flight"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<HostOp>>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register `op` as running on `object` in this process; refused (Unavailable, nothing started) while another
    /// operation that may outlive its caller runs on it here, e.g. one whose caller gave up.
    pub(crate) fn start(self: &Arc<Self>, op: HostOp, object: &HostObject) -> HostResult<Running> {
        let key = object.key();
        let mut running = self.lock();
        let ops = running.entry(key.clone()).or_default();
        if let Some(other) = ops.first() {
            return Err(crate::host::HostError::new(
                op,
                HostErrorKind::InFlight,
                format!(
                    "{other} on {object}, issued by this driver earlier, is still running (its caller stopped \
                     waiting): nothing else is started on it until it ends"
                ),
            ));
        }
        ops.push(op);
        Ok(Running {
            calls: Arc::clone(self),
            key,
            op,
        })
    }

    /// Write `method` on `object` to the ledger, durably, before it is called; the entry goes when the guard drops.
    /// `disk_id`: the disk's `UniqueId`; `size`: `Resize`'s target.
    pub(crate) fn method<'a>(
        &'a self,
        o: &Ops<'_>,
        method: &str,
        object: &HostObject,
        disk_id: Option<&str>,
        size: Option<u64>,
    ) -> HostResult<Method<'a>> {
        self.write(o, method, object, disk_id, size, None)
    }

    /// [`InFlightCalls::method`] for `MSFT_iSCSITarget.Connect` of target `iqn` through `portal`.
    pub(crate) fn login<'a>(
        &'a self,
        o: &Ops<'_>,
        iqn: &str,
        portal: &Portal,
    ) -> HostResult<Method<'a>> {
        let object = HostObject::Target(iqn.to_owned());
        self.write(o, CONNECT, &object, None, None, Some(portal))
    }

    fn write<'a>(
        &'a self,
        o: &Ops<'_>,
        method: &str,
        object: &HostObject,
        disk_id: Option<&str>,
        size: Option<u64>,
        portal: Option<&Portal>,
    ) -> HostResult<Method<'a>> {
        let entry = Entry {
            method: method.to_owned(),
            object: object.key(),
            disk_id: disk_id.map(str::to_owned),
            size,
            portal: portal.cloned(),
            boot: o.w.uptime().map(BootStamp::at),
            instance: self.instance.clone(),
        };
        let key = serde_json::to_string(&entry)
            .map_err(|e| o.fail(HostErrorKind::Other, e.to_string()))?;
        self.ledger.set(&key, true).map_err(|e| {
            o.fail(
                HostErrorKind::Other,
                format!(
                    "cannot record {method} on {object} before calling it: {e}; nothing was called"
                ),
            )
        })?;
        Ok(Method { calls: self, key })
    }

    /// [`Host::in_flight`](crate::host::Host::in_flight) for `object` (module docs). Ledger entries that are over
    /// (outcome shown, an earlier boot, past the bound, this process's own) are dropped.
    pub(crate) fn query(&self, o: &Ops<'_>, object: &HostObject) -> HostResult<InFlight> {
        let key = object.key();
        if let Some(op) = self.lock().get(&key).and_then(|ops| ops.first().copied()) {
            return Ok(InFlight::Running(format!(
                "{op} on {object}, issued by this driver, is still running"
            )));
        }
        self.query_ledger(o, object)
    }

    /// What the ledger says of `object`: [`InFlight::Running`] while a method of an earlier process may still run.
    fn query_ledger(&self, o: &Ops<'_>, object: &HostObject) -> HostResult<InFlight> {
        let now = o.w.uptime();
        for (raw, entry) in self.entries(&object.key()) {
            let age = match (entry.boot, now) {
                (Some(then), Some(now)) => match then.since(now) {
                    Since::EarlierBoot => {
                        self.drop_entry(&raw, &entry, "the node rebooted since it was called");
                        continue;
                    }
                    Since::Ago(age) => Some(age),
                },
                _ => None,
            };
            if entry.instance == self.instance {
                // Its operation is not running any more: the method answered (its entry could not be removed then).
                self.drop_entry(&raw, &entry, "it answered");
                continue;
            }
            if outcome_shows(o, object, &entry)? {
                self.drop_entry(&raw, &entry, "its outcome shows");
                continue;
            }
            if age.is_some_and(|a| a >= OUTLIVE_BOUND) {
                warn!(method = %entry.method, object = %object, "a WMI method an earlier driver process called \
                      never showed its outcome: taken to be over after the bound");
                self.drop_entry(&raw, &entry, "past the bound");
                continue;
            }
            let ago = age.map_or_else(|| "some time".to_owned(), |a| format!("{}s", a.as_secs()));
            return Ok(InFlight::Running(format!(
                "{} on {object}, called {ago} ago by a driver process that has since gone (a WMI provider finishes a \
                 method whose caller died), has not shown its outcome",
                entry.method
            )));
        }
        Ok(InFlight::Ended)
    }

    /// Refuse (Unavailable) to start a call on `object` while a method an earlier process called on it may still
    /// run (the protocol learns the same before it issues anything; this is the backend's own guard).
    pub(crate) fn refuse_while_in_flight(
        &self,
        o: &Ops<'_>,
        object: &HostObject,
    ) -> HostResult<()> {
        if self.entries(&object.key()).is_empty() {
            return Ok(());
        }
        match self.query_ledger(o, object)? {
            InFlight::Running(what) => Err(o.fail(
                HostErrorKind::InFlight,
                format!("{what}: nothing else is started on it until it ends"),
            )),
            _ => Ok(()),
        }
    }

    /// The ledger's entries on the object keyed `key` (raw text, decoded).
    fn entries(&self, key: &str) -> Vec<(String, Entry)> {
        self.ledger
            .keys()
            .into_iter()
            .filter_map(|raw| {
                let entry: Entry = serde_json::from_str(&raw).ok()?;
                (entry.object == key).then_some((raw, entry))
            })
            .collect()
    }

    fn drop_entry(&self, raw: &str, entry: &Entry, why: &str) {
        info!(method = %entry.method, object = %entry.object, why, "a WMI method of an earlier driver process is over");
        if let Err(e) = self.ledger.set(raw, false) {
            warn!(error = %e, "cannot remove an entry from the in-flight ledger");
        }
    }
}

/// Whether Windows shows what `entry`'s method does on `object` (or that the object it was called on is gone, so it
/// cannot still act on it).
fn outcome_shows(o: &Ops<'_>, object: &HostObject, entry: &Entry) -> HostResult<bool> {
    match object {
        HostObject::Disk(n) => {
            let disk = match super::disk::one(o, *n) {
                Ok(d) => d,
                Err(e) if e.kind == HostErrorKind::NotFound => return Ok(true),
                Err(e) => return Err(e),
            };
            if entry.disk_id.is_some() && disk.unique_id != entry.disk_id {
                // Another disk has this number now: the one the method was called on departed.
                return Ok(true);
            }
            Ok(match entry.method.as_str() {
                INITIALIZE => super::blank::needs_initialize(disk.partition_style) == Ok(false),
                _ => {
                    o.w.partitions(o.c, Some(*n))
                        .map_err(|e| o.err(e))?
                        .iter()
                        .any(|p| !p.is_microsoft_reserved())
                }
            })
        }
        HostObject::Volume(v) => {
            let vol = match super::volume::one(o, v) {
                Ok(v) => v,
                Err(e) if e.kind == HostErrorKind::NotFound => return Ok(true),
                Err(e) => return Err(e),
            };
            if entry.method == RESIZE {
                let size =
                    o.w.volume_partitions(o.c, &vol.path)
                        .map_err(|e| o.err(e))?
                        .first()
                        .map(|p| p.size);
                return Ok(match (size, entry.size) {
                    // Within one extent of the size asked for (Resize aligns the partition).
                    (Some(size), Some(want)) => size.saturating_add(1 << 20) >= want,
                    (None, _) => true,
                    (Some(_), None) => false,
                });
            }
            Ok(vol.file_system_type.is_formatted())
        }
        // A login landed: the target has a session through its portal (a connection to it; its disks may come later).
        // Not merely a session of the target: a multipath login's target already has the first portal's.
        HostObject::Target(iqn) if entry.method == CONNECT => {
            super::iscsi::has_session_through(o, iqn, entry.portal.as_ref())
        }
        HostObject::Target(iqn) => Ok(super::iscsi::target_disks(o, iqn)?.is_empty()),
        // A creation landed: the share has a global mapping.
        HostObject::Mapping(root) if entry.method == CREATE_MAPPING => {
            Ok(!super::smb::mappings_of(o, root)?.is_empty())
        }
        // The share has no global mapping any more (`Get-SmbGlobalMapping`'s list): the removal landed.
        HostObject::Mapping(root) => Ok(super::smb::mappings_of(o, root)?.is_empty()),
    }
}

/// How long before a destructive run-to-end operation's facade calls are cut off: the same bound after which the
/// driver takes such a call to be over.
pub(super) const RUN_TO_END_BUDGET: Duration = OUTLIVE_BOUND;
