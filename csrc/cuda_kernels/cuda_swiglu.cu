// XLA FFI handler `mxprec_swiglu_backward_fp8` for platform "CUDA" (exported C symbol MxprecSwigluBackwardFp8Cuda):
// the SwiGLU backward of mxprec.fused_mlp with its per-tensor FP8 casts, amaxes and Wgrad's K-major copies.
//
//   in   gate, up, dh: (M, F) bfloat16 or float16, row-major; scales: float32 (3,) = s_h, s_dg, s_du (device);
//        mult: float32 (2,) = m_g, m_u: the kernel reads gate as R(gate * m_g) and up as R(up * m_u) (the
//        per-tensor scales of the GEMMs that made them, which XLA's FP8 path applies after its dot; 1 = as is)
//   out  h_t (F, M), d_gate (M, F), d_gate_t (F, M), d_up (M, F), d_up_t (F, M): FP8 codes (e4m3fn / e5m2, each
//        output's own dtype); amax: uint32 (3,) = the FP32 bits of max |h|, max |d_gate|, max |d_up| (NaN
//        canonical, a subnormal maximum 0: mxprec.quantize.tensor_amax of the rounded tensors)
//
// and `mxprec_swiglu_forward_fp8` (MxprecSwigluForwardFp8Cuda), the forward's h = silu(gate) * up with its cast:
//   in   gate, up: (M, F) as above; scale: float32 (1,) = s_h; mult: float32 (2,) as above
//   out  h codes (M, F) FP8; amax: uint32 (1,) = the bits of max |h|
//
// Arithmetic (mxprec.fused_mlp.swiglu_forward / swiglu_backward, no FMA contraction: every step one IEEE FP32
// operation rounded to nearest):
//   sig = 1 / (1 + exp(-g)), silu = g * sig, h = R(silu * u), d_up = R(dh * silu),
//   d_gate = R(((dh * u) * sig) * (1 + g * (1 - sig))), R = rounding to the model's dtype;
// codes = cvt.rn.satfinite(flush(x) / flush(s)) (mxprec.quantize's delayed cast: IEEE division, clamp to
// +-max_finite, round to nearest even; DAZ on the input as the library's other kernels).
//
// Kernel: a CTA of 256 threads takes a 64 (M) x 128 (F) tile. Each thread reads 8 consecutive elements of a row
// of gate, up and dh (16-byte loads), writes d_gate's and d_up's codes row-major (8-byte stores) and the three
// code tiles into shared memory (rows padded to 33 words), then writes the transposed tiles: each thread moves
// 4 x 4 byte blocks (four word loads, a byte-permute transpose, four 4-byte stores; 16 lanes per 64-byte output
// row). The amaxes: warp max of the |x| bit keys, CTA max in shared memory, one atomicMax each per CTA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "byte_transpose.cuh"
#include "ffi_helpers.h"
#include "quantize_math.h"

namespace mxprec {
namespace cuda_swiglu {
namespace {

constexpr const char* kOp = "mxprec_swiglu_backward_fp8";
constexpr int kTileM = 64;
constexpr int kTileF = 128;
constexpr int kThreads = 256;
constexpr int kVec = 8;                           // elements per thread per row piece
constexpr int kRowThreads = kTileF / kVec;        // 16 threads per tile row
constexpr int kRowsPerPass = kThreads / kRowThreads;  // 16 rows per pass
constexpr int kStrideWords = kTileF / 4 + 1;      // padded shared row: 33 words
constexpr unsigned kFull = 0xFFFFFFFFu;

template <typename T>
__device__ __forceinline__ float round_model(float x);
template <>
__device__ __forceinline__ float round_model<__nv_bfloat16>(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}
template <>
__device__ __forceinline__ float round_model<__half>(float x) {
  return __half2float(__float2half_rn(x));
}

__device__ __forceinline__ float flush(float x) { return fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x; }

// One FP8 code of x / s (s already flushed), saturating, RNE.
__device__ __forceinline__ uint32_t code(float x, float s, bool e5m2) {
  const float q = __fdiv_rn(flush(x), s);
  unsigned short pair;
  if (e5m2) asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(q));
  else asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(q));
  return pair & 0xFFu;
}

// sig and silu of g (sig = 1 / (1 + exp(-g)), silu = g * sig), and h = R(silu * u).
template <typename T>
struct Swiglu {
  float sig, silu, h;
  __device__ __forceinline__ Swiglu(float g, float u) {
    sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
    silu = __fmul_rn(g, sig);
    h = round_model<T>(__fmul_rn(silu, u));
  }
};

__device__ __forceinline__ uint32_t abs_bits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

struct Outs {
  uint8_t* h_t;
  uint8_t* dg;
  uint8_t* dg_t;
  uint8_t* du;
  uint8_t* du_t;
  uint32_t* amax;  // [3] (h, d_gate, d_up), zeroed before the launch
  bool e5m2[3];    // h, d_gate, d_up
};

template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                                   const T* __restrict__ dh,
                                                                   const float* __restrict__ scales,
                                                                   const float* __restrict__ mult, Outs o,
                                                                   int64_t m_size, int64_t f_size) {
  __shared__ uint32_t tile[3][kTileM][kStrideWords];
  __shared__ uint32_t red[3][kThreads / 32];
  const int t = static_cast<int>(threadIdx.x);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, f0 = static_cast<int64_t>(blockIdx.x) * kTileF;
  const float s_h = flush(scales[0]), s_dg = flush(scales[1]), s_du = flush(scales[2]);
  const float m_g = mult[0], m_u = mult[1];
  const int piece = t % kRowThreads;  // 8-element piece of the row
  uint32_t key_h = 0, key_dg = 0, key_du = 0;
#pragma unroll
  for (int pass = 0; pass < kTileM / kRowsPerPass; ++pass) {
    const int r = t / kRowThreads + kRowsPerPass * pass;
    const int64_t off = (m0 + r) * f_size + f0 + kVec * piece;
    const uint4 gv = __ldg(reinterpret_cast<const uint4*>(gate + off));
    const uint4 uv = __ldg(reinterpret_cast<const uint4*>(up + off));
    const uint4 dv = __ldg(reinterpret_cast<const uint4*>(dh + off));
    const T* gs = reinterpret_cast<const T*>(&gv);
    const T* us = reinterpret_cast<const T*>(&uv);
    const T* ds = reinterpret_cast<const T*>(&dv);
    uint32_t ch[2] = {0, 0}, cg[2] = {0, 0}, cu[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float g = round_model<T>(__fmul_rn(static_cast<float>(gs[i]), m_g));
      const float u = round_model<T>(__fmul_rn(static_cast<float>(us[i]), m_u));
      const float d = static_cast<float>(ds[i]);
      const Swiglu<T> sw(g, u);
      const float sig = sw.sig, silu = sw.silu, h = sw.h;
      const float du = round_model<T>(__fmul_rn(d, silu));
      const float inner = __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig)));
      const float dg = round_model<T>(__fmul_rn(__fmul_rn(__fmul_rn(d, u), sig), inner));
      key_h = max(key_h, abs_bits(h));
      key_dg = max(key_dg, abs_bits(dg));
      key_du = max(key_du, abs_bits(du));
      const int sh = 8 * (i & 3);
      ch[i >> 2] |= code(h, s_h, o.e5m2[0]) << sh;
      cg[i >> 2] |= code(dg, s_dg, o.e5m2[1]) << sh;
      cu[i >> 2] |= code(du, s_du, o.e5m2[2]) << sh;
    }
    *reinterpret_cast<uint2*>(o.dg + off) = make_uint2(cg[0], cg[1]);
    *reinterpret_cast<uint2*>(o.du + off) = make_uint2(cu[0], cu[1]);
    const int w = 2 * piece;
    tile[0][r][w] = ch[0];
    tile[0][r][w + 1] = ch[1];
    tile[1][r][w] = cg[0];
    tile[1][r][w + 1] = cg[1];
    tile[2][r][w] = cu[0];
    tile[2][r][w + 1] = cu[1];
  }
  // amaxes: warp, then CTA, then one atomicMax each (finished keys: NaN canonical, subnormal 0)
  key_h = __reduce_max_sync(kFull, key_h);
  key_dg = __reduce_max_sync(kFull, key_dg);
  key_du = __reduce_max_sync(kFull, key_du);
  if ((t & 31) == 0) {
    red[0][t / 32] = key_h;
    red[1][t / 32] = key_dg;
    red[2][t / 32] = key_du;
  }
  __syncthreads();
  if (t < 3) {
    uint32_t k = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) k = max(k, red[t][i]);
    k = finish_key(k);
    if (k != 0u) atomicMax(o.amax + t, k);
  }
  // transposed tiles: output rows f0 + 4a + c (a < 32), bytes m0 + 4q .. + 3 (q < 16)
  uint8_t* const dst[3] = {o.h_t, o.dg_t, o.du_t};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int p = t + kThreads * k;
    const int q = p % 16, a = p / 16;
#pragma unroll
    for (int x = 0; x < 3; ++x) {
      uint32_t wv[4], col[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) wv[i] = tile[x][4 * q + i][a];
      transpose4x4(wv, col);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        *reinterpret_cast<uint32_t*>(dst[x] + (f0 + 4 * a + c) * m_size + m0 + 4 * q) = col[c];
      }
    }
  }
}

// A rank-2 buffer's (M, F) as Dims3 for dims_equal; rank -1 (equal to no buffer's) for another rank.
Dims3 matrix_dims(ffi::AnyBuffer::Dimensions d) {
  return d.size() == 2 ? Dims3{2, {d[0], d[1], 0}} : Dims3{-1, {0, 0, 0}};
}

bool is_fp8(ffi::DataType t) { return t == ffi::DataType::F8E4M3FN || t == ffi::DataType::F8E5M2; }

ffi::Error SwigluBackwardImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer dh,
                              ffi::AnyBuffer scales, ffi::AnyBuffer mult, ffi::Result<ffi::AnyBuffer> h_t, ffi::Result<ffi::AnyBuffer> dg,
                              ffi::Result<ffi::AnyBuffer> dg_t, ffi::Result<ffi::AnyBuffer> du,
                              ffi::Result<ffi::AnyBuffer> du_t, ffi::Result<ffi::AnyBuffer> amax) {
  const auto gd = gate.dimensions();
  const ffi::DataType in = gate.element_type();
  std::ostringstream os;
  os << kOp << ": gate " << dtype_name(in) << dims_str(gd) << ", up " << dtype_name(up.element_type())
     << dims_str(up.dimensions()) << ", dh " << dtype_name(dh.element_type()) << dims_str(dh.dimensions());
  const std::string desc = os.str();
  const Dims3 mf = matrix_dims(gd);
  if (mf.rank != 2 || (in != ffi::DataType::BF16 && in != ffi::DataType::F16) || up.element_type() != in ||
      dh.element_type() != in || !dims_equal(up.dimensions(), mf) || !dims_equal(dh.dimensions(), mf)) {
    return invalid(desc + "; expected three (M, F) bfloat16 or float16 tensors of one shape and dtype");
  }
  const int64_t m = gd[0], f = gd[1];
  if (m % kTileM || f % kTileF || m / kTileM > 65535) {
    return invalid(desc + "; M must be a multiple of 64 (at most 65535 * 64) and F a multiple of 128");
  }
  if (scales.element_type() != ffi::DataType::F32 || scales.element_count() != 3) {
    return invalid(desc + "; scales must be float32 (3,)");
  }
  if (mult.element_type() != ffi::DataType::F32 || mult.element_count() != 2)
    return invalid(desc + "; mult must be float32 (2,)");
  ffi::Result<ffi::AnyBuffer>* rows[2] = {&dg, &du};
  ffi::Result<ffi::AnyBuffer>* cols[3] = {&h_t, &dg_t, &du_t};
  for (auto* r : rows) {
    if (!is_fp8((*r)->element_type()) || !dims_equal((*r)->dimensions(), mf))
      return invalid(desc + "; d_gate / d_up codes must be float8 (M, F)");
  }
  for (auto* r : cols) {
    if (!is_fp8((*r)->element_type()) || !dims_equal((*r)->dimensions(), Dims3{2, {f, m, 0}}))
      return invalid(desc + "; transposed codes must be float8 (F, M)");
  }
  if (dg_t->element_type() != dg->element_type() || du_t->element_type() != du->element_type())
    return invalid(desc + "; a tensor's two code copies must share one float8 dtype");
  if (amax->element_type() != ffi::DataType::U32 || amax->element_count() != 3)
    return invalid(desc + "; amax must be uint32 (3,)");
  if (m == 0 || f == 0) return ffi::Error::Success();
  Outs o{static_cast<uint8_t*>(h_t->untyped_data()), static_cast<uint8_t*>(dg->untyped_data()),
         static_cast<uint8_t*>(dg_t->untyped_data()), static_cast<uint8_t*>(du->untyped_data()),
         static_cast<uint8_t*>(du_t->untyped_data()), static_cast<uint32_t*>(amax->untyped_data()),
         {h_t->element_type() == ffi::DataType::F8E5M2, dg->element_type() == ffi::DataType::F8E5M2,
          du->element_type() == ffi::DataType::F8E5M2}};
  cudaError_t e = cudaMemsetAsync(o.amax, 0, 3 * sizeof(uint32_t), stream);
  if (e != cudaSuccess) return ffi::Error::Internal(std::string(kOp) + ": memset: " + cudaGetErrorString(e));
  const dim3 grid(static_cast<unsigned>(f / kTileF), static_cast<unsigned>(m / kTileM));
  const auto* s = static_cast<const float*>(scales.untyped_data());
  const auto* mu = static_cast<const float*>(mult.untyped_data());
  if (in == ffi::DataType::BF16) {
    swiglu_backward_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(gate.untyped_data()), static_cast<const __nv_bfloat16*>(up.untyped_data()),
        static_cast<const __nv_bfloat16*>(dh.untyped_data()), s, mu, o, m, f);
  } else {
    swiglu_backward_kernel<__half><<<grid, kThreads, 0, stream>>>(
        static_cast<const __half*>(gate.untyped_data()), static_cast<const __half*>(up.untyped_data()),
        static_cast<const __half*>(dh.untyped_data()), s, mu, o, m, f);
  }
  e = cudaGetLastError();
  if (e != cudaSuccess) return ffi::Error::Internal(std::string(kOp) + ": kernel launch: " + cudaGetErrorString(e));
  return ffi::Error::Success();
}

// Forward: 8 consecutive elements per thread, grid-stride over the (M * F / 8) pieces.
template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                                  const float* __restrict__ scale,
                                                                  const float* __restrict__ mult, uint8_t* codes,
                                                                  uint32_t* amax, bool e5m2, int64_t pieces) {
  __shared__ uint32_t red[kThreads / 32];
  const float s = flush(scale[0]);
  const float m_g = mult[0], m_u = mult[1];
  uint32_t key = 0;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pieces;
       p += static_cast<int64_t>(gridDim.x) * kThreads) {
    const uint4 gv = __ldg(reinterpret_cast<const uint4*>(gate) + p);
    const uint4 uv = __ldg(reinterpret_cast<const uint4*>(up) + p);
    const T* gs = reinterpret_cast<const T*>(&gv);
    const T* us = reinterpret_cast<const T*>(&uv);
    uint32_t c[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const Swiglu<T> sw(round_model<T>(__fmul_rn(static_cast<float>(gs[i]), m_g)),
                         round_model<T>(__fmul_rn(static_cast<float>(us[i]), m_u)));
      key = max(key, abs_bits(sw.h));
      c[i >> 2] |= code(sw.h, s, e5m2) << (8 * (i & 3));
    }
    reinterpret_cast<uint2*>(codes)[p] = make_uint2(c[0], c[1]);
  }
  key = __reduce_max_sync(kFull, key);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t k = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) k = max(k, red[i]);
    k = finish_key(k);
    if (k != 0u) atomicMax(amax, k);
  }
}

ffi::Error SwigluForwardImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer scale,
                             ffi::AnyBuffer mult, ffi::Result<ffi::AnyBuffer> codes, ffi::Result<ffi::AnyBuffer> amax) {
  const auto gd = gate.dimensions();
  const ffi::DataType in = gate.element_type();
  std::ostringstream os;
  os << "mxprec_swiglu_forward_fp8: gate " << dtype_name(in) << dims_str(gd) << ", up "
     << dtype_name(up.element_type()) << dims_str(up.dimensions());
  const std::string desc = os.str();
  const Dims3 mf = matrix_dims(gd);
  if (mf.rank != 2 || (in != ffi::DataType::BF16 && in != ffi::DataType::F16) || up.element_type() != in ||
      !dims_equal(up.dimensions(), mf) || gd[1] % kVec) {
    return invalid(desc + "; expected two (M, F) bfloat16 or float16 tensors of one shape and dtype, F a multiple of 8");
  }
  if (scale.element_type() != ffi::DataType::F32 || scale.element_count() != 1)
    return invalid(desc + "; scale must be float32 (1,)");
  if (mult.element_type() != ffi::DataType::F32 || mult.element_count() != 2)
    return invalid(desc + "; mult must be float32 (2,)");
  if (!is_fp8(codes->element_type()) || !dims_equal(codes->dimensions(), mf))
    return invalid(desc + "; codes must be float8 of gate's shape");
  if (amax->element_type() != ffi::DataType::U32 || amax->element_count() != 1)
    return invalid(desc + "; amax must be uint32 (1,)");
  auto* a = static_cast<uint32_t*>(amax->untyped_data());
  cudaError_t e = cudaMemsetAsync(a, 0, sizeof(uint32_t), stream);
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("mxprec_swiglu_forward_fp8: memset: ") + cudaGetErrorString(e));
  const int64_t pieces = gd[0] * gd[1] / kVec;
  if (pieces == 0) return ffi::Error::Success();
  const int64_t blocks = std::min<int64_t>((pieces + kThreads - 1) / kThreads, 132 * 16);
  const bool e5m2 = codes->element_type() == ffi::DataType::F8E5M2;
  const auto* s = static_cast<const float*>(scale.untyped_data());
  const auto* mu = static_cast<const float*>(mult.untyped_data());
  auto* c = static_cast<uint8_t*>(codes->untyped_data());
  if (in == ffi::DataType::BF16) {
    swiglu_forward_kernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(gate.untyped_data()), static_cast<const __nv_bfloat16*>(up.untyped_data()),
        s, mu, c, a, e5m2, pieces);
  } else {
    swiglu_forward_kernel<__half><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const __half*>(gate.untyped_data()), static_cast<const __half*>(up.untyped_data()), s, mu, c,
        a, e5m2, pieces);
  }
  e = cudaGetLastError();
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("mxprec_swiglu_forward_fp8: kernel launch: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace cuda_swiglu
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecSwigluForwardFp8Cuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecSwigluForwardFp8Cuda, mxprec::cuda_swiglu::SwigluForwardImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecSwigluBackwardFp8Cuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecSwigluBackwardFp8Cuda, mxprec::cuda_swiglu::SwigluBackwardImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
