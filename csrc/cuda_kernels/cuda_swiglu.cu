// XLA FFI handler `mxprec_swiglu_backward_fp8` for platform "CUDA" (exported C symbol MxprecSwigluBackwardFp8Cuda):
// the SwiGLU backward of mxprec.fused_mlp with its per-tensor FP8 casts, amaxes and Wgrad's K-major copies.
//
//   in   gate, up, dh: (M, F) bfloat16 or float16, row-major; scales: float32 (3,) = s_h, s_dg, s_du (device);
//        mult: float32 (3,) = m_g, m_u, m_d: the kernel reads gate as R(gate * m_g), up as R(up * m_u) and dh as
//        R(dh * m_d) (the per-tensor scales of the GEMMs that made them, which XLA's FP8 path applies after its
//        dot; 1 = as is)
//   out  h_t (F, M), d_gate (M, F), d_gate_t (F, M), d_up (M, F), d_up_t (F, M): FP8 codes (e4m3fn / e5m2, each
//        output's own dtype); amax: uint32 (3,) = the FP32 bits of max |h|, max |d_gate|, max |d_up| (NaN
//        canonical, a subnormal maximum 0: mxprec.quantize.tensor_amax of the rounded tensors)
//
// and `mxprec_swiglu_forward_fp8` (MxprecSwigluForwardFp8Cuda), the forward's h = silu(gate) * up with its cast:
//   in   gate, up: (M, F) as above; scale: float32 (1,) = s_h; mult: float32 (2,) = m_g, m_u as above
//   out  h codes (M, F) FP8; amax: uint32 (1,) = the bits of max |h|
//
// and the amaxes alone, current scaling's first pass (its scales need them before any code is written):
// `mxprec_swiglu_forward_amax` (MxprecSwigluForwardAmaxCuda): gate, up, mult (2,) -> amax uint32 (1,) (max |h|);
// `mxprec_swiglu_backward_amax` (MxprecSwigluBackwardAmaxCuda): gate, up, dh, mult (3,) -> amax uint32 (3,).
//
// Arithmetic (mxprec.fused_mlp.swiglu_forward / swiglu_backward, no FMA contraction: every step one IEEE FP32
// operation rounded to nearest):
//   sig = 1 / (1 + exp(-g)), silu = g * sig, h = R(silu * u), d_up = R(dh * silu),
//   d_gate = R(((dh * u) * sig) * (1 + g * (1 - sig))), R = rounding to the model's dtype;
// codes = cvt.rn.satfinite(flush(x) / flush(s)) (mxprec.quantize's delayed cast: IEEE division, clamp to
// +-max_finite, round to nearest even; DAZ on the input as the library's other kernels). The kernels divide by
// Markstein's steps from the scale's reciprocal (fp8_codes.cuh; the quantize kernels' proof) for a chunk of 8
// elements whose largest quotient lies in the band (|x| * RN(1 / s) <= 2**20, 2**-80 <= s < 2**102), else per
// element by div.rn.f32 (out of line: NaN / Inf elements, saturating quotients, other scales). Both give the codes
// of the IEEE quotient; the reciprocal path replaced four IEEE divisions per element (the kernels were
// instruction-bound).
//
// Kernels (one instance per input dtype and FP8 format mix, the formats template parameters):
// backward: a CTA of 256 threads takes a 64 (M) x 128 (F) tile. Each thread reads 8 consecutive elements of a row
// of gate, up and dh (16-byte loads), writes d_gate's and d_up's codes row-major (8-byte stores) and the three
// code tiles into shared memory (rows padded to 33 words), then writes the transposed tiles: each thread moves
// 4 x 4 byte blocks (four word loads, a byte-permute transpose, four 4-byte stores; 16 lanes per 64-byte output
// row). The amaxes: warp max of the |x| bit keys, CTA max in shared memory, one atomicMax each per CTA
// (fp8_codes.cuh's cta_amax). forward: 8 consecutive elements per thread, grid-stride, the same amax.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "byte_transpose.cuh"
#include "cuda_status.h"
#include "ffi_helpers.h"
#include "fp8_codes.cuh"
#include "quantize_math.h"
#include "swiglu_math.cuh"

namespace mxprec {
namespace cuda_swiglu {
namespace {

using namespace swiglu_math;  // NOLINT: the shared SwiGLU arithmetic (swiglu_math.cuh)

constexpr const char* kBackwardOp = "mxprec_swiglu_backward_fp8";
constexpr int kTileM = 64;
constexpr int kTileF = 128;
constexpr int kThreads = 256;
constexpr int kVec = 8;                           // elements per thread per row piece
constexpr int kRowThreads = kTileF / kVec;        // 16 threads per tile row
constexpr int kRowsPerPass = kThreads / kRowThreads;  // 16 rows per pass
constexpr int kStrideWords = kTileF / 4 + 1;      // padded shared row: 33 words

// 8 model-dtype elements (one 16-byte load) as FP32.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
  unpack2<T>(w.x, v[0], v[1]);
  unpack2<T>(w.y, v[2], v[3]);
  unpack2<T>(w.z, v[4], v[5]);
  unpack2<T>(w.w, v[6], v[7]);
}
// The same, each times m and rounded back to the model's dtype (R(x * m): the per-tensor output scale of the
// GEMM that made them; m = 1 leaves them as they are).
template <typename T>
__device__ __forceinline__ void load8(const T* p, float m, float (&v)[8]) {
  load8(p, v);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(v[i], m);
  round_model8<T>(v);
}

// h = R(silu(g) * u) of 8 elements (R: the model dtype's rounding).
template <typename T>
__device__ __forceinline__ void swiglu_forward8(const float (&g)[8], const float (&u)[8], float (&h)[8]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) h[i] = swiglu_values(g[i], u[i], 0.0f).h;
  round_model8<T>(h);
}

// h, d_gate, d_up of 8 elements (the header's formulas), each rounded to the model's dtype.
template <typename T>
__device__ __forceinline__ void swiglu_backward8(const float (&g)[8], const float (&u)[8], const float (&d)[8],
                                                 float (&h)[8], float (&dg)[8], float (&du)[8]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const SwigluValues v = swiglu_values(g[i], u[i], d[i]);
    h[i] = v.h;
    dg[i] = v.d_gate;
    du[i] = v.d_up;
  }
  round_model8<T>(h);
  round_model8<T>(dg);
  round_model8<T>(du);
}


// A per-tensor delayed scale as the codes divide by it: s flushed (DAZ), and r = RN(1 / s) where
// 2**-80 <= s < 2**102, else 0 (those scales divide exactly, per element).
struct Divisor {
  float s, r;
};
__device__ __forceinline__ Divisor divisor_of(float scale) {
  const float s = flush_denormal(scale);
  return {s, (s >= 0x1p-80f && s < 0x1p102f) ? __frcp_rn(s) : 0.0f};
}

// Whether the chunk whose largest |x| key is k divides through the reciprocal (fp8_codes.cuh's Markstein band):
// r > 0 and every first quotient |x * r| <= 2**20 (a NaN or Inf key fails the test).
__device__ __forceinline__ bool in_band(uint32_t k, Divisor d) {
  return d.r > 0.0f && __fmul_rn(__uint_as_float(k), d.r) <= 0x1p20f;
}

// FP8 codes of 8 elements (byte i = element i) of a chunk in the band: cvt.rn.satfinite of RN(x / s).
template <bool kE5m2>
__device__ __forceinline__ uint2 band_codes8(const float (&x)[8], Divisor d) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = markstein_steps(x[i], __fmul_rn(x[i], d.r), d.s, d.r);
  return make_uint2(fp8x4(q[0], q[1], q[2], q[3], kE5m2), fp8x4(q[4], q[5], q[6], q[7], kE5m2));
}

// The same for any chunk, per element: cvt.rn.satfinite(flush_denormal(x) / s), IEEE division (NaN / Inf elements,
// quotients above 2**20, scales outside the band): rare, out of line.
struct Chunk8 {
  float v[8];
};
__device__ __noinline__ uint2 exact_codes8(Chunk8 x, float s, bool e5m2) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = __fdiv_rn(flush_denormal(x.v[i]), s);
  return make_uint2(fp8x4(q[0], q[1], q[2], q[3], e5m2), fp8x4(q[4], q[5], q[6], q[7], e5m2));
}

template <bool kE5m2>
__device__ __forceinline__ uint2 codes8(const float (&x)[8], uint32_t key, Divisor d) {
  if (in_band(key, d)) return band_codes8<kE5m2>(x, d);
  Chunk8 c;
#pragma unroll
  for (int i = 0; i < 8; ++i) c.v[i] = x[i];
  return exact_codes8(c, d.s, kE5m2);
}

struct Outs {
  uint8_t* h_t;
  uint8_t* dg;
  uint8_t* dg_t;
  uint8_t* du;
  uint8_t* du_t;
  uint32_t* amax;  // [3] (h, d_gate, d_up), zeroed before the launch
};

// kE5h / kE5g / kE5u: h's, d_gate's, d_up's codes are E5M2 (else E4M3).
template <typename T, bool kE5h, bool kE5g, bool kE5u>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                                   const T* __restrict__ dh,
                                                                   const float* __restrict__ scales,
                                                                   const float* __restrict__ mult, Outs o,
                                                                   int64_t m_size, int64_t f_size) {
  __shared__ uint32_t tile[3][kTileM][kStrideWords];
  const int t = static_cast<int>(threadIdx.x);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, f0 = static_cast<int64_t>(blockIdx.x) * kTileF;
  const Divisor s_h = divisor_of(scales[0]), s_dg = divisor_of(scales[1]), s_du = divisor_of(scales[2]);
  const float m_g = mult[0], m_u = mult[1], m_d = mult[2];
  const int piece = t % kRowThreads;  // 8-element piece of the row
  uint32_t keys[3] = {0, 0, 0};       // h, d_gate, d_up
#pragma unroll
  for (int pass = 0; pass < kTileM / kRowsPerPass; ++pass) {
    const int r = t / kRowThreads + kRowsPerPass * pass;
    const int64_t off = (m0 + r) * f_size + f0 + kVec * piece;
    float g[8], u[8], d[8], h[8], dg[8], du[8];
    load8(gate + off, m_g, g);
    load8(up + off, m_u, u);
    load8(dh + off, m_d, d);
    swiglu_backward8<T>(g, u, d, h, dg, du);
    const uint32_t kh = chunk_key(h), kg = chunk_key(dg), ku = chunk_key(du);
    keys[0] = max(keys[0], kh);
    keys[1] = max(keys[1], kg);
    keys[2] = max(keys[2], ku);
    const uint2 ch = codes8<kE5h>(h, kh, s_h), cg = codes8<kE5g>(dg, kg, s_dg), cu = codes8<kE5u>(du, ku, s_du);
    *reinterpret_cast<uint2*>(o.dg + off) = cg;
    *reinterpret_cast<uint2*>(o.du + off) = cu;
    const int w = 2 * piece;
    tile[0][r][w] = ch.x;
    tile[0][r][w + 1] = ch.y;
    tile[1][r][w] = cg.x;
    tile[1][r][w + 1] = cg.y;
    tile[2][r][w] = cu.x;
    tile[2][r][w + 1] = cu.y;
  }
  cta_amax<kThreads, 3>(o.amax, keys);  // also the barrier before the tiles are read
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

template <typename T>
using BackwardKernel = void (*)(const T*, const T*, const T*, const float*, const float*, Outs, int64_t, int64_t);
// The backward's instances by format mask (bit 0: h E5M2, bit 1: d_gate, bit 2: d_up).
template <typename T, int... kMask>
constexpr std::array<BackwardKernel<T>, sizeof...(kMask)> backward_kernels(std::integer_sequence<int, kMask...>) {
  return {&swiglu_backward_kernel<T, (kMask & 1) != 0, (kMask & 2) != 0, (kMask & 4) != 0>...};
}

// A rank-2 buffer's (M, F) as Dims3 for dims_equal; rank -1 (equal to no buffer's) for another rank.
Dims3 matrix_dims(ffi::AnyBuffer::Dimensions d) {
  return d.size() == 2 ? Dims3{2, {d[0], d[1], 0}} : Dims3{-1, {0, 0, 0}};
}

bool is_fp8(ffi::DataType t) { return t == ffi::DataType::F8E4M3FN || t == ffi::DataType::F8E5M2; }

// The amax words zeroed before the kernel's atomicMax (stream-ordered).
ffi::Error zero_amax(const char* op, uint32_t* amax, int n, cudaStream_t stream) {
  return cuda_status(op, "memset", cudaMemsetAsync(amax, 0, n * sizeof(uint32_t), stream));
}

ffi::Error SwigluBackwardImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer dh,
                              ffi::AnyBuffer scales, ffi::AnyBuffer mult, ffi::Result<ffi::AnyBuffer> h_t, ffi::Result<ffi::AnyBuffer> dg,
                              ffi::Result<ffi::AnyBuffer> dg_t, ffi::Result<ffi::AnyBuffer> du,
                              ffi::Result<ffi::AnyBuffer> du_t, ffi::Result<ffi::AnyBuffer> amax) {
  const auto gd = gate.dimensions();
  const ffi::DataType in = gate.element_type();
  std::ostringstream os;
  os << kBackwardOp << ": gate " << dtype_name(in) << dims_str(gd) << ", up " << dtype_name(up.element_type())
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
  if (mult.element_type() != ffi::DataType::F32 || mult.element_count() != 3)
    return invalid(desc + "; mult must be float32 (3,)");
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
  Outs o{static_cast<uint8_t*>(h_t->untyped_data()), static_cast<uint8_t*>(dg->untyped_data()),
         static_cast<uint8_t*>(dg_t->untyped_data()), static_cast<uint8_t*>(du->untyped_data()),
         static_cast<uint8_t*>(du_t->untyped_data()), static_cast<uint32_t*>(amax->untyped_data())};
  const int formats = (h_t->element_type() == ffi::DataType::F8E5M2 ? 1 : 0) |
                      (dg->element_type() == ffi::DataType::F8E5M2 ? 2 : 0) |
                      (du->element_type() == ffi::DataType::F8E5M2 ? 4 : 0);
  if (auto e = zero_amax(kBackwardOp, o.amax, 3, stream); e.failure()) return e;
  if (m == 0 || f == 0) return ffi::Error::Success();  // (the amaxes of nothing: +0, as tensor_amax gives them)
  const dim3 grid(static_cast<unsigned>(f / kTileF), static_cast<unsigned>(m / kTileM));
  const auto* s = static_cast<const float*>(scales.untyped_data());
  const auto* mu = static_cast<const float*>(mult.untyped_data());
  if (in == ffi::DataType::BF16) {
    using T = __nv_bfloat16;
    backward_kernels<T>(std::make_integer_sequence<int, 8>{})[formats]<<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(gate.untyped_data()), static_cast<const T*>(up.untyped_data()),
        static_cast<const T*>(dh.untyped_data()), s, mu, o, m, f);
  } else {
    using T = __half;
    backward_kernels<T>(std::make_integer_sequence<int, 8>{})[formats]<<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(gate.untyped_data()), static_cast<const T*>(up.untyped_data()),
        static_cast<const T*>(dh.untyped_data()), s, mu, o, m, f);
  }
  return cuda_status(kBackwardOp, "kernel launch", cudaGetLastError());
}

// Grid of the grid-stride kernels (forward, amax): one 8-element piece per thread, at most 16 CTAs per SM of 132.
unsigned grid_stride_blocks(int64_t pieces) {
  return static_cast<unsigned>(std::min<int64_t>((pieces + kThreads - 1) / kThreads, 132 * 16));
}

// Forward: 8 consecutive elements per thread, grid-stride over the (M * F / 8) pieces; kE5m2: E5M2 codes.
template <typename T, bool kE5m2>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                                  const float* __restrict__ scale,
                                                                  const float* __restrict__ mult, uint8_t* codes,
                                                                  uint32_t* amax, int64_t pieces) {
  const Divisor s = divisor_of(scale[0]);
  const float m_g = mult[0], m_u = mult[1];
  uint32_t key[1] = {0};
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pieces;
       p += static_cast<int64_t>(gridDim.x) * kThreads) {
    float g[8], u[8], h[8];
    load8(gate + kVec * p, m_g, g);
    load8(up + kVec * p, m_u, u);
    swiglu_forward8<T>(g, u, h);
    const uint32_t k = chunk_key(h);
    key[0] = max(key[0], k);
    reinterpret_cast<uint2*>(codes)[p] = codes8<kE5m2>(h, k, s);
  }
  cta_amax<kThreads, 1>(amax, key);
}

constexpr const char* kForwardOp = "mxprec_swiglu_forward_fp8";

ffi::Error SwigluForwardImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer scale,
                             ffi::AnyBuffer mult, ffi::Result<ffi::AnyBuffer> codes, ffi::Result<ffi::AnyBuffer> amax) {
  const auto gd = gate.dimensions();
  const ffi::DataType in = gate.element_type();
  std::ostringstream os;
  os << kForwardOp << ": gate " << dtype_name(in) << dims_str(gd) << ", up "
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
  if (auto e = zero_amax(kForwardOp, a, 1, stream); e.failure()) return e;
  const int64_t pieces = gd[0] * gd[1] / kVec;
  if (pieces == 0) return ffi::Error::Success();
  const bool e5m2 = codes->element_type() == ffi::DataType::F8E5M2;
  const auto forward = [e5m2](auto t) {
    using T = decltype(t);
    return e5m2 ? swiglu_forward_kernel<T, true> : swiglu_forward_kernel<T, false>;
  };
  const auto* s = static_cast<const float*>(scale.untyped_data());
  const auto* mu = static_cast<const float*>(mult.untyped_data());
  auto* c = static_cast<uint8_t*>(codes->untyped_data());
  if (in == ffi::DataType::BF16) {
    forward(__nv_bfloat16{})<<<grid_stride_blocks(pieces), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(gate.untyped_data()), static_cast<const __nv_bfloat16*>(up.untyped_data()),
        s, mu, c, a, pieces);
  } else {
    forward(__half{})<<<grid_stride_blocks(pieces), kThreads, 0, stream>>>(
        static_cast<const __half*>(gate.untyped_data()), static_cast<const __half*>(up.untyped_data()), s, mu, c,
        a, pieces);
  }
  return cuda_status(kForwardOp, "kernel launch", cudaGetLastError());
}

// The amaxes alone (current scaling's first pass: the cast's scale needs the tensor's amax before any code):
// kBackward: max |h|, |d_gate|, |d_up| from gate, up, dh; else max |h| from gate, up. The same arithmetic, grid
// and amax as the kernels above, no stores.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads) swiglu_amax_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                               const T* __restrict__ dh,
                                                               const float* __restrict__ mult, uint32_t* amax,
                                                               int64_t pieces) {
  constexpr int kN = kBackward ? 3 : 1;
  const float m_g = mult[0], m_u = mult[1];
  uint32_t keys[kN] = {};
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pieces;
       p += static_cast<int64_t>(gridDim.x) * kThreads) {
    float g[8], u[8], h[8];
    load8(gate + kVec * p, m_g, g);
    load8(up + kVec * p, m_u, u);
    if constexpr (kBackward) {
      float d[8], dg[8], du[8];
      load8(dh + kVec * p, mult[2], d);
      swiglu_backward8<T>(g, u, d, h, dg, du);
      keys[1] = max(keys[1], chunk_key(dg));
      keys[2] = max(keys[2], chunk_key(du));
    } else {
      swiglu_forward8<T>(g, u, h);
    }
    keys[0] = max(keys[0], chunk_key(h));
  }
  cta_amax<kThreads, kN>(amax, keys);
}

// `mxprec_swiglu_forward_amax` (gate, up, mult (2,) -> amax (1,)) and `mxprec_swiglu_backward_amax` (gate, up,
// dh, mult (3,) -> amax (3,)): operands as the kernels above.
template <bool kBackward>
ffi::Error SwigluAmaxImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, const ffi::AnyBuffer* dh,
                          ffi::AnyBuffer mult, ffi::Result<ffi::AnyBuffer> amax) {
  const char* op = kBackward ? "mxprec_swiglu_backward_amax" : "mxprec_swiglu_forward_amax";
  constexpr int kN = kBackward ? 3 : 1;
  const auto gd = gate.dimensions();
  const ffi::DataType in = gate.element_type();
  std::ostringstream os;
  os << op << ": gate " << dtype_name(in) << dims_str(gd) << ", up " << dtype_name(up.element_type())
     << dims_str(up.dimensions());
  if (dh) os << ", dh " << dtype_name(dh->element_type()) << dims_str(dh->dimensions());
  const std::string desc = os.str();
  const Dims3 mf = matrix_dims(gd);
  if (mf.rank != 2 || (in != ffi::DataType::BF16 && in != ffi::DataType::F16) || up.element_type() != in ||
      !dims_equal(up.dimensions(), mf) || (dh && (dh->element_type() != in || !dims_equal(dh->dimensions(), mf))) ||
      gd[1] % kVec) {
    return invalid(desc + "; expected (M, F) bfloat16 or float16 tensors of one shape and dtype, F a multiple of 8");
  }
  if (mult.element_type() != ffi::DataType::F32 || mult.element_count() != (kBackward ? 3 : 2))
    return invalid(desc + (kBackward ? "; mult must be float32 (3,)" : "; mult must be float32 (2,)"));
  if (amax->element_type() != ffi::DataType::U32 || amax->element_count() != kN)
    return invalid(desc + (kBackward ? "; amax must be uint32 (3,)" : "; amax must be uint32 (1,)"));
  auto* a = static_cast<uint32_t*>(amax->untyped_data());
  if (auto e = zero_amax(op, a, kN, stream); e.failure()) return e;
  const int64_t pieces = gd[0] * gd[1] / kVec;
  if (pieces == 0) return ffi::Error::Success();
  const auto* mu = static_cast<const float*>(mult.untyped_data());
  const auto launch = [&](auto t) {
    using T = decltype(t);
    swiglu_amax_kernel<T, kBackward><<<grid_stride_blocks(pieces), kThreads, 0, stream>>>(
        static_cast<const T*>(gate.untyped_data()), static_cast<const T*>(up.untyped_data()),
        dh ? static_cast<const T*>(dh->untyped_data()) : nullptr, mu, a, pieces);
  };
  if (in == ffi::DataType::BF16) {
    launch(__nv_bfloat16{});
  } else {
    launch(__half{});
  }
  return cuda_status(op, "kernel launch", cudaGetLastError());
}

ffi::Error SwigluForwardAmaxImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer mult,
                                 ffi::Result<ffi::AnyBuffer> amax) {
  return SwigluAmaxImpl<false>(stream, gate, up, nullptr, mult, amax);
}

ffi::Error SwigluBackwardAmaxImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer dh,
                                  ffi::AnyBuffer mult, ffi::Result<ffi::AnyBuffer> amax) {
  return SwigluAmaxImpl<true>(stream, gate, up, &dh, mult, amax);
}

}  // namespace
}  // namespace cuda_swiglu
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecSwigluForwardAmaxCuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecSwigluForwardAmaxCuda, mxprec::cuda_swiglu::SwigluForwardAmaxImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecSwigluBackwardAmaxCuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecSwigluBackwardAmaxCuda, mxprec::cuda_swiglu::SwigluBackwardAmaxImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());

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
