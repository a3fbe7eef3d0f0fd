#!/usr/bin/env bash
# Builds and pushes wincsi's Windows images and extracts the Windows binary, on a Linux machine with Docker BuildKit
# (docker buildx) and jq. The release workflow (.github/workflows/release.yml) runs it for ghcr.io; docs/images.md
# runs the same script for a private registry.
#
#   IMAGE=registry.example.com/k8s/wincsi-node VERSION=0.1.0 bash scripts/release-images.sh [--out DIR] [--dry-run]
#
# Pushes:
#   $IMAGE:$VERSION-windows-<OSVERSION>-amd64   the csiProxy-mode image per Windows Server version (1809 = 2019,
#                                               ltsc2022, ltsc2025), FROM nanoserver:<OSVERSION>
#   $IMAGE:$VERSION                             one manifest list of those three, each entry's platform carrying the
#                                               os.version of its image, so containerd on a node pulls its match
#   $IMAGE:$VERSION-hostprocess                 the HostProcess image (one image for every Windows version)
# Writes into DIR (default dist/): wincsi-node.exe, index.digest (the manifest list), hostprocess.digest.
#
# Why descriptors: `docker buildx imagetools create IMAGE:A IMAGE:B` fills a single-image source's platform with its
# os and architecture only, never os.version (docker/buildx v0.36.1 util/imagetools/create.go:311-339, loadPlatform);
# a source given as an OCI descriptor in a file (-f) keeps the platform it names, os.version included (docker/buildx
# v0.36.1 docs/reference/buildx_imagetools_create.md:83-102). The descriptor comes from each build's metadata file
# (containerimage.descriptor, docs/reference/buildx_build.md:620-628) and os.version from the pushed image's own
# config (imagetools inspect --format '{{json .Image}}'), which BuildKit copies from the nanoserver base.
# --dry-run prints the commands and checks nothing against a registry (placeholder digests).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=dist
dry_run=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        *) echo "release-images.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
: "${IMAGE:?set IMAGE, e.g. registry.example.com/k8s/wincsi-node}"
: "${VERSION:?set VERSION, e.g. 0.1.0, the chart appVersion}"
case "${IMAGE##*/}" in
    *:* | *@*) echo "release-images.sh: IMAGE is a repository, without tag or digest: $IMAGE" >&2; exit 2 ;;
esac

# nanoserver tag -> the Windows build its images report as os.version (10.0.<build>.<revision>).
OSVERSIONS=(1809 ltsc2022 ltsc2025)
declare -A BUILD=([1809]=10.0.17763 [ltsc2022]=10.0.20348 [ltsc2025]=10.0.26100)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

run() {
    printf '+'
    printf ' %q' "$@"
    printf '\n'
    if [ "$dry_run" -eq 0 ]; then
        "$@"
    fi
}

# build TARGET TAG METADATA [EXTRA ARGS...]: one Windows image, pushed, its metadata written.
build() {
    local target=$1 tag=$2 metadata=$3
    shift 3
    run docker buildx build --platform windows/amd64 --file Dockerfile.windows --target "$target" "$@" \
        --provenance=false --sbom=false --metadata-file "$metadata" --tag "$tag" --push .
    if [ "$dry_run" -eq 1 ]; then
        jq -n --arg d "sha256:$(printf '%s' "$tag" | sha256sum | cut -c1-64)" \
            '{"containerimage.digest": $d, "containerimage.descriptor":
              {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": $d, "size": 1024}}' >"$metadata"
    fi
}

# 1. The binary (the build stage is shared with the images below: BuildKit builds it once).
run docker buildx build --file Dockerfile.windows --target binary --output "type=local,dest=$out" .

# 2. One csiProxy-mode image per Windows Server version, and its descriptor with os.version.
descriptors=()
for v in "${OSVERSIONS[@]}"; do
    meta="$work/$v.json"
    build nanoserver "$IMAGE:$VERSION-windows-$v-amd64" "$meta" --build-arg "OSVERSION=$v"
    digest=$(jq -er '."containerimage.digest"' "$meta")
    if [ "$dry_run" -eq 1 ]; then
        os_version="${BUILD[$v]}.0"
    else
        os_version=$(docker buildx imagetools inspect "$IMAGE@$digest" --format '{{json .Image}}' |
            jq -er '."os.version"')
    fi
    case "$os_version" in
        "${BUILD[$v]}".*) ;;
        *) echo "release-images.sh: $IMAGE@$digest ($v) reports os.version $os_version, not ${BUILD[$v]}.*" >&2
           exit 1 ;;
    esac
    jq -e --arg osv "$os_version" '."containerimage.descriptor" | {mediaType, digest, size,
        platform: {os: "windows", architecture: "amd64", "os.version": $osv}}' "$meta" >"$work/$v.descriptor.json"
    descriptors+=(-f "$work/$v.descriptor.json")
    echo "$v: $digest, os.version $os_version"
done

# 3. The HostProcess image.
build hostprocess "$IMAGE:$VERSION-hostprocess" "$work/hostprocess.json"
jq -er '."containerimage.digest"' "$work/hostprocess.json" >"$out/hostprocess.digest"

# 4. The multi-OS-version manifest list.
run docker buildx imagetools create --tag "$IMAGE:$VERSION" "${descriptors[@]}"
if [ "$dry_run" -eq 1 ]; then
    echo "sha256:$(printf '%s' "$IMAGE:$VERSION" | sha256sum | cut -c1-64)" >"$out/index.digest"
    exit 0
fi

# 5. Check what a node will pull: one windows/amd64 entry per version, each with its os.version.
raw=$(docker buildx imagetools inspect --raw "$IMAGE:$VERSION")
for v in "${OSVERSIONS[@]}"; do
    jq -e --arg b "${BUILD[$v]}." '[.manifests[] | select(.platform.os == "windows" and
        .platform.architecture == "amd64" and (.platform."os.version" // "" | startswith($b)))] | length == 1' \
        <<<"$raw" >/dev/null || { echo "release-images.sh: $IMAGE:$VERSION has no single entry for $v" >&2; exit 1; }
done
jq -e '.manifests | length == 3' <<<"$raw" >/dev/null || { echo "release-images.sh: not 3 entries" >&2; exit 1; }
docker buildx imagetools inspect "$IMAGE:$VERSION" --format '{{json .Manifest}}' | jq -er .digest >"$out/index.digest"
echo "pushed $IMAGE:$VERSION ($(cat "$out/index.digest")) and $IMAGE:$VERSION-hostprocess ($(cat "$out/hostprocess.digest"))"
