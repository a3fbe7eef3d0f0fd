//! Win32 path resolution on the sandbox: what `CreateFileW` and friends do with a path, component by component,
//! with Windows' error codes.
//!
//! Forms accepted: `C:\…`, `\\?\C:\…`, `\\server\share\…`, `\\?\UNC\server\share\…` and `\\?\Volume{GUID}\…`
//! (Microsoft's "Naming Files, Paths, and Namespaces"). Every intermediate link is followed, the last one only when
//! asked (`FILE_FLAG_OPEN_REPARSE_POINT` is the "not followed" case). Errors: 123 for a malformed path, 3 for a
//! missing intermediate component (or a dangling intermediate link), 2 for a missing final component when followed,
//! 267 for a file link used as a directory (the csi-proxy view's rule: Windows refuses to traverse a file symlink
//! as a directory), and for a hop into a share the error the model gives for that share
//! ([`crate::profile::UncErrors`]: 5, 53, 67, 1326, … by cause). The v1.3.0-era `\\?\\\server\share` link form
//! resolves only while `long_unc_links_resolve` (123 otherwise).

use std::path::{Path, PathBuf};

use crate::state::State;

/// `ERROR_FILE_NOT_FOUND`.
pub(crate) const FILE_NOT_FOUND: u32 = 2;
/// `ERROR_PATH_NOT_FOUND`.
pub(crate) const PATH_NOT_FOUND: u32 = 3;
/// `ERROR_INVALID_NAME`.
pub(crate) const INVALID_NAME: u32 = 123;
/// `ERROR_DIRECTORY`.
pub(crate) const DIRECTORY: u32 = 267;
/// `ERROR_CANT_RESOLVE_FILENAME`: too many links.
const CANT_RESOLVE: u32 = 1921;
const MAX_HOPS: usize = 40;

/// Where a Windows path starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Root {
    /// A drive letter (lower case).
    Drive(char),
    /// A volume GUID (lower case, no braces).
    Volume(String),
    /// `\\server\share` (lower case).
    Share(String, String),
    /// A sandbox store directory reached through a link (no access check left to make).
    Store(PathBuf),
}

/// A parsed Windows path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WinPath {
    pub(crate) root: Root,
    pub(crate) components: Vec<String>,
}

fn invalid_component(c: &str) -> bool {
    c.chars()
        .any(|ch| matches!(ch, '<' | '>' | ':' | '"' | '|' | '?' | '*') || ch.is_control())
}

impl WinPath {
    /// Parse a Win32 path (module docs); 123 otherwise.
    pub(crate) fn parse(path: &str) -> Result<Self, u32> {
        let p = path.replace('/', "\\");
        let (long, body) = match p.strip_prefix(r"\\?\") {
            Some(rest) => (true, rest.to_owned()),
            None => (false, p.clone()),
        };
        let comps = |tail: &str| -> Result<Vec<String>, u32> {
            let out = if long {
                // No normalisation after `\\?\`: `.`/`..` would be literal names; refuse them.
                let parts: Vec<String> = tail
                    .split('\\')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect();
                if parts.iter().any(|c| c == "." || c == "..") {
                    return Err(INVALID_NAME);
                }
                parts
            } else {
                crate::state::paths::normalise_components(tail)
            };
            if out.iter().any(|c| invalid_component(c)) {
                return Err(INVALID_NAME);
            }
            Ok(out)
        };
        let b = body.as_bytes();
        if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
            if b.len() > 2 && b[2] != b'\\' {
                return Err(INVALID_NAME);
            }
            return Ok(Self {
                root: Root::Drive((b[0] as char).to_ascii_lowercase()),
                components: comps(&body[2..])?,
            });
        }
        if long {
            if let Some(after) = body
                .strip_prefix("Volume{")
                .or_else(|| body.strip_prefix("volume{"))
            {
                let (guid, tail) = after.split_once('}').ok_or(INVALID_NAME)?;
                if guid.is_empty() || !guid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                    return Err(INVALID_NAME);
                }
                return Ok(Self {
                    root: Root::Volume(guid.to_ascii_lowercase()),
                    components: comps(tail)?,
                });
            }
            let unc = body
                .get(..4)
                .filter(|p| p.eq_ignore_ascii_case(r"UNC\"))
                .map(|_| &body[4..])
                .ok_or(INVALID_NAME)?;
            return Self::share(unc, comps);
        }
        match body.strip_prefix(r"\\") {
            Some(unc) if !unc.starts_with('\\') => Self::share(unc, comps),
            _ => Err(INVALID_NAME),
        }
    }

    fn share(unc: &str, comps: impl Fn(&str) -> Result<Vec<String>, u32>) -> Result<Self, u32> {
        let mut parts = unc.splitn(3, '\\');
        let server = parts.next().filter(|s| !s.is_empty()).ok_or(INVALID_NAME)?;
        let share = parts.next().filter(|s| !s.is_empty()).ok_or(INVALID_NAME)?;
        if invalid_component(server) || invalid_component(share) || share == "." || share == ".." {
            return Err(INVALID_NAME);
        }
        Ok(Self {
            root: Root::Share(server.to_lowercase(), share.to_lowercase()),
            components: comps(parts.next().unwrap_or(""))?,
        })
    }

    /// The Windows spelling (drive and UNC forms without `\\?\`).
    pub(crate) fn display(&self) -> String {
        let tail = self.components.join("\\");
        match &self.root {
            Root::Drive(d) => format!("{}:\\{tail}", d.to_ascii_uppercase()),
            Root::Volume(g) => format!(r"\\?\Volume{{{g}}}\{tail}"),
            Root::Share(s, sh) if tail.is_empty() => format!(r"\\{s}\{sh}"),
            Root::Share(s, sh) => format!(r"\\{s}\{sh}\{tail}"),
            Root::Store(p) => p.display().to_string(),
        }
    }
}

/// What a resolved path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Nothing (the parent exists).
    Missing,
    /// A file.
    File,
    /// A directory.
    Dir,
    /// A link, not followed: its sandbox target, and whether it is a file link (made without the directory flag).
    Link { target: PathBuf, file_link: bool },
}

/// A resolved path: the sandbox path of its last component (not followed unless asked) and what is there.
#[derive(Clone, Debug)]
pub(crate) struct Located {
    pub(crate) real: PathBuf,
    pub(crate) kind: Kind,
}

impl Located {
    /// Whether a link here is a volume mount point (its target is a volume's presence link).
    pub(crate) fn mount_point_guid(&self, st: &State) -> Option<String> {
        match &self.kind {
            Kind::Link { target, .. } => target
                .strip_prefix(st.layout.volumes_dir())
                .ok()
                .and_then(|rest| rest.iter().next())
                .map(|g| g.to_string_lossy().into_owned()),
            _ => None,
        }
    }
}

/// The sandbox start of a root, after the access checks Windows makes there.
fn root_dir(st: &State, root: &Root) -> Result<PathBuf, u32> {
    match root {
        Root::Drive(d) => {
            let p = st.layout.drive(*d);
            if p.is_dir() {
                Ok(p)
            } else {
                Err(PATH_NOT_FOUND)
            }
        }
        Root::Volume(g) => {
            // Present only while the volume is visible (disk attached and online).
            if st.layout.volume_link(g).symlink_metadata().is_ok() {
                Ok(st.layout.volume_store(g))
            } else {
                Err(PATH_NOT_FOUND)
            }
        }
        // Whether the share answers, and what the account may open on it, is judged with the whole path
        // (`locate_hops`).
        Root::Share(server, share) => Ok(st.layout.share_store(server, share)),
        Root::Store(p) => Ok(p.clone()),
    }
}

/// The Windows root and components a link's sandbox target stands for.
pub(crate) fn target_path(st: &State, target: &Path) -> Result<WinPath, u32> {
    let rel = target
        .strip_prefix(st.layout.root())
        .map_err(|_| FILE_NOT_FOUND)?;
    let parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let first = parts.first().ok_or(FILE_NOT_FOUND)?;
    let (root, rest) = match first.as_str() {
        "volumes" => (Root::Volume(parts.get(1).ok_or(FILE_NOT_FOUND)?.clone()), 2),
        "unc" | "unc-long" => {
            if first == "unc-long" && !st.behaviour.long_unc_links_resolve {
                return Err(INVALID_NAME);
            }
            let server = parts.get(1).ok_or(FILE_NOT_FOUND)?.clone();
            let share = parts.get(2).ok_or(FILE_NOT_FOUND)?.clone();
            (Root::Share(server, share), 3)
        }
        "store" => (Root::Store(target.to_path_buf()), parts.len()),
        d if d.len() == 1 => (Root::Drive(d.chars().next().unwrap_or('c')), 1),
        _ => return Err(FILE_NOT_FOUND),
    };
    Ok(WinPath {
        root,
        components: parts[rest..].to_vec(),
    })
}

/// The child of `dir` named `name`, NTFS-style (case-insensitive, the existing spelling wins).
fn child(dir: &Path, name: &str) -> Option<PathBuf> {
    let exact = dir.join(name);
    if exact.symlink_metadata().is_ok() {
        return Some(exact);
    }
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        e.file_name()
            .to_string_lossy()
            .eq_ignore_ascii_case(name)
            .then(|| e.path())
    })
}

fn kind_of(st: &State, real: &Path) -> Kind {
    let Ok(meta) = real.symlink_metadata() else {
        return Kind::Missing;
    };
    if let Some(target) = st.layout.links().target(real) {
        return Kind::Link {
            target,
            file_link: st.file_links.contains(real),
        };
    }
    if meta.is_dir() { Kind::Dir } else { Kind::File }
}

/// Resolve `path`: every intermediate link followed, the last one too when `follow`.
pub(crate) fn locate(st: &State, path: &WinPath, follow: bool) -> Result<Located, u32> {
    let mut hops = 0;
    locate_hops(st, path, follow, &mut hops)
}

fn locate_hops(st: &State, path: &WinPath, follow: bool, hops: &mut usize) -> Result<Located, u32> {
    if let Root::Share(server, share) = &path.root {
        // The share answers, and the server's per-directory access lets the account open the whole path (traversing
        // a directory it may not read is allowed: the traverse privilege every user holds by default).
        st.unc_access_at(server, share, &path.components)?;
    }
    let mut cur = root_dir(st, &path.root)?;
    let n = path.components.len();
    if n == 0 {
        return Ok(Located {
            kind: kind_of(st, &cur),
            real: cur,
        });
    }
    for (i, comp) in path.components.iter().enumerate() {
        let last = i + 1 == n;
        let Some(real) = child(&cur, comp) else {
            return if last {
                Ok(Located {
                    real: cur.join(comp),
                    kind: Kind::Missing,
                })
            } else {
                Err(PATH_NOT_FOUND)
            };
        };
        match kind_of(st, &real) {
            Kind::Link { target, file_link } if !last || follow => {
                if file_link && !last {
                    return Err(DIRECTORY);
                }
                *hops += 1;
                if *hops > MAX_HOPS {
                    return Err(CANT_RESOLVE);
                }
                let next = target_path(st, &target)?;
                let resolved = locate_hops(st, &next, true, hops).map_err(|e| {
                    if e == FILE_NOT_FOUND && !last {
                        PATH_NOT_FOUND
                    } else {
                        e
                    }
                })?;
                match resolved.kind {
                    Kind::Missing => {
                        return Err(if last { FILE_NOT_FOUND } else { PATH_NOT_FOUND });
                    }
                    Kind::File if !last => return Err(PATH_NOT_FOUND),
                    _ if last => return Ok(resolved),
                    _ => cur = resolved.real,
                }
            }
            kind if last => return Ok(Located { real, kind }),
            Kind::Dir => cur = real,
            _ => return Err(PATH_NOT_FOUND),
        }
    }
    unreachable!("the loop returns at the last component")
}

/// Parse and resolve in one step.
pub(crate) fn open(st: &State, path: &str, follow: bool) -> Result<Located, u32> {
    locate(st, &WinPath::parse(path)?, follow)
}

/// The sandbox target to store for a link to the Windows path `target` (it need not exist): drive paths resolve
/// the existing part NTFS-style, shares go through their presence link (so the link dangles exactly while the share
/// is not usable), volumes through the volume's presence link.
pub(crate) fn link_target(st: &State, target: &str) -> Result<PathBuf, u32> {
    let wp = WinPath::parse(target)?;
    Ok(match wp.root {
        Root::Drive(d) => st.real_drive_path(&crate::state::paths::DrivePath {
            drive: d,
            components: wp.components,
        }),
        Root::Share(server, share) => {
            let mut p = st.layout.unc_link(&server, &share);
            p.extend(wp.components);
            p
        }
        Root::Volume(g) => {
            let mut p = st.layout.volume_link(&g);
            p.extend(wp.components);
            p
        }
        Root::Store(p) => p,
    })
}

/// The Windows spelling of a sandbox path (the store forms as the volume or share they hold).
pub(crate) fn windows_name(st: &State, real: &Path) -> Option<String> {
    let rel = real.strip_prefix(st.layout.root()).ok()?;
    let parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    match parts
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["store", "volumes", guid, rest @ ..] => {
            Some(format!(r"\\?\Volume{{{guid}}}\{}", rest.join("\\")))
        }
        ["store", "shares", server, share, rest @ ..] => Some(
            format!(r"\\{server}\{share}\{}", rest.join("\\"))
                .trim_end_matches('\\')
                .to_owned(),
        ),
        _ => st.layout.to_windows(real),
    }
}
