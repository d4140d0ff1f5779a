#!/usr/bin/env bash
# The CUDA toolkit for make GGML_CUDA=ON on a machine without one: CUDA 13.0
# from the package index's wheels, checked by sha256, laid out in the user's
# cache, ${CONFCLIP_CUDA_ROOT:-$XDG_CACHE_HOME/confclip/cuda-13.0}, as a
# toolkit root (bin/nvcc, nvvm/, include/, lib64/), and its path printed.
# In the cache, not in the clone: every clone (a CI run is a fresh one) uses
# the same toolkit at the same path, so it is downloaded once, and ccache
# hits on the CUDA objects: CMake hands nvcc the toolkit's headers as
# -isystem=PATH, a form ccache's base_dir does not rewrite, so a toolkit in
# the clone put the clone's path into every CUDA object's key (make passes
# its CUDA_WHEEL_ROOT, the same path, as CONFCLIP_CUDA_ROOT).
# Why these: the GPU machines lent to this project run CUDA 13.0 with driver
# 580 (docs/gpu.md), and 13.0.88 is that toolkit; the index's CUDA 12.9 `nvidia-cuda-nvcc-cu12` wheel holds only ptxas (no nvcc,
# cicc or fatbinary), and Debian's 11.8 needs g++-11 and its cuBLAS 11 is not
# on a CUDA 13 machine. The wheels have cudart's static library but only
# shared cuBLAS, and no driver stub (libcuda.so): the build links cudart
# statically, cuBLAS from here (rpath), and leaves the driver API out
# (GGML_CUDA_NO_VMM: ggml's pool then grows by cudaMalloc, not by virtual
# memory mappings).
#   scripts/cuda-toolkit.sh          lays it down once, prints its root
set -euo pipefail
cd "$(dirname "$0")/.."
root=${CONFCLIP_CUDA_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/confclip/cuda-13.0}
stamp=ee8722c1f014-mtime
if [ -f "$root/.stamp" ] && [ "$(cat "$root/.stamp")" = "$stamp" ]; then
  echo "$root"
  exit 0
fi
req=$(mktemp)
tmp="$root.tmp.$$"
trap 'rm -rf "$req" "$tmp"' EXIT
cat >"$req" <<'REQ'
nvidia-cuda-nvcc==13.0.88 --hash=sha256:56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03
nvidia-nvvm==13.0.88 --hash=sha256:c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0
nvidia-cuda-crt==13.0.88 --hash=sha256:2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4
nvidia-cuda-runtime==13.0.96 --hash=sha256:7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
nvidia-cuda-cccl==13.0.85 --hash=sha256:e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649
nvidia-cublas==13.1.0.3 --hash=sha256:ee8722c1f0145ab246bccb9e452153b5e0515fd094c3678df50b2a0888b8b171
REQ
echo "cuda-toolkit: CUDA 13.0 from the package index (about 520 MB of wheels) into $root" >&2
mkdir -p "$tmp/wheels" "$tmp/unpacked"
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: \
  -r "$req" -d "$tmp/wheels" >&2
for w in "$tmp"/wheels/*.whl; do
  python3 -m zipfile -e "$w" "$tmp/unpacked" >&2
done
top="$tmp/unpacked/nvidia/cu13"
chmod +x "$top"/bin/* "$top"/nvvm/bin/*
ln -sfn lib "$top/lib64"
for l in cublas cublasLt cudart; do
  ln -sf "lib$l.so.13" "$top/lib/lib$l.so"
done
"$top/bin/nvcc" --version | tail -1 >&2
# One fixed time on every file: zipfile stamps them with the time of
# unpacking, and ccache (compiler_check = mtime) keys every CUDA object on
# nvcc's time, so a toolkit laid down again would miss the whole cache.
find "$top" -exec touch -h -d '2025-08-01 00:00:00 UTC' {} +
echo "$stamp" >"$top/.stamp"
# Whole or not at all: the finished tree takes the root's place in one move.
rm -rf "$root"
mv "$top" "$root"
echo "$root"
