//! Directory links in the sandbox: real OS symlinks where the platform makes them, emulated links otherwise.
//!
//! Wine 8 stubs `CreateSymbolicLinkW` (it reports success and creates nothing), so a Windows build of the
//! simulator under Wine cannot rely on the OS. The Windows twin probes this once per sandbox
//! ([`super::platform::link_mode`]) and falls back to [`LinkMode::Emulated`]: a link is then a small marker file
//! holding the target's sandbox path, and every path lookup of the host model follows such files exactly where the
//! OS would follow a symlink (intermediate components always, the last one only for "follow" operations such as
//! opening a file). The rest of the model asks this module, never the OS, what a link is.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// First bytes of an emulated link file; the target's sandbox path follows on the same line.
const MARKER: &str = "wincsi-sim-emulated-link:";

/// Longest emulated link file accepted (a marker plus one path).
const MAX_LINK_FILE: u64 = 8 * 1024;

/// Link hops followed before giving up (Windows and Linux both stop around this depth).
const MAX_HOPS: usize = 40;

/// How links are represented in a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkMode {
    /// Real OS symlinks; the OS follows them.
    Native,
    /// Marker files interpreted by the simulator (platforms that cannot create directory symlinks).
    Emulated,
}

impl LinkMode {
    /// Human-readable name for the startup log.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            LinkMode::Native => "native symbolic links",
            LinkMode::Emulated => "emulated links (the OS cannot create directory symbolic links)",
        }
    }

    /// Creates a link `link` → `target`; fails with `AlreadyExists` if `link` exists and `NotFound` if its parent
    /// does not.
    pub(crate) fn create(self, target: &Path, link: &Path) -> std::io::Result<()> {
        match self {
            LinkMode::Native => super::platform::symlink_dir(target, link),
            LinkMode::Emulated => {
                let target = target.to_str().ok_or_else(|| {
                    std::io::Error::new(ErrorKind::InvalidInput, "link target is not UTF-8")
                })?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(link)?;
                f.write_all(format!("{MARKER}{target}").as_bytes())?;
                f.sync_all()
            }
        }
    }

    /// The target of `p` if `p` itself is a link (not following it), as it was given at creation.
    pub(crate) fn target(self, p: &Path) -> Option<PathBuf> {
        match self {
            LinkMode::Native => std::fs::read_link(p).ok(),
            LinkMode::Emulated => {
                let meta = p.symlink_metadata().ok()?;
                if !meta.is_file() || meta.len() > MAX_LINK_FILE {
                    return None;
                }
                let text = std::fs::read_to_string(p).ok()?;
                text.strip_prefix(MARKER).map(PathBuf::from)
            }
        }
    }

    /// Whether `p` itself is a link (lstat semantics).
    pub(crate) fn is_link(self, p: &Path) -> bool {
        match self {
            LinkMode::Native => p
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink()),
            LinkMode::Emulated => self.target(p).is_some(),
        }
    }

    /// `p` with every link followed, the last component included (what `open`/`stat` see). Native links are left
    /// to the OS, so this is the identity there.
    pub(crate) fn resolve(self, p: &Path) -> PathBuf {
        match self {
            LinkMode::Native => p.to_path_buf(),
            LinkMode::Emulated => self.resolve_depth(p, &mut 0),
        }
    }

    /// `p` (whose parent is already resolved) with its last component followed while it is a link.
    pub(crate) fn follow_last(self, p: PathBuf) -> PathBuf {
        match self {
            LinkMode::Native => p,
            LinkMode::Emulated => self.follow_depth(p, &mut 0),
        }
    }

    /// `std::fs::canonicalize` that also follows emulated links.
    pub(crate) fn canonicalize(self, p: &Path) -> std::io::Result<PathBuf> {
        std::fs::canonicalize(self.resolve(p))
    }

    /// `hops` is the budget shared by a whole resolution, so a cycle costs at most [`MAX_HOPS`] link reads.
    fn resolve_depth(self, p: &Path, hops: &mut usize) -> PathBuf {
        let mut cur = PathBuf::new();
        for comp in p.components() {
            cur.push(comp);
            cur = self.follow_depth(cur, hops);
        }
        cur
    }

    fn follow_depth(self, mut cur: PathBuf, hops: &mut usize) -> PathBuf {
        while *hops < MAX_HOPS {
            let Some(t) = self.target(&cur) else { break };
            *hops += 1;
            // A target may itself run through links (an SMB link points below a share's presence link).
            cur = self.resolve_depth(&t, hops);
        }
        cur
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_links_resolve_through_chains_and_keep_lstat_semantics() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let m = LinkMode::Emulated;
        std::fs::create_dir_all(root.join("store/share/sub")).unwrap();
        std::fs::create_dir_all(root.join("unc/srv")).unwrap();
        std::fs::create_dir_all(root.join("c/k")).unwrap();
        m.create(&root.join("store/share"), &root.join("unc/srv/share"))
            .unwrap();
        m.create(&root.join("unc/srv/share/sub"), &root.join("c/k/stage"))
            .unwrap();
        m.create(&root.join("c/k/stage"), &root.join("c/k/publish"))
            .unwrap();

        assert!(m.is_link(&root.join("c/k/publish")));
        assert!(!m.is_link(&root.join("c/k")));
        assert_eq!(
            m.target(&root.join("c/k/publish")),
            Some(root.join("c/k/stage"))
        );
        assert_eq!(
            m.resolve(&root.join("c/k/publish/f.txt")),
            root.join("store/share/sub/f.txt")
        );
        std::fs::write(m.resolve(&root.join("c/k/publish/f.txt")), "data").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("store/share/sub/f.txt")).unwrap(),
            "data"
        );
        assert_eq!(
            m.canonicalize(&root.join("c/k/publish")).unwrap(),
            std::fs::canonicalize(root.join("store/share/sub")).unwrap()
        );
        // Creating over an existing entry fails like the OS call; removing the link keeps the target.
        let again = m.create(&root.join("x"), &root.join("c/k/publish"));
        assert_eq!(again.unwrap_err().kind(), ErrorKind::AlreadyExists);
        std::fs::remove_file(root.join("c/k/publish")).unwrap();
        assert!(root.join("store/share/sub/f.txt").exists());
        // A dangling link is still a link; following it leads nowhere.
        std::fs::remove_file(root.join("unc/srv/share")).unwrap();
        assert!(m.is_link(&root.join("c/k/stage")));
        assert!(m.resolve(&root.join("c/k/stage")).metadata().is_err());
    }

    #[test]
    fn emulated_link_cycles_terminate() {
        let dir = tempfile::tempdir().unwrap();
        let m = LinkMode::Emulated;
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        m.create(&b, &a).unwrap();
        m.create(&a, &b).unwrap();
        let _ = m.resolve(&a.join("x"));
    }

    #[test]
    fn ordinary_files_are_not_links() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "wincsi-sim-emulated").unwrap();
        assert!(!LinkMode::Emulated.is_link(&f));
        assert_eq!(LinkMode::Emulated.resolve(&f), f);
    }
}
