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
constexpr int32_t kScaledGroupSize = 256;    // FP32-scaled quantize kernels (gfx950_scaled_quantize.hip)
constexpr int64_t kElementwiseMaxGroups = 65536;  // grid-stride kernels (amax, tensor cast): grid cap

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

// Single kernel argument of the FP32-scaled quantize kernels (gfx950_scaled_quantize.hip): x
// (rows, L) row-major, quantized along L (contract axis = 2, rows = B * R, L = C).
//   mxprec_gfx950_amax_<in>:               amax = max |x| (atomic umax; one per workgroup)
//   mxprec_gfx950_tensor_quantize_<f>_<in>: data = FP8 codes of x / s, s = scale_src ? *scale_src
//                                           (delayed) : tensor_scale(*amax_src); scale = s
//   mxprec_gfx950_{row,tile}_quantize_<f>_<in>: one workgroup per (tr x tc) group (row: 1 x L);
//                                           scale[g] = group_scale(amax_g); amax atomically maxed;
//                                           group_amax (amax_mode 2) replaces amax_g in the scale
//   mxprec_gfx950_nvfp4_quantize_<in>:     one thread per block of 16: data packed E2M1 (rows, L/2),
//                                           scale E4M3 (rows, L/16); tensor_scale = s_t(*amax_src)
struct ScaledQuantizeArgs {
  const void* x;            // f32 / bf16 / f16
  uint8_t* data;            // FP8 (rows, L) / NVFP4 packed (rows, L / 2)
  void* scale;              // tensor: f32 (); row / tile: f32 per group; nvfp4: u8 E4M3 (rows, L / 16)
  float* amax;              // () tensor amax: the amax kernel and row / tile kernels max into it
  float* tensor_scale;      // () NVFP4 s_t (written by nvfp4); else unused
  const float* amax_src;    // tensor / nvfp4: the amax the scale is computed from (amax, or amax_in)
  const float* scale_src;   // tensor delayed: scale_in; else nullptr
  const float* group_amax;  // row / tile amax_mode 2: amax_in (scale-shaped); else nullptr
  int64_t rows, l;          // x (rows, L); also n = rows * l for the amax / tensor kernels
  int64_t tr, tc;           // row / tile group extent (row: 1, L); unused otherwise
  int64_t stride;           // amax / tensor kernels (grid-stride loops): threads in the launch
  int32_t power_of_two;     // tile
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

// FP32-scaled quantize kernels (gfx950_scaled_quantize.hip): kinds tensor / row / tile take an
// FP8 format; nvfp4 is E2M1 only. e.g. mxprec_gfx950_tensor_quantize_e4m3_bf16,
// mxprec_gfx950_tile_quantize_e5m2_f32, mxprec_gfx950_nvfp4_quantize_f16, mxprec_gfx950_amax_f32.
inline bool scaled_quantize_supported(ScalingKind k, ElemFormat f) {
  if (k == ScalingKind::kNVFP4) return f == ElemFormat::kE2M1;
  return (k == ScalingKind::kTensor || k == ScalingKind::kRow || k == ScalingKind::kTile) && is_fp8(f);
}
inline std::string scaled_quantize_kernel_name(ScalingKind k, ElemFormat f, int32_t in_type) {
  if (k == ScalingKind::kNVFP4) return std::string("mxprec_gfx950_nvfp4_quantize_") + in_type_name(in_type);
  const char* kn = k == ScalingKind::kTensor ? "tensor" : (k == ScalingKind::kRow ? "row" : "tile");
  return std::string("mxprec_gfx950_") + kn + "_quantize_" + format_name(f) + "_" + in_type_name(in_type);
}
inline std::string amax_kernel_name(int32_t in_type) { return std::string("mxprec_gfx950_amax_") + in_type_name(in_type); }

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_GFX950_KERNELS_H_
