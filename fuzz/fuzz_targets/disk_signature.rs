//! The native backend's RAW-disk guard (`winhost::signature::examine`) over arbitrary device bytes: never panics; every
//! finding lies inside the device; nothing is found exactly when every byte read is zero (the verdict "blank" is
//! never given to a disk with data, and never withheld from a blank one).
//!
//! Input: 8 bytes of device length (little-endian, kept below 64 MiB so the end-relative probes meet the bytes), 4
//! bytes where the rest splits into the head and the tail, then the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use winhost::model::DeviceBytes;
use winhost::signature::{HEAD_BYTES, TAIL_BYTES, examine};

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let length = u64::from_le_bytes(data[..8].try_into().unwrap()) % (64 << 20);
    let split = u32::from_le_bytes(data[8..12].try_into().unwrap()) as usize;
    let rest = &data[12..];
    let split = split % (rest.len() + 1);
    let clip = |b: &[u8], max: u64| b[..b.len().min(length.min(max) as usize)].to_vec();
    let dev = DeviceBytes {
        length,
        head: clip(&rest[..split], HEAD_BYTES),
        tail: clip(&rest[split..], TAIL_BYTES),
    };
    let found = examine(&dev);
    assert!(found.iter().all(|f| f.offset < length), "{found:?}");
    let blank = dev.head.iter().chain(&dev.tail).all(|&b| b == 0);
    assert_eq!(found.is_empty(), blank, "{found:?}");
});
