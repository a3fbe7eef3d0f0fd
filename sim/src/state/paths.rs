//! Windows path handling: csi-proxy's exact validation rules and the mapping of Windows paths onto the sandbox.

use std::path::{Component, Path, PathBuf};

use super::links::LinkMode;

/// csi-proxy's `MaxPathLengthWindows` (bytes, Go `len`).
pub(crate) const MAX_PATH_LENGTH_WINDOWS: usize = 260;

/// Whether `path` starts with a drive letter, a colon and a backslash (`^[a-zA-Z]:\\`).
pub(crate) fn is_abs_windows(path: &str) -> bool {
    let b = path.as_bytes();
    b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\'
}

fn contains_invalid_characters(path: &str) -> bool {
    let rest = if is_abs_windows(path) {
        &path[3..]
    } else {
        path
    };
    rest.chars()
        .any(|c| matches!(c, '"' | '/' | ':' | '?' | '*' | '|'))
        || rest.contains("..")
}

/// csi-proxy's `validatePathWindows` (`pkg/server/filesystem/server.go:75-110`, identical in v1.1.3 … master),
/// check by check and message by message. The allowed roots are the `-working-dir`s followed by `-kubelet-path`
/// (`cmd/csi-proxy/main.go`: `workingDirs = append(workingDirs, *kubeletPath)`); the refusal prints them as Go's
/// `%v` of a `[]string`. (Its UNC check is unreachable: a leading `\` is refused first.)
pub(crate) fn validate_path_windows(
    path: &str,
    kubelet_path: &str,
    working_dirs: &[String],
) -> Result<(), String> {
    let pathlen = path.len();
    if pathlen > MAX_PATH_LENGTH_WINDOWS {
        return Err(format!(
            "path length {pathlen} exceeds maximum characters: {MAX_PATH_LENGTH_WINDOWS}"
        ));
    }
    if path.starts_with('\\') {
        return Err(format!("invalid character \\ at beginning of path: {path}"));
    }
    if contains_invalid_characters(path) {
        return Err(format!("path contains invalid characters: {path}"));
    }
    if !is_abs_windows(path) {
        return Err(format!("not an absolute Windows path: {path}"));
    }
    let lower = path.to_lowercase();
    let roots: Vec<&str> = working_dirs
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(kubelet_path))
        .collect();
    if !roots
        .iter()
        .any(|root| lower.starts_with(&root.to_lowercase()))
    {
        return Err(format!(
            "path: {path} is not within the working directories: [{}]",
            roots.join(" ")
        ));
    }
    Ok(())
}

/// A parsed drive-letter path: lower-case drive letter plus its components (empty and `.` components dropped,
/// as Windows normalisation does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DrivePath {
    pub(crate) drive: char,
    pub(crate) components: Vec<String>,
}

impl DrivePath {
    /// Parses `X:\a\b` (also accepts `/` separators, as Win32 does). Returns `None` for anything else.
    pub(crate) fn parse(path: &str) -> Option<DrivePath> {
        let b = path.as_bytes();
        if b.len() < 2 || !b[0].is_ascii_alphabetic() || b[1] != b':' {
            return None;
        }
        if b.len() > 2 && b[2] != b'\\' && b[2] != b'/' {
            return None;
        }
        let drive = (b[0] as char).to_ascii_lowercase();
        Some(DrivePath {
            drive,
            components: normalise_components(&path[2..]),
        })
    }
}

/// Parses `\\server\share\rest...` (either separator). Returns lower-cased server and share plus the rest.
pub(crate) fn parse_unc(path: &str) -> Option<(String, String, Vec<String>)> {
    let norm = path.replace('/', "\\");
    let rest = norm.strip_prefix("\\\\")?;
    if rest.starts_with("?\\") || rest.starts_with(".\\") {
        return None;
    }
    let mut parts = rest.split('\\').filter(|c| !c.is_empty());
    let server = parts.next()?.to_lowercase();
    let share = parts.next()?.to_lowercase();
    if [&server, &share]
        .iter()
        .any(|c| c.as_str() == "." || c.as_str() == "..")
    {
        return None;
    }
    let rest: Vec<&str> = parts.collect();
    Some((server, share, normalise_components(&rest.join("\\"))))
}

/// Splits a path tail on either separator the way Windows normalises it (`GetFullPathName`): empty and `.`
/// components vanish, `..` removes the previous component and never climbs above the root. Keeps every sandbox
/// lookup inside its root, even for RPCs csi-proxy does not validate (IsSymlink, Volume group paths).
pub(crate) fn normalise_components(tail: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in tail.split(['\\', '/']) {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c.to_string()),
        }
    }
    out
}

/// Resolves `components` below `base` case-insensitively, as NTFS would: for every component that already exists
/// under a different case, the existing spelling is used; the remaining components are appended as given.
/// Intermediate symlinks are followed by the OS when the result is used, like reparse points on Windows.
pub(crate) fn resolve_ci(base: &Path, components: &[String], links: LinkMode) -> PathBuf {
    let mut cur = links.resolve(base);
    let mut exists = true;
    for comp in components {
        if exists {
            // Descending through a link goes to its target (only emulated links need this; the OS follows real ones).
            cur = links.follow_last(cur);
            let exact = cur.join(comp);
            if exact.symlink_metadata().is_ok() {
                cur = exact;
                continue;
            }
            if let Ok(rd) = std::fs::read_dir(&cur) {
                let found = rd
                    .flatten()
                    .find(|e| e.file_name().to_string_lossy().eq_ignore_ascii_case(comp));
                if let Some(e) = found {
                    cur = cur.join(e.file_name());
                    continue;
                }
            }
            exists = false;
        }
        cur = cur.join(comp);
    }
    cur
}

/// Makes a relative file path from a scenario (`a/b.txt` or `a\b.txt`) safe to join under a directory: no
/// absolute paths, no `..`.
pub(crate) fn safe_relative(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(rel.replace('\\', "/"));
    if p.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && !rel.is_empty()
    {
        Some(p)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBELET: &str = r"C:\var\lib\kubelet";

    fn v(p: &str) -> Result<(), String> {
        validate_path_windows(p, KUBELET, &[])
    }

    #[test]
    fn accepts_paths_under_kubelet_case_insensitively() {
        assert!(v(r"C:\var\lib\kubelet\pods\x\volumes").is_ok());
        assert!(v(r"c:\VAR\lib\Kubelet\plugins").is_ok());
    }

    #[test]
    fn prefix_check_has_no_separator_boundary() {
        // The real server does a plain string-prefix match.
        assert!(v(r"C:\var\lib\kubeletX\evil").is_ok());
    }

    #[test]
    fn rejects_outside_prefix_with_real_message() {
        assert_eq!(
            v(r"C:\Windows\System32").unwrap_err(),
            r"path: C:\Windows\System32 is not within the working directories: [C:\var\lib\kubelet]"
        );
    }

    #[test]
    fn working_dirs_are_extra_roots() {
        let wd = vec![r"D:\csi".to_string()];
        assert!(validate_path_windows(r"D:\csi\x", KUBELET, &wd).is_ok());
        assert_eq!(
            validate_path_windows(r"D:\other", KUBELET, &wd).unwrap_err(),
            r"path: D:\other is not within the working directories: [D:\csi C:\var\lib\kubelet]"
        );
    }

    #[test]
    fn rejects_leading_backslash_and_unc() {
        assert_eq!(
            v(r"\\server\share").unwrap_err(),
            r"invalid character \ at beginning of path: \\server\share"
        );
        assert!(
            v(r"\\?\C:\var\lib\kubelet")
                .unwrap_err()
                .starts_with("invalid character \\")
        );
        assert!(v(r"\var\lib\kubelet").is_err());
    }

    #[test]
    fn rejects_relative_paths() {
        assert_eq!(
            v(r"var\lib\kubelet").unwrap_err(),
            r"not an absolute Windows path: var\lib\kubelet"
        );
    }

    #[test]
    fn rejects_forbidden_characters_after_prefix() {
        for c in ['"', '/', ':', '?', '*', '|'] {
            let p = format!(r"C:\var\lib\kubelet\a{c}b");
            assert_eq!(
                v(&p).unwrap_err(),
                format!("path contains invalid characters: {p}")
            );
        }
        // The colon of the drive prefix itself is fine.
        assert!(v(r"C:\var\lib\kubelet\ok").is_ok());
    }

    #[test]
    fn rejects_dot_dot_anywhere() {
        assert!(
            v(r"C:\var\lib\kubelet\..\..\Windows")
                .unwrap_err()
                .contains("invalid characters")
        );
        assert!(v(r"C:\var\lib\kubelet\a..b").is_err());
    }

    #[test]
    fn length_cap_is_260_bytes() {
        let base = format!(r"{KUBELET}\");
        let ok = format!("{base}{}", "a".repeat(260 - base.len()));
        assert_eq!(ok.len(), 260);
        assert!(v(&ok).is_ok());
        let long = format!("{ok}a");
        assert_eq!(
            v(&long).unwrap_err(),
            "path length 261 exceeds maximum characters: 260"
        );
        // Bytes, not characters: multi-byte UTF-8 counts more than once.
        let uni = format!("{base}{}", "é".repeat(130));
        assert!(uni.chars().count() < 260 && uni.len() > 260);
        assert!(v(&uni).unwrap_err().starts_with("path length"));
    }

    #[test]
    fn drive_path_parsing() {
        let p = DrivePath::parse(r"c:\Var\\lib\.\x").unwrap();
        assert_eq!(p.drive, 'c');
        assert_eq!(p.components, vec!["Var", "lib", "x"]);
        assert!(DrivePath::parse(r"\\s\x").is_none());
        assert!(DrivePath::parse("C:x").is_none());
    }

    #[test]
    fn dot_dot_never_climbs_above_the_root() {
        let p = DrivePath::parse(r"C:\..\..\etc\.\passwd").unwrap();
        assert_eq!(p.components, vec!["etc", "passwd"]);
        let p = DrivePath::parse(r"C:\a\b\..\c").unwrap();
        assert_eq!(p.components, vec!["a", "c"]);
        let (_, _, rest) = parse_unc(r"\\s\sh\..\..\x").unwrap();
        assert_eq!(rest, vec!["x"]);
        assert!(parse_unc(r"\\..\x").is_none());
    }

    proptest::proptest! {
        #[test]
        fn parsed_paths_have_only_plain_components(path in "[a-zA-Z]:[\\\\/a-z.]{0,30}") {
            if let Some(p) = DrivePath::parse(&path) {
                for c in &p.components {
                    proptest::prop_assert!(!c.is_empty() && c != "." && c != ".." && !c.contains(['\\', '/']));
                }
            }
        }

        #[test]
        fn validation_never_panics(path in "\\PC{0,300}") {
            let _ = validate_path_windows(&path, r"C:\var\lib\kubelet", &[]);
        }
    }

    #[test]
    fn unc_parsing() {
        let (s, sh, rest) = parse_unc("//Server/Share/a/b").unwrap();
        assert_eq!((s.as_str(), sh.as_str()), ("server", "share"));
        assert_eq!(rest, vec!["a", "b"]);
        assert!(parse_unc(r"\\server").is_none());
        assert!(parse_unc(r"\\?\Volume{x}\").is_none());
    }

    #[test]
    fn safe_relative_rejects_escapes() {
        assert!(safe_relative("a/b.txt").is_some());
        assert!(safe_relative(r"a\b.txt").is_some());
        assert!(safe_relative("../x").is_none());
        assert!(safe_relative("/etc/passwd").is_none());
        assert!(safe_relative("").is_none());
    }
}
