//! Reparse points: the tags the backend tells apart, and `REPARSE_DATA_BUFFER` parsed from `FSCTL_GET_REPARSE_POINT`
//! reply bytes (reference §2.1 "The reparse buffer, in detail").
//!
//! Layout (ntifs.h): `u32 ReparseTag; u16 ReparseDataLength; u16 Reserved;` then for `IO_REPARSE_TAG_SYMLINK`
//! `u16 SubstituteNameOffset, SubstituteNameLength, PrintNameOffset, PrintNameLength; u32 Flags; PathBuffer`, and
//! for `IO_REPARSE_TAG_MOUNT_POINT` the same without `Flags`. Offsets and lengths are in bytes into `PathBuffer`;
//! names are UTF-16 and not NUL-terminated.

use crate::paths::LinkTarget;

/// `IO_REPARSE_TAG_SYMLINK`.
pub const IO_REPARSE_TAG_SYMLINK: u32 = 0xA000_000C;
/// `IO_REPARSE_TAG_MOUNT_POINT`: junctions *and* volume mount points (tell them apart by the substitute name).
pub const IO_REPARSE_TAG_MOUNT_POINT: u32 = 0xA000_0003;
/// `SYMLINK_FLAG_RELATIVE`.
pub const SYMLINK_FLAG_RELATIVE: u32 = 1;
/// `MAXIMUM_REPARSE_DATA_BUFFER_SIZE`: the buffer `FSCTL_GET_REPARSE_POINT` needs at most.
pub const MAXIMUM_REPARSE_DATA_BUFFER_SIZE: usize = 16 * 1024;

/// A reparse point's content.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub enum ReparsePoint {
    /// A symbolic link.
    Symlink {
        /// The NT name the link resolves to (`\??\C:\…`, `\??\UNC\…`, or a relative path).
        substitute_name: String,
        /// The display name.
        print_name: String,
        /// `SYMLINK_FLAG_RELATIVE`.
        relative: bool,
    },
    /// A junction or a volume mount point.
    MountPoint {
        /// `\??\Volume{GUID}\` for a volume mount point, a path for a junction.
        substitute_name: String,
        /// The display name.
        print_name: String,
    },
    /// Another tag (deduplication, cloud files, …): not a link the backend follows.
    Other {
        /// The tag.
        tag: u32,
    },
}

impl ReparsePoint {
    /// The tag.
    pub fn tag(&self) -> u32 {
        match self {
            Self::Symlink { .. } => IO_REPARSE_TAG_SYMLINK,
            Self::MountPoint { .. } => IO_REPARSE_TAG_MOUNT_POINT,
            Self::Other { tag } => *tag,
        }
    }

    /// Where it leads (one hop), for links and mount points.
    pub fn target(&self) -> Option<LinkTarget> {
        match self {
            Self::Symlink {
                substitute_name,
                relative,
                ..
            } => Some(LinkTarget::from_substitute_name(substitute_name, *relative)),
            Self::MountPoint {
                substitute_name, ..
            } => Some(LinkTarget::from_substitute_name(substitute_name, false)),
            Self::Other { .. } => None,
        }
    }

    /// Whether this is a volume mount point (a mount-point tag whose target is a volume).
    pub fn is_volume_mount_point(&self) -> bool {
        matches!(self, Self::MountPoint { .. })
            && matches!(self.target(), Some(LinkTarget::Volume(_)))
    }
}

/// Why reparse data could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReparseError {
    /// The buffer is shorter than a header or a name it announces.
    #[error("reparse data truncated at byte {0}")]
    Truncated(usize),
    /// A name has an odd byte length or is not UTF-16.
    #[error("reparse data holds a name that is not UTF-16")]
    BadName,
}

fn u16_at(buf: &[u8], at: usize) -> Result<u16, ReparseError> {
    buf.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or(ReparseError::Truncated(at))
}

fn u32_at(buf: &[u8], at: usize) -> Result<u32, ReparseError> {
    buf.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(ReparseError::Truncated(at))
}

fn name(buf: &[u8], path_buffer: usize, offset: u16, length: u16) -> Result<String, ReparseError> {
    if !length.is_multiple_of(2) {
        return Err(ReparseError::BadName);
    }
    let start = path_buffer + offset as usize;
    let bytes = buf
        .get(start..start + length as usize)
        .ok_or(ReparseError::Truncated(start + length as usize))?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16(&units).map_err(|_| ReparseError::BadName)
}

/// Parse a `REPARSE_DATA_BUFFER`.
pub fn parse_reparse_data(buf: &[u8]) -> Result<ReparsePoint, ReparseError> {
    let tag = u32_at(buf, 0)?;
    match tag {
        IO_REPARSE_TAG_SYMLINK => {
            let path_buffer = 20;
            let flags = u32_at(buf, 16)?;
            Ok(ReparsePoint::Symlink {
                substitute_name: name(buf, path_buffer, u16_at(buf, 8)?, u16_at(buf, 10)?)?,
                print_name: name(buf, path_buffer, u16_at(buf, 12)?, u16_at(buf, 14)?)?,
                relative: flags & SYMLINK_FLAG_RELATIVE != 0,
            })
        }
        IO_REPARSE_TAG_MOUNT_POINT => {
            let path_buffer = 16;
            Ok(ReparsePoint::MountPoint {
                substitute_name: name(buf, path_buffer, u16_at(buf, 8)?, u16_at(buf, 10)?)?,
                print_name: name(buf, path_buffer, u16_at(buf, 12)?, u16_at(buf, 14)?)?,
            })
        }
        other => Ok(ReparsePoint::Other { tag: other }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::VolumeGuidPath;

    fn utf16(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    /// Builds a buffer as Windows does: print name after the substitute name, each NUL-terminated in the buffer
    /// (the lengths exclude the NUL).
    fn buffer(tag: u32, substitute: &str, print: &str, flags: Option<u32>) -> Vec<u8> {
        let (s, p) = (utf16(substitute), utf16(print));
        let mut path = s.clone();
        path.extend([0, 0]);
        let print_offset = path.len();
        path.extend(&p);
        path.extend([0, 0]);
        let mut data = Vec::new();
        for v in [0u16, s.len() as u16, print_offset as u16, p.len() as u16] {
            data.extend(v.to_le_bytes());
        }
        if let Some(f) = flags {
            data.extend(f.to_le_bytes());
        }
        data.extend(&path);
        let mut buf = tag.to_le_bytes().to_vec();
        buf.extend((data.len() as u16).to_le_bytes());
        buf.extend([0, 0]);
        buf.extend(data);
        buf
    }

    #[test]
    fn symlinks_to_shares_and_relative_links() {
        let b = buffer(
            IO_REPARSE_TAG_SYMLINK,
            r"\??\UNC\srv\share\dir",
            r"\\srv\share\dir",
            Some(0),
        );
        let r = parse_reparse_data(&b).unwrap();
        assert_eq!(
            r,
            ReparsePoint::Symlink {
                substitute_name: r"\??\UNC\srv\share\dir".into(),
                print_name: r"\\srv\share\dir".into(),
                relative: false
            }
        );
        assert_eq!(r.tag(), IO_REPARSE_TAG_SYMLINK);
        assert_eq!(r.target(), Some(LinkTarget::Unc(r"\\srv\share\dir".into())));
        assert!(!r.is_volume_mount_point());

        let rel =
            parse_reparse_data(&buffer(IO_REPARSE_TAG_SYMLINK, r"..\x", r"..\x", Some(1))).unwrap();
        assert_eq!(rel.target(), Some(LinkTarget::Relative(r"..\x".into())));
    }

    #[test]
    fn mount_points_and_junctions() {
        let guid = r"\??\Volume{6a2f3b4c-1111-2222-3333-444455556666}\";
        let mp = parse_reparse_data(&buffer(IO_REPARSE_TAG_MOUNT_POINT, guid, "", None)).unwrap();
        assert!(mp.is_volume_mount_point());
        assert_eq!(
            mp.target(),
            Some(LinkTarget::Volume(VolumeGuidPath::parse(guid).unwrap()))
        );

        let junction = parse_reparse_data(&buffer(
            IO_REPARSE_TAG_MOUNT_POINT,
            r"\??\C:\data",
            r"C:\data",
            None,
        ))
        .unwrap();
        assert!(!junction.is_volume_mount_point());
        assert_eq!(
            junction.target(),
            Some(LinkTarget::Local(r"C:\data".into()))
        );
    }

    #[test]
    fn other_tags_and_bad_buffers() {
        assert_eq!(
            parse_reparse_data(&0x8000_0013u32.to_le_bytes()).unwrap(),
            ReparsePoint::Other { tag: 0x8000_0013 }
        );
        assert_eq!(ReparsePoint::Other { tag: 7 }.target(), None);
        assert_eq!(parse_reparse_data(&[1, 2]), Err(ReparseError::Truncated(0)));
        let mut b = buffer(IO_REPARSE_TAG_SYMLINK, r"\??\C:\x", r"C:\x", Some(0));
        b.truncate(24);
        assert!(matches!(
            parse_reparse_data(&b),
            Err(ReparseError::Truncated(_))
        ));
        // Odd name length.
        let mut b = buffer(IO_REPARSE_TAG_MOUNT_POINT, r"\??\C:\x", "", None);
        b[10] = 3;
        assert_eq!(parse_reparse_data(&b), Err(ReparseError::BadName));
        // Unpaired surrogate.
        let mut b = buffer(IO_REPARSE_TAG_MOUNT_POINT, "ab", "", None);
        b[16] = 0x00;
        b[17] = 0xD8;
        assert_eq!(parse_reparse_data(&b), Err(ReparseError::BadName));
    }
}
