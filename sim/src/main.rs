//! `wincsi-sim` binary (placeholder until serving lands).
fn main() {}
