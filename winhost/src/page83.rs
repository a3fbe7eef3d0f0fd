//! SCSI VPD page 0x83 device identifiers (`IOCTL_STORAGE_QUERY_PROPERTY(StorageDeviceIdProperty)`), parsed from the
//! reply bytes, and csi-proxy's choice of "page83" id among them.
//!
//! Layout (winioctl.h; csi-proxy `pkg/os/disk/types.go` declares the same):
//! `STORAGE_DEVICE_ID_DESCRIPTOR { u32 Version; u32 Size; u32 NumberOfIdentifiers; u8 Identifiers[] }` and, at
//! offset 12, a chain of `STORAGE_IDENTIFIER { u32 CodeSet; u32 Type; u16 IdentifierSize; u16 NextOffset;
//! u32 Association; u8 Identifier[IdentifierSize] }` where each `NextOffset` is relative to the identifier it is in.

use std::fmt::Write as _;

/// `STORAGE_IDENTIFIER_CODE_SET`: 1 binary, 2 ASCII, 3 UTF-8.
pub const CODE_SET_BINARY: u32 = 1;
/// ASCII code set.
pub const CODE_SET_ASCII: u32 = 2;
/// UTF-8 code set.
pub const CODE_SET_UTF8: u32 = 3;
/// `STORAGE_ASSOCIATION_TYPE`: 0 device, 1 port, 2 target.
pub const ASSOCIATION_DEVICE: u32 = 0;

const DESCRIPTOR_HEADER: usize = 12;
const IDENTIFIER_HEADER: usize = 16;

/// One `STORAGE_IDENTIFIER`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct StorageIdentifier {
    /// `CodeSet`.
    pub code_set: u32,
    /// `Type` (`STORAGE_IDENTIFIER_TYPE`: 0 vendor specific, 1 vendor id, 2 EUI64, 3 FCPH name/NAA, 8 SCSI name
    /// string, …).
    pub id_type: u32,
    /// `Association`.
    pub association: u32,
    /// `Identifier`.
    pub identifier: Vec<u8>,
}

/// Why a reply could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Page83Error {
    /// The reply is shorter than its header or than an identifier it announces.
    #[error("device id descriptor truncated at byte {0}")]
    Truncated(usize),
    /// An identifier's `NextOffset` does not move forward past its own header and data.
    #[error(
        "device id descriptor: identifier {0} has NextOffset {1}, which does not reach past its own data"
    )]
    BadNextOffset(u32, u16),
}

fn u32_at(buf: &[u8], at: usize) -> Result<u32, Page83Error> {
    buf.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(Page83Error::Truncated(at))
}

fn u16_at(buf: &[u8], at: usize) -> Result<u16, Page83Error> {
    buf.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or(Page83Error::Truncated(at))
}

/// The descriptor's `Size` field: how many bytes the complete reply needs (to retry with a bigger buffer).
pub fn descriptor_size(buf: &[u8]) -> Result<u32, Page83Error> {
    u32_at(buf, 4)
}

/// Parse a `STORAGE_DEVICE_ID_DESCRIPTOR` reply. Every identifier must lie inside `buf`.
pub fn parse_device_id_descriptor(buf: &[u8]) -> Result<Vec<StorageIdentifier>, Page83Error> {
    if buf.len() < DESCRIPTOR_HEADER {
        return Err(Page83Error::Truncated(buf.len()));
    }
    let count = u32_at(buf, 8)?;
    let mut out = Vec::with_capacity(count.min(64) as usize);
    let mut at = DESCRIPTOR_HEADER;
    for n in 0..count {
        let code_set = u32_at(buf, at)?;
        let id_type = u32_at(buf, at + 4)?;
        let size = u16_at(buf, at + 8)? as usize;
        let next = u16_at(buf, at + 10)?;
        let association = u32_at(buf, at + 12)?;
        let data = at + IDENTIFIER_HEADER;
        let identifier = buf
            .get(data..data + size)
            .ok_or(Page83Error::Truncated(data + size))?
            .to_vec();
        out.push(StorageIdentifier {
            code_set,
            id_type,
            association,
            identifier,
        });
        if n + 1 < count {
            if (next as usize) < IDENTIFIER_HEADER + size {
                return Err(Page83Error::BadNextOffset(n, next));
            }
            at += next as usize;
        }
    }
    Ok(out)
}

/// csi-proxy's page83 id: the **first** identifier associated with the device whose code set is binary or ASCII,
/// whatever its type; binary as lower-case hex, ASCII as is; empty when none (csi-proxy `pkg/os/disk/api.go:240-279`,
/// azuredisk the same; reference §2.3: match it byte for byte).
pub fn csi_proxy_page83(identifiers: &[StorageIdentifier]) -> String {
    for id in identifiers {
        if id.association != ASSOCIATION_DEVICE {
            continue;
        }
        match id.code_set {
            CODE_SET_ASCII => return id.identifier.iter().map(|&b| char::from(b)).collect(),
            CODE_SET_BINARY => {
                let mut hex = String::with_capacity(id.identifier.len() * 2);
                for b in &id.identifier {
                    let _ = write!(hex, "{b:02x}");
                }
                return hex;
            }
            _ => {}
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a reply the way the IOCTL lays it out; `pad` extra bytes after each identifier's data (drivers align
    /// `NextOffset`).
    fn reply(ids: &[(u32, u32, u32, &[u8])], pad: usize) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, (code_set, id_type, assoc, data)) in ids.iter().enumerate() {
            let next = if i + 1 < ids.len() {
                IDENTIFIER_HEADER + data.len() + pad
            } else {
                0
            };
            body.extend_from_slice(&code_set.to_le_bytes());
            body.extend_from_slice(&id_type.to_le_bytes());
            body.extend_from_slice(&(data.len() as u16).to_le_bytes());
            body.extend_from_slice(&(next as u16).to_le_bytes());
            body.extend_from_slice(&assoc.to_le_bytes());
            body.extend_from_slice(data);
            if i + 1 < ids.len() {
                body.extend(std::iter::repeat_n(0xAA, pad));
            }
        }
        let mut buf = Vec::new();
        buf.extend_from_slice(&1u32.to_le_bytes());
        buf.extend_from_slice(&((DESCRIPTOR_HEADER + body.len()) as u32).to_le_bytes());
        buf.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        buf.extend_from_slice(&body);
        buf
    }

    #[test]
    fn parses_a_chain_with_padding() {
        let naa: &[u8] = &[0x60, 0x01, 0x40, 0x5f, 0xab, 0xcd, 0xef, 0x01];
        let buf = reply(
            &[
                (2, 1, 0, b"LIO-ORG disk0"),
                (1, 3, 0, naa),
                (1, 3, 1, &[1, 2]),
            ],
            3,
        );
        let ids = parse_device_id_descriptor(&buf).unwrap();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[0].identifier, b"LIO-ORG disk0");
        assert_eq!(
            (ids[1].code_set, ids[1].id_type, ids[1].association),
            (1, 3, 0)
        );
        assert_eq!(ids[1].identifier, naa);
        assert_eq!(ids[2].association, 1);
        assert_eq!(descriptor_size(&buf).unwrap() as usize, buf.len());
    }

    #[test]
    fn csi_proxy_takes_the_first_device_binary_or_ascii_id_whatever_its_type() {
        // A vendor id (ASCII) listed before the NAA id wins (reference §2.3).
        let ids = parse_device_id_descriptor(&reply(
            &[
                (2, 1, 0, b"Google  persistent-disk-0"),
                (1, 3, 0, &[0x60, 0xAB]),
            ],
            0,
        ))
        .unwrap();
        assert_eq!(csi_proxy_page83(&ids), "Google  persistent-disk-0");

        // Port/target associations and UTF-8 are skipped; binary is lower-case hex.
        let ids = parse_device_id_descriptor(&reply(
            &[
                (1, 3, 1, &[0xFF]),
                (3, 8, 0, b"iqn.x"),
                (1, 3, 0, &[0x60, 0x0A, 0xBC]),
            ],
            1,
        ))
        .unwrap();
        assert_eq!(csi_proxy_page83(&ids), "600abc");

        assert_eq!(csi_proxy_page83(&[]), "");
        assert_eq!(
            csi_proxy_page83(&parse_device_id_descriptor(&reply(&[(3, 8, 0, b"x")], 0)).unwrap()),
            ""
        );
    }

    #[test]
    fn refuses_truncated_and_looping_replies() {
        assert_eq!(
            parse_device_id_descriptor(&[0; 11]),
            Err(Page83Error::Truncated(11))
        );
        let mut buf = reply(&[(1, 3, 0, &[1, 2, 3, 4])], 0);
        buf.truncate(buf.len() - 1);
        assert!(matches!(
            parse_device_id_descriptor(&buf),
            Err(Page83Error::Truncated(_))
        ));
        // Count says two, only one present.
        let mut buf = reply(&[(1, 3, 0, &[1])], 0);
        buf[8] = 2;
        assert!(parse_device_id_descriptor(&buf).is_err());
        // NextOffset 0 on a non-last identifier would loop over the same bytes forever in C.
        let mut buf = reply(&[(1, 3, 0, &[1]), (1, 3, 0, &[2])], 0);
        buf[DESCRIPTOR_HEADER + 10] = 0;
        assert_eq!(
            parse_device_id_descriptor(&buf),
            Err(Page83Error::BadNextOffset(0, 0))
        );
        // No identifiers at all is fine.
        assert_eq!(parse_device_id_descriptor(&reply(&[], 0)).unwrap(), vec![]);
    }
}
