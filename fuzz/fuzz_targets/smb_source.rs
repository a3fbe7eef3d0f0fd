//! SMB source UNC paths: `UncPath::parse` never panics; an accepted path has a server, a share, no `.`/`..`
//! segment, and the text handed to `NewSmbGlobalMapping` parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wincsi::host::UncPath;

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    let Ok(p) = UncPath::parse(&raw, "source") else {
        return;
    };
    let text = p.to_string();
    assert!(text.starts_with(r"\\"), "{text:?}");
    assert!(!p.server().is_empty());
    for c in text[2..].split('\\') {
        assert!(
            c != "." && c != ".." && !c.is_empty(),
            "{raw:?} -> {text:?}"
        );
    }
    for c in p.components() {
        assert!(c != "." && c != "..", "{raw:?}");
    }
    let again = UncPath::parse(&text, "again").expect("the host-call text is valid");
    assert_eq!(
        again, p,
        "the host-call argument differs from what validation approved"
    );
    assert!(text.starts_with(&p.root().to_string()));
});
