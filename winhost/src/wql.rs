//! Building WQL: every query text the Windows implementation sends is made here, and every value in it is escaped.
//!
//! Class and property names are compile-time constants (`&'static str`) and checked to be identifiers; values are
//! typed ([`WqlValue`]) and string values are quoted by [`quote`]. No caller can splice text into a query.
//!
//! String literal rules: WQL (MS-WMI §2.2.1) takes string constants in double or single quotes with the backslash as
//! the escape character; we always use double quotes and escape `\` and `"` with a backslash (the `wmi` crate's
//! `quote_and_escape_wql_str` does the same). csi-proxy instead single-quotes and doubles `'`, which is unverified for
//! WQL (reference §1.5). Control characters are refused rather than escaped: no valid portal address, volume id or
//! other value the backend filters on contains one, and WQL defines no escape for them.

use std::fmt;

use crate::model::ObjectPath;

/// A value in a `WHERE` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqlValue<'a> {
    /// A string, quoted and escaped.
    Str(&'a str),
    /// An unsigned number.
    U32(u32),
    /// A boolean (`TRUE`/`FALSE`).
    Bool(bool),
}

/// Why a query could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqlError {
    /// A string value contains a control character (U+0000-U+001F, U+007F).
    #[error("a WQL string value contains the control character U+{0:04X}")]
    ControlCharacter(u32),
    /// A class or property name is not an identifier (a programming error: names are constants).
    #[error("{0:?} is not a WQL identifier")]
    NotAnIdentifier(&'static str),
    /// An object path would end the `ASSOCIATORS OF {…}` braces early or contains a control character.
    #[error("object path cannot be used in ASSOCIATORS OF: {0}")]
    BadObjectPath(String),
}

/// `s` as a WQL string literal: double-quoted, `\` and `"` escaped.
pub fn quote(s: &str) -> Result<String, WqlError> {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() && (c as u32) < 0x80 => {
                return Err(WqlError::ControlCharacter(c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(out)
}

fn identifier(name: &'static str) -> Result<&'static str, WqlError> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(name)
    } else {
        Err(WqlError::NotAnIdentifier(name))
    }
}

impl fmt::Display for WqlValue<'_> {
    /// The literal (an unescapable string prints as `<invalid>`; [`Select::build`] refuses it instead).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Str(s) => match quote(s) {
                Ok(q) => f.write_str(&q),
                Err(_) => f.write_str("<invalid>"),
            },
            Self::U32(n) => write!(f, "{n}"),
            Self::Bool(true) => f.write_str("TRUE"),
            Self::Bool(false) => f.write_str("FALSE"),
        }
    }
}

/// `SELECT p1, p2 FROM Class [WHERE a = v AND …]`.
#[derive(Clone, Debug)]
pub struct Select<'a> {
    class: &'static str,
    properties: &'static [&'static str],
    conditions: Vec<(&'static str, WqlValue<'a>)>,
}

impl<'a> Select<'a> {
    /// Select `properties` (all of them, `*`, when empty) from `class`.
    pub fn new(class: &'static str, properties: &'static [&'static str]) -> Self {
        Self {
            class,
            properties,
            conditions: Vec::new(),
        }
    }

    /// Add `property = value` (conditions are joined with `AND`).
    pub fn eq(mut self, property: &'static str, value: WqlValue<'a>) -> Self {
        self.conditions.push((property, value));
        self
    }

    /// Add `property = value` when `value` is given.
    pub fn eq_opt(self, property: &'static str, value: Option<WqlValue<'a>>) -> Self {
        match value {
            Some(v) => self.eq(property, v),
            None => self,
        }
    }

    /// The query text.
    pub fn build(&self) -> Result<String, WqlError> {
        let props = if self.properties.is_empty() {
            "*".to_owned()
        } else {
            self.properties
                .iter()
                .map(|p| identifier(p))
                .collect::<Result<Vec<_>, _>>()?
                .join(", ")
        };
        let mut q = format!("SELECT {props} FROM {}", identifier(self.class)?);
        for (i, (prop, value)) in self.conditions.iter().enumerate() {
            q.push_str(if i == 0 { " WHERE " } else { " AND " });
            q.push_str(identifier(prop)?);
            q.push_str(" = ");
            match value {
                WqlValue::Str(s) => q.push_str(&quote(s)?),
                other => q.push_str(&other.to_string()),
            }
        }
        Ok(q)
    }
}

/// `ASSOCIATORS OF {path} WHERE AssocClass = A ResultClass = R`.
///
/// The object path goes between braces as WMI gave it (`__PATH`); WQL has no escaping for it, so a path with a `}`
/// outside a double-quoted key value, or with a control character, is refused. (Storage object paths contain braces
/// *inside* their quoted `ObjectId`, e.g. `ObjectId="{1}\\HOST\\…"`, which the WMI path parser reads as part of
/// the value: **unverified** on a real node, see the README.)
pub fn associators_of(
    path: &ObjectPath,
    assoc_class: &'static str,
    result_class: &'static str,
) -> Result<String, WqlError> {
    check_object_path(path.as_str())?;
    Ok(format!(
        "ASSOCIATORS OF {{{}}} WHERE AssocClass = {} ResultClass = {}",
        path.as_str(),
        identifier(assoc_class)?,
        identifier(result_class)?
    ))
}

fn check_object_path(path: &str) -> Result<(), WqlError> {
    let bad = |why: &str| Err(WqlError::BadObjectPath(format!("{why}: {path:?}")));
    if path.is_empty() {
        return bad("empty");
    }
    let mut in_quotes = false;
    let mut escaped = false;
    for c in path.chars() {
        if c.is_control() {
            return bad("control character");
        }
        if in_quotes {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_quotes = false,
                _ => {}
            }
        } else {
            match c {
                '"' => in_quotes = true,
                '{' | '}' => return bad("brace outside a quoted key value"),
                _ => {}
            }
        }
    }
    if in_quotes {
        bad("unterminated quoted key value")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_backslashes_and_double_quotes() {
        assert_eq!(quote("10.0.0.1").unwrap(), r#""10.0.0.1""#);
        assert_eq!(quote(r"\\?\Volume{a}\").unwrap(), r#""\\\\?\\Volume{a}\\""#);
        assert_eq!(quote(r#"a"b"#).unwrap(), r#""a\"b""#);
        // Single quotes need no escape inside double quotes.
        assert_eq!(quote("it's").unwrap(), r#""it's""#);
        assert_eq!(quote("").unwrap(), r#""""#);
        // Non-ASCII passes through (the `wmi` crate documents the same; WQL strings are Unicode).
        assert_eq!(quote("zürich").unwrap(), "\"zürich\"");
    }

    #[test]
    fn quote_refuses_control_characters() {
        assert_eq!(quote("a\0b"), Err(WqlError::ControlCharacter(0)));
        assert_eq!(quote("a\nb"), Err(WqlError::ControlCharacter(10)));
        assert_eq!(quote("a\u{7f}"), Err(WqlError::ControlCharacter(0x7f)));
    }

    /// A hostile value cannot close the string and append a clause: every `"` it contains is escaped, so the only
    /// unescaped quotes in the text are the two delimiters.
    #[test]
    fn injection_attempts_stay_inside_the_literal() {
        let hostile = r#"x" OR TargetPortalAddress <> "x"#;
        let q = Select::new("MSFT_iSCSITargetPortal", &[])
            .eq("TargetPortalAddress", WqlValue::Str(hostile))
            .eq("TargetPortalPortNumber", WqlValue::U32(3260))
            .build()
            .unwrap();
        assert_eq!(
            q,
            r#"SELECT * FROM MSFT_iSCSITargetPortal WHERE TargetPortalAddress = "x\" OR TargetPortalAddress <> \"x" AND TargetPortalPortNumber = 3260"#
        );
        let literal = &q[q.find('"').unwrap()..q.rfind('"').unwrap() + 1];
        let mut unescaped_quotes = 0;
        let mut prev_backslashes = 0;
        for c in literal.chars() {
            if c == '"' && prev_backslashes % 2 == 0 {
                unescaped_quotes += 1;
            }
            prev_backslashes = if c == '\\' { prev_backslashes + 1 } else { 0 };
        }
        assert_eq!(unescaped_quotes, 2, "{literal}");

        // A trailing backslash cannot escape the closing quote.
        let q = Select::new("MSFT_Volume", &["UniqueId"])
            .eq("UniqueId", WqlValue::Str("abc\\"))
            .build()
            .unwrap();
        assert_eq!(
            q,
            r#"SELECT UniqueId FROM MSFT_Volume WHERE UniqueId = "abc\\""#
        );
    }

    #[test]
    fn select_lists_properties_and_conditions() {
        assert_eq!(
            Select::new("MSFT_Disk", &["Number", "Location"])
                .build()
                .unwrap(),
            "SELECT Number, Location FROM MSFT_Disk"
        );
        assert_eq!(
            Select::new("MSFT_Partition", &[])
                .eq_opt("DiskNumber", Some(WqlValue::U32(3)))
                .eq_opt("PartitionNumber", None)
                .build()
                .unwrap(),
            "SELECT * FROM MSFT_Partition WHERE DiskNumber = 3"
        );
        assert_eq!(
            Select::new("MSFT_iSCSISession", &[])
                .eq("IsPersistent", WqlValue::Bool(true))
                .build()
                .unwrap(),
            "SELECT * FROM MSFT_iSCSISession WHERE IsPersistent = TRUE"
        );
        assert_eq!(
            Select::new("MSFT_Volume", &[])
                .eq("UniqueId", WqlValue::Str("a\u{1}"))
                .build(),
            Err(WqlError::ControlCharacter(1))
        );
        assert_eq!(
            Select::new("MSFT Disk", &[]).build(),
            Err(WqlError::NotAnIdentifier("MSFT Disk"))
        );
        assert_eq!(
            Select::new("MSFT_Disk", &["Number;"]).build(),
            Err(WqlError::NotAnIdentifier("Number;"))
        );
    }

    /// `SmbWmi::global_mappings_of`'s query (win32 `select` with one `RemotePath` filter): the share root quoted,
    /// every backslash of the UNC path doubled.
    #[test]
    fn smb_mapping_lookup_by_remote_path() {
        assert_eq!(
            Select::new("MSFT_SmbGlobalMapping", &[])
                .eq("RemotePath", WqlValue::Str(r"\\fs1\data"))
                .build()
                .unwrap(),
            r#"SELECT * FROM MSFT_SmbGlobalMapping WHERE RemotePath = "\\\\fs1\\data""#
        );
        assert_eq!(
            Select::new("MSFT_SmbGlobalMapping", &[])
                .eq("RemotePath", WqlValue::Str(r#"\\srv\a"b"#))
                .build()
                .unwrap(),
            r#"SELECT * FROM MSFT_SmbGlobalMapping WHERE RemotePath = "\\\\srv\\a\"b""#
        );
    }

    #[test]
    fn associators_accept_storage_paths_and_refuse_stray_braces() {
        let path = ObjectPath::new(
            r#"\\HOST\ROOT\Microsoft\Windows\Storage:MSFT_Partition.DiskId="\\\\?\\scsi#disk{53f56307-b6bf-11d0-94f2-00a0c91efb8b}",ObjectId="{1}\\\\HOST\\root/Microsoft/Windows/Storage/Providers_v2\\WSP_Partition.ObjectId=\"{a}:PR:{b}\\\\?\\scsi\"",Offset=1048576"#,
        );
        let q = associators_of(&path, "MSFT_PartitionToVolume", "MSFT_Volume").unwrap();
        assert!(q.starts_with(r"ASSOCIATORS OF {\\HOST\ROOT"));
        assert!(
            q.ends_with("} WHERE AssocClass = MSFT_PartitionToVolume ResultClass = MSFT_Volume")
        );

        let simple =
            ObjectPath::new(r#"MSFT_iSCSITarget.NodeAddress="iqn.1991-05.com.microsoft:t""#);
        assert_eq!(
            associators_of(
                &simple,
                "MSFT_iSCSITargetToiSCSISession",
                "MSFT_iSCSISession"
            )
            .unwrap(),
            r#"ASSOCIATORS OF {MSFT_iSCSITarget.NodeAddress="iqn.1991-05.com.microsoft:t"} WHERE AssocClass = MSFT_iSCSITargetToiSCSISession ResultClass = MSFT_iSCSISession"#
        );

        for bad in [
            r#"X.K="a"} WHERE 1=1 {"#,
            r#"X.K="unterminated"#,
            "X.K=\"a\nb\"",
            "",
        ] {
            assert!(
                matches!(
                    associators_of(&ObjectPath::new(bad), "A", "B"),
                    Err(WqlError::BadObjectPath(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            associators_of(&simple, "Assoc Class", "B"),
            Err(WqlError::NotAnIdentifier(_))
        ));
    }
}
