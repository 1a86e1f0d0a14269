// Per-element / per-group logic of the gfx950 FP32-scaled quantize kernels
// (gfx950_scaled_quantize.hip): tensor (current and delayed), row, tile 1x128 / 128x128 (plain or
// power-of-two FP32 scales) and NVFP4 (docs/numerics.md 1.-4., 6.). Plain C++17 / MXPREC_HD so the
// CPU unit test (tests/test_hip_host.py, csrc/hip_kernels/tests/hip_host_test.cc) runs exactly this
// code; every FP32 operation is formats.h's, in the order csrc/cpu_kernels/quantize_cpu.cc uses.
//
// FP32 semantics. The CPU lowering (the contract's oracle on CPU) runs under FTZ/DAZ on x86-64.
// The GPU keeps FP32 denormals and has its own NaN rules, so this header makes both explicit:
//   * DAZ/FTZ: inputs, amaxes and every division / multiplication result go through
//     flush_denormal (e.g. a tiny amax gives s = amax / 448 = +0 exactly as on the CPU);
//   * x86 SSE NaN results (div_f32 / mul_f32): a NaN operand propagates (quieted, the first one
//     wins), and an invalid operation (Inf/Inf, 0/0, 0*Inf) yields the x86 "default NaN"
//     0xFFC00000 (negative), whose sign reaches the element code (E4M3 0xFF, not 0x7F).
// With these, the device result equals the CPU lowering's bit for bit (host-tested against the
// numpy reference, which follows the same x86 rules; it does not flush, so tests avoid denormal
// inputs and intermediates).
#ifndef MXPREC_CSRC_HIP_KERNELS_SCALED_GROUP_H_
#define MXPREC_CSRC_HIP_KERNELS_SCALED_GROUP_H_

#include <cstdint>

#include "formats.h"
#include "quantize.h"

namespace mxprec {
namespace hip {

constexpr uint32_t kCanonicalNan = 0x7FC00000u;  // XLA / mxprec amax NaN
constexpr uint32_t kX86DefaultNan = 0xFFC00000u;  // x86 SSE result of an invalid operation

MXPREC_HD inline float quiet_nan(float a) { return bits_f32(f32_bits(a) | 0x00400000u); }

// a / b with x86-64 SSE + FTZ/DAZ semantics (operands are flushed by the callers' loads).
MXPREC_HD inline float div_f32(float a, float b) {
  if (is_nan(a)) return quiet_nan(a);
  if (is_nan(b)) return quiet_nan(b);
  const float q = a / b;
  return is_nan(q) ? bits_f32(kX86DefaultNan) : flush_denormal(q);
}
MXPREC_HD inline float mul_f32(float a, float b) {
  if (is_nan(a)) return quiet_nan(a);
  if (is_nan(b)) return quiet_nan(b);
  const float p = a * b;
  return is_nan(p) ? bits_f32(kX86DefaultNan) : flush_denormal(p);
}

// One element's contribution to an amax: |x| of the DAZ-flushed input.
MXPREC_HD inline float amax_elem(float x) { return abs_f32(flush_denormal(x)); }
MXPREC_HD inline float amax_combine(float acc, float x) { return xla_max(acc, amax_elem(x)); }
// A reduced amax as mxprec.quantize's _amax delivers it: canonical NaN, denormal -> +0. Its bits
// order (unsigned) like XLA's NaN-wins max of non-negative values: the kernels' atomic umax key.
MXPREC_HD inline float amax_finish(float a) { return is_nan(a) ? bits_f32(kCanonicalNan) : flush_denormal(a); }
MXPREC_HD inline uint32_t amax_key(float finished_amax) { return f32_bits(finished_amax); }

// 1. TensorScaling: s = amax / max_finite, 1 if amax == 0 (amax as read: flushed first, DAZ).
MXPREC_HD inline float tensor_scale(float amax, ElemFormat f) {
  amax = flush_denormal(amax);
  return amax == 0.0f ? 1.0f : div_f32(amax, format_info(f).max_finite);
}

// 3. / 4. Row and tile FP32 scale (quantize_cpu.cc per_group_fp32_scale); power_of_two: tile only.
MXPREC_HD inline float group_scale(float amax, ElemFormat f, bool power_of_two) {
  amax = flush_denormal(amax);
  float s;
  if (power_of_two) {
    const float safe = (is_finite(amax) && amax > 0.0f) ? amax : 1.0f;
    s = exp2i(mx_exponent(safe, f, ScaleRule::kRceil, -126, 127));
    s = is_finite(amax) ? s : amax;
  } else {
    s = div_f32(amax, format_info(f).max_finite);
  }
  return amax == 0.0f ? 1.0f : s;
}

// Element code of x under an FP32 scale s (tensor / delayed / row / tile): encode(clip(x / s)).
MXPREC_HD inline uint8_t encode_scaled(float x, float s, ElemFormat f) {
  return encode_grid(round_to_grid(div_f32(flush_denormal(x), flush_denormal(s)), f), f);
}

// Tile geometry (axis 2: x viewed as (rows, L), rows = B * R, R % tr == 0, L % tc == 0): group g
// is tile (g / (L / tc), g % (L / tc)); its element j (0 <= j < tr * tc) is x's
// (row, col) = (gr * tr + j / tc, gc * tc + j % tc). Row scaling is the tile tr = 1, tc = L.
// Groups are numbered exactly like the contract's scale array (B, R / tr, L / tc).
MXPREC_HD inline int64_t tile_elem_offset(int64_t g, int64_t j, int64_t l, int64_t tr, int64_t tc) {
  const int64_t ncol = l / tc;
  const int64_t gr = g / ncol, gc = g % ncol;
  return (gr * tr + j / tc) * l + gc * tc + j % tc;
}

// 6. NVFP4: tensor scale s_t = amax_t / 2688 (1 if amax_t == 0).
MXPREC_HD inline float nvfp4_tensor_scale(float amax_t) {
  amax_t = flush_denormal(amax_t);
  return amax_t == 0.0f ? 1.0f : div_f32(amax_t, kNvfp4TensorDivisor);
}

struct Nvfp4BlockResult {
  uint8_t scale_byte;  // E4M3 code of s_b
  float amax;          // block amax (amax_finish'ed)
};

// One NVFP4 block of 16 along the axis: load(0..15) (FP32), tensor scale ts -> 8 packed E2M1
// bytes (element 2i low nibble) and the E4M3 block scale code.
template <class Load>
MXPREC_HD inline Nvfp4BlockResult quantize_nvfp4_block_load(Load load, float ts, uint8_t* out) {
  float amax = 0.0f;
  for (int32_t i = 0; i < kNvfp4Block; ++i) amax = amax_combine(amax, load(i));
  amax = amax_finish(amax);
  const float sb = round_to_grid(xla_min(div_f32(div_f32(amax, 6.0f), ts), 448.0f), ElemFormat::kE4M3);
  const float eff = mul_f32(sb, ts);
  const bool zero = eff == 0.0f;
  for (int32_t i = 0; i < kNvfp4Block / 2; ++i) {
    uint8_t c[2];
    for (int32_t j = 0; j < 2; ++j) {
      const float x = flush_denormal(load(2 * i + j));
      c[j] = encode_grid(zero ? 0.0f : round_to_grid(div_f32(x, eff), ElemFormat::kE2M1), ElemFormat::kE2M1);
    }
    out[i] = pack_fp4(c[0], c[1]);
  }
  return Nvfp4BlockResult{encode_grid(sb, ElemFormat::kE4M3), amax};
}

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_SCALED_GROUP_H_
