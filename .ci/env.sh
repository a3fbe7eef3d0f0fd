# shellcheck shell=bash
# Environment for wincsi's CI and local test runs. Source it, do not execute it:
#
#   . .ci/env.sh
#
# It only sets variables (no installs, no side effects), so it is cheap and safe to source from any script or
# an interactive shell. Every location can be overridden by setting the variable before sourcing.
#
#   WINCSI_CACHE        cache root for tools and the Wine prefix     (default: $HOME/.cache/wincsi)
#   WINCSI_BIN          helm3/helm4 binaries                          ($WINCSI_CACHE/bin)
#   WINCSI_VENV         Python venv with kubernetes-validate, yamllint ($WINCSI_CACHE/venv)
#   WINCSI_HELM3        path of the Helm 3 binary                     ($WINCSI_BIN/helm3)
#   WINCSI_HELM4        path of the Helm 4 binary                     ($WINCSI_BIN/helm4)
#   WINCSI_WINEPREFIX   Wine prefix with the ProcessPrng shim         ($WINCSI_CACHE/wine)
#   WINCSI_WINE         Wine loader used by .ci/wine-run.sh           (wine64 on PATH, else /usr/lib/wine/wine64, else wine)
#
# It also exports WINEPREFIX, WINEDEBUG=-all, CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER (the Wine runner) and
# puts $WINCSI_BIN on PATH: install.sh links `helm3`, `helm4`, `kubernetes-validate` and `yamllint` there (the
# venv's own bin/ stays off PATH so its python3 does not shadow the system one).

WINCSI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export WINCSI_ROOT

export WINCSI_CACHE="${WINCSI_CACHE:-${HOME:-/root}/.cache/wincsi}"
export WINCSI_BIN="${WINCSI_BIN:-$WINCSI_CACHE/bin}"
export WINCSI_VENV="${WINCSI_VENV:-$WINCSI_CACHE/venv}"
export WINCSI_HELM3="${WINCSI_HELM3:-$WINCSI_BIN/helm3}"
export WINCSI_HELM4="${WINCSI_HELM4:-$WINCSI_BIN/helm4}"
export WINCSI_WINEPREFIX="${WINCSI_WINEPREFIX:-$WINCSI_CACHE/wine}"

if [ -z "${WINCSI_WINE:-}" ]; then
    if command -v wine64 >/dev/null 2>&1; then
        WINCSI_WINE=$(command -v wine64)
    elif [ -x /usr/lib/wine/wine64 ]; then
        # Debian's wine64 package keeps the 64-bit loader off PATH; /usr/bin/wine is a wrapper that nags about
        # the missing wine32 unless WINEDEBUG silences it. Calling the loader directly avoids both.
        WINCSI_WINE=/usr/lib/wine/wine64
    else
        WINCSI_WINE=wine
    fi
fi
export WINCSI_WINE

# Wine itself: one prefix for everything, no debug chatter. (The Wine scripts also unset DISPLAY: console
# programs need no display, and this file should not change an interactive shell's DISPLAY.)
export WINEPREFIX="$WINCSI_WINEPREFIX"
export WINEDEBUG="${WINEDEBUG:--all}"
# Never try to install Mono/Gecko (they would need the network and a prompt).
export WINEDLLOVERRIDES="${WINEDLLOVERRIDES:-mscoree,mshtml=}"

export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$WINCSI_ROOT/.ci/wine-run.sh"

case ":$PATH:" in
    *":$WINCSI_BIN:"*) ;;
    *) PATH="$WINCSI_BIN:$PATH" ;;
esac
export PATH
