// XLA FFI handler `mxprec_quantize` for platform "CUDA" (exported C symbol MxprecQuantizeCuda):
// every kind of the contract (csrc/common/quantize.h) on sm_90a, bit-identical to the CPU lowering
// and to mxprec.quantize (the oracle, run by XLA's CPU runtime).
//
// Numerics: the per-group scales use csrc/common/quantize_math.h's exact functions (formats.h
// arithmetic with the CPU's FTZ/DAZ and x86 NaN rules made explicit); the elements use its
// ElemScale fast path (one IEEE multiply or div.rn.f32 per element, then cvt.rn.satfinite.{e4m3,
// e5m2}x2.f32 for FP8 or encode_rne's bit rounding for FP6 / FP4), proved equal to the exact
// sequence in that header and checked on the CPU by tests/test_cuda_quantize.py. The tensor and hgroup
// kernels (one scale per 8-element chunk) test the scale mode once per chunk and replace div.rn by
// the scale's reciprocal and two FMA corrections (codes8_uniform), and are compiled separately for
// FP8 so that the FP6 / FP4 rounding is not carried along; groups whose scale
// leaves the fast path's range (NaN / Inf / tiny scales, MX e = 127) and NaN elements take the exact
// path (encode_elem). Build with -DMXPREC_CUDA_QUANT_NO_CVT to replace the FP8 cvt by encode_rne.
// bf16 inputs: |x| keys are taken two elements at a time (max.u16x2), and MX FP6 / FP4 blocks in kMul
// mode are encoded two elements per instruction on the bf16 patterns (narrow2_bf16, exact because
// x * 2**-e is exact in bf16; checked for every bf16 value and scale on the CPU).
//
// Memory view: x (B, R, C) is a row-major (rows = B * R, cols = C) matrix for either axis. A group
// (one scale) is a gh x gw block of it: axis 2 row (1, C), tile (tr, tc), mx (1, block), nvfp4
// (1, 16); axis 1 row (R, 1), tile (tc, tr), mx (block, 1), nvfp4 (16, 1). Group (gr, gc) is scale
// element gr * (cols / gw) + gc, exactly the contract's scale array for both axes. FP4 / FP6 data
// are packed along the quantization axis: along cols for axis 2, along rows for axis 1.
//
// Kernels (256 threads; a thread "chunk" is 8 consecutive elements of a row, one 16-byte load for
// bf16 / f16, two for f32):
//   amax_kernel     grid-wide max |x| (tensor current scaling, NVFP4): each CTA reduces (redux.sync,
//                   shared memory) and does at most one atomicMax on the FP32 bits of the finished
//                   amax (canonical NaN 0x7FC00000 > Inf, so unsigned order == XLA's NaN-wins max),
//                   skipped when the global word is already larger (every kernel maxes its part of
//                   the tensor amax the same way);
//   onchip_kernel   tensor current scaling in one read of x where it fits on chip (a cooperative grid holds x in
//                   registers and shared memory across a grid barrier; the rest is read twice; bf16 codes by one
//                   multiply where the amax is certified, bf16_mul_certificate.h); amax_kernel +
//                   tensor_kernel where it does not apply (MXPREC_QUANTIZE_ONCHIP=0, unaligned or n % 8 != 0);
//   tensor_kernel   tensor / delayed: one cast pass (current: after amax_kernel; delayed and
//                   amax_mode 1: fused with the amax, one pass over x); an FP8 chunk whose first
//                   quotients all lie in the Markstein band skips the per-element checks;
//   hgroup_kernel   axis 2 groups of 1 x G contiguous elements, G / 8 a power of two <= 32 (mx, tile
//                   1 x tc, row with C <= 256): one pass, 4 chunks per thread; kWide (G >= 32):
//                   a thread's chunks lie in one group (one scale per thread, shuffles over G / 32
//                   lanes; FP8 groups in the Markstein band divide straight; a thread owning a whole group
//                   stores its codes in 16-byte stores), else one scale per chunk;
//   col_kernel      FP8 axis-1 groups of 32 / 64 / 128 rows x 1 column and 128 x 128 tiles on either
//                   axis, MX FP6 / FP4 axis-1 groups of 32 / 64 / 128 rows and NVFP4 axis-1 groups of
//                   16 rows, rows and cols multiples of 128: a 128 x 128 tile staged in shared memory
//                   (cp.async), a thread owns 2 columns x 32 rows, codes (packed down the columns for
//                   FP6 / FP4) leave through shared memory;
//                   taller column groups (row scaling along axis 1) read their keys from a keys pass;
//   tall_col_kernel row scaling along axis 1 on col_kernel's tiles in one launch: each 128-column strip of a
//                   group row is walked twice, keys then codes, in an order (tall_order.h) that keeps x in L2
//                   between the two reads (MXPREC_QUANTIZE_TALL=0: the keys pass + col_kernel);
//   nvfp4_row_kernel NVFP4 axis-2 groups (16 elements): a grid-stride loop over items of 4 consecutive chunks,
//                   two whole groups (one scale computation per group), codes in one 16-byte store; bf16 / f16 E2M1
//                   codes by comparing |x| with the group's 7 limits, two elements per instruction
//                   (nvfp4_codes_by_limits, also in col_kernel's NVFP4 path); f32 ones (and block scales
//                   outside [2**-124, 2**120]) through the reciprocal of the scale where a certificate shows
//                   they are the division's (nvfp4_codes8); the limits come from a per-CTA table indexed by the
//                   group's E4M3 scale byte (MXPREC_NVFP4_TABLE; col_kernel's NVFP4 path too);
//   nvfp4_onchip_kernel NVFP4 along rows (bf16 / f16) in one read of x where it fits on chip, onchip_kernel's plan
//                   in nvfp4_row_kernel's items (MXPREC_NVFP4_ONCHIP=0: amax_kernel + nvfp4_row_kernel);
//   row_kernel      FP8 axis-2 row groups of 257 .. 16384 elements: persistent CTAs of 128 threads x 4 /
//                   8 chunks or 512 x 4 that prefetch their next row into shared memory (cp.async) while
//                   they compute the current one (one pass);
//   cta_kernel      other axis-2 groups too large for a warp (longer rows, tile tr x tc): one CTA per
//                   group, up to 2048 chunks held in registers (one pass; larger groups re-read);
//   vgroup_kernel   other axis-1 groups (the non-contiguous axis, e.g. Wgrad's column-wise copy, where
//                   col_kernel does not apply; NVFP4, FP6 / FP4 of other shapes): a thread owns 8
//                   columns x 8 rows (eight 16-byte loads down a column strip, coalesced across the
//                   warp), TY threads stack along the group's rows, the per-column (or per-tile)
//                   amax meets in shared memory; one pass for groups of <= 128 rows; taller ones
//                   (row scaling along axis 1) need two passes: per-group keys over slabs of <= 1024
//                   rows (kVKeysOut, atomicMax into XLA scratch), then scales + codes (here or in
//                   col_kernel; x read twice);
//   generic_kernel  anything else (misaligned buffers, extents that are not multiples of 8, odd
//                   blocks): one thread per group, scalar loads, the exact functions.
// Axis 1 is quantized in place. The second handler, `mxprec_quantize_transposed` (MxprecQuantizeTransposedCuda),
// writes FP8 1 x G column groups as the QTensor of x's (B, C, R) transpose along its last axis (col_kernel
// kTransposed): Wgrad's K-major operands without a transpose of the codes.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <type_traits>

#include "bf16_mul_certificate.h"
#include "cuda_status.h"
#include "ffi_helpers.h"
#include "formats.h"
#include "fp8_codes.cuh"
#include "mbarrier.cuh"
#include "quantize.h"
#include "quantize_ffi.h"
#include "quantize_math.h"
#include "scaled_gemm.h"
#include "swiglu_math.cuh"
#include "tall_order.h"
#include "xla/ffi/api/ffi.h"

namespace mxprec {
namespace cuda_quantize {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;    // chunks per thread (amax / hgroup kernels)
#ifndef MXPREC_TENSOR_UNROLL
#define MXPREC_TENSOR_UNROLL 4
#endif
constexpr int kTensorUnroll = MXPREC_TENSOR_UNROLL;  // chunks per thread of tensor_kernel
constexpr int kCtaCache = 8;  // chunks per thread kept in registers by cta_kernel
constexpr int kCtaCacheSmall = 4;  // ... in its 64-register instances (groups of <= 1024 chunks)
constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr const char* kOp = "mxprec_quantize (CUDA)";

struct Args {
  const void* x;
  uint8_t* data;
  void* scale;
  uint32_t* amax;        // amax result as bits (zeroed first; atomicMax target)
  float* tensor_scale;   // result
  const float* scale_in;
  const float* amax_in;
  int64_t n;             // rows * cols
  int64_t rows, cols;    // memory view
  int64_t gh, gw;        // group extent (rows, cols)
  int64_t ngc;           // groups per group-row (cols / gw)
  int64_t ngroups;
  int32_t kind, fmt, rule, pow2, amode, delayed, axis;
  int32_t acc_amax;      // this kernel maxes the tensor amax into *amax
  int32_t tpg;           // hgroup: threads per group
  int32_t ty;            // vgroup: threads stacked along the group's rows
  int32_t vsteps;        // vgroup: 8 * ty-row steps per CTA
  int32_t vmode;         // vgroup: VMode
  uint32_t* keys;        // vgroup kVKeysOut / kVKeysIn: per-group max |x| keys (scratch)
  int32_t vec;           // tensor / amax kernels: x 16-byte aligned (chunks of 8 use vector loads)
  int64_t batch_rows;    // col_kernel kTransposed: R of x (B, R, C), the rows of one batch entry
  uint8_t* row_data;     // col_kernel kRows: x's own 1 x 128 row groups' codes (B, R, C) ...
  float* row_scale;      // ... and scales (B, R, C / 128)
  int32_t row_fmt, row_pow2;  // ... their FP8 format and power-of-two flag
};

// ------------------------------------------------------------------------------------ loads

template <InType I>
struct Raw {
  uint4 v[I == InType::kF32 ? 2 : 1];
};

template <InType I>
constexpr int64_t in_bytes() {
  return I == InType::kF32 ? 4 : 2;
}

// The chunk starting at element e (e % 8 == 0, x 16-byte aligned).
template <InType I>
__device__ __forceinline__ Raw<I> load_raw(const void* x, int64_t e) {
  Raw<I> r;
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(x) + e * in_bytes<I>());
#pragma unroll
  for (int i = 0; i < (I == InType::kF32 ? 2 : 1); ++i) r.v[i] = __ldg(p + i);
  return r;
}

__device__ __forceinline__ float f16_to_float(uint32_t h) {
  float f = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  // Keep a NaN's sign (the only NaN property that reaches a code); the amax is canonical anyway.
  if ((h & 0x7FFFu) > 0x7C00u) f = __uint_as_float(((h & 0x8000u) << 16) | kCanonicalNan);
  return f;
}

template <InType I>
__device__ __forceinline__ void to_f32(const Raw<I>& r, float (&v)[8]) {
  if constexpr (I == InType::kF32) {
    v[0] = __uint_as_float(r.v[0].x); v[1] = __uint_as_float(r.v[0].y);
    v[2] = __uint_as_float(r.v[0].z); v[3] = __uint_as_float(r.v[0].w);
    v[4] = __uint_as_float(r.v[1].x); v[5] = __uint_as_float(r.v[1].y);
    v[6] = __uint_as_float(r.v[1].z); v[7] = __uint_as_float(r.v[1].w);
  } else {
    const uint32_t w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (I == InType::kBF16) {
        v[2 * j] = __uint_as_float(w[j] << 16);
        v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
      } else {
        v[2 * j] = f16_to_float(w[j] & 0xFFFFu);
        v[2 * j + 1] = f16_to_float(w[j] >> 16);
      }
    }
  }
}

// Flat chunk k of an n-element array: vector load when aligned and whole, else scalar (zeros past n).
template <InType I>
__device__ __forceinline__ void load_flat(const Args& a, int64_t k, float (&v)[8]) {
  const int64_t e0 = k * 8;
  if (a.vec && e0 + 8 <= a.n) {
    to_f32<I>(load_raw<I>(a.x, e0), v);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (e0 + i < a.n) ? load_in<I>(a.x, e0 + i) : 0.0f;
  }
}

// |x| keys of bf16 data two elements at a time: a "key2" holds the max 16-bit magnitude of each lane;
// key2_finish gives the FP32 key (abs_key of the FP32 value, i.e. bf16 bits << 16) of both lanes, the
// same as chunk_key over the FP32 conversions.
__device__ __forceinline__ uint32_t max_abs_pair(const uint4& w) {  // lane-wise max 16-bit magnitude (bf16 / f16)
  return max_u16x2(max_u16x2(w.x & 0x7FFF7FFFu, w.y & 0x7FFF7FFFu), max_u16x2(w.z & 0x7FFF7FFFu, w.w & 0x7FFF7FFFu));
}
__device__ __forceinline__ uint32_t bf16_key2(const Raw<InType::kBF16>& r) { return max_abs_pair(r.v[0]); }
__device__ __forceinline__ uint32_t key2_finish(uint32_t k2) { return max(k2 << 16, k2 & 0xFFFF0000u); }

template <int kN>
__device__ __forceinline__ uint32_t bf16_chunks_key(const Raw<InType::kBF16> (&raw)[kN]) {
  uint32_t k2 = 0;
#pragma unroll
  for (int j = 0; j < kN; ++j) k2 = max_u16x2(k2, bf16_key2(raw[j]));
  return key2_finish(k2);
}

// CTA max of raw keys, then amax_update by thread 0 (fp8_codes.cuh's cta_amax). Every thread of the CTA must
// call it (it synchronizes).
template <int kBlock = kThreads>
__device__ __forceinline__ void block_amax(uint32_t* amax, uint32_t key) {
  const uint32_t keys[1] = {key};
  cta_amax<kBlock, 1>(amax, keys);
}

// ------------------------------------------------------------------------------------ codes

template <ElemFormat F>
__device__ __forceinline__ uint32_t narrow4_of(float a, float b, float c, float d) {
  return encode_rne(a, F) | (encode_rne(b, F) << 8) | (encode_rne(c, F) << 16) |
         (static_cast<uint32_t>(encode_rne(d, F)) << 24);
}

// FP6 / FP4 codes of 4 values by encode_rne, with the format a compile-time constant in each case (its
// FormatInfo folds into immediates: fewer registers and instructions than one body for every format).
__device__ __forceinline__ uint32_t narrow4(float a, float b, float c, float d, ElemFormat f) {
  switch (f) {
    case ElemFormat::kE2M3: return narrow4_of<ElemFormat::kE2M3>(a, b, c, d);
    case ElemFormat::kE3M2: return narrow4_of<ElemFormat::kE3M2>(a, b, c, d);
    default: return narrow4_of<ElemFormat::kE2M1>(a, b, c, d);
  }
}

// MX FP6 / FP4 codes (byte i = code i) of kUnroll bf16 chunks of one block in kMul mode, by the bf16-pair
// encoder (narrow2_bf16: two elements per 32-bit instruction, no FP32 conversion); p2 = the block's 2**-e in
// both bf16 lanes. Equal to codes8_uniform's (cuda_quantize_host_test.cc checks every bf16 value and scale).
template <ElemFormat F, int kN>
__device__ __forceinline__ void narrow_chunks_bf16_of(const Raw<InType::kBF16> (&raw)[kN], uint32_t p2, uint2 (&c)[kN]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const uint4 w = raw[j].v[0];
    const uint32_t c0 = narrow2_bf16<F>(w.x, p2), c1 = narrow2_bf16<F>(w.y, p2);
    const uint32_t c2 = narrow2_bf16<F>(w.z, p2), c3 = narrow2_bf16<F>(w.w, p2);
    c[j] = make_uint2(__byte_perm(c0, c1, 0x6420), __byte_perm(c2, c3, 0x6420));
  }
}
template <int kN>
__device__ __forceinline__ void narrow_chunks_bf16(const Raw<InType::kBF16> (&raw)[kN], uint32_t p2, ElemFormat f,
                                                   uint2 (&c)[kN]) {
  switch (f) {
    case ElemFormat::kE2M3: narrow_chunks_bf16_of<ElemFormat::kE2M3>(raw, p2, c); break;
    case ElemFormat::kE3M2: narrow_chunks_bf16_of<ElemFormat::kE3M2>(raw, p2, c); break;
    default: narrow_chunks_bf16_of<ElemFormat::kE2M1>(raw, p2, c); break;
  }
}

// The same for col_kernel: 4 rows of a column pair (words w[j] = row j's two bf16 elements), each column
// under its own block scale (lane i of p2 = column i's 2**-e). Returns each column's 4 codes, row j in
// byte j: x = column 0, y = column 1.
template <ElemFormat F>
__device__ __forceinline__ uint2 narrow_rows4_bf16_of(const uint32_t (&w)[4], uint32_t p2) {
  const uint32_t c0 = narrow2_bf16<F>(w[0], p2), c1 = narrow2_bf16<F>(w[1], p2);
  const uint32_t c2 = narrow2_bf16<F>(w[2], p2), c3 = narrow2_bf16<F>(w[3], p2);
  const uint32_t t01 = __byte_perm(c0, c1, 0x6240), t23 = __byte_perm(c2, c3, 0x6240);  // col 0 rows, col 1 rows
  return make_uint2(__byte_perm(t01, t23, 0x5410), __byte_perm(t01, t23, 0x7632));
}

// The exact code of an element the fast path does not cover (NaN elements, exact modes): rare, so
// one out-of-line copy keeps the kernels small.
__device__ __noinline__ uint32_t slow_code(float x, ElemScale s, ElemFormat f) { return encode_elem(x, s, f); }

// Packs the codes of 8 scaled values q (byte i = element i): FP8 by the hardware convert, FP6 / FP4 by
// bit rounding; the elements flagged in `special` (NaN results, exact modes) take the exact path on x.
template <bool kFp8, class ScaleAt>
__device__ __forceinline__ uint2 pack_codes8(const float (&q)[8], const float (&x)[8], uint32_t special, ScaleAt sat,
                                             ElemFormat f) {
  uint2 c;
  if (kFp8 || f == ElemFormat::kE4M3 || f == ElemFormat::kE5M2) {
    const bool e5 = f == ElemFormat::kE5M2;
    c.x = fp8x4(q[0], q[1], q[2], q[3], e5);
    c.y = fp8x4(q[4], q[5], q[6], q[7], e5);
  } else if constexpr (!kFp8) {
    c.x = narrow4(q[0], q[1], q[2], q[3], f);
    c.y = narrow4(q[4], q[5], q[6], q[7], f);
  }
  if (special != 0u) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if ((special >> i) & 1u) {
        const uint32_t code = slow_code(x[i], sat(i), f);
        uint32_t& w = i < 4 ? c.x : c.y;
        const int sh = 8 * (i & 3);
        w = (w & ~(0xFFu << sh)) | (code << sh);
      }
    }
  }
  return c;
}

// Codes of 8 elements (byte i of the result = element i), element i under scale sat(i). kFp8: the
// caller guarantees f is E4M3 or E5M2, so the FP6 / FP4 bit-rounding path is not compiled in (the
// generic body carried both, and the compiler predicated them: the tensor kernel was instruction-bound).
template <bool kFp8 = false, class ScaleAt>
__device__ __forceinline__ uint2 codes8(const float (&x)[8], ScaleAt sat, ElemFormat f) {
  float q[8];
  uint32_t special = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const ElemScale s = sat(i);
    if (is_fast_mode(s.mode)) {
      if (s.mode == ElemMode::kDiv) {
        q[i] = __fdiv_rn(x[i], s.p);
      } else {
        q[i] = __fmul_rn(s.mode == ElemMode::kMulDaz ? flush_denormal(x[i]) : x[i], s.p);
      }
      if (q[i] != q[i]) special |= 1u << i;  // a NaN element: its code carries x's sign
    } else {
      q[i] = 0.0f;
      if (s.mode != ElemMode::kZero) special |= 1u << i;
    }
  }
  return pack_codes8<kFp8>(q, x, special, sat, f);
}

// The reciprocal division below: RN(1 / s) for a kDiv scale with 2**-80 <= |s| < 2**102, else 0 (use
// div.rn). Below 2**-80 a quotient that reaches an FP8 code could need a subnormal remainder; from
// 2**126 on 1 / s is subnormal. The upper bound stops at 2**102, the largest scales the H200 run
// checked bit for bit (tests/test_cuda_quantize.py: 3e30 and tile scales up to 2**101); no real
// tensor has an amax near 2**110.
__device__ __forceinline__ float recip_of_divisor(ElemScale s) {
  const float m = fabsf(s.p);
  return (s.mode == ElemMode::kDiv && m >= 0x1p-80f && m < 0x1p102f) ? __frcp_rn(s.p) : 0.0f;
}

// Quotients of 8 elements by fast scales: q = x * p(i) (kMul), or with div (kDiv, every r(i) = RN(1 / p(i))
// nonzero) Markstein's division: q0 = x * r, then twice q += fma(-q, p, x) * r (each a single-rounding
// FMA). The second correction starts from a faithful q1 with an exact remainder, so it returns RN(x / p)
// (Markstein's theorem; r is RN(1 / p), p in [2**-80, 2**102)) whenever 2**-20 <= |q0| <= 2**20.
// Outside that band q0 is kept: every FP8 code of it is the same as of RN(x / p) (±0 below 2**-17,
// ±max_finite above 57344 after the saturating convert), and NaN / Inf elements stay NaN / Inf.
// Equal to div.rn.f32 for every input reaching a code (tests/test_cuda_quantize.py, division cases).
template <class PAt, class RAt>
__device__ __forceinline__ void fast_quotients(const float (&x)[8], bool div, PAt p, RAt r, float (&q)[8]) {
  if (!div) {  // one branch per chunk, straight-line loops below
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = __fmul_rn(x[i], p(i));
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float q0 = __fmul_rn(x[i], r(i));
      const float q1 = __fmaf_rn(__fmaf_rn(-q0, p(i), x[i]), r(i), q0);
      const float q2 = __fmaf_rn(__fmaf_rn(-q1, p(i), x[i]), r(i), q1);
      const float m = fabsf(q0);
      q[i] = (m >= 0x1p-20f && m <= 0x1p20f) ? q2 : q0;
    }
  }
}

// Bit i set where q[i] is NaN (a NaN element: its code carries x's sign, the exact path gives it).
__device__ __forceinline__ uint32_t nan_mask(const float (&q)[8]) {
  uint32_t special = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (q[i] != q[i]) special |= 1u << i;
  }
  return special;
}

// Whether in_band_fp8_codes8 serves elements whose largest |x| key is kmax under a kDiv scale with reciprocal
// r > 0: no NaN, and every first quotient q0 = RN(x * r) within |q0| <= 2**20 (RN(|x| * r) is monotone in |x|,
// so kmax bounds them all). Small quotients need no lower bound (see in_band_fp8_codes8). The bound used to be
// 2**-20 <= |q0| too, checked on the chunk's smallest |x|: one exact zero or tiny element sent the whole chunk
// to the per-element path (1 % zeros: the 1 x 128 column kernel at 45.4 % of copy, 65.7 % without the bound;
// H200, 16384 x 14336 bf16). A negative scale (a delayed scale can be any float) takes the per-element path.
__device__ __forceinline__ bool markstein_band(ElemScale es, float r, uint32_t kmax) {
  if (es.mode != ElemMode::kDiv || !(r > 0.0f) || kmax > 0x7F800000u) return false;
  return __fmul_rn(__uint_as_float(kmax), r) <= 0x1p20f;
}
// The same test for a divisor / reciprocal pair from band_operands (below), whose reciprocal is 0 unless it divides.
// (markstein_band keeps its own body: written through this helper, ptxas scheduled the tensor and group kernels
// differently, and the tensor kernel measured 333 -> 342 us at 16384 x 14336 on the H200.)
__device__ __forceinline__ bool band_admits(float r, uint32_t kmax) {
  if (!(r > 0.0f) || kmax > 0x7F800000u) return false;
  return __fmul_rn(__uint_as_float(kmax), r) <= 0x1p20f;
}

// The divisor (x) and reciprocal (y) in_band_fp8_codes8 divides by under a scale: a kDiv scale's (s, r) (r from
// recip_of_divisor); a power-of-two scale (kMul, multiplier p = 2**-k) divides the same way through (2**k, p), both
// exact, so q0 = RN(x * p) is the multiply's quotient and x / 2**k is the IEEE quotient the band's proof is about;
// other modes (and 2**k outside [2**-80, 2**102)) get reciprocal 0, which band_admits refuses. For col_kernel, whose
// column pairs may mix the two modes: a tile scale amax / 448 is a power of two whenever a bf16 amax is 7 * 2**k
// (~1 column in 128 of f32-drawn normal data), and a mixed pair had taken the per-element path (IEEE division per
// element) while its warp waited.
__device__ __forceinline__ float2 band_operands(ElemScale es, float r) {
  if (es.mode == ElemMode::kMul) {
    const float d = __frcp_rn(es.p);
    return make_float2(d, d >= 0x1p-80f && d < 0x1p102f ? es.p : 0.0f);
  }
  return make_float2(es.p, es.mode == ElemMode::kDiv ? r : 0.0f);
}

// FP8 codes of 8 elements that markstein_band admitted (r > 0), by markstein_steps. Where 2**-20 <= |q0| the
// second quotient is RN(x / p); below, the quotient is far under half the smallest FP8 subnormal (2**-17 for
// E5M2), so the code is a signed zero whatever the quotient's digits, and its sign is x's
// (tests/test_cuda_quantize.py proves the codes on the CPU for every element with |q0| <= 2**20).
// fast_quotients' per-element band test and NaN bookkeeping (~5 instructions per element) are skipped.
template <class PAt, class RAt>
__device__ __forceinline__ uint2 in_band_fp8_codes8(const float (&x)[8], PAt p, RAt r, bool e5m2) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q[i] = markstein_steps(x[i], __fmul_rn(x[i], r(i)), p(i), r(i));
  }
  return make_uint2(fp8x4(q[0], q[1], q[2], q[3], e5m2), fp8x4(q[4], q[5], q[6], q[7], e5m2));
}

// FP8 codes of 8 elements by one multiply each, q = RN(x * r): only where bf16_mul_exact proved them equal to the
// codes of RN(x / s) (r = RN(1 / s), x bf16 with |x| <= the certified amax).
__device__ __forceinline__ uint2 mul_fp8_codes8(const float (&x)[8], float r, bool e5m2) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = __fmul_rn(x[i], r);
  return make_uint2(fp8x4(q[0], q[1], q[2], q[3], e5m2), fp8x4(q[4], q[5], q[6], q[7], e5m2));
}

// Which fast_quotients form serves n per-column scales sat(c) with reciprocals rat(c): kColsMul every
// scale kMul, kColsDiv every scale kDiv with a reciprocal, kColsGeneric neither (mixed / exact / zero
// modes: codes8 per element).
enum ColsForm : int { kColsGeneric = 0, kColsMul = 1, kColsDiv = 2 };

template <int N, class ScaleAt, class RecipAt>
__device__ __forceinline__ int cols_form(ScaleAt sat, RecipAt rat) {
  bool mul = true, div = true;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    mul = mul && sat(c).mode == ElemMode::kMul;
    div = div && sat(c).mode == ElemMode::kDiv && rat(c) != 0.0f;
  }
  return mul ? kColsMul : (div ? kColsDiv : kColsGeneric);
}

// Codes of 8 elements, element i under sat(i) with rat(i) = recip_of_divisor(sat(i)), in the form
// cols_form chose for those scales.
template <bool kFp8, class ScaleAt, class RecipAt>
__device__ __forceinline__ uint2 codes8_cols(const float (&x)[8], ScaleAt sat, RecipAt rat, int form, ElemFormat f) {
  if (form == kColsGeneric) return codes8<kFp8>(x, sat, f);
  float q[8];
  fast_quotients(x, form == kColsDiv, [&sat](int i) { return sat(i).p; }, rat, q);
  return pack_codes8<kFp8>(q, x, nan_mask(q), sat, f);
}

// Codes of 8 elements by fast_quotients under one scale (a kMul scale, or kDiv with its reciprocal).
template <bool kFp8>
__device__ __forceinline__ uint2 quotient_codes8(const float (&x)[8], ElemScale es, float r, ElemFormat f) {
  return codes8_cols<kFp8>(x, [es](int) { return es; }, [r](int) { return r; },
                           es.mode == ElemMode::kDiv ? kColsDiv : kColsMul, f);
}

// The FP8 division of a kDiv chunk outside the Markstein band (a NaN in its group, a negative scale, or
// quotients above 2**20 under a given amax): out of line, so that the common path keeps its registers.
struct Chunk8 {
  float v[8];
};
__device__ __noinline__ uint2 out_of_band_fp8_codes8(Chunk8 x, ElemScale es, float r, ElemFormat f) {
  return quotient_codes8<true>(x.v, es, r, f);
}

// Codes of 8 elements under one scale (tensor / hgroup / cta / row kernels, one group per chunk): the scale
// mode is tested once per chunk, not per element; a kDiv scale with a reciprocal r = RN(1 / s) divides
// through fast_quotients.
// kBand (the group kernels): `band` is markstein_band of the chunk's group (decided once per group from its max
// key), and an FP8 kDiv chunk takes in_band_fp8_codes8 inline when it holds, out_of_band_fp8_codes8 when not.
// That replaced an FP8 code certificate (one multiply, then integer tests on q0's bits for a code change within
// 4 bit-steps; a refused chunk divided per element): on the H200, 16384 x 14336 bf16, 1 x 128 tiles along rows
// 61.4 / 61.7 / 53.4 -> 85.9 / 85.9 / 85.6 % of copy (normal / 1 % zeros / lognormal inputs), row scaling
// 59.2 / 59.4 / 48.7 -> 72.9 / 73.0 / 73.0 % (same call; the certificate refused FP8-subnormal quotients).
template <bool kFp8, bool kBand = false>
__device__ __forceinline__ uint2 codes8_uniform(const float (&x)[8], ElemScale es, float r, ElemFormat f,
                                                bool band = false) {
  if (es.mode != ElemMode::kMul && !(es.mode == ElemMode::kDiv && r != 0.0f)) {
    return codes8<kFp8>(x, [es](int) { return es; }, f);
  }
  if constexpr (kFp8 && kBand) {
    if (band) return in_band_fp8_codes8(x, [&es](int) { return es.p; }, [r](int) { return r; }, f == ElemFormat::kE5M2);
    if (es.mode == ElemMode::kDiv) {
      Chunk8 xv;
#pragma unroll
      for (int i = 0; i < 8; ++i) xv.v[i] = x[i];
      return out_of_band_fp8_codes8(xv, es, r, f);
    }
  }
  return quotient_codes8<kFp8>(x, es, r, f);
}

// Four six-bit codes (byte i of w = code i) as 24 bits, code i at bits 6i .. 6i + 5.
__device__ __forceinline__ uint32_t pack6x4(uint32_t w) {
  return (w & 0x3Fu) | (((w >> 8) & 0x3Fu) << 6) | (((w >> 16) & 0x3Fu) << 12) | (((w >> 24) & 0x3Fu) << 18);
}

// The 8 six-bit codes of a chunk (byte i of c = code i) as 48 bits, code i at bits 6i .. 6i + 5.
__device__ __forceinline__ uint64_t pack6(uint2 c) {
  return static_cast<uint64_t>(pack6x4(c.x)) | (static_cast<uint64_t>(pack6x4(c.y)) << 24);
}

// Eight four-bit codes (byte i of lo = code i, byte i of hi = code 4 + i) in 4 bytes, two per byte, the
// lower-numbered code in the low nibble.
__device__ __forceinline__ uint32_t pack4x8(uint32_t lo, uint32_t hi) {
  return __byte_perm(lo | (lo >> 4), hi | (hi >> 4), 0x6420);
}

// Stores 8 codes packed along the chunk (axis 2): FP8 8 bytes, FP6 6, FP4 4 at chunk k.
__device__ __forceinline__ void store_chunk(uint8_t* data, int64_t k, uint2 c, int bits) {
  if (bits == 8) {
    *reinterpret_cast<uint2*>(data + k * 8) = c;
  } else if (bits == 4) {
    *reinterpret_cast<uint32_t*>(data + k * 4) = pack4x8(c.x, c.y);
  } else {
    const uint64_t b = pack6(c);
    uint16_t* p = reinterpret_cast<uint16_t*>(data + k * 6);
    p[0] = static_cast<uint16_t>(b);
    p[1] = static_cast<uint16_t>(b >> 16);
    p[2] = static_cast<uint16_t>(b >> 32);
  }
}

// Stores the codes of 4 consecutive chunks k0 .. k0 + 3 (k0 % 4 == 0, data 16-byte aligned) with the
// widest stores: FP8 two 16-byte stores, FP4 one, FP6 three 8-byte ones.
__device__ __forceinline__ void store_run4(uint8_t* data, int64_t k0, const uint2 (&c)[4], int bits) {
  static_assert(kUnroll == 4, "store_run4 stores one thread's kUnroll chunks");
  if (bits == 8) {
    uint4* p = reinterpret_cast<uint4*>(data + k0 * 8);
    p[0] = make_uint4(c[0].x, c[0].y, c[1].x, c[1].y);
    p[1] = make_uint4(c[2].x, c[2].y, c[3].x, c[3].y);
  } else if (bits == 4) {
    *reinterpret_cast<uint4*>(data + k0 * 4) =
        make_uint4(pack4x8(c[0].x, c[0].y), pack4x8(c[1].x, c[1].y), pack4x8(c[2].x, c[2].y), pack4x8(c[3].x, c[3].y));
  } else {  // 6 bits: 4 chunks = 24 bytes, chunk j's 48 bits (pack6) at bits 48 j of the little-endian run
    const uint64_t b[4] = {pack6(c[0]), pack6(c[1]), pack6(c[2]), pack6(c[3])};
    uint64_t* p = reinterpret_cast<uint64_t*>(data + k0 * 6);
    p[0] = b[0] | (b[1] << 48);
    p[1] = (b[1] >> 16) | (b[2] << 32);
    p[2] = (b[2] >> 32) | (b[3] << 16);
  }
}

// ------------------------------------------------------------------------------------ group scales

// NVFP4 tensor scale as the kernels see it: from amax_in (amax_mode 1) or the amax pass's result.
__device__ __forceinline__ float nvfp4_ts(const Args& a) {
  return nvfp4_tensor_scale(a.amode == 1 ? *a.amax_in : __uint_as_float(*a.amax));
}

// MX scale of group g from its local raw key: writes the E8M0 byte when `write`.
__device__ __forceinline__ ElemScale mx_group_elem_scale(const Args& a, int64_t g, uint32_t key, bool write) {
  const MxScale m = mx_block_scale(__uint_as_float(finish_key(key)), static_cast<ElemFormat>(a.fmt),
                                   static_cast<ScaleRule>(a.rule));
  if (write) static_cast<uint8_t*>(a.scale)[g] = m.byte;
  return mx_elem_scale(m);
}

// Scale of group g from its local raw key: writes the scale element when `write`.
__device__ __forceinline__ ElemScale group_elem_scale(const Args& a, int64_t g, uint32_t key, float ts, bool write) {
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const float local = __uint_as_float(finish_key(key));
  switch (static_cast<ScalingKind>(a.kind)) {
    case ScalingKind::kMX:
      return mx_group_elem_scale(a, g, key, write);
    case ScalingKind::kNVFP4: {
      const Nvfp4Scale b = nvfp4_block_scale(local, ts);
      if (write) static_cast<uint8_t*>(a.scale)[g] = b.byte;
      return nvfp4_elem_scale(b);
    }
    default: {  // row / tile
      const float amax = a.amode == 2 ? a.amax_in[g] : local;
      const float s = group_scale(amax, f, a.kind == static_cast<int32_t>(ScalingKind::kTile) && a.pow2 != 0);
      if (write) static_cast<float*>(a.scale)[g] = s;
      return scaled_elem_scale(s);
    }
  }
}

// nvfp4_block_scale with s_b rounded onto the E4M3 grid by the hardware convert (cvt.rn.satfinite: RNE, and
// t > 448 -> 448, which is xla_min(t, 448) then round_to_grid) and read back exactly through f16: the same s_b,
// code and eff for every finite t (t >= +0: amax is finished, ts > 0; a denormal t was flushed to +0 by
// div_f32). t = RN(RN(amax / 6) / ts) comes from one multiply by bm = nvfp4_block_multiplier(ts) where
// nvfp4_block_certified allows it (quantize_math.h), else from the two divisions. A NaN / Inf t (NaN / Inf amax)
// takes the exact function.
// Split in two for the limit table below: nvfp4_block_byte gives the E4M3 byte (-1 where t is NaN / Inf: the caller
// takes the exact function), nvfp4_scale_of_byte the Nvfp4Scale of a byte under ts.
__device__ __forceinline__ int nvfp4_block_byte(float amax, float ts, float bm) {
  float t = __fmul_rn(amax, bm);
  if (!nvfp4_block_certified(amax, t)) t = div_f32(div_f32(amax, 6.0f), ts);
  if (!isfinite(t)) return -1;
  unsigned short code2;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(code2) : "f"(t), "f"(0.0f));  // code in the low byte
  return code2 & 0xFF;
}
__device__ __forceinline__ Nvfp4Scale nvfp4_scale_of_byte(int byte, float ts) {
  unsigned short h2;
  asm("{ .reg .b32 p; cvt.rn.f16x2.e4m3x2 p, %1; mov.b32 {%0, _}, p; }" : "=h"(h2) : "h"(static_cast<unsigned short>(byte)));
  const float sb = __half2float(__ushort_as_half(h2));
  return Nvfp4Scale{sb, mul_f32(sb, ts), static_cast<uint8_t>(byte)};
}
__device__ __forceinline__ Nvfp4Scale nvfp4_block_scale_cvt(float amax, float ts, float bm) {
  const int byte = nvfp4_block_byte(amax, ts, bm);
  return byte < 0 ? nvfp4_block_scale(amax, ts) : nvfp4_scale_of_byte(byte, ts);
}

// NVFP4's block scale for a group with raw max |x| key `key` under the tensor scale ts, bm =
// nvfp4_block_multiplier(ts) (nvfp4_block_scale_cvt); its E4M3 byte goes to scale[i].
__device__ __forceinline__ Nvfp4Scale nvfp4_group_block(uint32_t key, float ts, float bm, uint8_t* scale, int64_t i) {
  const Nvfp4Scale b = nvfp4_block_scale_cvt(__uint_as_float(finish_key(key)), ts, bm);
  scale[i] = b.byte;
  return b;
}

// NVFP4 codes of 16-bit inputs by comparison with the group's limits (quantize_math.h, "NVFP4 codes by limits"),
// for a block scale eff where nvfp4_limits_apply: lane i of each limit word is nvfp4_limit16 of lane i's group.
template <InType I>
__device__ __forceinline__ uint32_t nvfp4_limit16_of(float eff, int k) {
  return nvfp4_limit16<I>(nvfp4_limit(eff, k));
}
// The limit table (MXPREC_NVFP4_TABLE, default 1): a tensor has one ts, so a group's limits are a function of its
// E4M3 block-scale byte alone. Entry b holds the 7 limit words nvfp4_limit16_of(eff_b, k) * 0x10001 (both lanes) and,
// in word 7, whether nvfp4_limits_apply(eff_b), eff_b = nvfp4_scale_of_byte(b, ts).eff: what a group with that byte
// would compute (byte 0: eff 0, 0x7F: NaN, both not applying). A CTA fills it once (kNvfp4TableEntries threads), then
// each group reads its 32 bytes (two 16-byte shared loads) instead of 7 FP64 products, 7 conversions to FP32 rounding
// up and their 16-bit roundings.
#ifndef MXPREC_NVFP4_TABLE
#define MXPREC_NVFP4_TABLE 1
#endif
constexpr int kNvfp4TableEntries = 128;
struct alignas(16) Nvfp4Limits {
  uint4 lo, hi;  // limit words 0..3, then 4..6 and the apply flag
};
template <InType I>
__device__ __forceinline__ void nvfp4_fill_limits(Nvfp4Limits* table, float ts) {
  static_assert(I != InType::kF32, "16-bit inputs");
  if (threadIdx.x < kNvfp4TableEntries) {
    const float eff = nvfp4_scale_of_byte(static_cast<int>(threadIdx.x), ts).eff;
    uint32_t w[8] = {};
    if (nvfp4_limits_apply(eff)) {
#pragma unroll
      for (int k = 0; k < 7; ++k) w[k] = nvfp4_limit16_of<I>(eff, k) * 0x10001u;
      w[7] = 1u;
    }
    table[threadIdx.x] = Nvfp4Limits{make_uint4(w[0], w[1], w[2], w[3]), make_uint4(w[4], w[5], w[6], w[7])};
  }
}
// Entry `byte` (0..127) of the table: its 7 limit words and whether they apply.
__device__ __forceinline__ bool nvfp4_table_limits(const Nvfp4Limits* table, int byte, uint32_t (&lim)[7]) {
  const Nvfp4Limits t = table[byte];
  lim[0] = t.lo.x, lim[1] = t.lo.y, lim[2] = t.lo.z, lim[3] = t.lo.w, lim[4] = t.hi.x, lim[5] = t.hi.y, lim[6] = t.hi.z;
  return t.hi.w != 0u;
}

// The paired form of the codes by limits (nvfp4_row_item's kPaired: nvfp4_onchip_kernel's codes). Elements i and
// i + 1 of a chunk are counted into one accumulator lane at weights 1 and 16 (the lane type's smallest subnormal times
// 1 and 16; the sum, at most 0x77, stays subnormal and exact), so that the lane's low byte ends as their two nibbles:
// the packing is one byte permute, and the signs join at the end from the words' high bytes (7 instructions fewer per
// chunk). nvfp4_pairs first puts (e0, e2), (e1, e3), (e4, e6), (e5, e7) in one word each. H100, bf16 (calls 4 and 6
// of h100_nvfp4_onchip.md): nvfp4_onchip_kernel 31.9 -> 31.1 us at 4096 x 4096 (30.8 with the split chains below);
// nvfp4_row_kernel 113.2 -> 113.8 us at 16384 x 4096 (113.5 with them), so that one keeps the unpaired form.
__device__ __forceinline__ uint4 nvfp4_pairs(const uint4& w) {
  return make_uint4(__byte_perm(w.x, w.y, 0x5410), __byte_perm(w.x, w.y, 0x7632), __byte_perm(w.z, w.w, 0x5410),
                    __byte_perm(w.z, w.w, 0x7632));
}
// Lane i: #{k : |lo_i| >= lim_k} + 16 #{k : |hi_i| >= lim_k} (lo, hi: magnitudes, NaN-free).
template <InType I>
__device__ __forceinline__ uint32_t nvfp4_count_pair(uint32_t lo, uint32_t hi, const uint32_t (&lim)[7]) {
  uint32_t acc = 0, acc_hi = 0, one;  // two chains of 7 FMAs (one of 14: 1.3 % slower at 4096 x 4096, H100)
#pragma unroll
  for (int k = 0; k < 7; ++k) {
    if constexpr (I == InType::kBF16) {
      asm("set.ge.bf16x2.bf16x2 %0, %1, %2;" : "=r"(one) : "r"(lo), "r"(lim[k]));
      asm("fma.rn.bf16x2 %0, %1, %2, %0;" : "+r"(acc) : "r"(one), "r"(0x00010001u));
      asm("set.ge.bf16x2.bf16x2 %0, %1, %2;" : "=r"(one) : "r"(hi), "r"(lim[k]));
      asm("fma.rn.bf16x2 %0, %1, %2, %0;" : "+r"(acc_hi) : "r"(one), "r"(0x00100010u));
    } else {
      asm("set.ge.f16x2.f16x2 %0, %1, %2;" : "=r"(one) : "r"(lo), "r"(lim[k]));
      asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(acc) : "r"(one), "r"(0x00010001u));
      asm("set.ge.f16x2.f16x2 %0, %1, %2;" : "=r"(one) : "r"(hi), "r"(lim[k]));
      asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(acc_hi) : "r"(one), "r"(0x00100010u));
    }
  }
  return acc | acc_hi;  // (bits 0-2 and 4-6 of each lane)
}
// Eight codes (element i in nibble i) of one 16-bit chunk from its nvfp4_pairs p, under the limits lim.
template <InType I>
__device__ __forceinline__ uint32_t nvfp4_paired_by_limits(const uint4& p, const uint32_t (&lim)[7]) {
  const uint32_t a = nvfp4_count_pair<I>(p.x & 0x7FFF7FFFu, p.y & 0x7FFF7FFFu, lim);  // e0 | e1 << 4, e2 | e3 << 4
  const uint32_t b = nvfp4_count_pair<I>(p.z & 0x7FFF7FFFu, p.w & 0x7FFF7FFFu, lim);  // e4 | e5 << 4, e6 | e7 << 4
  const uint32_t even = __byte_perm(p.x, p.z, 0x7531), odd = __byte_perm(p.y, p.w, 0x7531);  // byte j: e2j / e2j+1's top
  return __byte_perm(a, b, 0x6420) | ((even >> 4) & 0x08080808u) | (odd & 0x80808080u);
}

// Eight codes (element i in nibble i) of one 16-bit chunk whose elements share the limits lim.
template <InType I>
__device__ __forceinline__ uint32_t nvfp4_chunk_by_limits(const uint4& w, const uint32_t (&lim)[7]) {
  return nvfp4_pack_pairs(nvfp4_codes_by_limits<I>(w.x, lim), nvfp4_codes_by_limits<I>(w.y, lim),
                          nvfp4_codes_by_limits<I>(w.z, lim), nvfp4_codes_by_limits<I>(w.w, lim));
}

// Max |x| raw key (abs_key of the FP32 value) of 16-bit words: the lanes' max pattern, converted; the same as
// chunk_key over the FP32 conversions (non-negative patterns order as their values, NaN above Inf).
template <InType I>
__device__ __forceinline__ uint32_t key16(uint32_t max_abs_pair) {
  if constexpr (I == InType::kBF16) {
    return key2_finish(max_abs_pair);
  } else {
    return max(abs_key(f16_to_float(max_abs_pair & 0xFFFFu)), abs_key(f16_to_float(max_abs_pair >> 16)));
  }
}

// NVFP4's E2M1 codes through the reciprocal, certified by e2m1_near_boundary (quantize_math.h): Markstein's division
// (four FMAs and a band test per element) only for the chunks the certificate refuses. A group's operands: the
// multiplier m (its kMul scale's p, q0 = x * p exact; its kDiv scale's r = RN(1 / s), recip_of_divisor nonzero; 0 for
// kZero, whose codes the caller masks to 0: the reference gives 0, not -0) and the divisor d of the division (1 / p,
// exact; s; 0). nvfp4_has_multiplier is false for the other modes (kDiv outside [2**-80, 2**102), kExactDiv): the
// caller divides exactly.
__device__ __forceinline__ bool nvfp4_has_multiplier(ElemScale es, float r) {
  return es.mode == ElemMode::kMul || es.mode == ElemMode::kZero || (es.mode == ElemMode::kDiv && r != 0.0f);
}
__device__ __forceinline__ float nvfp4_multiplier(ElemScale es, float r) {
  return es.mode == ElemMode::kMul ? es.p : (es.mode == ElemMode::kZero ? 0.0f : r);
}
__device__ __forceinline__ float nvfp4_divisor(ElemScale es) {
  return es.mode == ElemMode::kMul ? __frcp_rn(es.p) : es.p;
}
// Byte mask of a chunk's codes under one scale (all) / a column pair's (even elements column 0): 0 for kZero.
__device__ __forceinline__ uint32_t nvfp4_keep(ElemScale es, uint32_t lanes) {
  return es.mode == ElemMode::kZero ? 0u : lanes;
}

// E2M1 codes (byte i = element i) of 8 elements, element i under multiplier m(i) and divisor d(i): q0 = RN(x * m);
// if e2m1_near_boundary refuses one (on normal data about one chunk in 100, mostly elements equal to the tensor
// amax times a power of two: exact midpoints and grid points), every element of the chunk takes
// markstein_steps, which give RN(x / d) where 2**-20 <= |q0| <= 2**20 (outside, q0 is kept:
// the same code). Then encode_rne of each quotient by the bf16-pair encoder on its round-to-odd bf16 pattern
// (ro_bf16x2), two elements per instruction.
template <class MAt, class DAt>
__device__ __forceinline__ uint2 nvfp4_codes8(const float (&x)[8], MAt m, DAt d) {
  float q[8];
  uint32_t key = 0xFFFFFFFFu;  // the smallest e2m1_boundary_key of the chunk
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q[i] = __fmul_rn(x[i], m(i));
    key = min(key, e2m1_boundary_key(q[i]));
  }
  if (key <= 16u) {  // e2m1_near_boundary for some element
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float q0 = q[i], q2 = markstein_steps(x[i], q0, d(i), m(i)), a = fabsf(q0);
      q[i] = (a >= 0x1p-20f && a <= 0x1p20f) ? q2 : q0;
    }
  }
  uint32_t p[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) p[j] = narrow2_bf16<ElemFormat::kE2M1, false>(ro_bf16x2(q[2 * j], q[2 * j + 1]), 0u);
  return make_uint2(__byte_perm(p[0], p[1], 0x6420), __byte_perm(p[2], p[3], 0x6420));
}

// ------------------------------------------------------------------------------------ kernels

// The tensor amax pass in front of a cast pass (current scaling, NVFP4). It walks x from the end: CTAs are
// dispatched in block order, so the last bytes it reads are x's first ones, which the cast pass (walking
// from the start) then finds in L2 instead of DRAM.
template <InType I>
__global__ void __launch_bounds__(kThreads) amax_kernel(Args a) {
  const int64_t nck = (a.n + 7) / 8;
  const int64_t block = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
  uint32_t acc = 0;
  float v[kUnroll][8];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const int64_t k = (block * kUnroll + j) * kThreads + threadIdx.x;
    if (k < nck) {
      load_flat<I>(a, k, v[j]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[j][i] = 0.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) acc = max(acc, chunk_key(v[j]));
  block_amax(a.amax, acc);
}

// One scale for the whole tensor: the codes of chunk v (kmax = chunk_key(v)). An FP8 chunk whose quotients all lie
// in the Markstein band (the common case, decided once per chunk from its max key) skips the per-element checks.
template <bool kFp8>
__device__ __forceinline__ uint2 tensor_codes8(const float (&v)[8], uint32_t kmax, const ElemScale& es, float r,
                                               ElemFormat f) {
  if constexpr (kFp8) {
    if (markstein_band(es, r, kmax)) {
      return in_band_fp8_codes8(v, [&es](int) { return es.p; }, [r](int) { return r; }, f == ElemFormat::kE5M2);
    }
    return codes8_uniform<true>(v, es, r, f);
  } else {
    return codes8_uniform<false>(v, es, r, f);
  }
}

// The x loads are issued first and held packed (4 registers per bf16 chunk), the scale is read
// while they are in flight: the scale load, then x, in sequence made every CTA wait for two DRAM
// round trips (this kernel ran at a third of copy bandwidth on the H200). <= 64 registers for
// 16-bit inputs (4 CTAs per SM); f32 inputs hold twice the bytes (3 CTAs per SM, no spills).
template <InType I, bool kFp8>
__global__ void __launch_bounds__(kThreads, (I == InType::kF32 ? 3 : 4) - (kTensorUnroll > 4 ? 1 : 0)) tensor_kernel(Args a) {
  const int64_t nck = (a.n + 7) / 8;
  int64_t k[kTensorUnroll];
  bool whole[kTensorUnroll];
  Raw<I> raw[kTensorUnroll] = {};
#pragma unroll
  for (int j = 0; j < kTensorUnroll; ++j) {
    k[j] = (static_cast<int64_t>(blockIdx.x) * kTensorUnroll + j) * kThreads + threadIdx.x;
    whole[j] = a.vec && k[j] * 8 + 8 <= a.n;
    if (whole[j]) raw[j] = load_raw<I>(a.x, k[j] * 8);
  }
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const float s = a.delayed ? *a.scale_in
                            : tensor_scale(a.amode == 1 ? *a.amax_in : __uint_as_float(*a.amax), f);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *static_cast<float*>(a.scale) = s;
    *a.tensor_scale = 1.0f;
  }
  const ElemScale es = scaled_elem_scale(s);
  const float r = recip_of_divisor(es);
  uint32_t acc = 0;
#pragma unroll
  for (int j = 0; j < kTensorUnroll; ++j) {
    if (k[j] >= nck) continue;  // (a chunk past the end adds key 0 to the amax: nothing)
    float v[8];
    if (whole[j]) {
      to_f32<I>(raw[j], v);
    } else {
      load_flat<I>(a, k[j], v);
    }
    const uint32_t kmax = (kFp8 || a.acc_amax) ? chunk_key(v) : 0u;  // (FP6 / FP4 codes do not read it)
    if (a.acc_amax) acc = max(acc, kmax);
    const uint2 c = tensor_codes8<kFp8>(v, kmax, es, r, f);
    const int64_t e0 = k[j] * 8;
    if (whole[j]) {
      *reinterpret_cast<uint2*>(a.data + e0) = c;
    } else {
      for (int i = 0; i < 8 && e0 + i < a.n; ++i) a.data[e0 + i] = static_cast<uint8_t>((i < 4 ? c.x : c.y) >> (8 * (i & 3)));
    }
  }
  if (a.acc_amax) block_amax(a.amax, acc);
}

// NVFP4 along rows (axis 2, groups of 16 elements = 2 chunks): a thread's work item is kUnroll = 4 consecutive
// chunks, two whole groups, so each group's scale is computed once (hgroup_kernel's layout splits a group over two
// lanes that each compute its scale, for every chunk), and its 32 codes leave in one 16-byte store.
// bf16 / f16 groups whose block scale allows it take their codes by limits (two elements per compare); the others,
// and f32 inputs, through the reciprocal (nvfp4_codes8) or, in an exact mode, the generic path.
// The codes of the item at chunk k0 (raw: its chunks; `two`: its second group exists).
// table: the CTA's limit table (nvfp4_fill_limits; not read for f32 inputs or without MXPREC_NVFP4_TABLE).
template <InType I, bool kPaired = false>
__device__ __forceinline__ void nvfp4_row_item(const Args& a, int64_t k0, bool two, const Raw<I> (&raw)[kUnroll],
                                               float ts, float bm, const Nvfp4Limits* table, uint32_t& acc) {
  uint32_t words[kUnroll] = {};  // chunk j's 8 codes, element i in nibble i
  uint8_t* scale = static_cast<uint8_t*>(a.scale);
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    if (g == 1 && !two) break;
    uint32_t key;
    uint4 w0{}, w1{};  // 16-bit inputs: the group's two chunks, as nvfp4_pairs where kPaired (the same key)
    if constexpr (I == InType::kF32) {
      float v0[8], v1[8];
      to_f32<I>(raw[2 * g], v0);
      to_f32<I>(raw[2 * g + 1], v1);
      key = max(chunk_key(v0), chunk_key(v1));
    } else {
      constexpr bool kPairs = kPaired && MXPREC_NVFP4_TABLE;
      w0 = kPairs ? nvfp4_pairs(raw[2 * g].v[0]) : raw[2 * g].v[0];
      w1 = kPairs ? nvfp4_pairs(raw[2 * g + 1].v[0]) : raw[2 * g + 1].v[0];
      key = key16<I>(max_u16x2(max_abs_pair(w0), max_abs_pair(w1)));
    }
    acc = max(acc, key);
    Nvfp4Scale b;
    if constexpr (I != InType::kF32 && MXPREC_NVFP4_TABLE) {
      const float amax = __uint_as_float(finish_key(key));
      const int byte = nvfp4_block_byte(amax, ts, bm);
      if (byte >= 0) {
        scale[k0 / 2 + g] = static_cast<uint8_t>(byte);
        uint32_t lim[7];
        if (nvfp4_table_limits(table, byte, lim)) {  // nearly always
          if constexpr (kPaired) {
            words[2 * g] = nvfp4_paired_by_limits<I>(w0, lim);
            words[2 * g + 1] = nvfp4_paired_by_limits<I>(w1, lim);
          } else {
            words[2 * g] = nvfp4_chunk_by_limits<I>(w0, lim);
            words[2 * g + 1] = nvfp4_chunk_by_limits<I>(w1, lim);
          }
          continue;
        }
        b = nvfp4_scale_of_byte(byte, ts);
      } else {
        b = nvfp4_block_scale(amax, ts);
        scale[k0 / 2 + g] = b.byte;
      }
    } else {
      b = nvfp4_group_block(key, ts, bm, scale, k0 / 2 + g);
      if constexpr (I != InType::kF32) {
        if (nvfp4_limits_apply(b.eff)) {  // nearly always
          uint32_t lim[7];
#pragma unroll
          for (int k = 0; k < 7; ++k) lim[k] = nvfp4_limit16_of<I>(b.eff, k) * 0x10001u;
          words[2 * g] = nvfp4_chunk_by_limits<I>(w0, lim);
          words[2 * g + 1] = nvfp4_chunk_by_limits<I>(w1, lim);
          continue;
        }
      }
    }
    float v0[8], v1[8];
    to_f32<I>(raw[2 * g], v0);
    to_f32<I>(raw[2 * g + 1], v1);
    const ElemScale es = nvfp4_elem_scale(b);
    const float r = recip_of_divisor(es);
    uint2 c0, c1;
    if (nvfp4_has_multiplier(es, r)) {
      const float m = nvfp4_multiplier(es, r), dv = nvfp4_divisor(es);
      const auto mul = [m](int) { return m; };
      const auto div = [dv](int) { return dv; };
      const uint32_t keep = nvfp4_keep(es, 0xFFFFFFFFu);
      c0 = nvfp4_codes8(v0, mul, div);
      c1 = nvfp4_codes8(v1, mul, div);
      c0 = make_uint2(c0.x & keep, c0.y & keep);
      c1 = make_uint2(c1.x & keep, c1.y & keep);
    } else {  // an exact mode (rare): the generic per-element path
      c0 = codes8_uniform<false>(v0, es, r, ElemFormat::kE2M1);
      c1 = codes8_uniform<false>(v1, es, r, ElemFormat::kE2M1);
    }
    words[2 * g] = pack4x8(c0.x, c0.y);
    words[2 * g + 1] = pack4x8(c1.x, c1.y);
  }
  if (two) {
    *reinterpret_cast<uint4*>(a.data + k0 * 4) = make_uint4(words[0], words[1], words[2], words[3]);
  } else {
    *reinterpret_cast<uint2*>(a.data + k0 * 4) = make_uint2(words[0], words[1]);
  }
}

// The kernel: a grid-stride loop over the items, the grid a few waves of resident CTAs (MXPREC_NVFP4_ROW_WAVES), so
// that each thread derives the tensor scale once for many items: 117.8 -> 113.2 us at 16384 x 4096 on an H100
// (fifty-third session, with the counted codes). Staging the next item through cp.async (a thread's own 64 bytes in
// shared memory) was 20 % slower there and was removed. Held to 64 registers (4 CTAs per SM): at 76 (3 CTAs) the
// first form of nvfp4_codes8 ran 5 % slower (H200).
template <InType I>
__global__ void __launch_bounds__(kThreads, 4) nvfp4_row_kernel(Args a) {
  static_assert(kUnroll == 4, "nvfp4_row_kernel: a thread owns two groups of two chunks");
  const float ts = nvfp4_ts(a), bm = nvfp4_block_multiplier(ts);
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.tensor_scale = ts;
  __shared__ Nvfp4Limits table[I == InType::kF32 || !MXPREC_NVFP4_TABLE ? 1 : kNvfp4TableEntries];
  if constexpr (I != InType::kF32 && MXPREC_NVFP4_TABLE) {
    nvfp4_fill_limits<I>(table, ts);
    __syncthreads();
  }
  const int64_t nck = a.n / 8;  // even: groups are whole
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kUnroll;
  uint32_t acc = 0;
  for (int64_t k0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kUnroll; k0 < nck; k0 += stride) {
    const bool two = k0 + 2 < nck;
    Raw<I> raw[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      if (j < 2 || two) raw[j] = load_raw<I>(a.x, (k0 + j) * 8);
    }
    nvfp4_row_item<I>(a, k0, two, raw, ts, bm, table, acc);
  }
  if (a.acc_amax) block_amax(a.amax, acc);
}

// A CTA covers kThreads * kUnroll consecutive chunks. kWide (groups of >= kUnroll chunks): a thread's
// kUnroll chunks lie in one group (chunk li + tpg * j of its group, li its lane in the group; tpg =
// chunks per group / kUnroll), so it computes one scale per 8 * kUnroll elements; otherwise (groups of
// 1 or 2 chunks) thread t holds chunk t of each of kUnroll runs of kThreads chunks, tpg = chunks per
// group, one scale per chunk.
// The wide FP6 / FP4 instances are held to 64 registers, 4 CTAs per SM like the FP8 ones (MXFP4 37.7 ->
// 40.1 % of copy on the H200); the bf16 one, whose bf16-pair encoder needs fewer, to 48 registers, 5 CTAs
// (MXFP4 along rows 67.7 -> 69.5 %, MXFP6 69.0 -> 70.3 %; 6 CTAs, 40 registers: 63.0 / 60.4 %).
// MXPREC_HGROUP_NARROW_MIN_BLOCKS[_BF16]=1 lifts the bounds, for A/B builds.
#ifndef MXPREC_HGROUP_NARROW_MIN_BLOCKS
#define MXPREC_HGROUP_NARROW_MIN_BLOCKS 4
#endif
#ifndef MXPREC_HGROUP_NARROW_MIN_BLOCKS_BF16
#define MXPREC_HGROUP_NARROW_MIN_BLOCKS_BF16 5
#endif
template <InType I, bool kFp8, bool kWide>
__global__ void __launch_bounds__(kThreads,
                                  !kWide || I == InType::kF32 ? 1
                                  : kFp8                      ? 4
                                  : I == InType::kBF16        ? MXPREC_HGROUP_NARROW_MIN_BLOCKS_BF16
                                                              : MXPREC_HGROUP_NARROW_MIN_BLOCKS)
    hgroup_kernel(Args a) {
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const int bits = kFp8 ? 8 : format_bits(f);
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.tensor_scale = 1.0f;
  // Group g's scale from its key (written by `write`). FP6 / FP4 codes here are MX's (NVFP4 runs in
  // nvfp4_row_kernel, and row / tile scaling needs FP8): the MX scale without group_elem_scale's kind switch.
  const auto scale_of = [&a](int64_t g, uint32_t key, bool write) {
    return kFp8 ? group_elem_scale(a, g, key, 1.0f, write) : mx_group_elem_scale(a, g, key, write);
  };
  const int64_t nck = a.n / 8;
  const int tpg = a.tpg;  // a power of two (see the launch): shifts and masks, not integer divisions (two
                          // had been 8 % of the MXFP4 instance's instructions)
  const int tpg_log2 = __ffs(tpg) - 1;
  static_assert(kUnroll == 4, "hgroup_kernel: kUnroll == 1 << 2");
  const int64_t cta0 = static_cast<int64_t>(blockIdx.x) * kUnroll * kThreads;
  Raw<I> raw[kUnroll];
  int64_t k[kUnroll];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    k[j] = kWide ? cta0 + ((threadIdx.x >> tpg_log2) << (tpg_log2 + 2)) + (threadIdx.x & (tpg - 1)) + tpg * j
                 : cta0 + j * kThreads + threadIdx.x;
    if (k[j] < nck) raw[j] = load_raw<I>(a.x, k[j] * 8);
  }
  uint32_t acc = 0;
  if constexpr (kWide) {
    const bool valid = k[0] < nck;  // groups are whole: all of a thread's chunks or none
    uint32_t key = 0;
    if (valid) {  // x stays packed in raw (converted again for the codes: fewer live registers)
      if constexpr (I == InType::kBF16) {
        key = bf16_chunks_key(raw);
      } else {
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          float v[8];
          to_f32<I>(raw[j], v);
          key = max(key, chunk_key(v));
        }
      }
    }
    for (int o = 1; o < tpg; o <<= 1) key = max(key, __shfl_xor_sync(kFull, key, o));
    acc = key;
    if (valid) {
      const ElemScale es = scale_of(k[0] >> (tpg_log2 + 2), key, (threadIdx.x & (tpg - 1)) == 0);
      const float r = recip_of_divisor(es);
      const bool band = kFp8 && markstein_band(es, r, key);
      // One thread per group (MX 1 x 32): its chunks are consecutive, so its codes leave in 16-byte stores
      // (8-byte stores at a 32-byte stride left MXFP8 at 56 % of copy bandwidth on the H200; 82 % with these).
      if (tpg == 1 && (reinterpret_cast<uintptr_t>(a.data) & 15u) == 0) {
        uint2 cs[kUnroll];
        bool pairs = false;
        if constexpr (I == InType::kBF16 && !kFp8) {  // MX FP6 / FP4 from bf16: two elements per instruction
          pairs = es.mode == ElemMode::kMul;
          if (pairs) narrow_chunks_bf16(raw, (__float_as_uint(es.p) >> 16) * 0x00010001u, f, cs);
        }
        if (!pairs) {
#pragma unroll
          for (int j = 0; j < kUnroll; ++j) {
            float v[8];
            to_f32<I>(raw[j], v);
            cs[j] = codes8_uniform<kFp8, true>(v, es, r, f, band);
          }
        }
        store_run4(a.data, k[0], cs, bits);
      } else {
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          float v[8];
          to_f32<I>(raw[j], v);
          store_chunk(a.data, k[j], codes8_uniform<kFp8, true>(v, es, r, f, band), bits);
        }
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      float v[8];
      const bool valid = k[j] < nck;
      if (valid) {
        to_f32<I>(raw[j], v);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = 0.0f;
      }
      uint32_t key = chunk_key(v);
      for (int o = 1; o < tpg; o <<= 1) key = max(key, __shfl_xor_sync(kFull, key, o));
      acc = max(acc, key);
      if (!valid) continue;
      const int64_t g = k[j] >> tpg_log2;
      const ElemScale es = scale_of(g, key, (k[j] & (tpg - 1)) == 0);
      const float r = recip_of_divisor(es);
      store_chunk(a.data, k[j], codes8_uniform<kFp8, true>(v, es, r, f, kFp8 && markstein_band(es, r, key)), bits);
    }
  }
  if (a.acc_amax) block_amax(a.amax, acc);
}

// The CTA-wide max of the threads' |x| keys (kBlock threads; red: kBlock / 32 shared slots, free until the
// __syncthreads inside; every thread returns the max).
template <int kBlock>
__device__ __forceinline__ uint32_t cta_max_key(uint32_t key, uint32_t* red) {
  key = __reduce_max_sync(kFull, key);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = key;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kBlock / 32; ++w) key = max(key, red[w]);
  return key;
}

// The element scale of one CTA's group g from its max |x| key, and its reciprocal r for the division
// (recip_of_divisor); thread 0 writes the group's scale, maxes the tensor amax and, for group 0, writes
// the tensor scale (1).
__device__ __forceinline__ ElemScale cta_group_scale(const Args& a, int64_t g, uint32_t key, float& r) {
  const bool lead = threadIdx.x == 0;
  const ElemScale es = group_elem_scale(a, g, key, 1.0f, lead);
  r = recip_of_divisor(es);
  if (lead) {
    if (a.acc_amax) amax_update(a.amax, finish_key(key));
    if (g == 0) *a.tensor_scale = 1.0f;
  }
  return es;
}

// One CTA of kBlock threads per axis-2 row / tile group (gh rows x gw cols, gw % 8 == 0), FP8 only.
// kCache chunks per thread stay in registers between the amax and the codes (larger groups re-read x).
// With kCache <= kCtaCacheSmall the kernel is held to 64 registers, so that 1024 / kBlock CTAs per SM
// keep enough loads in flight (at 86 registers, two 256-thread CTAs per SM: row scaling of 16384 x 4096
// ran at 25 % of copy bandwidth).
#ifndef MXPREC_CTA_THREADS_PER_SM
#define MXPREC_CTA_THREADS_PER_SM 1024
#endif
template <InType I, int kBlock, int kCache>
__global__ void __launch_bounds__(kBlock, kCache <= kCtaCacheSmall ? MXPREC_CTA_THREADS_PER_SM / kBlock : 1)
    cta_kernel(Args a) {
  __shared__ uint32_t red[kBlock / 32];
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const int64_t g = blockIdx.x;
  const int64_t gr = g / a.ngc, gc = g % a.ngc;
  const int64_t cpr = a.gw / 8;  // chunks per group row
  const int64_t nck = a.gh * cpr;
  const int64_t r0 = gr * a.gh, c0 = gc * a.gw;
  const int64_t cols = a.cols;
  auto elem_of = [=](int64_t j) { return (r0 + j / cpr) * cols + c0 + 8 * (j % cpr); };
  const bool cached = nck <= static_cast<int64_t>(kBlock) * kCache;
  Raw<I> cache[kCache];
  uint32_t key = 0;
  if (cached) {
#pragma unroll
    for (int i = 0; i < kCache; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
      if (j < nck) cache[i] = load_raw<I>(a.x, elem_of(j));
    }
#pragma unroll
    for (int i = 0; i < kCache; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
      if (j < nck) {
        float v[8];
        to_f32<I>(cache[i], v);
        key = max(key, chunk_key(v));
      }
    }
  } else {
    for (int64_t j = threadIdx.x; j < nck; j += kBlock) {
      float v[8];
      to_f32<I>(load_raw<I>(a.x, elem_of(j)), v);
      key = max(key, chunk_key(v));
    }
  }
  key = cta_max_key<kBlock>(key, red);
  float r;  // one scale per CTA
  const ElemScale es = cta_group_scale(a, g, key, r);
  const bool band = markstein_band(es, r, key);
  if (cached) {
#pragma unroll
    for (int i = 0; i < kCache; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
      if (j < nck) {
        float v[8];
        to_f32<I>(cache[i], v);
        *reinterpret_cast<uint2*>(a.data + elem_of(j)) = codes8_uniform<true, true>(v, es, r, f, band);
      }
    }
  } else {
    for (int64_t j = threadIdx.x; j < nck; j += kBlock) {
      float v[8];
      const int64_t e = elem_of(j);
      to_f32<I>(load_raw<I>(a.x, e), v);
      *reinterpret_cast<uint2*>(a.data + e) = codes8_uniform<true, true>(v, es, r, f, band);
    }
  }
}

// Axis-1 groups (gh rows x gw cols, gh % (8 * ty) == 0, gw == 1 or gw % 8 == 0 with (tx * 8) % gw
// == 0). CTA = tx x ty threads (tx * ty = 256) over tx * 8 columns and 8 * ty * vsteps rows; a
// thread owns 8 columns x 8 rows per step. Modes (Args::vmode):
//   kVLocal    the CTA covers one group-row (gh == 8 * ty, vsteps 1): amax, scales and codes in one
//              pass from registers;
//   kVKeysOut  pass 1 only: the CTA's per-column (per-tile) max |x| key, atomicMax'ed into
//              keys[group] (global scratch, zeroed) -- groups taller than 128 rows, split over CTAs;
//   kVKeysIn   codes only: group keys from keys[group] (after kVKeysOut), vsteps 1.
enum VMode : int32_t { kVLocal = 0, kVKeysOut = 1, kVKeysIn = 2 };

// FP6 / FP4 codes of a column-kernel thread's 8 x 8 block, packed along the rows (bits 6 or 4).
template <InType I>
__device__ __forceinline__ void vgroup_store_narrow(const Args& a, int64_t rb, int64_t c0, const Raw<I> (&cache)[8],
                                                    const ElemScale (&es)[8], ElemFormat f, int bits) {
  const int64_t cols = a.cols;
  uint2 rc[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    float v[8];
    to_f32<I>(cache[r], v);
    rc[r] = codes8(v, [&es](int c) { return es[c]; }, f);
  }
  if (bits == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint2 o;
      o.x = (rc[2 * i].x & 0x0F0F0F0Fu) | ((rc[2 * i + 1].x & 0x0F0F0F0Fu) << 4);
      o.y = (rc[2 * i].y & 0x0F0F0F0Fu) | ((rc[2 * i + 1].y & 0x0F0F0F0Fu) << 4);
      *reinterpret_cast<uint2*>(a.data + (rb / 2 + i) * cols + c0) = o;
    }
  } else {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const uint2 w0 = rc[4 * u], w1 = rc[4 * u + 1], w2 = rc[4 * u + 2], w3 = rc[4 * u + 3];
      uint2 b[3];
      b[0].x = (w0.x & 0x3F3F3F3Fu) | ((w1.x << 6) & 0xC0C0C0C0u);
      b[0].y = (w0.y & 0x3F3F3F3Fu) | ((w1.y << 6) & 0xC0C0C0C0u);
      b[1].x = ((w1.x >> 2) & 0x0F0F0F0Fu) | ((w2.x << 4) & 0xF0F0F0F0u);
      b[1].y = ((w1.y >> 2) & 0x0F0F0F0Fu) | ((w2.y << 4) & 0xF0F0F0F0u);
      b[2].x = ((w2.x >> 4) & 0x03030303u) | ((w3.x << 2) & 0xFCFCFCFCu);
      b[2].y = ((w2.y >> 4) & 0x03030303u) | ((w3.y << 2) & 0xFCFCFCFCu);
      const int64_t prow = rb / 4 * 3 + 3 * u;
#pragma unroll
      for (int kk = 0; kk < 3; ++kk) *reinterpret_cast<uint2*>(a.data + (prow + kk) * cols + c0) = b[kk];
    }
  }
}

template <InType I, bool kFp8>
__global__ void __launch_bounds__(kThreads) vgroup_kernel(Args a) {
  __shared__ uint32_t slot[kThreads * 8];
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const int bits = kFp8 ? 8 : format_bits(f);
  const bool nvfp4 = a.kind == static_cast<int32_t>(ScalingKind::kNVFP4);
  const int ty_n = a.ty, tx_n = kThreads / ty_n;
  const int tx = threadIdx.x % tx_n, ty = threadIdx.x / tx_n;
  const int64_t cols = a.cols, gw = a.gw;
  const int64_t ncb = (cols + tx_n * 8 - 1) / (tx_n * 8);
  // The keys pass in front of col_kernel (groups taller than a tile) walks x from the end, so that
  // col_kernel, walking from the start, finds the bytes read last in L2 (as amax_kernel).
  const int64_t block = a.vmode == kVKeysOut ? static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x : blockIdx.x;
  const int64_t cb = block % ncb, rblk = block / ncb;
  const int64_t step_rows = 8 * ty_n;
  const int64_t cta_row0 = rblk * step_rows * a.vsteps;
  const int64_t gr = cta_row0 / a.gh;
  const int64_t c0 = (cb * tx_n + tx) * 8;
  const bool active = c0 < cols;
  const int64_t row0 = cta_row0 + ty * 8;
  const int mode = a.vmode;

  Raw<I> cache[8];
  uint32_t keys[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) keys[c] = 0;
  if (mode != kVKeysIn) {
    for (int64_t st = 0; st < a.vsteps; ++st) {
      if (!active) break;
      const int64_t rb = row0 + st * step_rows;
#pragma unroll
      for (int r = 0; r < 8; ++r) cache[r] = load_raw<I>(a.x, (rb + r) * cols + c0);
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        float v[8];
        to_f32<I>(cache[r], v);
#pragma unroll
        for (int c = 0; c < 8; ++c) keys[c] = max(keys[c], abs_key(v[c]));
      }
    }
    for (int i = threadIdx.x; i < tx_n * 8; i += kThreads) slot[i] = 0;
    __syncthreads();
    if (active) {
      if (gw == 1) {
#pragma unroll
        for (int c = 0; c < 8; ++c)
          if (keys[c] != 0u) atomicMax(&slot[tx * 8 + c], keys[c]);
      } else {
        uint32_t k = 0;
#pragma unroll
        for (int c = 0; c < 8; ++c) k = max(k, keys[c]);
        if (k != 0u) atomicMax(&slot[(tx * 8) / gw], k);
      }
    }
    __syncthreads();
    if (mode == kVKeysOut) {
      if (active && ty == 0) {
        for (int c = 0; c < 8; ++c) {
          const int64_t col = c0 + c;
          if (gw != 1 && col % gw != 0) continue;
          const uint32_t k = gw == 1 ? slot[tx * 8 + c] : slot[(tx * 8) / gw];
          amax_update(a.keys + gr * a.ngc + col / gw, k);
        }
      }
      return;
    }
  }
  const float ts = nvfp4 ? nvfp4_ts(a) : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.tensor_scale = ts;
  ElemScale es[8];
  uint32_t acc = 0;
  if (active) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int64_t col = c0 + c;
      const int64_t g = gr * a.ngc + col / gw;
      uint32_t gk;
      if (mode == kVKeysIn) {
        gk = a.keys[g];
      } else {
        gk = gw == 1 ? slot[tx * 8 + c] : slot[(tx * 8) / gw];
      }
      const bool owner = ty == 0 && cta_row0 % a.gh == 0 && (gw == 1 || col % gw == 0);
      es[c] = group_elem_scale(a, g, gk, ts, owner);
      if (owner) acc = max(acc, gk);
    }
  }
  if (active) {
    const int64_t rb = row0;
    // FP8 reads its block again (an L1 / L2 hit) instead of holding it across the scale computation.
    // (Meant to free registers, it did not: 102 either way. col_kernel serves the common FP8 cases.)
    if (kFp8 || mode == kVKeysIn) {
#pragma unroll
      for (int r = 0; r < 8; ++r) cache[r] = load_raw<I>(a.x, (rb + r) * cols + c0);
    }
    if constexpr (kFp8) {
      // The scale form is decided once per thread; each row's codes are stored as soon as they exist.
      float rcp[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) rcp[c] = recip_of_divisor(es[c]);
      const auto sat = [&es](int c) { return es[c]; };
      const auto rat = [&rcp](int c) { return rcp[c]; };
      const int form = cols_form<8>(sat, rat);
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        float v[8];
        to_f32<I>(cache[r], v);
        *reinterpret_cast<uint2*>(a.data + (rb + r) * cols + c0) = codes8_cols<true>(v, sat, rat, form, f);
      }
    } else {
      vgroup_store_narrow(a, rb, c0, cache, es, f, bits);
    }
  }
  if (a.acc_amax) block_amax(a.amax, acc);
}

// FP8 groups of gh in {32, 64, 128} rows x 1 column along axis 1 (MX along axis 0, the 1 x 128 tiles of
// a transposed operand), and 128 x 128 tile groups along either axis (one group per CTA tile), through
// shared memory. A CTA stages a 128 x 128 tile of x with cp.async (16-byte pieces, whole 128-byte
// lines), then each thread owns 2 columns x 32 rows: it reads them as column pairs (a warp reads 128
// contiguous bytes, no bank conflicts), computes one scale per column per group (the register-held
// vgroup_kernel computed 8 per 64 elements), divides in-band columns by the straight Markstein
// division, and writes the codes as 16-bit row pairs into a shared FP8 tile that leaves in 16-byte
// pieces. Needs rows % 128 == 0, cols % 128 == 0 and 16-byte aligned x and data.
constexpr int kColTile = 128;  // tile rows = tile cols
constexpr int kColSeg = 32;    // rows per thread
constexpr int kSegsPerTile = kColTile / kColSeg;

template <InType I>
constexpr size_t col_smem_bytes() {
  return static_cast<size_t>(kColTile) * kColTile * in_bytes<I>() + kColTile * kColTile +
         (kColTile / kColSeg) * kColTile * sizeof(uint32_t);
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ------------------------------------------------------------------ current scaling in one read of x

// onchip_kernel: per-tensor current scaling (amax_mode 0, not delayed; n % 8 == 0, x 16-byte and data 8-byte
// aligned) with x read from DRAM once where it fits on chip, instead of amax_kernel + tensor_kernel (5 bytes moved
// per bf16 element against 3). A cooperative grid of G = one CTA of T = 1024 threads per SM. Round r of the tensor
// is its G x T chunks (r * G + blockIdx.x) * T + threadIdx.x (each CTA reads 16 KB of consecutive bf16 per round).
// Rounds 0 .. kR - 1 stay in registers, the next kS in shared memory (loaded kU1 rounds at a time into registers,
// keyed there, then stored: MXPREC_ONCHIP_STAGE), and the later ("spill") rounds are read for their keys only.
// The CTAs max their keys into sync[0], meet at a grid barrier (sync[1]; the host zeroes both), then write the
// codes: spill rounds first and newest first (the bytes read last are the likeliest still in L2), then the held
// rounds. On an H100 / H200 (132 SMs) x stays on chip up to 132 * 1024 * 8 * (2 + 14) = 17.3 M bf16 / f16 elements
// (8.7 M f32). kHint: the spill rounds' first read asks L2 to keep them
// (evict_last), their second read and every store to drop theirs first (evict_first). The codes are
// tensor_kernel's (tensor_codes8), with markstein_band decided once from the tensor amax (MXPREC_ONCHIP_TBAND).
// Measured (H100, bf16, % of copy, MXPREC_QUANTIZE_ONCHIP 0 / default): 16384 x 4096 55.8 / 64.3, 4096 x 4096
// 50.2 / 69.9 (h100_quantize_onchip_stage.md; cp.async into shared memory with the keys after: 63.2 / 64.8; the
// band per chunk: 61.2 / 59.9, h100_quantize_onchip_tband.md); 512 threads with 12 register rounds
// (more x on chip, half the warps for the codes after the barrier) reached 58.8 / 53.6-54.5: the codes' arithmetic
// after the barrier, not DRAM, bounds the kernel (h100_quantize_onchip.md). A trace build (MXPREC_ONCHIP_TRACE,
// benchmarks/onchip_trace.py) puts 7.7 + 1.1 us of 31 at 4096 x 4096 in the held rounds' codes after the barrier.
// MXPREC_ONCHIP_MUL (sixty-second session, h100_quantize_mul_certificate.md): bf16 tensors whose amax significand
// is certified take one multiply per code there. With the branch inside phase 2's loops (sixty-third,
// h100_quantize_mul_in_loop.md), H100: 65.1-65.2 -> 66.0-66.2 % of copy at the large shapes and 75.8 -> 77.4 at
// 4096 x 4096 against the loops per path; 102.0-102.25 against 105.0 us at 16384 x 4096 for main 937a84c (no
// multiply), whose time the tensors that still divide keep (105.0 against 104.75-105.0; 25.75-26.0 against 25.5 at
// 4096 x 4096).
#ifndef MXPREC_ONCHIP_THREADS
#define MXPREC_ONCHIP_THREADS 1024
#endif
constexpr int kOcThreads = MXPREC_ONCHIP_THREADS;
#ifndef MXPREC_ONCHIP_REGS
#define MXPREC_ONCHIP_REGS 2
#endif
#ifndef MXPREC_ONCHIP_UNROLL1
#define MXPREC_ONCHIP_UNROLL1 4
#endif
#ifndef MXPREC_ONCHIP_UNROLL2
#define MXPREC_ONCHIP_UNROLL2 2
#endif
#ifndef MXPREC_ONCHIP_TBAND
#define MXPREC_ONCHIP_TBAND 1
#endif
// MXPREC_ONCHIP_STAGE (default 1): the shared-memory rounds through registers, their keys taken on the way; 0: by
// cp.async, keyed after they all landed (H100, % of copy at 16384 x 4096 / 4096 x 4096: 64.3 / 69.9 against
// 63.2 / 64.8; same call, h100_quantize_onchip_stage.md). Also measured there and not kept: a 1-D bulk copy (TMA)
// per round with one mbarrier each, keyed as each landed (62.9 / 66.6); 8 rounds in flight (62.8 / 66.0); FP8
// codes of bf16 by a per-CTA certified multiply or two-term reciprocal instead of Markstein's steps (1.3-2.6
// points slower on the H100 and the H200: the certificate's divisions and three code paths after the barrier);
// the shared-memory rounds' codes inside the spill loop (H200: 0.6-1.0 points slower).
#ifndef MXPREC_ONCHIP_STAGE
#define MXPREC_ONCHIP_STAGE 1
#endif
#ifndef MXPREC_ONCHIP_MUL
#define MXPREC_ONCHIP_MUL 1
#endif

template <InType I>
constexpr int oc_reg_chunks() {
  return I == InType::kF32 ? (MXPREC_ONCHIP_REGS + 1) / 2 : MXPREC_ONCHIP_REGS;
}
template <InType I>
constexpr int oc_spill_unroll(int pass) {
  const int u = pass == 1 ? MXPREC_ONCHIP_UNROLL1 : MXPREC_ONCHIP_UNROLL2;
  return I == InType::kF32 ? (u > 1 ? u / 2 : 1) : u;
}
template <InType I>
constexpr int oc_smem_chunks() {
  return (I == InType::kF32 ? 14 : 28) * 512 / kOcThreads;  // 224 KiB of x per CTA
}
template <InType I>
constexpr int oc_smem_bytes() {
  return oc_smem_chunks<I>() * kOcThreads * static_cast<int>(sizeof(Raw<I>));
}

__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// load_raw with an L2 cache policy.
template <InType I>
__device__ __forceinline__ Raw<I> load_raw_hint(const void* x, int64_t e, uint64_t policy) {
  Raw<I> r;
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(x) + e * in_bytes<I>());
#pragma unroll
  for (int i = 0; i < (I == InType::kF32 ? 2 : 1); ++i) {
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.v[i].x), "=r"(r.v[i].y), "=r"(r.v[i].z), "=r"(r.v[i].w)
                 : "l"(p + i), "l"(policy));
  }
  return r;
}
__device__ __forceinline__ void store_u2_hint(uint8_t* dst, uint2 c, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v2.u32 [%0], {%1, %2}, %3;" ::"l"(dst), "r"(c.x), "r"(c.y), "l"(policy)
               : "memory");
}

template <InType I>
__device__ __forceinline__ uint32_t raw_key(const Raw<I>& r) {
  if constexpr (I == InType::kBF16) {
    return key2_finish(bf16_key2(r));
  } else {
    float v[8];
    to_f32<I>(r, v);
    return chunk_key(v);
  }
}

__device__ __forceinline__ void red_release_gpu_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every CTA of a cooperative launch (all resident at once) calls it once; *counter is zero before the launch.
__device__ __forceinline__ void grid_barrier(uint32_t* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    while (ld_acquire_gpu(counter) < gridDim.x) __nanosleep(32);
  }
  __syncthreads();
}

// MXPREC_ONCHIP_TRACE (a diagnostic build, never the default): thread 0 of CTAs 0, G / 2 and G - 1 prints at the end
// of every launch its SM clock at the phase boundaries (each mark after a __syncthreads: the whole CTA's time) and
// the global timer at entry, after the grid barrier and at the end (benchmarks/h200_session.sh onchip-trace).
#ifdef MXPREC_ONCHIP_TRACE
__device__ __forceinline__ uint64_t oc_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define OC_MARK(i)                                 \
  do {                                             \
    __syncthreads();                               \
    if (threadIdx.x == 0) oc_marks[i] = clock64(); \
  } while (0)
#else
#define OC_MARK(i) \
  do {             \
  } while (0)
#endif

template <InType I, bool kFp8, bool kHint>
__global__ void __launch_bounds__(kOcThreads, 1) onchip_kernel(Args a, uint32_t* sync) {
#ifdef MXPREC_ONCHIP_TRACE
  long long oc_marks[8] = {};
  uint64_t oc_g[3] = {oc_globaltimer(), 0, 0};
#endif
  OC_MARK(0);
  constexpr int kR = oc_reg_chunks<I>(), kS = oc_smem_chunks<I>();
  constexpr int kU1 = oc_spill_unroll<I>(1), kU2 = oc_spill_unroll<I>(2);
  constexpr int kPieces = static_cast<int>(sizeof(Raw<I>) / 16);
  extern __shared__ __align__(16) unsigned char oc_smem[];
  Raw<I>* held = reinterpret_cast<Raw<I>*>(oc_smem);  // [kS][kOcThreads]: a thread reads back only its own
  const int64_t nck = a.n / 8;
  const int64_t per_round = static_cast<int64_t>(gridDim.x) * kOcThreads;
  const int64_t rounds = (nck + per_round - 1) / per_round;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kOcThreads + threadIdx.x;
  auto chunk = [&](int64_t r) { return r * per_round + base; };
  const uint64_t keep = kHint ? l2_policy_evict_last() : 0, drop = kHint ? l2_policy_evict_first() : 0;

  // Phase 1: the held rounds' loads (registers, then shared memory), the spill rounds' keys, then the held keys.
  Raw<I> reg[kR];
#pragma unroll
  for (int j = 0; j < kR; ++j) {
    const int64_t k = chunk(j);
    reg[j] = k < nck ? load_raw<I>(a.x, k * 8) : Raw<I>{};  // zeros past the end: key 0
  }
  uint32_t acc = 0;
  if constexpr (MXPREC_ONCHIP_STAGE) {  // through registers, kU1 rounds in flight; the keys on the way
#pragma unroll
    for (int j0 = 0; j0 < kS; j0 += kU1) {
      Raw<I> t[kU1];
#pragma unroll
      for (int u = 0; u < kU1; ++u) {
        const int64_t k = chunk(kR + j0 + u);
        if (j0 + u < kS && k < nck) t[u] = load_raw<I>(a.x, k * 8);
      }
#pragma unroll
      for (int u = 0; u < kU1; ++u) {
        if (j0 + u < kS && chunk(kR + j0 + u) < nck) {
          acc = max(acc, raw_key<I>(t[u]));
          held[(j0 + u) * kOcThreads + threadIdx.x] = t[u];
        }
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int64_t k = chunk(kR + j);
      if (k < nck) {
        const char* src = static_cast<const char*>(a.x) + k * 8 * in_bytes<I>();
#pragma unroll
        for (int i = 0; i < kPieces; ++i) cp_async16(reinterpret_cast<uint4*>(&held[j * kOcThreads + threadIdx.x]) + i, src + 16 * i);
      }
    }
    cp_async_commit();
  }
  OC_MARK(1);  // every load of the held rounds issued
  for (int64_t r0 = kR + kS; r0 < rounds; r0 += kU1) {
    Raw<I> t[kU1];
#pragma unroll
    for (int u = 0; u < kU1; ++u) {
      const int64_t k = chunk(r0 + u);
      if (r0 + u < rounds && k < nck) {
        t[u] = kHint ? load_raw_hint<I>(a.x, k * 8, keep) : load_raw<I>(a.x, k * 8);
      } else {
        t[u] = Raw<I>{};
      }
    }
#pragma unroll
    for (int u = 0; u < kU1; ++u) acc = max(acc, raw_key<I>(t[u]));
  }
  OC_MARK(2);  // the spill rounds' keys
#pragma unroll
  for (int j = 0; j < kR; ++j) acc = max(acc, raw_key<I>(reg[j]));
  if constexpr (!MXPREC_ONCHIP_STAGE) {
    cp_async_wait_all();
    OC_MARK(3);  // the held rounds landed
#pragma unroll 4
    for (int j = 0; j < kS; ++j) {
      if (chunk(kR + j) < nck) acc = max(acc, raw_key<I>(held[j * kOcThreads + threadIdx.x]));
    }
  } else {
    OC_MARK(3);  // (staged: the held rounds' keys came with their loads)
  }
  block_amax<kOcThreads>(sync, acc);
  OC_MARK(4);  // the CTA's keys maxed into sync[0]

  // The tensor amax, once every CTA has maxed its part into sync[0].
  grid_barrier(sync + 1);
  __shared__ uint32_t amax_bits;
  if (threadIdx.x == 0) amax_bits = ld_acquire_gpu(sync);
  __syncthreads();
  OC_MARK(5);  // past the grid barrier
#ifdef MXPREC_ONCHIP_TRACE
  oc_g[1] = oc_globaltimer();
#endif
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const float s = tensor_scale(__uint_as_float(amax_bits), f);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *a.amax = amax_bits;
    *static_cast<float*>(a.scale) = s;
    *a.tensor_scale = 1.0f;
  }
  const ElemScale es = scaled_elem_scale(s);
  const float rc = recip_of_divisor(es);
  // MXPREC_ONCHIP_TBAND (default 1): markstein_band decided once from the tensor's amax key, which bounds every
  // chunk's key (RN(key * r) is monotone in the key; a NaN anywhere or a floored scale fails it), instead of per
  // chunk (+2.2 / +4.3 points of copy at 16384 x 4096 / 4096 x 4096 on the H100).
  const bool band = MXPREC_ONCHIP_TBAND && kFp8 && markstein_band(es, rc, amax_bits);
  // MXPREC_ONCHIP_MUL (default 1): bf16 x whose amax's significand is certified (bf16_mul_certificate.h) take one
  // multiply by RN(1 / s) per code instead of Markstein's five operations.
  const bool mul = MXPREC_ONCHIP_MUL && I == InType::kBF16 && band && bf16_mul_exact(amax_bits, f);
  const bool e5m2 = f == ElemFormat::kE5M2;
  auto store = [&](int64_t k, uint2 c) {
    if constexpr (kHint) {
      store_u2_hint(a.data + k * 8, c, drop);
    } else {
      *reinterpret_cast<uint2*>(a.data + k * 8) = c;
    }
  };
  // One element path per chunk: the certified multiply (bf16 FP8 only; `mul` is uniform across the grid) or the
  // division. The branch sits inside the loops below rather than around two copies of them: with the loops written
  // once per path (sixty-second session) the bf16 instance kept a held round in local memory through both phases
  // (stack 24 -> 48 bytes, an STL right after its load) and the division path lost 1-1.5 us; the other instances'
  // `mul` is false at compile time and their SASS is main 937a84c's to the instruction (cuobjdump).
  auto emit = [&](int64_t k, const Raw<I>& raw) {
    float v[8];
    to_f32<I>(raw, v);
    if (I == InType::kBF16 && kFp8 && mul) {
      store(k, mul_fp8_codes8(v, rc, e5m2));
    } else {
      store(k, band ? in_band_fp8_codes8(v, [&es](int) { return es.p; }, [rc](int) { return rc; }, e5m2)
                    : tensor_codes8<kFp8>(v, kFp8 ? chunk_key(v) : 0u, es, rc, f));
    }
  };
  // Phase 2: the spill rounds again (newest first), then shared memory, then registers.
  for (int64_t r0 = rounds - 1; r0 >= kR + kS; r0 -= kU2) {
    Raw<I> t[kU2];
    auto live = [&](int u) { return r0 - u >= kR + kS && chunk(r0 - u) < nck; };
#pragma unroll
    for (int u = 0; u < kU2; ++u) {
      if (live(u)) t[u] = kHint ? load_raw_hint<I>(a.x, chunk(r0 - u) * 8, drop) : load_raw<I>(a.x, chunk(r0 - u) * 8);
    }
#pragma unroll
    for (int u = 0; u < kU2; ++u) {
      if (live(u)) emit(chunk(r0 - u), t[u]);
    }
  }
  OC_MARK(6);  // the spill rounds' codes
#pragma unroll 1  // (unrolled, the kS chunk addresses stay live across the loop: spills; by 2: 2 points slower)
  for (int j = 0; j < kS; ++j) {
    const int64_t k = chunk(kR + j);
    if (k < nck) emit(k, held[j * kOcThreads + threadIdx.x]);
  }
  OC_MARK(7);  // the shared-memory rounds' codes
#pragma unroll
  for (int j = 0; j < kR; ++j) {
    const int64_t k = chunk(j);
    if (k < nck) emit(k, reg[j]);
  }
#ifdef MXPREC_ONCHIP_TRACE
  __syncthreads();
  oc_g[2] = oc_globaltimer();
  const long long end = clock64();
  const unsigned b = blockIdx.x;
  if (threadIdx.x == 0 && (b == 0 || b == gridDim.x / 2 || b == gridDim.x - 1)) {
    printf("oc_trace n=%lld cta=%u g_entry=%llu g_bar=%llu g_end=%llu issue=%lld spillkeys=%lld landed=%lld "
           "amax=%lld barrier=%lld spillcodes=%lld smemcodes=%lld end=%lld\n",
           static_cast<long long>(a.n), b, static_cast<unsigned long long>(oc_g[0]),
           static_cast<unsigned long long>(oc_g[1]), static_cast<unsigned long long>(oc_g[2]),
           oc_marks[1] - oc_marks[0], oc_marks[2] - oc_marks[0], oc_marks[3] - oc_marks[0],
           oc_marks[4] - oc_marks[0], oc_marks[5] - oc_marks[0], oc_marks[6] - oc_marks[0],
           oc_marks[7] - oc_marks[0], end - oc_marks[0]);
  }
#endif
}
#undef OC_MARK

// ------------------------------------------------------------------------------------ NVFP4 in one read of x

// nvfp4_onchip_kernel: NVFP4 along rows (axis 2, groups of 16; bf16 / f16, x and data 16-byte aligned, amax_mode 0)
// with x read from DRAM once where it fits on chip, instead of amax_kernel + nvfp4_row_kernel. onchip_kernel's plan
// in units of nvfp4_row_item's items (4 consecutive chunks, 32 elements, two groups): a cooperative grid of one CTA
// of kNoThreads threads per SM; round r is the items (r * G + blockIdx.x) * kNoThreads + threadIdx.x. Rounds
// 0 .. kNoRegItems - 1 stay in registers, the next kNoSmemItems in shared memory (chunk-major, so that a warp's
// 16-byte stores and loads do not conflict), and later ("spill") rounds are read for their keys only (L2
// evict_last with kHint). The CTAs max their keys into sync[0], meet at a grid barrier (sync[1]; both zeroed by the
// host), fill the limit table from the tensor scale, then write the codes: spill rounds newest first (read again,
// evict_first), then shared memory, then registers. On 132 SMs x stays on chip up to 132 * 512 * 8 * 32 = 17.3 M
// elements (4096 x 4096 fits). The codes after the barrier overlap no reads: unlike the FP8 one, this kernel's
// arithmetic (nvfp4_row_item) is most of its time there.
constexpr int kNoThreads = 512;
constexpr int kNoRegItems = 2;
constexpr int kNoSmemItems = 6;  // 192 KiB of bf16 per CTA (7 would leave no room for the table and the keys)
constexpr int kNoSpillUnroll = 2;
// The last register item's last kNoTail chunks wait in shared memory instead (a 16-byte slot per thread and chunk,
// filled by cp.async): with all kNoRegItems * kUnroll chunks in registers, ptxas kept one of them in local memory
// for the whole kernel (REG 125, STACK 16, stored after the register loads). With two chunks moved the bf16 instance
// with L2 hints (the one the default rule launches for bf16) has none (REG 128, STACK 0); the f16 and unhinted
// instances still spill (REG 125, STACK 16), and so they did with one chunk or three, or with zero-filling cp.async
// for the chunks past the end (REG 128, STACK 8; the bf16 hinted one then spilled).
#ifndef MXPREC_NVFP4_ONCHIP_TAIL
#define MXPREC_NVFP4_ONCHIP_TAIL 2
#endif
constexpr int kNoTail = MXPREC_NVFP4_ONCHIP_TAIL;
static_assert(kNoTail >= 0 && kNoTail <= kUnroll, "nvfp4_onchip_kernel: the tail is part of one item");
constexpr int nvfp4_onchip_smem_bytes() { return (kNoSmemItems * kUnroll + kNoTail) * kNoThreads * 16; }

template <InType I, bool kHint>
__global__ void __launch_bounds__(kNoThreads, 1) nvfp4_onchip_kernel(Args a, uint32_t* sync) {
  static_assert(I != InType::kF32 && sizeof(Raw<I>) == 16, "nvfp4_onchip_kernel: 16-bit inputs");
  extern __shared__ __align__(16) unsigned char no_smem[];
  Raw<I>* held = reinterpret_cast<Raw<I>*>(no_smem);  // [kNoSmemItems][kUnroll][kNoThreads]
  Raw<I>* tail = held + kNoSmemItems * kUnroll * kNoThreads;  // [kNoTail][kNoThreads]
  const int64_t nck = a.n / 8;                        // even: groups are whole
  const int64_t nitems = (nck + kUnroll - 1) / kUnroll;
  const int64_t per_round = static_cast<int64_t>(gridDim.x) * kNoThreads;
  const int64_t rounds = (nitems + per_round - 1) / per_round;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kNoThreads + threadIdx.x;
  auto first_chunk = [&](int64_t r) { return (r * per_round + base) * kUnroll; };
  const uint64_t keep = kHint ? l2_policy_evict_last() : 0, drop = kHint ? l2_policy_evict_first() : 0;
  // An item's chunks (zeros past the end: key 0), read with an L2 policy where given.
  auto load_item = [&](int64_t k0, Raw<I> (&raw)[kUnroll], bool hinted, uint64_t policy) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t k = k0 + j;
      raw[j] = k < nck ? (kHint && hinted ? load_raw_hint<I>(a.x, k * 8, policy) : load_raw<I>(a.x, k * 8)) : Raw<I>{};
    }
  };
  auto item_key = [](const Raw<I> (&raw)[kUnroll]) {
    uint32_t k = 0;
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) k = max(k, raw_key<I>(raw[j]));
    return k;
  };

  // Phase 1: the held rounds (registers and the tail, then shared memory, keyed on the way), then the spill rounds'
  // keys. reg[kNoRegItems - 1]'s last kNoTail chunks are never set: reg_item reads them from the tail.
  auto in_tail = [](int j, int c) { return j == kNoRegItems - 1 && c >= kUnroll - kNoTail; };
  auto tail_slot = [&](int c) { return tail + (c - (kUnroll - kNoTail)) * kNoThreads + threadIdx.x; };
  if constexpr (kNoTail > 0) {
#pragma unroll
    for (int c = kUnroll - kNoTail; c < kUnroll; ++c) {
      const int64_t k = first_chunk(kNoRegItems - 1) + c;
      if (k < nck) {
        cp_async16(tail_slot(c), static_cast<const Raw<I>*>(a.x) + k);
      } else {
        *tail_slot(c) = Raw<I>{};
      }
    }
    cp_async_commit();
  }
  Raw<I> reg[kNoRegItems][kUnroll];
#pragma unroll
  for (int j = 0; j < kNoRegItems; ++j) {
#pragma unroll
    for (int c = 0; c < kUnroll; ++c) {
      const int64_t k = first_chunk(j) + c;
      if (!in_tail(j, c)) reg[j][c] = k < nck ? load_raw<I>(a.x, k * 8) : Raw<I>{};
    }
  }
  auto reg_item = [&](int j, Raw<I> (&out)[kUnroll]) {
#pragma unroll
    for (int c = 0; c < kUnroll; ++c) {
      out[c] = in_tail(j, c) ? *tail_slot(c) : reg[j][c];
    }
  };
  uint32_t acc = 0;
  static_assert(kNoSmemItems % 2 == 0, "nvfp4_onchip_kernel: shared-memory items loaded two at a time");
#pragma unroll 1
  for (int j0 = 0; j0 < kNoSmemItems; j0 += 2) {  // two items in flight
    Raw<I> t[2][kUnroll];
#pragma unroll
    for (int u = 0; u < 2; ++u) load_item(first_chunk(kNoRegItems + j0 + u), t[u], false, 0);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      acc = max(acc, item_key(t[u]));
#pragma unroll
      for (int c = 0; c < kUnroll; ++c) held[((j0 + u) * kUnroll + c) * kNoThreads + threadIdx.x] = t[u][c];
    }
  }
  for (int64_t r0 = kNoRegItems + kNoSmemItems; r0 < rounds; r0 += kNoSpillUnroll) {
    Raw<I> t[kNoSpillUnroll][kUnroll];
#pragma unroll
    for (int u = 0; u < kNoSpillUnroll; ++u) load_item(r0 + u < rounds ? first_chunk(r0 + u) : nck, t[u], true, keep);
#pragma unroll
    for (int u = 0; u < kNoSpillUnroll; ++u) acc = max(acc, item_key(t[u]));
  }
  if constexpr (kNoTail > 0) cp_async_wait_all();  // the tail (each thread reads back only its own slots)
#pragma unroll
  for (int j = 0; j < kNoRegItems; ++j) {
    Raw<I> t[kUnroll];
    reg_item(j, t);
    acc = max(acc, item_key(t));
  }
  block_amax<kNoThreads>(sync, acc);

  // The tensor amax, once every CTA has maxed its part into sync[0]; then the tensor scale and the limit table.
  grid_barrier(sync + 1);
  __shared__ uint32_t amax_bits;
  __shared__ Nvfp4Limits table[kNvfp4TableEntries];
  if (threadIdx.x == 0) amax_bits = ld_acquire_gpu(sync);
  __syncthreads();
  const float ts = nvfp4_tensor_scale(__uint_as_float(amax_bits)), bm = nvfp4_block_multiplier(ts);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *a.amax = amax_bits;
    *a.tensor_scale = ts;
  }
  nvfp4_fill_limits<I>(table, ts);
  __syncthreads();
  uint32_t unused = 0;  // (the amax is known)
  auto emit = [&](int64_t k0, const Raw<I> (&raw)[kUnroll]) {
    if (k0 < nck) nvfp4_row_item<I, true>(a, k0, k0 + 2 < nck, raw, ts, bm, table, unused);
  };

  // Phase 2: the spill rounds again (newest first), then shared memory, then registers.
  for (int64_t r0 = rounds - 1; r0 >= kNoRegItems + kNoSmemItems; r0 -= kNoSpillUnroll) {
    Raw<I> t[kNoSpillUnroll][kUnroll];
#pragma unroll
    for (int u = 0; u < kNoSpillUnroll; ++u) {
      load_item(r0 - u >= kNoRegItems + kNoSmemItems ? first_chunk(r0 - u) : nck, t[u], true, drop);
    }
#pragma unroll
    for (int u = 0; u < kNoSpillUnroll; ++u) {
      if (r0 - u >= kNoRegItems + kNoSmemItems) emit(first_chunk(r0 - u), t[u]);
    }
  }
#pragma unroll 1  // (two items per turn: 5-7 % slower at 3584 x 4096 and 4096 x 4096, H200)
  for (int j = 0; j < kNoSmemItems; ++j) {
    Raw<I> t[kUnroll];
#pragma unroll
    for (int c = 0; c < kUnroll; ++c) t[c] = held[(j * kUnroll + c) * kNoThreads + threadIdx.x];
    emit(first_chunk(kNoRegItems + j), t);
  }
#pragma unroll
  for (int j = 0; j < kNoRegItems; ++j) {
    Raw<I> t[kUnroll];
    reg_item(j, t);
    emit(first_chunk(j), t);
  }
}

// Axis-2 groups of one row segment (gh == 1, gw % 8 == 0, gw / 8 <= kBlock * kChunks: row scaling of
// rows up to 4096 elements with 128 threads x 4 chunks, 8192 with 128 x 8, 16384 with 512 x 4), FP8 only. A persistent CTA
// walks groups blockIdx.x, + gridDim.x, ...; while it computes one, the next kRowStages - 1 are already
// on their way into shared memory (cp.async), so the loads of a group overlap the amax barrier and the
// codes of the one before (cta_kernel, one CTA per group, waits for its loads with nothing else to do:
// 49 % of copy, against 57 %). A thread copies and reads back only its own chunks, so the buffers need
// no barrier; one __syncthreads per group meets the warps' keys (red is double-buffered, so the next
// group's keys cannot overwrite a slot another warp still reads).
// kChunks: chunk slots per thread. Up to 4 a thread holds its chunks in registers between the amax and the
// codes; more are read from shared memory again (their registers would spill at the 64-register bound).
// On the H200 (bf16, % of copy): rows of 4096 128 x 4 65.0, 64 x 8 61.1, 32 x 16 45.8; rows of 8192
// 256 x 4 65.8, 128 x 8 67.7.
#ifndef MXPREC_ROW_STAGES
#define MXPREC_ROW_STAGES 2
#endif
constexpr int kRowStages = MXPREC_ROW_STAGES;  // shared-memory buffers: groups in flight + 1

template <InType I, int kBlock, int kChunks>
constexpr int row_buffer_bytes() {
  return kBlock * kChunks * 8 * static_cast<int>(in_bytes<I>());
}

template <InType I, int kBlock, int kChunks, ElemFormat kF>
__global__ void __launch_bounds__(kBlock, MXPREC_CTA_THREADS_PER_SM / kBlock) row_kernel(Args a) {
  static_assert(kF == ElemFormat::kE4M3 || kF == ElemFormat::kE5M2, "row_kernel: FP8 codes");
  constexpr bool kHold = kChunks <= 4;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ uint32_t red[2][kBlock / 32];
  constexpr int kChunkBytes = 8 * static_cast<int>(in_bytes<I>());
  constexpr int kBuf = row_buffer_bytes<I, kBlock, kChunks>();
  constexpr ElemFormat f = kF;
  // The thread's chunks of a group are threadIdx.x + i * kBlock, i < kChunks, those below nck: the
  // first `mine` of them. Addresses are one base per group plus constant offsets, and a group's first
  // element needs no 64-bit division for row scaling (one group per row): per group and warp, the
  // divisions and 64-bit index products were most of the per-group address code; removing them cut the
  // kernel's instructions per group and warp from 801 to 702 (ncu, H200).
  const int nck = static_cast<int>(a.gw / 8);
  const int mine = nck > static_cast<int>(threadIdx.x) ? (nck - 1 - static_cast<int>(threadIdx.x)) / kBlock + 1 : 0;
  const auto first_elem = [&a](int64_t g) {
    return a.ngc == 1 ? g * a.cols : (g / a.ngc) * a.cols + (g % a.ngc) * a.gw;
  };
  const auto slot = [](int b, int i) { return smem + b * kBuf + (i * kBlock + threadIdx.x) * kChunkBytes; };
  const auto prefetch = [&](int64_t g, int b) {
    if (g < a.ngroups) {
      const char* src = static_cast<const char*>(a.x) + (first_elem(g) + 8 * threadIdx.x) * in_bytes<I>();
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        if (i < mine) {
#pragma unroll
          for (int h = 0; h < kChunkBytes; h += 16) cp_async16(slot(b, i) + h, src + i * kBlock * kChunkBytes + h);
        }
      }
    }
    cp_async_commit();  // an empty group past the last row keeps wait_group's count uniform
  };
#pragma unroll
  for (int s = 0; s + 1 < kRowStages; ++s) prefetch(blockIdx.x + static_cast<int64_t>(s) * gridDim.x, s);
  int b = 0, parity = 0;
  for (int64_t g = blockIdx.x; g < a.ngroups; g += gridDim.x, b = (b + 1) % kRowStages, parity ^= 1) {
    prefetch(g + static_cast<int64_t>(kRowStages - 1) * gridDim.x, (b + kRowStages - 1) % kRowStages);
    cp_async_wait_group<kRowStages - 1>();  // this group's chunks have landed
    Raw<I> raw[kHold ? kChunks : 1];
    uint32_t key = 0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (i < mine) {
        Raw<I>& held = raw[kHold ? i : 0];
        held = *reinterpret_cast<const Raw<I>*>(slot(b, i));
        if constexpr (I == InType::kBF16) {
          key = max_u16x2(key, bf16_key2(held));
        } else {
          float v[8];
          to_f32<I>(held, v);
          key = max(key, chunk_key(v));
        }
      }
    }
    if constexpr (I == InType::kBF16) key = key2_finish(key);
    key = cta_max_key<kBlock>(key, red[parity]);
    float r;
    const ElemScale es = cta_group_scale(a, g, key, r);
    const bool band = markstein_band(es, r, key);
    uint8_t* out = a.data + first_elem(g) + 8 * threadIdx.x;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (i < mine) {
        float v[8];
        to_f32<I>(kHold ? raw[i] : *reinterpret_cast<const Raw<I>*>(slot(b, i)), v);
        *reinterpret_cast<uint2*>(out + 8 * i * kBlock) = codes8_uniform<true, true>(v, es, r, f, band);
      }
    }
  }
  cp_async_wait_all();
}

// Two consecutive elements of a shared row as floats.
template <InType I>
__device__ __forceinline__ void load_pair(const unsigned char* p, float& lo, float& hi) {
  if constexpr (I == InType::kF32) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    lo = v.x;
    hi = v.y;
  } else {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    if constexpr (I == InType::kBF16) {
      lo = __uint_as_float(w << 16);
      hi = __uint_as_float(w & 0xFFFF0000u);
    } else {
      lo = f16_to_float(w & 0xFFFFu);
      hi = f16_to_float(w >> 16);
    }
  }
}

// col_kernel: rows r .. r + 3 (r % 4 == 0) of a thread's column pair as FP4 / FP6 codes packed down the
// columns (2 rows a byte / 4 rows in 3 bytes, mxprec's packing along the quantized axis) into the shared
// code tile at code_base (kColTile bytes per packed row). w0 / w1: column 0's / 1's 4 codes, row r in the
// low byte.
template <int kBits>
__device__ __forceinline__ void put_packed_rows(uint8_t* code_base, int r, uint32_t w0, uint32_t w1) {
  static_assert(kBits == 4 || kBits == 6, "put_packed_rows: FP4 / FP6 codes");
  uint32_t lo, hi;  // byte k: packed row k of column 0 (lo) / column 1 (hi)
  if constexpr (kBits == 4) {  // bytes 0, 1: column 0's rows (r, r + 1), (r + 2, r + 3); 2, 3: column 1's
    lo = pack4x8(w0, w1);
    hi = lo >> 16;
  } else {
    lo = pack6x4(w0);
    hi = pack6x4(w1);
  }
#pragma unroll
  for (int k = 0; k < kBits / 2; ++k) {
    *reinterpret_cast<uint16_t*>(code_base + (r * kBits / 8 + k) * kColTile) =
        static_cast<uint16_t>(__byte_perm(lo, hi, k | ((4 + k) << 4)));
  }
}

// col_kernel: rows r .. r + 3 of a thread's column pair (column c under sat(c & 1), reciprocal rat(c & 1), in
// the cols_form `form`) as FP6 / FP4 codes of format f, converted through FP32 and packed by put_packed_rows.
template <InType I, int kBits, class ScaleAt, class RecipAt>
__device__ __forceinline__ void fp32_packed_rows(const unsigned char* col_base, uint8_t* code_base, int r, ScaleAt sat,
                                                 RecipAt rat, int form, ElemFormat f) {
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  float x[8];  // rows r .. r + 3, the two columns interleaved
#pragma unroll
  for (int j = 0; j < 4; ++j) load_pair<I>(col_base + (r + j) * kRowBytes, x[2 * j], x[2 * j + 1]);
  const uint2 c = codes8_cols<false>(x, sat, rat, form, f);
  put_packed_rows<kBits>(code_base, r, __byte_perm(c.x, c.y, 0x6420), __byte_perm(c.x, c.y, 0x7531));
}

// NVFP4 down the columns (groups of 16 rows x 1 column) for col_kernel: the thread's 32 rows of its two
// columns are two groups per column, each with its E4M3 block scale under the tensor scale ts (written
// here: scale rows grow0 and grow0 + 1); codes packed two rows a byte, as MX FP4's. Returns the max |x|
// key of the thread's elements.
// table: the CTA's limit table (nvfp4_fill_limits; not read for f32 inputs or without MXPREC_NVFP4_TABLE).
template <InType I>
__device__ __forceinline__ uint32_t nvfp4_col_codes(const Args& a, const unsigned char* col_base, uint8_t* code_base,
                                                    int64_t grow0, int64_t col, float ts, const Nvfp4Limits* table) {
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  const float bm = nvfp4_block_multiplier(ts);
  uint32_t all = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows 16 h .. 16 h + 15: one group per column
    uint32_t k0 = 0, k1 = 0;
    if constexpr (I == InType::kF32) {
#pragma unroll 8
      for (int r = 16 * h; r < 16 * h + 16; ++r) {
        float lo, hi;
        load_pair<I>(col_base + r * kRowBytes, lo, hi);
        k0 = max(k0, abs_key(lo));
        k1 = max(k1, abs_key(hi));
      }
    } else {  // a row's two elements: one max.u16x2 (column per lane)
      uint32_t k2 = 0;
#pragma unroll 8
      for (int r = 16 * h; r < 16 * h + 16; ++r) {
        k2 = max_u16x2(k2, *reinterpret_cast<const uint32_t*>(col_base + r * kRowBytes) & 0x7FFF7FFFu);
      }
      k0 = key16<I>(k2 & 0xFFFFu);
      k1 = key16<I>(k2 & 0xFFFF0000u);
    }
    all = max(all, max(k0, k1));
    uint8_t* scale = static_cast<uint8_t*>(a.scale) + (grow0 + h) * a.ngc + col;
    // The codes by limits (column c's limits in lane c of lim), for 16-bit inputs whose two groups allow them.
    const auto by_limits = [&](const uint32_t (&lim)[7]) {
#pragma unroll 4
      for (int r = 16 * h; r < 16 * h + 16; r += 2) {  // packed row r / 2: byte 0 column 0's rows, byte 1 column 1's
        const uint32_t c0 = nvfp4_codes_by_limits<I>(*reinterpret_cast<const uint32_t*>(col_base + r * kRowBytes), lim);
        const uint32_t c1 =
            nvfp4_codes_by_limits<I>(*reinterpret_cast<const uint32_t*>(col_base + (r + 1) * kRowBytes), lim);
        *reinterpret_cast<uint16_t*>(code_base + (r / 2) * kColTile) =
            static_cast<uint16_t>(__byte_perm(c0 | (c1 << 4), 0u, 0x0020));
      }
    };
    if constexpr (I != InType::kF32 && MXPREC_NVFP4_TABLE) {
      const int b0 = nvfp4_block_byte(__uint_as_float(finish_key(k0)), ts, bm);
      const int b1 = nvfp4_block_byte(__uint_as_float(finish_key(k1)), ts, bm);
      if (b0 >= 0 && b1 >= 0) {  // nearly always
        uint32_t l0[7], l1[7];
        if (nvfp4_table_limits(table, b0, l0) & nvfp4_table_limits(table, b1, l1)) {  // nearly always
          scale[0] = static_cast<uint8_t>(b0);
          scale[1] = static_cast<uint8_t>(b1);
          uint32_t lim[7];
#pragma unroll
          for (int k = 0; k < 7; ++k) lim[k] = __byte_perm(l0[k], l1[k], 0x7610);
          by_limits(lim);
          continue;
        }
      }
    }
    const Nvfp4Scale b[2] = {nvfp4_group_block(k0, ts, bm, scale, 0), nvfp4_group_block(k1, ts, bm, scale, 1)};
    if constexpr (I != InType::kF32 && !MXPREC_NVFP4_TABLE) {
      if (nvfp4_limits_apply(b[0].eff) && nvfp4_limits_apply(b[1].eff)) {  // nearly always: codes by limits
        uint32_t lim[7];  // column c's limits in lane c
#pragma unroll
        for (int k = 0; k < 7; ++k) lim[k] = nvfp4_limit16_of<I>(b[0].eff, k) | (nvfp4_limit16_of<I>(b[1].eff, k) << 16);
        by_limits(lim);
        continue;
      }
    }
    const ElemScale es[2] = {nvfp4_elem_scale(b[0]), nvfp4_elem_scale(b[1])};
    const float rcp[2] = {recip_of_divisor(es[0]), recip_of_divisor(es[1])};
    const auto sat = [&es](int i) { return es[i & 1]; };
    const auto rat = [&rcp](int i) { return rcp[i & 1]; };
    if (nvfp4_has_multiplier(es[0], rcp[0]) && nvfp4_has_multiplier(es[1], rcp[1])) {  // nearly always
      // A loop without the generic path's out-of-line calls: with them in it, the kernel kept a stack frame.
      const float mul[2] = {nvfp4_multiplier(es[0], rcp[0]), nvfp4_multiplier(es[1], rcp[1])};
      const float div[2] = {nvfp4_divisor(es[0]), nvfp4_divisor(es[1])};
      const uint32_t keep = nvfp4_keep(es[0], 0x00FF00FFu) | nvfp4_keep(es[1], 0xFF00FF00u);
#pragma unroll 2
      for (int r = 16 * h; r < 16 * h + 16; r += 4) {
        float x[8];  // rows r .. r + 3, the two columns interleaved
#pragma unroll
        for (int j = 0; j < 4; ++j) load_pair<I>(col_base + (r + j) * kRowBytes, x[2 * j], x[2 * j + 1]);
        uint2 c = nvfp4_codes8(x, [&mul](int i) { return mul[i & 1]; }, [&div](int i) { return div[i & 1]; });
        c = make_uint2(c.x & keep, c.y & keep);
        put_packed_rows<4>(code_base, r, __byte_perm(c.x, c.y, 0x6420), __byte_perm(c.x, c.y, 0x7531));
      }
    } else {  // an exact mode (rare): cols_form's generic path
      const int form = cols_form<2>(sat, rat);
#pragma unroll 2
      for (int r = 16 * h; r < 16 * h + 16; r += 4) {
        fp32_packed_rows<I, 4>(col_base, code_base, r, sat, rat, form, ElemFormat::kE2M1);
      }
    }
  }
  return all;
}

// col_kernel kRows: the row groups (1 x 128 along axis 2, one per tile row) of the staged 128 x 128 tile, with the
// codes and scales hgroup_kernel writes for them (mxprec_quantize_rows_transposed: Dgrad's copy of dY beside Wgrad's
// K-major one, from one read of x). A warp owns 16 tile rows, 4 lanes a row in two passes of 8 rows; a lane's
// chunks are q, q + 4, q + 8, q + 12 (q = lane % 4), hgroup_kernel's own split of a 1 x 128 group, so the group
// key (its 4-lane max), the scale (group_elem_scale) and the codes (codes8_uniform, band from the key) are that
// kernel's, bit for bit. Odd rows read their chunk pairs swapped, so each quarter warp's 16-byte shared loads
// (two rows) hit 8 distinct bank groups; a row's 4 lanes store one whole 32-byte sector per step.
template <InType I>
__device__ __forceinline__ void tile_row_groups(const Args& a, const unsigned char* xin, int64_t r0, int64_t c0) {
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  constexpr int kChunkBytes = 8 * static_cast<int>(in_bytes<I>());
  Args ar = a;  // the row copy's scale attributes (kind kTile, amax_mode 0 / 3: the scales come from the keys)
  ar.scale = a.row_scale;
  ar.fmt = a.row_fmt;
  ar.pow2 = a.row_pow2;
  const ElemFormat f = static_cast<ElemFormat>(a.row_fmt);
  const int lane = threadIdx.x & 31, q = lane & 3, sub = lane >> 2, odd = sub & 1;
  const int64_t ngc = a.cols / kColTile;
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    const int row = (threadIdx.x >> 5) * 16 + pass * 8 + sub;
    const unsigned char* src = xin + row * kRowBytes;
    const auto chunk_of = [&](int j) { return q + 4 * (j ^ odd); };
    const auto raw_of = [&](int j) { return *reinterpret_cast<const Raw<I>*>(src + chunk_of(j) * kChunkBytes); };
    uint32_t key = 0;
    if constexpr (I == InType::kBF16) {
      const Raw<I> raw[4] = {raw_of(0), raw_of(1), raw_of(2), raw_of(3)};
      key = bf16_chunks_key(raw);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float v[8];
        to_f32<I>(raw_of(j), v);
        key = max(key, chunk_key(v));
      }
    }
    key = max(key, __shfl_xor_sync(kFull, key, 1));
    key = max(key, __shfl_xor_sync(kFull, key, 2));
    const ElemScale es = group_elem_scale(ar, (r0 + row) * ngc + c0 / kColTile, key, 1.0f, q == 0);
    const float r = recip_of_divisor(es);
    const bool band = markstein_band(es, r, key);
    uint8_t* out = a.row_data + (r0 + row) * a.cols + c0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // the chunks read again from shared memory: fewer live registers
      float v[8];
      to_f32<I>(raw_of(j), v);
      *reinterpret_cast<uint2*>(out + chunk_of(j) * 8) = codes8_uniform<true, true>(v, es, r, f, band);
    }
  }
}

// tall_ring_kernel's consumers (its first kThreads threads) meet at this named barrier (0 is __syncthreads').
constexpr int kRingConsumerBarrier = 1;
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync %0, %1;" ::"n"(kRingConsumerBarrier), "n"(kThreads) : "memory");
}

// The max |x| keys k0, k1 of one column pair over the kColSeg rows from col_base (a staged tile's kRowBytes rows).
template <InType I>
__device__ __forceinline__ void col_pair_keys(const unsigned char* col_base, uint32_t& k0, uint32_t& k1) {
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  k0 = 0;
  k1 = 0;
  if constexpr (I == InType::kBF16) {  // a row's two bf16 elements: one max.u16x2 (column per lane)
    uint32_t k2 = 0;
#pragma unroll 8
    for (int r = 0; r < kColSeg; ++r) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(col_base + r * kRowBytes) & 0x7FFF7FFFu;
      k2 = max_u16x2(k2, w);
    }
    k0 = k2 << 16;
    k1 = k2 & 0xFFFF0000u;
  } else {
#pragma unroll 8
    for (int r = 0; r < kColSeg; ++r) {
      float lo, hi;
      load_pair<I>(col_base + r * kRowBytes, lo, hi);
      k0 = max(k0, abs_key(lo));
      k1 = max(k1, abs_key(hi));
    }
  }
}

// The codes and scales of col_kernel's staged 128 x 128 tile xin (shared memory; kRowBytes per row), for the tile at
// rows r0, columns c0 of `a`'s view: every thread of the CTA calls it once (it synchronizes), after xin is complete.
// codes / seg_keys: the kernel's shared code tile and segment keys. Returns the max |x| key of the thread's elements;
// ts: NVFP4's tensor scale (1 for the other kinds). kRingBarrier: the CTA's kThreads threads are tall_ring_kernel's
// consumers, and they synchronize on named barrier kRingConsumerBarrier instead of __syncthreads. kStagedKeys (with
// a.keys): the tile's kColTile group keys are already in seg_keys[0 .. kColTile) (column c0 + j at j), staged by the
// caller, instead of read from a.keys (L2) here.
template <InType I, bool kBand, int kBits, bool kNvfp4, bool kTransposed, bool kRows, bool kInPlace = false,
          bool kRingBarrier = false, bool kStagedKeys = false>
__device__ __forceinline__ uint32_t col_tile_codes(const Args& a, const unsigned char* xin, uint8_t* codes,
                                                   uint32_t* seg_keys, int64_t r0, int64_t c0, float& ts,
                                                   const Nvfp4Limits* nvfp4_table = nullptr) {
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  constexpr int kCodeRows = kColTile * kBits / 8;  // rows of packed codes
  static_assert(!kInPlace || (kBits == 8 && !kNvfp4 && !kTransposed), "col_tile_codes: in place for FP8 rows only");
  // kInPlace: codes is xin, and the two codes of each row of a column pair go to the first two bytes of that row's x
  // words, which only this thread reads (after it has read them).
  constexpr int kCodeRowBytes = kInPlace ? kRowBytes : kColTile;
  constexpr int kCodePairBytes = kInPlace ? 2 * static_cast<int>(in_bytes<I>()) : 2;
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const int64_t cols = a.cols;
  ts = 1.0f;
  const auto sync_consumers = [] {  // every thread of the CTA, or tall_ring_kernel's consumers
    if constexpr (kRingBarrier) {
      consumer_sync();
    } else {
      __syncthreads();
    }
  };
  const int pair = threadIdx.x % (kColTile / 2), seg = threadIdx.x / (kColTile / 2);
  const unsigned char* col_base = xin + seg * kColSeg * kRowBytes + 2 * pair * in_bytes<I>();
  uint32_t thread_key;  // max |x| key of the thread's elements
  if constexpr (kNvfp4) {
    ts = nvfp4_ts(a);
    thread_key = nvfp4_col_codes<I>(a, col_base, codes + seg * (kColSeg / 2) * kColTile + 2 * pair,
                                    (r0 + seg * kColSeg) / 16, c0 + 2 * pair, ts, nvfp4_table);
  } else {
    uint32_t k0, k1;  // max |x| keys of the two columns
    col_pair_keys<I>(col_base, k0, k1);
    // Group keys: a group of gh rows spans gh / 32 segments of this column pair; a 128 x 128 tile group
    // is the whole CTA tile; groups taller than the tile (row scaling along axis 1) take their keys from
    // the earlier keys pass (a.keys).
    const bool whole_tile = a.gw == kColTile;
    const bool keys_in = a.keys != nullptr;
    // gh is 32, 64 or 128 unless the keys come in (groups taller than the tile), so the group row and the
    // segment's place in its group are shifts and masks there (segs_per_group is 1, 2 or 4).
    const int segs_per_group = whole_tile ? kSegsPerTile : (keys_in ? 1 : static_cast<int>(a.gh) / kColSeg);
    const int64_t grow = keys_in ? (r0 + seg * kColSeg) / a.gh : (r0 + seg * kColSeg) >> (__ffs(static_cast<int>(a.gh)) - 1);
    const int64_t col = c0 + 2 * pair;
    uint32_t g0 = k0, g1 = k1;
    if (keys_in && kStagedKeys) {
      g0 = seg_keys[2 * pair];
      g1 = seg_keys[2 * pair + 1];
    } else if (keys_in) {
      g0 = __ldcg(a.keys + grow * a.ngc + col);  // L2: tall_col_kernel's keys are maxed there during the launch
      g1 = __ldcg(a.keys + grow * a.ngc + col + 1);
    } else if (whole_tile) {
      const uint32_t w = __reduce_max_sync(kFull, max(k0, k1));
      if ((threadIdx.x & 31) == 0) seg_keys[threadIdx.x / 32] = w;
      sync_consumers();
      g0 = 0;
#pragma unroll
      for (int q = 0; q < kThreads / 32; ++q) g0 = max(g0, seg_keys[q]);
      g1 = g0;
    } else if (segs_per_group > 1) {
      seg_keys[seg * kColTile + 2 * pair] = k0;
      seg_keys[seg * kColTile + 2 * pair + 1] = k1;
      sync_consumers();
      const int first = seg & -segs_per_group;
      for (int q = first; q < first + segs_per_group; ++q) {
        g0 = max(g0, seg_keys[q * kColTile + 2 * pair]);
        g1 = max(g1, seg_keys[q * kColTile + 2 * pair + 1]);
      }
    }
    ElemScale es[2];
    if (whole_tile) {
      es[0] = group_elem_scale(a, grow * a.ngc + c0 / kColTile, g0, 1.0f, threadIdx.x == 0);
      es[1] = es[0];
    } else {
      const bool owner = keys_in ? (r0 + seg * kColSeg) % a.gh == 0 : (seg & (segs_per_group - 1)) == 0;
      // FP6 / FP4 codes here are MX's (the dispatch sends no other kind): its scale without the kind switch.
      const auto scale_of = [&](int64_t g, uint32_t key) {
        return kBits == 8 ? group_elem_scale(a, g, key, 1.0f, owner) : mx_group_elem_scale(a, g, key, owner);
      };
      if constexpr (kTransposed) {  // scale (B, C, R / gh): column col's group row within its batch entry
        const int64_t b = r0 / a.batch_rows, grows = a.batch_rows / a.gh;
        const int64_t g = (b * cols + col) * grows + (grow - b * grows);
        es[0] = scale_of(g, g0);
        es[1] = scale_of(g + grows, g1);
      } else {
        es[0] = scale_of(grow * a.ngc + col, g0);
        es[1] = scale_of(grow * a.ngc + col + 1, g1);
      }
    }
    float rcp[2] = {recip_of_divisor(es[0]), recip_of_divisor(es[1])};
    const auto sat = [&es](int i) { return es[i & 1]; };
    const auto rat = [&rcp](int i) { return rcp[i & 1]; };
    const int form = cols_form<2>(sat, rat);
    // Both columns' quotients over this thread's 32 rows in the Markstein band: the straight division.
    const float2 bo[2] = {band_operands(es[0], rcp[0]), band_operands(es[1], rcp[1])};
    const bool in_band = kBand && band_admits(bo[0].y, k0) && band_admits(bo[1].y, k1);
    const bool e5m2 = f == ElemFormat::kE5M2;
    // MX FP6 / FP4 from bf16 with both columns in kMul mode: the bf16-pair encoder, a column per lane.
    const bool pairs = I == InType::kBF16 && kBits != 8 && es[0].mode == ElemMode::kMul && es[1].mode == ElemMode::kMul;
    const uint32_t p2 = (__float_as_uint(es[0].p) >> 16) | (__float_as_uint(es[1].p) & 0xFFFF0000u);
    uint8_t* code_base = codes + seg * (kColSeg * kBits / 8) * kCodeRowBytes + pair * kCodePairBytes;
    // FP8 codes of rows r .. r + 3 of the column pair (row j's two codes in bytes 2 j, 2 j + 1 of c.x, c.y): the
    // straight division (band) or the per-element path, chosen by the caller once, outside its row loop (in it, the
    // per-iteration choice cost the 1 x 128 tiles down the columns 73 -> 77 % of copy on the H200).
    const auto fp8_rows4 = [&](auto band, int r) {
      float x[8];  // rows r .. r + 3, columns (2 pair, 2 pair + 1) interleaved
#pragma unroll
      for (int j = 0; j < 4; ++j) load_pair<I>(col_base + (r + j) * kRowBytes, x[2 * j], x[2 * j + 1]);
      if constexpr (decltype(band)::value) {
        return in_band_fp8_codes8(x, [&bo](int i) { return bo[i & 1].x; }, [&bo](int i) { return bo[i & 1].y; }, e5m2);
      } else {
        return codes8_cols<true>(x, sat, rat, form, f);
      }
    };
    if constexpr (kTransposed) {
      // Each column's 32 codes (row r in byte r % 4 of word r / 4: bytes 0, 2 / 1, 3 of c.x, c.y) go to the shared
      // tile codes[column][row] as two 16-byte chunks, chunk k of column c at k ^ ((c >> 1) & 7) (each quarter
      // warp's 16-byte stores then hit 8 distinct chunks: no bank conflict); the copy below writes them out
      // row-contiguous, as the (B, C, R) result lies. (Stored straight from the registers, 16 bytes per column
      // and thread, the kernel ran at 51 % of copy against 82 % for axis 1 in place, H200.)
      uint32_t t0[kColSeg / 4], t1[kColSeg / 4];
      const auto fp8_cols = [&](auto band) {
#pragma unroll
        for (int i = 0; i < kColSeg / 4; ++i) {
          const uint2 c = fp8_rows4(band, 4 * i);
          t0[i] = __byte_perm(c.x, c.y, 0x6420);
          t1[i] = __byte_perm(c.x, c.y, 0x7531);
        }
      };
      if (in_band) {
        fp8_cols(std::true_type{});
      } else {
        fp8_cols(std::false_type{});
      }
      uint4* col0 = reinterpret_cast<uint4*>(codes + 2 * pair * kColTile);  // columns 2 pair, 2 pair + 1
      const int sw = pair & 7;                                              // = (column >> 1) & 7 for both
      col0[(2 * seg) ^ sw] = make_uint4(t0[0], t0[1], t0[2], t0[3]);
      col0[(2 * seg + 1) ^ sw] = make_uint4(t0[4], t0[5], t0[6], t0[7]);
      col0[kColTile / 16 + ((2 * seg) ^ sw)] = make_uint4(t1[0], t1[1], t1[2], t1[3]);
      col0[kColTile / 16 + ((2 * seg + 1) ^ sw)] = make_uint4(t1[4], t1[5], t1[6], t1[7]);
    } else if constexpr (kBits == 8) {
      // Tried for tall_col_kernel's 48-register in-place instances (sixty-sixth session, h100_tall_inplace_unroll.md):
      // unrolled by 1 they keep 29 instead of 46 local accesses in the body (bf16), and ran level with this; and the
      // FP8 format as their template argument (as row_kernel's) halved the predicated converts but not the spills.
      const auto fp8_rows = [&](auto band) {
#pragma unroll 2
        for (int r = 0; r < kColSeg; r += 4) {
          const uint2 c = fp8_rows4(band, r);
          // Row j's two codes are bytes 2 j, 2 j + 1 of c (no byte permutes as in put_packed_rows: MXFP8 down
          // the columns measured 74.3 % of copy this way, 73.0 % through them)
          *reinterpret_cast<uint16_t*>(code_base + (r + 0) * kCodeRowBytes) = static_cast<uint16_t>(c.x);
          *reinterpret_cast<uint16_t*>(code_base + (r + 1) * kCodeRowBytes) = static_cast<uint16_t>(c.x >> 16);
          *reinterpret_cast<uint16_t*>(code_base + (r + 2) * kCodeRowBytes) = static_cast<uint16_t>(c.y);
          *reinterpret_cast<uint16_t*>(code_base + (r + 3) * kCodeRowBytes) = static_cast<uint16_t>(c.y >> 16);
        }
      };
      if (in_band) {
        fp8_rows(std::true_type{});
      } else {
        fp8_rows(std::false_type{});
      }
    } else {
      // The encoder and the format are chosen once, outside the row loop (with the tile load above: MXFP4
      // down the columns 58 -> 67.5 % of copy on the H200).
      const auto pair_rows = [&](auto fmt) {
#pragma unroll 2
        for (int r = 0; r < kColSeg; r += 4) {
          uint32_t w[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const uint32_t*>(col_base + (r + j) * kRowBytes);
          const uint2 c = narrow_rows4_bf16_of<decltype(fmt)::value>(w, p2);
          put_packed_rows<kBits>(code_base, r, c.x, c.y);
        }
      };
      if constexpr (I == InType::kBF16) {
        if (pairs) {
          if constexpr (kBits == 4) {
            pair_rows(std::integral_constant<ElemFormat, ElemFormat::kE2M1>{});
          } else if (f == ElemFormat::kE2M3) {
            pair_rows(std::integral_constant<ElemFormat, ElemFormat::kE2M3>{});
          } else {
            pair_rows(std::integral_constant<ElemFormat, ElemFormat::kE3M2>{});
          }
        }
      }
      if (!pairs) {
#pragma unroll 2
        for (int r = 0; r < kColSeg; r += 4) fp32_packed_rows<I, kBits>(col_base, code_base, r, sat, rat, form, f);
      }
    }
    thread_key = max(k0, k1);
  }
  sync_consumers();
  if constexpr (kTransposed) {  // column c's 128 codes: rows r0 .. r0 + 127 of out[b][c0 + c] (B, C, R)
    const int64_t b = r0 / a.batch_rows;
    uint8_t* out = a.data + (b * cols + c0) * a.batch_rows + (r0 - b * a.batch_rows);
#pragma unroll
    for (int i = threadIdx.x; i < kColTile * kColTile / 16; i += kThreads) {
      const int c = i / (kColTile / 16), piece = i % (kColTile / 16);
      *reinterpret_cast<uint4*>(out + c * a.batch_rows + piece * 16) =
          reinterpret_cast<const uint4*>(codes + c * kColTile)[piece ^ ((c >> 1) & 7)];
    }
    if constexpr (kRows) tile_row_groups<I>(a, xin, r0, c0);  // x's tile is still in shared memory
  } else if constexpr (kInPlace) {
    // 8 codes of a row (column pairs 4 p .. 4 p + 3): the first two bytes of 4 pairs' x words, one 16-byte load of
    // xin (two for f32), leaving as one 8-byte store. (16 codes per thread from two loads of xin, leaving as one
    // 16-byte store, measured 5 points of copy slower on an H100, h100_quantize_inplace.md.)
#pragma unroll
    for (int i = threadIdx.x; i < kColTile * kColTile / 8; i += kThreads) {
      const int row = i / (kColTile / 8), piece = i % (kColTile / 8);
      const uint4* w = reinterpret_cast<const uint4*>(codes + row * kCodeRowBytes + piece * 4 * kCodePairBytes);
      uint2 out;
      if constexpr (kCodePairBytes == 4) {
        const uint4 v = w[0];
        out = make_uint2(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.z, v.w, 0x5410));
      } else {
        const uint4 v0 = w[0], v1 = w[1];
        out = make_uint2(__byte_perm(v0.x, v0.z, 0x5410), __byte_perm(v1.x, v1.z, 0x5410));
      }
      *reinterpret_cast<uint2*>(a.data + (r0 + row) * cols + c0 + piece * 8) = out;
    }
  } else {
#pragma unroll
    for (int i = threadIdx.x; i < kCodeRows * kColTile / 16; i += kThreads) {
      const int row = i / (kColTile / 16), piece = i % (kColTile / 16);
      *reinterpret_cast<uint4*>(a.data + (r0 * kBits / 8 + row) * cols + c0 + piece * 16) =
          *reinterpret_cast<const uint4*>(codes + row * kColTile + piece * 16);
    }
  }
  return thread_key;
}

// Starts the cp.async copies of the 128 x 128 tile at rows r0, columns c0 of `a`'s view into xin (kColTile rows of
// kColTile elements); the caller waits (cp_async_wait_all + __syncthreads). A thread copies 16-byte piece `piece` of
// rows row0, row0 + kRowStep, ... (one address computation, then constant strides; the per-piece 64-bit index
// arithmetic had been 13 % of the MXFP4 instance's instructions).
template <InType I>
__device__ __forceinline__ void col_load_tile(const Args& a, unsigned char* xin, int64_t r0, int64_t c0) {
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  constexpr int kPieces = kRowBytes / 16, kRowStep = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0 && kColTile % kRowStep == 0, "col_kernel: tile load geometry");
  const int row0 = threadIdx.x / kPieces, piece = threadIdx.x % kPieces;
  const char* src = static_cast<const char*>(a.x) + ((r0 + row0) * a.cols + c0) * in_bytes<I>() + piece * 16;
  const int64_t src_step = kRowStep * a.cols * static_cast<int64_t>(in_bytes<I>());
  unsigned char* dst = xin + row0 * kRowBytes + piece * 16;
#pragma unroll
  for (int k = 0; k < kColTile / kRowStep; ++k) cp_async16(dst + k * kRowStep * kRowBytes, src + k * src_step);
}

// kBand: the kind can divide (row / tile scales), so a thread whose columns markstein_band admits takes the
// straight Markstein division (in_band_fp8_codes8); MX scales are powers of two (kMul) and skip it.
// kTransposed (FP8 groups of 32 / 64 / 128 rows x 1 column): the codes and scales of the (B, C, R) transpose,
// quantized along its last axis (mxprec_quantize_transposed), instead of x's own layout.
// kBits: the code width. 8: FP8 (any kind of the dispatch below); 6 / 4: MX FP6 / FP4, codes packed down
// the columns (4 rows in 3 bytes / 2 rows in a byte, mxprec's packing along the quantized axis), so the
// tile's codes are kColTile * kBits / 8 rows of kColTile bytes. kNvfp4 (kBits 4): NVFP4's groups of 16 rows
// (nvfp4_col_codes). kRows (with kTransposed, 1 x 128 row groups): also x's own row groups (tile_row_groups); those
// instances are held to 4 CTAs per SM (64 registers; 79 without the bound, 3 CTAs per SM and 7.5 % slower on the
// H200), the others keep no minimum (0: their registers, and SASS, as before the kRows instances existed).
template <InType I, bool kBand, int kBits = 8, bool kNvfp4 = false, bool kTransposed = false, bool kRows = false>
__global__ void __launch_bounds__(kThreads, kRows ? 4 : 0) col_kernel(Args a) {
  static_assert(kBits == 8 || (!kBand && (kBits == 6 || kBits == 4)), "col_kernel: FP8, or MX FP6 / FP4");
  static_assert(!kNvfp4 || kBits == 4, "col_kernel: NVFP4 codes are 4 bits");
  static_assert(!kTransposed || (kBits == 8 && !kNvfp4), "col_kernel: transposed output for FP8 codes only");
  static_assert(!kRows || kTransposed, "col_kernel: the row groups come with the transposed output");
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  unsigned char* xin = smem;                                                   // [128][128] elements of x
  uint8_t* codes = smem + kColTile * kRowBytes;                                // [kCodeRows][128] codes
  uint32_t* seg_keys = reinterpret_cast<uint32_t*>(codes + kColTile * kColTile);  // [segment][column]
  // A 2-D grid (x: column tiles, y: row tiles): no division of the block index (22 of the MXFP4 instance's
  // 1122 instructions per warp had been one).
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColTile, c0 = static_cast<int64_t>(blockIdx.x) * kColTile;

  col_load_tile<I>(a, xin, r0, c0);
  constexpr bool kTable = kNvfp4 && I != InType::kF32 && MXPREC_NVFP4_TABLE;
  __shared__ Nvfp4Limits nvfp4_table[kTable ? kNvfp4TableEntries : 1];
  if constexpr (kTable) nvfp4_fill_limits<I>(nvfp4_table, nvfp4_ts(a));  // while the tile loads
  cp_async_wait_all();
  __syncthreads();

  float ts;  // NVFP4's tensor scale
  const uint32_t thread_key =
      col_tile_codes<I, kBand, kBits, kNvfp4, kTransposed, kRows>(a, xin, codes, seg_keys, r0, c0, ts, nvfp4_table);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *a.tensor_scale = ts;
  if (a.acc_amax) block_amax(a.amax, thread_key);
}

// ------------------------------------------------------------------------------------ tall column groups, one launch

// Row scaling along axis 1 (FP8 groups of gh = 128 T rows x 1 column, T > 1; rows and cols multiples of 128) in one
// launch whose second read of x comes from L2, instead of vgroup_kernel's keys pass + col_kernel (x read from DRAM
// twice: 46 % of copy on the H200). A unit is one group row's 128-column strip of T tiles (tall_order.h). A CTA takes
// a ticket (not blockIdx: tickets are claimed in order by CTAs already running) and does up to two things: pass 1 of
// one tile (its 128 column keys, read into registers and maxed into keys[] by atomicMax; then the tile is counted
// into done[unit]) and pass 2 of the tile keyed `lag` tickets earlier (col_kernel's body, col_tile_codes with keys_in,
// once done[unit] == T). The pass-1 tickets of a unit all precede its pass-2 tickets (lag >= T), so a CTA waits only
// for smaller tickets, claimed by CTAs already running, and the count itself waits for nothing: no deadlock, whatever
// the residency (tall_order_host_test.cc checks the order). The wait (and pass 2's group keys, staged into shared
// memory) runs on warp kTallKeysWarp after pass 1's key reduction, beside warps 0 .. 3's atomics and the count's
// release (a named barrier of those four warps): the release, the acquire and the keys' L2 read had been three round
// trips in a row in every CTA's chain. The wait must not come before that reduction's __syncthreads: then every count
// waits for an earlier unit, and the units' completions chain across CTAs (sixty-first session, h100_tall_keys_warp.md:
// 57-62 % of copy against 68-70 %). Pass 2's bf16 codes by one multiply where both columns' amaxes are certified
// (bf16_mul_certificate.h, as onchip_kernel) were correct but slower: 69.4 -> 64.5 % at 16384 x 4096, 70.7 -> 65.8 at
// 8192 x 8192 (sixty-second session, h100_quantize_mul_certificate.md; not profiled).
// Pass 1's DRAM read and pass 2's L2 read are in flight together. kHint: pass 1 reads with
// L2 evict_last (cp.async with an L2::cache_hint for pass 2's read, evict_first, compiled to an LDGSTS on a misaligned
// uniform-register descriptor, CUDA 13.0, and faulted with an illegal instruction on an H100). sync (XLA scratch,
// zeroed by the host): [0] the ticket counter, [1 + u] done[u]; a.keys (zeroed): the group keys. Measured (H100,
// bf16, % of copy, two passes / one launch): 16384 x 4096 52.8 / 61.9, 8192 x 8192 52.6 / 64.1, 4096 x 4096
// 43.4 / 53.4 (h100_quantize_tall.md); at the smallest lag codes wait for keys in flight, at 512 tiles the second
// read starts to miss L2. With the tile buffers 128-byte aligned and tall_lag's rule of the fifty-sixth session
// (264 tiles at all three): 67.0-67.3 / 67.6-68.0 / 56.1-56.7 (h100_quantize_l2.md, call 11). Persistent CTAs
// looping over tickets were measured there too: 80 registers (3 CTAs per SM) or spills at 64, and no faster.
// kInPlace (fifty-seventh session): pass 2 writes each code over the first bytes of its own x word in shared memory
// (col_tile_codes kInPlace) instead of into a 16 KB code tile, so that a CTA needs 38 KB of shared memory (with the
// reserved 1 KB) and, held to 48 registers (a few words spilled to the stack), 5 CTAs fit on an SM instead of 4;
// faster at the large shapes, slower at 4096 x 4096 (tall_in_place_by_size). At 6 CTAs per SM (40 registers, 80 bytes
// of stack) it was slower still. On an H200 (h200_cuda_quantize_58.md) it takes nearly the H100's time (88.8 against
// ~98 us at 16384 x 4096), 54.9 / 55.2 / 45.0 % of the faster copy: the chain above bounds it, not DRAM.
// The first row r0 and column c0 of tile u * tiles + i (tall_order.h's numbering: unit u = group row * strips +
// strip, tile i of the unit's `tiles`) of a view with `strips` 128-column strips: tall_col_kernel's and
// tall_ring_kernel's tiles.
__device__ __forceinline__ void tall_tile_origin(int64_t tile, int64_t tiles, int64_t strips, int64_t& r0,
                                                 int64_t& c0) {
  const int64_t unit = tile / tiles;
  r0 = ((unit / strips) * tiles + tile % tiles) * kColTile;
  c0 = (unit % strips) * kColTile;
}
constexpr uint32_t kTallSmemPad = 128;
constexpr int kTallInPlaceCtas = 5;  // CTAs per SM of the in-place instances (2-byte inputs): at most 48 registers
// Dynamic shared memory: x's tile, then pass 1's [warp][column] keys and pass 2's staged group keys (kInPlace), or
// col_kernel's code tile and segment keys (pass 1's keys in the code tile, pass 2's group keys in the segment keys).
template <InType I, bool kInPlace>
constexpr size_t tall_smem_bytes() {
  return (kInPlace ? static_cast<size_t>(kColTile) * kColTile * in_bytes<I>() + (kThreads / 32 + 1) * kColTile * 4
                   : col_smem_bytes<I>()) +
         kTallSmemPad;
}
constexpr int kTallKeysWarp = kColTile / 32;  // the first warp with no pass-1 atomics: it stages pass 2's group keys
constexpr int kTallCountBarrier = 1;          // named barrier of the warps with pass-1 atomics (0 is __syncthreads')
template <InType I, bool kHint, bool kInPlace>
__global__ void __launch_bounds__(kThreads, kInPlace && in_bytes<I>() == 2 ? kTallInPlaceCtas : 0)
    tall_col_kernel(Args a, uint32_t* sync, int64_t lag) {
  // The tile buffers start on a 128-byte boundary (launch_tall adds kTallSmemPad bytes for it): behind this kernel's
  // static shared words the dynamic base sits 16 bytes off a 32-byte sector, and each warp's cp.async of 512 bytes of
  // x's second read then took 32 L2 sectors instead of 16 (ncu, h100_quantize_l2.md). Not __align__(128) on the
  // array: the dynamic base's alignment is the TU's largest, so that would move every kernel's.
  extern __shared__ __align__(16) unsigned char tall_smem[];
  unsigned char* smem =
      tall_smem + ((kTallSmemPad - static_cast<uint32_t>(__cvta_generic_to_shared(tall_smem))) & (kTallSmemPad - 1));
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  constexpr int kChunksPerRow = kColTile / 8, kRowStep = kThreads / kChunksPerRow;  // pass 1: chunk c of rows r + 16 k
  constexpr int kRowsPerThread = kColTile / kRowStep;
  constexpr int kBatch = I == InType::kF32 ? 4 : 8;  // pass-1 chunks in registers at once
  unsigned char* xin = smem;
  uint8_t* codes = kInPlace ? xin : smem + kColTile * kRowBytes;
  uint32_t* red = reinterpret_cast<uint32_t*>(smem + kColTile * kRowBytes);  // pass 1's keys: [warp][column]
  // pass 2's group keys, staged (col_tile_codes kStagedKeys): after pass 1's keys (in place), or in col_kernel's
  // segment keys (not in use: pass 1's keys are in the code tile)
  uint32_t* group_keys =
      kInPlace ? red + kThreads / 32 * kColTile : reinterpret_cast<uint32_t*>(codes + kColTile * kColTile);
  __shared__ uint32_t tall_ticket;
  if (threadIdx.x == 0) tall_ticket = atomicAdd(sync, 1u);
  __syncthreads();
  const int64_t strips = a.cols / kColTile, tiles = a.gh / kColTile;
  const int64_t units = (a.rows / a.gh) * strips;
  const cuda::tall::TallWork w = cuda::tall::tall_work(tall_ticket, units, tiles, lag);
  int64_t r0 = 0, c0 = 0;
  if (w.codes_tile >= 0) {  // pass 2's tile (read `lag` tickets ago: L2) into shared memory
    tall_tile_origin(w.codes_tile, tiles, strips, r0, c0);
    col_load_tile<I>(a, xin, r0, c0);
  }
  // Warp kTallKeysWarp: once pass 2's unit is keyed (an acquire), its kColTile group keys into group_keys. It runs
  // after pass 1's last __syncthreads, beside warps 0 .. 3's atomics and count, so that the count never waits for it.
  const auto stage_group_keys = [&] {
    const int lane = threadIdx.x & 31;
    if (lane == 0) {
      while (ld_acquire_gpu(sync + 1 + w.codes_tile / tiles) < static_cast<uint32_t>(tiles)) __nanosleep(64);
    }
    __syncwarp();
    const uint32_t* src = a.keys + (w.codes_tile / tiles / strips) * a.ngc + c0;
#pragma unroll
    for (int j = 0; j < kColTile / 32; ++j) group_keys[lane + 32 * j] = __ldcg(src + lane + 32 * j);
  };
  const bool keys_warp = w.codes_tile >= 0 && threadIdx.x / 32 == kTallKeysWarp;
  if (w.keys_tile >= 0) {  // pass 1: the tile's column keys from registers
    int64_t k0 = 0, kc0 = 0;
    tall_tile_origin(w.keys_tile, tiles, strips, k0, kc0);
    const int c = threadIdx.x % kChunksPerRow, r = threadIdx.x / kChunksPerRow;
    const int64_t e0 = (k0 + r) * a.cols + kc0 + 8 * c;
    const uint64_t keep = kHint ? l2_policy_evict_last() : 0;
    uint32_t key[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // columns 8 c .. 8 c + 7
#pragma unroll
    for (int b = 0; b < kRowsPerThread; b += kBatch) {
      Raw<I> raw[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t e = e0 + static_cast<int64_t>(b + j) * kRowStep * a.cols;
        raw[j] = kHint ? load_raw_hint<I>(a.x, e, keep) : load_raw<I>(a.x, e);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if constexpr (I == InType::kBF16) {  // key[i] holds the packed bf16 magnitudes of columns 2 i, 2 i + 1
          const uint4 v = raw[j].v[0];
          key[0] = max_u16x2(key[0], v.x & 0x7FFF7FFFu);
          key[1] = max_u16x2(key[1], v.y & 0x7FFF7FFFu);
          key[2] = max_u16x2(key[2], v.z & 0x7FFF7FFFu);
          key[3] = max_u16x2(key[3], v.w & 0x7FFF7FFFu);
        } else {
          float v[8];
          to_f32<I>(raw[j], v);
#pragma unroll
          for (int i = 0; i < 8; ++i) key[i] = max(key[i], abs_key(v[i]));
        }
      }
    }
    if constexpr (I == InType::kBF16) {
#pragma unroll
      for (int i = 3; i >= 0; --i) {
        key[2 * i + 1] = key[i] & 0xFFFF0000u;
        key[2 * i] = key[i] << 16;
      }
    }
    // Lanes l and l ^ 16 hold the same columns (rows r, r + 1 of the step); then the 8 warps meet in shared memory
    // (red: pass 2's code tile, not in use yet; in place, 4 KB of its own).
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      key[i] = max(key[i], __shfl_xor_sync(kFull, key[i], 16));
      if ((threadIdx.x & 16) == 0) red[(threadIdx.x / 32) * kColTile + 8 * c + i] = key[i];
    }
    __syncthreads();
    if (threadIdx.x < kColTile) {
      uint32_t k = 0;
#pragma unroll
      for (int q = 0; q < kThreads / 32; ++q) k = max(k, red[q * kColTile + threadIdx.x]);
      if (k != 0) atomicMax(a.keys + (w.keys_tile / tiles / strips) * a.ngc + kc0 + threadIdx.x, k);
      // then one release: every atomicMax (warps 0 .. 3, meeting on their own barrier) before the count
      // (cumulativity); meanwhile warp kTallKeysWarp waits for pass 2's unit and stages its keys
      asm volatile("bar.sync %0, %1;" ::"n"(kTallCountBarrier), "n"(kColTile) : "memory");
      if (threadIdx.x == 0) red_release_gpu_add(sync + 1 + w.keys_tile / tiles, 1u);
    } else if (keys_warp) {
      stage_group_keys();
    }
  } else if (keys_warp) {
    stage_group_keys();
  }
  if (w.codes_tile < 0) return;
  cp_async_wait_all();
  __syncthreads();
  float ts;
  const uint32_t thread_key = col_tile_codes<I, true, 8, false, false, false, kInPlace, false, true>(
      a, xin, codes, group_keys, r0, c0, ts);
  if (w.codes_tile == 0 && threadIdx.x == 0) *a.tensor_scale = ts;
  if (a.acc_amax) block_amax(a.amax, thread_key);
}

// ------------------------------------------------------------------------------------ tall column groups, TMA ring

// tall_ring_kernel (MXPREC_QUANTIZE_TALL=3, opt-in; fifty-ninth session; measured in the sixtieth on an H100:
// bit-exact, and slower than tall_col_kernel at every shape, 40-52 % of copy against 68-69 %, h100_quantize_ring.md):
// the tickets, tiles, keys and codes of tall_col_kernel on persistent, warp-specialized CTAs, so that x's reads no
// longer wait in each CTA's chain. tall_col_kernel takes nearly the same time on an H100 and an H200 (88.8 against
// ~98 us at 16384 x 4096): its CTAs each run one ticket as a chain of round trips (ticket, pass-1 read, key atomics,
// release, acquire, codes, stores) with 5 CTAs per SM to overlap them, so the H200's faster DRAM does not shorten it.
// Here a CTA is kThreads consumer threads (8 warps) and one producer warp, with a ring of kSlots tile buffers
// (x's 128 x 128 tile, row-major, as col_load_tile stages it). The producer claims tickets (tall_work's order) and
// for each pushes pass 1 of its keys tile, then (once done[unit] == tiles, an acquire) pass 2 of its codes tile:
// 128 one-row bulk copies (TMA) per tile into a free slot, completing on the slot's `full` mbarrier, pass 1 with L2
// evict_last, pass 2 (an L2 hit) evict_first. The consumers take the slots in ring order: pass 1 maxes the tile's
// column keys into keys[] (atomicMax) and counts the tile into done[unit] (one release); pass 2 is col_tile_codes
// (in place, the group keys from keys[]). No deadlock whatever the residency: consumers wait only for bulk copies
// already issued, and the producer waits for done[] only after pushing its ticket's pass 1, behind which every
// ticket it needs has been claimed by a running CTA (tickets are claimed in order) whose pass 1 completes without
// waiting. sync (zeroed): [0] the ticket counter, [1 + u] done[u]; a.keys (zeroed): the group keys.
constexpr int kRingThreads = kThreads + 32;  // consumers, then the producer warp
template <InType I>
constexpr int ring_tile_bytes() {
  return kColTile * kColTile * static_cast<int>(in_bytes<I>());
}
// Dynamic shared memory: kSlots tiles, then pass 1's keys [segment][column] (aligned as tall_col_kernel's).
template <InType I, int kSlots>
constexpr size_t ring_smem_bytes() {
  return static_cast<size_t>(kSlots) * ring_tile_bytes<I>() + kColTile / kColSeg * kColTile * 4 + kTallSmemPad;
}
template <InType I, int kSlots>
__global__ void __launch_bounds__(kRingThreads, in_bytes<I>() == 2 ? 6 / kSlots : 1)
    tall_ring_kernel(Args a, uint32_t* sync, int64_t lag) {
  extern __shared__ __align__(16) unsigned char ring_smem[];
  unsigned char* smem = ring_smem + ((kTallSmemPad - cuda::smem_u32(ring_smem)) & (kTallSmemPad - 1));
  constexpr int kTileBytes = ring_tile_bytes<I>();
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  uint32_t* red = reinterpret_cast<uint32_t*>(smem + kSlots * kTileBytes);
  __shared__ __align__(8) uint64_t full[kSlots], empty[kSlots];
  __shared__ int64_t item[kSlots];  // a slot's work: pass 1 of tile t (t), pass 2 of tile t (-2 - t), the end (-1)
  const int64_t strips = a.cols / kColTile, tiles = a.gh / kColTile;
  const int64_t units = (a.rows / a.gh) * strips;
  const int64_t tickets = units * tiles + lag;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      cuda::mbar_init(cuda::smem_u32(&full[s]), 1);
      cuda::mbar_init(cuda::smem_u32(&empty[s]), 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x >= kThreads) {  // the producer warp
    const int lane = threadIdx.x & 31;
    const uint64_t keep = l2_policy_evict_last(), drop = l2_policy_evict_first();
    uint32_t n = 0;  // items pushed
    const auto push = [&](int64_t tile, int64_t what, uint64_t policy) {
      const uint32_t s = n % kSlots;
      cuda::mbar_wait(cuda::smem_u32(&empty[s]), ((n / kSlots) & 1) ^ 1);
      const uint32_t bar = cuda::smem_u32(&full[s]);
      if (lane == 0) {
        item[s] = what;
        if (tile >= 0) {
          cuda::mbar_arrive_expect_tx(bar, kTileBytes);
        } else {
          cuda::mbar_arrive(bar);
        }
      }
      __syncwarp();
      if (tile >= 0) {
        int64_t r0 = 0, c0 = 0;
        tall_tile_origin(tile, tiles, strips, r0, c0);
        const char* src = static_cast<const char*>(a.x) + ((r0 + lane) * a.cols + c0) * in_bytes<I>();
        const uint32_t dst = cuda::smem_u32(smem + s * kTileBytes + lane * kRowBytes);
#pragma unroll
        for (int k = 0; k < kColTile / 32; ++k) {
          cuda::bulk_load_hint(dst + k * 32 * kRowBytes, src + k * 32 * a.cols * in_bytes<I>(), kRowBytes, bar,
                               policy);
        }
      }
      ++n;
    };
    for (;;) {
      uint32_t t = 0;
      if (lane == 0) t = atomicAdd(sync, 1u);
      t = __shfl_sync(kFull, t, 0);
      if (t >= tickets) break;
      const cuda::tall::TallWork w = cuda::tall::tall_work(t, units, tiles, lag);
      if (w.keys_tile >= 0) push(w.keys_tile, w.keys_tile, keep);
      if (w.codes_tile >= 0) {
        if (lane == 0) {
          while (ld_acquire_gpu(sync + 1 + w.codes_tile / tiles) < static_cast<uint32_t>(tiles)) __nanosleep(64);
        }
        __syncwarp();
        push(w.codes_tile, -2 - w.codes_tile, drop);
      }
    }
    push(-1, -1, 0);
    return;
  }
  uint32_t amax_key = 0;
  const int pair = threadIdx.x % (kColTile / 2), seg = threadIdx.x / (kColTile / 2);
  for (uint32_t n = 0;; ++n) {
    const uint32_t s = n % kSlots;
    cuda::mbar_wait(cuda::smem_u32(&full[s]), (n / kSlots) & 1);
    const int64_t what = item[s];
    if (what == -1) break;
    unsigned char* xin = smem + s * kTileBytes;
    int64_t r0 = 0, c0 = 0;
    if (what >= 0) {  // pass 1: the tile's column keys into keys[], then the tile counted into done[unit]
      tall_tile_origin(what, tiles, strips, r0, c0);
      uint32_t k0, k1;
      col_pair_keys<I>(xin + seg * kColSeg * kRowBytes + 2 * pair * in_bytes<I>(), k0, k1);
      *reinterpret_cast<uint2*>(red + seg * kColTile + 2 * pair) = make_uint2(k0, k1);
      consumer_sync();  // the slot read and the keys in red
      if (threadIdx.x == 0) cuda::mbar_arrive(cuda::smem_u32(&empty[s]));
      if (threadIdx.x < kColTile) {
        uint32_t k = 0;
#pragma unroll
        for (int q = 0; q < kColTile / kColSeg; ++q) k = max(k, red[q * kColTile + threadIdx.x]);
        if (k != 0) atomicMax(a.keys + (what / tiles / strips) * a.ngc + c0 + threadIdx.x, k);
      }
      consumer_sync();  // then one release: every thread's atomicMax is ordered before the count (cumulativity)
      if (threadIdx.x == 0) red_release_gpu_add(sync + 1 + what / tiles, 1u);
    } else {  // pass 2: col_kernel's codes with the group keys of keys[]
      const int64_t tile = -2 - what;
      tall_tile_origin(tile, tiles, strips, r0, c0);
      float ts;
      const uint32_t key = col_tile_codes<I, true, 8, false, false, false, true, true>(a, xin, xin, red, r0, c0, ts);
      amax_key = max(amax_key, key);
      if (tile == 0 && threadIdx.x == 0) *a.tensor_scale = ts;
      cuda::fence_proxy_async_shared();  // the codes written over the slot, before the next bulk copy into it
      consumer_sync();
      if (threadIdx.x == 0) cuda::mbar_arrive(cuda::smem_u32(&empty[s]));
    }
  }
  if (a.acc_amax) {
    const uint32_t k = __reduce_max_sync(kFull, amax_key);
    if ((threadIdx.x & 31) == 0) amax_update(a.amax, finish_key(k));
  }
}

// ------------------------------------------------------------------------------------ SwiGLU, 1 x 128 tiles

// mxprec.fused_mlp's SwiGLU with fp8_block's quantization (FP8 TileScaling (1, 128)) on col_kernel's 128 x 128
// tiles: a CTA computes its tile's product(s) from gate, up (and dh) with swiglu_math.cuh's arithmetic, rounds them
// to the model's dtype into shared memory (where col_kernel stages x), and quantizes them there with col_kernel's
// own code: the bits of mxprec_quantize on the rounded products. Modes:
//   kSwigluHRows: h's 1 x 128 row groups (wo's Fprop copy; tile_row_groups: q[0].row_*);
//   kSwigluHTransposed: h's groups of 128 rows, written K-major (wo's Wgrad copy; col_tile_codes kTransposed: q[0]);
//   kSwigluGrads: d_gate (q[0]) and d_up (q[1]), each both copies (col_tile_codes kTransposed + kRows), one after
//   the other in the same shared memory.
constexpr int kSwigluHRows = 0, kSwigluHTransposed = 1, kSwigluGrads = 2;

struct SwigluTileArgs {
  const void* gate;
  const void* up;
  const void* dh;  // kSwigluGrads only
  Args q[2];       // the products' quantize views (M, F): col_kernel kTransposed's arguments
};

template <InType I, int kMode>
constexpr size_t swiglu_tile_smem_bytes() {
  return kMode == kSwigluHRows ? static_cast<size_t>(kColTile) * kColTile * in_bytes<I>() : col_smem_bytes<I>();
}

// Product kP (0: h, 1: d_gate, 2: d_up) of the tile into xin (col_kernel's staged layout, rounded to the model's
// dtype): a thread takes 8-element piece `piece` of rows row0, row0 + kRowStep, ... (col_kernel's load geometry),
// reading gate, up (and dh) straight from global memory.
template <InType I, int kP>
__device__ __forceinline__ void swiglu_tile_product(const SwigluTileArgs& s, unsigned char* xin, int64_t r0,
                                                    int64_t c0) {
  using T = std::conditional_t<I == InType::kBF16, __nv_bfloat16, __half>;
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  constexpr int kPieces = kRowBytes / 16, kRowStep = kThreads / kPieces;
  const int row0 = threadIdx.x / kPieces, piece = threadIdx.x % kPieces;
  const int64_t cols = s.q[0].cols;
  const int64_t v0 = ((r0 + row0) * cols + c0) / 8 + piece, step = kRowStep * cols / 8;  // 16-byte indices
  const uint4* gate = static_cast<const uint4*>(s.gate);
  const uint4* up = static_cast<const uint4*>(s.up);
  const uint4* dh = static_cast<const uint4*>(s.dh);
#pragma unroll 2
  for (int k = 0; k < kColTile / kRowStep; ++k) {
    const int64_t v = v0 + k * step;
    const uint4 gw = __ldg(gate + v);
    const uint4 uw = kP == 2 ? make_uint4(0, 0, 0, 0) : __ldg(up + v);
    const uint4 dw = kP == 0 ? make_uint4(0, 0, 0, 0) : __ldg(dh + v);
    const uint32_t gs[4] = {gw.x, gw.y, gw.z, gw.w}, us[4] = {uw.x, uw.y, uw.z, uw.w};
    const uint32_t ds[4] = {dw.x, dw.y, dw.z, dw.w};
    uint32_t out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float g[2], u[2], d[2];
      swiglu_math::unpack2<T>(gs[j], g[0], g[1]);
      swiglu_math::unpack2<T>(us[j], u[0], u[1]);
      swiglu_math::unpack2<T>(ds[j], d[0], d[1]);
      const swiglu_math::SwigluValues a = swiglu_math::swiglu_values(g[0], u[0], d[0]);
      const swiglu_math::SwigluValues b = swiglu_math::swiglu_values(g[1], u[1], d[1]);
      out[j] = kP == 0   ? swiglu_math::pack_model2<T>(a.h, b.h)
               : kP == 1 ? swiglu_math::pack_model2<T>(a.d_gate, b.d_gate)
                         : swiglu_math::pack_model2<T>(a.d_up, b.d_up);
    }
    *reinterpret_cast<uint4*>(xin + (row0 + k * kRowStep) * kRowBytes + piece * 16) =
        make_uint4(out[0], out[1], out[2], out[3]);
  }
}

// kSwigluGrads quantizes d_gate's tile, then d_up's in the same shared memory (col_kernel's 50 KB: 4 CTAs per SM),
// reading gate and dh again for d_up (from L2: the CTA read them just before) and computing the sigmoid twice. (A
// first form kept both tiles in shared memory from one sigmoid per element: 82 KB, 2 CTAs per SM, and 1.96 ms at
// 16384 x 14336 on the H200 against 1.39 ms for XLA's SwiGLU backward + two quantize_rows_and_transposed calls.)
template <InType I, int kMode>
__global__ void __launch_bounds__(kThreads, 4) swiglu_tile_kernel(SwigluTileArgs s) {
  static_assert(I == InType::kBF16 || I == InType::kF16, "swiglu_tile_kernel: bfloat16 / float16 inputs");
  constexpr int kRowBytes = kColTile * static_cast<int>(in_bytes<I>());
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* const xin = smem;                     // [128][128] products (model dtype)
  uint8_t* codes = smem + kColTile * kRowBytes;        // col_kernel's [128][128] codes
  uint32_t* seg_keys = reinterpret_cast<uint32_t*>(codes + kColTile * kColTile);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColTile, c0 = static_cast<int64_t>(blockIdx.x) * kColTile;
  float ts;  // (1: not NVFP4)
  if constexpr (kMode == kSwigluHRows) {
    swiglu_tile_product<I, 0>(s, xin, r0, c0);
    __syncthreads();
    tile_row_groups<I>(s.q[0], xin, r0, c0);
    (void)ts;
  } else if constexpr (kMode == kSwigluHTransposed) {
    swiglu_tile_product<I, 0>(s, xin, r0, c0);
    __syncthreads();
    col_tile_codes<I, true, 8, false, true, false>(s.q[0], xin, codes, seg_keys, r0, c0, ts);
  } else {
    swiglu_tile_product<I, 1>(s, xin, r0, c0);
    __syncthreads();
    col_tile_codes<I, true, 8, false, true, true>(s.q[0], xin, codes, seg_keys, r0, c0, ts);
    __syncthreads();  // the tile, the code tile and the segment keys are reused
    swiglu_tile_product<I, 2>(s, xin, r0, c0);
    __syncthreads();
    col_tile_codes<I, true, 8, false, true, true>(s.q[1], xin, codes, seg_keys, r0, c0, ts);
  }
}

// One thread per group, scalar loads, the exact per-element functions (any shape / alignment).
template <InType I>
__global__ void __launch_bounds__(kThreads) generic_kernel(Args a) {
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const FormatInfo fi = format_info(f);
  const int unit = static_cast<int>(pack_unit(f));
  const auto kind = static_cast<ScalingKind>(a.kind);
  const float ts = kind == ScalingKind::kNVFP4 ? nvfp4_ts(a) : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.tensor_scale = ts;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t key = 0;
  if (g < a.ngroups) {
    const int64_t gr = g / a.ngc, gc = g % a.ngc;
    const int64_t r0 = gr * a.gh, c0 = gc * a.gw, cols = a.cols;
    for (int64_t r = 0; r < a.gh; ++r)
      for (int64_t c = 0; c < a.gw; ++c) key = max(key, abs_key(load_in<I>(a.x, (r0 + r) * cols + c0 + c)));
    const float local = __uint_as_float(finish_key(key));
    float s = 1.0f;
    MxScale m{};
    Nvfp4Scale b{};
    if (kind == ScalingKind::kMX) {
      m = mx_block_scale(local, f, static_cast<ScaleRule>(a.rule));
      static_cast<uint8_t*>(a.scale)[g] = m.byte;
    } else if (kind == ScalingKind::kNVFP4) {
      b = nvfp4_block_scale(local, ts);
      static_cast<uint8_t*>(a.scale)[g] = b.byte;
    } else {
      s = group_scale(a.amode == 2 ? a.amax_in[g] : local, f, kind == ScalingKind::kTile && a.pow2 != 0);
      static_cast<float*>(a.scale)[g] = s;
    }
    auto code = [&](int64_t r, int64_t c) -> uint8_t {
      const float x = load_in<I>(a.x, (r0 + r) * cols + c0 + c);
      if (kind == ScalingKind::kMX) return encode_mx(x, m, f);
      if (kind == ScalingKind::kNVFP4) return encode_nvfp4(x, b);
      return encode_scaled(x, s, f);
    };
    // Packing units run along the quantization axis (cols for axis 2, rows for axis 1).
    const bool along_cols = a.axis == 2;
    const int64_t nu_r = along_cols ? a.gh : a.gh / unit, nu_c = along_cols ? a.gw / unit : a.gw;
    for (int64_t ur = 0; ur < nu_r; ++ur) {
      for (int64_t uc = 0; uc < nu_c; ++uc) {
        uint8_t cd[4];
        for (int u = 0; u < unit; ++u) cd[u] = along_cols ? code(ur, uc * unit + u) : code(ur * unit + u, uc);
        uint8_t out[3];
        int nb = 1;
        if (fi.bits == 8) {
          out[0] = cd[0];
        } else if (fi.bits == 4) {
          out[0] = pack_fp4(cd[0], cd[1]);
        } else {
          pack_fp6(cd, out);
          nb = 3;
        }
        for (int j = 0; j < nb; ++j) {
          int64_t off;
          if (along_cols) {  // row r0 + ur, packed column (c0 / unit + uc) * nb + j
            off = (r0 + ur) * packed_len(cols, f) + (c0 / unit + uc) * nb + j;
          } else {  // packed row ((r0 / unit) + ur) * nb + j, column c0 + uc
            off = (((r0 / unit) + ur) * nb + j) * cols + c0 + uc;
          }
          a.data[off] = out[j];
        }
      }
    }
  }
  if (a.acc_amax) block_amax(a.amax, key);
}

// n == 0: the scalar results (amax 0) and any scale elements of an empty group.
__global__ void empty_kernel(Args a, int64_t nscale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const ElemFormat f = static_cast<ElemFormat>(a.fmt);
  const auto kind = static_cast<ScalingKind>(a.kind);
  const float amax = a.amode == 1 ? *a.amax_in : 0.0f;
  *a.amax = 0u;
  *a.tensor_scale = kind == ScalingKind::kNVFP4 ? nvfp4_tensor_scale(amax) : 1.0f;
  if (kind == ScalingKind::kTensor) {
    *static_cast<float*>(a.scale) = a.delayed ? *a.scale_in : tensor_scale(amax, f);
  } else if (kind == ScalingKind::kMX || kind == ScalingKind::kNVFP4) {
    for (int64_t i = 0; i < nscale; ++i) static_cast<uint8_t*>(a.scale)[i] = 0;
  } else {
    for (int64_t i = 0; i < nscale; ++i) static_cast<float*>(a.scale)[i] = 1.0f;
  }
}

// ------------------------------------------------------------------------------------ host

ffi::Error cuda_error(const char* what, cudaError_t e) { return cuda_status(kOp, what, e); }

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

int64_t blocks_for(int64_t work, int64_t per_block) { return (work + per_block - 1) / per_block; }

constexpr int64_t kMaxGrid = 2147483647;
constexpr int64_t kMaxGridY = 65535;

bool is_fp8(int32_t fmt) {
  return fmt == static_cast<int32_t>(ElemFormat::kE4M3) || fmt == static_cast<int32_t>(ElemFormat::kE5M2);
}

// vgroup_kernel's geometry for axis-1 groups of gh rows: ty threads stacked along the rows (the largest
// power of two <= 16 dividing gh / 8), CTAs of tx = 256 / ty threads over tx * 8 columns.
struct VGeometry {
  int64_t ty, tx, ncb;
};
VGeometry vgroup_geometry(const Args& a) {
  int64_t ty = 16;
  while (ty > 1 && (a.gh / 8) % ty != 0) ty /= 2;
  const int64_t tx = kThreads / ty;
  return {ty, tx, blocks_for(a.cols, tx * 8)};
}

template <InType I>
void vgroup_launch(cudaStream_t stream, const Args& a, unsigned grid) {
  if (is_fp8(a.fmt)) {
    vgroup_kernel<I, true><<<grid, kThreads, 0, stream>>>(a);
  } else {
    vgroup_kernel<I, false><<<grid, kThreads, 0, stream>>>(a);
  }
}

// Pass 1 for axis-1 groups taller than one CTA's rows (row scaling along axis 1): each group's max |x|
// key, atomicMax'ed by vgroup_kernel (kVKeysOut, slabs of up to 8 steps) into zeroed XLA scratch, which
// a->keys then points to; a->keys stays null when no scratch is available (the caller takes another
// kernel). Needs gh % 8 == 0, gw == 1 and cols % 8 == 0.
template <InType I>
ffi::Error tall_group_keys(cudaStream_t stream, ffi::ScratchAllocator& scratch, Args* a) {
  const VGeometry v = vgroup_geometry(*a);
  auto keys = scratch.Allocate(static_cast<size_t>(a->ngroups) * sizeof(uint32_t), 16);
  if (!keys.has_value()) return ffi::Error::Success();
  a->keys = static_cast<uint32_t*>(*keys);
  const cudaError_t ce = cudaMemsetAsync(a->keys, 0, static_cast<size_t>(a->ngroups) * sizeof(uint32_t), stream);
  if (ce != cudaSuccess) return cuda_error("cudaMemsetAsync", ce);
  int64_t steps = 8;
  while (steps > 1 && (a->gh / (8 * v.ty)) % steps != 0) steps /= 2;
  Args k = *a;
  k.ty = static_cast<int32_t>(v.ty);
  k.vmode = kVKeysOut;
  k.vsteps = static_cast<int32_t>(steps);
  vgroup_launch<I>(stream, k, static_cast<unsigned>(v.ncb * (a->rows / (8 * v.ty * steps))));
  return ffi::Error::Success();
}

// Opts kKernel in to `bytes` of dynamic shared memory on the current device. The attribute belongs to
// that device's context, so it is set once per (kernel, device): a once-per-process static would leave
// every GPU but the first of a multi-GPU process at the 48 KB default (its launches would fail). `bytes`
// is the same on every call for a given kernel.
constexpr int kMaxDevices = 64;  // devices whose per-kernel launch facts are cached (others: queried each time)

template <auto kKernel>  // any __global__ function (col_kernel's Args, swiglu_tile_kernel's SwigluTileArgs)
cudaError_t allow_dynamic_smem(int dev, int bytes) {
  static std::atomic<bool> done[kMaxDevices] = {};  // one array per kernel
  const bool cached = dev >= 0 && dev < kMaxDevices;
  if (cached && done[dev].load(std::memory_order_acquire)) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && cached) done[dev].store(true, std::memory_order_release);
  return e;
}

// How many CTAs of kKernel (block threads, smem bytes of dynamic shared memory, which must already be
// allowed) fit on device dev at once (>= 1). Queried on the first launch per (kernel, device), then
// cached, so that a launch costs no occupancy query. block / smem are the same on every call for a kernel.
template <auto kKernel>  // any __global__ function
cudaError_t resident_ctas(int dev, int block, int smem, int* ctas) {
  static std::atomic<int> known[kMaxDevices] = {};  // 0: not queried yet; one array per kernel
  const bool cached = dev >= 0 && dev < kMaxDevices;
  if (cached && (*ctas = known[dev].load(std::memory_order_acquire)) > 0) return cudaSuccess;
  int sms = 0, per_sm = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, block, smem);
  if (e != cudaSuccess) return e;
  *ctas = std::max(sms * per_sm, 1);
  if (cached) known[dev].store(*ctas, std::memory_order_release);
  return cudaSuccess;
}

// The current device's resident CTAs of kKernel at block threads and smem bytes of dynamic shared memory (which
// it is first allowed): the grid of the persistent and cooperative launches below.
template <auto kKernel>
cudaError_t resident_on_device(int block, int smem, int* ctas) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = allow_dynamic_smem<kKernel>(dev, smem);
  if (e == cudaSuccess) e = resident_ctas<kKernel>(dev, block, smem, ctas);
  return e;
}

// row_kernel on a persistent grid: as many CTAs as fit on the GPU at once (at most one per group).
template <InType I, int kBlock, int kChunks, ElemFormat kF>
ffi::Error launch_row_kernel_for(cudaStream_t stream, const Args& a) {
  constexpr auto kKernel = row_kernel<I, kBlock, kChunks, kF>;
  constexpr int smem = kRowStages * row_buffer_bytes<I, kBlock, kChunks>();
  int ctas = 1;
  const cudaError_t e = resident_on_device<kKernel>(kBlock, smem, &ctas);
  if (e != cudaSuccess) return cuda_error("row_kernel launch setup", e);
  const int64_t grid = std::min<int64_t>(a.ngroups, static_cast<int64_t>(ctas));
  kKernel<<<static_cast<unsigned>(grid), kBlock, smem, stream>>>(a);
  return ffi::Error::Success();
}
// The FP8 format is row_kernel's template argument: with it a runtime flag, ptxas converted every chunk under both
// formats' predicates into two registers, and the 4-chunk instances kept those in local memory across the loop
// (REG 64, STACK 40 for bf16: two loads and a store per chunk and group).
template <InType I, int kBlock, int kChunks>
ffi::Error launch_row_kernel(cudaStream_t stream, const Args& a) {
  if (a.fmt == static_cast<int32_t>(ElemFormat::kE5M2)) {
    return launch_row_kernel_for<I, kBlock, kChunks, ElemFormat::kE5M2>(stream, a);
  }
  return launch_row_kernel_for<I, kBlock, kChunks, ElemFormat::kE4M3>(stream, a);
}

// A kernel switch read from `var` at every launch (so that a test or an A/B can switch it within one process):
// `unset` where the variable is unset or empty, its value where that is one digit 0 .. max_mode, else -1.
int env_mode(const char* var, int max_mode, int unset) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return unset;
  if (v[1] == '\0' && v[0] >= '0' && v[0] <= '0' + max_mode) return v[0] - '0';
  return -1;
}

// MXPREC_QUANTIZE_TALL picks the kernels of row scaling along axis 1 where col_kernel's tiles apply (FP8 groups of
// 128 T rows, T > 1): 2 (or unset) tall_col_kernel, one launch with x's second read from L2, with L2 cache hints; 1 the
// same without them; 3 tall_ring_kernel (persistent, warp-specialized, with the hints); 0 vgroup_kernel's keys pass +
// col_kernel (x read from DRAM twice). Read at every launch, so that a test or an A/B can switch it within one
// process; -1 for any other value. MXPREC_QUANTIZE_TALL_LAG (measurements only): tall_col_kernel's (and
// tall_ring_kernel's, by tall_ring_lag) lag in tiles, a positive integer (below the group's tiles: raised to them);
// unset, empty or 0: tall_lag's rule; anything else: -1.
int tall_mode() { return env_mode("MXPREC_QUANTIZE_TALL", 3, 2); }
// MXPREC_QUANTIZE_TALL_SLOTS (measurements): tall_ring_kernel's tile buffers per CTA, 2 or 3 (unset or empty: 3);
// -1 for any other value.
int tall_ring_slots() {
  const int v = env_mode("MXPREC_QUANTIZE_TALL_SLOTS", 3, 3);
  return v == 2 || v == 3 ? v : -1;
}
// MXPREC_QUANTIZE_TALL_INPLACE picks tall_col_kernel's instance: 1 the in-place one (codes over x's tile in shared
// memory, 5 CTAs per SM for 2-byte inputs), 0 the one with col_kernel's code tile (4 CTAs per SM); unset or empty
// (2): by tall_in_place_by_size; -1 for any other value.
int tall_in_place_mode() { return env_mode("MXPREC_QUANTIZE_TALL_INPLACE", 1, 2); }
// The in-place instance where it measured faster: 2-byte inputs of at least kTallInPlaceMinTiles 128 x 128 tiles
// (H100, bf16, % of copy against the code-tile instance in the same call, h100_quantize_inplace.md: 16384 x 4096 and
// 8192 x 8192, 4096 tiles each, 67.2-67.8 -> 68.2-68.7 and 67.5-67.8 -> 69.4-70.1; 4096 x 4096, 1024 tiles,
// 56.1-56.6 -> 53.2-54.8).
constexpr int64_t kTallInPlaceMinTiles = 2048;
bool tall_in_place_by_size(const Args& a, size_t in_bytes) {
  return in_bytes == 2 && (a.rows / kColTile) * (a.cols / kColTile) >= kTallInPlaceMinTiles;
}
// MXPREC_NVFP4_ROW_WAVES: nvfp4_row_kernel's grid, that many times the CTAs resident at once, each looping over its
// share (default 1); 0: one CTA per kThreads x kUnroll chunks, no loop (the fifty-second session's grid).
int nvfp4_row_waves() { return env_mode("MXPREC_NVFP4_ROW_WAVES", 9, 1); }

// nvfp4_row_kernel on waves x the resident CTAs, never more CTAs than runs of kThreads x kUnroll chunks (waves 0:
// one CTA per such run).
template <InType I>
ffi::Error launch_nvfp4_rows(cudaStream_t stream, const Args& a, int waves) {
  constexpr auto kKernel = nvfp4_row_kernel<I>;
  int64_t grid = blocks_for(a.n / 8, static_cast<int64_t>(kThreads) * kUnroll);
  if (waves > 0) {
    int dev = 0, ctas = 1;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = resident_ctas<kKernel>(dev, kThreads, 0, &ctas);
    if (e != cudaSuccess) return cuda_error("nvfp4_row_kernel launch setup", e);
    grid = std::min<int64_t>(grid, static_cast<int64_t>(ctas) * waves);
  }
  if (grid <= 0 || grid > kMaxGrid) return ffi::Error(ffi::ErrorCode::kUnimplemented, std::string(kOp) + ": tensor too large");
  kKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
  return ffi::Error::Success();
}

int64_t tall_lag_override() {
  const char* v = std::getenv("MXPREC_QUANTIZE_TALL_LAG");
  if (v == nullptr || *v == '\0') return 0;
  int64_t n = 0;
  for (const char* c = v; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || n > (int64_t{1} << 40)) return -1;
    n = 10 * n + (*c - '0');
  }
  return n;
}

// The zeroed scratch of tall_col_kernel / tall_ring_kernel: *sync = [ticket, done[units]], a->keys = keys[ngroups];
// *sync stays null where the kernels cannot take the call (no scratch, too many tickets for a 32-bit counter).
ffi::Error tall_scratch(cudaStream_t stream, ffi::ScratchAllocator& scratch, Args* a, uint32_t** sync) {
  *sync = nullptr;
  const int64_t tiles = a->gh / kColTile, units = (a->rows / a->gh) * (a->cols / kColTile);
  if (2 * units * tiles > std::min<int64_t>(kMaxGrid, UINT32_MAX)) return ffi::Error::Success();  // tickets <= that
  const size_t words = static_cast<size_t>(1 + units + a->ngroups);  // ticket, done[units], keys[ngroups]
  auto mem = scratch.Allocate(words * sizeof(uint32_t), 16);
  if (!mem.has_value()) return ffi::Error::Success();
  const cudaError_t e = cudaMemsetAsync(*mem, 0, words * sizeof(uint32_t), stream);
  if (e != cudaSuccess) return cuda_error("cudaMemsetAsync", e);
  *sync = static_cast<uint32_t*>(*mem);
  a->keys = *sync + 1 + units;
  return ffi::Error::Success();
}

// Row scaling along axis 1 by tall_col_kernel (see there); *launched stays false where it cannot take the call (no
// scratch, too many tickets for a 32-bit counter), and the caller takes the two-pass kernels.
template <InType I, bool kHint, bool kInPlace>
ffi::Error launch_tall(cudaStream_t stream, ffi::ScratchAllocator& scratch, Args a, int64_t lag_override,
                       bool* launched) {
  constexpr auto kKernel = tall_col_kernel<I, kHint, kInPlace>;
  *launched = false;
  const int64_t tiles = a.gh / kColTile, units = (a.rows / a.gh) * (a.cols / kColTile);
  uint32_t* sync = nullptr;
  if (auto err = tall_scratch(stream, scratch, &a, &sync); err.failure() || sync == nullptr) return err;
  constexpr int smem = static_cast<int>(tall_smem_bytes<I, kInPlace>());
  int ctas = 1;
  const cudaError_t e = resident_on_device<kKernel>(kThreads, smem, &ctas);
  if (e != cudaSuccess) return cuda_error("tall_col_kernel launch setup", e);
  const int64_t lag = cuda::tall::tall_lag(ctas, tiles, units, lag_override);
  kKernel<<<static_cast<unsigned>(units * tiles + lag), kThreads, smem, stream>>>(a, sync, lag);
  *launched = true;
  return ffi::Error::Success();
}

// Row scaling along axis 1 by tall_ring_kernel (see there) on every CTA that fits at once (never more than the
// tickets); *launched as launch_tall's.
template <InType I, int kSlots>
ffi::Error launch_tall_ring(cudaStream_t stream, ffi::ScratchAllocator& scratch, Args a, int64_t lag_override,
                            bool* launched) {
  constexpr auto kKernel = tall_ring_kernel<I, kSlots>;
  *launched = false;
  const int64_t tiles = a.gh / kColTile, units = (a.rows / a.gh) * (a.cols / kColTile);
  uint32_t* sync = nullptr;
  if (auto err = tall_scratch(stream, scratch, &a, &sync); err.failure() || sync == nullptr) return err;
  constexpr int smem = static_cast<int>(ring_smem_bytes<I, kSlots>());
  int ctas = 1;
  const cudaError_t e = resident_on_device<kKernel>(kRingThreads, smem, &ctas);
  if (e != cudaSuccess) return cuda_error("tall_ring_kernel launch setup", e);
  const int64_t lag = cuda::tall::tall_ring_lag(ctas, kSlots, tiles, units, lag_override);
  const int64_t grid = std::min<int64_t>(ctas, units * tiles + lag);
  kKernel<<<static_cast<unsigned>(grid), kRingThreads, smem, stream>>>(a, sync, lag);
  *launched = true;
  return ffi::Error::Success();
}

// MXPREC_QUANTIZE_ONCHIP picks per-tensor current scaling's kernels: 2 (or unset) onchip_kernel with its L2 cache
// hints, 1 onchip_kernel without them, 0 amax_kernel + tensor_kernel (x read twice). Read at every launch, so that a
// test or an A/B can switch it within one process; -1 for any other value. (H100, bf16, % of copy, 0 / 1 / 2:
// 16384 x 4096 55.6-56.0 / 58.4-58.6 / 60.8-61.1, 4096 x 4096 50.2 / 54.0-54.5 / 59.4-59.9.)
int onchip_mode() { return env_mode("MXPREC_QUANTIZE_ONCHIP", 2, 2); }

// Whether onchip_kernel can take the call: per-tensor current scaling of whole, aligned chunks.
bool onchip_eligible(const Args& a) {
  return static_cast<ScalingKind>(a.kind) == ScalingKind::kTensor && !a.delayed && a.amode == 0 && a.vec &&
         a.n % 8 == 0;
}

// A cooperative launch of kKernel(Args, uint32_t* sync) (onchip_kernel, nvfp4_onchip_kernel): every CTA of block
// threads and smem bytes of dynamic shared memory that fits on the device at once, so that its grid barrier holds.
template <auto kKernel>
cudaError_t launch_cooperative(cudaStream_t stream, const Args& a, uint32_t* sync, int block, int smem) {
  int ctas = 0;
  const cudaError_t e = resident_on_device<kKernel>(block, smem, &ctas);
  if (e != cudaSuccess) return e;
  Args args = a;
  void* params[] = {&args, &sync};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kKernel), dim3(static_cast<unsigned>(ctas)),
                                     dim3(block), params, static_cast<size_t>(smem), stream);
}

template <InType I, bool kFp8, bool kHint>
cudaError_t launch_onchip_of(cudaStream_t stream, const Args& a, uint32_t* sync) {
  return launch_cooperative<onchip_kernel<I, kFp8, kHint>>(stream, a, sync, kOcThreads, oc_smem_bytes<I>());
}

template <InType I>
cudaError_t launch_onchip(cudaStream_t stream, const Args& a, uint32_t* sync, bool hint) {
  if (is_fp8(a.fmt)) {
    return hint ? launch_onchip_of<I, true, true>(stream, a, sync) : launch_onchip_of<I, true, false>(stream, a, sync);
  }
  return hint ? launch_onchip_of<I, false, true>(stream, a, sync) : launch_onchip_of<I, false, false>(stream, a, sync);
}

// MXPREC_NVFP4_ONCHIP picks the kernels of NVFP4 along rows (bf16 / f16, aligned, amax_mode 0): 2 nvfp4_onchip_kernel
// with its L2 cache hints, 1 without them, 0 amax_kernel + nvfp4_row_kernel (x read twice); unset (kNvfp4OnchipRule): the one
// read where x fills more than kNvfp4OnchipMinFill of the on-chip capacity and fits (nvfp4_onchip_applies), else
// the two passes. Read at every launch, so that a test or an A/B can switch it within one process; -1 for any other
// value.
constexpr int kNvfp4OnchipRule = 3;  // nvfp4_onchip_mode when MXPREC_NVFP4_ONCHIP is unset
int nvfp4_onchip_mode() { return env_mode("MXPREC_NVFP4_ONCHIP", 2, kNvfp4OnchipRule); }

// Whether nvfp4_row_kernel takes the call: NVFP4 groups of 16 along rows, x and data 16-byte aligned.
bool nvfp4_rows_apply(const Args& a) {
  return static_cast<ScalingKind>(a.kind) == ScalingKind::kNVFP4 && a.axis == 2 && a.gh == 1 && a.gw == 16 &&
         aligned(a.x, 16) && aligned(a.data, 16);
}

// Whether nvfp4_onchip_kernel can take the call: nvfp4_row_kernel's, for 16-bit inputs and amax_mode 0.
bool nvfp4_onchip_eligible(const Args& a, ffi::DataType t) {
  return nvfp4_rows_apply(a) && a.amode == 0 && (t == ffi::DataType::BF16 || t == ffi::DataType::F16);
}

template <InType I, bool kHint>
cudaError_t launch_nvfp4_onchip_of(cudaStream_t stream, const Args& a, uint32_t* sync) {
  return launch_cooperative<nvfp4_onchip_kernel<I, kHint>>(stream, a, sync, kNoThreads, nvfp4_onchip_smem_bytes());
}

template <InType I>
cudaError_t launch_nvfp4_onchip(cudaStream_t stream, const Args& a, uint32_t* sync, bool hint) {
  return hint ? launch_nvfp4_onchip_of<I, true>(stream, a, sync) : launch_nvfp4_onchip_of<I, false>(stream, a, sync);
}

// The default rule (MXPREC_NVFP4_ONCHIP unset): whether x fits on chip (one round of registers and shared memory per
// resident CTA) and fills more than kNvfp4OnchipMinFill of it. Below, the two passes were faster: their second read
// of x comes from L2, and nvfp4_row_kernel's codes run on twice the warps. bf16, us, two passes / one read
// (h100_nvfp4_onchip.md): H100 2048 x 4096 19.5 / 20.8, 4096 x 4096 34.0 / 31.5, 16384 x 4096 (above the capacity)
// 111.4 / 117.0; H200 2048 x 4096 17.7 / 19.1, 3072 x 4096 24.1 / 24.0, 3584 x 4096 26.5 / 26.1, 4096 x 4096
// 30.8 / 28.4, 16384 x 4096 97.0 / 103.2. With the one read's register spill removed (sixty-fourth session,
// h100_nvfp4_onchip_tail.md, H100, two rounds): 2048 x 4096 (fill 0.48) 19.25-19.5 / 20.0, 2560 x 4096 (0.61)
// 22.0-22.25 / 22.5-22.75, 3072 x 4096 (0.73) 26.5 / 25.0, 3584 x 4096 (0.85) 29.5-29.75 / 27.25; hence 0.65, not
// the fifty-fourth session's 0.75 (which left 3072 x 4096 on the two passes).
constexpr double kNvfp4OnchipMinFill = 0.65;
template <InType I>
cudaError_t nvfp4_onchip_applies(const Args& a, bool* applies) {
  constexpr auto kKernel = nvfp4_onchip_kernel<I, true>;
  int ctas = 0;
  const cudaError_t e = resident_on_device<kKernel>(kNoThreads, nvfp4_onchip_smem_bytes(), &ctas);
  if (e != cudaSuccess) return e;
  const double capacity = static_cast<double>(ctas) * kNoThreads * (kNoRegItems + kNoSmemItems) * kUnroll * 8;
  *applies = static_cast<double>(a.n) <= capacity && static_cast<double>(a.n) > kNvfp4OnchipMinFill * capacity;
  return cudaSuccess;
}

template <InType I>
ffi::Error launch(cudaStream_t stream, ffi::ScratchAllocator& scratch, Args a) {
  const auto kind = static_cast<ScalingKind>(a.kind);
  const int64_t per_cta = static_cast<int64_t>(kThreads) * kUnroll;
  auto grid_ok = [](int64_t g) { return g > 0 && g <= kMaxGrid; };
  if (kind == ScalingKind::kTensor || (kind == ScalingKind::kNVFP4 && a.amode == 0)) {
    // Tensor amax pass (current scaling / NVFP4's s_t); delayed / amax_mode 1 fuse it into the cast.
    if (kind == ScalingKind::kNVFP4 || (!a.delayed && a.amode == 0)) {
      const int64_t grid = blocks_for((a.n + 7) / 8, per_cta);
      if (!grid_ok(grid)) return ffi::Error(ffi::ErrorCode::kUnimplemented, std::string(kOp) + ": tensor too large");
      amax_kernel<I><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
    }
  }
  if (kind == ScalingKind::kTensor) {
    a.acc_amax = (a.delayed || a.amode == 1) ? 1 : 0;
    const int64_t grid = blocks_for((a.n + 7) / 8, static_cast<int64_t>(kThreads) * kTensorUnroll);
    if (!grid_ok(grid)) return ffi::Error(ffi::ErrorCode::kUnimplemented, std::string(kOp) + ": tensor too large");
    if (is_fp8(a.fmt)) {
      tensor_kernel<I, true><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
    } else {
      tensor_kernel<I, false><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
    }
    return ffi::Error::Success();
  }
  // NVFP4 took its amax in the pass above; amax_mode 3: no amax result (row / tile / mx), not computed.
  a.acc_amax = (kind == ScalingKind::kNVFP4 && a.amode == 0) || a.amode == 3 ? 0 : 1;
  const int bits = format_bits(static_cast<ElemFormat>(a.fmt));
  const bool x16 = aligned(a.x, 16) && aligned(a.data, 16);
  const int64_t gh = a.gh, gw = a.gw;
  // Groups taller than a tile (row scaling along axis 1): tall_col_kernel, or their keys from tall_group_keys first.
  const bool tall_groups = a.axis == 1 && gw == 1 && gh > kColTile && gh % kColTile == 0;
  const bool col_groups = a.axis == 1 && gw == 1 && (gh == 32 || gh == 64 || gh == 128 || tall_groups);
  const bool tile_groups = gh == kColTile && gw == kColTile;  // 128 x 128 tiles, either axis
  // MX FP6 / FP4 down the columns: col_kernel packs their codes too (one group per thread and column).
  const bool narrow_mx_cols = kind == ScalingKind::kMX && (bits == 6 || bits == 4) && col_groups && !tall_groups;
  // NVFP4 down the columns (groups of 16 rows): two groups per thread and column.
  const bool nvfp4_cols = kind == ScalingKind::kNVFP4 && a.axis == 1 && gh == 16 && gw == 1;
  const bool col_ok = x16 && ((is_fp8(a.fmt) && (col_groups || tile_groups)) || narrow_mx_cols || nvfp4_cols) &&
                      a.rows % kColTile == 0 && a.cols % kColTile == 0 &&
                      grid_ok(a.rows / kColTile) && a.rows / kColTile <= kMaxGridY && grid_ok(a.cols / kColTile);
  if (col_ok && tall_groups) {
    const int tall = tall_mode();
    const int64_t lag = tall_lag_override();
    if (tall < 0) return invalid(std::string(kOp) + ": MXPREC_QUANTIZE_TALL must be 0, 1, 2 or 3");
    if (lag < 0) return invalid(std::string(kOp) + ": MXPREC_QUANTIZE_TALL_LAG must be a non-negative integer");
    const int in_place = tall_in_place_mode();
    if (in_place < 0) return invalid(std::string(kOp) + ": MXPREC_QUANTIZE_TALL_INPLACE must be 0 or 1");
    const int slots = tall_ring_slots();
    if (slots < 0) return invalid(std::string(kOp) + ": MXPREC_QUANTIZE_TALL_SLOTS must be 2 or 3");
    if (tall == 3) {
      bool launched = false;
      auto e = slots == 2 ? launch_tall_ring<I, 2>(stream, scratch, a, lag, &launched)
                          : launch_tall_ring<I, 3>(stream, scratch, a, lag, &launched);
      if (e.failure() || launched) return e;
    } else if (tall > 0) {
      const bool ip = in_place == 1 || (in_place == 2 && tall_in_place_by_size(a, in_bytes<I>()));
      bool launched = false;
      auto e = tall == 2 ? (ip ? launch_tall<I, true, true>(stream, scratch, a, lag, &launched)
                               : launch_tall<I, true, false>(stream, scratch, a, lag, &launched))
                         : (ip ? launch_tall<I, false, true>(stream, scratch, a, lag, &launched)
                               : launch_tall<I, false, false>(stream, scratch, a, lag, &launched));
      if (e.failure() || launched) return e;
    }
    if (auto e = tall_group_keys<I>(stream, scratch, &a); e.failure()) return e;
  }
  if (col_ok && (!tall_groups || a.keys != nullptr)) {
    constexpr size_t smem = col_smem_bytes<I>();
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = allow_dynamic_smem<col_kernel<I, false>>(dev, static_cast<int>(smem));
    if (e == cudaSuccess) e = allow_dynamic_smem<col_kernel<I, true>>(dev, static_cast<int>(smem));
    if (e == cudaSuccess) e = allow_dynamic_smem<col_kernel<I, false, 6>>(dev, static_cast<int>(smem));
    if (e == cudaSuccess) e = allow_dynamic_smem<col_kernel<I, false, 4>>(dev, static_cast<int>(smem));
    if (e == cudaSuccess) e = allow_dynamic_smem<col_kernel<I, false, 4, true>>(dev, static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_error("col_kernel shared memory", e);
    const dim3 grid(static_cast<unsigned>(a.cols / kColTile), static_cast<unsigned>(a.rows / kColTile));
    if (nvfp4_cols) {
      col_kernel<I, false, 4, true><<<grid, kThreads, smem, stream>>>(a);
    } else if (bits == 6) {
      col_kernel<I, false, 6><<<grid, kThreads, smem, stream>>>(a);
    } else if (bits == 4) {
      col_kernel<I, false, 4><<<grid, kThreads, smem, stream>>>(a);
    } else if (kind == ScalingKind::kMX) {
      col_kernel<I, false><<<grid, kThreads, smem, stream>>>(a);
    } else {
      col_kernel<I, true><<<grid, kThreads, smem, stream>>>(a);
    }
    return ffi::Error::Success();
  }
  if (nvfp4_rows_apply(a)) {
    const int waves = nvfp4_row_waves();
    if (waves < 0) return invalid(std::string(kOp) + ": MXPREC_NVFP4_ROW_WAVES must be one digit 0 .. 9");
    return launch_nvfp4_rows<I>(stream, a, waves);
  }
  if (a.axis == 2 && x16) {
    // hgroup: 1 x G groups with G / 8 a power of two <= 32 (not NVFP4: its scale needs the tensor's).
    const int64_t cpg = gw / 8;
    if (kind != ScalingKind::kNVFP4 && gh == 1 && gw % 8 == 0 && cpg <= 32 && (cpg & (cpg - 1)) == 0) {
      const bool wide = cpg >= kUnroll;
      a.tpg = static_cast<int32_t>(wide ? cpg / kUnroll : cpg);
      const int64_t grid = blocks_for(a.n / 8, per_cta);
      if (grid_ok(grid)) {
        const unsigned g = static_cast<unsigned>(grid);
        if (is_fp8(a.fmt)) {
          if (wide) {
            hgroup_kernel<I, true, true><<<g, kThreads, 0, stream>>>(a);
          } else {
            hgroup_kernel<I, true, false><<<g, kThreads, 0, stream>>>(a);
          }
        } else if (wide) {
          hgroup_kernel<I, false, true><<<g, kThreads, 0, stream>>>(a);
        } else {
          hgroup_kernel<I, false, false><<<g, kThreads, 0, stream>>>(a);
        }
        return ffi::Error::Success();
      }
    }
    if ((kind == ScalingKind::kRow || kind == ScalingKind::kTile) && bits == 8 && gw % 8 == 0 &&
        grid_ok(a.ngroups)) {
      const unsigned grid = static_cast<unsigned>(a.ngroups);
      const int64_t nck = gh * (gw / 8);
      if (gh == 1 && nck <= 512 * 4) {  // rows of up to 16384 elements
        if (nck <= 128 * 4) return launch_row_kernel<I, 128, 4>(stream, a);
        if (nck <= 128 * 8) return launch_row_kernel<I, 128, 8>(stream, a);
        return launch_row_kernel<I, 512, 4>(stream, a);
      }
      if (nck <= 128 * kCtaCacheSmall) {  // e.g. 8 x 128 tiles: eight 128-thread CTAs per SM
        cta_kernel<I, 128, kCtaCacheSmall><<<grid, 128, 0, stream>>>(a);
      } else if (nck <= kThreads * kCtaCacheSmall) {
        cta_kernel<I, kThreads, kCtaCacheSmall><<<grid, kThreads, 0, stream>>>(a);
      } else {
        cta_kernel<I, kThreads, kCtaCache><<<grid, kThreads, 0, stream>>>(a);
      }
      return ffi::Error::Success();
    }
  }
  if (a.axis == 1 && x16 && gh % 8 == 0 && a.cols % 8 == 0) {
    const VGeometry v = vgroup_geometry(a);
    if ((gw == 1 || (gw % 8 == 0 && (v.tx * 8) % gw == 0)) && grid_ok(v.ncb * (a.rows / (8 * v.ty)))) {
      a.ty = static_cast<int32_t>(v.ty);
      if (gh == 8 * v.ty) {  // one CTA row-block per group-row: one pass
        a.vmode = kVLocal;
        a.vsteps = 1;
        vgroup_launch<I>(stream, a, static_cast<unsigned>(v.ncb * (a.rows / gh)));
        return ffi::Error::Success();
      }
      // Taller groups (row scaling along axis 1): per-group keys over CTAs of up to 8 steps, then codes.
      if (a.keys == nullptr) {
        if (auto e = tall_group_keys<I>(stream, scratch, &a); e.failure()) return e;
      }
      if (a.keys != nullptr) {
        a.vmode = kVKeysIn;
        a.vsteps = 1;
        vgroup_launch<I>(stream, a, static_cast<unsigned>(v.ncb * (a.rows / (8 * v.ty))));
        return ffi::Error::Success();
      }
    }
  }
  const int64_t grid = blocks_for(a.ngroups, kThreads);
  if (!grid_ok(grid)) return ffi::Error(ffi::ErrorCode::kUnimplemented, std::string(kOp) + ": too many groups");
  generic_kernel<I><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
  return ffi::Error::Success();
}

// Args holding x and the four results (data, scale, amax, tensor_scale) of either quantize handler.
Args buffer_args(const ffi::AnyBuffer& x, const ffi::AnyBuffer& data, const ffi::AnyBuffer& scale,
                 const ffi::AnyBuffer& amax, const ffi::AnyBuffer& tensor_scale) {
  Args a{};
  a.x = x.untyped_data();
  a.data = static_cast<uint8_t*>(data.untyped_data());
  a.scale = scale.untyped_data();
  a.amax = static_cast<uint32_t*>(amax.untyped_data());
  a.tensor_scale = static_cast<float*>(tensor_scale.untyped_data());
  return a;
}

ffi::Error QuantizeCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x, ffi::AnyBuffer scale_in, ffi::AnyBuffer amax_in,
                            ffi::Result<ffi::AnyBuffer> data, ffi::Result<ffi::AnyBuffer> scale,
                            ffi::Result<ffi::AnyBuffer> amax_out, ffi::Result<ffi::AnyBuffer> tensor_scale_out,
                            int32_t kind, int32_t fmt, int32_t block, int32_t tile_rows, int32_t scale_rule,
                            int32_t power_of_two, int32_t axis, int32_t delayed, int32_t amax_mode) {
  QuantizeCall call{};
  if (auto e = validate_quantize(kOp, x, scale_in, amax_in, *data, *scale, *amax_out, *tensor_scale_out, kind, fmt,
                                 block, tile_rows, scale_rule, power_of_two, axis, delayed, amax_mode, &call);
      e.failure())
    return e;
  const QuantizeDesc& d = call.desc;
  Args a = buffer_args(x, *data, *scale, *amax_out, *tensor_scale_out);
  a.scale_in = static_cast<const float*>(scale_in.untyped_data());
  a.amax_in = static_cast<const float*>(amax_in.untyped_data());
  a.rows = call.b * call.r;
  a.cols = call.c;
  a.n = a.rows * a.cols;
  a.kind = kind;
  a.fmt = fmt;
  a.rule = scale_rule;
  a.pow2 = power_of_two;
  a.amode = amax_mode;
  a.delayed = delayed;
  a.axis = axis;
  a.vec = aligned(a.x, 16) && aligned(a.data, 8) ? 1 : 0;
  if (a.n == 0) {
    empty_kernel<<<1, 1, 0, stream>>>(a, static_cast<int64_t>(scale->element_count()));
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? ffi::Error::Success() : cuda_error("launch", e);
  }
  // The group (one scale) in the (rows, cols) view; see the header comment.
  const int64_t R = call.r, C = call.c;
  switch (d.kind) {
    case ScalingKind::kRow:
      a.gh = axis == 2 ? 1 : R;
      a.gw = axis == 2 ? C : 1;
      break;
    case ScalingKind::kTile:
      a.gh = axis == 2 ? d.tile_rows : d.block;
      a.gw = axis == 2 ? d.block : d.tile_rows;
      break;
    case ScalingKind::kMX:
    case ScalingKind::kNVFP4:
      a.gh = axis == 2 ? 1 : d.block;
      a.gw = axis == 2 ? d.block : 1;
      break;
    default:
      a.gh = a.rows;
      a.gw = a.cols;
      break;
  }
  a.ngc = a.cols / a.gw;
  a.ngroups = (a.rows / a.gh) * a.ngc;

  cudaError_t ce = cudaSuccess;
  // Per-tensor current scaling and NVFP4 along rows in one read of x: onchip_kernel's / nvfp4_onchip_kernel's amax
  // word and barrier counter live in XLA scratch (zeroed here); without scratch the two-pass kernels run (the same
  // results).
  const int onchip = onchip_eligible(a) ? onchip_mode() : 0;
  if (onchip < 0) return invalid(std::string(kOp) + ": MXPREC_QUANTIZE_ONCHIP must be 0, 1 or 2");
  int nvfp4_onchip = nvfp4_onchip_eligible(a, x.element_type()) ? nvfp4_onchip_mode() : 0;
  if (nvfp4_onchip < 0) return invalid(std::string(kOp) + ": MXPREC_NVFP4_ONCHIP must be 0, 1 or 2");
  if (nvfp4_onchip == kNvfp4OnchipRule) {  // unset: the default rule
    bool applies = false;
    ce = x.element_type() == ffi::DataType::BF16 ? nvfp4_onchip_applies<InType::kBF16>(a, &applies)
                                                  : nvfp4_onchip_applies<InType::kF16>(a, &applies);
    if (ce != cudaSuccess) return cuda_error("nvfp4_onchip_kernel launch setup", ce);
    nvfp4_onchip = applies ? 2 : 0;
  }
  if (onchip > 0 || nvfp4_onchip > 0) {
    if (auto sync = scratch.Allocate(2 * sizeof(uint32_t), 16); sync.has_value()) {
      uint32_t* words = static_cast<uint32_t*>(*sync);
      ce = cudaMemsetAsync(words, 0, 2 * sizeof(uint32_t), stream);
      if (ce != cudaSuccess) return cuda_error("cudaMemsetAsync", ce);
      const bool bf16 = x.element_type() == ffi::DataType::BF16;
      if (nvfp4_onchip > 0) {
        ce = bf16 ? launch_nvfp4_onchip<InType::kBF16>(stream, a, words, nvfp4_onchip == 2)
                  : launch_nvfp4_onchip<InType::kF16>(stream, a, words, nvfp4_onchip == 2);
        if (ce != cudaSuccess) return cuda_error("nvfp4_onchip_kernel cooperative launch", ce);
        return ffi::Error::Success();
      }
      switch (x.element_type()) {
        case ffi::DataType::F32: ce = launch_onchip<InType::kF32>(stream, a, words, onchip == 2); break;
        case ffi::DataType::BF16: ce = launch_onchip<InType::kBF16>(stream, a, words, onchip == 2); break;
        default: ce = launch_onchip<InType::kF16>(stream, a, words, onchip == 2); break;
      }
      if (ce != cudaSuccess) return cuda_error("onchip_kernel cooperative launch", ce);
      return ffi::Error::Success();
    }
  }
  if (a.amode != 3) {  // the atomicMax target; amax_mode 3 leaves the amax result unwritten (no memset either)
    ce = cudaMemsetAsync(a.amax, 0, sizeof(uint32_t), stream);
    if (ce != cudaSuccess) return cuda_error("cudaMemsetAsync", ce);
  }
  ffi::Error err = ffi::Error::Success();
  switch (x.element_type()) {
    case ffi::DataType::F32: err = launch<InType::kF32>(stream, scratch, a); break;
    case ffi::DataType::BF16: err = launch<InType::kBF16>(stream, scratch, a); break;
    default: err = launch<InType::kF16>(stream, scratch, a); break;
  }
  if (err.failure()) return err;
  ce = cudaGetLastError();
  if (ce != cudaSuccess) return cuda_error("kernel launch", ce);
  return ffi::Error::Success();
}

// `mxprec_quantize_transposed` (CUDA only; mxprec.kernels.cuda.quantize_transposed): x (B, R, C) quantized down
// its columns in FP8 groups of `block` rows x 1 column (TileScaling (1, block), block 32 / 64 / 128), written as
// the QTensor of swapaxes(x, 1, 2) quantized along its last axis: data (B, C, R), scale f32 (B, C, R / block),
// amax f32 () and tensor_scale f32 () (1). The same codes and scales as mxprec_quantize along axis 1, in the
// K-major layout a GEMM contracting R wants (Wgrad's X and dY), so no transpose of the codes follows.
// col_kernel's tiles: R and C multiples of 128, x and data 16-byte aligned.
// `mxprec_quantize_rows_transposed` (mxprec.kernels.cuda.quantize_rows_and_transposed): the same results, plus
// x's own FP8 1 x 128 row groups (TileScaling (1, 128) along axis 2, format `row_fmt`): row_data (B, R, C),
// row_scale f32 (B, R, C / 128), mxprec_quantize's bits for them, from the same read of x (Dgrad's and Wgrad's
// copies of dY in one kernel). The amax (amax_mode 0) is the tensor's, shared by both copies.
constexpr const char* kOpT = "mxprec_quantize_transposed (CUDA)";
constexpr const char* kOpRT = "mxprec_quantize_rows_transposed (CUDA)";

template <InType I, bool kRows>
cudaError_t launch_col_transposed(cudaStream_t stream, const Args& a) {
  constexpr auto kKernel = col_kernel<I, true, 8, false, true, kRows>;
  constexpr size_t smem = col_smem_bytes<I>();
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = allow_dynamic_smem<kKernel>(dev, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(a.cols / kColTile), static_cast<unsigned>(a.rows / kColTile));
  kKernel<<<grid, kThreads, smem, stream>>>(a);
  return cudaSuccess;
}

// Checks the transposed call's operand, attributes and results and fills `a` for col_kernel kTransposed.
ffi::Error transposed_args(const char* op, ffi::AnyBuffer x, ffi::AnyBuffer& data, ffi::AnyBuffer& scale,
                           ffi::AnyBuffer& amax_out, ffi::AnyBuffer& tensor_scale_out, int32_t fmt, int32_t block,
                           int32_t power_of_two, int32_t amax_mode, Args& a) {
  const std::string o(op);
  const auto xd = x.dimensions();
  if (xd.size() != 3 || !is_wide_float(x.element_type()))
    return invalid(o + ": x must be a 3-D float32/bfloat16/float16 array, got shape " + dims_str(xd) + " dtype " +
                   dtype_name(x.element_type()));
  if (!is_fp8(fmt)) return invalid(o + ": fmt=" + std::to_string(fmt) + " must be an FP8 format (e4m3, e5m2)");
  if (block != 32 && block != 64 && block != 128)
    return invalid(o + ": block=" + std::to_string(block) + " must be 32, 64 or 128");
  if (power_of_two != 0 && power_of_two != 1) return invalid(o + ": power_of_two must be 0 or 1");
  if (amax_mode != 0 && amax_mode != 3)
    return invalid(o + ": amax_mode=" + std::to_string(amax_mode) + " must be 0 (amax result) or 3 (none)");
  const int64_t B = xd[0], R = xd[1], C = xd[2];
  if (B <= 0 || R <= 0 || C <= 0 || R % kColTile != 0 || C % kColTile != 0) {
    std::ostringstream os;
    os << o << ": x " << dims_str(xd) << " must be non-empty with R and C multiples of " << kColTile;
    return invalid(os.str());
  }
  if (B * R / kColTile > kMaxGridY || C / kColTile > kMaxGrid)
    return ffi::Error(ffi::ErrorCode::kUnimplemented, o + ": x " + dims_str(xd) + " is too large");
  const Dims3 scalar{0, {0, 0, 0}};
  if (auto e = check_buffer(op, "data result", data, Dims3{3, {B, C, R}}, data_dtype(static_cast<ElemFormat>(fmt)));
      e.failure())
    return e;
  if (auto e = check_buffer(op, "scale result", scale, Dims3{3, {B, C, R / block}}, ffi::DataType::F32); e.failure())
    return e;
  if (auto e = check_buffer(op, "amax result", amax_out, scalar, ffi::DataType::F32); e.failure()) return e;
  if (auto e = check_buffer(op, "tensor_scale result", tensor_scale_out, scalar, ffi::DataType::F32); e.failure())
    return e;
  a = buffer_args(x, data, scale, amax_out, tensor_scale_out);
  if (!aligned(a.x, 16) || !aligned(a.data, 16)) return invalid(o + ": x and data must be 16-byte aligned");
  a.rows = B * R;
  a.cols = C;
  a.n = a.rows * a.cols;
  a.batch_rows = R;
  a.gh = block;
  a.gw = 1;
  a.ngc = C;
  a.ngroups = (a.rows / block) * C;
  a.kind = static_cast<int32_t>(ScalingKind::kTile);
  a.fmt = fmt;
  a.pow2 = power_of_two;
  a.axis = 1;
  a.acc_amax = amax_mode == 3 ? 0 : 1;  // amax_mode 3: the amax result is left unwritten
  return ffi::Error::Success();
}

// Zeroes the amax result where the kernel maxes into it, then launches col_kernel kTransposed (+ kRows).
template <bool kRows>
ffi::Error launch_transposed(cudaStream_t stream, ffi::DataType dtype, const Args& a) {
  cudaError_t ce = cudaSuccess;
  if (a.acc_amax) {
    ce = cudaMemsetAsync(a.amax, 0, sizeof(uint32_t), stream);
    if (ce != cudaSuccess) return cuda_error("cudaMemsetAsync", ce);
  }
  switch (dtype) {
    case ffi::DataType::F32: ce = launch_col_transposed<InType::kF32, kRows>(stream, a); break;
    case ffi::DataType::BF16: ce = launch_col_transposed<InType::kBF16, kRows>(stream, a); break;
    default: ce = launch_col_transposed<InType::kF16, kRows>(stream, a); break;
  }
  if (ce != cudaSuccess) return cuda_error("col_kernel (transposed) launch setup", ce);
  ce = cudaGetLastError();
  if (ce != cudaSuccess) return cuda_error("kernel launch", ce);
  return ffi::Error::Success();
}

ffi::Error QuantizeTransposedCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> data,
                                      ffi::Result<ffi::AnyBuffer> scale, ffi::Result<ffi::AnyBuffer> amax_out,
                                      ffi::Result<ffi::AnyBuffer> tensor_scale_out, int32_t fmt, int32_t block,
                                      int32_t power_of_two, int32_t amax_mode) {
  Args a{};
  if (auto e = transposed_args(kOpT, x, *data, *scale, *amax_out, *tensor_scale_out, fmt, block, power_of_two,
                               amax_mode, a);
      e.failure())
    return e;
  return launch_transposed<false>(stream, x.element_type(), a);
}

ffi::Error QuantizeRowsTransposedCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> data,
                                          ffi::Result<ffi::AnyBuffer> scale, ffi::Result<ffi::AnyBuffer> amax_out,
                                          ffi::Result<ffi::AnyBuffer> tensor_scale_out,
                                          ffi::Result<ffi::AnyBuffer> row_data, ffi::Result<ffi::AnyBuffer> row_scale,
                                          int32_t fmt, int32_t block, int32_t power_of_two, int32_t amax_mode,
                                          int32_t row_fmt, int32_t row_power_of_two) {
  const std::string o(kOpRT);
  Args a{};
  if (auto e = transposed_args(kOpRT, x, *data, *scale, *amax_out, *tensor_scale_out, fmt, block, power_of_two,
                               amax_mode, a);
      e.failure())
    return e;
  if (!is_fp8(row_fmt))
    return invalid(o + ": row_fmt=" + std::to_string(row_fmt) + " must be an FP8 format (e4m3, e5m2)");
  if (row_power_of_two != 0 && row_power_of_two != 1) return invalid(o + ": row_power_of_two must be 0 or 1");
  const auto xd = x.dimensions();
  const int64_t B = xd[0], R = xd[1], C = xd[2];
  if (auto e = check_buffer(kOpRT, "row_data result", *row_data, Dims3{3, {B, R, C}},
                            data_dtype(static_cast<ElemFormat>(row_fmt)));
      e.failure())
    return e;
  if (auto e = check_buffer(kOpRT, "row_scale result", *row_scale, Dims3{3, {B, R, C / kColTile}}, ffi::DataType::F32);
      e.failure())
    return e;
  a.row_data = static_cast<uint8_t*>(row_data->untyped_data());
  a.row_scale = static_cast<float*>(row_scale->untyped_data());
  if (!aligned(a.row_data, 16)) return invalid(o + ": row_data must be 16-byte aligned");
  a.row_fmt = row_fmt;
  a.row_pow2 = row_power_of_two;
  return launch_transposed<true>(stream, x.element_type(), a);
}

// `mxprec_swiglu_h_tiles` (mxprec.kernels.cuda.swiglu_h_tiles) and `mxprec_swiglu_grad_tiles`
// (swiglu_grad_tiles): swiglu_tile_kernel's calls. Operands gate, up (, dh): (M, F) bfloat16 / float16 of one
// shape and dtype, M and F multiples of 128. Attributes: fmt (FP8), power_of_two (the scales' rounding), as
// mxprec_quantize's TileScaling (1, 128); every copy of a call has that format.
//   h_tiles, transposed 0: data (M, F), scale f32 (M, F / 128): h's 1 x 128 groups along F;
//           transposed 1: data (F, M), scale f32 (F, M / 128): h's groups of 128 along M, K-major;
//   grad_tiles: d_gate (M, F), its scale (M, F / 128), d_gate_t (F, M), its scale (F, M / 128), then d_up's four.
// No amax is computed (fp8_block's copies have none).
constexpr const char* kOpSwigluH = "mxprec_swiglu_h_tiles (CUDA)";
constexpr const char* kOpSwigluGrads = "mxprec_swiglu_grad_tiles (CUDA)";

ffi::Error swiglu_tile_operands(const char* op, const ffi::AnyBuffer* const* ins, int n, int32_t fmt,
                                int32_t power_of_two, int64_t& M, int64_t& F) {
  const std::string o(op);
  const auto gd = ins[0]->dimensions();
  const ffi::DataType t = ins[0]->element_type();
  std::ostringstream desc;
  desc << o << ": operands";
  bool ok = gd.size() == 2 && (t == ffi::DataType::BF16 || t == ffi::DataType::F16);
  for (int i = 0; i < n; ++i) {
    desc << (i ? ", " : " ") << dims_str(ins[i]->dimensions()) << " " << dtype_name(ins[i]->element_type());
    ok = ok && ins[i]->element_type() == t && dims_equal(ins[i]->dimensions(), Dims3{2, {gd[0], gd.size() == 2 ? gd[1] : 0, 0}});
  }
  if (!ok) return invalid(desc.str() + "; expected (M, F) bfloat16 or float16 tensors of one shape and dtype");
  M = gd[0];
  F = gd[1];
  if (M <= 0 || F <= 0 || M % kColTile != 0 || F % kColTile != 0 || M / kColTile > kMaxGridY)
    return invalid(desc.str() + "; M and F must be positive multiples of 128 (M at most 65535 * 128)");
  for (int i = 0; i < n; ++i)
    if (!aligned(ins[i]->untyped_data(), 16)) return invalid(o + ": operands must be 16-byte aligned");
  if (!is_fp8(fmt)) return invalid(o + ": fmt=" + std::to_string(fmt) + " must be an FP8 format (e4m3, e5m2)");
  if (power_of_two != 0 && power_of_two != 1) return invalid(o + ": power_of_two must be 0 or 1");
  return ffi::Error::Success();
}

// One product's quantize view (M, F): TileScaling (1, 128) in `fmt`, groups of 128 rows for the K-major copy
// (col_kernel kTransposed) and 1 x 128 row groups (the row copy); results set by the caller.
Args swiglu_product_args(int64_t M, int64_t F, int32_t fmt, int32_t power_of_two) {
  Args a{};
  a.rows = M;
  a.cols = F;
  a.n = M * F;
  a.batch_rows = M;
  a.gh = kColTile;
  a.gw = 1;
  a.ngc = F;
  a.ngroups = (M / kColTile) * F;
  a.kind = static_cast<int32_t>(ScalingKind::kTile);
  a.fmt = fmt;
  a.pow2 = power_of_two;
  a.axis = 1;
  a.acc_amax = 0;
  a.row_fmt = fmt;
  a.row_pow2 = power_of_two;
  return a;
}

// A code / scale result of a swiglu tile call: its shape and dtype checked, its address returned.
template <class P>
ffi::Error swiglu_result(const char* op, const char* what, ffi::AnyBuffer& buf, Dims3 want, ffi::DataType dtype,
                         P*& ptr) {
  if (auto e = check_buffer(op, what, buf, want, dtype); e.failure()) return e;
  ptr = static_cast<P*>(buf.untyped_data());
  if (!aligned(ptr, 16)) return invalid(std::string(op) + ": " + what + " must be 16-byte aligned");
  return ffi::Error::Success();
}

template <InType I, int kMode>
cudaError_t launch_swiglu_tile_kernel(cudaStream_t stream, const SwigluTileArgs& s) {
  constexpr auto kKernel = swiglu_tile_kernel<I, kMode>;
  constexpr int smem = static_cast<int>(swiglu_tile_smem_bytes<I, kMode>());
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = allow_dynamic_smem<kKernel>(dev, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(s.q[0].cols / kColTile), static_cast<unsigned>(s.q[0].rows / kColTile));
  kKernel<<<grid, kThreads, smem, stream>>>(s);
  return cudaGetLastError();
}

template <int kMode>
ffi::Error launch_swiglu_tiles(const char* op, cudaStream_t stream, ffi::DataType dtype, const SwigluTileArgs& s) {
  const cudaError_t ce = dtype == ffi::DataType::BF16 ? launch_swiglu_tile_kernel<InType::kBF16, kMode>(stream, s)
                                                      : launch_swiglu_tile_kernel<InType::kF16, kMode>(stream, s);
  if (ce != cudaSuccess) return cuda_status(op, "kernel launch", ce);
  return ffi::Error::Success();
}

ffi::Error SwigluHTilesCudaImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up,
                                ffi::Result<ffi::AnyBuffer> data, ffi::Result<ffi::AnyBuffer> scale, int32_t fmt,
                                int32_t power_of_two, int32_t transposed) {
  const ffi::AnyBuffer* ins[2] = {&gate, &up};
  int64_t M = 0, F = 0;
  if (auto e = swiglu_tile_operands(kOpSwigluH, ins, 2, fmt, power_of_two, M, F); e.failure()) return e;
  if (transposed != 0 && transposed != 1) return invalid(std::string(kOpSwigluH) + ": transposed must be 0 or 1");
  SwigluTileArgs s{};
  s.gate = gate.untyped_data();
  s.up = up.untyped_data();
  s.q[0] = swiglu_product_args(M, F, fmt, power_of_two);
  const ffi::DataType codes = data_dtype(static_cast<ElemFormat>(fmt));
  if (transposed) {
    if (auto e = swiglu_result(kOpSwigluH, "data result", *data, Dims3{2, {F, M, 0}}, codes, s.q[0].data); e.failure())
      return e;
    if (auto e = swiglu_result(kOpSwigluH, "scale result", *scale, Dims3{2, {F, M / kColTile, 0}},
                               ffi::DataType::F32, s.q[0].scale);
        e.failure())
      return e;
    return launch_swiglu_tiles<kSwigluHTransposed>(kOpSwigluH, stream, gate.element_type(), s);
  }
  if (auto e = swiglu_result(kOpSwigluH, "data result", *data, Dims3{2, {M, F, 0}}, codes, s.q[0].row_data);
      e.failure())
    return e;
  if (auto e = swiglu_result(kOpSwigluH, "scale result", *scale, Dims3{2, {M, F / kColTile, 0}}, ffi::DataType::F32,
                             s.q[0].row_scale);
      e.failure())
    return e;
  return launch_swiglu_tiles<kSwigluHRows>(kOpSwigluH, stream, gate.element_type(), s);
}

ffi::Error SwigluGradTilesCudaImpl(cudaStream_t stream, ffi::AnyBuffer gate, ffi::AnyBuffer up, ffi::AnyBuffer dh,
                                   ffi::Result<ffi::AnyBuffer> dg, ffi::Result<ffi::AnyBuffer> dg_scale,
                                   ffi::Result<ffi::AnyBuffer> dg_t, ffi::Result<ffi::AnyBuffer> dg_t_scale,
                                   ffi::Result<ffi::AnyBuffer> du, ffi::Result<ffi::AnyBuffer> du_scale,
                                   ffi::Result<ffi::AnyBuffer> du_t, ffi::Result<ffi::AnyBuffer> du_t_scale,
                                   int32_t fmt, int32_t power_of_two) {
  const ffi::AnyBuffer* ins[3] = {&gate, &up, &dh};
  int64_t M = 0, F = 0;
  if (auto e = swiglu_tile_operands(kOpSwigluGrads, ins, 3, fmt, power_of_two, M, F); e.failure()) return e;
  SwigluTileArgs s{};
  s.gate = gate.untyped_data();
  s.up = up.untyped_data();
  s.dh = dh.untyped_data();
  const ffi::DataType codes = data_dtype(static_cast<ElemFormat>(fmt));
  const Dims3 rows{2, {M, F, 0}}, rows_scale{2, {M, F / kColTile, 0}};
  const Dims3 cols{2, {F, M, 0}}, cols_scale{2, {F, M / kColTile, 0}};
  ffi::AnyBuffer* outs[2][4] = {{&*dg, &*dg_scale, &*dg_t, &*dg_t_scale}, {&*du, &*du_scale, &*du_t, &*du_t_scale}};
  const char* names[2][4] = {{"d_gate result", "d_gate scale result", "d_gate_t result", "d_gate_t scale result"},
                             {"d_up result", "d_up scale result", "d_up_t result", "d_up_t scale result"}};
  for (int p = 0; p < 2; ++p) {
    Args& a = s.q[p];
    a = swiglu_product_args(M, F, fmt, power_of_two);
    if (auto e = swiglu_result(kOpSwigluGrads, names[p][0], *outs[p][0], rows, codes, a.row_data); e.failure())
      return e;
    if (auto e = swiglu_result(kOpSwigluGrads, names[p][1], *outs[p][1], rows_scale, ffi::DataType::F32, a.row_scale);
        e.failure())
      return e;
    if (auto e = swiglu_result(kOpSwigluGrads, names[p][2], *outs[p][2], cols, codes, a.data); e.failure()) return e;
    if (auto e = swiglu_result(kOpSwigluGrads, names[p][3], *outs[p][3], cols_scale, ffi::DataType::F32, a.scale);
        e.failure())
      return e;
  }
  return launch_swiglu_tiles<kSwigluGrads>(kOpSwigluGrads, stream, gate.element_type(), s);
}

}  // namespace
}  // namespace cuda_quantize
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecQuantizeCuda);
MXPREC_DECLARE_HANDLER_SYMBOL(MxprecQuantizeTransposedCuda);
MXPREC_DECLARE_HANDLER_SYMBOL(MxprecQuantizeRowsTransposedCuda);
MXPREC_DECLARE_HANDLER_SYMBOL(MxprecSwigluHTilesCuda);
MXPREC_DECLARE_HANDLER_SYMBOL(MxprecSwigluGradTilesCuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecSwigluHTilesCuda, mxprec::cuda_quantize::SwigluHTilesCudaImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()   // gate (M, F)
                                  .Arg<xla::ffi::AnyBuffer>()   // up (M, F)
                                  .Ret<xla::ffi::AnyBuffer>()   // data: (M, F), or (F, M) transposed
                                  .Ret<xla::ffi::AnyBuffer>()   // scale: (M, F / 128), or (F, M / 128)
                                  .Attr<int32_t>("fmt")
                                  .Attr<int32_t>("power_of_two")
                                  .Attr<int32_t>("transposed"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecSwigluGradTilesCuda, mxprec::cuda_quantize::SwigluGradTilesCudaImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()   // gate (M, F)
                                  .Arg<xla::ffi::AnyBuffer>()   // up (M, F)
                                  .Arg<xla::ffi::AnyBuffer>()   // dh (M, F)
                                  .Ret<xla::ffi::AnyBuffer>()   // d_gate (M, F)
                                  .Ret<xla::ffi::AnyBuffer>()   // its scale (M, F / 128)
                                  .Ret<xla::ffi::AnyBuffer>()   // d_gate_t (F, M)
                                  .Ret<xla::ffi::AnyBuffer>()   // its scale (F, M / 128)
                                  .Ret<xla::ffi::AnyBuffer>()   // d_up (M, F)
                                  .Ret<xla::ffi::AnyBuffer>()   // its scale (M, F / 128)
                                  .Ret<xla::ffi::AnyBuffer>()   // d_up_t (F, M)
                                  .Ret<xla::ffi::AnyBuffer>()   // its scale (F, M / 128)
                                  .Attr<int32_t>("fmt")
                                  .Attr<int32_t>("power_of_two"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecQuantizeTransposedCuda, mxprec::cuda_quantize::QuantizeTransposedCudaImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()   // x
                                  .Ret<xla::ffi::AnyBuffer>()   // data
                                  .Ret<xla::ffi::AnyBuffer>()   // scale
                                  .Ret<xla::ffi::AnyBuffer>()   // amax
                                  .Ret<xla::ffi::AnyBuffer>()   // tensor_scale
                                  .Attr<int32_t>("fmt")
                                  .Attr<int32_t>("block")
                                  .Attr<int32_t>("power_of_two")
                                  .Attr<int32_t>("amax_mode"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecQuantizeRowsTransposedCuda, mxprec::cuda_quantize::QuantizeRowsTransposedCudaImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()   // x
                                  .Ret<xla::ffi::AnyBuffer>()   // data (B, C, R)
                                  .Ret<xla::ffi::AnyBuffer>()   // scale (B, C, R / block)
                                  .Ret<xla::ffi::AnyBuffer>()   // amax
                                  .Ret<xla::ffi::AnyBuffer>()   // tensor_scale
                                  .Ret<xla::ffi::AnyBuffer>()   // row_data (B, R, C)
                                  .Ret<xla::ffi::AnyBuffer>()   // row_scale (B, R, C / 128)
                                  .Attr<int32_t>("fmt")
                                  .Attr<int32_t>("block")
                                  .Attr<int32_t>("power_of_two")
                                  .Attr<int32_t>("amax_mode")
                                  .Attr<int32_t>("row_fmt")
                                  .Attr<int32_t>("row_power_of_two"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecQuantizeCuda, mxprec::cuda_quantize::QuantizeCudaImpl,
                              MXPREC_QUANTIZE_BIND(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>().Ctx<xla::ffi::ScratchAllocator>()));
