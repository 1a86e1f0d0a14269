// Device arithmetic of mxprec.fused_mlp's SwiGLU shared by its CUDA kernels (cuda_swiglu.cu: the per-tensor FP8
// casts; cuda_quantize.cu: the 1 x 128 tile-scaled ones): the model dtype's unpacking and rounding and the
// sigmoid / SiLU, each step one IEEE FP32 operation rounded to nearest (no FMA contraction).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SWIGLU_MATH_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SWIGLU_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace mxprec {
namespace swiglu_math {

// The two model-dtype elements of a 32-bit word (element 0 in the low half) as FP32; bf16 by bit moves (one
// instruction each).
template <typename T>
__device__ __forceinline__ void unpack2(uint32_t w, float& a, float& b);
template <>
__device__ __forceinline__ void unpack2<__nv_bfloat16>(uint32_t w, float& a, float& b) {
  a = __uint_as_float(w << 16);
  b = __uint_as_float(w & 0xFFFF0000u);
}
template <>
__device__ __forceinline__ void unpack2<__half>(uint32_t w, float& a, float& b) {
  const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w));
  a = v.x;
  b = v.y;
}

// Two FP32 values rounded to the model's dtype (one paired convert, RN) as a 32-bit word (a in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack_model2(float a, float b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Two FP32 values rounded to the model's dtype and back.
template <typename T>
__device__ __forceinline__ void round_model2(float& a, float& b) {
  unpack2<T>(pack_model2<T>(a, b), a, b);
}
template <typename T>
__device__ __forceinline__ void round_model8(float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 8; i += 2) round_model2<T>(v[i], v[i + 1]);
}

// sig = 1 / (1 + exp(-g)) and silu = g * sig (rcp.rn: the correctly rounded reciprocal, the bits of div.rn(1, x)).
__device__ __forceinline__ void sigmoid_silu(float g, float& sig, float& silu) {
  sig = __frcp_rn(__fadd_rn(1.0f, expf(-g)));
  silu = __fmul_rn(g, sig);
}

// One element's h = R'(silu(g) * u), d_up = R'(dh * silu) and d_gate = R'(((dh * u) * sig) * (1 + g * (1 - sig)))
// before the rounding R to the model's dtype (mxprec.fused_mlp.swiglu_forward / swiglu_backward); a caller that
// needs only some of them leaves the rest to dead-code elimination.
struct SwigluValues {
  float h, d_gate, d_up;
};
__device__ __forceinline__ SwigluValues swiglu_values(float g, float u, float dh) {
  float sig, silu;
  sigmoid_silu(g, sig, silu);
  SwigluValues v;
  v.h = __fmul_rn(silu, u);
  v.d_up = __fmul_rn(dh, silu);
  const float inner = __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig)));
  v.d_gate = __fmul_rn(__fmul_rn(__fmul_rn(dh, u), sig), inner);
  return v;
}

}  // namespace swiglu_math
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SWIGLU_MATH_CUH_
