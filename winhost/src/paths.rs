//! Windows path forms the native backend converts between: `\\?\` long paths, UNC share roots, volume GUID paths,
//! and the NT "substitute names" stored in reparse points.
//!
//! Rules (reference §2.1, §2.4, and Microsoft's "Naming Files, Paths, and Namespaces"):
//! - `\\?\C:\x` is the long form of `C:\x`; `\\?\UNC\server\share\x` is the long form of `\\server\share\x`. Never
//!   glue `\\?\` onto a UNC path (`\\?\\\server\…`): csi-proxy v1.3.0 does, and whether Windows resolves it is
//!   unverified (D10).
//! - Paths after `\\?\` are not normalised by Windows, so `/` becomes `\` before the prefix is added.
//! - Volume GUID paths (`\\?\Volume{GUID}\`) keep their trailing `\` for file-system calls and drop it to open the
//!   volume device.
//! - Reparse points store NT names: `\??\C:\x`, `\??\UNC\server\share\x`, `\??\Volume{GUID}\`.

use std::fmt;

/// The long-path form of `path`: `C:\x` → `\\?\C:\x`, `\\server\share\x` → `\\?\UNC\server\share\x`. Paths already
/// in a `\\?\` or `\\.\` namespace and relative paths are returned with only `/` turned into `\`.
pub fn long_path(path: &str) -> String {
    let p = path.replace('/', "\\");
    if p.starts_with(r"\\?\") || p.starts_with(r"\\.\") || p.starts_with(r"\??\") {
        p
    } else if let Some(unc) = p.strip_prefix(r"\\") {
        format!(r"\\?\UNC\{unc}")
    } else if is_drive_absolute(&p) {
        format!(r"\\?\{p}")
    } else {
        p
    }
}

/// The ordinary form of a long path: `\\?\C:\x` → `C:\x`, `\\?\UNC\server\share` → `\\server\share`. Other paths
/// are returned unchanged.
pub fn strip_long_prefix(path: &str) -> String {
    if let Some(rest) = strip_prefix_ignore_case(path, r"\\?\UNC\") {
        format!(r"\\{rest}")
    } else if let Some(rest) = path.strip_prefix(r"\\?\")
        && is_drive_absolute(rest)
    {
        rest.to_owned()
    } else {
        path.to_owned()
    }
}

/// `path` with exactly one trailing `\` (what `SetVolumeMountPointW`, `GetVolumeNameForVolumeMountPointW`,
/// `GetDiskFreeSpaceExW` and `GetVolumeInformationW` want).
pub fn with_trailing_backslash(path: &str) -> String {
    format!("{}\\", path.trim_end_matches(['\\', '/']))
}

/// `path` without trailing `\` (what `CreateFileW` wants for a volume device).
pub fn without_trailing_backslash(path: &str) -> &str {
    path.trim_end_matches(['\\', '/'])
}

fn is_drive_absolute(p: &str) -> bool {
    let b = p.as_bytes();
    b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\'
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    if s.len() >= prefix.len()
        && s.is_char_boundary(prefix.len())
        && s[..prefix.len()].eq_ignore_ascii_case(prefix)
    {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

/// A UNC path split into server, share and the rest, from `\\server\share\rest`, `//server/share/rest` or the long
/// form `\\?\UNC\server\share\rest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UncParts {
    /// The server name or address.
    pub server: String,
    /// The share name.
    pub share: String,
    /// The path below the share (no leading `\`; empty for the share root).
    pub rest: String,
}

impl UncParts {
    /// Split a UNC path. `None` when it is not one (no server or no share).
    pub fn parse(path: &str) -> Option<Self> {
        let p = path.replace('/', "\\");
        let body = strip_prefix_ignore_case(&p, r"\\?\UNC\").or_else(|| {
            if p.starts_with(r"\\?\") || p.starts_with(r"\\.\") {
                None
            } else {
                p.strip_prefix(r"\\")
            }
        })?;
        let mut parts = body.splitn(3, '\\');
        let server = parts.next().filter(|s| !s.is_empty())?;
        let share = parts.next().filter(|s| !s.is_empty())?;
        let rest = parts.next().unwrap_or("").trim_matches('\\');
        Some(Self {
            server: server.to_owned(),
            share: share.to_owned(),
            rest: rest.to_owned(),
        })
    }

    /// `\\server\share`: the `RemotePath` of the share's global mapping.
    pub fn share_root(&self) -> String {
        format!(r"\\{}\{}", self.server, self.share)
    }

    /// `\\server\share\rest` (no trailing `\`).
    pub fn to_unc(&self) -> String {
        if self.rest.is_empty() {
            self.share_root()
        } else {
            format!(r"\\{}\{}\{}", self.server, self.share, self.rest)
        }
    }
}

/// A volume GUID path, `\\?\Volume{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}\`, canonical (lower-case GUID, trailing
/// `\`). Two spellings of the same volume compare equal.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct VolumeGuidPath {
    guid: String,
}

impl VolumeGuidPath {
    /// Parse `\\?\Volume{GUID}\`, with or without the trailing `\`, any case; also the NT form `\??\Volume{GUID}\`
    /// found in mount-point reparse data.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = strip_prefix_ignore_case(text, r"\\?\Volume{")
            .or_else(|| strip_prefix_ignore_case(text, r"\??\Volume{"))?;
        let (guid, tail) = rest.split_once('}')?;
        if !(tail.is_empty() || tail == "\\") || !is_guid(guid) {
            return None;
        }
        Some(Self {
            guid: guid.to_ascii_lowercase(),
        })
    }

    /// The GUID, lower case, without braces.
    pub fn guid(&self) -> &str {
        &self.guid
    }

    /// `\\?\Volume{guid}\`: for file-system calls and as `MSFT_Volume.UniqueId`.
    pub fn to_path(&self) -> String {
        format!(r"\\?\Volume{{{}}}\", self.guid)
    }

    /// `\\?\Volume{guid}`: the volume device, for `CreateFileW`.
    pub fn to_device(&self) -> String {
        format!(r"\\?\Volume{{{}}}", self.guid)
    }
}

impl fmt::Display for VolumeGuidPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_path())
    }
}

impl fmt::Debug for VolumeGuidPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VolumeGuidPath({})", self.to_path())
    }
}

fn is_guid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Where a reparse point's substitute name leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkTarget {
    /// A volume: a volume mount point (`\??\Volume{GUID}\`).
    Volume(VolumeGuidPath),
    /// A share path, as `\\server\share\…` (`\??\UNC\server\share\…`).
    Unc(String),
    /// A local absolute path, as `C:\…` (`\??\C:\…`).
    Local(String),
    /// A relative symlink target, as stored.
    Relative(String),
    /// Anything else (another NT namespace), as stored.
    Other(String),
}

impl LinkTarget {
    /// Classify a substitute name. `relative` is the symlink's `SYMLINK_FLAG_RELATIVE`.
    pub fn from_substitute_name(name: &str, relative: bool) -> Self {
        if relative {
            return Self::Relative(name.to_owned());
        }
        if let Some(v) = VolumeGuidPath::parse(name) {
            return Self::Volume(v);
        }
        if let Some(rest) = strip_prefix_ignore_case(name, r"\??\UNC\") {
            return Self::Unc(format!(r"\\{rest}"));
        }
        if let Some(rest) = name.strip_prefix(r"\??\")
            && is_drive_absolute(rest)
        {
            return Self::Local(rest.to_owned());
        }
        Self::Other(name.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_for_drive_and_unc_forms() {
        assert_eq!(long_path(r"C:\var\lib\kubelet"), r"\\?\C:\var\lib\kubelet");
        assert_eq!(long_path("c:/var/lib"), r"\\?\c:\var\lib");
        assert_eq!(long_path(r"\\srv\share\dir"), r"\\?\UNC\srv\share\dir");
        assert_eq!(long_path("//srv/share"), r"\\?\UNC\srv\share");
        // Already long or a device: unchanged; never `\\?\\\srv` (D10).
        assert_eq!(long_path(r"\\?\C:\x"), r"\\?\C:\x");
        assert_eq!(long_path(r"\\?\UNC\srv\s"), r"\\?\UNC\srv\s");
        assert_eq!(long_path(r"\\.\PhysicalDrive0"), r"\\.\PhysicalDrive0");
        assert_eq!(long_path(r"\\?\Volume{0}\"), r"\\?\Volume{0}\");
        assert_eq!(long_path(r"rel\dir"), r"rel\dir");
        for p in [r"\\srv\share", r"\\?\UNC\srv\share", "//srv/share/x"] {
            assert!(!long_path(p).starts_with(r"\\?\\\"), "{p}");
        }
    }

    #[test]
    fn stripping_the_long_prefix() {
        assert_eq!(strip_long_prefix(r"\\?\C:\x"), r"C:\x");
        assert_eq!(strip_long_prefix(r"\\?\UNC\srv\share\x"), r"\\srv\share\x");
        assert_eq!(strip_long_prefix(r"\\?\unc\srv\share"), r"\\srv\share");
        assert_eq!(strip_long_prefix(r"\\?\Volume{x}\"), r"\\?\Volume{x}\");
        assert_eq!(strip_long_prefix(r"C:\x"), r"C:\x");
        for p in [r"C:\a\b", r"\\s\sh\d"] {
            assert_eq!(strip_long_prefix(&long_path(p)), p);
        }
    }

    #[test]
    fn trailing_backslashes() {
        assert_eq!(with_trailing_backslash(r"C:\mnt"), r"C:\mnt\");
        assert_eq!(with_trailing_backslash(r"C:\mnt\\"), r"C:\mnt\");
        assert_eq!(
            without_trailing_backslash(r"\\?\Volume{x}\"),
            r"\\?\Volume{x}"
        );
        assert_eq!(without_trailing_backslash(r"C:\a"), r"C:\a");
    }

    #[test]
    fn unc_parts_and_share_roots() {
        let p = UncParts::parse(r"\\10.1.2.5\share\sub\dir\").unwrap();
        assert_eq!(
            (p.server.as_str(), p.share.as_str(), p.rest.as_str()),
            ("10.1.2.5", "share", r"sub\dir")
        );
        assert_eq!(p.share_root(), r"\\10.1.2.5\share");
        assert_eq!(p.to_unc(), r"\\10.1.2.5\share\sub\dir");
        assert_eq!(
            UncParts::parse("//srv/share").unwrap().to_unc(),
            r"\\srv\share"
        );
        assert_eq!(
            UncParts::parse(r"\\?\UNC\srv\share\x")
                .unwrap()
                .share_root(),
            r"\\srv\share"
        );
        for bad in [
            r"\\srv",
            r"\\srv\",
            r"C:\x",
            r"\\?\C:\x",
            r"\\.\pipe\x",
            r"\\\share",
            "",
        ] {
            assert_eq!(UncParts::parse(bad), None, "{bad}");
        }
        // csi-driver-smb PR #163: `//` vs `\\` spellings name the same share root (comparing two roots is
        // the caller's: Windows compares names by its upcase table, not ASCII only).
        assert_eq!(
            UncParts::parse("//10.1.2.5/share/a").map(|p| p.share_root()),
            Some(r"\\10.1.2.5\share".to_owned())
        );
    }

    #[test]
    fn volume_guid_paths() {
        let a =
            VolumeGuidPath::parse(r"\\?\Volume{6A2F3B4C-1111-2222-3333-444455556666}\").unwrap();
        let b = VolumeGuidPath::parse(r"\\?\volume{6a2f3b4c-1111-2222-3333-444455556666}").unwrap();
        let c =
            VolumeGuidPath::parse(r"\??\Volume{6a2f3b4c-1111-2222-3333-444455556666}\").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(
            a.to_path(),
            r"\\?\Volume{6a2f3b4c-1111-2222-3333-444455556666}\"
        );
        assert_eq!(
            a.to_device(),
            r"\\?\Volume{6a2f3b4c-1111-2222-3333-444455556666}"
        );
        assert_eq!(a.guid(), "6a2f3b4c-1111-2222-3333-444455556666");
        assert_eq!(a.to_string(), a.to_path());
        // Wine's synthetic C: volume (reference §4).
        assert!(
            VolumeGuidPath::parse(r"\\?\Volume{00000000-0000-0000-0000-000000000043}\").is_some()
        );
        for bad in [
            r"\\?\Volume{6a2f3b4c-1111-2222-3333-44445555666}\",
            r"\\?\Volume{6a2f3b4c-1111-2222-3333-444455556666}\x",
            r"\\?\Volume{zzzzzzzz-1111-2222-3333-444455556666}\",
            r"\\?\Volume6a2f3b4c-1111-2222-3333-444455556666\",
            r"C:\",
            "",
        ] {
            assert_eq!(VolumeGuidPath::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn substitute_names() {
        assert_eq!(
            LinkTarget::from_substitute_name(
                r"\??\Volume{6a2f3b4c-1111-2222-3333-444455556666}\",
                false
            ),
            LinkTarget::Volume(
                VolumeGuidPath::parse(r"\\?\Volume{6a2f3b4c-1111-2222-3333-444455556666}").unwrap()
            )
        );
        assert_eq!(
            LinkTarget::from_substitute_name(r"\??\UNC\srv\share\dir\", false),
            LinkTarget::Unc(r"\\srv\share\dir\".into())
        );
        assert_eq!(
            LinkTarget::from_substitute_name(r"\??\C:\var\lib\kubelet\x", false),
            LinkTarget::Local(r"C:\var\lib\kubelet\x".into())
        );
        assert_eq!(
            LinkTarget::from_substitute_name(r"..\x", true),
            LinkTarget::Relative(r"..\x".into())
        );
        // csi-proxy v1.3.0's `\\?\\\srv\share` target would be stored as `\??\\\srv…`: not a UNC target.
        assert_eq!(
            LinkTarget::from_substitute_name(r"\??\\\srv\share", false),
            LinkTarget::Other(r"\??\\\srv\share".into())
        );
    }
}
