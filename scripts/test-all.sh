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
#   test build (linux)   cargo test --workspace --all-features --no-run
#   suites           scripts/run-suites.py runs, on WINCSI_TEST_JOBS lanes (default 4; the suites mostly wait): every
#                    test executable of that build as `cargo test` would (the simulated host plays csi-proxy v1.1.3,
#                    the default); the driver's SMB/iSCSI/hardening suites and the e2e scenarios once more per other
#                    release (WINCSI_SIM_CSI_PROXY_VERSION = v1.2.1, v1.3.0, master); the driver's unit suites and
#                    the suites that take the backend switch with WINCSI_TEST_HOST_BACKEND=native; the simulated
#                    host's unit suite with emulated links (its link mode under Wine); the doctests;
#                    .ci/bench-smoke.sh (the benchmark harness on tiny inputs, the test build's binaries;
#                    correctness only, no timing); .ci/fuzz-smoke.sh (every cargo-fuzz target for a few seconds, dev
#                    build without a sanitizer, its own tree). Every job runs; the failed ones are printed whole.
#   test (wine)      cargo test --target x86_64-pc-windows-gnu --all-features -p <every package with
#                    tests/wine_*.rs> --test 'wine_*', run under Wine through .ci/wine-run.sh (time limit
#                    WINCSI_WINE_TEST_TIMEOUT seconds, default 900; the wineserver it starts is stopped afterwards)
#   real-node kit    scripts/real-node/selftest.sh: the Windows-runner workflow linted (check-jsonschema, offline, and
#                    e2e/tests/real_node_workflow.rs), its PowerShell parse-checked,
#                    check-node against the simulated host (Linux binaries, all csi-proxy releases; Windows binaries
#                    under Wine over named pipes) with every JSON report schema-validated and self-tested, and the
#                    e2e kubelet model in external mode
# In CI, the test executables of the Linux steps are deleted before the Wine build and the Windows ones after their
# run (see prune_test_executables: disk). It ends with a step-timing table, the disk left and what the target
# directory holds, and one "total: N passed, N failed" line summed over every test binary's run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=.ci/env.sh
. .ci/env.sh
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

WINDOWS_TARGET=x86_64-pc-windows-gnu
# In CI (a fresh clone, built once): no incremental caches and line tables only instead of full debuginfo, which
# cuts build and link time on 2 cores. Not applied locally, where changing them would rebuild everything.
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
    export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
    export CARGO_PROFILE_TEST_DEBUG="${CARGO_PROFILE_TEST_DEBUG:-line-tables-only}"
fi
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
    command -v check-jsonschema >/dev/null 2>&1 || missing+=("check-jsonschema")
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
# sure each such file has #![cfg(windows)] in its crate header (so the Linux build compiles it to nothing).
# (The header may put `//!` docs or `#![cfg_attr(not(windows), allow(missing_docs))]` ABOVE the cfg: below it,
# they are configured away on Linux and `missing_docs` fails clippy -D warnings.)
wine_test_packages() {
    cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys

def has_windows_cfg(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line == "#![cfg(windows)]":
                return True
            if line and not line.startswith(("//", "#![")):
                return False
    return False

bad = []
for pkg in json.load(sys.stdin)["packages"]:
    wine = [t for t in pkg["targets"] if "test" in t["kind"] and t["name"].startswith("wine_")]
    bad += [t["src_path"] for t in wine if not has_windows_cfg(t["src_path"])]
    if wine:
        print("-p", pkg["name"])
if bad:
    sys.exit("these Wine test files need #![cfg(windows)] in their crate header:\n  " + "\n  ".join(bad))
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
    local args=(--target "$WINDOWS_TARGET" --all-features)
    # shellcheck disable=SC2206 # "-p name" pairs, split on purpose
    args+=($packages --test 'wine_*')
    # Build first, so the time limit below covers only running the tests.
    cargo test "${args[@]}" --no-run
    # Our own persistent wineserver, stopped when the tests end. If one was already running (a developer's other
    # Wine run on this prefix), it is left alone: stopping it would kill that run.
    local started=1
    bash .ci/wine-run.sh --start-server || {
        [ "$?" -eq 10 ] || die "cannot start a wineserver for $WINEPREFIX"
        started=0
        echo "a wineserver is already running for $WINEPREFIX: using it and leaving it running"
    }
    # The server is stopped inside the piped group: should a Windows process still hold the pipe, killing it is
    # what lets tee see EOF, so the run cannot hang.
    local limit="${WINCSI_WINE_TEST_TIMEOUT:-900}"
    (
        rc=0
        timeout --kill-after=30 "$limit" cargo test "${args[@]}" || rc=$?
        if [ "$started" -eq 1 ]; then
            bash .ci/wine-run.sh --stop-server
        fi
        if [ "$rc" -eq 124 ]; then
            echo "test-all.sh: the Wine tests did not finish within ${limit}s (WINCSI_WINE_TEST_TIMEOUT)" >&2
        fi
        exit "$rc"
    ) 2>&1 | tee -a "$test_log"
}

# The csi-proxy releases the suites run against besides the default (v1.1.3, what the chart deploys), and the test
# targets ("<package dir>:lib" or "<package dir>:<test>") that run the driver against the simulated host.
CSI_PROXY_RELEASES=(v1.2.1 v1.3.0 master)
PROFILE_TARGETS="driver:lib driver:smb_node driver:smb_sim driver:iscsi_node driver:iscsi_sim \
driver:hardening_matrix driver:hardening_ephemeral driver:hardening_flood e2e:local e2e:ephemeral e2e:hygiene \
e2e:democratic"

# The test targets whose simulated host the native backend can drive (WINCSI_TEST_HOST_BACKEND=native: the driver's
# unit suites and the suites that take the backend switch, over the simulated host's Windows view).
NATIVE_TARGETS="driver:lib driver:iscsi_node driver:smb_node driver:hardening_matrix driver:hardening_ephemeral driver:hardening_flood"

# Lanes of the suites step (scripts/run-suites.py): the suites mostly wait (the simulated host's arrivals, the e2e
# nodes' settle times), so more lanes than cores overlap the waits.
SUITE_LANES="${WINCSI_TEST_JOBS:-4}"

# The test executables `cargo test --workspace --all-features` runs, from its build (the same command and features,
# so cargo only lists them), as the suites step's jobs (JSON lines for scripts/run-suites.py): every executable
# once with the default simulated host (csi-proxy v1.1.3), PROFILE_TARGETS once more per other release,
# NATIVE_TARGETS with the native backend, the simulated host's unit suite with emulated links. Each runs as cargo
# would run it: in its package's directory, with CARGO_MANIFEST_DIR and CARGO_PKG_NAME set. WEIGHTS are the
# seconds each took on the 2-core machine (the heaviest start first); the rest count as 5.
suite_jobs() {
    cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null |
        PROFILE_TARGETS="$PROFILE_TARGETS" NATIVE_TARGETS="$NATIVE_TARGETS" RELEASES="${CSI_PROXY_RELEASES[*]}" \
        python3 -c '
import json, os, sys

weights = {"driver:lib": 40, "driver:iscsi_sim": 60, "driver:hardening_matrix": 55, "e2e:local": 60,
           "driver:check_node": 90, "e2e:chart_admission": 35, "e2e:democratic": 22, "driver:iscsi_node": 18,
           "driver:smb_sim": 12, "e2e:hygiene": 11, "sim:lib": 10}
found = {}
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable") or not msg["profile"]["test"]:
        continue
    pkg_dir = os.path.dirname(msg["manifest_path"])
    target = msg["target"]
    kind = "lib" if "lib" in target["kind"] else target["name"]
    if "bin" in target["kind"]:
        kind = "bin:" + target["name"]
    # package_id: "path+file:///dir#name@version" (cargo >= 1.77) or "name version (path+file:///dir)".
    pid = msg["package_id"]
    pkg_name = pid.split("#", 1)[1].split("@", 1)[0] if "#" in pid else pid.split()[0]
    key = os.path.basename(pkg_dir) + ":" + kind
    found[key] = (pkg_dir, msg["executable"], pkg_name)
missing = sorted(set((os.environ["PROFILE_TARGETS"] + " " + os.environ["NATIVE_TARGETS"] + " sim:lib").split())
                 - set(found))
if missing:
    sys.exit("test targets not found in the build: " + ", ".join(missing))

def job(key, label, env):
    pkg_dir, exe, pkg_name = found[key]
    env = dict(env, CARGO_MANIFEST_DIR=pkg_dir, CARGO_PKG_NAME=pkg_name)
    print(json.dumps({"name": f"{key} ({label})", "cmd": [exe], "cwd": pkg_dir, "env": env,
                      "weight": weights.get(key, 5)}))

for key in sorted(found):
    job(key, "v1.1.3", {})
for release in os.environ["RELEASES"].split():
    for key in os.environ["PROFILE_TARGETS"].split():
        job(key, release, {"WINCSI_SIM_CSI_PROXY_VERSION": release})
for key in os.environ["NATIVE_TARGETS"].split():
    job(key, "native", {"WINCSI_TEST_HOST_BACKEND": "native"})
job("sim:lib", "emulated links", {"WINCSI_SIM_TEST_EMULATED_LINKS": "1"})
'
}

# The suites step: every job of suite_jobs, the doctests, the bench smoke and the fuzz smoke, on SUITE_LANES lanes.
# The fuzz smoke (its own tree, fuzz/target) builds while the suites wait; the bench smoke runs the binaries the
# test build made (WINCSI_PREBUILT_BINS=1, .ci/README.md).
test_suites() {
    local jobs="$target_dir/wincsi-suite-jobs.jsonl"
    suite_jobs >"$jobs"
    python3 - "$jobs" <<'PY'
import json, os, sys
extra = [
    {"name": "doctests (cargo test --doc)", "weight": 30,
     "cmd": ["cargo", "test", "--workspace", "--all-features", "--doc"]},
    {"name": "bench smoke (.ci/bench-smoke.sh)", "weight": 20,
     "cmd": ["bash", ".ci/bench-smoke.sh"], "env": {"WINCSI_PREBUILT_BINS": "1"}},
    {"name": "fuzz smoke (.ci/fuzz-smoke.sh)", "weight": 300, "cmd": ["bash", ".ci/fuzz-smoke.sh"],
     "env": {"WINCSI_FUZZ_SANITIZER": os.environ.get("WINCSI_FUZZ_SANITIZER", "none"),
             "WINCSI_FUZZ_BUILD": os.environ.get("WINCSI_FUZZ_BUILD", "--dev"),
             "WINCSI_FUZZ_SECONDS": os.environ.get("WINCSI_FUZZ_SECONDS", "3")}},
]
with open(sys.argv[1], "a", encoding="utf-8") as f:
    for job in extra:
        job.setdefault("env", {})
        job["cwd"] = os.getcwd()
        f.write(json.dumps(job) + "\n")
PY
    python3 scripts/run-suites.py --self-test
    echo "$(wc -l <"$jobs") jobs on $SUITE_LANES lanes (WINCSI_TEST_JOBS)"
    python3 scripts/run-suites.py --jobs "$SUITE_LANES" --log "$test_log" "$jobs"
}

# The test executable of a target (e.g. e2e:external) from the suites step's job file: the one `test build (linux)`
# made, listed once by suite_jobs. Fails when it is not there.
suite_test_binary() {
    python3 - "$target_dir/wincsi-suite-jobs.jsonl" "$1" <<'PY'
import json, sys
jobs, key = sys.argv[1], sys.argv[2]
with open(jobs, encoding="utf-8") as f:
    for line in f:
        job = json.loads(line)
        if job["name"] == key + " (v1.1.3)":
            print(job["cmd"][0])
            sys.exit(0)
sys.exit("test target not found in the suites' jobs: " + key)
PY
}

# Disk: a build of every step holds about 11 GB at its peak without pruning (measured on a fresh clone: the Linux
# test executables 3.5 GB, the Windows ones 1.6 GB, the release-feature binaries of the real-node kit 1.9 GB, the
# fuzz tree 1 GB). In CI, each step's test executables are deleted once no later step runs them, which keeps the
# target directory's peak at 6.2 GB (measured); cargo links them again on the next run. Not done locally (WINCSI_PRUNE_TESTS=1 asks for it), where
# they make the next run fast.
target_dir="${CARGO_TARGET_DIR:-target}"
prune_test_executables() {
    [ "${WINCSI_PRUNE_TESTS:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}" = 1 ] || return 0
    local deps=$1 keep=${2:-} before after
    [ -d "$deps" ] || return 0
    before=$(du -sm "$deps" | cut -f1)
    # Test harnesses: extensionless executables (Linux) and .exe files (Windows). Proc-macro .so files and
    # libraries stay: later steps build on them. KEEP (a path) is a test executable a later step still runs.
    find "$deps" -maxdepth 1 -type f \( -name '*.exe' -o \( -perm -u+x ! -name '*.*' \) \) \
        ! -name "$(basename "${keep:-/nothing-kept}")" -delete
    after=$(du -sm "$deps" | cut -f1)
    echo "pruned the test executables in $deps: ${before} MB -> ${after} MB"
}

disk_report() {
    echo "disk: $(df -h "$target_dir" | awk 'NR == 2 {print $4 " free of " $2 " on " $6}');" \
        "$target_dir holds $(du -sh "$target_dir" 2>/dev/null | cut -f1)"
}

on_failure() {
    disk_report
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
disk_report
step "scripts lint (shellcheck)" run_shellcheck
step "fmt" cargo fmt --all --check -- --color "$color"
step "chart checks" chart_checks
step "clippy (linux)" cargo clippy --workspace --all-targets --all-features -- -D warnings
step "clippy ($WINDOWS_TARGET)" \
    cargo clippy --workspace --all-targets --all-features --target "$WINDOWS_TARGET" -- -D warnings
step "doc" env RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps --all-features
step "test build (linux)" cargo test --workspace --all-features --no-run
step "suites (linux: every test on v1.1.3; ${CSI_PROXY_RELEASES[*]}, native, emulated links; doctests, bench and fuzz smoke)" \
    test_suites
# The real-node kit's e2e external mode runs the external test executable `test (linux)` built (kept from pruning).
kit_e2e_test_bin=$(suite_test_binary "e2e:external")
prune_test_executables "$target_dir/debug/deps" "$kit_e2e_test_bin"
step "test (wine, $WINDOWS_TARGET)" test_wine
prune_test_executables "$target_dir/$WINDOWS_TARGET/debug/deps"
# The Windows-runner workflow's logic (scripts/real-node) run here against the simulated host: only the runner wiring
# is left untested.
# WINCSI_PREBUILT_BINS=1: the kit and the bench smoke run the binaries this run's test builds made (`test (linux)`,
# and the Wine step's for Windows) instead of building them again with other features (.ci/README.md).
step "real-node kit (check-node, workflow lint, e2e external)" \
    env WINCSI_PREBUILT_BINS=1 WINCSI_E2E_TEST_BIN="$kit_e2e_test_bin" bash scripts/real-node/selftest.sh
summary
disk_report
test_totals
