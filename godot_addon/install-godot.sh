#!/usr/bin/env bash
# Installs a headless Godot 4 into a private folder (default .godot-env/), without touching the
# system's apt setup. Debian ships godot only in testing/unstable, built against a newer glibc
# than this bookworm system has, so we download the packages with a private apt configuration,
# unpack them, and point the binary at the glibc it came with (patchelf).
# It also renders (not only --headless): under Xvfb, `--rendering-driver opengl3` runs on mesa's
# llvmpipe from the same private root (the screenshot tests, tests/godot_addon/test_screenshots.py).
# It downloads about 240 MB of Debian packages (godot and some 300 dependencies) and takes about
# 1.2 GB on disk: the unpacked root (about 1 GB) and the packages kept in apt/cache.
# Prints the path of a `godot` launcher on success.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${GODOT_ENV:-$ROOT/.godot-env}"
LAUNCHER="$DEST/godot"
R="$DEST/root"
LIBS="$R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu:$R/usr/lib/x86_64-linux-gnu/pulseaudio"
first() { for f in "$@"; do [ -f "$f" ] && { echo "$f"; return 0; }; done; return 1; }

# Libraries with a RUNPATH of their own ignore the binary's RPATH, so they would look for their
# dependencies in the system's folders, where the newer ones are missing: libpulse, and libLLVM,
# which mesa's llvmpipe loads (it needs libxml2.so.16). Point them at the private root.
# Idempotent: an older install gets the rendering fix without a new download.
patch_libraries() {
  local loader patchelf lib
  loader="$(first "$R"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$R"/lib64/ld-linux-x86-64.so.2 "$R"/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)"
  # patchelf from the same download runs on the new glibc too: start it through that loader.
  patchelf=("$loader" --library-path "$LIBS" "$R/usr/bin/patchelf")
  for lib in "$R"/usr/lib/x86_64-linux-gnu/libpulse.so.0* "$R"/usr/lib/x86_64-linux-gnu/libLLVM*.so*; do
    [ -f "$lib" ] && [ ! -L "$lib" ] && "${patchelf[@]}" --force-rpath --set-rpath "\$ORIGIN:$LIBS" "$lib"
  done
  touch "$DEST/.libraries-patched"
}

# The launcher runs the binary with the Vulkan loader pointed at lavapipe in the private root:
# a Godot that opens a window (the editor, a Forward+ game) would otherwise load the system's
# Vulkan drivers, built for the system's older libraries, into a process running the private
# root's newer ones (an editor opened with a display died with SIGBUS). VK_DRIVER_FILES is the
# loader's current name, VK_ICD_FILENAMES the older one. Written whole, then moved into place,
# so a Godot started meanwhile never reads half a script.
write_launcher() {
  local bin icd
  bin="$(first "$R"/usr/bin/godot "$R"/usr/lib/godot/godot)"
  {
    echo '#!/usr/bin/env bash'
    if icd="$(first "$R"/usr/share/vulkan/icd.d/lvp_icd*.json)"; then
      echo "export VK_DRIVER_FILES=\"$icd\""
      echo "export VK_ICD_FILENAMES=\"$icd\""
    else
      echo "install-godot.sh: no lavapipe in $R; Vulkan would use the system's drivers" >&2
    fi
    echo "exec \"$bin\" \"\$@\""
  } > "$LAUNCHER.new"
  chmod +x "$LAUNCHER.new"
  mv "$LAUNCHER.new" "$LAUNCHER"
}

if [ -x "$LAUNCHER" ] && "$LAUNCHER" --headless --version >/dev/null 2>&1; then
  # Idempotent: an older install gets the library and launcher fixes without a new download.
  [ -f "$DEST/.libraries-patched" ] || patch_libraries >&2
  grep -q VK_DRIVER_FILES "$LAUNCHER" || write_launcher
  echo "$LAUNCHER"; exit 0
fi

MIRROR="$(grep -hoE 'https?://deb\.debian\.org/debian/?' /etc/apt/sources.list.d/* /etc/apt/sources.list 2>/dev/null | head -n1 || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
APT="$DEST/apt"
rm -rf "$DEST"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/etc" "$DEST/root" "$DEST/debs"
: > "$APT/status"

fetch() {  # suite, packages...
  local suite="$1"; shift
  cat > "$APT/etc/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main
SRC
  local opts=(-o "Dir::Etc::SourceList=$APT/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$APT/lists" -o "Dir::State::Status=$APT/status"
              -o "Dir::Cache=$APT/cache" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
  apt-get "${opts[@]}" -qq update && apt-get "${opts[@]}" -qq -y --download-only install "$@"
}

for suite in forky sid; do
  if fetch "$suite" godot patchelf >&2; then break; fi
done
for deb in "$APT"/cache/archives/*.deb; do dpkg -x "$deb" "$DEST/root"; done

LOADER="$(first "$R"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$R"/lib64/ld-linux-x86-64.so.2 "$R"/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)"
BIN="$(first "$R"/usr/bin/godot "$R"/usr/lib/godot/godot)"
# patchelf from the same download runs on the new glibc too: start it through that loader.
PATCHELF=("$LOADER" --library-path "$LIBS" "$R/usr/bin/patchelf")
"${PATCHELF[@]}" --set-interpreter "$LOADER" --force-rpath --set-rpath "$LIBS" "$BIN"
patch_libraries
write_launcher
"$LAUNCHER" --headless --version >&2
echo "$LAUNCHER"
