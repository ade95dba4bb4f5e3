#!/usr/bin/env bash
# CTest: install keel from BUILD_DIR into a temporary prefix, then build and run a program outside
# the tree with find_package(keel) (tests/install/consumer/), and check keel.pc with pkg-config.
set -euo pipefail
BUILD_DIR="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/keel-install.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

cmake --install "$BUILD_DIR" --prefix "$TMP/prefix" >/dev/null
test -f "$TMP/prefix/include/keel/keel.h"
test -f "$TMP/prefix/lib/cmake/keel/keelConfig.cmake"
test -f "$TMP/prefix/lib/cmake/keel/keelConfigVersion.cmake"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$HERE/consumer" -B "$TMP/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TMP/prefix" >/dev/null
cmake --build "$TMP/build" >/dev/null
mkdir -p "$TMP/scratch"
"$TMP/build/app" "$TMP/scratch"

# keel.pc: a program built with nothing but pkg-config's flags.
cat > "$TMP/pc.cc" <<'CC'
#include <keel/keel.h>
int main() { return keel::Tensor::zeros({2, 3}).size() == 6 ? 0 : 1; }
CC
read -r -a flags <<<"$(PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" pkg-config --cflags --libs keel)"
c++ "$TMP/pc.cc" -o "$TMP/pc" "${flags[@]}"
"$TMP/pc"
echo "find_package(keel) and pkg-config keel: both consumers built and ran"
