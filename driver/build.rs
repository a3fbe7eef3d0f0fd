//! Records build information (target triple, profile, rustc version) for the plugin manifest
//! returned by `GetPluginInfo` and for `--version`. Git-less on purpose: builds from a source
//! tarball must work.

use std::process::Command;

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=WINCSI_BUILD_TARGET={target}");
    println!("cargo:rustc-env=WINCSI_BUILD_PROFILE={profile}");
    println!("cargo:rustc-env=WINCSI_BUILD_RUSTC={rustc_version}");
    println!("cargo:rerun-if-changed=build.rs");
}
