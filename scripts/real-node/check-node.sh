#!/usr/bin/env bash
# Run `wincsi-node check-node` and check its JSON reports: against the simulated host here (Linux binaries, and the
# Windows binaries under Wine over real named pipes), or against a real csi-proxy on a Windows node / runner.
#
#   check-node.sh sim  --out DIR [--wine] [--versions "v1.1.3 v1.2.1 v1.3.0 master"]
#       For each release: start wincsi-sim playing it (scenario sim-node.json: an SMB share and a scratch LUN),
#       run check-node --phase full, then before-reboot, reboot the simulated host (admin op), after-reboot; validate
#       every report against driver/src/check/report-v1.schema.json and self-test it (report.py self-test: every
#       check ran, every finding confirms its row, the release is identified, cleanup complete).
#       Binaries: target/debug/{wincsi-sim,wincsi-node}, or with --wine
#       target/x86_64-pc-windows-gnu/debug/{wincsi-sim,wincsi-node}.exe (build them first; see selftest.sh).
#   check-node.sh node --out DIR --release RELEASE [--protocol smb|iscsi|all] [--label NAME] [--phase PHASE]
#                      [--container IMAGE] [--expect PATH=VALUE]... [-- EXTRA_CHECK_NODE_ARGS...]
#       A real node: $WINCSI_NODE_BIN (default wincsi-node.exe on PATH) check-node against the csi-proxy named
#       pipes (or the backend EXTRA_CHECK_NODE_ARGS name), with --csi-proxy-release RELEASE unless it is `none`.
#       Targets from WINCSI_CHECK_SMB_SHARE, WINCSI_CHECK_SMB_USERNAME (+ WINCSI_CHECK_SMB_PASSWORD) and
#       WINCSI_CHECK_ISCSI_PORTAL, WINCSI_CHECK_ISCSI_IQN, WINCSI_CHECK_ISCSI_LUN (+ WINCSI_CHECK_ISCSI_CHAP_USERNAME/
#       SECRET), and WINCSI_CHECK_SMB_OPTIONS (`key=value,...`: the SMB client options the smb_options check asks
#       on the native backend; unset, the node's build's default) and WINCSI_CHECK_SMB_MACHINE_SHARE (opt-in: a
#       share the node maps as its computer account, domain-joined nodes): --protocol smb or iscsi takes only that
#       one and fails when its variables are unset (a set-up that did not finish never passes as "nothing to
#       check"); all (default) takes whichever are set. --container
#       runs check-node inside IMAGE as the chart runs the driver in csiProxy mode (container.sh: process isolation,
#       the kubelet directory and the csi-proxy pipes mapped in). Writes DIR/NAME.json (the report), DIR/NAME.log
#       (its progress) and DIR/NAME.summary (one line for the workflow's gate); NAME defaults to
#       check-node-RELEASE-PHASE. Fails if check-node refused (exit 2: its own words are shown, not a parse error of
#       an empty report), if a check could not run, if cleanup is incomplete, or if an --expect does not hold (a
#       dotted path of the report: tool.target=x86_64-pc-windows-gnu, node.backend=native; report.py node).
#
# Needs python3, and check-jsonschema on PATH for the schema validation (installed by .ci/install.sh; on a runner,
# `pip install check-jsonschema`).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
schema="$root/driver/src/check/report-v1.schema.json"

die() {
    echo "check-node.sh: error: $*" >&2
    exit 1
}

validate() {
    command -v check-jsonschema >/dev/null 2>&1 || die "check-jsonschema is not on PATH"
    check-jsonschema --schemafile "$schema" "$@"
}

# ---------------------------------------------------------------------------------------------------------------
# The simulated host
# ---------------------------------------------------------------------------------------------------------------

# admin ADDR OP: one admin request to a running wincsi-sim (newline-delimited JSON over unix:PATH or tcp:HOST:PORT).
admin() {
    python3 - "$1" "$2" <<'PY'
import json, socket, sys
addr, op = sys.argv[1], sys.argv[2]
if addr.startswith("unix:"):
    s = socket.socket(socket.AF_UNIX)
    s.connect(addr[5:])
else:
    host, port = addr[4:].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=60)
s.sendall((json.dumps({"op": op}) + "\n").encode())
line = s.makefile().readline()
reply = json.loads(line)
if not reply.get("ok"):
    sys.exit(f"admin {op}: {reply}")
PY
}

# Shared by sim_mode and sim_session.
out="" wine=0 exe="" sim="" node="" work=""
run=()

sim_mode() {
    local versions="v1.1.3 v1.2.1 v1.3.0 master"
    while [ $# -gt 0 ]; do
        case "$1" in
            --out) out=$2; shift 2 ;;
            --wine) wine=1; shift ;;
            --versions) versions=$2; shift 2 ;;
            *) die "sim: unknown argument $1" ;;
        esac
    done
    [ -n "$out" ] || die "sim: --out DIR is required"
    mkdir -p "$out"
    local bin_dir="$root/target/debug"
    exe=""
    run=()
    if [ "$wine" -eq 1 ]; then
        bin_dir="$root/target/x86_64-pc-windows-gnu/debug"
        exe=.exe
        run=(bash "$root/.ci/wine-run.sh")
    fi
    sim="$bin_dir/wincsi-sim$exe"
    node="$bin_dir/wincsi-node$exe"
    [ -x "$sim" ] && [ -x "$node" ] || die "build $sim and $node first (scripts/real-node/selftest.sh does)"
    work=$(mktemp -d)
    # shellcheck disable=SC2064 # expand $work now
    trap "rm -rf '$work'" EXIT
    # The releases side by side (each its own simulated nodes, directories and pipe names): a session mostly waits
    # for the simulated host's arrivals, so one after another the run is four times as long for the same CPU.
    local v pids=() failed=()
    for v in $versions; do
        (
            trap - EXIT
            # A fresh simulated node per session: the full run leaves its scratch LUN formatted (as on a real node).
            sim_session "$v" full
            sim_session "$v" before-reboot after-reboot
        ) >"$work/$v.out" 2>&1 &
        pids+=("$v:$!")
    done
    local entry
    for entry in "${pids[@]}"; do
        v=${entry%%:*}
        if wait "${entry#*:}"; then
            cat "$work/$v.out"
        else
            cat "$work/$v.out" >&2
            failed+=("$v")
        fi
    done
    [ "${#failed[@]}" -eq 0 ] || die "sim: the sessions of ${failed[*]} failed (their output above)"
}

# sim_session RELEASE PHASE...: one simulated node playing RELEASE, check-node run for each phase in turn (the
# simulated host is rebooted before after-reboot). Uses sim_mode's locals (out, wine, run, sim, node, work, exe).
sim_session() {
    local v=$1
    shift
    local dir wdir
    dir=$(mktemp -d "$work/$v-XXXX")
    wdir=$dir
    local sim_args=(--scenario "$here/sim-node.json" --csi-proxy-version "$v")
    local node_args=(--call-timeout-secs 60 --arrival-timeout-secs 30)
    if [ "$wine" -eq 1 ]; then
        wdir=$("$WINCSI_WINE" winepath -w "$dir" 2>/dev/null)
        local prefix="\\\\.\\pipe\\wincsi-check-$$-${dir##*-}\\"
        sim_args=(--scenario "$("$WINCSI_WINE" winepath -w "$here/sim-node.json" 2>/dev/null)"
            --csi-proxy-version "$v" --pipes --pipe-prefix "$prefix" --root "$wdir\\sandbox"
            --admin tcp:127.0.0.1:0)
        node_args+=(--csi-proxy-pipe-prefix "$prefix" --check-dir "$wdir\\check")
    else
        mkdir -p "$dir/proxy"
        sim_args+=(--socket-dir "$dir/proxy" --root "$dir/sandbox" --admin "unix:$dir/admin.sock")
        node_args+=(--csi-proxy-socket-dir "$dir/proxy" --check-dir "$dir/check")
    fi
    # The simulator prints one JSON line once every endpoint is bound: read it (bounded), never sleep.
    exec 3< <(exec "${run[@]}" "$sim" "${sim_args[@]}" 2>"$dir/sim.log")
    local sim_pid=$! ready=""
    read -r -t 120 -u 3 ready || die "$v: wincsi-sim printed no ready line: $(tail -n 20 "$dir/sim.log")"
    local admin_addr
    admin_addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["admin"])' "$ready")
    local targets=(--smb-share '\\fs1\scratch\check' --smb-username 'WINCSI\checker'
        --iscsi-portal 127.0.0.1:3260 --iscsi-iqn iqn.2026-01.io.wincsi:check-node --iscsi-lun 0
        --iscsi-chap-username checknode)
    local phase report
    for phase in "$@"; do
        if [ "$phase" = after-reboot ]; then
            admin "$admin_addr" reboot
        fi
        report="$out/check-node-sim${exe:+-wine}-$v-$phase.json"
        local rc=0
        WINCSI_CHECK_SMB_PASSWORD='Ch3ck-N0de-Pw!' WINCSI_CHECK_ISCSI_CHAP_SECRET='chap-secret-12' \
            "${run[@]}" "$node" check-node --output json --phase "$phase" "${node_args[@]}" "${targets[@]}" \
            >"$report" 2>"$dir/check-$phase.log" || rc=$?
        if [ "$rc" -ne 0 ]; then
            tail -n 40 "$dir/check-$phase.log" >&2
            die "$v $phase: check-node exited $rc (report $report)"
        fi
        if grep -q -e 'Ch3ck-N0de-Pw!' -e 'chap-secret-12' "$report" "$dir/check-$phase.log"; then
            die "$v $phase: a secret value appears in the report or the progress output"
        fi
        validate "$report"
        python3 "$here/report.py" self-test "$report" "$v"
    done
    kill "$sim_pid" 2>/dev/null || true
    exec 3<&-
    wait "$sim_pid" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------------------------
# A real node
# ---------------------------------------------------------------------------------------------------------------

node_mode() {
    local out="" release="" phase=full protocol=all label="" image="" expects=() extra=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --out) out=$2; shift 2 ;;
            --release) release=$2; shift 2 ;;
            --phase) phase=$2; shift 2 ;;
            --protocol) protocol=$2; shift 2 ;;
            --label) label=$2; shift 2 ;;
            --container) image=$2; shift 2 ;;
            --expect) expects+=(--expect "$2"); shift 2 ;;
            --) shift; extra=("$@"); break ;;
            *) die "node: unknown argument $1" ;;
        esac
    done
    [ -n "$out" ] && [ -n "$release" ] || die "node: --out DIR and --release RELEASE are required"
    label=${label:-check-node-$release-$phase}
    mkdir -p "$out"
    local smb=0 iscsi=0
    case "$protocol" in
        smb) smb=1 ;;
        iscsi) iscsi=1 ;;
        all)
            [ -z "${WINCSI_CHECK_SMB_SHARE:-}" ] || smb=1
            [ -z "${WINCSI_CHECK_ISCSI_PORTAL:-}" ] || iscsi=1
            ;;
        *) die "node: --protocol is smb, iscsi or all, not $protocol" ;;
    esac
    local args=(check-node --output json --phase "$phase")
    [ "$release" = none ] || args+=(--csi-proxy-release "$release")
    if [ "$smb" -eq 1 ]; then
        [ -n "${WINCSI_CHECK_SMB_SHARE:-}" ] ||
            die "WINCSI_CHECK_SMB_SHARE is not set: the SMB set-up did not finish, so nothing SMB can be checked"
        args+=(--smb-share "$WINCSI_CHECK_SMB_SHARE")
        [ -z "${WINCSI_CHECK_SMB_OPTIONS:-}" ] || args+=(--smb-options "$WINCSI_CHECK_SMB_OPTIONS")
        [ -z "${WINCSI_CHECK_SMB_MACHINE_SHARE:-}" ] || args+=(--smb-machine-share "$WINCSI_CHECK_SMB_MACHINE_SHARE")
    fi
    if [ "$iscsi" -eq 1 ]; then
        [ -n "${WINCSI_CHECK_ISCSI_PORTAL:-}" ] ||
            die "WINCSI_CHECK_ISCSI_PORTAL is not set: the iSCSI set-up did not finish, so nothing iSCSI can be checked"
        args+=(--iscsi-portal "$WINCSI_CHECK_ISCSI_PORTAL" --iscsi-iqn "${WINCSI_CHECK_ISCSI_IQN:?}"
            --iscsi-lun "${WINCSI_CHECK_ISCSI_LUN:-0}")
        if [ -n "${WINCSI_CHECK_ISCSI_LATE_IQN:-}" ] && [ "$phase" = full ]; then
            args+=(--iscsi-late-iqn "$WINCSI_CHECK_ISCSI_LATE_IQN")
        fi
    fi
    local run=("${WINCSI_NODE_BIN:-wincsi-node.exe}")
    if [ -n "$image" ]; then
        # shellcheck source=scripts/real-node/container.sh
        . "$here/container.sh"
        local volumes
        mapfile -t volumes < <(container_volumes)
        # The check directory on the kubelet-dir mount survives the container (as in the chart's pod).
        args+=(--kubelet-root "$container_kubelet_root"
            --check-dir "$container_kubelet_root\plugins\wincsi.csi.io\check-node")
        # Secrets by name only: docker passes the variables' values from this environment.
        run=(env MSYS_NO_PATHCONV=1 docker run --rm --isolation=process "${volumes[@]}"
            --env WINCSI_CHECK_SMB_USERNAME --env WINCSI_CHECK_SMB_PASSWORD
            --env WINCSI_CHECK_ISCSI_CHAP_USERNAME --env WINCSI_CHECK_ISCSI_CHAP_SECRET "$image")
    fi
    local report="$out/$label.json" log="$out/$label.log" summary="$out/$label.summary" rc=0
    "${run[@]}" "${args[@]}" "${extra[@]}" >"$report" 2>"$log" || rc=$?
    if [ "$rc" -eq 2 ] || ! [ -s "$report" ]; then
        # A refusal or a usage error: nothing was touched and there is no report, only check-node's own words.
        tail -n 40 "$log" >&2
        echo "check-node exited $rc without a report: $(grep -v '^[[:space:]]*$' "$log" | tail -n 1)" >"$summary"
        die "check-node exited $rc without a report (it refused, or could not start): see above and $log"
    fi
    validate "$report"
    python3 "$here/report.py" node "$report" "${expects[@]}" --summary "$summary"
    [ "$rc" -eq 0 ] || die "check-node exited $rc (see $log)"
}

case "${1:-}" in
    sim) shift; sim_mode "$@" ;;
    node) shift; node_mode "$@" ;;
    *) sed -n '2,31p' "$0" >&2; exit 2 ;;
esac
