//! The csi-proxy adapter of the host port (placeholder until proxy-client lands).
