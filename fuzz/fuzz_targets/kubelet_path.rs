//! Kubelet paths in every spelling: `check` never panics, never accepts a path outside the kubelet root (at a
//! component boundary) or with a `.`/`..` segment, and its output is a fixed point (normalise twice = once).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wincsi::host::{KubeletRoot, MAX_PATH_BYTES};

const ROOTS: [&str; 4] = [
    r"C:\var\lib\kubelet",
    r"c:/var/lib/kubelet/",
    r"\var\lib\kubelet",
    r"D:\k",
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let raw = String::from_utf8_lossy(rest);
    // Half the inputs start inside the root, so the fuzzer explores what follows it.
    let raw = if sel & 0x80 != 0 {
        format!(r"C:\var\lib\kubelet\{raw}")
    } else {
        raw.into_owned()
    };
    let root = KubeletRoot::new(ROOTS[usize::from(sel & 3)]).expect("root");
    let Ok(p) = root.check(&raw, "target_path") else {
        return;
    };
    let text = p.as_str();
    let prefix = format!("{}\\", root.as_str());
    assert!(
        text.len() > prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(&prefix),
        "{raw:?} accepted as {text:?}, outside {prefix:?}"
    );
    assert!(text.len() <= MAX_PATH_BYTES);
    assert!(!text.contains('/'));
    for c in text[3..].split('\\') {
        assert!(
            c != "." && c != ".." && !c.is_empty(),
            "{raw:?} -> {text:?}: bad segment {c:?}"
        );
        assert!(!c.contains([':', '*', '?', '"', '<', '>', '|']), "{text:?}");
        assert!(!c.chars().any(char::is_control), "{text:?}");
    }
    let again = root
        .check(text, "again")
        .expect("a normalised path is accepted again");
    assert_eq!(again.as_str(), text, "normalisation is not idempotent");
    let lower = root
        .check(&text.to_ascii_lowercase(), "lower")
        .expect("case variant");
    assert_eq!(lower, p, "case-insensitive equality");
    // Joining re-validates: nothing escapes through join either.
    if let Ok(j) = p.join(&raw, &root) {
        assert!(j.as_str()[..prefix.len()].eq_ignore_ascii_case(&prefix));
        assert!(!j.as_str().split('\\').any(|c| c == ".."));
    }
});
