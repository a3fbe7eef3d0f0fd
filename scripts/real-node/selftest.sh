#!/usr/bin/env bash
# The real-node kit, proven here (a step of scripts/test-all.sh): everything the Windows-runner workflow runs, except
# the runner wiring itself.
#
#   lint          shellcheck on scripts/real-node/*.sh; the workflow against the GitHub-workflow schema
#                 (check-jsonschema --builtin-schema vendor.github-workflows, offline) and against the project's own
#                 rules (e2e/tests/real_node_workflow.rs: timeouts, proofs and gates, the gnu build, Windows
#                 PowerShell, no loopback portal, pinned actions, the container as the chart runs it — each rule
#                 shown to refuse a mutated copy); the PowerShell scripts parse-checked for Windows PowerShell 5.1
#                 (ps-lint.py; a broken copy must fail); the report schema against its metaschema; the image's
#                 Dockerfile derived from Dockerfile.windows (nanoserver.py; a Dockerfile whose image would not
#                 carry the build stage's binary is refused)
#   linux         check-node.sh sim: the Linux binaries against the simulated host, all four csi-proxy releases,
#                 full + before-reboot/reboot/after-reboot, every report schema-valid and self-tested; check-node.sh
#                 node's failure words (a refusal shows check-node's own text; an unset target fails; report.py's
#                 --expect can be false)
#   wine          the same with the Windows binaries under Wine over real named pipes (WINCSI_REAL_NODE_WINE_VERSIONS,
#                 default "v1.1.3 v1.3.0": one release per era keeps the step short)
#   e2e external  e2e-external.sh sim: the AF_UNIX smoke and the SMB and iSCSI lifecycles against drivers started
#                 outside the test (no admin), each driver's log and /metrics kept; the metrics read back into the
#                 BENCHMARKS.md table (metrics.py) and the summaries through the workflow's gate (gate.py)
#
# Needs what .ci/install.sh installs (check-jsonschema, tree-sitter-powershell in $WINCSI_VENV, shellcheck, helm, Wine
# prefix, Windows target).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=.ci/env.sh
. .ci/env.sh

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# must_fail WHAT EXPECTED CMD...: CMD fails and its output says EXPECTED.
must_fail() {
    local what=$1 expected=$2 log="$out/must-fail.log"
    shift 2
    if "$@" >"$log" 2>&1; then
        echo "selftest: $what: succeeded, expected a failure" >&2
        exit 1
    fi
    if ! grep -qF -- "$expected" "$log"; then
        echo "selftest: $what: failed without saying \"$expected\":" >&2
        cat "$log" >&2
        exit 1
    fi
    echo "ok: $what fails and says \"$expected\""
}

echo "--- lint"
shellcheck --external-sources --severity=warning scripts/real-node/*.sh
check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
check-jsonschema --check-metaschema driver/src/check/report-v1.schema.json
# The workflow's own rules: in scripts/test-all.sh (WINCSI_PREBUILT_BINS=1) this test already ran in the suites step,
# with the workspace's features; run alone, `-p wincsi-e2e` builds it here.
if [ "${WINCSI_PREBUILT_BINS:-0}" = 1 ]; then
    echo "e2e/tests/real_node_workflow.rs: ran in the suites step"
else
    cargo test -p wincsi-e2e --test real_node_workflow
fi
"$WINCSI_VENV/bin/python" scripts/real-node/ps-lint.py scripts/real-node/*.ps1
sed 's/^function Get-PortalAddress {$/function Get-PortalAddress {{/' scripts/real-node/setup-windows.ps1 >"$out/broken.ps1"
must_fail "ps-lint.py on an unbalanced copy" "missing '}'" "$WINCSI_VENV/bin/python" scripts/real-node/ps-lint.py "$out/broken.ps1"
printf 'Write-Host a && Write-Host b\n' >"$out/ps7.ps1"
must_fail "ps-lint.py on PowerShell 7 syntax" "PowerShell 7 only" "$WINCSI_VENV/bin/python" scripts/real-node/ps-lint.py "$out/ps7.ps1"
echo stand-in >"$out/wincsi-node.exe"
python3 scripts/real-node/nanoserver.py Dockerfile.windows "$out/wincsi-node.exe" "$out/image" >/dev/null
grep -qx 'COPY --from=build /out/wincsi-node.exe /wincsi-node.exe' "$out/image/Dockerfile"
grep -q '^ENTRYPOINT \["C:\\\\wincsi-node.exe"\]$' "$out/image/Dockerfile"
sed 's|COPY --from=build /out/wincsi-node.exe|COPY --from=build /out/other.exe|' Dockerfile.windows >"$out/Dockerfile.other"
must_fail "nanoserver.py on a Dockerfile whose image takes another file" "does not \`COPY --from=build" \
    python3 scripts/real-node/nanoserver.py "$out/Dockerfile.other" "$out/wincsi-node.exe" "$out/image-other"

echo "--- linux: check-node against the simulated host"
# prebuilt DIR BIN...: with WINCSI_PREBUILT_BINS=1 (scripts/test-all.sh) the binaries are the ones its test builds
# made (`test build (linux)`; the Wine step's for Windows): building them again here with other features would rebuild the
# whole dependency stack (tokio's test-util differs). They must be there.
prebuilt() {
    local dir=$1 bin
    shift
    for bin in "$@"; do
        [ -x "$dir/$bin" ] || { echo "selftest: $dir/$bin is missing (WINCSI_PREBUILT_BINS=1 expects it built)" >&2; exit 1; }
    done
    echo "using the test builds' $* in $dir"
}
if [ "${WINCSI_PREBUILT_BINS:-0}" = 1 ]; then
    prebuilt target/debug wincsi-sim wincsi-node
else
    cargo build -p wincsi-sim -p wincsi-driver --bins
fi
bash scripts/real-node/check-node.sh sim --out "$out/linux"
echo "--- linux: check-node.sh node's failures"
must_fail "check-node.sh node when check-node refuses (exit 2)" "needs a password in WINCSI_CHECK_SMB_PASSWORD" \
    env -u WINCSI_CHECK_SMB_PASSWORD WINCSI_NODE_BIN=target/debug/wincsi-node WINCSI_CHECK_SMB_SHARE='\\fs1\s\check' \
    WINCSI_CHECK_SMB_USERNAME='WINCSI\checker' bash scripts/real-node/check-node.sh node --out "$out/refusal" \
    --label refused --protocol smb --release none
grep -q 'needs a password' "$out/refusal/refused.summary"
must_fail "check-node.sh node --protocol iscsi without a target" "WINCSI_CHECK_ISCSI_PORTAL is not set" \
    env -u WINCSI_CHECK_ISCSI_PORTAL WINCSI_NODE_BIN=target/debug/wincsi-node bash scripts/real-node/check-node.sh \
    node --out "$out/refusal" --protocol iscsi --release none
# The native job's first proof is false where the native backend cannot start (here: not Windows).
must_fail "the native job's first proof where no native backend starts" "the native host backend cannot start" \
    env WINCSI_NODE_BIN=target/debug/wincsi-node bash scripts/real-node/check-node.sh node --out "$out/refusal" \
    --label native-binary --release none --expect tool.target=x86_64-pc-windows-gnu --expect node.backend=native \
    -- --host-backend native --dry-run
report=$(find "$out/linux" -name 'check-node-sim-v1.3.0-full.json' | head -n 1)
python3 scripts/real-node/report.py node "$report" --expect node.backend=csi-proxy --summary "$out/linux.summary"
must_fail "report.py node --expect on a Linux build" "tool.target is 'x86_64-unknown-linux-gnu'" \
    python3 scripts/real-node/report.py node "$report" --expect tool.target=x86_64-pc-windows-gnu

echo "--- wine: the Windows binaries over named pipes"
if [ "${WINCSI_PREBUILT_BINS:-0}" = 1 ]; then
    prebuilt target/x86_64-pc-windows-gnu/debug wincsi-sim.exe wincsi-node.exe
else
    cargo build --target x86_64-pc-windows-gnu -p wincsi-sim -p wincsi-driver --bins
fi
started=1
bash .ci/wine-run.sh --start-server || {
    [ "$?" -eq 10 ] || { echo "cannot start a wineserver for $WINEPREFIX" >&2; exit 1; }
    started=0
}
rc=0
timeout --kill-after=30 "${WINCSI_REAL_NODE_WINE_TIMEOUT:-900}" bash scripts/real-node/check-node.sh sim --wine \
    --versions "${WINCSI_REAL_NODE_WINE_VERSIONS:-v1.1.3 v1.3.0}" --out "$out/wine" </dev/null || rc=$?
if [ "$started" -eq 1 ]; then
    bash .ci/wine-run.sh --stop-server
fi
[ "$rc" -eq 0 ] || exit "$rc"

echo "--- e2e external mode against drivers started here"
bash scripts/real-node/e2e-external.sh sim --out "$out/e2e"
for m in "$out"/e2e/e2e-*/metrics.json; do
    python3 scripts/real-node/metrics.py self-test "$m"
done
python3 scripts/real-node/metrics.py table "$out"/e2e/e2e-*/metrics.json >"$out/table.md"
grep -q '^| NodeStageVolume | ' "$out/table.md" && grep -q '^| NewSmbGlobalMapping | ' "$out/table.md" &&
    grep -q '^| ConnectTarget | ' "$out/table.md" || { cat "$out/table.md" >&2; exit 1; }
STEPS='{"e2e-smoke": {"outcome": "success"}, "e2e-smb": {"outcome": "success"}, "e2e-iscsi": {"outcome": "success"}}' \
    python3 scripts/real-node/gate.py --results "$out/e2e" e2e-smoke e2e-smb e2e-iscsi
must_fail "gate.py with a proof that did not run" "e2e-missing (did not run)" \
    env STEPS='{"e2e-smoke": {"outcome": "success"}}' python3 scripts/real-node/gate.py --results "$out/e2e" e2e-smoke \
    e2e-missing

echo "real-node kit: $(find "$out" -name 'check-node-*.json' | wc -l) check-node reports valid and self-tested," \
    "$(find "$out/e2e" -name metrics.json | wc -l) metrics scrapes read back"
