#!/usr/bin/env bash
# Install the Debian 12 packages keel needs.
#   tools/install_deps.sh          what building and running need (tools/quickstart.sh)
#   tools/install_deps.sh --test   that plus what the tests, fuzzers and PyTorch references need
#                                  (tools/test.sh): GoogleTest, clang + libFuzzer, PyTorch, h5py, Pillow
# Idempotent: checks each package with dpkg-query and only calls apt-get (update + install)
# for the ones missing, so it returns immediately when everything is present. Needs no stdin.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build pkg-config
  libeigen3-dev libhdf5-dev libboost-program-options-dev libboost-context-dev libboost-dev zlib1g-dev
  nlohmann-json3-dev libprotobuf-dev protobuf-compiler libjpeg62-turbo-dev libpng-dev
  libopenmpi-dev openmpi-bin libdnnl-dev libtcmalloc-minimal4
  dataset-fashion-mnist
)
TEST_PACKAGES=(
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev
  python3-torch python3-h5py python3-numpy python3-pil python3-protobuf
)

case "${1:-}" in
  "") ;;
  --test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  *) echo "usage: tools/install_deps.sh [--test]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install_deps: installing missing packages: ${missing[*]}" >&2

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "install_deps: not root and sudo is unavailable; install as root: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
