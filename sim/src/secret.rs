//! A string that never shows up in `Debug`/`Display` output.

use serde::{Deserialize, Serialize};

/// A password or CHAP secret.
///
/// `Debug` and `Display` print `<redacted>`; the only way to read the value is [`Secret::expose`]. It serialises
/// to its real value because scenarios (which are test fixtures) must round-trip; state snapshots and the audit
/// log never contain a `Secret`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Call sites are easy to grep for.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The placeholder used wherever a secret would otherwise be printed.
pub const REDACTED: &str = "<redacted>";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_are_redacted() {
        let s = Secret::new("hunter2-very-secret");
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{s}"), "<redacted>");
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Holder {
            password: Secret,
        }
        let h = Holder {
            password: s.clone(),
        };
        assert!(!format!("{h:?}").contains("hunter2"));
        assert_eq!(s.expose(), "hunter2-very-secret");
    }
}
