#!/usr/bin/env bash
# Opt-in standalone build of libmxprec_cuda_sm100.so: the sm_100a (Blackwell) block-scaled MX GEMMs
# (sm100_mx_gemm_blockscaled.{h,cu}; C ABI, no XLA FFI handler yet). COMPILED, NEVER RUN (no sm_100 GPU).
#
#   bash csrc/cuda_kernels/build_sm100.sh [OUT_DIR]          # default OUT_DIR: <repo>/build-cuda
#   bash csrc/cuda_kernels/build_sm100.sh --isa [OUT_DIR]    # also dump SASS/PTX evidence to OUT_DIR/isa/
#
# Needs nvcc >= 12.8 (sm_100a; tested with 13.0) and the CUTLASS 4.2 headers, found like build.sh does
# ($CUTLASS_DIR or <repo>/.deps/cutlass_library/source; downloaded from the pinned nvidia-cutlass wheel
# when missing). No jax/XLA headers needed. Variables: NVCC, PYTHON, CUTLASS_DIR, JOBS (default nproc),
# FORMATS (default "1 2 3": MXFP8 E4M3, MXFP6 E2M3, MXFP4 E2M1; a missing one makes run() fail at link
# time, so keep all three unless you only want objects).
# Cost per format object: ~1.5-2.5 min, ~5 GB RAM (nvcc 13.0, 2 cores); the dispatcher object is seconds.
# --isa needs cuobjdump + nvdisasm (not in every CUDA install):
#   pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d .deps && \
#     (mkdir -p .deps/cuobjdump && cd .deps/cuobjdump && for w in ../nvidia_cuda_cuobjdump-*.whl \
#        ../nvidia_cuda_nvdisasm-*.whl; do unzip -q -o "$w"; done)       # -> .deps/cuobjdump/nvidia/cu13/bin
set -euo pipefail
ISA=0
if [ "${1:-}" = "--isa" ]; then ISA=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/build-cuda}"
NVCC="${NVCC:-nvcc}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
FORMATS="${FORMATS:-1 2 3}"

# shellcheck source=cutlass_headers.sh
source "$ROOT/csrc/cuda_kernels/cutlass_headers.sh"

mkdir -p "$OUT/obj"
[ -f "$OUT/.gitignore" ] || echo "*" > "$OUT/.gitignore"  # build output: never committed
GENCODE=-gencode=arch=compute_100a,code=sm_100a  # arch-specific: tcgen05 needs the "a" target
FLAGS=(-std=c++17 -O3 -DNDEBUG "$GENCODE" --expt-relaxed-constexpr -Xcompiler=-fPIC,-fvisibility=hidden
       -I"$ROOT/csrc/cuda_kernels" -isystem "$CUTLASS_DIR/include" -isystem "$CUTLASS_DIR/tools/util/include")
SRC="$ROOT/csrc/cuda_kernels/sm100_mx_gemm_blockscaled.cu"

start=$(date +%s)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT  # a failed TU stops the others
objs=()
running=0
for f in 0 $FORMATS; do  # 0: the dispatcher (no CUTLASS), n: one MX format's kernel
  o="$OUT/obj/sm100_mx_gemm_blockscaled_f$f.o"
  objs+=("$o")
  "$NVCC" "${FLAGS[@]}" -DMXPREC_SM100_MX_FORMAT="$f" -c "$SRC" -o "$o" &
  pids+=($!)
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); running=$((running - 1)); fi
done
for p in "${pids[@]}"; do wait "$p"; done
pids=()
trap - EXIT
"$NVCC" -shared "$GENCODE" "${objs[@]}" -o "$OUT/libmxprec_cuda_sm100.so"
echo "built $OUT/libmxprec_cuda_sm100.so in $(( $(date +%s) - start )) s"

if [ "$ISA" = 1 ]; then
  CUOBJDUMP_BIN="${CUOBJDUMP_BIN:-$ROOT/.deps/cuobjdump/nvidia/cu13/bin}"
  export PATH="$CUOBJDUMP_BIN:$PATH"  # cuobjdump calls nvdisasm through PATH
  mkdir -p "$OUT/isa"
  cuobjdump --dump-sass "$OUT/libmxprec_cuda_sm100.so" > "$OUT/isa/sm100_mx_gemm.sass"
  echo "SASS block-scaled tcgen05 MMAs (UTCQMMA: kind::mxf8f6f4; UTCOMMA: kind::mxf4):"
  grep -oE "UTC[A-Z]*MMA[.A-Z0-9]*" "$OUT/isa/sm100_mx_gemm.sass" | sort | uniq -c || true
  # code=sm_100a embeds no PTX; generate it separately (MXFP8 only by default; PTX_FORMATS to change).
  for f in ${PTX_FORMATS:-1}; do
    "$NVCC" -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_100a,code=compute_100a \
      -I"$ROOT/csrc/cuda_kernels" -isystem "$CUTLASS_DIR/include" -isystem "$CUTLASS_DIR/tools/util/include" \
      -DMXPREC_SM100_MX_FORMAT="$f" -ptx "$SRC" -o "$OUT/isa/sm100_mx_gemm_f$f.ptx"
    echo "PTX (format $f):"
    grep -oE "tcgen05\.mma[a-z0-9_:.]*" "$OUT/isa/sm100_mx_gemm_f$f.ptx" | sort | uniq -c || true
  done
fi
