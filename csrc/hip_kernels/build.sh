#!/usr/bin/env bash
# Device-only build + ISA check of the gfx950 (MI355X) kernels with a stock clang; no ROCm needed.
#
#   bash csrc/hip_kernels/build.sh [OUT_DIR]        # default OUT_DIR: <repo>/build-hip
#
# Needs Debian's clang-22 / llvm-22 / lld-22 (`apt-get install -y clang-22 llvm-22 lld-22`);
# variables: CLANG (clang-22), OBJDUMP (llvm-objdump-22), OFFLOAD_ARCH (gfx950), EXTRA_FLAGS (e.g.
# -mcode-object-version=5 for ROCm < 6.3 runtimes; clang-22 emits code object v6 by default).
# Writes one code object (.co, an AMDGPU ELF loadable with hipModuleLoad) per translation unit
# and fails if a GEMM object lacks the scaled MFMA. No host code is built: see
# docs/backends/hip.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/build-hip}"
CLANG="${CLANG:-clang-22}"
OBJDUMP="${OBJDUMP:-llvm-objdump-22}"
ARCH="${OFFLOAD_ARCH:-gfx950}"
mkdir -p "$OUT"
[ -f "$OUT/.gitignore" ] || echo "*" > "$OUT/.gitignore"  # build output: never committed
FLAGS=(-x hip --offload-arch="$ARCH" --cuda-device-only --no-gpu-bundle-output -nogpulib -nogpuinc
       -include __clang_hip_runtime_wrapper.h -std=c++17 -O3
       -I"$ROOT/csrc/common" -I"$ROOT/csrc/hip_kernels" ${EXTRA_FLAGS:-})
SRCS=(gfx950_mx_gemm gfx950_fp8_gemm gfx950_mx_quantize gfx950_scaled_quantize)
start=$(date +%s)
pids=()
for s in "${SRCS[@]}"; do
  "$CLANG" "${FLAGS[@]}" -c "$ROOT/csrc/hip_kernels/$s.hip" -o "$OUT/$s.co" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for s in gfx950_mx_gemm gfx950_fp8_gemm; do
  n=$("$OBJDUMP" -d "$OUT/$s.co" | grep -cE 'v_mfma_scale_f32_(16x16x128|32x32x64)_f8f6f4' || true)
  [ "$n" -gt 0 ] || { echo "ISA check failed: no v_mfma_scale_f32_*_f8f6f4 in $OUT/$s.co" >&2; exit 1; }
  echo "$s.co: $n scaled-MFMA instructions"
done
echo "built ${SRCS[*]/%/.co} in $OUT in $(( $(date +%s) - start )) s"
