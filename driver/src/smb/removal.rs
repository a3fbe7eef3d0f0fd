//! SMB removals that may outlive their caller (issue 37 item 9): the staging link's `Rmdir` and the share's
//! `RemoveSmbGlobalMapping`.
//!
//! Both can finish after the RPC that issued them gave up: csi-proxy runs a call to its end whatever its client does
//! (no request context reaches `pkg/os` in any release), and natively the running facade call finishes on its thread.
//! A stage arriving meanwhile would find the staging link or the mapping still there, succeed on it ("already
//! staged", or a link added to the existing mapping), and then lose it when the late removal lands. So a removal is
//! treated like a destructive call that may still run (`crate::lifecycle::outlive`, shared with the iSCSI logout):
//!
//! * **announced** — the volume's record carries it ([`SmbRemoval`], durable) before the call is issued: the unstage's
//!   `Rmdir` (and, when the unstage is the share's last user, its `RemoveSmbGlobalMapping`) in one write, a first
//!   stage's rollback and a stage's 1219/85 repair before their `RemoveSmbGlobalMapping`;
//! * **run to its end** — the call runs on its own task with its own bound ([`OUTLIVE_BOUND`]), not the RPC's
//!   deadline, so this process learns when it answers (the caller stops waiting at its deadline, UNAVAILABLE or
//!   DEADLINE_EXCEEDED as before, and the announcement stays);
//! * **waited for** — a stage of the share (any volume: the mapping) or of the announcing volume (its link) first
//!   looks for unsettled announcements. One whose call runs on a task of this very process is waited for, within the
//!   stage's deadline, on the task's answer ([`Outlive::changes`]: a notification, no polling), and the stage goes
//!   on; any other makes the stage answer UNAVAILABLE while it may still run, and kubelet retries. One is over
//!   when this process saw its call answer, when the node rebooted since (its boot stamp), when its outcome shows (the
//!   staging path is gone: the `Rmdir`), or after [`OUTLIVE_BOUND`] by an age no wall clock moves. The announcement
//!   leaves with the record (the unstage ends by removing it) or with the stage's next write of it.
//!
//! What it costs: one more record write per unstage (two when another unstage of the share ended meanwhile), a scan of
//! the share's records in memory at each stage, and one `PathExists` per look at an unsettled announcement of a link.
//! A mapping removal announced by a process that died is learned natively from the backend's ledger of calls in
//! flight (`host/native/inflight.rs`: its `MSFT_SmbGlobalMapping.Remove` runs until the share's mapping list shows
//! it gone). Limits: through csi-proxy it cannot be observed (no v1 API lists mappings): stages of that share then
//! wait for a reboot or the bound, also after kubelet's retried unstage of the announcing volume removed its record
//! (its own removal answering proves nothing of the earlier call, which still runs in its own PowerShell process): the
//! announcement is kept in a file of its own (`orphans.rs`) until it is over.

use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use super::SmbRecord;
use super::orphans::{Orphan, Orphans};
use crate::error::Error;
use crate::host::{
    BootStamp, Host, HostErrorKind, HostObject, HostOp, HostPath, HostResult, Since, UncPath,
};
use crate::lifecycle::creation::Creations;
use crate::lifecycle::outlive::{OUTLIVE_BOUND, Outlive, WAY_BACK, stamp_now, to_end};
use crate::lifecycle::{Calls, Context, host_error};
use crate::locks::Deadline;
use crate::state::VolumeRecord;

/// Removals announced in a volume's record before they were issued, their outcome not yet known (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmbRemoval {
    /// The staging link's `Rmdir`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link: bool,
    /// The share's `RemoveSmbGlobalMapping`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mapping: bool,
    /// The node's uptime when it was announced (absent: the backend could not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootStamp>,
    /// When it was announced (milliseconds since the Unix epoch): tells announcements apart, never ages one.
    pub at_unix_ms: u64,
}

/// What this process knows of the SMB removals it met, shared by the protocol's clones; and of the creating calls of
/// its stages (`crate::lifecycle::creation`: the mapping with its staging link, the subDir), which an unstage waits for
/// as a stage waits for a removal.
#[derive(Clone, Debug, Default)]
pub(crate) struct Removals(Outlive, pub(super) Creations, Orphans);

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Which announced removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Call {
    /// The staging link's `Rmdir`.
    Link,
    /// The share's `RemoveSmbGlobalMapping`.
    Mapping,
}

impl Removals {
    /// Every later change of what this process knows of its announcements ([`Outlive::changes`]).
    #[cfg(test)]
    pub(super) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.changes()
    }

    /// How many stages wait for a removal of this process right now ([`Outlive::waiting`]).
    #[cfg(test)]
    pub(super) fn waiting(&self) -> tokio::sync::watch::Receiver<usize> {
        self.0.waiting()
    }

    /// The key of `volume_id`'s announced `call` in `r`.
    fn key(volume_id: &str, r: &SmbRemoval, call: Call) -> String {
        format!("smb-removal:{volume_id}:{}:{call:?}", r.at_unix_ms)
    }

    /// Announce the removals `link` and `mapping` of `rec`'s volume (its facts `facts`): written and durable before
    /// they are issued. Returns the facts carrying the announcement (for the caller's next write).
    pub(super) async fn announce<H: Host>(
        &self,
        cx: Context<'_, H>,
        rec: &VolumeRecord,
        facts: &SmbRecord,
        link: bool,
        mapping: bool,
    ) -> Result<SmbRecord, Error> {
        let removal = SmbRemoval {
            link,
            mapping,
            boot: stamp_now(cx.calls(Deadline::after(OUTLIVE_BOUND)).host()),
            at_unix_ms: unix_ms().max(facts.removing.as_ref().map_or(0, |r| r.at_unix_ms + 1)),
        };
        // An earlier mapping removal of the record that may still run (a process that died in it, or this process's
        // task that outlived its unstage) must not leave with the record's announcement: it is kept on its own first
        // (`orphans.rs`), so the share's stages go on waiting for it after this unstage removed the record.
        if let Some(old) = facts.removing.as_ref().filter(|o| o.mapping)
            && self
                .0
                .may_run(&Self::key(&rec.volume_id, old, Call::Mapping))
        {
            let orphan = Orphan {
                volume_id: rec.volume_id.clone(),
                root: facts.root.clone(),
                removal: old.clone(),
            };
            self.2.keep(cx.store().dir(), orphan).await?;
        }
        for (on, call) in [(link, Call::Link), (mapping, Call::Mapping)] {
            if on {
                self.0.start(&Self::key(&rec.volume_id, &removal, call));
            }
        }
        let facts = SmbRecord {
            removing: Some(removal),
            ..facts.clone()
        };
        cx.store().put_volume(&rec.with_details(&facts)?).await?;
        Ok(facts)
    }

    /// Run a removal of `volume_id`'s announcement `r` to its end on its own task (module docs); the caller waits
    /// until `caller`'s deadline (then DEADLINE_EXCEEDED, the call going on). `call` gets the host and the removal's
    /// own deadline.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn to_end<H, F, Fut>(
        &self,
        host: &H,
        volume_id: &str,
        r: &SmbRemoval,
        which: Call,
        op: HostOp,
        caller: Deadline,
        call: F,
    ) -> HostResult<()>
    where
        H: Host,
        F: FnOnce(H, Deadline) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = HostResult<()>> + Send + 'static,
    {
        let key = Self::key(volume_id, r, which);
        let outlive = self.0.clone();
        // Stages of the share that meet the announcement meanwhile wait for this task's end (`wait_settled`).
        outlive.runs_here(&key);
        let late = "did not answer before the deadline; it goes on, announced in the volume's record, and stages of the \
                    share wait for it";
        to_end(
            op,
            caller,
            late,
            call(host.clone(), Deadline::after(OUTLIVE_BOUND)),
            move |answer| {
                // An answer ends it; its own bound passing (or csi-proxy gone) leaves it to the bound's rule.
                if !answer.as_ref().is_err_and(|e| e.kind.is_uncertain()) {
                    outlive.end(&key, "this process saw it answer");
                }
                outlive.left_here(&key);
            },
        )
        .await
    }

    /// Wait, within `h`'s deadline, for the removals a stage of `volume_id` on share `root` must not overlap
    /// ([`Removals::unsettled`]) while their calls run on a task of this very process: such a call's end is signalled
    /// ([`Outlive::changes`]), so the stage goes on as soon as it answered instead of costing kubelet a retry. `None`
    /// once none may still run; the message of the first one that may (the stage answers UNAVAILABLE with it) when it
    /// runs out of this process's sight (an earlier process announced it, or its task returned without an answer) or
    /// the deadline came first.
    pub(super) async fn wait_settled<H: Host>(
        &self,
        cx: Context<'_, H>,
        h: &Calls<'_, H>,
        volume_id: &str,
        root: &str,
    ) -> Result<Option<String>, Error> {
        loop {
            // Subscribed before the look: an end between the look and the wait wakes the wait.
            let mut changes = self.0.changes();
            let Some((why, key)) = self.unsettled(cx, h, volume_id, root).await? else {
                return Ok(None);
            };
            if !self.0.here(&key) {
                return Ok(Some(why));
            }
            debug!(
                volume_id,
                root, "waiting for this process's running removal of the share to answer"
            );
            if !self
                .0
                .wait_change(&mut changes, h.deadline().instant())
                .await
            {
                return Ok(Some(why));
            }
        }
    }

    /// Whether a removal a stage of `volume_id` on share `root` must not overlap may still run (no wait).
    pub(super) async fn unsettled_now<H: Host>(
        &self,
        cx: Context<'_, H>,
        h: &Calls<'_, H>,
        volume_id: &str,
        root: &str,
    ) -> Result<bool, Error> {
        Ok(self.unsettled(cx, h, volume_id, root).await?.is_some())
    }

    /// The first unsettled removal a stage of `volume_id` at `staging` on share `root` must wait for: an announced
    /// mapping removal of any volume of the share, or this volume's own announced link removal. `None` when none may
    /// still run. The message names it (the stage answers UNAVAILABLE with it), with the announcement's key.
    async fn unsettled<H: Host>(
        &self,
        cx: Context<'_, H>,
        h: &Calls<'_, H>,
        volume_id: &str,
        root: &str,
    ) -> Result<Option<(String, String)>, Error> {
        let announced = cx.records::<SmbRecord>()?.into_iter().filter(|(rec, r)| {
            r.removing.as_ref().is_some_and(|x| {
                (x.mapping && crate::host::names_equal(&r.root, root))
                    || (x.link && rec.volume_id == volume_id)
            })
        });
        for (rec, r) in announced {
            let Some(x) = r.removing.as_ref() else {
                continue;
            };
            let call = if x.mapping && crate::host::names_equal(&r.root, root) {
                Call::Mapping
            } else {
                Call::Link
            };
            let key = Self::key(&rec.volume_id, x, call);
            if self
                .settled(
                    cx,
                    h,
                    &rec.volume_id,
                    &rec.staging_path,
                    x,
                    call,
                    &key,
                    &r.root,
                )
                .await?
            {
                continue;
            }
            let what = match call {
                Call::Mapping => format!("the removal of the SMB global mapping of {}", r.root),
                Call::Link => format!("the removal of the staging link {}", rec.staging_path),
            };
            let why = format!(
                "{what}, issued by the unstage of volume {:?} {}s ago, has not finished: it may still run on the node (a \
                 removal goes on after the call that issued it gave up) and would take away what this stage makes; \
                 waiting for it (at most {} min from its start; {WAY_BACK})",
                rec.volume_id,
                self.0.age(&key).as_secs(),
                OUTLIVE_BOUND.as_secs() / 60
            );
            return Ok(Some((why, key)));
        }
        // Those that outlived their volume's record (`orphans.rs`).
        for o in self.2.of_share(cx.store().dir(), root) {
            let key = Self::key(&o.volume_id, &o.removal, Call::Mapping);
            if self
                .settled(
                    cx,
                    h,
                    &o.volume_id,
                    "",
                    &o.removal,
                    Call::Mapping,
                    &key,
                    &o.root,
                )
                .await?
            {
                self.2.settled(cx.store().dir(), &o).await?;
                continue;
            }
            let why = format!(
                "the removal of the SMB global mapping of {}, issued by an unstage of volume {:?} (unstaged since) {}s \
                 ago, has not finished: it may still run on the node (a removal goes on after the call that issued it \
                 gave up, and the driver restarted meanwhile) and would take away what this stage makes; waiting for it \
                 (at most {} min from its start; {WAY_BACK})",
                o.root,
                o.volume_id,
                self.0.age(&key).as_secs(),
                OUTLIVE_BOUND.as_secs() / 60
            );
            return Ok(Some((why, key)));
        }
        Ok(None)
    }

    /// Whether the announcement `x` of `rec` (key `key`, on share `root`) can no longer be running.
    #[allow(clippy::too_many_arguments)]
    async fn settled<H: Host>(
        &self,
        cx: Context<'_, H>,
        h: &Calls<'_, H>,
        volume_id: &str,
        staging_path: &str,
        x: &SmbRemoval,
        call: Call,
        key: &str,
        root: &str,
    ) -> Result<bool, Error> {
        if !self.0.may_run(key) {
            return Ok(true);
        }
        if let (Some(stamp), Some(now)) = (x.boot, h.host().uptime())
            && stamp.since(now) == Since::EarlierBoot
        {
            info!(
                volume_id,
                "an announced SMB removal is from an earlier boot: it cannot still run"
            );
            self.0.end(key, "the node rebooted since");
            return Ok(true);
        }
        if call == Call::Mapping && !self.0.here(key) {
            // Announced by an earlier process (or its task here returned without an answer): what the backend knows.
            // Natively its in-flight ledger holds the `MSFT_SmbGlobalMapping.Remove` until the share's mapping list
            // shows it gone; csi-proxy cannot list mappings (no v1 API does), so there the boot and the bound decide.
            self.0
                .learn(h, key, x.boot, &HostObject::Mapping(root.to_owned()))
                .await?;
        }
        if call == Call::Link
            && let Ok(staging) = cx.kubelet_root().host_path(staging_path)
        {
            // The link's removal shows: nothing is at the staging path any more.
            match h.path_exists(&staging).await {
                Ok(false) => {
                    self.0.end(key, "the staging link is gone");
                    return Ok(true);
                }
                Ok(true) => {}
                Err(e) if e.kind.is_uncertain() => return Err(host_error(e, &staging)),
                Err(e) => {
                    debug!(staging = %staging, error = %e.message, "cannot tell whether the link is gone")
                }
            }
        }
        Ok(!self.0.may_run(key))
    }

    /// Forget what this process knew of `volume_id`'s announcement `r` (its record is gone or rewritten without it).
    pub(super) fn forget(&self, volume_id: &str, r: &SmbRemoval) {
        for call in [Call::Link, Call::Mapping] {
            self.0.done(&Self::key(volume_id, r, call));
        }
    }

    /// The removals announced in `volume_id`'s record answered: the announcement leaves the record (a record that
    /// stays — a failed stage's, an incomplete rollback's — must not make a restarted driver wait for them).
    pub(super) async fn answered<H: Host>(
        &self,
        cx: Context<'_, H>,
        volume_id: &str,
    ) -> Result<(), Error> {
        let Some(rec) = cx.store().volume(volume_id)? else {
            return Ok(());
        };
        let Some(mut facts) = rec.details::<SmbRecord>()? else {
            return Ok(());
        };
        if let Some(r) = facts.removing.take() {
            cx.store().put_volume(&rec.with_details(&facts)?).await?;
            self.forget(volume_id, &r);
        }
        Ok(())
    }

    /// Announce a mapping removal in `volume_id`'s record (when it has one) and run it to its end; the announcement
    /// leaves the record once it answered.
    pub(super) async fn remove_mapping<H: Host>(
        &self,
        cx: Context<'_, H>,
        h: &Calls<'_, H>,
        volume_id: &str,
        remote: &UncPath,
    ) -> Result<HostResult<()>, Error> {
        let announced = match cx.store().volume(volume_id)? {
            Some(rec) => match rec.details::<SmbRecord>()? {
                Some(facts) => self.announce(cx, &rec, &facts, false, true).await?.removing,
                None => None,
            },
            None => None,
        };
        let Some(r) = announced else {
            return Ok(super::mapping::remove_mapping(h, remote).await);
        };
        let answer = remove_mapping_to_end(self, h, volume_id, &r, remote).await;
        if answer.as_ref().is_ok() || answer.as_ref().is_err_and(|e| !e.kind.is_uncertain()) {
            self.answered(cx, volume_id).await?;
        }
        Ok(answer)
    }
}

/// `Rmdir` of the staging link, run to its end (module docs); "not found" counts as done.
pub(super) async fn remove_link<H: Host>(
    removals: &Removals,
    h: &Calls<'_, H>,
    volume_id: &str,
    r: &SmbRemoval,
    staging: &HostPath,
) -> Result<(), Error> {
    let path = staging.clone();
    let answer = removals
        .to_end(
            h.host(),
            volume_id,
            r,
            Call::Link,
            HostOp::Rmdir,
            h.deadline(),
            move |host: H, d| async move { host.rmdir(&path, false, d).await },
        )
        .await;
    match answer {
        Ok(()) => {
            debug!(staging = %staging, "staging link removed");
            Ok(())
        }
        Err(e) if e.kind == HostErrorKind::NotFound => Ok(()),
        Err(e) => Err(host_error(e, staging)),
    }
}

/// `RemoveSmbGlobalMapping` of `remote`'s root, run to its end (module docs).
pub(super) async fn remove_mapping_to_end<H: Host>(
    removals: &Removals,
    h: &Calls<'_, H>,
    volume_id: &str,
    r: &SmbRemoval,
    remote: &UncPath,
) -> HostResult<()> {
    let remote = remote.clone();
    removals
        .to_end(
            h.host(),
            volume_id,
            r,
            Call::Mapping,
            HostOp::RemoveSmbGlobalMapping,
            h.deadline(),
            move |host, d| async move { host.remove_smb_global_mapping(&remote, d).await },
        )
        .await
}
