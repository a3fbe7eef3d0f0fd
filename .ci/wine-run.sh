#!/usr/bin/env bash
# Cargo runner for x86_64-pc-windows-gnu: runs a Windows executable under Wine and exits with its exit code.
#
#   CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$PWD/.ci/wine-run.sh \
#       cargo test --target x86_64-pc-windows-gnu -p wincsi-driver --test 'wine_*'
#   .ci/wine-run.sh path/to/program.exe [args...]
#
# Uses the prefix made by .ci/wine-setup.sh (with the ProcessPrng shim). Before starting the program it makes
# sure a wineserver is running whose stdin/stdout/stderr are /dev/null: a wineserver auto-started by the program
# would inherit the test harness's pipes and keep them open after the test exits, so the caller hangs or leaks.
# That server lingers WINCSI_WINESERVER_LINGER seconds (default 60) after the last Wine process exits; test-all.sh
# instead starts a persistent one and stops it with `wineserver -k` at the end.
set -euo pipefail

# shellcheck source=.ci/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
unset DISPLAY WAYLAND_DISPLAY

if [ "$#" -eq 0 ]; then
    echo "usage: $0 PROGRAM.exe [ARGS...]" >&2
    exit 2
fi

if [ ! -f "$WINEPREFIX/.wincsi-prefix-ready" ] || [ ! -f "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
    echo "wine-run.sh: Wine prefix $WINEPREFIX is not set up; run .ci/wine-setup.sh (or .ci/install.sh) first" >&2
    exit 127
fi

# Exit status 2 means a server is already running for this prefix, which is what we want.
wineserver -p"${WINCSI_WINESERVER_LINGER:-60}" </dev/null >/dev/null 2>&1 || true

exec "$WINCSI_WINE" "$@"
