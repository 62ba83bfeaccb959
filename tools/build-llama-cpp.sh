#!/usr/bin/env bash
# Build (once) and install llama-cpp-python into the given Python's environment, with the
# backends this machine can build: CPU + Vulkan on Linux by default, CUDA when asked.
#
#   tools/build-llama-cpp.sh PYTHON
#   LOREGUARD_ACCELERATOR=vulkan|cpu|cuda   which build (default: vulkan on Linux, cpu elsewhere)
#
# The wheel is cached under a key made of everything that changes the binary (version, backend,
# CMake flags, Vulkan header and shader compiler versions), because pip's own wheel cache keys a
# build on the sdist alone: a CPU and a Vulkan wheel of one version would collide there.
# Prints the accelerator it installed on its last line.
set -euo pipefail

PYTHON="$1"
VERSION="0.3.36"
BASE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
CACHE="${LOREGUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loreguard}"
# ggml-vulkan needs Vulkan headers >= 1.3.261 (vk::LayerSettingEXT); Debian 12 ships 1.3.239.
MIN_HEADER=261
DEBIAN_PACKAGES="glslc glslang-tools spirv-headers libvulkan-dev mesa-vulkan-drivers"

say() { echo "loreguard: $*" >&2; }

case "$(uname -s)" in
  Linux) default=vulkan ;;
  *) default=cpu ;;
esac
accelerator="${LOREGUARD_ACCELERATOR:-$default}"

header_version() {  # VK_HEADER_VERSION of an include folder, or 0
  local h="$1/vulkan/vulkan_core.h" v=""
  [ -f "$h" ] && v="$(sed -n 's/^#define VK_HEADER_VERSION \([0-9]*\)$/\1/p;T;q' "$h")"
  echo "${v:-0}"
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"; else return 1; fi
}

# Debian's next release has new enough headers: fetched with apt itself (signed indexes, checked
# hashes) into a private folder, never installed over the system's.
private_headers() {
  local dir="$CACHE/vulkan-headers" lists="$CACHE/apt-trixie"
  if [ "$(header_version "$dir/usr/include")" -ge "$MIN_HEADER" ] 2>/dev/null; then
    echo "$dir/usr/include"; return
  fi
  command -v apt-get >/dev/null || return 1
  local keyring=/usr/share/keyrings/debian-archive-trixie-stable.gpg
  [ -f "$keyring" ] || return 1
  mkdir -p "$lists/lists/partial" "$lists/debs"
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main" > "$lists/sources.list"
  local o=(-o "Dir::Etc::SourceList=$lists/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$lists/lists" -o APT::Architecture=amd64 -o APT::Sandbox::User=root)
  apt-get "${o[@]}" -q update >/dev/null || return 1
  (cd "$lists/debs" && rm -f ./*.deb && apt-get "${o[@]}" -q download libvulkan-dev >/dev/null) || return 1
  rm -rf "$dir" && mkdir -p "$dir"
  dpkg-deb -x "$lists/debs"/libvulkan-dev_*.deb "$dir"
  [ "$(header_version "$dir/usr/include")" -ge "$MIN_HEADER" ] || return 1
  echo "$dir/usr/include"
}

vulkan_args() {  # CMake flags for the Vulkan backend, or fail (the caller falls back to the CPU)
  local missing=()
  command -v glslc >/dev/null || missing+=(glslc)
  [ -e /usr/include/spirv/unified1/spirv.hpp ] || missing+=(spirv-headers)
  compgen -G "/usr/lib/*/libvulkan.so" >/dev/null || compgen -G /usr/lib/libvulkan.so >/dev/null || missing+=(libvulkan-dev)
  compgen -G "/usr/share/vulkan/icd.d/lvp_icd.*.json" >/dev/null || missing+=(mesa-vulkan-drivers)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing the Vulkan build's Debian packages: $DEBIAN_PACKAGES"
    # A fresh container has no package lists yet: update once when the install cannot find them.
    { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $DEBIAN_PACKAGES >/dev/null 2>&1 ||
      { as_root apt-get update -q >/dev/null 2>&1 &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $DEBIAN_PACKAGES >/dev/null 2>&1; }; } || {
      say "cannot install ${missing[*]} (needs root and Debian's apt); building the CPU-only llama.cpp instead (docs/gpu.md)"
      return 1
    }
  fi
  local include=/usr/include
  if [ "$(header_version "$include")" -lt "$MIN_HEADER" ]; then
    include="$(private_headers)" || {
      say "cannot fetch Vulkan headers >= 1.3.$MIN_HEADER; building the CPU-only llama.cpp instead (docs/gpu.md)"
      return 1
    }
  fi
  echo "-DGGML_VULKAN=on -DVulkan_INCLUDE_DIR=$include"
}

extra=""
case "$accelerator" in
  vulkan)
    if ! extra="$(vulkan_args)"; then
      # Asked for by name (CI does): a CPU build would pass the GPU tests by skipping them.
      [ -z "${LOREGUARD_ACCELERATOR:-}" ] || { say "LOREGUARD_ACCELERATOR=vulkan cannot be built here"; exit 1; }
      accelerator=cpu
    fi ;;
  cuda) extra="-DGGML_CUDA=on" ;;
  cpu) ;;
  *) say "LOREGUARD_ACCELERATOR=$accelerator: choose vulkan, cuda or cpu"; exit 2 ;;
esac

# The key: what changes the binary, not where the headers happen to be unpacked.
fingerprint="$VERSION $accelerator $BASE_ARGS ${CMAKE_ARGS_EXTRA:-} $(uname -m)"
if [ "$accelerator" = vulkan ]; then
  include="${extra##*-DVulkan_INCLUDE_DIR=}"
  # The whole output read, then its first line: `| head -1` closes the pipe while glslc still
  # writes its next line, and under pipefail that SIGPIPE (exit 141) ended the script at random.
  glslc_version="$(glslc --version 2>&1)"
  fingerprint+=" headers=$(header_version "$include") glslc=${glslc_version%%$'\n'*}"
fi
key="$(echo "$fingerprint" | sha256sum | cut -c1-16)"
wheels="$CACHE/wheels/llama-cpp-python-$VERSION-$accelerator-$key"

build() {  # build() DIR EXTRA_CMAKE_ARGS
  rm -rf "$1.tmp" && mkdir -p "$1.tmp"
  CMAKE_ARGS="$BASE_ARGS $2 ${CMAKE_ARGS_EXTRA:-}" "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir \
    --no-binary llama-cpp-python -w "$1.tmp" "llama-cpp-python==$VERSION" && rm -rf "$1" && mv "$1.tmp" "$1"
}

if [ -n "${CMAKE_ARGS:-}" ]; then
  say "CMAKE_ARGS is ignored here: choose the backend with LOREGUARD_ACCELERATOR, add flags with CMAKE_ARGS_EXTRA"
fi
if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
  say "building llama-cpp-python $VERSION with $accelerator (first run only: about 10 minutes on 2 cores)"
  if ! build "$wheels" "$extra"; then
    if [ "$accelerator" != vulkan ] || [ -n "${LOREGUARD_ACCELERATOR:-}" ]; then
      say "the $accelerator build of llama-cpp-python failed"; exit 1
    fi
    say "the Vulkan build failed; building the CPU-only llama.cpp instead (docs/gpu.md)"
    accelerator=cpu
    wheels="$CACHE/wheels/llama-cpp-python-$VERSION-cpu-$(echo "$VERSION cpu $BASE_ARGS ${CMAKE_ARGS_EXTRA:-} $(uname -m)" | sha256sum | cut -c1-16)"
    ls "$wheels"/*.whl >/dev/null 2>&1 || build "$wheels" ""
  fi
fi
"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$wheels"/*.whl
echo "$accelerator"
