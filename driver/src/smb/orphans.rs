//! SMB mapping removals that may still run after their volume's record is gone (issue 37 item 9).
//!
//! An unstage announces the share's `RemoveSmbGlobalMapping` in the volume's record before issuing it
//! (`removal.rs`), and stages of the share wait while it may still run. When the driver dies with that call in flight,
//! kubelet's retried unstage of the volume announces its own removals in the same record, and the record goes once
//! they answered — but the earlier process's call may still be running: through csi-proxy, whose `pkg/os` runs a
//! call to its end whatever its client does, `Remove-SmbGlobalMapping` in a PowerShell process that nothing ends (no
//! v1 API lists mappings or calls, and a csi-proxy restart does not end the processes it started). Had the record's
//! announcement simply been overwritten, the next stage of the share would map it again, and the late removal would
//! take that mapping from under the new pod.
//!
//! So an announced mapping removal that may still run (not seen to answer by this process, no reboot since, not past
//! [`crate::lifecycle::outlive::OUTLIVE_BOUND`]) is kept, when its record is about to lose it, as a file of its own in
//! `<state-dir>/smb-removals/` (durable before the record's new announcement, which is durable before any host call).
//! Stages of the share treat it as the record's announcement was treated: they answer UNAVAILABLE while it may
//! still run (natively the backend's ledger settles it at once; through csi-proxy a reboot or the bound does), and the
//! first look that finds it over removes the file. What it costs: one file write per retried unstage that met such an
//! announcement (rare: a driver killed inside an unstage), one directory read per process, and through csi-proxy a
//! wait of up to the bound for new stages of that share on that node, which a reboot ends at once.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::removal::SmbRemoval;
use crate::error::Error;
use crate::state::{file_key, remove_file_durably, write_file_durably};

/// The directory under `--state-dir` holding them.
pub(crate) const DIR: &str = "smb-removals";

/// A mapping removal announced by a volume whose record no longer carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Orphan {
    /// The volume whose unstage (or stage repair) announced it.
    pub volume_id: String,
    /// The share's root (`\\server\share`), as the volume's record named it.
    pub root: String,
    /// The announcement itself (its boot stamp and key).
    pub removal: SmbRemoval,
}

impl Orphan {
    fn file_name(&self) -> String {
        format!(
            "{}.json",
            file_key(&format!("{}:{}", self.volume_id, self.removal.at_unix_ms))
        )
    }
}

/// The orphaned removals this process knows (read from the directory at its first use).
#[derive(Clone, Debug, Default)]
pub(super) struct Orphans(Arc<Mutex<Option<Vec<Orphan>>>>);

impl Orphans {
    fn with<T>(&self, state_dir: &Path, f: impl FnOnce(&mut Vec<Orphan>) -> T) -> T {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let list = slot.get_or_insert_with(|| load(&state_dir.join(DIR)));
        f(list)
    }

    /// Those of share `root` (compared as Windows compares names).
    pub(super) fn of_share(&self, state_dir: &Path, root: &str) -> Vec<Orphan> {
        self.with(state_dir, |list| {
            list.iter()
                .filter(|o| crate::host::names_equal(&o.root, root))
                .cloned()
                .collect()
        })
    }

    /// Keep `orphan` (durable when this returns).
    pub(super) async fn keep(&self, state_dir: &Path, orphan: Orphan) -> Result<(), Error> {
        let dir = state_dir.join(DIR);
        let bytes = serde_json::to_vec_pretty(&orphan)
            .map_err(|e| Error::Internal(format!("encoding an SMB removal: {e}")))?;
        let name = orphan.file_name();
        let at = dir.clone();
        blocking(move || write_file_durably(&at, &name, &bytes), &dir).await?;
        info!(volume_id = %orphan.volume_id, root = %orphan.root, "an SMB mapping removal that may still run outlives \
              its volume's record: stages of the share wait for it");
        self.with(state_dir, |list| {
            if !list.contains(&orphan) {
                list.push(orphan);
            }
        });
        Ok(())
    }

    /// `orphan` can no longer run: its file goes.
    pub(super) async fn settled(&self, state_dir: &Path, orphan: &Orphan) -> Result<(), Error> {
        let dir = state_dir.join(DIR);
        let name = orphan.file_name();
        let at = dir.clone();
        blocking(move || remove_file_durably(&at, &name), &dir).await?;
        self.with(state_dir, |list| list.retain(|o| o != orphan));
        Ok(())
    }
}

async fn blocking(
    f: impl FnOnce() -> std::io::Result<()> + Send + 'static,
    dir: &Path,
) -> Result<(), Error> {
    let what = dir.display().to_string();
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("writing in {what}: {e}")))?
        .map_err(|e| Error::Internal(format!("writing in {what}: {e}")))
}

/// Every orphan file in `dir`. One that does not read is kept in place and logged: its share is unknown, so it cannot
/// be honoured (the same as a record quarantined).
fn load(dir: &PathBuf) -> Vec<Orphan> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Orphan>(&b).map_err(|e| e.to_string()))
        {
            Ok(o) => out.push(o),
            Err(e) => {
                warn!(file = %path.display(), error = %e, "an SMB removal file does not read: ignored")
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orphan(volume_id: &str, root: &str, at: u64) -> Orphan {
        Orphan {
            volume_id: volume_id.into(),
            root: root.into(),
            removal: SmbRemoval {
                link: false,
                mapping: true,
                boot: None,
                at_unix_ms: at,
            },
        }
    }

    #[tokio::test]
    async fn kept_durably_read_back_by_a_new_process_and_gone_once_settled() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = orphan("v1", r"\\srv\share", 1);
        let b = orphan("v2", r"\\nas\data", 2);
        let first = Orphans::default();
        first.keep(dir.path(), a.clone()).await.expect("keep");
        first.keep(dir.path(), b.clone()).await.expect("keep");
        // What a crash in the middle of a write leaves, and a file that does not read: neither is an orphan.
        std::fs::write(dir.path().join(DIR).join("x.json.tmp"), b"{").expect("tmp");
        std::fs::write(dir.path().join(DIR).join("bad.json"), b"{").expect("bad");
        // A restarted driver reads them back; the share's name compares as Windows compares it.
        let second = Orphans::default();
        assert_eq!(second.of_share(dir.path(), r"\\SRV\Share"), vec![a.clone()]);
        assert_eq!(second.of_share(dir.path(), r"\\other\share"), vec![]);
        second.settled(dir.path(), &a).await.expect("settled");
        assert!(second.of_share(dir.path(), r"\\srv\share").is_empty());
        assert!(
            Orphans::default()
                .of_share(dir.path(), r"\\srv\share")
                .is_empty(),
            "its file is gone"
        );
        assert_eq!(
            Orphans::default().of_share(dir.path(), r"\\nas\data"),
            vec![b]
        );
    }
}
