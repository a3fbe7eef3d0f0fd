//! csi-proxy client (placeholder until the proxy-client issue lands).
