// Per-element / per-group logic of the gfx950 FP32-scaled quantize kernels
// (gfx950_scaled_quantize.hip): tensor (current and delayed), row, tile 1x128 / 128x128 (plain or
// power-of-two FP32 scales) and NVFP4 (docs/numerics.md 1.-4., 6.). Plain C++17 / MXPREC_HD so the
// CPU unit test (tests/test_hip_host.py, csrc/hip_kernels/tests/hip_host_test.cc) runs exactly this
// code; every FP32 operation is formats.h's, in the order csrc/cpu_kernels/quantize_cpu.cc uses.
//
// FP32 semantics. The CPU lowering (the contract's oracle on CPU) runs under FTZ/DAZ on x86-64.
// The GPU keeps FP32 denormals and has its own NaN rules, so this header makes both explicit:
//   * DAZ/FTZ: inputs, amaxes and every division / multiplication result go through
//     flush_denormal, and an FP32 scale is never below 2**-126 (quantize_math.h's floored_scale);
//   * x86 SSE NaN results (div_f32 / mul_f32): a NaN operand propagates (quieted, the first one
//     wins), and an invalid operation (Inf/Inf, 0/0, 0*Inf) yields the x86 "default NaN"
//     0xFFC00000 (negative), whose sign reaches the element code (E4M3 0xFF, not 0x7F).
// With these, the device result equals the CPU lowering's bit for bit (host-tested against the
// numpy reference, which follows the same x86 rules and flushes as the contract does). Those functions
// (div_f32, mul_f32, amax_*, tensor_scale, group_scale, encode_scaled, nvfp4_tensor_scale,
// quantize_nvfp4_block_load) live in csrc/common/quantize_math.h,
// shared with the CUDA quantize kernels; this header keeps the gfx950 tile geometry.
#ifndef MXPREC_CSRC_HIP_KERNELS_SCALED_GROUP_H_
#define MXPREC_CSRC_HIP_KERNELS_SCALED_GROUP_H_

#include <cstdint>

#include "formats.h"
#include "quantize.h"
#include "quantize_math.h"  // the per-lane arithmetic (shared with the CUDA kernels)

namespace mxprec {
namespace hip {

// Tile geometry (axis 2: x viewed as (rows, L), rows = B * R, R % tr == 0, L % tc == 0): group g
// is tile (g / (L / tc), g % (L / tc)); its element j (0 <= j < tr * tc) is x's
// (row, col) = (gr * tr + j / tc, gc * tc + j % tc). Row scaling is the tile tr = 1, tc = L.
// Groups are numbered exactly like the contract's scale array (B, R / tr, L / tc).
MXPREC_HD inline int64_t tile_elem_offset(int64_t g, int64_t j, int64_t l, int64_t tr, int64_t tc) {
  const int64_t ncol = l / tc;
  const int64_t gr = g / ncol, gc = g % ncol;
  return (gr * tr + j / tc) * l + gc * tc + j % tc;
}

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_SCALED_GROUP_H_
