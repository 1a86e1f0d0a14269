// Which bf16 amaxes let one multiply replace the division in an FP8 code (per-tensor / per-group scaling).
//
// A current scale is s = RN(amax / max_finite) (tensor_scale, group_scale). Where amax is a bf16 value, s takes
// one of only 128 values per binade (amax's 7 significand bits m), and every element x of the tensor is a bf16
// with |x| <= amax. For most m the FP8 code of x * RN(1 / s), one IEEE multiply, equals the FP8 code of the exact
// sequence's quotient RN(x / s) for every such x: bit m of kBf16MulExact<format> is set exactly for those m.
// tests/test_bf16_mul_certificate.py recomputes both masks on the CPU from every bf16 x below the amax (both
// signs, 44 binades: down to where every code is a signed zero) at amax exponents -80 .. 100, and checks that they
// do not depend on the exponent; outside that range (and for NaN / Inf / zero amaxes, other formats or inputs)
// bf16_mul_exact is false and the kernels divide as before (Markstein's steps).
// E4M3: 102 of 128 significands, E5M2: 108 (e.g. m = 10, amax 1.078125 * 2**k, fails for E4M3 at 15 positive values
// below it, and their negatives).
#ifndef MXPREC_CSRC_COMMON_BF16_MUL_CERTIFICATE_H_
#define MXPREC_CSRC_COMMON_BF16_MUL_CERTIFICATE_H_

#include <cstdint>

#include "formats.h"

namespace mxprec {

// Bit m (m = bits 16..22 of the amax's FP32 pattern): bits 0-63, then 64-127.
constexpr uint64_t kBf16MulExactE4M3Lo = 0x7eb9bb37fcfffbefULL, kBf16MulExactE4M3Hi = 0xf2fff7ffffdacfa7ULL;
constexpr uint64_t kBf16MulExactE5M2Lo = 0x7eb9bb77fdffffefULL, kBf16MulExactE5M2Hi = 0xf3fff7ffffdbdfa7ULL;
constexpr int kBf16MulExactMinExp = -80, kBf16MulExactMaxExp = 100;  // the amax exponents the masks were proved at

// Whether x * RN(1 / s), s = RN(amax / max_finite(f)), gives every bf16 |x| <= amax its exact FP8 code (f E4M3 or
// E5M2): amax (FP32 bits, non-negative) a normal bf16 value with exponent in [kBf16MulExactMinExp,
// kBf16MulExactMaxExp] whose significand's bit is set in f's mask.
MXPREC_HD inline bool bf16_mul_exact(uint32_t amax_bits, ElemFormat f) {
  if ((amax_bits & 0xFFFFu) != 0 || (amax_bits >> 31) != 0) return false;  // not a non-negative bf16 value
  const int e = static_cast<int>((amax_bits >> 23) & 0xFFu) - 127;
  if (e < kBf16MulExactMinExp || e > kBf16MulExactMaxExp) return false;
  uint64_t lo, hi;
  if (f == ElemFormat::kE4M3) {
    lo = kBf16MulExactE4M3Lo, hi = kBf16MulExactE4M3Hi;
  } else if (f == ElemFormat::kE5M2) {
    lo = kBf16MulExactE5M2Lo, hi = kBf16MulExactE5M2Hi;
  } else {
    return false;
  }
  const uint32_t m = (amax_bits >> 16) & 0x7Fu;
  return (((m < 64 ? lo >> m : hi >> (m - 64)) & 1u) != 0);
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_BF16_MUL_CERTIFICATE_H_
