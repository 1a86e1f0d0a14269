// The gfx950 GEMM kernel body (template) and its instantiation macros, included by
// gfx950_mx_gemm.hip (MX kernels) and gfx950_fp8_gemm.hip (per-tensor / tile FP8 kernels); two
// translation units so that they compile in parallel. See gfx950_mx_gemm.hip for the design.
#ifndef MXPREC_CSRC_HIP_KERNELS_GFX950_GEMM_IMPL_H_
#define MXPREC_CSRC_HIP_KERNELS_GFX950_GEMM_IMPL_H_

#include "hip_compat.h"

#include "formats.h"
#include "gfx950_kernels.h"
#include "mfma_layout.h"
#include "scaled_gemm.h"

namespace mxprec {
namespace hip {
namespace {

template <MfmaShape S>
struct Acc;
template <>
struct Acc<MfmaShape::k16x16x128> {
  using type = v4f32;
};
template <>
struct Acc<MfmaShape::k32x32x64> {
  using type = v16f32;
};

// The scaled MFMA for a compile-time format pair. cbsz/blgp/opsel must be immediates and an
// out-of-range format (>= 5) crashes the LLVM backend instead of diagnosing: checked here.
template <ElemFormat FA, ElemFormat FB, MfmaShape S>
__device__ inline typename Acc<S>::type mfma_scale(v8i32 a, v8i32 b, typename Acc<S>::type c, int32_t scale_a,
                                                   int32_t scale_b) {
  static_assert(valid_elem_format(static_cast<int32_t>(FA)) && valid_elem_format(static_cast<int32_t>(FB)),
                "scaled MFMA format selector out of range (0..4)");
  constexpr int32_t cbsz = mfma_format_code(FA);
  constexpr int32_t blgp = mfma_format_code(FB);
  // opsel 0: the scale is byte 0 of the 32-bit scale operand.
  if constexpr (S == MfmaShape::k16x16x128) {
    return __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, cbsz, blgp, 0, scale_a, 0, scale_b);
  } else {
    return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, cbsz, blgp, 0, scale_a, 0, scale_b);
  }
}

template <OutType O>
__device__ inline void store_out(void* out, int64_t i, float v) {
  if constexpr (O == OutType::kF32) {
    static_cast<float*>(out)[i] = v;
  } else if constexpr (O == OutType::kBF16) {
    static_cast<uint16_t*>(out)[i] = f32_to_bf16(v);
  } else {
    static_cast<uint16_t*>(out)[i] = f32_to_f16(v);
  }
}

__device__ inline v8i32 to_v8i32(const uint32_t r[kFragmentDwords]) {
  v8i32 v;
  v[0] = static_cast<int32_t>(r[0]);
  v[1] = static_cast<int32_t>(r[1]);
  v[2] = static_cast<int32_t>(r[2]);
  v[3] = static_cast<int32_t>(r[3]);
  v[4] = static_cast<int32_t>(r[4]);
  v[5] = static_cast<int32_t>(r[5]);
  v[6] = static_cast<int32_t>(r[6]);
  v[7] = static_cast<int32_t>(r[7]);
  return v;
}

// The lane's operand for K step ks (mfma_layout.h lane_fragment: zeros + unit scale outside).
template <ElemFormat F, bool kScaleBytes>
__device__ inline v8i32 lane_operand(const uint8_t* base, const uint8_t* scales, int64_t row_global, bool row_ok,
                                     int64_t k0, int64_t K, int32_t* scale_byte) {
  uint32_t r[kFragmentDwords];
  lane_fragment(base, kScaleBytes ? scales : nullptr, row_global, row_ok, k0, K, F, r, scale_byte);
  return to_v8i32(r);
}

template <ElemFormat FA, ElemFormat FB, MfmaShape S, OutType O, GemmScaling SC, int32_t TRA = 1, int32_t TRB = 1>
__device__ inline void gemm_body(const GemmArgs& args) {
  static_assert(SC == GemmScaling::kMX || (is_fp8(FA) && is_fp8(FB)), "tensor / tile scaling: FP8 operands only");
  static_assert(SC != GemmScaling::kTile || S == MfmaShape::k16x16x128, "tile scaling: 16x16x128 (K step == 128)");
  constexpr MfmaGeom g = mfma_geom(S);
  using AccT = typename Acc<S>::type;

  const int32_t tid = static_cast<int32_t>(thread_id_x());
  const int32_t lane = tid % kWaveSize;
  const int64_t wave = static_cast<int64_t>(block_id_x()) * kGemmWavesPerGroup + tid / kWaveSize;
  const int64_t M = args.m, N = args.n, K = args.k;
  const TileCoord t = tile_of_wave(wave, args.batch, M, N, S);
  if (!t.valid) return;  // wave-uniform

  const int64_t ra = t.tm * g.m + lane_row(lane, S);  // A row (m) of this lane's fragments
  const int64_t rb = t.tn * g.n + lane_row(lane, S);  // B row (n)
  const bool a_ok = ra < M, b_ok = rb < N;
  const int64_t ra_global = t.b * M + ra, rb_global = t.b * N + rb;
  const uint8_t* sa_bytes = static_cast<const uint8_t*>(args.a_scale);
  const uint8_t* sb_bytes = static_cast<const uint8_t*>(args.b_scale);
  constexpr bool kScaleBytes = SC == GemmScaling::kMX;

  AccT acc = {};
  const int64_t nk = num_ksteps(K, S);
  for (int64_t ks = 0; ks < nk; ++ks) {
    const int64_t k0 = lane_k0(lane, ks, S);
    int32_t sa, sb;
    const v8i32 av = lane_operand<FA, kScaleBytes>(args.a, sa_bytes, ra_global, a_ok, k0, K, &sa);
    const v8i32 bv = lane_operand<FB, kScaleBytes>(args.b, sb_bytes, rb_global, b_ok, k0, K, &sb);
    if constexpr (SC == GemmScaling::kTile) {
      // DeepSeek-V3 style promotion: the 128-K partial sum of unit-scaled FP8 products, scaled by
      // the two tiles' f32 scales, added to the FP32 accumulator.
      const AccT part = mfma_scale<FA, FB, S>(av, bv, AccT{}, kUnitScaleByte, kUnitScaleByte);
      const float* sta = static_cast<const float*>(args.a_scale);
      const float* stb = static_cast<const float*>(args.b_scale);
      const int64_t col = t.tn * g.n + acc_col(lane, 0, S);
      const float s_b = col < N ? stb[tile_scale_index(t.b, col, ks, N, K, TRB)] : 0.0f;
#pragma unroll
      for (int32_t j = 0; j < g.acc_regs; ++j) {
        const int64_t row = t.tm * g.m + acc_row(lane, j, S);
        const float s_a = row < M ? sta[tile_scale_index(t.b, row, ks, M, K, TRA)] : 0.0f;
        acc[j] = acc[j] + part[j] * (s_a * s_b);
      }
    } else {
      acc = mfma_scale<FA, FB, S>(av, bv, acc, sa, sb);
    }
  }

  float st = 1.0f;
  if constexpr (SC == GemmScaling::kTensor)
    st = *static_cast<const float*>(args.a_scale) * *static_cast<const float*>(args.b_scale);
#pragma unroll
  for (int32_t j = 0; j < g.acc_regs; ++j) {
    const int64_t row = t.tm * g.m + acc_row(lane, j, S);
    const int64_t col = t.tn * g.n + acc_col(lane, j, S);
    if (row < M && col < N) {
      float v = acc[j];
      if constexpr (SC == GemmScaling::kTensor) v = v * st;
      if (args.bias != nullptr) v = v + args.bias[col];
      store_out<O>(args.out, (t.b * M + row) * N + col, v);
    }
  }
}

}  // namespace
}  // namespace hip
}  // namespace mxprec

// ------------------------------------------------------------------------------ instantiations
// extern "C" kernels named as mxprec::hip::gemm_kernel_name() spells them.
#define MXPREC_E_e4m3 ::mxprec::ElemFormat::kE4M3
#define MXPREC_E_e5m2 ::mxprec::ElemFormat::kE5M2
#define MXPREC_E_e2m3 ::mxprec::ElemFormat::kE2M3
#define MXPREC_E_e3m2 ::mxprec::ElemFormat::kE3M2
#define MXPREC_E_e2m1 ::mxprec::ElemFormat::kE2M1
#define MXPREC_S_16x16x128 ::mxprec::hip::MfmaShape::k16x16x128
#define MXPREC_S_32x32x64 ::mxprec::hip::MfmaShape::k32x32x64
#define MXPREC_O_f32 ::mxprec::hip::OutType::kF32
#define MXPREC_O_bf16 ::mxprec::hip::OutType::kBF16
#define MXPREC_O_f16 ::mxprec::hip::OutType::kF16

#define MXPREC_GEMM_KERNEL(kind, KIND, shape, fa, fb, out)                                                     \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_##kind##_gemm_##shape##_##fa##_##fb##_##out(             \
      ::mxprec::hip::GemmArgs args) {                                                                          \
    ::mxprec::hip::gemm_body<MXPREC_E_##fa, MXPREC_E_##fb, MXPREC_S_##shape, MXPREC_O_##out,                   \
                             ::mxprec::hip::GemmScaling::KIND>(args);                                          \
  }
#define MXPREC_TILE_KERNEL(tra, trb, fa, fb, out)                                                              \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_tile_gemm_##tra##x128_##trb##x128_##fa##_##fb##_##out(   \
      ::mxprec::hip::GemmArgs args) {                                                                          \
    ::mxprec::hip::gemm_body<MXPREC_E_##fa, MXPREC_E_##fb, MXPREC_S_16x16x128, MXPREC_O_##out,                 \
                             ::mxprec::hip::GemmScaling::kTile, tra, trb>(args);                               \
  }

#define MXPREC_OUTS(M, ...) M(__VA_ARGS__, f32) M(__VA_ARGS__, bf16) M(__VA_ARGS__, f16)
#define MXPREC_MX_PAIR(fa, fb)                                \
  MXPREC_OUTS(MXPREC_GEMM_KERNEL, mx, kMX, 16x16x128, fa, fb) \
  MXPREC_OUTS(MXPREC_GEMM_KERNEL, mx, kMX, 32x32x64, fa, fb)
#define MXPREC_FP8_PAIR(fa, fb)                                       \
  MXPREC_OUTS(MXPREC_GEMM_KERNEL, tensor, kTensor, 16x16x128, fa, fb) \
  MXPREC_OUTS(MXPREC_TILE_KERNEL, 1, 128, fa, fb)                     \
  MXPREC_OUTS(MXPREC_TILE_KERNEL, 128, 1, fa, fb)                     \
  MXPREC_OUTS(MXPREC_TILE_KERNEL, 1, 1, fa, fb)


#endif  // MXPREC_CSRC_HIP_KERNELS_GFX950_GEMM_IMPL_H_
