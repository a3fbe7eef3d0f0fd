//! Host path rules: one normal form for every Windows path the driver hands to the host.
//!
//! kubelet on Windows sends `c:\var\lib\kubelet\…`, `C:\var\lib\kubelet\…` or `\var\lib\kubelet\…`, sometimes with
//! `/` separators. The driver normalises every path exactly one way before it reaches the host port:
//!
//! * `/` becomes `\`; runs of separators collapse to one; a trailing `\` is dropped;
//! * a path starting with a single `\` gets the kubelet root's drive letter (kubelet strips it, csi-proxy needs it);
//! * the drive letter is upper-cased (the rest keeps its case: NTFS preserves case);
//! * it must then be an absolute drive path (`X:\…`): UNC (`\\server\…`) and device (`\\?\…`) paths are refused;
//! * no `.` segment and no `..` anywhere in a segment, no `"` `:` `?` `*` `|` `<` `>` or control character after the
//!   drive prefix;
//! * at most [`MAX_PATH_BYTES`] bytes (csi-proxy's `MaxPathLengthWindows`);
//! * it must lie strictly *inside* `--kubelet-root`, compared component by component and case-insensitively the way
//!   Windows compares names (every character, [`super::name`]). This is stricter than csi-proxy's plain string prefix
//!   check, which also accepts `C:\var\lib\kubeletX\…`; and csi-proxy's own prefix check must pass too (below).
//!
//! Every path csi-proxy's validation refuses (`validatePathWindows`, `pkg/server/filesystem/server.go:75-110`, the
//! same at v1.1.3, v1.2.1, v1.3.0 and master) is refused here first, so a request never records a path the host will
//! not take (a publish record whose target csi-proxy refuses even to `PathExists` would block the volume's unstage).
//! csi-proxy refuses `..` *anywhere* after `X:\` (`strings.Contains(path, "..")`), not only as a segment: Windows
//! (its wide-character APIs, which csi-proxy's Go and the native backend use) and csi-proxy take only `\` and `/` as
//! separators and only the ASCII `.` as a dot, so a look-alike separator (`∕` U+2215, `／` U+FF0F, `＼` U+FF3C, `⧵`
//! U+29F5, …) between dots leaves them inside one segment — an ordinary, if odd, name for Windows — whose `..`
//! csi-proxy refuses. Look-alike dots (`．` U+FF0E, `․` U+2024) are ordinary characters to both, and are accepted.
//! csi-proxy's prefix check lower-cases both sides character by character (Go's `strings.ToLower`), so a kubelet
//! root spelt with a character Windows upcases to the root's letter but Go does not lower-case to it (`ı` U+0131
//! for `i`) is one directory for Windows and outside the root for csi-proxy: refused.
//!
//! A violation is [`Error::InvalidArgument`] naming the rule and the offending path (paths are not secret).
//! [`HostPath`] can only be built through these rules, so the type proves a path was checked.

use std::fmt;

use super::name::{name_key, names_equal};
use crate::error::Error;

/// csi-proxy's `MaxPathLengthWindows`: the longest path (in bytes) the filesystem group accepts.
pub const MAX_PATH_BYTES: usize = 260;

/// Characters never allowed in a host path after the `X:\` prefix (csi-proxy's list plus `<` `>`).
const FORBIDDEN: &[char] = &['"', ':', '?', '*', '|', '<', '>'];

/// A normalised, validated absolute Windows host path inside the kubelet root.
///
/// Construct with [`KubeletRoot::host_path`] (kubelet-supplied paths) or [`HostPath::join`]. Equality is
/// case-insensitive, like NTFS.
#[derive(Clone)]
pub struct HostPath {
    text: String,
}

impl HostPath {
    /// The normalised path text, e.g. `C:\var\lib\kubelet\pods\…\mount`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The canonical key ([`name_key`]): equal for two paths exactly when Windows sees one path. For ASCII paths it
    /// is the lower-cased text.
    pub fn key(&self) -> String {
        name_key(&self.text)
    }

    /// The key earlier versions used (ASCII letters lower-cased only), to find records they wrote; equal to
    /// [`Self::key`] for ASCII paths.
    pub fn legacy_key(&self) -> String {
        self.text.to_ascii_lowercase()
    }

    /// Whether `text` names this path (Windows comparison; `text` is not re-validated).
    pub fn is(&self, text: &str) -> bool {
        names_equal(&self.text, text)
    }

    /// Append one or more relative components (separated by `\` or `/`), re-applying every rule.
    pub fn join(&self, relative: &str, root: &KubeletRoot) -> Result<HostPath, Error> {
        root.host_path(&format!("{}\\{}", self.text, relative))
    }
}

impl PartialEq for HostPath {
    fn eq(&self, other: &Self) -> bool {
        names_equal(&self.text, &other.text)
    }
}

impl Eq for HostPath {}

impl fmt::Debug for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl fmt::Display for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The validated `--kubelet-root` (e.g. `C:\var\lib\kubelet`): the only tree the driver touches on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletRoot {
    /// Normalised text, e.g. `C:\var\lib\kubelet`.
    text: String,
    /// Components after the drive as [`name_key`]s, for the boundary check.
    components: Vec<String>,
}

impl KubeletRoot {
    /// Validate and normalise a kubelet root. A root without a drive letter (`\var\lib\kubelet`) gets `C:`.
    pub fn new(raw: &str) -> Result<Self, Error> {
        let (text, components) = normalise(raw, 'C', "kubelet root")?;
        if components.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "kubelet root {raw:?} must not be a drive root; rule: the kubelet root is a directory such as \
                 C:\\var\\lib\\kubelet"
            )));
        }
        let components = components.iter().map(|c| name_key(c)).collect();
        Ok(Self { text, components })
    }

    /// The normalised root, e.g. `C:\var\lib\kubelet`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The drive letter of the root (upper case).
    pub fn drive(&self) -> char {
        self.text.chars().next().unwrap_or('C')
    }

    /// Normalise and validate a path kubelet (or the driver) supplies; `what` names it in errors
    /// (e.g. "staging_target_path").
    pub fn check(&self, raw: &str, what: &str) -> Result<HostPath, Error> {
        let (text, components) = normalise(raw, self.drive(), what)?;
        if text.len() > MAX_PATH_BYTES {
            return Err(Error::InvalidArgument(format!(
                "{what} {raw:?} is {} bytes long; rule: host paths are at most {MAX_PATH_BYTES} bytes",
                text.len()
            )));
        }
        let same_drive = text[..1].eq_ignore_ascii_case(&self.text[..1]);
        let inside = same_drive
            && components.len() > self.components.len()
            && self
                .components
                .iter()
                .zip(&components)
                .all(|(root, c)| name_key(c) == *root);
        if inside && !go_lowercase(&text).starts_with(&go_lowercase(&self.text)) {
            return Err(Error::InvalidArgument(format!(
                "{what} {raw:?} spells the kubelet root {} with characters csi-proxy does not take for it (it \
                 lower-cases each character, as Go does); rule: spell the kubelet root as configured",
                self.text
            )));
        }
        if !inside {
            return Err(Error::InvalidArgument(format!(
                "{what} {raw:?} is outside the kubelet root {}; rule: host paths must lie inside --kubelet-root",
                self.text
            )));
        }
        Ok(HostPath { text })
    }

    /// [`Self::check`] for internal paths (named "host path" in errors).
    pub fn host_path(&self, raw: &str) -> Result<HostPath, Error> {
        self.check(raw, "host path")
    }

    /// The driver's private directory under the kubelet plugin dir: `<root>\plugins\<driver>`.
    pub fn plugin_dir(&self, driver_name: &str) -> Result<HostPath, Error> {
        self.host_path(&format!("{}\\plugins\\{driver_name}", self.text))
    }
}

/// Normalise `raw`; returns the text and the components after the drive prefix (original case).
fn normalise(raw: &str, default_drive: char, what: &str) -> Result<(String, Vec<String>), Error> {
    let invalid =
        |rule: &str| Error::InvalidArgument(format!("{what} {raw:?} is invalid; rule: {rule}"));
    if raw.trim().is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{what} is empty; rule: a path is required"
        )));
    }
    if raw.chars().any(char::is_control) {
        return Err(invalid("no control characters"));
    }
    let slashed = raw.replace('/', "\\");
    if slashed.starts_with("\\\\") {
        return Err(invalid("UNC and device (\\\\?\\) paths are not host paths"));
    }
    let (drive, rest) = match slashed.as_bytes() {
        [d, b':', b'\\', ..] if d.is_ascii_alphabetic() => {
            ((*d as char).to_ascii_uppercase(), &slashed[3..])
        }
        [d, b':'] if d.is_ascii_alphabetic() => ((*d as char).to_ascii_uppercase(), ""),
        [b'\\', ..] => (default_drive.to_ascii_uppercase(), &slashed[1..]),
        _ => {
            return Err(invalid(
                "an absolute path with a drive letter (X:\\…) or a leading \\",
            ));
        }
    };
    let mut components = Vec::new();
    for part in rest.split('\\').filter(|p| !p.is_empty()) {
        if part == "." || part.contains("..") {
            return Err(invalid(
                "no . segments and no .. anywhere in a segment (csi-proxy refuses .. in any position)",
            ));
        }
        if part.contains(FORBIDDEN) {
            return Err(invalid("none of \" : ? * | < > after the drive prefix"));
        }
        if part.ends_with(' ') || part.ends_with('.') {
            return Err(invalid("no segment ending in a space or a dot"));
        }
        components.push(part.to_owned());
    }
    let mut text = format!("{drive}:");
    if components.is_empty() {
        text.push('\\');
    }
    for c in &components {
        text.push('\\');
        text.push_str(c);
    }
    Ok((text, components))
}

/// Go's `strings.ToLower`: each character's simple lowercase mapping (`unicode.ToLower`). Rust's full mapping differs
/// for one character only, U+0130 (`İ` → `i` + U+0307; Go: `i`).
fn go_lowercase(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '\u{130}' {
                'i'
            } else {
                c.to_lowercase().next().unwrap_or(c)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> KubeletRoot {
        KubeletRoot::new(r"C:\var\lib\kubelet").expect("root")
    }

    #[test]
    fn spellings_normalise_to_one_form() {
        let want = r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount";
        for raw in [
            r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount",
            r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount",
            r"\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/wincsi.csi.io/abc/globalmount",
            "c:/var/lib/kubelet/plugins/kubernetes.io/csi/wincsi.csi.io/abc/globalmount/",
            r"C:\\var\\lib\kubelet\plugins\\kubernetes.io\csi\wincsi.csi.io\abc\globalmount\\",
            r"C:\VAR\Lib\KUBELET\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount",
        ] {
            let p = root().check(raw, "staging_target_path").expect(raw);
            assert!(p.as_str().eq_ignore_ascii_case(want), "{raw} -> {p}");
            assert_eq!(p, root().check(want, "x").expect("want"));
            assert!(p.as_str().starts_with("C:\\"));
        }
    }

    #[test]
    fn case_is_preserved_after_the_drive() {
        let p = root()
            .check(r"c:\var\lib\kubelet\pods\UID\Mount", "target_path")
            .expect("ok");
        assert_eq!(p.as_str(), r"C:\var\lib\kubelet\pods\UID\Mount");
        assert_eq!(p.key(), r"c:\var\lib\kubelet\pods\uid\mount");
    }

    fn rejected(raw: &str) -> String {
        match root().check(raw, "target_path") {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{raw}: expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn outside_the_root_is_refused_on_component_boundaries() {
        for raw in [
            r"C:\var\lib\kubeletX\pods\a",
            r"C:\var\lib\kubelet",
            r"C:\var\lib\kubelet\",
            r"D:\var\lib\kubelet\pods\a",
            r"C:\Windows\System32",
            r"C:\var\lib",
            r"C:\",
        ] {
            assert!(rejected(raw).contains("inside --kubelet-root"), "{raw}");
        }
    }

    #[test]
    fn traversal_and_bad_characters_are_refused() {
        for (raw, rule) in [
            (r"C:\var\lib\kubelet\pods\..\..\Windows", ". segments"),
            (r"C:\var\lib\kubelet\pods\.\a", ". segments"),
            ("C:/var/lib/kubelet/../kubelet/pods", ". segments"),
            (r"C:\var\lib\kubelet\pods\a:b", "none of"),
            (r"C:\var\lib\kubelet\pods\a*", "none of"),
            (r"C:\var\lib\kubelet\pods\a?", "none of"),
            (r"C:\var\lib\kubelet\pods\a|b", "none of"),
            (r#"C:\var\lib\kubelet\pods\"a""#, "none of"),
            (r"C:\var\lib\kubelet\pods\a<b>", "none of"),
            (r"C:\var\lib\kubelet\pods\a.", "ending in"),
            ("C:\\var\\lib\\kubelet\\pods\\a\u{0}", "control"),
            (r"\\server\share\var\lib\kubelet\x", "UNC"),
            (r"\\?\C:\var\lib\kubelet\x", "UNC"),
            ("var/lib/kubelet/x", "absolute"),
            ("1:\\var\\lib\\kubelet\\x", "absolute"),
            ("", "required"),
        ] {
            let msg = rejected(raw);
            assert!(msg.contains(rule), "{raw}: {msg}");
        }
    }

    #[test]
    fn every_path_csi_proxy_refuses_is_refused_first() {
        // csi-proxy refuses `..` anywhere after `X:\` (`strings.Contains`); a look-alike separator is no separator for
        // Windows or csi-proxy, so each of these is one segment holding `..`.
        for sep in [
            '\u{2215}', '\u{ff0f}', '\u{ff3c}', '\u{29f5}', '\u{2044}', '\u{fe68}', '\u{a5}',
        ] {
            let raw = format!(r"C:\var\lib\kubelet\pods\p\..{sep}..{sep}..{sep}Windows\mount");
            let msg = rejected(&raw);
            assert!(msg.contains(".. anywhere in a segment"), "{sep:?}: {msg}");
        }
        for raw in [
            r"C:\var\lib\kubelet\pods\p\a..b\mount",
            r"C:\var\lib\kubelet\pods\p\..x\mount",
            r"C:\var\lib\kubelet\pods\p\...\mount",
        ] {
            assert!(rejected(raw).contains(".. anywhere in a segment"), "{raw}");
        }
        // Look-alike dots are ordinary characters for both.
        for raw in [
            "C:\\var\\lib\\kubelet\\pods\\p\\\u{ff0e}\u{ff0e}\\mount",
            "C:\\var\\lib\\kubelet\\pods\\p\\\u{2024}\u{2024}\\mount",
            r"C:\var\lib\kubelet\pods\p\a.b\mount",
        ] {
            root().check(raw, "target_path").expect(raw);
        }
        // Windows upcases `ı` (U+0131) to `I`, so this is the kubelet root for Windows; Go lower-cases it to itself,
        // so csi-proxy's prefix check says it is outside.
        let dotless = "C:\\var\\l\u{131}b\\kubelet\\pods\\p\\mount";
        assert_eq!(
            crate::host::name::name_key("\u{131}"),
            crate::host::name::name_key("i"),
            "premise: Windows takes ı for i"
        );
        assert!(
            rejected(dotless).contains("spells the kubelet root"),
            "{dotless}"
        );
        // Go lower-cases `İ` (U+0130) to `i` as csi-proxy does: not this rule's to refuse.
        assert_eq!(go_lowercase("\u{130}"), "i");
        assert_eq!(go_lowercase(r"C:\VAR\Lib"), r"c:\var\lib");
    }

    #[test]
    fn length_limit_counts_normalised_bytes() {
        let base = r"C:\var\lib\kubelet\pods\";
        let ok = format!("{base}{}", "a".repeat(MAX_PATH_BYTES - base.len()));
        assert_eq!(
            root().check(&ok, "p").expect("260").as_str().len(),
            MAX_PATH_BYTES
        );
        let long = format!("{ok}b");
        assert!(rejected(&long).contains("at most 260 bytes"));
    }

    #[test]
    fn leading_backslash_takes_the_roots_drive() {
        let root = KubeletRoot::new("d:/k").expect("root");
        assert_eq!(root.as_str(), r"D:\k");
        assert_eq!(
            root.check(r"\k\pods\a", "p").expect("ok").as_str(),
            r"D:\k\pods\a"
        );
        assert!(KubeletRoot::new("C:\\").is_err());
        assert_eq!(
            KubeletRoot::new(r"\var\lib\kubelet")
                .expect("root")
                .as_str(),
            r"C:\var\lib\kubelet"
        );
    }

    #[test]
    fn join_revalidates() {
        let r = root();
        let base = r.check(r"C:\var\lib\kubelet\plugins\x", "p").expect("ok");
        assert_eq!(
            base.join("a/b", &r).expect("join").as_str(),
            r"C:\var\lib\kubelet\plugins\x\a\b"
        );
        assert!(base.join(r"..\..\..\..\Windows", &r).is_err());
        assert_eq!(
            r.plugin_dir("wincsi.csi.io").expect("p").as_str(),
            r"C:\var\lib\kubelet\plugins\wincsi.csi.io"
        );
    }
}
