//! wincsi node driver library (placeholder until the Foundation issue lands).
