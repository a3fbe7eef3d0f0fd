//! The `grpc-timeout` header kubelet sends: `Deadline::from_grpc_timeout` never panics, whatever the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wincsi::locks::Deadline;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = Deadline::from_grpc_timeout(Some(&text));
});
