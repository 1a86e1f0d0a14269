// Device helpers shared by the kernels that write per-tensor FP8 codes and amaxes (cuda_quantize.cu,
// cuda_swiglu.cu): the saturating FP8 convert, Markstein's division by a scale through its reciprocal, and the
// |x| keys of a chunk and their CTA max into a tensor amax.
#ifndef MXPREC_CSRC_CUDA_KERNELS_FP8_CODES_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_FP8_CODES_CUH_

#include <cstdint>

#include "quantize_math.h"

namespace mxprec {

// FP8 codes of four FP32 values (byte i = value i): cvt.rn.satfinite.{e4m3,e5m2}x2.f32 d, hi, lo: RNE,
// |v| > max_finite and +-Inf -> +-max_finite (what round_to_grid's saturation gives), -0 and values rounding to
// zero keep their sign. Build with -DMXPREC_CUDA_QUANT_NO_CVT to round with encode_rne instead.
__device__ __forceinline__ uint32_t fp8x4(float a, float b, float c, float d, bool e5m2) {
#if defined(MXPREC_CUDA_QUANT_NO_CVT)
  const ElemFormat f = e5m2 ? ElemFormat::kE5M2 : ElemFormat::kE4M3;
  return encode_rne(a, f) | (encode_rne(b, f) << 8) | (encode_rne(c, f) << 16) | (static_cast<uint32_t>(encode_rne(d, f)) << 24);
#else
  unsigned short lo, hi;
  if (e5m2) {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;" : "=h"(lo) : "f"(a), "f"(b));
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;" : "=h"(hi) : "f"(c), "f"(d));
  } else {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(lo) : "f"(a), "f"(b));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(hi) : "f"(c), "f"(d));
  }
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
#endif
}

// Markstein's two steps from q0 = RN(x * r), r = RN(1 / p), with negated residuals: e = RN(q * p - x),
// q' = RN(-e * r + q), the same bits as RN(x - q * p) and RN(e * r + q) for x != 0 (RN is odd), and for x = -0 it
// keeps the sign (the other form gives RN(+0 * r + -0) = +0). For p in [2**-80, 2**102) and 2**-20 <= |q0| <= 2**20
// the result is RN(x / p) (Markstein's theorem: the second step starts from a faithful quotient with an exact
// remainder); below 2**-20 every FP8 code of it is the division's signed zero (tests/test_cuda_quantize.py proves
// the codes on the CPU for every element with |q0| <= 2**20).
__device__ __forceinline__ float markstein_steps(float x, float q0, float p, float r) {
  const float q1 = __fmaf_rn(-__fmaf_rn(q0, p, -x), r, q0);
  return __fmaf_rn(-__fmaf_rn(q1, p, -x), r, q1);
}

// The largest raw |x| key (mxprec::abs_key: the bits of |x|, unfinished) of 8 values.
__device__ __forceinline__ uint32_t chunk_key(const float (&v)[8]) {
  uint32_t k = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) k = max(k, abs_key(v[i]));
  return k;
}

// One finished |x| key (mxprec::finish_key) into a tensor amax word: an atomicMax only when it can raise the
// value (the word only grows, so a stale read never skips a needed update); keeps same-address atomics rare.
__device__ __forceinline__ void amax_update(uint32_t* amax, uint32_t finished) {
  if (finished != 0u && finished > __ldcg(amax)) atomicMax(amax, finished);
}

// CTA max of kN raw |x| keys per thread (redux.sync per warp, shared memory across the kThreads / 32 warps), then
// amax_update of amax[i] with key i's finished CTA max by thread i. Every thread of the CTA must call it (it
// synchronizes).
template <int kThreads, int kN>
__device__ __forceinline__ void cta_amax(uint32_t* amax, const uint32_t (&key)[kN]) {
  __shared__ uint32_t red[kN][kThreads / 32];
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const uint32_t k = __reduce_max_sync(0xFFFFFFFFu, key[i]);
    if ((threadIdx.x & 31) == 0) red[i][threadIdx.x / 32] = k;
  }
  __syncthreads();
  if (threadIdx.x < kN) {
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) m = max(m, red[threadIdx.x][w]);
    amax_update(kN == 1 ? amax : amax + threadIdx.x, finish_key(m));
  }
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_FP8_CODES_CUH_
