#!/usr/bin/env bash
# Checks that a release tag and the repository agree, before anything is built or pushed (the release workflow's first
# step; .ci/chart-check.sh runs it offline too):
#   - the tag is v<version>, and <version> is the chart's version and appVersion and the Cargo workspace version;
#   - the chart, installed with its defaults, runs exactly the images the release pushes: $IMAGE:<version> in
#     csiProxy mode and $IMAGE:<version>-hostprocess in hostProcess mode (rendered, so a tag or suffix default that
#     drifts is caught too).
#
#   IMAGE=ghcr.io/wincsi/wincsi-node HELM=helm bash scripts/release-check.sh v0.1.0
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

tag=${1:?usage: release-check.sh vX.Y.Z}
: "${IMAGE:?set IMAGE to the repository the release pushes}"
helm=${HELM:-helm}
fail() { echo "release-check: $*" >&2; exit 1; }

version=${tag#v}
[ "$tag" = "v$version" ] || fail "tag $tag does not start with v"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "tag $tag is not v<semver>"

chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" charts/wincsi/Chart.yaml; }
[ "$(chart_field version)" = "$version" ] || fail "charts/wincsi/Chart.yaml version is $(chart_field version), the tag says $version"
[ "$(chart_field appVersion)" = "$version" ] || fail "charts/wincsi/Chart.yaml appVersion is $(chart_field appVersion), the tag says $version"
cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)
[ "$cargo_version" = "$version" ] || fail "Cargo.toml's workspace version is $cargo_version, the tag says $version"

# The driver container's image in each mode, as a default install renders it.
driver_image() {
    "$helm" template wincsi charts/wincsi --namespace wincsi-system --show-only templates/daemonset.yaml "$@" |
        awk '/- name: wincsi-node$/ { found = 1 } found && /image:/ { gsub(/"/, "", $2); print $2; exit }'
}
csi_proxy_image=$(driver_image)
host_process_image=$(driver_image --set mode=hostProcess)
[ "$csi_proxy_image" = "$IMAGE:$version" ] ||
    fail "the chart's default driver image is $csi_proxy_image; the release pushes $IMAGE:$version"
[ "$host_process_image" = "$IMAGE:$version-hostprocess" ] ||
    fail "the chart's hostProcess driver image is $host_process_image; the release pushes $IMAGE:$version-hostprocess"
echo "release-check: $tag: chart $version, images $IMAGE:$version and $IMAGE:$version-hostprocess"
