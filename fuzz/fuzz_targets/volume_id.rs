//! Volume ids name state-record files: the file key is always 64 lowercase hex digits (no separator, no `..`, no
//! device name, whatever the id), deterministic, and distinct ids get distinct keys.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wincsi::state::file_key;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (a, b) = text.split_at(
        text.char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i),
    );
    let ka = file_key(a);
    assert_eq!(ka.len(), 64);
    assert!(
        ka.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    );
    assert_eq!(ka, file_key(a));
    if a != b {
        assert_ne!(ka, file_key(b), "two volume ids share one state file");
    }
});
