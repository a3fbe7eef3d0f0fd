#!/usr/bin/env bash
# wincsi's whole check suite: what CI runs after .ci/install.sh, and the README's test command.
#
#   bash .ci/install.sh      # once per machine (idempotent)
#   bash scripts/test-all.sh
#
# Steps (the first failing step stops the run and is named at the end):
#   preflight        every tool install.sh provides is present
#   scripts lint     shellcheck on .ci/*.sh, .ci/run, scripts/*.sh (warnings and errors)
#   fmt              cargo fmt --all --check
#   chart checks     .ci/chart-check.sh, when the chart engineer's script exists (helm lint/template, schemas)
#   clippy (linux)   cargo clippy --workspace --all-targets --all-features -- -D warnings
#   clippy (windows) the same with --target x86_64-pc-windows-gnu (lints the #[cfg(windows)] code)
#   doc              RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps
#   test (linux)     cargo test --workspace --all-features
#   test (wine)      cargo test --target x86_64-pc-windows-gnu --all-features -p <every package with
#                    tests/wine_*.rs> --test 'wine_*', run under Wine through .ci/wine-run.sh
# It ends with a step-timing table and one "total: N passed, N failed" line summed over both cargo test runs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=.ci/env.sh
. .ci/env.sh
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

WINDOWS_TARGET=x86_64-pc-windows-gnu
# Colour only on a terminal (rustfmt colours its diffs even into a CI log otherwise).
if [ -t 1 ]; then color=always; else color=never; fi
# Both cargo test runs are also logged here, for the closing totals line (and for reading after a failure).
test_log="${CARGO_TARGET_DIR:-target}/wincsi-test-all.log"
mkdir -p "$(dirname "$test_log")"
: >"$test_log"

preflight() {
    local missing=()
    cargo fmt --version >/dev/null 2>&1 || missing+=("rustfmt")
    cargo clippy --version >/dev/null 2>&1 || missing+=("clippy")
    rustup target list --installed 2>/dev/null | grep -qx "$WINDOWS_TARGET" || missing+=("rust target $WINDOWS_TARGET")
    command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || missing+=("x86_64-w64-mingw32-gcc")
    command -v "$WINCSI_WINE" >/dev/null 2>&1 || missing+=("wine64")
    command -v wineserver >/dev/null 2>&1 || missing+=("wineserver")
    [ -f "$WINEPREFIX/.wincsi-prefix-ready" ] || missing+=("Wine prefix $WINEPREFIX")
    [ -x "$WINCSI_HELM3" ] || missing+=("helm 3 ($WINCSI_HELM3)")
    [ -x "$WINCSI_HELM4" ] || missing+=("helm 4 ($WINCSI_HELM4)")
    command -v kubernetes-validate >/dev/null 2>&1 || missing+=("kubernetes-validate")
    command -v yamllint >/dev/null 2>&1 || missing+=("yamllint")
    command -v shellcheck >/dev/null 2>&1 || missing+=("shellcheck")
    if [ "${#missing[@]}" -gt 0 ]; then
        printf '  missing: %s\n' "${missing[@]}" >&2
        die "tools are missing: run .ci/install.sh first"
    fi
    echo "all tools present (cache $WINCSI_CACHE)"
}

run_shellcheck() {
    local scripts=(.ci/*.sh scripts/*.sh)
    [ -f .ci/run ] && scripts+=(.ci/run)
    shellcheck --external-sources --severity=warning "${scripts[@]}"
    echo "${#scripts[@]} scripts clean"
}

chart_checks() {
    if [ -f .ci/chart-check.sh ]; then
        bash .ci/chart-check.sh
    else
        echo "no .ci/chart-check.sh yet: nothing to check"
    fi
}

# Prints "-p <name>" for every workspace package that has an integration test target named wine_*, after making
# sure each such file starts with #![cfg(windows)] (so the Linux build compiles it to nothing).
wine_test_packages() {
    cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
bad = []
for pkg in json.load(sys.stdin)["packages"]:
    wine = [t for t in pkg["targets"] if "test" in t["kind"] and t["name"].startswith("wine_")]
    for t in wine:
        with open(t["src_path"], encoding="utf-8") as f:
            if f.readline().strip() != "#![cfg(windows)]":
                bad.append(t["src_path"])
    if wine:
        print("-p", pkg["name"])
if bad:
    sys.exit("these Wine test files must start with #![cfg(windows)]:\n  " + "\n  ".join(bad))
'
}

test_wine() {
    local packages
    packages=$(wine_test_packages)
    if [ -z "$packages" ]; then
        echo "no package has tests/wine_*.rs yet: no Wine tests to run"
        return 0
    fi
    echo "packages with Wine tests: $(echo "$packages" | awk '{print $2}' | paste -sd' ')"
    # A persistent wineserver with no inherited pipes (see .ci/wine-run.sh): stopped below whatever happens.
    wineserver -p </dev/null >/dev/null 2>&1 || true
    local rc=0
    # shellcheck disable=SC2086 # "-p name" pairs, split on purpose
    cargo test --target "$WINDOWS_TARGET" --all-features $packages --test 'wine_*' 2>&1 |
        tee -a "$test_log" || rc=$?
    wineserver -k </dev/null >/dev/null 2>&1 || true
    return "$rc"
}

test_linux() {
    cargo test --workspace --all-features 2>&1 | tee -a "$test_log"
}

# Sums cargo test's "test result:" lines into the plain closing line CI reads.
test_totals() {
    awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
            }
         }
         END { printf "total: %d passed, %d failed\n", p, f }' "$test_log"
}

step "preflight" preflight
step "scripts lint (shellcheck)" run_shellcheck
step "fmt" cargo fmt --all --check -- --color "$color"
step "chart checks" chart_checks
step "clippy (linux)" cargo clippy --workspace --all-targets --all-features -- -D warnings
step "clippy ($WINDOWS_TARGET)" \
    cargo clippy --workspace --all-targets --all-features --target "$WINDOWS_TARGET" -- -D warnings
step "doc" env RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps --all-features
step "test (linux)" test_linux
step "test (wine, $WINDOWS_TARGET)" test_wine
summary
test_totals
