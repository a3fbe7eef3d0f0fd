#!/usr/bin/env bash
# Smoke run of the benchmark harness (bench/, issue 8): every section with tiny sizes (a few lifecycles, N = 1
# and 4, a 64-lifecycle soak), against the debug builds of the real wincsi-node and wincsi-sim binaries. It
# asserts correctness only (no failed CSI call, no leaked host object, no data loss, no driver state record
# left) and never timing: figures from a smoke run mean nothing. Takes seconds once the binaries are built.
#
#   bash .ci/bench-smoke.sh
#
# The full run that produced BENCHMARKS.md is described there.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=.ci/env.sh
. .ci/env.sh

target_dir="${CARGO_TARGET_DIR:-target}"
# In scripts/test-all.sh the binaries come from its `test build (linux)` build (WINCSI_PREBUILT_BINS=1: `cargo test
# --workspace --all-features` builds wincsi-node, wincsi-sim and, for bench/tests/cli.rs, wincsi-bench). Building
# them here with other features would rebuild the whole dependency stack once more (tokio's test-util differs).
if [ "${WINCSI_PREBUILT_BINS:-0}" = 1 ]; then
    for bin in wincsi-bench wincsi-node wincsi-sim; do
        [ -x "$target_dir/debug/$bin" ] || {
            echo "bench-smoke.sh: $target_dir/debug/$bin is missing (WINCSI_PREBUILT_BINS=1 expects the test build's)" >&2
            exit 1
        }
    done
else
    cargo build -p wincsi-bench -p wincsi-driver -p wincsi-sim --bins
fi

out_dir="$(mktemp -d "${TMPDIR:-/tmp}/wincsi-bench-smoke.XXXXXX")"
trap 'rm -rf "$out_dir"' EXIT

"$target_dir/debug/wincsi-bench" --smoke \
    --node-bin "$target_dir/debug/wincsi-node" \
    --sim-bin "$target_dir/debug/wincsi-sim" \
    --out "$out_dir/smoke.json"
