#!/usr/bin/env bash
# Sourced by the benchmark scripts that run PyTorch: keel's packages (tools/install_deps.sh --test,
# which brings python3-torch) and OpenBLAS. Debian's python3-torch does its matrix products outside
# oneDNN through libblas.so.3, the reference BLAS unless an optimised one is installed: timing
# PyTorch on it would flatter keel. Run PyTorch's commands through torch_at_its_best, which unsets
# the environment's OPENBLAS_CORETYPE (Haswell here: keeps OpenBLAS off its AVX-512 kernels) and
# OPENBLAS_L2_SIZE.
./tools/install_deps.sh --test
if ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  echo "$(basename "$0"): installing libopenblas0-pthread so PyTorch uses an optimised BLAS" >&2
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo -n"; else SUDO=""; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libopenblas0-pthread </dev/null >/dev/null
fi
torch_at_its_best() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$@"; }
