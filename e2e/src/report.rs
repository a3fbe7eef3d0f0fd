//! Human-readable accounts of host calls (the simulator's audit log), for the demo and failure reports.

use sim::AuditEntry;

/// Shortens a value for display: the kubelet root becomes `<kubelet>`, 64-hex-digit hashes keep 8 digits.
pub fn shorten(s: &str) -> String {
    let mut out = s.to_owned();
    for root in [r"C:\var\lib\kubelet", r"c:\var\lib\kubelet"] {
        out = out.replace(root, "<kubelet>");
    }
    // Volume GUID paths keep their first 8 digits: \\?\Volume{5ee00001…}\
    while let Some(i) = out.find("Volume{") {
        let Some(end) = out[i..].find('}') else { break };
        if end < 7 + 9 {
            break;
        }
        out.replace_range(i + 7 + 8..i + end, "…");
        // Mark this one done so the loop moves on.
        out.replace_range(i..i + 7, "Volume\u{0}");
    }
    let out = out.replace("Volume\u{0}", "Volume{");
    let mut res = String::with_capacity(out.len());
    let mut run = String::new();
    for c in out.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        if run.len() == 64 {
            res.push_str(&run[..8]);
            res.push('…');
        } else {
            res.push_str(&run);
        }
        run.clear();
        if c != '\0' {
            res.push(c);
        }
    }
    res
}

fn is_secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    k.contains("password") || k.contains("secret")
}

fn value(k: &str, v: &serde_json::Value) -> String {
    if is_secret_key(k) {
        return "<redacted>".to_owned();
    }
    match v {
        serde_json::Value::String(s) => shorten(s),
        serde_json::Value::Object(m) if m.contains_key("target_address") => {
            let port = m
                .get("target_port")
                .map(|p| p.to_string())
                .unwrap_or_default();
            format!(
                "{}:{port}",
                m["target_address"].as_str().unwrap_or_default()
            )
        }
        serde_json::Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", value(k, v)))
                .collect();
            format!("{{{}}}", inner.join(" "))
        }
        other => shorten(&other.to_string()),
    }
}

/// `RPC key=value ...` for one host call; secret-looking fields are always shown as `<redacted>` (the simulator
/// already redacts them; this is a second guard).
pub fn describe(entry: &AuditEntry) -> String {
    let mut s = entry.rpc.clone();
    if let serde_json::Value::Object(m) = &entry.args {
        for (k, v) in m {
            if v.is_null() || v == "" {
                continue;
            }
            s.push(' ');
            s.push_str(k);
            s.push('=');
            s.push_str(&value(k, v));
        }
    }
    if let Some(e) = &entry.error {
        // The first line: PowerShell's error frames follow it (`At line:1 …`, `CategoryInfo`, …).
        let first = e.lines().next().unwrap_or_default();
        let more = if e.trim_end().contains('\n') {
            " …"
        } else {
            ""
        };
        s.push_str(&format!("  → error: {}{more}", shorten(first)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortens_kubelet_root_and_hashes() {
        let p = format!(
            r"c:\var\lib\kubelet\plugins\x\{}\globalmount",
            "ab".repeat(32)
        );
        assert_eq!(shorten(&p), r"<kubelet>\plugins\x\abababab…\globalmount");
        assert_eq!(shorten("lun0"), "lun0");
        assert_eq!(
            shorten(
                r"\\?\Volume{5ee00001-5eed-4000-8000-000000000001}\ and \\?\Volume{abcdef12-0000}\"
            ),
            r"\\?\Volume{5ee00001…}\ and \\?\Volume{abcdef12…}\"
        );
    }

    #[test]
    fn secret_fields_are_redacted() {
        let e = AuditEntry {
            seq: 1,
            rpc: "NewSmbGlobalMapping".into(),
            args: serde_json::json!({"remote_path": r"\\s\d", "username": "u", "password": "hunter2", "chap_secret": "x"}),
            started_unix_ms: 0,
            duration_us: 5,
            error: None,
            injected: false,
            boot: 1,
            host_processes: sim::state::Spawned::default(),
        };
        let d = describe(&e);
        assert!(
            !d.contains("hunter2")
                && d.contains("password=<redacted>")
                && d.contains("chap_secret=<redacted>"),
            "{d}"
        );
    }
}
