#!/usr/bin/env bash
# The real-node kit, proven here (a step of scripts/test-all.sh): everything the Windows-runner workflow runs, except
# the runner wiring itself.
#
#   lint          shellcheck on scripts/real-node/*.sh; the workflow against the GitHub-workflow schema
#                 (check-jsonschema --builtin-schema vendor.github-workflows, offline); the report schema against its
#                 metaschema
#   linux         check-node.sh sim: the Linux binaries against the simulated host, all four csi-proxy releases,
#                 full + before-reboot/reboot/after-reboot, every report schema-valid and self-tested
#   wine          the same with the Windows binaries under Wine over real named pipes (WINCSI_REAL_NODE_WINE_VERSIONS,
#                 default "v1.1.3 v1.3.0": one release per era keeps the step short)
#   e2e external  e2e-external.sh sim: the kubelet model against a driver started outside the test (no admin)
#
# Needs what .ci/install.sh installs (check-jsonschema, shellcheck, Wine prefix, Windows target).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=.ci/env.sh
. .ci/env.sh

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "--- lint"
shellcheck --external-sources --severity=warning scripts/real-node/*.sh
check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
check-jsonschema --check-metaschema driver/src/check/report-v1.schema.json

echo "--- linux: check-node against the simulated host"
cargo build -p wincsi-sim -p wincsi-driver --bins
bash scripts/real-node/check-node.sh sim --out "$out/linux"

echo "--- wine: the Windows binaries over named pipes"
cargo build --target x86_64-pc-windows-gnu -p wincsi-sim -p wincsi-driver --bins
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

echo "--- e2e external mode against a driver started here"
bash scripts/real-node/e2e-external.sh sim

echo "real-node kit: $(find "$out" -name '*.json' | wc -l) check-node reports valid and self-tested"
