#!/usr/bin/env bash
# Fuzz smoke run (issue 9): build every cargo-fuzz target in fuzz/ and run each for a few seconds from its seed
# corpus (fuzz/corpus/<target>/seed-*). Any crash, panic or failed property is a failure of this script; the
# reproducer is left in fuzz/artifacts/<target>/. Longer runs: see fuzz/README.md.
#
#   bash .ci/fuzz-smoke.sh                       # 5 s per target
#   WINCSI_FUZZ_SECONDS=60 bash .ci/fuzz-smoke.sh
#
# Toolchain: only stable Rust exists here. cargo-fuzz needs nightly flags (-Zsanitizer, -Cpasses=sancov-module), so
# the script sets RUSTC_BOOTSTRAP=1, which lets the stable compiler accept them. cargo-fuzz itself is installed once
# with `cargo install cargo-fuzz --locked` into $WINCSI_CACHE/cargo-fuzz (default ~/.cache/wincsi; measured here:
# about 1 min 45 s on 2 busy cores) and reused afterwards. The first build of the targets compiles the driver's whole
# dependency tree with sanitizer flags into fuzz/target (about 14 min cold on 2 busy cores; about 1 min after a
# driver change); cache fuzz/target in CI. WINCSI_FUZZ_SANITIZER=none skips AddressSanitizer (all wincsi code is
# safe Rust, so the fuzzers' value is panics and properties; the default keeps cargo-fuzz's address sanitizer).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
    echo "fuzz-smoke.sh: error: $*" >&2
    exit 1
}

seconds="${WINCSI_FUZZ_SECONDS:-5}"
sanitizer="${WINCSI_FUZZ_SANITIZER:-address}"
# -O (release, the default) fuzzes fastest; --dev builds the dependency tree much faster, which is what a
# seconds-long smoke run in CI wants.
build="${WINCSI_FUZZ_BUILD:--O}"
case "$build" in -O | --dev) ;; *) die "WINCSI_FUZZ_BUILD must be -O or --dev, not '$build'" ;; esac
cache="${WINCSI_CACHE:-$HOME/.cache/wincsi}"
export PATH="$cache/cargo-fuzz/bin:$PATH"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz into $cache/cargo-fuzz"
    start=$SECONDS
    cargo install cargo-fuzz --locked --root "$cache/cargo-fuzz" ||
        die "cannot install cargo-fuzz (cargo install cargo-fuzz --locked failed)"
    echo "cargo-fuzz installed in $((SECONDS - start)) s"
fi
cargo fuzz --version >/dev/null 2>&1 || die "cargo fuzz does not run"

cd fuzz
targets=$(cargo fuzz list) || die "cargo fuzz list failed"
[ -n "$targets" ] || die "no fuzz targets found"
cargo fuzz build "$build" -s "$sanitizer" || die "building the fuzz targets failed"

work="$(mktemp -d "${TMPDIR:-/tmp}/wincsi-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failed=()
for t in $targets; do
    # New inputs go to a scratch copy; the committed seeds stay as they are.
    mkdir -p "$work/$t"
    cp corpus/"$t"/seed-* "$work/$t/" 2>/dev/null || true
    echo "===== fuzz $t (${seconds}s)"
    if cargo fuzz run "$build" -s "$sanitizer" "$t" "$work/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$work/$t.log" 2>&1; then
        grep -E '^stat::number_of_executed_units' "$work/$t.log" | sed "s/^/  $t: /" || true
    else
        tail -n 40 "$work/$t.log" >&2
        failed+=("$t")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    die "fuzz targets failed: ${failed[*]} (reproducers in fuzz/artifacts/)"
fi
echo "fuzz smoke: all targets ran ${seconds}s without a finding"
