#!/usr/bin/env bash
# Fetches what the GPU-less CUDA checks need besides nvcc, from PyPI, into <repo>/.deps (git-ignored;
# never committed): the pinned CUTLASS headers (cutlass_headers.sh) and cuobjdump + nvdisasm
# (nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm 13.5.37, which read CUDA 13.0 objects).
# Idempotent; needs network access to the package index. Used by tests/test_cuda_isa.py when
# MXPREC_CUDA_CI_BUILD=1 (set by .ci/run).
#
#   PYTHON=python3 bash csrc/cuda_kernels/fetch_ci_tools.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
# shellcheck source=cutlass_headers.sh
source "$ROOT/csrc/cuda_kernels/cutlass_headers.sh"
TOOLS_VERSION="13.5.37"
BIN="$ROOT/.deps/cuobjdump/nvidia/cu13/bin"
if [ ! -x "$BIN/cuobjdump" ] || [ ! -x "$BIN/nvdisasm" ]; then
  mkdir -p "$ROOT/.deps/cuobjdump"
  "$PYTHON" -m pip download -q --no-deps "nvidia-cuda-cuobjdump==$TOOLS_VERSION" \
    "nvidia-cuda-nvdisasm==$TOOLS_VERSION" -d "$ROOT/.deps"
  for w in "$ROOT"/.deps/nvidia_cuda_cuobjdump-"$TOOLS_VERSION"-*.whl "$ROOT"/.deps/nvidia_cuda_nvdisasm-"$TOOLS_VERSION"-*.whl; do
    "$PYTHON" -m zipfile -e "$w" "$ROOT/.deps/cuobjdump"
  done
  chmod +x "$BIN"/* 2>/dev/null || true
fi
echo "CUTLASS headers: $CUTLASS_DIR/include; cuobjdump/nvdisasm: $BIN"
