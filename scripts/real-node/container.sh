#!/usr/bin/env bash
# The csiProxy-mode driver container as the chart runs it (charts/wincsi/templates/daemonset.yaml, kubelet root on
# C:), for the real-node scripts, and its image:
#
#   container.sh image --exe EXE --tag TAG [--osversion OSVERSION] [--out DIR --label NAME]
#       Build Dockerfile.windows's `nanoserver` stage around EXE (scripts/real-node/nanoserver.py writes the context:
#       a Windows Docker engine has no BuildKit and cannot run the Linux `build` stage) with the classic builder,
#       OSVERSION default ltsc2022; then run the image once, process-isolated, with `--version`. Writes the build's
#       output to DIR/NAME.log and one line for the workflow's gate to DIR/NAME.summary.
#
# Sourced by check-node.sh and e2e-external.sh (`--container IMAGE`) for container_volumes and container_args.
# e2e/tests/real_node_workflow.rs renders the chart and checks both lists against it.

# The chart's kubelet-dir mount (the kubelet root at its own path) and the six csi-proxy pipes at theirs.
container_kubelet_root='C:\var\lib\kubelet'
container_pipes=(
    disk-v1
    volume-v1
    filesystem-v1
    smb-v1
    iscsi-v1alpha2
    system-v1alpha1
)

# The chart's driver args (values: metrics.enabled=true). $(KUBE_NODE_NAME) is the node's name, as kubelet expands
# it; --log-format=json is the one difference: the scripts read the log (the chart's default is plain).
container_args=(
    '--endpoint=unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock'
    # shellcheck disable=SC2016 # kubelet's $(VAR) syntax, kept literally
    '--node-id=$(KUBE_NODE_NAME)'
    '--driver-name=wincsi.csi.io'
    '--kubelet-root=C:\var\lib\kubelet'
    '--log-level=info'
    '--log-format=json'
    '--vol-stats-cache-expire-in-minutes=5'
    '--unreferenced-volume-minutes=60'
    '--release-unreferenced-volumes=false'
    '--health-address=:29667'
    '--metrics-address=:29668'
)

# container_volumes: docker run's volume arguments, one per line.
container_volumes() {
    local p
    printf -- '--volume\n%s:%s\n' "$container_kubelet_root" "$container_kubelet_root"
    for p in "${container_pipes[@]}"; do
        printf -- '--volume\n\\\\.\\pipe\\csi-proxy-%s:\\\\.\\pipe\\csi-proxy-%s\n' "$p" "$p"
    done
}

# container_driver_args NODE: the driver's args for node NODE, one per line.
container_driver_args() {
    local a
    for a in "${container_args[@]}"; do
        printf '%s\n' "${a//\$(KUBE_NODE_NAME)/$1}"
    done
}

container_image() {
    local exe="" tag="" osversion=ltsc2022 out="" label="" here root ctx
    while [ $# -gt 0 ]; do
        case "$1" in
            --exe) exe=$2; shift 2 ;;
            --tag) tag=$2; shift 2 ;;
            --osversion) osversion=$2; shift 2 ;;
            --out) out=$2; shift 2 ;;
            --label) label=$2; shift 2 ;;
            *) echo "container.sh image: unknown argument $1" >&2; return 2 ;;
        esac
    done
    [ -n "$exe" ] && [ -n "$tag" ] || { echo "container.sh image: --exe and --tag are required" >&2; return 2; }
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    root=$(cd "$here/../.." && pwd)
    ctx=$(mktemp -d)
    python3 "$here/nanoserver.py" "$root/Dockerfile.windows" "$exe" "$ctx"
    # The classic builder: a Windows engine has no BuildKit (and the Dockerfile's Linux stage is not in $ctx).
    DOCKER_BUILDKIT=0 MSYS_NO_PATHCONV=1 docker build --isolation=process --build-arg "OSVERSION=$osversion" \
        --tag "$tag" "$(cygpath -w "$ctx" 2>/dev/null || echo "$ctx")"
    rm -rf "$ctx"
    local inspect version
    inspect=$(MSYS_NO_PATHCONV=1 docker image inspect --format '{{.Os}} {{.OsVersion}}, {{.Size}} bytes' "$tag")
    version=$(MSYS_NO_PATHCONV=1 docker run --rm --isolation=process "$tag" --version)
    echo "$tag ($inspect) ran process-isolated: $version"
    if [ -n "$out" ] && [ -n "$label" ]; then
        mkdir -p "$out"
        echo "$tag ($inspect) ran process-isolated: $version" >"$out/$label.summary"
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        image) shift; container_image "$@" ;;
        *) sed -n '2,12p' "$0" >&2; exit 2 ;;
    esac
fi
