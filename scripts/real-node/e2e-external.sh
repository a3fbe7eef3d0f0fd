#!/usr/bin/env bash
# The e2e kubelet model in external mode (e2e/tests/external.rs) against a driver this script starts, with no
# simulator admin interface: kubelet's files and the pod's data go through the local filesystem.
#
#   e2e-external.sh sim                 here: wincsi-sim (scenario sim-node.json) + wincsi-node on a Unix-socket CSI
#                                       endpoint, `C:\` = the simulator's sandbox (target/debug binaries)
#   e2e-external.sh node [-- ARGS...]   a Windows node / runner: $WINCSI_NODE_BIN (default target/release/
#                                       wincsi-node.exe) serving CSI on AF_UNIX
#                                       unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock as kubelet uses it,
#                                       against the real csi-proxy pipes (ARGS go to the driver, e.g.
#                                       --host-backend native); storage from WINCSI_CHECK_SMB_* / WINCSI_CHECK_ISCSI_*
#                                       (see check-node.sh)
#
# Runs `cargo test -p wincsi-e2e --test external -- --ignored` (set WINCSI_E2E_CARGO_ARGS for e.g. --release).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
    echo "e2e-external.sh: error: $*" >&2
    exit 1
}

work=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# start_driver LOG ARGS...: start the driver and return once it logged `serving CSI` (bounded, no sleep). The
# driver itself is the background job (its pid is what cleanup kills: a pipeline's pid would leave it running); its
# log is followed until it exits.
start_driver() {
    local log=$1 bin=$2
    shift 2
    "$bin" "$@" --log-format json >"$log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    exec 4< <(exec tail -n +1 -F --pid="$pid" "$log" 2>/dev/null)
    local line
    while read -r -t 120 -u 4 line; do
        case "$line" in
            *'"serving CSI"'*) return 0 ;;
        esac
    done
    die "the driver did not start serving: $(tail -n 20 "$log")"
}

run_tests() {
    # shellcheck disable=SC2086 # WINCSI_E2E_CARGO_ARGS is a list of words on purpose
    (cd "$root" && cargo test ${WINCSI_E2E_CARGO_ARGS:-} -p wincsi-e2e --test external -- --ignored --test-threads 1)
}

case "${1:-}" in
    sim)
        sim="$root/target/debug/wincsi-sim"
        node="$root/target/debug/wincsi-node"
        [ -x "$sim" ] && [ -x "$node" ] || die "build $sim and $node first"
        mkdir -p "$work/proxy" "$work/state"
        exec 3< <(exec "$sim" --scenario "$here/sim-node.json" --socket-dir "$work/proxy" --root "$work/sandbox" \
            --admin "unix:$work/admin.sock" 2>"$work/sim.log")
        pids+=($!)
        read -r -t 120 -u 3 _ready || die "wincsi-sim printed no ready line: $(tail -n 20 "$work/sim.log")"
        start_driver "$work/driver.log" "$node" --endpoint "unix://$work/csi.sock" --node-id external-e2e \
            --csi-proxy-socket-dir "$work/proxy" --state-dir "$work/state"
        WINCSI_E2E_EXTERNAL_ENDPOINT="unix://$work/csi.sock" WINCSI_E2E_EXTERNAL_DRIVE_C="$work/sandbox/c" \
            WINCSI_E2E_SMB_SOURCE='\\fs1\scratch' WINCSI_E2E_SMB_USERNAME=checker WINCSI_E2E_SMB_DOMAIN=WINCSI \
            WINCSI_E2E_SMB_PASSWORD='Ch3ck-N0de-Pw!' WINCSI_E2E_ISCSI_PORTAL=127.0.0.1:3260 \
            WINCSI_E2E_ISCSI_IQN=iqn.2026-01.io.wincsi:check-node WINCSI_E2E_ISCSI_LUN=0 \
            WINCSI_E2E_ISCSI_CHAP_USERNAME=checknode WINCSI_E2E_ISCSI_CHAP_PASSWORD=chap-secret-12 run_tests
        if grep -q -e 'Ch3ck-N0de-Pw!' -e 'chap-secret-12' "$work/driver.log"; then
            die "a secret value appears in the driver's log"
        fi
        ;;
    node)
        shift
        [ "${1:-}" = -- ] && shift
        node="${WINCSI_NODE_BIN:-$root/target/release/wincsi-node.exe}"
        endpoint='unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock'
        mkdir -p /c/var/lib/kubelet/plugins/wincsi.csi.io
        start_driver "$work/driver.log" "$node" --endpoint "$endpoint" --node-id "${HOSTNAME:-runner}" \
            --kubelet-root 'C:\var\lib\kubelet' --state-dir "$(cygpath -w "$work/state" 2>/dev/null || echo "$work/state")" "$@"
        export WINCSI_E2E_EXTERNAL_ENDPOINT="$endpoint"
        export WINCSI_E2E_SMB_SOURCE="${WINCSI_CHECK_SMB_SHARE:-}" WINCSI_E2E_SMB_PASSWORD="${WINCSI_CHECK_SMB_PASSWORD:-}"
        # DOMAIN\user as the driver's username/domain pair.
        user="${WINCSI_CHECK_SMB_USERNAME:-}"
        if [[ "$user" == *\\* ]]; then
            export WINCSI_E2E_SMB_DOMAIN="${user%%\\*}" WINCSI_E2E_SMB_USERNAME="${user#*\\}"
        else
            export WINCSI_E2E_SMB_USERNAME="$user"
        fi
        export WINCSI_E2E_ISCSI_PORTAL="${WINCSI_CHECK_ISCSI_PORTAL:-}" WINCSI_E2E_ISCSI_IQN="${WINCSI_CHECK_ISCSI_IQN:-}"
        export WINCSI_E2E_ISCSI_LUN="${WINCSI_CHECK_ISCSI_LUN:-0}"
        filter=()
        [ -n "${WINCSI_CHECK_SMB_SHARE:-}" ] || filter+=(--skip smb)
        [ -n "${WINCSI_CHECK_ISCSI_PORTAL:-}" ] || filter+=(--skip iscsi)
        # shellcheck disable=SC2086
        (cd "$root" && cargo test ${WINCSI_E2E_CARGO_ARGS:-} -p wincsi-e2e --test external -- --ignored --test-threads 1 "${filter[@]}")
        ;;
    *)
        sed -n '2,14p' "$0" >&2
        exit 2
        ;;
esac
