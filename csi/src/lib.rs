//! CSI spec bindings (placeholder until the Foundation issue lands).
