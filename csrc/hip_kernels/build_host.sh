#!/usr/bin/env bash
# Host + device build of libmxprec_hip.so (XLA FFI handlers MxprecScaledGemmHip / MxprecQuantizeHip
# for platform "ROCM" plus the gfx950 kernels embedded as an offload bundle). COMPILE-CHECKED ONLY:
# built here against Debian's ROCm 5.2 HIP headers, which cannot drive an MI355X, and never run
# (docs/backends/hip.md).
#
#   bash csrc/hip_kernels/build_host.sh [OUT_DIR]     # default OUT_DIR: <repo>/build-hip
#
# Needs: clang-22 / llvm-22 / lld-22 (`apt-get install -y clang-22 llvm-22 lld-22`), the HIP runtime
# headers and library (Debian bookworm: `apt-get install -y libamdhip64-dev`, ROCm 5.2: headers in
# /usr/include/hip, libamdhip64.so; or a ROCm install: HIP_INCLUDE=/opt/rocm/include
# HIP_LIB=/opt/rocm/lib), and JAX (the XLA FFI headers: jax.ffi.include_dir()).
# Variables: CLANG (clang-22), NM (llvm-nm-22), PYTHON (python3), OFFLOAD_ARCH (gfx950),
# HIP_INCLUDE / HIP_LIB (system paths), XLA_INCLUDE (from $PYTHON), EXTRA_FLAGS (e.g.
# -mcode-object-version=5 for ROCm < 6.3 runtimes; clang-22 emits code object v6 by default).
#
# Device code is linked without ROCm's device libraries (-nogpulib): the kernels only use amdgcn
# builtins; hip_ockl_shim.h (-DMXPREC_HIP_OCKL_SHIM) supplies __ockl_get_local_id /
# __ockl_get_group_id for ROCm 5.2's threadIdx / blockIdx. -D__AMDGCN_WAVEFRONT_SIZE=64: ROCm 5.2's
# headers read this macro, which clang-22 no longer predefines.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/build-hip}"
CLANG="${CLANG:-clang-22}"
NM="${NM:-llvm-nm-22}"
PYTHON="${PYTHON:-python3}"
ARCH="${OFFLOAD_ARCH:-gfx950}"
XLA_INCLUDE="${XLA_INCLUDE:-$("$PYTHON" -c 'import jax; print(jax.ffi.include_dir())')}"
HIP_INC_FLAGS=()
[ -n "${HIP_INCLUDE:-}" ] && HIP_INC_FLAGS=(-isystem "$HIP_INCLUDE")
HIP_LIB_FLAGS=()
[ -n "${HIP_LIB:-}" ] && HIP_LIB_FLAGS=(-L"$HIP_LIB" -Wl,-rpath,"$HIP_LIB")
mkdir -p "$OUT/host"
[ -f "$OUT/.gitignore" ] || echo "*" > "$OUT/.gitignore"  # build output: never committed
FLAGS=(-x hip --offload-arch="$ARCH" -nogpulib -D__AMDGCN_WAVEFRONT_SIZE=64 -DMXPREC_HIP_OCKL_SHIM
       "${HIP_INC_FLAGS[@]}" -include hip_ockl_shim.h -std=c++17 -O3 -fPIC -fvisibility=hidden
       -I"$ROOT/csrc/common" -I"$ROOT/csrc/hip_kernels" -isystem "$XLA_INCLUDE" ${EXTRA_FLAGS:-})
start=$(date +%s)
pids=()
# Kernel units: host + device (the host side registers the embedded gfx950 code object and defines
# the kernel handles the handlers launch).
for s in gfx950_mx_gemm gfx950_fp8_gemm gfx950_mx_quantize gfx950_scaled_quantize; do
  "$CLANG" "${FLAGS[@]}" -c "$ROOT/csrc/hip_kernels/$s.hip" -o "$OUT/host/$s.o" &
  pids+=($!)
done
# Handlers: host code only (no kernels are defined there).
"$CLANG" "${FLAGS[@]}" --cuda-host-only -Wall -c "$ROOT/csrc/hip_kernels/gfx950_handlers.hip" \
  -o "$OUT/host/gfx950_handlers.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
# Export only the handlers, the kernel handles and HIP's per-unit ids (not libstdc++ templates).
printf '{ global: Mxprec*; mxprec_gfx950_*; __hip_cuid_*; local: *; };\n' > "$OUT/host/exports.map"
"$CLANG" -shared -fPIC -Wl,--version-script="$OUT/host/exports.map" -o "$OUT/libmxprec_hip.so" "$OUT"/host/{gfx950_handlers,gfx950_mx_gemm,gfx950_fp8_gemm,gfx950_mx_quantize,gfx950_scaled_quantize}.o \
  "${HIP_LIB_FLAGS[@]}" -lamdhip64 -lstdc++ -Wl,--no-undefined
exported="$("$NM" -D --defined-only "$OUT/libmxprec_hip.so")"
for sym in MxprecScaledGemmHip MxprecQuantizeHip; do
  grep -qE " T $sym\$" <<<"$exported" || { echo "symbol $sym not exported by $OUT/libmxprec_hip.so" >&2; exit 1; }
done
echo "built $OUT/libmxprec_hip.so in $(( $(date +%s) - start )) s (compile-checked only: never run on an AMD GPU)"
