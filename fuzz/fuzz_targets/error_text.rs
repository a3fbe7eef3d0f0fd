//! csi-proxy error texts: `ErrorKind::from_message` never panics and is deterministic, whatever the host sends
//! (PowerShell output, localised Windows messages, numbers out of range).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy_client::ErrorKind;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let kind = ErrorKind::from_message(&text);
    assert_eq!(kind, ErrorKind::from_message(&text));
});
