# On the device machine, from the repository root: `source bench/device_env.sh` unpacks what
# bench/pack_for_device.sh carried (.devcarry/) into /tmp/keel-carry, installs Fashion-MNIST where
# keel looks for it, and puts `keel` and `mpirun` wrappers (started through the carried loader and
# libraries, Open MPI pointed at its carried plugins) first in PATH.
K=/tmp/keel-carry
rm -rf "$K" && mkdir -p "$K" && { tar -C "$K" -xJf .devcarry/keel.txz 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .devcarry/keel.txz "$K"; }
# Not $K/lib: mpirun puts $OPAL_PREFIX/lib first in its processes' LD_LIBRARY_PATH, and the carried
# libc there would be loaded by the machine's own /bin/sh.
mv "$K/lib" "$K/libs"
mkdir -p /usr/share/datasets/fashion-mnist && cp .devcarry/*.gz /usr/share/datasets/fashion-mnist/
# The raw binaries live in real/ (mpirun puts $OPAL_PREFIX/bin first in its processes' PATH).
loader="$K/libs/ld-linux-x86-64.so.2 --library-path $K/libs"
printf '#!/bin/sh\nexec %s %s "$@"\n' "$loader" "$K/real/keel" > "$K/keel" && chmod +x "$K/keel"
printf '#!/bin/sh\nexec %s %s "$@"\n' "$loader" "$K/real/orterun" > "$K/mpirun" && chmod +x "$K/mpirun"
for b in resnet_bench fma_peak mlp_throughput conv_bench; do
  if [ -x "$K/real/$b" ]; then printf '#!/bin/sh\nexec %s %s "$@"\n' "$loader" "$K/real/$b" > "$K/$b" && chmod +x "$K/$b"; fi
done
export PATH="$K:$PATH" KEEL="$K/keel" MPIRUN_BIN="$K/mpirun"
export OPAL_PREFIX="$K" OPAL_PKGLIBDIR="$K/openmpi3" OPAL_PKGDATADIR="$K/share/openmpi" OPAL_SYSCONFDIR="$K/etc"
export OMPI_MCA_mca_base_component_path="$K/openmpi3" PMIX_MCA_mca_base_component_path="$K/pmix"
export OMPI_MCA_mca_base_component_show_load_errors=0 PMIX_INSTALL_PREFIX="$K" PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
