#!/usr/bin/env bash
# Standalone build of libmxprec_cuda.so (the CUDA lowering of mxprec_scaled_gemm) with nvcc.
#
#   bash csrc/cuda_kernels/build.sh [OUT_DIR]        # default OUT_DIR: <repo>/build-cuda
#
# Needs: nvcc >= 12.4 (sm_90a; tested with 13.0), a python3 with jax (for the XLA FFI headers,
# jax.ffi.include_dir()), and CUTLASS 4.2 headers. CUTLASS is taken from $CUTLASS_DIR or
# <repo>/.deps/cutlass_library/source (the pinned PyPI wheel, header-only; never committed):
#   pip download --no-deps nvidia-cutlass==4.2.0.0 -d .deps && \
#     (cd .deps && unzip -q -o nvidia_cutlass-4.2.0.0-py3-none-any.whl 'cutlass_library/source/include/*' \
#        'cutlass_library/source/tools/util/include/*')
# This script runs that download itself when the headers are missing (needs network).
# Variables: NVCC (nvcc), PYTHON (python3), CUTLASS_DIR, JOBS (parallel TUs; default nproc),
# ONLY (a shell glob, e.g. 'sm90_fp8_gemm_tensorwise*': compile only the matching TUs and link them
# with the other objects already in OUT_DIR/obj, e.g. a copy of a full build).
# Each CUTLASS TU takes ~1-3 min and ~3.5 GB of RAM.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/build-cuda}"
NVCC="${NVCC:-nvcc}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"

# shellcheck source=cutlass_headers.sh
source "$ROOT/csrc/cuda_kernels/cutlass_headers.sh"
XLA_INC="$("$PYTHON" -c 'import jax.ffi; print(jax.ffi.include_dir())')"

mkdir -p "$OUT/obj"
[ -f "$OUT/.gitignore" ] || echo "*" > "$OUT/.gitignore"  # build output: never committed
FLAGS=(-std=c++17 -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
       -Xcompiler=-fPIC,-fvisibility=hidden
       -I"$ROOT/csrc/common" -I"$ROOT/csrc/cuda_kernels"
       -isystem "$CUTLASS_DIR/include" -isystem "$CUTLASS_DIR/tools/util/include" -isystem "$XLA_INC")
# Every sm_90a TU: sm90_*.cu (GEMMs + scaled_gemm handler), cuda_*.cu (quantize kernels + handler).
SRCS=()
for f in "$ROOT"/csrc/cuda_kernels/sm90_*.cu "$ROOT"/csrc/cuda_kernels/cuda_*.cu; do
  if [ -f "$f" ]; then SRCS+=("$(basename "$f")"); fi
done
FLAGS+=(${EXTRA_NVCC_FLAGS:-})

start=$(date +%s)
pids=()
objs=()
logs=()
running=0
for s in "${SRCS[@]}"; do
  o="$OUT/obj/${s%.cu}.o"
  objs+=("$o")
  # shellcheck disable=SC2053
  if [ -n "${ONLY:-}" ] && [[ "$s" != $ONLY ]]; then
    [ -f "$o" ] || { echo "ONLY=$ONLY: $o is missing (build the full library into $OUT first)" >&2; exit 1; }
    continue
  fi
  # Each TU's compiler output goes to $o.log (printed when it finishes) for the C7514 check below.
  ( rc=0; "$NVCC" "${FLAGS[@]}" -c "$ROOT/csrc/cuda_kernels/$s" -o "$o" > "$o.log" 2>&1 || rc=$?
    cat "$o.log" >&2; exit "$rc" ) &
  pids+=($!)
  logs+=("$o.log")
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); running=$((running - 1)); fi
done
for p in "${pids[@]}"; do wait "$p"; done
# ptxas info C7514: "wgmma.mma_async instructions are serialized". A GEMM whose WGMMAs ptxas serialized
# still computes the right result, only much slower, so it is a build error here.
if [ "${#logs[@]}" -gt 0 ] && grep -l "C7514" "${logs[@]}" >&2; then
  echo "error: ptxas serialized the WGMMAs (C7514) in the objects above" >&2
  exit 1
fi
"$NVCC" -shared -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$OUT/libmxprec_cuda.so"
echo "built $OUT/libmxprec_cuda.so in $(( $(date +%s) - start )) s"
