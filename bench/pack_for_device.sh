#!/usr/bin/env bash
# Packs a Release `keel`, Open MPI's launcher and every shared library they load (plus the loader,
# Open MPI's and PMIx's plugins and help files, and Fashion-MNIST) into .devcarry/, for a machine
# that has none of Debian's packages (the lent device machine). There, `source bench/device_env.sh`
# unpacks it and puts `keel` and `mpirun` wrappers first in PATH; bench scripts then run unchanged
# (KEEL=keel). .devcarry/ is ignored through .git/info/exclude.
#
#   bench/pack_for_device.sh            # after cmake --build build (Release)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.devcarry
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf "$out" && mkdir -p "$out"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{lib,real,openmpi3,pmix,share,etc}
cp build/keel "$stage/real/"
for b in resnet_bench fma_peak mlp_throughput conv_bench; do if [[ -x build/bench/$b ]]; then cp build/bench/$b "$stage/real/"; fi; done
cp "$(readlink -f /usr/bin/orterun)" "$stage/real/orterun"
plugins=(/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so)
{ ldd build/keel /usr/bin/orterun /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2 "${plugins[@]}" 2>/dev/null || true; } |
  awk '$3 ~ /^\// { print $3 } $1 ~ /^\/lib64\// { print $1 }' | sort -u | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2 "$stage/lib/"
cp /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$stage/openmpi3/"
cp /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so "$stage/pmix/"
cp -r /usr/share/openmpi "$stage/share/openmpi"
cp -r /usr/share/pmix "$stage/share/pmix" 2>/dev/null || true
cp -r /etc/openmpi/. "$stage/etc/"
XZ_OPT="-T0 -6" tar -C "$stage" -cJf "$out/keel.txz" .
cp /usr/share/datasets/fashion-mnist/*.gz "$out/"
du -sh "$out"
