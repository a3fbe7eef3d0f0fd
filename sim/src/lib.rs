//! Simulated Windows host (placeholder until the simulated-host issue lands).
