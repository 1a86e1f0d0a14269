// Element and scale formats: encode / decode exactly as docs/numerics.md defines them.
//
// Every backend (CPU, CUDA, HIP) uses these functions, so the bits a native quantizer produces are
// the bits mxprec.quantize (the pure-JAX oracle) produces. Each function mirrors one operation of
// src/mxprec/quantize.py / scaling.py, in the same order, with the same FP32 operations:
//
//   floor_log2   <-> scaling.floor_log2       (exponent + fraction read from the FP32 bits)
//   exp2i        <-> scaling.exp2_int         (2**e built from bits, e in [-126, 127])
//   mx_exponent  <-> scaling.mx_exponent      (floor / rceil rule, clamped)
//   round_to_grid<-> quantize.round_to_grid   (saturate, RNE onto the grid)
//   encode_grid  <-> quantize.encode          (grid value -> code bits)
//   mx_divide / mx_multiply <-> quantize._mx_divide / _mx_multiply (two exact halves)
//
// FP32 semantics: XLA's CPU runtime runs with FTZ/DAZ (denormals flushed); the CPU handlers set
// the same mode (see ffi_helpers.h ScopedFlushDenormal) so that these functions, compiled without
// -ffast-math, produce the same bits as XLA's generated code. Min/max follow XLA (NaN wins).
//
// Usable from C++17 and CUDA/HIP: every function is MXPREC_HD (= __host__ __device__ there).
#ifndef MXPREC_CSRC_COMMON_FORMATS_H_
#define MXPREC_CSRC_COMMON_FORMATS_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MXPREC_HD __host__ __device__
#else
#define MXPREC_HD
#endif

namespace mxprec {

// ------------------------------------------------------------------------------------ enums

// Element formats (attribute value `*_fmt`). Values are part of the FFI contract.
enum class ElemFormat : int32_t {
  kE4M3 = 0,  // float8_e4m3fn: bias 7, max 448, NaN 0x7F/0xFF, no Inf
  kE5M2 = 1,  // float8_e5m2:   bias 15, max 57344, Inf 0x7C, NaN 0x7D..0x7F
  kE2M3 = 2,  // FP6: bias 1, max 7.5
  kE3M2 = 3,  // FP6: bias 3, max 28
  kE2M1 = 4,  // FP4: bias 1, max 6
};
constexpr int32_t kNumElemFormats = 5;

// MX scale rule (attribute `scale_rule`).
enum class ScaleRule : int32_t {
  kRceil = 0,  // NVIDIA: smallest 2**e with amax / 2**e <= max_finite
  kFloor = 1,  // OCP v1.0: 2**(floor(log2 amax) - emax)
};

struct FormatInfo {
  int32_t bits;        // 8, 6 or 4
  int32_t ebits;       // exponent field width
  int32_t mbits;       // mantissa field width
  int32_t bias;        // exponent bias
  int32_t emax;        // floor(log2(max_finite))
  int32_t emin;        // 1 - bias (exponent of the smallest normal)
  int32_t max_frac;    // 23-bit FP32 fraction of max_finite's significand (rceil comparison)
  float max_finite;
  float min_normal;     // 2**emin
  float min_subnormal;  // 2**(emin - mbits)
  uint8_t nan_code;     // code of +NaN for FP8 (as XLA's f32 -> f8 conversion writes it), else 0
};

MXPREC_HD constexpr FormatInfo format_info(ElemFormat f) {
  switch (f) {
    case ElemFormat::kE4M3:
      return FormatInfo{8, 4, 3, 7, 8, -6, 6291456, 448.0f, 0x1p-6f, 0x1p-9f, 0x7F};
    case ElemFormat::kE5M2:
      return FormatInfo{8, 5, 2, 15, 15, -14, 6291456, 57344.0f, 0x1p-14f, 0x1p-16f, 0x7E};
    case ElemFormat::kE2M3:
      return FormatInfo{6, 2, 3, 1, 2, 0, 7340032, 7.5f, 1.0f, 0.125f, 0};
    case ElemFormat::kE3M2:
      return FormatInfo{6, 3, 2, 3, 4, -2, 6291456, 28.0f, 0.25f, 0.0625f, 0};
    case ElemFormat::kE2M1:
    default:
      return FormatInfo{4, 2, 1, 1, 2, 0, 4194304, 6.0f, 1.0f, 0.5f, 0};
  }
}

MXPREC_HD constexpr bool valid_elem_format(int32_t f) { return f >= 0 && f < kNumElemFormats; }
MXPREC_HD constexpr int32_t format_bits(ElemFormat f) { return format_info(f).bits; }
MXPREC_HD constexpr bool is_fp8(ElemFormat f) { return format_bits(f) == 8; }

inline const char* format_name(ElemFormat f) {
  switch (f) {
    case ElemFormat::kE4M3: return "e4m3";
    case ElemFormat::kE5M2: return "e5m2";
    case ElemFormat::kE2M3: return "e2m3";
    case ElemFormat::kE3M2: return "e3m2";
    case ElemFormat::kE2M1: return "e2m1";
  }
  return "?";
}

// ------------------------------------------------------------------------------------ FP32 bits

MXPREC_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

MXPREC_HD inline float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

MXPREC_HD inline bool is_nan(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
MXPREC_HD inline bool is_finite(float x) { return (f32_bits(x) & 0x7F800000u) != 0x7F800000u; }
MXPREC_HD inline bool sign_bit(float x) { return (f32_bits(x) >> 31) != 0; }
MXPREC_HD inline float abs_f32(float x) { return bits_f32(f32_bits(x) & 0x7FFFFFFFu); }
MXPREC_HD inline float neg_f32(float x) { return bits_f32(f32_bits(x) ^ 0x80000000u); }

// XLA's min / max: a NaN operand wins (the first NaN), otherwise the usual order.
MXPREC_HD inline float xla_min(float a, float b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a < b ? a : b;
}
MXPREC_HD inline float xla_max(float a, float b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a > b ? a : b;
}

// An amax reduction result as XLA's CPU runtime delivers it: a subnormal maximum is flushed to
// +0 (DAZ/FTZ), NaN propagates.
MXPREC_HD inline float flush_denormal(float x) {
  return (f32_bits(x) & 0x7F800000u) == 0 ? bits_f32(f32_bits(x) & 0x80000000u) : x;
}

// Exact floor(log2(a)) and the 23 fraction bits of a / 2**floor(log2 a), read from the bits of a
// (non-negative; subnormals get their true exponent; Inf/NaN give exponent 128).
MXPREC_HD inline void floor_log2(float a, int32_t* exp, int32_t* frac) {
  const uint32_t bits = f32_bits(a);
  const int32_t biased = static_cast<int32_t>((bits >> 23) & 0xFFu);
  uint32_t f = bits & 0x7FFFFFu;
  if (biased == 0) {
    // value = f * 2**-149: normalise the leading one into bit 23.
    int32_t lz = 0;
    if (f == 0) {
      lz = 24;  // clz(0) - 8 as XLA computes it: 32 - 8
    } else {
      while (!(f & 0x800000u)) {
        f <<= 1;
        ++lz;
      }
    }
    *exp = -126 - lz;
    *frac = static_cast<int32_t>(f & 0x7FFFFFu);
  } else {
    *exp = biased - 127;
    *frac = static_cast<int32_t>(f);
  }
}

// 2**e as FP32 for integer e in [-126, 127], built from bits (exact).
MXPREC_HD inline float exp2i(int32_t e) { return bits_f32(static_cast<uint32_t>(e + 127) << 23); }

MXPREC_HD inline int32_t floor_div2(int32_t e) { return (e >= 0) ? e / 2 : -((-e + 1) / 2); }

// x / 2**e exactly for e in [-127, 127]: two exact multiplies, no FP32 subnormal scale formed.
MXPREC_HD inline float mx_divide(float x, int32_t e) {
  const int32_t e1 = floor_div2(e);
  return (x * exp2i(-e1)) * exp2i(-(e - e1));
}

// v * 2**e exactly for e in [-127, 127] (the inverse of mx_divide).
MXPREC_HD inline float mx_multiply(float v, int32_t e) {
  const int32_t e1 = floor_div2(e);
  return (v * exp2i(e1)) * exp2i(e - e1);
}

MXPREC_HD inline int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The exponent e of the power-of-two scale for a positive finite amax (scaling.mx_exponent).
MXPREC_HD inline int32_t mx_exponent(float amax, ElemFormat f, ScaleRule rule, int32_t lo = -127,
                                     int32_t hi = 127) {
  const FormatInfo fi = format_info(f);
  int32_t exp, frac;
  floor_log2(amax, &exp, &frac);
  int32_t e = exp - fi.emax;
  if (rule == ScaleRule::kRceil) e += (frac > fi.max_frac) ? 1 : 0;
  return clamp_i32(e, lo, hi);
}

// Round-half-to-even of an FP32 value (the default rounding mode; handlers run under it).
MXPREC_HD inline float rne(float r) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return rintf(r);
#else
  return std::nearbyintf(r);
#endif
}

// Saturate v to +-max_finite and round to nearest even onto the format's grid (FP32 result,
// exact; NaN stays NaN). quantize.round_to_grid, operation for operation.
MXPREC_HD inline float round_to_grid(float v, ElemFormat f) {
  const FormatInfo fi = format_info(f);
  const float a = xla_min(abs_f32(v), fi.max_finite);
  int32_t exp, frac;
  floor_log2(xla_max(a, fi.min_normal), &exp, &frac);
  const float quantum = exp2i(exp - fi.mbits);
  const float r = rne(a / quantum);
  const float out = xla_min(r * quantum, fi.max_finite);
  return sign_bit(v) ? neg_f32(out) : out;
}

// XLA's f32 -> s32 conversion: NaN -> 0, saturating.
MXPREC_HD inline int32_t xla_f32_to_s32(float x) {
  if (is_nan(x)) return 0;
  if (x >= 2147483648.0f) return 2147483647;
  if (x <= -2147483648.0f) return static_cast<int32_t>(0x80000000u);
  return static_cast<int32_t>(x);
}

// Code bits of an FP32 value g that lies on the format's grid (or is NaN), quantize.encode.
// FP8: the code XLA's f32 -> float8 conversion writes (NaN -> sign | nan_code).
// FP6/FP4: sign in bit (bits - 1), then exponent, then mantissa; NaN -> sign only (as the JAX
// formula yields, its mantissa converting NaN -> 0).
MXPREC_HD inline uint8_t encode_grid(float g, ElemFormat f) {
  const FormatInfo fi = format_info(f);
  const uint32_t sign = sign_bit(g) ? (1u << (fi.bits - 1)) : 0u;
  if (is_nan(g)) return static_cast<uint8_t>(sign | (fi.bits == 8 ? fi.nan_code : 0u));
  const float a = abs_f32(g);
  int32_t exp, frac;
  floor_log2(xla_max(a, fi.min_normal), &exp, &frac);
  const bool normal = a >= fi.min_normal;
  const uint32_t exp_field = normal ? static_cast<uint32_t>(exp + fi.bias) : 0u;
  const uint32_t mant = normal ? static_cast<uint32_t>(frac >> (23 - fi.mbits))
                               : static_cast<uint32_t>(xla_f32_to_s32(a / fi.min_subnormal));
  return static_cast<uint8_t>((sign | (exp_field << fi.mbits) | mant) & 0xFFu);
}

// Value of a code (exact). FP8 NaN codes -> NaN (sign kept), E5M2 0x7C -> Inf.
MXPREC_HD inline float decode_code(uint8_t code, ElemFormat f) {
  const FormatInfo fi = format_info(f);
  const uint32_t c = code & ((1u << fi.bits) - 1u);
  const bool neg = (c >> (fi.bits - 1)) & 1u;
  const uint32_t exp_field = (c >> fi.mbits) & ((1u << fi.ebits) - 1u);
  const uint32_t mant = c & ((1u << fi.mbits) - 1u);
  float v;
  if (f == ElemFormat::kE4M3 && exp_field == 15u && mant == 7u) {
    v = bits_f32(0x7FC00000u);
  } else if (f == ElemFormat::kE5M2 && exp_field == 31u) {
    v = mant == 0u ? bits_f32(0x7F800000u) : bits_f32(0x7FC00000u);
  } else if (exp_field == 0u) {
    v = static_cast<float>(mant) * fi.min_subnormal;
  } else {
    v = (1.0f + static_cast<float>(mant) / static_cast<float>(1u << fi.mbits)) *
        exp2i(static_cast<int32_t>(exp_field) - fi.bias);
  }
  return neg ? neg_f32(v) : v;
}

// E8M0 scale byte: 2**(byte - 127), 0xFF = NaN. The exponent, for use with mx_multiply.
constexpr uint8_t kE8M0Nan = 0xFF;
MXPREC_HD inline int32_t e8m0_exponent(uint8_t byte) { return static_cast<int32_t>(byte) - 127; }

// ------------------------------------------------------------------------------------ packing
// FP4: element 2i in the low nibble, 2i+1 in the high nibble.
// FP6: codes c0..c3 -> 24-bit word c0 | c1<<6 | c2<<12 | c3<<18, bytes little-endian.

MXPREC_HD inline uint8_t pack_fp4(uint8_t c0, uint8_t c1) {
  return static_cast<uint8_t>((c0 & 0xFu) | ((c1 & 0xFu) << 4));
}
MXPREC_HD inline void pack_fp6(const uint8_t c[4], uint8_t out[3]) {
  const uint32_t w = (c[0] & 0x3Fu) | ((c[1] & 0x3Fu) << 6) | ((c[2] & 0x3Fu) << 12) | ((c[3] & 0x3Fu) << 18);
  out[0] = static_cast<uint8_t>(w & 0xFFu);
  out[1] = static_cast<uint8_t>((w >> 8) & 0xFFu);
  out[2] = static_cast<uint8_t>((w >> 16) & 0xFFu);
}
MXPREC_HD inline void unpack_fp6(const uint8_t in[3], uint8_t c[4]) {
  const uint32_t w = in[0] | (static_cast<uint32_t>(in[1]) << 8) | (static_cast<uint32_t>(in[2]) << 16);
  for (int i = 0; i < 4; ++i) c[i] = static_cast<uint8_t>((w >> (6 * i)) & 0x3Fu);
}

// Code of element `l` (along the packed axis) from packed bytes `p` holding that axis with
// stride `stride` between consecutive bytes.
MXPREC_HD inline uint8_t packed_code(const uint8_t* p, int64_t l, int64_t stride, int32_t bits) {
  if (bits == 8) return p[l * stride];
  if (bits == 4) {
    const uint8_t b = p[(l >> 1) * stride];
    return (l & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xFu);
  }
  const int64_t g = l >> 2;
  const uint32_t w = p[(3 * g) * stride] | (static_cast<uint32_t>(p[(3 * g + 1) * stride]) << 8) |
                     (static_cast<uint32_t>(p[(3 * g + 2) * stride]) << 16);
  return static_cast<uint8_t>((w >> (6 * (l & 3))) & 0x3Fu);
}

// ------------------------------------------------------------------------------------ 16-bit floats

MXPREC_HD inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

MXPREC_HD inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays (quiet) NaN
  const uint32_t u = f32_bits(f);
  if (is_nan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

MXPREC_HD inline float f16_to_f32(uint16_t h) {  // exact
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return bits_f32(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_f32(sign);
    int32_t ee = -14;  // value = m * 2**-24: normalise
    while (!(m & 0x400u)) {
      m <<= 1;
      --ee;
    }
    return bits_f32(sign | (static_cast<uint32_t>(ee + 127) << 23) | ((m & 0x3FFu) << 13));
  }
  return bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
}

MXPREC_HD inline uint16_t f32_to_f16(float f) {  // round to nearest even, overflow -> Inf
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to Inf
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;
  if (e >= -14) {  // normal half
    uint32_t m = a & 0x7FFFFFu;
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (m >> 13);
    const uint32_t rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (e < -25) return sign;  // below half of the smallest subnormal (2**-25 ties to 0)
  // subnormal half: value / 2**-24, rounded to nearest even
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;  // significand with hidden bit, value m * 2**(e-23)
  const int32_t shift = -e - 1;                     // m * 2**(e-23) / 2**-24 = m >> (-(e+1))
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_FORMATS_H_
