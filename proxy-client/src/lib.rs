//! Wire-compatible client for the Windows [csi-proxy](https://github.com/kubernetes-csi/csi-proxy)
//! named-pipe gRPC API.
//!
//! The protobuf definitions in `proto/` match csi-proxy releases **v1.1.3 to v1.3.0**
//! (the v1 API groups have not changed since v1.1.0): disk v1, volume v1, filesystem v1,
//! smb v1, iscsi v1alpha2 and system v1alpha1. See [`proto`].

pub mod proto;
