# shellcheck shell=bash
# Step runner shared by .ci/install.sh and scripts/test-all.sh. Source it after `set -euo pipefail`.
#
#   step "name" command [args...]   prints a header, runs the command, prints its duration; on failure the EXIT
#                                   trap names the failing step, its exit code and duration, and the script exits
#   die "message"                   prints "<script>: error: message" to stderr and exits 1
#   summary                         prints the table of step durations (call it last)
#   on_failure (optional)           a function the sourcing script may define: called after a failing step is
#                                   named (e.g. to print what a failure needs for diagnosis)
#
# Steps run the command directly (not inside `if`), so `set -e` stays in force inside step functions.

_wincsi_script=$(basename "$0")
_wincsi_step=""
_wincsi_step_t0=0
_wincsi_run_t0=$SECONDS
_wincsi_timings=()

die() {
    echo "$_wincsi_script: error: $*" >&2
    exit 1
}

step() {
    local name=$1
    shift
    _wincsi_step=$name
    _wincsi_step_t0=$SECONDS
    printf '\n===== %s =====\n' "$name"
    "$@"
    local took=$((SECONDS - _wincsi_step_t0))
    _wincsi_timings+=("$(printf '%6ss  %s' "$took" "$name")")
    printf -- '----- %s: ok (%ss)\n' "$name" "$took"
    _wincsi_step=""
}

summary() {
    printf '\n===== %s: step timings =====\n' "$_wincsi_script"
    printf '%s\n' "${_wincsi_timings[@]}"
    printf '%6ss  total\n' "$((SECONDS - _wincsi_run_t0))"
}

_wincsi_on_exit() {
    local rc=$?
    if [ "$rc" -ne 0 ] && [ -n "$_wincsi_step" ]; then
        printf '\n%s: FAILED at step "%s" (exit code %s, after %ss)\n' \
            "$_wincsi_script" "$_wincsi_step" "$rc" "$((SECONDS - _wincsi_step_t0))" >&2
        if declare -F on_failure >/dev/null; then
            on_failure >&2 || true
        fi
    fi
    return "$rc"
}
trap _wincsi_on_exit EXIT
