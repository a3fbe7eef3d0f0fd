//! Node-level files a protocol keeps in the state directory beside the records (e.g. `smb/orphans.rs`), written as
//! durably as a record: the same platform calls (`durable_unix.rs` / `durable_windows.rs`), one file at a time.

use std::path::Path;

use super::durable;

/// Write `bytes` to `dir`/`name` durably, outside the record store (a node-level file a protocol keeps beside the
/// records): a temporary file flushed, renamed over the name (on Windows with write-through, as a record), and the
/// directory flushed where the platform allows it (`durable::flush_refused`: as the committer, it then relies on the
/// rename). Blocking: call it off the async runtime.
pub fn write_file_durably(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    durable::replace(&tmp, &dir.join(name))?;
    sync_dir_unless_refused(dir)
}

/// Remove `dir`/`name` durably ([`write_file_durably`]'s twin); a file already gone is fine. Blocking.
pub fn remove_file_durably(dir: &Path, name: &str) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(name)) {
        Ok(()) => sync_dir_unless_refused(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_dir_unless_refused(dir: &Path) -> std::io::Result<()> {
    match durable::sync_dir(dir) {
        Err(e) if durable::flush_refused(&e) => Ok(()),
        other => other,
    }
}
