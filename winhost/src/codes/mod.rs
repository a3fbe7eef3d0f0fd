//! The documented code tables the native backend interprets: Win32 errors, COM/WMI HRESULTs, the Storage
//! Management API's method return values, the iSCSI initiator's `ISDSC_*` statuses, the CIM status codes inside
//! `ExtendedStatus`, and the enumerated property values of the WMI classes.
//!
//! Every table is a typed enum built by the `code_table!` macro: a variant per documented value (its doc is the documented
//! meaning, cited in the enum's doc), plus `Unknown(raw)` for a value the table does not document, so decoding never
//! fails and an undocumented answer stays visible (its number is kept for the log).

mod hresult;
mod iscsi;
mod properties;
mod storage;
mod win32;

pub use hresult::{HResult, HResultCode};
pub use iscsi::IscsiStatus;
pub use properties::{
    BusType, CimStatusCode, DiskOperationalStatus, FileSystemType, NewDiskPolicy, OfflineReason,
    PartitionStyle, SmbMappingStatus, UniqueIdFormat,
};
pub use storage::{StorageMethod, StorageReturn};
pub use win32::Win32Error;

/// Defines a code table: a `Copy` enum with one variant per documented value and `Unknown(raw)` for the rest.
///
/// Generated API: `from_code(raw)`, `code()`, `meaning()` (the documented text, `None` for `Unknown`), `name()` (the
/// constant's name), `ALL` (every documented variant), `Display` (`meaning (code)`), and `From` both ways.
macro_rules! code_table {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $repr:ty, $fmt:literal {
            $( $variant:ident = $value:literal => $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $(
                #[doc = $text]
                $variant,
            )*
            /// A value this table does not document (kept for the log).
            Unknown($repr),
        }

        impl $name {
            /// Every documented value, in table order.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)*];

            /// The variant for a raw value (`Unknown` when undocumented).
            pub const fn from_code(code: $repr) -> Self {
                match code {
                    $( $value => Self::$variant, )*
                    other => Self::Unknown(other),
                }
            }

            /// The raw value.
            pub const fn code(self) -> $repr {
                match self {
                    $( Self::$variant => $value, )*
                    Self::Unknown(raw) => raw,
                }
            }

            /// The documented meaning (`None` for an undocumented value).
            pub const fn meaning(self) -> Option<&'static str> {
                match self {
                    $( Self::$variant => Some($text), )*
                    Self::Unknown(_) => None,
                }
            }

            /// The variant's name (`"Unknown"` for an undocumented value).
            pub const fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => stringify!($variant), )*
                    Self::Unknown(_) => "Unknown",
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match self.meaning() {
                    Some(text) => write!(f, concat!("{} (", $fmt, ")"), text, self.code()),
                    None => write!(f, concat!("undocumented value ", $fmt), self.code()),
                }
            }
        }

        impl From<$repr> for $name {
            fn from(code: $repr) -> Self {
                Self::from_code(code)
            }
        }

        impl From<$name> for $repr {
            fn from(value: $name) -> Self {
                value.code()
            }
        }

        /// The raw value (the `remote` transport's wire form).
        #[cfg(feature = "remote")]
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&self.code(), s)
            }
        }

        #[cfg(feature = "remote")]
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$repr as serde::Deserialize>::deserialize(d).map(Self::from_code)
            }
        }
    };
}
pub(crate) use code_table;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table round-trips every documented value, and no two variants share a value (a duplicate would make
    /// the later variant unreachable from `from_code`).
    #[test]
    fn every_table_round_trips_and_has_unique_values() {
        fn check<
            T: Copy + Eq + std::fmt::Debug,
            R: Copy + Eq + std::hash::Hash + std::fmt::Debug,
        >(
            all: &[T],
            code: impl Fn(T) -> R,
            from: impl Fn(R) -> T,
        ) {
            let mut seen = std::collections::HashSet::new();
            for &v in all {
                assert!(
                    seen.insert(code(v)),
                    "duplicate value {:?} ({v:?})",
                    code(v)
                );
                assert_eq!(from(code(v)), v);
            }
            assert!(!all.is_empty());
        }
        check(Win32Error::ALL, Win32Error::code, Win32Error::from_code);
        check(HResultCode::ALL, HResultCode::code, HResultCode::from_code);
        check(
            StorageReturn::ALL,
            StorageReturn::code,
            StorageReturn::from_code,
        );
        check(IscsiStatus::ALL, IscsiStatus::code, IscsiStatus::from_code);
        check(
            CimStatusCode::ALL,
            CimStatusCode::code,
            CimStatusCode::from_code,
        );
        check(
            SmbMappingStatus::ALL,
            SmbMappingStatus::code,
            SmbMappingStatus::from_code,
        );
        check(
            PartitionStyle::ALL,
            PartitionStyle::code,
            PartitionStyle::from_code,
        );
        check(
            OfflineReason::ALL,
            OfflineReason::code,
            OfflineReason::from_code,
        );
        check(
            DiskOperationalStatus::ALL,
            DiskOperationalStatus::code,
            DiskOperationalStatus::from_code,
        );
        check(BusType::ALL, BusType::code, BusType::from_code);
        check(
            FileSystemType::ALL,
            FileSystemType::code,
            FileSystemType::from_code,
        );
        check(
            NewDiskPolicy::ALL,
            NewDiskPolicy::code,
            NewDiskPolicy::from_code,
        );
        check(
            UniqueIdFormat::ALL,
            UniqueIdFormat::code,
            UniqueIdFormat::from_code,
        );
    }

    #[test]
    fn unknown_values_are_kept_and_displayed_with_their_number() {
        assert_eq!(
            StorageReturn::from_code(49_999),
            StorageReturn::Unknown(49_999)
        );
        assert_eq!(StorageReturn::from_code(49_999).code(), 49_999);
        assert_eq!(
            StorageReturn::from_code(49_999).to_string(),
            "undocumented value 49999"
        );
        assert_eq!(StorageReturn::from_code(49_999).meaning(), None);
        assert_eq!(
            IscsiStatus::from_code(0xEFFF_7777).to_string(),
            "undocumented value 0xEFFF7777"
        );
    }

    #[test]
    fn display_shows_meaning_and_code() {
        assert_eq!(
            StorageReturn::CacheOutOfDate.to_string(),
            "Cache out of date (40003)"
        );
        assert_eq!(
            Win32Error::SessionCredentialConflict.name(),
            "SessionCredentialConflict"
        );
        assert_eq!(
            IscsiStatus::TargetAlreadyLoggedIn.to_string(),
            "The target has already been logged in via an iSCSI session. (0xEFFF003F)"
        );
    }
}
