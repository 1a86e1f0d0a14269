// Per-lane arithmetic of the GPU quantize kernels (contract: quantize.h), shared by the CUDA kernels
// (csrc/cuda_kernels/cuda_quantize.cu), the gfx950 HIP kernels (csrc/hip_kernels/scaled_group.h,
// mx_block.h) and their CPU unit tests. Plain C++17, every function MXPREC_HD.
//
// FP32 semantics. The contract's oracle on CPU (XLA's CPU runtime, and csrc/cpu_kernels) runs with
// FTZ/DAZ on x86-64. GPUs keep FP32 denormals and have their own NaN rules, so the exact functions
// here make both explicit:
//   * DAZ/FTZ: inputs, amaxes and every division / multiplication result go through
//     flush_denormal (e.g. a tiny block amax / 6 in NVFP4's block scale is +0 exactly as on the CPU), and an
//     FP32 scale is never below 2**-126 (floored_scale);
//   * x86 SSE NaN results (div_f32 / mul_f32): a NaN operand propagates (quieted, the first one
//     wins), and an invalid operation (Inf/Inf, 0/0, 0*Inf) yields the x86 "default NaN"
//     0xFFC00000 (negative), whose sign reaches the element code (E4M3 0xFF, not 0x7F).
// With these, a device result equals the CPU lowering's bit for bit.
//
// Fast element path (ElemScale, encode_elem). A group's scale is turned once into an ElemScale:
// a multiplier or divisor p and a mode. When p is a normal FP32 number >= 2**-108 in magnitude, the
// exact per-element sequence encode(round_to_grid(div_f32(flush(x), s))) equals
// encode_rne(x op p) (one IEEE multiply or division, no flush, no NaN bookkeeping) except when x is
// NaN (then the code is sign(x) | nan_code): a denormal x gives |x op p| < 2**-18, which rounds to
// a signed zero in every element format exactly like the flushed +-0; a denormal quotient rounds to
// the same signed zero as its flushed value. Anything else takes the exact path (kExactDiv /
// kExactMx). MX blocks divide by 2**e: one multiply by 2**-e is exact (or underflows to a value
// that rounds to zero), so kMul replaces mx_divide's two halves except for e = 127 (2**-127 is not
// normal) and e < -109 (flush x first: kMulDaz). tests/test_cuda_quantize.py checks encode_elem
// against the exact functions on the CPU (csrc/cuda_kernels/tests/cuda_quantize_host_test.cc).
#ifndef MXPREC_CSRC_COMMON_QUANTIZE_MATH_H_
#define MXPREC_CSRC_COMMON_QUANTIZE_MATH_H_

#include <cstdint>

#include "formats.h"
#include "quantize.h"
#include "scaled_gemm.h"

namespace mxprec {

constexpr uint32_t kCanonicalNan = 0x7FC00000u;   // XLA / mxprec amax NaN
constexpr uint32_t kX86DefaultNan = 0xFFC00000u;  // x86 SSE result of an invalid operation

// ------------------------------------------------------------------------------------ inputs

// Input element types of the quantize kernels.
enum class InType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

template <InType I>
MXPREC_HD inline float load_in(const void* base, int64_t i) {
  if constexpr (I == InType::kF32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (I == InType::kBF16) {
    return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  } else {
    return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
  }
}

// ------------------------------------------------------------------------------------ x86 FP32

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

// ------------------------------------------------------------------------------------ amax

// One element's contribution to an amax: |x| of the DAZ-flushed input.
MXPREC_HD inline float amax_elem(float x) { return abs_f32(flush_denormal(x)); }
MXPREC_HD inline float amax_combine(float acc, float x) { return xla_max(acc, amax_elem(x)); }
// A reduced amax as mxprec.quantize's _amax delivers it: canonical NaN, denormal -> +0. Its bits
// order (unsigned) like XLA's NaN-wins max of non-negative values: the kernels' atomic umax key.
MXPREC_HD inline float amax_finish(float a) { return is_nan(a) ? bits_f32(kCanonicalNan) : flush_denormal(a); }
MXPREC_HD inline uint32_t amax_key(float finished_amax) { return f32_bits(finished_amax); }

// The same on raw keys: the unsigned max of the bits of |x| (sign cleared, no flush) over a group,
// finished afterwards (finishing is monotone, so max-then-finish == finish-then-max).
MXPREC_HD inline uint32_t abs_key(float x) { return f32_bits(x) & 0x7FFFFFFFu; }
MXPREC_HD inline uint32_t finish_key(uint32_t k) {
  return k > 0x7F800000u ? kCanonicalNan : (k < 0x00800000u ? 0u : k);
}

// ------------------------------------------------------------------------------------ scales

// FP32 scales are normal: amax / divisor, or 2**-126 where the quotient is below it (div_f32 has flushed a
// subnormal one to +0, which would make every code NaN or saturated). The same as testing amax < divisor * 2**-126,
// as mxprec.scaling.floored_scale does: a quotient that rounds up to 2**-126 is 2**-126 either way. NaN / Inf
// propagate.
constexpr float kMinScale = 0x1p-126f;
MXPREC_HD inline float floored_scale(float amax, float divisor) {
  const float q = div_f32(amax, divisor);
  return q < kMinScale ? kMinScale : q;
}

// 1. TensorScaling: s = amax / max_finite (floored_scale), 1 if amax == 0 (amax as read: flushed first, DAZ).
MXPREC_HD inline float tensor_scale(float amax, ElemFormat f) {
  amax = flush_denormal(amax);
  return amax == 0.0f ? 1.0f : floored_scale(amax, format_info(f).max_finite);
}

// 3. / 4. Row and tile FP32 scale (quantize._per_group_fp32_scale); power_of_two: tile only.
MXPREC_HD inline float group_scale(float amax, ElemFormat f, bool power_of_two) {
  amax = flush_denormal(amax);
  float s;
  if (power_of_two) {
    const float safe = (is_finite(amax) && amax > 0.0f) ? amax : 1.0f;
    s = exp2i(mx_exponent(safe, f, ScaleRule::kRceil, -126, 127));
    s = is_finite(amax) ? s : amax;
  } else {
    s = floored_scale(amax, format_info(f).max_finite);
  }
  return amax == 0.0f ? 1.0f : s;
}

// Element code of x under an FP32 scale s (tensor / delayed / row / tile): encode(clip(x / s)).
MXPREC_HD inline uint8_t encode_scaled(float x, float s, ElemFormat f) {
  return encode_grid(round_to_grid(div_f32(flush_denormal(x), flush_denormal(s)), f), f);
}

// 5. MX block scale from the (finished) block amax: E8M0 byte 0xFF for a NaN/Inf block, 0x00 for
// an all-zero block (both: every element code 0), else e + 127.
struct MxScale {
  int32_t e;
  uint8_t byte;
  bool zero;  // bad or all-zero block
};
MXPREC_HD inline MxScale mx_block_scale(float amax, ElemFormat f, ScaleRule rule) {
  const bool bad = !is_finite(amax);
  const bool zero = amax == 0.0f;
  const float safe = (bad || zero) ? 1.0f : amax;
  const int32_t e = mx_exponent(safe, f, rule);
  const uint8_t byte = bad ? kE8M0Nan : (zero ? uint8_t{0} : static_cast<uint8_t>(e + 127));
  return MxScale{e, byte, bad || zero};
}
// Element code of x in a block with scale m (exact reference sequence).
MXPREC_HD inline uint8_t encode_mx(float x, const MxScale& m, ElemFormat f) {
  return encode_grid(m.zero ? 0.0f : round_to_grid(mx_divide(flush_denormal(x), m.e), f), f);
}

// 6. NVFP4: tensor scale s_t = amax_t / 2688 (floored_scale; 1 if amax_t == 0).
MXPREC_HD inline float nvfp4_tensor_scale(float amax_t) {
  amax_t = flush_denormal(amax_t);
  return amax_t == 0.0f ? 1.0f : floored_scale(amax_t, kNvfp4TensorDivisor);
}

// NVFP4 block scale from the (finished) block amax and s_t: s_b (E4M3 grid value), its code and
// eff = s_b * s_t (element code 0 where eff == 0).
struct Nvfp4Scale {
  float sb;
  float eff;
  uint8_t byte;
};
MXPREC_HD inline Nvfp4Scale nvfp4_block_scale(float amax, float ts) {
  const float sb = round_to_grid(xla_min(div_f32(div_f32(amax, 6.0f), ts), 448.0f), ElemFormat::kE4M3);
  return Nvfp4Scale{sb, mul_f32(sb, ts), encode_grid(sb, ElemFormat::kE4M3)};
}
// The bits of |v| clamped to [lo, hi]: what the boundary certificates below (e4m3_boundary_key, e2m1_boundary_key)
// measure distances on.
MXPREC_HD inline uint32_t clamped_abs_bits(float v, uint32_t lo, uint32_t hi) {
  const uint32_t a = abs_key(v);
  return a < lo ? lo : (a > hi ? hi : a);
}

// NVFP4's block scale input t = RN(RN(amax / 6) / ts) without the two divisions (the CUDA kernels'
// nvfp4_block_scale_cvt): t1 = RN(amax * c) with c = nvfp4_block_multiplier(ts) = RN(1 / RN(6 ts)), once per tensor.
// Lemma: for ts in [2**-100, 2**100] and amax >= 2**-120 (every quotient normal), t1 / t lies within (1 +- 2**-24)**5,
// at most 6 bit steps from t (5 within a binade). What decides the E4M3 code are the rounding boundaries, the
// midpoints of the grid: 1.xxx1b * 2**e for the normal values (t >= 2**-6: bits = 2**19 mod 2**20), (2j + 1) * 2**-10
// below (at most 4 significant bits: low 19 significand bits zero). e4m3_boundary_key clamps t1's bits to
// [2**-12 * (1 + 2**-5), 440] (below, t1 and t are under 2**-11: code 0; above, both round or saturate to 448) and
// gives the clamped bits' distance + 8 to the nearest such pattern, mod 2**20 (normal) / 2**19 (below 2**-6; this
// also refuses the subnormal grid points, harmlessly). Where it is > 16, t1 lies more than 8 bit steps from every
// boundary, so t1 and t round onto the E4M3 grid (after the clamp at 448) alike and nvfp4_block_certified lets t1
// stand in for t; elsewhere the kernels divide. The grid points themselves (t = 448 * 2**-k: a group whose amax is the
// tensor amax times a power of two) are not refused. c is NaN outside the ts range: then every group divides.
MXPREC_HD inline float nvfp4_block_multiplier(float ts) {
  return (ts >= 0x1p-100f && ts <= 0x1p100f) ? 1.0f / (6.0f * ts) : bits_f32(kCanonicalNan);
}
MXPREC_HD inline uint32_t e4m3_boundary_key(float t1) {
  const uint32_t c = clamped_abs_bits(t1, 0x39840000u, 0x43DC0000u);
  return c >= 0x3C800000u ? (c + 8u + 0x80000u) & 0xFFFFFu : (c + 8u) & 0x7FFFFu;
}
MXPREC_HD inline bool nvfp4_block_certified(float amax, float t1) {
  return amax >= 0x1p-120f && is_finite(t1) && e4m3_boundary_key(t1) > 16u;
}

MXPREC_HD inline uint8_t encode_nvfp4(float x, const Nvfp4Scale& b) {
  return encode_grid(b.eff == 0.0f ? 0.0f : round_to_grid(div_f32(flush_denormal(x), b.eff), ElemFormat::kE2M1),
                     ElemFormat::kE2M1);
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
  const Nvfp4Scale b = nvfp4_block_scale(amax, ts);
  for (int32_t i = 0; i < kNvfp4Block / 2; ++i) out[i] = pack_fp4(encode_nvfp4(load(2 * i), b), encode_nvfp4(load(2 * i + 1), b));
  return Nvfp4BlockResult{b.byte, amax};
}

// ------------------------------------------------------------------------------------ fast path

// encode_grid(round_to_grid(v, f), f) for a non-NaN v (finite or +-Inf), from the bits: saturate to
// max_finite, then round half to even onto the grid (subnormal codes by an exact power-of-two
// scaling and rint, normal codes by the integer rounding of the FP32 bits).
MXPREC_HD inline uint8_t encode_rne(float v, ElemFormat f) {
  const FormatInfo fi = format_info(f);
  const uint32_t u = f32_bits(v);
  const uint32_t sign = (u >> 31) << (fi.bits - 1);
  const uint32_t maxb = f32_bits(fi.max_finite);
  uint32_t a = u & 0x7FFFFFFFu;
  a = a < maxb ? a : maxb;
  // Both candidates, then a select (no divergent branch on the device). Subnormal codes: a /
  // min_subnormal = a * 2**(mbits - emin) (exact), rounded half to even by one FMA with 2**23: below
  // 2**22 the sum's ulp is 1, so its bits above 2**23's are that integer (no round / convert
  // instructions, which run at a quarter of the FMA rate on the GPU; a >= min_normal makes a value
  // the select below drops).
  const uint32_t sub = f32_bits(fmaf(bits_f32(a), exp2i(fi.mbits - fi.emin), 8388608.0f)) - 0x4B000000u;
  const int32_t sh = 23 - fi.mbits;
  const uint32_t r = a + ((1u << (sh - 1)) - 1u) + ((a >> sh) & 1u);
  const uint32_t normal = (r >> sh) - (static_cast<uint32_t>(127 - fi.bias) << fi.mbits);
  const uint32_t code = a < f32_bits(fi.min_normal) ? sub : normal;
  return static_cast<uint8_t>(sign | code);
}

// ------------------------------------------------------------------------------------ bf16 pairs
#if !defined(__HIPCC__)  // the CUDA kernels and the host test use these; the HIP kernels do not

// Two 16-bit lanes per 32-bit word (lane 0 in bits 0..15). On sm_90 one instruction each; elsewhere
// lane by lane through lanes16 (the host test runs these forms).
template <class Op>
MXPREC_HD inline uint32_t lanes16(uint32_t a, uint32_t b, Op op) {
  return (op(a & 0xFFFFu, b & 0xFFFFu) & 0xFFFFu) | (op(a >> 16, b >> 16) << 16);
}

MXPREC_HD inline uint32_t min_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("min.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return lanes16(a, b, [](uint32_t x, uint32_t y) { return x < y ? x : y; });
#endif
}

MXPREC_HD inline uint32_t max_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return lanes16(a, b, [](uint32_t x, uint32_t y) { return x > y ? x : y; });
#endif
}

// fma.rn.bf16x2: lane i = RN_bf16(a_i * b_i + c_i), one rounding. The host form is exact for the
// operands used below (b a power of two, c = +-0 or 128; a sum the double cannot hold is not near a
// bf16 tie).
MXPREC_HD inline uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  uint32_t d = 0;
  for (int lane = 0; lane < 2; ++lane) {
    const int sh = 16 * lane;
    const double r = static_cast<double>(bf16_to_f32(static_cast<uint16_t>(a >> sh))) *
                         static_cast<double>(bf16_to_f32(static_cast<uint16_t>(b >> sh))) +
                     static_cast<double>(bf16_to_f32(static_cast<uint16_t>(c >> sh)));
    float v;
    if (r == 0.0) {  // an exact zero sum: -0 only for (-0 product) + (-0), under RN
      const bool product_neg = (((a ^ b) >> sh) & 0x8000u) != 0;
      v = (product_neg && ((c >> sh) & 0x8000u) != 0) ? -0.0f : 0.0f;
    } else {
      int ex = 0;
      const double m = std::frexp(r, &ex);  // r = m * 2**ex, 0.5 <= |m| < 1: 8 significant bits
      int keep = 8;
      if (ex - 1 < -126) keep -= -126 - (ex - 1);  // bf16 subnormal: fewer bits
      v = static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, keep)), ex - keep));
    }
    d |= (f32_bits(v) >> 16) << sh;
  }
  return d;
#endif
}

// Lane mask of a >= b for non-negative finite bf16 lanes: 0xFFFF where true (one HSET2 on sm_90; for
// such lanes the same as an unsigned compare of the 16-bit patterns, the host form).
MXPREC_HD inline uint32_t ge_mask_bf16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("set.ge.u32.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return lanes16(a, b, [](uint32_t x, uint32_t y) { return x >= y ? 0xFFFFu : 0u; });
#endif
}

// Magnitude-and-sign codes of F (FP6 / FP4) for two bf16 values x (one per lane of w) divided by the
// MX block scale 2**e, given as p2 = 2**-e in both lanes (a normal bf16): lane i = encode_rne(x_i * 2**-e,
// F), the code in the lane's low bits. For finite x (an MX block in kMul mode). x * 2**-e is exact in
// bf16 (or below bf16's normal range, where every code is a signed zero), so encode_rne's steps run on
// the 16-bit patterns, two lanes per 32-bit instruction: saturate; subnormal candidate by one FMA with
// 128 (ulp 1 in [128, 256): the code is the sum's low bits); normal candidate by integer rounding of the
// 7-bit mantissa, the exponent rebias folded into the rounding add (the code is the low bits of the
// shifted sum); select by lane mask. No lane borrows from or carries into the other: every per-lane sum
// stays in [0, 2**16), and what a shift moves across the lane boundary is masked off.
// kScale false: w holds the values to encode (no multiply by p2; NVFP4's ro_bf16x2 quotients).
template <ElemFormat F, bool kScale = true>
MXPREC_HD inline uint32_t narrow2_bf16(uint32_t w, uint32_t p2) {
  constexpr FormatInfo fi = format_info(F);
  static_assert(fi.bits < 8, "FP6 / FP4 only");
  constexpr uint32_t kLanes = 0x00010001u;
  constexpr int kSh = 7 - fi.mbits;                  // bf16 mantissa bits below the format's
  constexpr int kMagBits = fi.bits - 1;
  constexpr uint32_t kMag = (1u << kMagBits) - 1u;
  constexpr uint32_t kMaxBits = (static_cast<uint32_t>(fi.emax + 127) << 7) | (((1u << fi.mbits) - 1u) << kSh);
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(fi.emin + 127) << 7;
  constexpr uint32_t kSubScaleBits = static_cast<uint32_t>(fi.mbits - fi.emin + 127) << 7;  // 2**(mbits - emin)
  constexpr uint32_t kMagic = 0x4300u;  // 128.0: its low byte is 0, so 128 + k has k in the low bits
  // normal code = (rounded >> kSh) - ((127 - bias) << mbits), taken mod 2**kMagBits: add its negation there
  constexpr uint32_t kRebias = (0u - (static_cast<uint32_t>(127 - fi.bias) << fi.mbits)) & kMag;
  constexpr uint32_t kRoundAdd = ((1u << (kSh - 1)) - 1u) + (kRebias << kSh);
  const uint32_t q = kScale ? fma_bf16x2(w, p2, 0x80008000u) : w;  // x * 2**-e (+ -0: keeps the product's zero sign)
  const uint32_t a = min_u16x2(q & 0x7FFF7FFFu, kMaxBits * kLanes);
  const uint32_t sub = fma_bf16x2(a, kSubScaleBits * kLanes, kMagic * kLanes);
  const uint32_t normal = (a + kRoundAdd * kLanes + ((a >> kSh) & kLanes)) >> kSh;
  const uint32_t is_normal = ge_mask_bf16x2(a, kMinNormalBits * kLanes);
  const uint32_t sign = (w >> (15 - kMagBits)) & ((1u << kMagBits) * kLanes);
  return (((normal & is_normal) | (sub & ~is_normal)) & (kMag * kLanes)) | sign;
}

// Two FP32 values (lane 0: a) as bf16 patterns rounded to odd: truncated, the last bit set where a dropped bit is.
// Rounding to odd at bf16's 8 significand bits and then to nearest even at 5 or fewer is the direct rounding to
// nearest even (Boldo and Melquiond, 2008), so narrow2_bf16<F, false> of the pair gives encode_rne(a, F) and
// encode_rne(b, F) for FP6 / FP4 F and non-NaN a, b (the host test checks a sweep of the FP32 patterns).
MXPREC_HD inline uint32_t ro_bf16x2(float a, float b) {
  const uint32_t ua = f32_bits(a), ub = f32_bits(b);
  const uint32_t hi = (ua >> 16) | (ub & 0xFFFF0000u), lo = (ua & 0xFFFFu) | (ub << 16);
  return hi | min_u16x2(lo, 0x00010001u);
}

// ------------------------------------------------------------------------------------ NVFP4 codes by limits
// NVFP4's E2M1 code of x under a block scale eff is encode_rne(clip(RN(x / eff), 6)): its magnitude counts the 7
// midpoints 0.25, 0.75, ..., 5 of the E2M1 grid that RN(x / eff) passes, a tie passing where the even neighbour is the
// upper one (0.75, 1.75, 3.5). RN(y) passes such a midpoint m where y >= m - u / 2 (u the FP32 step below m: the
// tie rounds to m, whose last bit is 0), any other one where y > m + u / 2 (u the step above m: RN(y) >= m + u).
// With y = |x| / eff that is |x| >= M_k eff or |x| > M_k eff, M_k = nvfp4_mid(k). Each has a 25-bit odd
// significand, so the exact product M_k eff (a double holds its 49 bits) is never an FP32 value and both tests are
// |x| >= L_k, L_k = nvfp4_limit(eff, k) = M_k eff rounded up to FP32. Magnitude = #{k : |x| >= L_k}. For eff in
// [2**-124, 2**120] (nvfp4_limits_apply) every L_k is normal and finite: a denormal x (code 0 after DAZ) lies below
// L_0, an Inf x (clipped to 6) above L_6. A 16-bit input compares with L_k rounded up onto its own grid
// (nvfp4_limit16). The code's sign bit is x's (-0, DAZ-flushed and underflowing negatives give the -0 code). The CUDA
// kernels take this path for bf16 / f16 groups, two elements per instruction; the host test checks it against
// encode_nvfp4 on every bf16 and f16 pattern and on FP32 values beside every limit.
MXPREC_HD constexpr double nvfp4_mid(int k) {  // M_k, k in 0..6
  return k == 0 ? 0x1p-2 + 0x1p-26 : k == 1 ? 0.75 - 0x1p-25 : k == 2 ? 1.25 + 0x1p-24 : k == 3 ? 1.75 - 0x1p-24
       : k == 4 ? 2.5 + 0x1p-23 : k == 5 ? 3.5 - 0x1p-23 : 5.0 + 0x1p-22;
}
MXPREC_HD inline bool nvfp4_limits_apply(float eff) { return eff >= 0x1p-124f && eff <= 0x1p120f; }

// L_k, k in 0..6, for nvfp4_limits_apply(eff): the product rounded up to FP32 (cvt.rp.f32.f64 on the device).
MXPREC_HD inline float nvfp4_limit(float eff, int k) {
  const double p = nvfp4_mid(k) * static_cast<double>(eff);  // exact
#if defined(__CUDA_ARCH__)
  return __double2float_ru(p);
#else
  const float f = static_cast<float>(p);
  return static_cast<double>(f) < p ? bits_f32(f32_bits(f) + 1u) : f;
#endif
}

// The smallest 16-bit value (bf16 / f16 pattern) >= limit > 0, so that x >= it exactly where x >= limit.
template <InType I>
MXPREC_HD inline uint32_t nvfp4_limit16(float limit) {
  static_assert(I != InType::kF32, "16-bit inputs");
  if constexpr (I == InType::kBF16) {
    return (f32_bits(limit) + 0xFFFFu) >> 16;
  } else {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_ru(limit));
#else
    const uint16_t h = f32_to_f16(limit);
    return f16_to_f32(h) < limit ? h + 1u : h;
#endif
  }
}

// Lane mask of a >= b for non-negative, non-NaN 16-bit lanes of input type I (one HSET2 on sm_90; for such lanes the
// same as an unsigned compare of the patterns, the host form). f16 compares keep subnormals (no .ftz).
template <InType I>
MXPREC_HD inline uint32_t ge_mask16x2(uint32_t a, uint32_t b) {
  static_assert(I != InType::kF32, "16-bit inputs");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (I == InType::kF16) {
    uint32_t d;
    asm("set.ge.u32.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
#endif
  if constexpr (I == InType::kBF16) return ge_mask_bf16x2(a, b);
  return lanes16(a, b, [](uint32_t x, uint32_t y) { return x >= y ? 0xFFFFu : 0u; });
}

// Codes of two 16-bit values (lane i of w) against per-lane limits lim[k] (nvfp4_limit16 of each lane's group, in that
// lane; non-decreasing in k): lane i's low nibble is sign << 3 | #{k : |x_i| >= lim_k}, the other bits 0. The count by
// a binary search over the sorted limits, two lanes per instruction: |x| >= lim_3 gives its bit 4, then lim_5 or lim_1
// (chosen per lane by that mask) bit 2, then lim_6, lim_4, lim_2 or lim_0 bit 1: three compares and four selects.
// Callers keep NaN out (a group holding one takes another path).
// On sm_90 (MXPREC_NVFP4_COUNT, default 1) the device counts instead: `set` gives 1.0 in each lane where |x| >= lim_k,
// and an FMA adds it times the smallest subnormal of the lane type (2**-133 for bf16, 2**-24 for f16, bit pattern 1;
// exact, and bf16x2 / f16x2 FMAs keep subnormals) to an accumulator that starts at the sign's bit 3, so the lane's
// bits end as the code: seven compares and seven FMAs on the FMA pipe. The search's selects are logic operations,
// which issue at half the rate on the ALU pipe that the kernels' other integer work fills (nvfp4_row_kernel: the ALU
// pipe 76 % busy under Nsight Compute, H100).
#ifndef MXPREC_NVFP4_COUNT
#define MXPREC_NVFP4_COUNT 1
#endif
template <InType I>
MXPREC_HD inline uint32_t nvfp4_codes_by_limits(uint32_t w, const uint32_t (&lim)[7]) {
  const uint32_t a = w & 0x7FFF7FFFu;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && MXPREC_NVFP4_COUNT
  uint32_t acc = (w >> 12) & 0x00080008u;
#pragma unroll
  for (int k = 0; k < 7; ++k) {
    uint32_t one;
    if constexpr (I == InType::kBF16) {
      asm("set.ge.bf16x2.bf16x2 %0, %1, %2;" : "=r"(one) : "r"(a), "r"(lim[k]));
      asm("fma.rn.bf16x2 %0, %1, %2, %0;" : "+r"(acc) : "r"(one), "r"(0x00010001u));
    } else {
      asm("set.ge.f16x2.f16x2 %0, %1, %2;" : "=r"(one) : "r"(a), "r"(lim[k]));
      asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(acc) : "r"(one), "r"(0x00010001u));
    }
  }
  return acc;
#else
  const uint32_t m4 = ge_mask16x2<I>(a, lim[3]);
  const uint32_t m2 = ge_mask16x2<I>(a, (lim[5] & m4) | (lim[1] & ~m4));
  const uint32_t hi = (lim[6] & m2) | (lim[4] & ~m2), lo = (lim[2] & m2) | (lim[0] & ~m2);
  const uint32_t m1 = ge_mask16x2<I>(a, (hi & m4) | (lo & ~m4));
  return (m4 & 0x00040004u) | (m2 & 0x00020002u) | (m1 & 0x00010001u) | ((w >> 12) & 0x00080008u);
#endif
}

// Eight codes packed along a 32-bit word, element i in nibble i, from nvfp4_codes_by_limits of the element pairs
// (c[j] holds elements 2 j, 2 j + 1).
MXPREC_HD inline uint32_t nvfp4_pack_pairs(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  uint32_t u = c0 | (c1 << 8), v = c2 | (c3 << 8);  // elements 0, 2, 1, 3 in bytes 0..3
  u |= u >> 12;                                     // low half: elements 0, 1, 2, 3
  v |= v >> 12;
  return (u & 0xFFFFu) | (v << 16);
}
#endif  // !__HIPCC__

// How a group quantizes its elements (see the header comment).
enum class ElemMode : uint32_t {
  kZero = 0,      // every code 0 (MX bad / zero block, NVFP4 eff == 0)
  kMul = 1,       // q = x * p
  kMulDaz = 2,    // q = flush(x) * p
  kDiv = 3,       // q = x / p (IEEE)
  kExactDiv = 4,  // encode_scaled(x, p)
  kExactMx = 5,   // MX with e = 127 (p = 127): encode_mx
};
struct ElemScale {
  ElemMode mode;
  float p;
};

// |s| normal and >= 2**-108: the fast path is exact (biased exponent >= 19, not Inf/NaN).
MXPREC_HD inline bool fast_divisor(float s) {
  const uint32_t e = f32_bits(s) & 0x7F800000u;
  return e >= (19u << 23) && e != 0x7F800000u;
}

// FP32 scale s (tensor / row / tile, NVFP4 eff) -> ElemScale. A power of two with a normal
// reciprocal becomes a multiply (x / 2**k == x * 2**-k, both exact / one rounding of the same value).
MXPREC_HD inline ElemScale scaled_elem_scale(float s) {
  if (!fast_divisor(s)) return ElemScale{ElemMode::kExactDiv, s};
  const uint32_t u = f32_bits(s);
  const uint32_t e = u & 0x7F800000u;
  if ((u & 0x7FFFFFu) == 0 && e <= (253u << 23))
    return ElemScale{ElemMode::kMul, bits_f32((u & 0x80000000u) | ((254u << 23) - e))};
  return ElemScale{ElemMode::kDiv, s};
}

MXPREC_HD inline ElemScale mx_elem_scale(const MxScale& m) {
  if (m.zero) return ElemScale{ElemMode::kZero, 0.0f};
  if (m.e > 126) return ElemScale{ElemMode::kExactMx, static_cast<float>(m.e)};
  return ElemScale{m.e < -109 ? ElemMode::kMulDaz : ElemMode::kMul, exp2i(-m.e)};
}

MXPREC_HD inline ElemScale nvfp4_elem_scale(const Nvfp4Scale& b) {
  if (b.eff == 0.0f) return ElemScale{ElemMode::kZero, 0.0f};
  return scaled_elem_scale(b.eff);
}

// NVFP4's E2M1 codes through the reciprocal, without the division (the CUDA kernels' nvfp4_codes8): for a kDiv
// scale s in [2**-80, 2**102) with r = RN(1 / s) and x finite, q0 = RN(x * r) = (x / s)(1 + d), |d| < 2**-23, lies
// less than 2 ulps from x / s, and RN(x / s) half an ulp from that: at most 2 bit steps from q0 within a binade, 5
// across a power of two. The E2M1 rounding boundaries, the midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5 and 5, all have
// their low 21 significand bits zero. e2m1_boundary_key clamps |q0|'s bits to [0x3E100000, 0x40B00000] (2**-3 * 1.125
// and 5.5: below, q0 and RN(x / s) both lie under 0.25, code 0; above, both over 5, code 7, saturated) and gives the
// clamped bits + 8 mod 2**21, which is <= 16 exactly where they lie within 8 bit steps of a value with those bits zero.
// Where it is > 16, q0 and RN(x / s) lie strictly between the same two boundaries and encode_rne gives them the same
// code; elsewhere (e2m1_near_boundary) the kernels divide. A key per element and one test of their minimum per chunk.
// (Inf: clamped, and both saturate; q0 is not NaN, since a group holding a NaN has a NaN amax and an exact mode.)
MXPREC_HD inline uint32_t e2m1_boundary_key(float q0) {
  const uint32_t c = clamped_abs_bits(q0, 0x3E100000u, 0x40B00000u);
  return (c + 8u) & 0x1FFFFFu;
}
MXPREC_HD inline bool e2m1_near_boundary(float q0) { return e2m1_boundary_key(q0) <= 16u; }

MXPREC_HD inline bool is_fast_mode(ElemMode m) {
  return m == ElemMode::kMul || m == ElemMode::kMulDaz || m == ElemMode::kDiv;
}

// The value the fast modes encode (IEEE multiply / division; the device uses div.rn.f32).
MXPREC_HD inline float fast_q(float x, ElemScale s) {
  if (s.mode == ElemMode::kDiv) return x / s.p;
  if (s.mode == ElemMode::kMulDaz) x = flush_denormal(x);
  return x * s.p;
}

// NaN element of a fast mode: the code of quiet_nan(x) (x is the NaN), sign kept.
MXPREC_HD inline uint8_t nan_code_of(float x, ElemFormat f) {
  const FormatInfo fi = format_info(f);
  return static_cast<uint8_t>((sign_bit(x) ? (1u << (fi.bits - 1)) : 0u) | (fi.bits == 8 ? fi.nan_code : 0u));
}

// Element code of x under s, exactly the reference sequence (every mode). The device kernels run
// the fast modes with fast_q + a hardware / bit conversion and call this for the rest.
MXPREC_HD inline uint8_t encode_elem(float x, ElemScale s, ElemFormat f) {
  switch (s.mode) {
    case ElemMode::kZero:
      return 0;
    case ElemMode::kExactDiv:
      return encode_scaled(x, s.p, f);
    case ElemMode::kExactMx:
      return encode_mx(x, MxScale{static_cast<int32_t>(s.p), 0, false}, f);
    default: {
      const float q = fast_q(x, s);
      return is_nan(q) ? nan_code_of(x, f) : encode_rne(q, f);
    }
  }
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_QUANTIZE_MATH_H_
