//! The SMB vocabulary of the host port: validated UNC paths and the credential of a global mapping.

use std::fmt;

use super::Secret;
use super::name::name_key;
use crate::error::Error;

/// A validated UNC path `\\server\share[\component…]`.
#[derive(Clone, PartialEq, Eq)]
pub struct UncPath {
    server: String,
    share: String,
    rest: Vec<String>,
}

impl UncPath {
    /// Parse `\\server\share[\path]` or `//server/share[/path]`; `what` names the value in errors.
    pub fn parse(raw: &str, what: &str) -> Result<Self, Error> {
        let bad = |rule: &str| {
            Error::InvalidArgument(format!(
                "{what} {raw:?} is not a valid UNC path; rule: {rule}"
            ))
        };
        if raw.chars().any(char::is_control) {
            return Err(bad("no control characters"));
        }
        let slashed = raw.trim().replace('/', "\\");
        let Some(body) = slashed.strip_prefix("\\\\") else {
            return Err(bad("it starts with \\\\server\\share or //server/share"));
        };
        if body.starts_with('\\') || body.starts_with("?\\") || body.starts_with(".\\") {
            return Err(bad("it starts with \\\\server\\share or //server/share"));
        }
        let mut parts = body.split('\\').filter(|p| !p.is_empty());
        let server = parts
            .next()
            .ok_or_else(|| bad("a server name is required"))?;
        // A leading dot is no host name: `\\..\share` or `\\.\…` must never reach a Windows path normaliser.
        if server.starts_with('.')
            || !server
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(bad(
                "the server is a host name or IPv4 address (letters, digits, - . _)",
            ));
        }
        let share = parts
            .next()
            .ok_or_else(|| bad("a share name is required"))?;
        if share.contains([
            '"', '/', ':', '*', '?', '<', '>', '|', '[', ']', ';', ',', '=', '+',
        ]) {
            return Err(bad(
                "the share name has none of \" / : * ? < > | [ ] ; , = +",
            ));
        }
        let rest = parts
            .map(|p| check_component(p, raw, what))
            .collect::<Result<Vec<_>, _>>()?;
        // Like a path segment, a share name may not end in a space or dot: Windows strips those, so the host would
        // get another name than the one validated (`\\srv\.  ` is the share `.`).
        if share == "." || share == ".." || share.ends_with([' ', '.']) {
            return Err(bad(
                "no . or .. segments and no share name ending in a space or a dot",
            ));
        }
        Ok(Self {
            server: server.to_owned(),
            share: share.to_owned(),
            rest,
        })
    }

    /// The server name as written.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// `\\server\share` only.
    pub fn root(&self) -> UncPath {
        Self {
            server: self.server.clone(),
            share: self.share.clone(),
            rest: Vec::new(),
        }
    }

    /// The mapping key: `\\server\share` as a Windows name key ([`name_key`]: case-insensitive for every
    /// character, the way the SMB client and server compare share names; lower-cased text for ASCII names).
    pub fn root_key(&self) -> String {
        name_key(&format!("\\\\{}\\{}", self.server, self.share))
    }

    /// The server as a Windows name key (Windows error 1219 is per server).
    pub fn server_key(&self) -> String {
        name_key(&self.server)
    }

    /// The components after the share.
    pub fn components(&self) -> &[String] {
        &self.rest
    }

    /// This path with more components appended.
    pub fn join(&self, more: &[String]) -> UncPath {
        let mut out = self.clone();
        out.rest.extend(more.iter().cloned());
        out
    }
}

impl fmt::Display for UncPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\\\\{}\\{}", self.server, self.share)?;
        for c in &self.rest {
            write!(f, "\\{c}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for UncPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

/// The longest path component Windows allows, in UTF-16 code units: `lpMaximumComponentLength`, "commonly 255" (NTFS,
/// and the SMB server's file systems; learn.microsoft.com, "Maximum Path Length Limitation").
pub(crate) const MAX_COMPONENT_UNITS: usize = 255;

/// Validate one path component of a UNC path or subDir.
pub(crate) fn check_component(part: &str, raw: &str, what: &str) -> Result<String, Error> {
    let bad =
        |rule: &str| Error::InvalidArgument(format!("{what} {raw:?} is invalid; rule: {rule}"));
    if part == "." || part == ".." {
        return Err(bad("no . or .. segments"));
    }
    if part.contains(['"', ':', '*', '?', '<', '>', '|']) || part.chars().any(char::is_control) {
        return Err(bad(
            "path segments have none of \" : * ? < > | or control characters",
        ));
    }
    if part.ends_with(' ') || part.ends_with('.') {
        return Err(bad("no segment ending in a space or a dot"));
    }
    let units = part.encode_utf16().count();
    if units > MAX_COMPONENT_UNITS {
        return Err(bad(&format!(
            "no path segment longer than {MAX_COMPONENT_UNITS} characters (Windows' limit on a file or directory \
             name; this one has {units})"
        )));
    }
    Ok(part.to_owned())
}

/// The credential of an SMB global mapping: the principal name and its password (redacted in `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct SmbCredential {
    principal: String,
    password: Secret,
}

impl SmbCredential {
    /// A credential for `principal` (`DOMAIN\user` or `user@fqdn` or `user`).
    pub fn new(principal: impl Into<String>, password: Secret) -> Self {
        Self {
            principal: principal.into(),
            password,
        }
    }

    /// The principal name (not secret).
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The password, for the host call only.
    pub fn password(&self) -> &Secret {
        &self.password
    }
}

impl fmt::Debug for SmbCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmbCredential")
            .field("principal", &self.principal)
            .field("password", &self.password)
            .finish()
    }
}
