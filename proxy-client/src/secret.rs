//! A string that never shows up in `Debug` or `Display` output.

use std::fmt;

/// A secret string (SMB password, CHAP secret).
///
/// `Debug` and `Display` print `<redacted>`; the only way to read the value is the explicit
/// [`Secret::expose`]. The value is handed to csi-proxy unchanged.
///
/// ```
/// use proxy_client::Secret;
/// let s = Secret::new("hunter2");
/// assert_eq!(format!("{s:?} {s}"), "Secret(<redacted>) <redacted>");
/// assert_eq!(s.expose(), "hunter2");
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Call only where the value is handed on to csi-proxy.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
