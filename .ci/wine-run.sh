#!/usr/bin/env bash
# Cargo runner for x86_64-pc-windows-gnu: runs a Windows executable under Wine and exits with its exit code.
#
#   CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$PWD/.ci/wine-run.sh \
#       cargo test --target x86_64-pc-windows-gnu -p wincsi-driver --test 'wine_*'
#   .ci/wine-run.sh path/to/program.exe [args...]
#   .ci/wine-run.sh --start-server     start a wineserver that persists until --stop-server (used by test-all.sh);
#                                      exit status 0 if it started one, 10 if one was already running
#   .ci/wine-run.sh --stop-server      `wineserver -k`: ends every Wine process of the prefix
#
# Uses the prefix made by .ci/wine-setup.sh (with the ProcessPrng shim). Why the server dance: the first Wine
# program of a wineserver session starts the wineserver and Wine's system processes (services.exe, rpcss.exe,
# winedevice.exe, ...), and they inherit that program's stdin/stdout/stderr. Under `cargo test | tee` or any
# harness that reads the test's output through a pipe, they keep the pipe open after the test exits and the
# caller hangs. So before running a program this script makes sure a wineserver is running, and when it had to
# start one, it brings the system processes up with a no-op program whose stdio is /dev/null. A lock makes
# concurrent runners (nextest) wait for that. A server started here lingers WINCSI_WINESERVER_LINGER seconds
# (default 60) after the last Wine process exits.
set -euo pipefail

# shellcheck source=.ci/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
unset DISPLAY WAYLAND_DISPLAY

usage() {
    echo "usage: $0 PROGRAM.exe [ARGS...] | --start-server | --stop-server" >&2
    exit 2
}

# start_server PERSISTENCE: "" = until killed, N = N seconds after the last Wine process.
# Returns 0 if it started the server, 10 if one was already running for this prefix.
start_server() {
    local status=10
    exec 9>"$WINEPREFIX/.wincsi-server.lock"
    flock 9
    # wineserver exits 0 when it became the server, 2 when one is already running. Nothing Wine starts may
    # inherit fd 9, or it would hold the lock forever.
    if wineserver -p"$1" </dev/null >/dev/null 2>&1 9>&-; then
        status=0
        "$WINCSI_WINE" cmd.exe /c exit 0 </dev/null >/dev/null 2>&1 9>&- || true
    fi
    exec 9>&-
    return "$status"
}

[ "$#" -gt 0 ] || usage

if [ "$1" = --stop-server ]; then
    wineserver -k </dev/null >/dev/null 2>&1 || true
    exit 0
fi

if [ ! -f "$WINEPREFIX/.wincsi-prefix-ready" ] || [ ! -f "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
    echo "wine-run.sh: Wine prefix $WINEPREFIX is not set up; run .ci/wine-setup.sh (or .ci/install.sh) first" >&2
    exit 127
fi

case "$1" in
    --start-server)
        status=0
        start_server "" || status=$?
        exit "$status"
        ;;
    -*) usage ;;
esac

start_server "${WINCSI_WINESERVER_LINGER:-60}" || true
exec "$WINCSI_WINE" "$@"
