// gfx950 (MI355X) scaled GEMM kernels for mxprec_scaled_gemm (contract: csrc/common/scaled_gemm.h,
// K-major operands: lhs_contract = 2, rhs_contract = 2).
//
//   out[b, m, n] = sum_k A[b, m, k] * B[b, n, k] (+ bias[n]),   FP32 accumulation, f32/bf16/f16 out
//
// One wave (64 lanes) per 16x16 (v_mfma_scale_f32_16x16x128_f8f6f4) or 32x32
// (v_mfma_scale_f32_32x32x64_f8f6f4) output tile; 4 waves per workgroup; K loop in steps of the
// instruction's K. Every lane loads its 32-element fragment straight from the K-major packed row
// (the packed bytes are already in the MFMA register order: mfma_layout.h) and its E8M0 scale
// byte, so MX scales are applied inside the MFMA. A correctness-first kernel: no LDS staging, no
// software pipelining, no multi-tile register blocking. Compiled and ISA-checked only (no AMD
// GPU available): docs/backends/hip.md.
//
// Device-only build (no ROCm): csrc/hip_kernels/build.sh, or
//   clang-22 -x hip --offload-arch=gfx950 --cuda-device-only --no-gpu-bundle-output -nogpulib \
//     -nogpuinc -include __clang_hip_runtime_wrapper.h -std=c++17 -O3 -Icsrc/common \
//     -Icsrc/hip_kernels -c csrc/hip_kernels/gfx950_mx_gemm.hip -o gfx950_mx_gemm.co
#include "gfx950_gemm_impl.h"

// MXFP8 (E4M3 / E5M2, including the HYBRID mixed pairs), MXFP6 (E2M3 / E3M2), MXFP4 (E2M1).
MXPREC_MX_PAIR(e4m3, e4m3)
MXPREC_MX_PAIR(e4m3, e5m2)
MXPREC_MX_PAIR(e5m2, e4m3)
MXPREC_MX_PAIR(e5m2, e5m2)
MXPREC_MX_PAIR(e2m3, e2m3)
MXPREC_MX_PAIR(e2m3, e3m2)
MXPREC_MX_PAIR(e3m2, e2m3)
MXPREC_MX_PAIR(e3m2, e3m2)
MXPREC_MX_PAIR(e2m1, e2m1)
