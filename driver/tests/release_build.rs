//! The test-only native transport (`test-windows-socket`: `--test-windows-socket` points the native backend at a
//! simulated host's socket) is never in a shipped `wincsi-node`: it is no default feature, and no release build —
//! the image's (`Dockerfile.windows`), the release or real-node workflows', the documented ones — enables it (or every
//! feature). A static check of the build definitions: the release binary is built by exactly these commands.

use std::path::{Path, PathBuf};

const FEATURE: &str = "test-windows-socket";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `cargo build … --release …` commands of a file, continuation lines joined.
fn release_builds(text: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    joined
        .lines()
        .filter(|l| l.contains("cargo build") && l.contains("--release"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_test_transport_is_not_a_default_feature() {
    let manifest = read(&repo().join("driver/Cargo.toml"));
    let features = manifest
        .split("[features]")
        .nth(1)
        .expect("a [features] table")
        .split("\n[")
        .next()
        .expect("table");
    assert!(
        features.contains(&format!("{FEATURE} = ")),
        "the feature exists: {features}"
    );
    for line in features.lines() {
        assert!(
            !(line.trim_start().starts_with("default") && line.contains(FEATURE)),
            "{FEATURE} must not be a default feature: {line}"
        );
    }
}

#[test]
fn no_release_build_enables_it() {
    let root = repo();
    let mut files = vec![root.join("Dockerfile.windows"), root.join("docs/images.md")];
    if let Ok(entries) = std::fs::read_dir(root.join(".github/workflows")) {
        files.extend(entries.flatten().map(|e| e.path()));
    }
    let mut seen = 0;
    for file in files.iter().filter(|f| f.exists()) {
        for build in release_builds(&read(file)) {
            if !build.contains("wincsi-driver") && !build.contains("wincsi-node") {
                continue;
            }
            seen += 1;
            assert!(
                !build.contains("--all-features")
                    && !build.contains("--features")
                    && !build.contains(FEATURE),
                "{}: a release build of the driver enables features: {build}",
                file.display()
            );
        }
    }
    let dockerfile = read(&root.join("Dockerfile.windows"));
    assert!(
        release_builds(&dockerfile)
            .iter()
            .any(|b| b.contains("-p wincsi-driver --bin wincsi-node")),
        "the image's build command was found"
    );
    assert!(seen >= 2, "release builds found: {seen}");
}
