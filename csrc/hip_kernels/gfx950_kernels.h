// Host <-> device interface of the gfx950 kernels (gfx950_mx_gemm.hip, gfx950_mx_quantize.hip):
// kernel argument structs (passed by value as the single kernel argument) and the extern "C"
// kernel symbol names, which a host launcher looks up in the code object. Plain C++17, no ROCm.
#ifndef MXPREC_CSRC_HIP_KERNELS_GFX950_KERNELS_H_
#define MXPREC_CSRC_HIP_KERNELS_GFX950_KERNELS_H_

#include <cstdint>
#include <string>

#include "formats.h"
#include "mfma_layout.h"
#include "scaled_gemm.h"

namespace mxprec {
namespace hip {

constexpr int32_t kGemmWavesPerGroup = 4;  // 4 waves (tiles) per 256-thread workgroup
constexpr int32_t kGemmGroupSize = kGemmWavesPerGroup * kWaveSize;
constexpr int32_t kQuantizeGroupSize = 256;  // one MX block of 32 per thread

enum class OutType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };
// How the GEMM applies operand scales:
//   kMX:     E8M0 per 32 along K, in the scaled MFMA (per-lane scale bytes);
//   kTensor: one f32 per operand (FP8 only); unit scale bytes (127) in the MFMA, the product of
//            the two f32 scales applied in the epilogue;
//   kTile:   f32 per (tr x 128) tile (DeepSeek-V3 1x128 / 128x128, FP8 only); each 128-K
//            MFMA runs with unit scale bytes into a fresh accumulator and is promoted into the
//            FP32 accumulator as acc += partial * (s_a * s_b) (16x16x128 only).
enum class GemmScaling : int32_t { kMX = 0, kTensor = 1, kTile = 2 };

// Single kernel argument of every GEMM kernel. All operands K-major (contract *_contract = 2):
// A data (B, M, K') and B data (B, N, K'); out (B, M, N) row-major.
struct GemmArgs {
  const uint8_t* a;        // packed A (FP8 codes / packed FP6 / packed FP4)
  const void* a_scale;     // kMX: u8 (B, M, K/32); kTensor: f32 (); kTile: f32 (B, M/tr, K/128)
  const uint8_t* b;        // packed B
  const void* b_scale;     // as a_scale with N
  const float* bias;       // (N,) or nullptr
  void* out;               // (B, M, N) f32 / bf16 / f16
  int64_t batch, m, n, k;  // K logical; K % 32 == 0 (kTile: K % 128 == 0)
};

// Single kernel argument of the MX quantize kernels: x (rows, L) row-major, quantized along L
// (contract axis = 2 with rows = B * R, L = C). L % 32 == 0.
struct QuantizeArgs {
  const void* x;       // f32 / bf16 / f16
  uint8_t* data;       // (rows, L') packed
  uint8_t* scale;      // (rows, L / 32) E8M0
  float* amax;         // () tensor amax; must hold +0.0 before the launch (see *_init kernel)
  int64_t rows, l;
};

inline const char* out_type_name(OutType o) {
  switch (o) {
    case OutType::kF32: return "f32";
    case OutType::kBF16: return "bf16";
    case OutType::kF16: return "f16";
  }
  return "?";
}
inline const char* shape_name(MfmaShape s) { return s == MfmaShape::k16x16x128 ? "16x16x128" : "32x32x64"; }

// Which format pairs have GEMM kernels (others: not instantiated, the host must refuse).
// MX: every pair within a family (FP8 x FP8, FP6 x FP6) plus E2M1 x E2M1. Tensor / tile: FP8 x FP8.
inline bool gemm_supported(GemmScaling sc, ElemFormat fa, ElemFormat fb, MfmaShape s, int32_t tr_a = 1, int32_t tr_b = 1) {
  if (sc == GemmScaling::kMX) return format_bits(fa) == format_bits(fb);
  if (!is_fp8(fa) || !is_fp8(fb)) return false;
  if (sc == GemmScaling::kTensor) return s == MfmaShape::k16x16x128;
  return s == MfmaShape::k16x16x128 && (tr_a == 1 || tr_a == 128) && (tr_b == 1 || tr_b == 128) &&
         !(tr_a == 128 && tr_b == 128);
}

// extern "C" symbol of a GEMM kernel, e.g. mxprec_gfx950_mx_gemm_16x16x128_e4m3_e5m2_bf16,
// mxprec_gfx950_tensor_gemm_16x16x128_e4m3_e4m3_f32, mxprec_gfx950_tile_gemm_1x128_128x128_e4m3_e4m3_bf16.
inline std::string gemm_kernel_name(GemmScaling sc, ElemFormat fa, ElemFormat fb, MfmaShape s, OutType o,
                                    int32_t tr_a = 1, int32_t tr_b = 1) {
  std::string n = "mxprec_gfx950_";
  if (sc == GemmScaling::kTile) {
    n += "tile_gemm_" + std::to_string(tr_a) + "x128_" + std::to_string(tr_b) + "x128_";
  } else {
    n += std::string(sc == GemmScaling::kMX ? "mx_gemm_" : "tensor_gemm_") + shape_name(s) + "_";
  }
  return n + format_name(fa) + "_" + format_name(fb) + "_" + out_type_name(o);
}

inline const char* in_type_name(int32_t i) { return i == 0 ? "f32" : (i == 1 ? "bf16" : "f16"); }
// e.g. mxprec_gfx950_mx_quantize_e2m1_rceil_bf16; plus mxprec_gfx950_quantize_init.
inline std::string quantize_kernel_name(ElemFormat f, ScaleRule r, int32_t in_type) {
  return std::string("mxprec_gfx950_mx_quantize_") + format_name(f) + (r == ScaleRule::kRceil ? "_rceil_" : "_floor_") +
         in_type_name(in_type);
}

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_GFX950_KERNELS_H_
