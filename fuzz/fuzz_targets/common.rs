//! Shared helpers of the fuzz targets: turning fuzz input into a volume_context and a secrets map whose secret
//! values carry a marker that no other input contains, so "an error never echoes a secret" is checkable.

#![allow(dead_code)]

use std::collections::BTreeMap;

use wincsi::smb::Secrets;

/// Prefixed to every secret value; stripped from everything else in the input.
pub const MARK: &str = "\u{1F511}";
/// Also prefixed to password-like secret values (user names may be shown in `Debug`, passwords never).
pub const PW_MARK: &str = "\u{1F512}";

/// Split the input into `key=value` lines: `s:key=value` lines go to the secrets map (value prefixed with
/// [`MARK`]), others to the volume context. Keys that the parsers know are likely, through a small dictionary.
pub fn context_and_secrets(data: &[u8]) -> (BTreeMap<String, String>, Secrets, Vec<String>) {
    let text = String::from_utf8_lossy(data)
        .replace(MARK, "")
        .replace(PW_MARK, "");
    let mut ctx = BTreeMap::new();
    let mut secrets = Vec::new();
    for line in text.split('\n') {
        let (secret, line) = match line.strip_prefix("s:") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        let k = expand_key(k);
        if secret && (k.contains("password") || k.contains("secret")) {
            secrets.push((k, format!("{MARK}{PW_MARK}{v}")));
        } else if secret {
            secrets.push((k, format!("{MARK}{v}")));
        } else {
            ctx.insert(k, v.to_owned());
        }
    }
    let values = secrets.iter().map(|(_, v)| v.clone()).collect();
    (ctx, Secrets::new(secrets), values)
}

/// One-character shorthands for the keys the parsers look at (the fuzzer finds them faster).
fn expand_key(k: &str) -> String {
    match k {
        "S" => "source",
        "D" => "subDir",
        "N" => "csi.storage.k8s.io/pvc/name",
        "n" => "csi.storage.k8s.io/pvc/namespace",
        "V" => "csi.storage.k8s.io/pv/name",
        "O" => "mountOptions",
        "u" => "username",
        "p" => "password",
        "d" => "domain",
        "T" => "targetPortal",
        "P" => "portals",
        "I" => "iqn",
        "L" => "lun",
        "C" => "sessionCHAPAuth",
        "c" => "discoveryCHAPAuth",
        "U" => "node.session.auth.username",
        "W" => "node.session.auth.password",
        "w" => "node.session.auth.password_in",
        "F" => "fsType",
        other => other,
    }
    .to_owned()
}

/// Panic when `text` shows any part of a secret value.
pub fn assert_no_secret(text: &str, what: &str) {
    assert!(!text.contains(MARK), "{what} shows a secret value: {text}");
}

/// A path component the validators must never let through.
pub fn bad_component(c: &str) -> bool {
    c == "." || c == ".." || c.is_empty() || c.contains(['/', '\\'])
}
