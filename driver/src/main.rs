//! wincsi-node binary.
fn main() {}
