#!/usr/bin/env bash
# The e2e kubelet model in external mode (e2e/tests/external.rs) against a driver this script starts, with no
# simulator admin interface: kubelet's files and the pod's data go through the local filesystem.
#
#   e2e-external.sh sim [--out DIR]
#       Here: wincsi-sim (scenario sim-node.json) and, for each suite (smoke, smb, iscsi), a wincsi-node on a
#       Unix-socket CSI endpoint, `C:\` = the simulator's sandbox (target/debug binaries) — the same suite runs as
#       on a node, metrics scrape included. Results in DIR (default: a temporary directory).
#   e2e-external.sh node --suite smoke|smb|iscsi --out DIR [--label NAME] [--container IMAGE] [-- DRIVER_ARGS...]
#       A Windows node / runner: the driver ($WINCSI_NODE_BIN, default target/release/wincsi-node.exe; or with
#       --container the csiProxy-mode image IMAGE run as the chart runs it, see container.sh) serving CSI on AF_UNIX
#       at unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock as kubelet uses it, against the real csi-proxy
#       pipes (DRIVER_ARGS go to the driver, e.g. --host-backend native); storage from WINCSI_CHECK_SMB_* /
#       WINCSI_CHECK_ISCSI_* (see check-node.sh), and a suite whose variables are unset fails.
#
# Suites: `smoke` connects and calls GetPluginInfo, bounded to WINCSI_E2E_SMOKE_SECS (default 60) so a transport
# hang fails fast and says so; `smb` and `iscsi` are the lifecycle (stage, publish, a pod's write and read, stats,
# teardown, nothing left). Each suite starts its own driver and writes DIR/NAME/driver.log (the driver's own log),
# DIR/NAME/test.log, for smb and iscsi DIR/NAME/metrics.json (its /metrics after the lifecycle: metrics.py scrape,
# labelled with WINCSI_LEG_IMAGE, WINCSI_LEG_RELEASE and the deployment), and DIR/NAME.summary (one line for the
# workflow's gate); NAME defaults to e2e-SUITE. A secret value in the driver's log fails the suite.
#
# The tests: $WINCSI_E2E_TEST_BIN (the prebuilt external test executable) when set, else
# `cargo test -p wincsi-e2e --test external` (WINCSI_E2E_CARGO_ARGS adds e.g. --release).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
    echo "e2e-external.sh: error: $*" >&2
    exit 1
}

work=$(mktemp -d)
pids=()
containers=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${containers[@]}"; do
        MSYS_NO_PATHCONV=1 docker rm --force "$p" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# wait_serving LOG PID: return once the driver logged `serving CSI` (bounded, no sleep); its log is followed until
# PID (the driver, or the `docker logs` follower) exits.
wait_serving() {
    local log=$1 pid=$2 line
    exec 4< <(exec tail -n +1 -F --pid="$pid" "$log" 2>/dev/null)
    while read -r -t 120 -u 4 line; do
        case "$line" in
            *'"serving CSI"'*) exec 4<&-; return 0 ;;
        esac
    done
    exec 4<&-
    die "the driver did not start serving: $(tail -n 20 "$log")"
}

# metrics_url LOG: the driver's /metrics URL, from its `serving HTTP` log line (the address it bound).
metrics_url() {
    python3 - "$1" "${2:-}" <<'PY'
import json, sys
host = sys.argv[2]
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    fields = rec.get("fields", rec)
    if fields.get("message") == "serving HTTP" and "/metrics" in str(fields.get("paths", "")):
        addr = str(fields["address"])
        port = addr.rsplit(":", 1)[1]
        print(f"http://{host or addr.rsplit(':', 1)[0]}:{port}/metrics")
        sys.exit(0)
sys.exit("no `serving HTTP` line with /metrics in the driver's log")
PY
}

# run_test NAME LOG: one test of e2e/tests/external.rs, exactly that one.
run_test() {
    local name=$1 log=$2 rc=0
    local args=(--ignored --test-threads 1 --exact "$name")
    if [ -n "${WINCSI_E2E_TEST_BIN:-}" ]; then
        "$WINCSI_E2E_TEST_BIN" "${args[@]}" 2>&1 | tee "$log" || rc=$?
    else
        # shellcheck disable=SC2086 # WINCSI_E2E_CARGO_ARGS is a list of words on purpose
        (cd "$root" && cargo test ${WINCSI_E2E_CARGO_ARGS:-} -p wincsi-e2e --test external -- "${args[@]}") 2>&1 |
            tee "$log" || rc=$?
    fi
    # Exactly this one test ran and passed (a filter that matched nothing would pass vacuously).
    if ! grep -q '^test result: ok\. 1 passed' "$log" && [ "$rc" -eq 0 ]; then
        rc=1
    fi
    return "$rc"
}

# suite SUITE DIR LABEL IMAGE DRIVER_ARGS...: start a driver (a process, or IMAGE's container), run the suite, scrape
# /metrics, stop the driver, check its log for secrets, write the summary line.
suite() {
    local name=$1 out=$2 label=$3 image=$4
    shift 4
    local dir="$out/$label" endpoint url rc=0 pid deployment=process
    [ -z "$image" ] || deployment=container
    mkdir -p "$dir"
    case "$name" in
        smoke) ;;
        smb) [ -n "${WINCSI_E2E_SMB_SOURCE:-}" ] || die "smb: no share (WINCSI_CHECK_SMB_SHARE is not set: the SMB set-up did not finish)" ;;
        iscsi) [ -n "${WINCSI_E2E_ISCSI_PORTAL:-}" ] || die "iscsi: no target (WINCSI_CHECK_ISCSI_PORTAL is not set: the iSCSI set-up did not finish)" ;;
        *) die "unknown suite $name (smoke, smb or iscsi)" ;;
    esac
    if [ -n "$image" ]; then
        # shellcheck source=scripts/real-node/container.sh
        . "$here/container.sh"
        local volumes args cname="wincsi-e2e-$label"
        mapfile -t volumes < <(container_volumes)
        mapfile -t args < <(container_driver_args "${HOSTNAME:-runner}")
        endpoint=${args[0]#--endpoint=}
        [ "$endpoint" != "${args[0]}" ] || die "container.sh: the first driver arg is not --endpoint"
        mkdir -p /c/var/lib/kubelet/plugins/wincsi.csi.io
        MSYS_NO_PATHCONV=1 docker run --detach --name "$cname" --isolation=process "${volumes[@]}" "$image" \
            "${args[@]}" "$@" >/dev/null
        containers+=("$cname")
        MSYS_NO_PATHCONV=1 docker logs --follow "$cname" >"$dir/driver.log" 2>&1 &
        pid=$!
        pids+=("$pid")
        wait_serving "$dir/driver.log" "$pid"
        local ip
        ip=$(MSYS_NO_PATHCONV=1 docker inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$cname")
        url=$(metrics_url "$dir/driver.log" "$ip")
    else
        endpoint=$WINCSI_E2E_EXTERNAL_ENDPOINT
        "$node" --endpoint "$endpoint" --node-id "${HOSTNAME:-runner}" --state-dir "$(native_path "$work/state-$label")" \
            --metrics-address 127.0.0.1:0 --log-format json "${driver_base[@]}" "$@" >"$dir/driver.log" 2>&1 &
        pid=$!
        pids+=("$pid")
        wait_serving "$dir/driver.log" "$pid"
        url=$(metrics_url "$dir/driver.log")
    fi
    WINCSI_E2E_EXTERNAL_ENDPOINT=$endpoint run_test "$name" "$dir/test.log" || rc=$?
    local metrics=""
    if [ "$name" != smoke ]; then
        python3 "$here/metrics.py" scrape "$url" --out "$dir/metrics.json" --label "suite=$name" \
            --label "image=${WINCSI_LEG_IMAGE:-}" --label "release=${WINCSI_LEG_RELEASE:-}" \
            --label "deployment=$deployment" || rc=1
        metrics="; $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); f=d["families"]
h=sum(s["value"] for s in f.get("wincsi_host_call_duration_seconds",{}).get("samples",[]) if s["name"].endswith("_count"))
print(f"{int(h)} host calls in metrics.json")' "$dir/metrics.json" 2>/dev/null || echo 'no metrics')"
    fi
    # Stop this suite's driver (the next suite starts its own on the same endpoint).
    if [ -n "$image" ]; then
        MSYS_NO_PATHCONV=1 docker stop --time 10 "wincsi-e2e-$label" >/dev/null 2>&1 || true
    else
        kill "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    local secret
    for secret in "${WINCSI_E2E_SMB_PASSWORD:-}" "${WINCSI_E2E_ISCSI_CHAP_PASSWORD:-}"; do
        if [ -n "$secret" ] && grep -qF -- "$secret" "$dir/driver.log"; then
            rc=1
            echo "e2e-external.sh: a secret value appears in the driver's log $dir/driver.log" >&2
        fi
    done
    local result
    result=$(grep '^test result:' "$dir/test.log" | tail -n 1 || true)
    echo "$name over ${endpoint}${image:+ in $image}: ${result:-no test result}${metrics}" >"$out/$label.summary"
    cat "$out/$label.summary"
    [ "$rc" -eq 0 ] || die "$name failed (driver log: $dir/driver.log)"
}

native_path() {
    cygpath -w "$1" 2>/dev/null || echo "$1"
}

driver_base=()
node=""

case "${1:-}" in
    sim)
        shift
        out=""
        [ "${1:-}" != --out ] || { out=$2; shift 2; }
        [ -n "$out" ] || out="$work/results"
        sim="$root/target/debug/wincsi-sim"
        node="$root/target/debug/wincsi-node"
        [ -x "$sim" ] && [ -x "$node" ] || die "build $sim and $node first"
        mkdir -p "$work/proxy" "$out"
        exec 3< <(exec "$sim" --scenario "$here/sim-node.json" --socket-dir "$work/proxy" --root "$work/sandbox" \
            --admin "unix:$work/admin.sock" 2>"$work/sim.log")
        pids+=($!)
        read -r -t 120 -u 3 _ready || die "wincsi-sim printed no ready line: $(tail -n 20 "$work/sim.log")"
        driver_base=(--csi-proxy-socket-dir "$work/proxy")
        export WINCSI_E2E_EXTERNAL_ENDPOINT="unix://$work/csi.sock" WINCSI_E2E_EXTERNAL_DRIVE_C="$work/sandbox/c" \
            WINCSI_E2E_SMB_SOURCE='\\fs1\scratch' WINCSI_E2E_SMB_USERNAME=checker WINCSI_E2E_SMB_DOMAIN=WINCSI \
            WINCSI_E2E_SMB_PASSWORD='Ch3ck-N0de-Pw!' WINCSI_E2E_ISCSI_PORTAL=127.0.0.1:3260 \
            WINCSI_E2E_ISCSI_IQN=iqn.2026-01.io.wincsi:check-node WINCSI_E2E_ISCSI_LUN=0 \
            WINCSI_E2E_ISCSI_CHAP_USERNAME=checknode WINCSI_E2E_ISCSI_CHAP_PASSWORD=chap-secret-12 \
            WINCSI_LEG_IMAGE="${WINCSI_LEG_IMAGE:-linux-sim}" WINCSI_LEG_RELEASE="${WINCSI_LEG_RELEASE:-v1.1.3}"
        for s in smoke smb iscsi; do
            suite "$s" "$out" "e2e-$s" ""
        done
        ;;
    node)
        shift
        suite_name="" out="" label="" image=""
        while [ $# -gt 0 ]; do
            case "$1" in
                --suite) suite_name=$2; shift 2 ;;
                --out) out=$2; shift 2 ;;
                --label) label=$2; shift 2 ;;
                --container) image=$2; shift 2 ;;
                --) shift; break ;;
                *) die "node: unknown argument $1" ;;
            esac
        done
        [ -n "$suite_name" ] && [ -n "$out" ] || die "node: --suite and --out are required"
        mkdir -p "$out" /c/var/lib/kubelet/plugins/wincsi.csi.io
        node="${WINCSI_NODE_BIN:-$root/target/release/wincsi-node.exe}"
        driver_base=(--kubelet-root 'C:\var\lib\kubelet')
        export WINCSI_E2E_EXTERNAL_ENDPOINT='unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock'
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
        suite "$suite_name" "$out" "${label:-e2e-$suite_name}" "$image" "$@"
        ;;
    *)
        sed -n '2,24p' "$0" >&2
        exit 2
        ;;
esac
