#!/usr/bin/env bash
# Prepare Wine for running wincsi's Windows test binaries (idempotent; ~10 s the first time, <1 s after).
#
#   1. builds the ProcessPrng shim (.ci/wine/bcryptprimitives.{c,def}) with mingw: Rust >= 1.78 std imports
#      bcryptprimitives!ProcessPrng, which Wine 8 lacks, so without it every Rust exe fails to load (c0000135);
#   2. creates the Wine prefix $WINCSI_WINEPREFIX (default ~/.cache/wincsi/wine) with `wineboot -i` if needed;
#   3. copies the shim into the prefix's C:\windows\system32;
#   4. proves it: runs a tiny mingw-built exe that calls ProcessPrng under Wine;
#   5. prints the environment to export for `cargo test --target x86_64-pc-windows-gnu`.
#
# Needs: x86_64-w64-mingw32-gcc, wine64 (Debian: gcc-mingw-w64-x86-64 wine wine64; .ci/install.sh installs them).
# It never kills a running wineserver (other Wine runs may share the prefix).
set -euo pipefail

# shellcheck source=.ci/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
unset DISPLAY WAYLAND_DISPLAY

die() {
    echo "wine-setup.sh: error: $1" >&2
    # Optional second argument: a log file whose content explains the failure.
    if [ -n "${2:-}" ]; then
        sed 's/^/    /' "$2" >&2
    fi
    exit 1
}

for tool in x86_64-w64-mingw32-gcc wineserver "$WINCSI_WINE"; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "'$tool' not found; install Debian packages gcc-mingw-w64-x86-64 wine wine64 (run .ci/install.sh)"
done

src="$WINCSI_ROOT/.ci/wine"
shim_dir="$WINCSI_CACHE/wine-shim"
mkdir -p "$shim_dir"
log="$shim_dir/setup.log"
: >"$log"

# 1. The shim. Rebuilt every time (a fraction of a second) so an edited source can never go stale.
x86_64-w64-mingw32-gcc -O2 -Wall -Wextra -Werror -shared -static-libgcc \
    -o "$shim_dir/bcryptprimitives.dll.tmp" \
    "$src/bcryptprimitives.c" "$src/bcryptprimitives.def" -ladvapi32 >>"$log" 2>&1 ||
    die "building the ProcessPrng shim failed" "$log"
mv -f "$shim_dir/bcryptprimitives.dll.tmp" "$shim_dir/bcryptprimitives.dll"

# 2. The prefix. The marker is written only after a complete wineboot, so an interrupted run is redone.
marker="$WINEPREFIX/.wincsi-prefix-ready"
if [ ! -f "$marker" ]; then
    echo "wine-setup.sh: creating Wine prefix $WINEPREFIX (wineboot -i, ~10 s)"
    mkdir -p "$(dirname "$WINEPREFIX")"
    # Output goes to a file, never to our caller's pipes: the wineserver that wineboot spawns inherits them.
    "$WINCSI_WINE" wineboot -i </dev/null >>"$log" 2>&1 ||
        die "wineboot -i failed for $WINEPREFIX" "$log"
    # Wait for the registry to be flushed (the server Debian's wrapper starts exits as soon as it is idle).
    wineserver -w </dev/null >>"$log" 2>&1 || true
    if [ ! -f "$WINEPREFIX/system.reg" ] || [ ! -d "$WINEPREFIX/drive_c/windows/system32" ]; then
        die "wineboot did not create a usable prefix in $WINEPREFIX" "$log"
    fi
    date -u +%FT%TZ >"$marker"
fi

# 3. Install the shim (only when it changed, so a running Wine process never sees a half-copied DLL).
dest="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if ! cmp -s "$shim_dir/bcryptprimitives.dll" "$dest"; then
    cp -f "$shim_dir/bcryptprimitives.dll" "$dest.tmp"
    mv -f "$dest.tmp" "$dest"
fi

# 4. Prove that a program importing ProcessPrng loads and gets random bytes. mingw's ld links against the
#    DLL directly, which gives the exe the same import a Rust std exe has.
x86_64-w64-mingw32-gcc -O2 -Wall -Werror -o "$shim_dir/prng-check.exe" \
    "$src/prng-check.c" "$shim_dir/bcryptprimitives.dll" >>"$log" 2>&1 ||
    die "building prng-check.exe failed" "$log"
out="$shim_dir/prng-check.out"
# Through the runner, which also starts the wineserver and Wine's system processes detached from our stdio.
if ! "$WINCSI_ROOT/.ci/wine-run.sh" "$shim_dir/prng-check.exe" </dev/null >"$out" 2>&1 || ! grep -q '^ProcessPrng OK' "$out"; then
    die "a Windows exe importing ProcessPrng does not run under Wine ($WINCSI_WINE, prefix $WINEPREFIX)" "$out"
fi

echo "wine-setup.sh: Wine ready ($("$WINCSI_WINE" --version 2>/dev/null || echo unknown version), prefix $WINEPREFIX)"
cat <<EOF
# To run Windows test binaries under Wine yourself, either source the project env:
#   . .ci/env.sh
# or export:
export WINEPREFIX="$WINEPREFIX"
export WINEDEBUG=-all
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$WINCSI_ROOT/.ci/wine-run.sh"
EOF
