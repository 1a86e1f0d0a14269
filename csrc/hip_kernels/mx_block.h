// One MX block of 32 -> E8M0 scale byte + packed element codes (docs/numerics.md 5. and
// "Packing"), the body of the gfx950 MX quantize kernel (gfx950_mx_quantize.hip). Plain C++17 /
// MXPREC_HD so the CPU unit test (tests/test_hip_host.py) runs exactly this code; every FP32
// operation is formats.h's, in the order csrc/cpu_kernels/quantize_cpu.cc uses.
//
// FP32 semantics: XLA's CPU runtime (the oracle mxprec.quantize, and the CPU handler) runs with
// FTZ/DAZ. The GPU keeps FP32 denormals, so the inputs and the block amax are flushed explicitly
// here (flush_denormal); with that, every later intermediate is either normal or underflows to a
// value that rounds to code 0 in any element format, so the bits match the CPU lowering.
#ifndef MXPREC_CSRC_HIP_KERNELS_MX_BLOCK_H_
#define MXPREC_CSRC_HIP_KERNELS_MX_BLOCK_H_

#include <cstdint>

#include "formats.h"
#include "mfma_layout.h"
#include "quantize_math.h"

namespace mxprec {
namespace hip {

// InType / load_in and the MX block scale (mx_block_scale) are csrc/common/quantize_math.h's, shared
// with the CUDA quantize kernels; named here for the kernels' ::mxprec::hip:: spellings.
using ::mxprec::InType;
using ::mxprec::load_in;

struct MxBlockResult {
  uint8_t scale_byte;  // E8M0: 0xFF NaN/Inf block, 0x00 all-zero block, else e + 127
  float amax;          // block amax as the tensor amax sees it: canonical NaN, denormal -> +0
};

// Quantizes the 32 values load(0..31) (FP32; `load` re-reads them: the element pass runs per
// FP6 packing unit of 4 and is kept rolled on the device, which keeps the 30 kernel
// instantiations small and fast to compile). Writes fragment_bytes(f) packed bytes to `out` (FP8
// 32, FP6 24, FP4 16; mxprec's packed layout) and returns the scale byte and the block amax.
template <class Load>
MXPREC_HD inline MxBlockResult quantize_mx_block_load(Load load, ElemFormat f, ScaleRule rule, uint8_t* out) {
  float amax = 0.0f;
  for (int32_t i = 0; i < kMxBlock; ++i) amax = xla_max(amax, abs_f32(flush_denormal(load(i))));  // DAZ
  amax = is_nan(amax) ? bits_f32(kCanonicalNan) : amax;
  const MxScale m = mx_block_scale(amax, f, rule);
  const bool bad_or_zero = m.zero;
  const int32_t e = m.e;
  const uint8_t byte = m.byte;
  const int32_t bits = format_bits(f);
#if defined(__clang__)
#pragma clang loop unroll(disable)
#endif
  for (int32_t g = 0; g < kMxBlock / 4; ++g) {
    uint8_t c[4];
    for (int32_t j = 0; j < 4; ++j) {
      const float r = bad_or_zero ? 0.0f : round_to_grid(mx_divide(flush_denormal(load(4 * g + j)), e), f);
      c[j] = encode_grid(r, f);
    }
    if (bits == 8) {
      for (int32_t j = 0; j < 4; ++j) out[4 * g + j] = c[j];
    } else if (bits == 4) {
      out[2 * g] = pack_fp4(c[0], c[1]);
      out[2 * g + 1] = pack_fp4(c[2], c[3]);
    } else {
      pack_fp6(c, out + 3 * g);
    }
  }
  return MxBlockResult{byte, amax};
}

// Convenience overload for an FP32 array.
MXPREC_HD inline MxBlockResult quantize_mx_block(const float* x, ElemFormat f, ScaleRule rule, uint8_t* out) {
  return quantize_mx_block_load([x](int32_t i) { return x[i]; }, f, rule, out);
}

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_MX_BLOCK_H_
