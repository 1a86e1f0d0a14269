// Contract of the `mxprec_scaled_gemm` custom call (every platform: "cpu", "CUDA", "ROCM").
//
// A batched GEMM of two operands, each quantized (or plain) along its contraction axis, with
// FP32 accumulation:
//
//   out[b, m, n] = sum_k A[b, m, k] * B[b, k, n] (+ bias[n]),   A, B dequantized to FP32
//
// Mathematically equivalent to mxprec.kernels.reference_scaled_gemm:
//   dot_general(dequantize(lhs, f32), dequantize(rhs, f32),
//               (((lhs_contract,), (rhs_contract,)), ((0,), (0,))), precision=HIGHEST)
//
// Buffers, in order (the Python wrapper mxprec.kernels.ffi.scaled_gemm builds them from
// QTensors; layouts are exactly QTensor's; "K'" = K packed: K for FP8 / plain, K/2 for FP4,
// K*3/4 for FP6; "blk" = the operand's block (MX block, NVFP4 16, tile tc); "tr" = tile rows):
//
//   #  name              dtype                       shape (lhs_contract=2 / =1)
//   0  lhs data          plain: f32|bf16|f16;        (B, M, K') / (B, K', M)
//                        FP8: f8e4m3fn|f8e5m2; FP6/FP4: u8
//   1  lhs scale         kind none: ignored (any, f32 () by convention)
//                        tensor: f32 ()
//                        row:    f32 (B, M, 1) / (B, 1, M)
//                        tile:   f32 (B, M/tr, K/blk) / (B, K/blk, M/tr)
//                        mx:     f8e8m0fnu (B, M, K/blk) / (B, K/blk, M)
//                        nvfp4:  f8e4m3fn  (B, M, K/16)  / (B, K/16, M)
//   2  lhs tensor_scale  f32 (): NVFP4's second-level scale; ignored otherwise (pass 1)
//   3  rhs data          as lhs with (B, K', N) (rhs_contract=1) / (B, N, K') (rhs_contract=2)
//   4  rhs scale         as lhs with N in place of M
//   5  rhs tensor_scale  f32 ()
//   6  bias              has_bias=1: f32 (N,) added to the FP32 accumulator before the output
//                        cast; has_bias=0: ignored (any, f32 () by convention)
//   result               (B, M, N) f32 | bf16 | f16
//
// Attributes (all int32): lhs_kind, lhs_fmt, lhs_block, lhs_tile_rows, lhs_contract (1|2),
// rhs_kind, rhs_fmt, rhs_block, rhs_tile_rows, rhs_contract (1|2), has_bias (0|1).
// `*_kind` is a ScalingKind; delayed scaling is `tensor` at GEMM time (the scale is data).
// `*_fmt` is an ElemFormat (ignored for kind none, where the data dtype says the format).
// `*_block` is the group size along K (mx: the MX block, nvfp4: 16, tile: tc; else ignored).
// `*_tile_rows` is tr for kind tile (1 for 1x128 tiles; 128 for 128x128); else ignored.
//
// Scale application (bit-exact with mxprec.dequantize): value = decode(code) then
//   tensor/row/tile: value * s;  mx: byte 0xFF -> NaN, else mx_multiply(value, byte - 127);
//   nvfp4: value * (f32(block_scale) * tensor_scale).
// Accumulation: FP32; the order over K is backend-defined (the CPU backend sums k = 0..K-1 in
// order for every output element, so results do not depend on how B, M or N are split).
#ifndef MXPREC_CSRC_COMMON_SCALED_GEMM_H_
#define MXPREC_CSRC_COMMON_SCALED_GEMM_H_

#include <cstdint>

#include "formats.h"

namespace mxprec {

inline constexpr const char kScaledGemmTarget[] = "mxprec_scaled_gemm";

// Scaling kind of one operand (attribute `*_kind`). Values are part of the FFI contract.
enum class ScalingKind : int32_t {
  kNone = 0,    // plain f32/bf16/f16 operand; scale buffer ignored
  kTensor = 1,  // one f32 scale (current or delayed)
  kRow = 2,     // one f32 scale per row (index of the free axis)
  kTile = 3,    // one f32 scale per tr x blk tile
  kMX = 4,      // one E8M0 scale per blk elements along K
  kNVFP4 = 5,   // E2M1 elements, one E4M3 scale per 16 along K, f32 tensor scale
};
constexpr int32_t kNumScalingKinds = 6;
constexpr int32_t kNvfp4Block = 16;  // NVFP4: one E4M3 scale per 16 E2M1 elements

MXPREC_HD constexpr bool valid_scaling_kind(int32_t k) { return k >= 0 && k < kNumScalingKinds; }

inline const char* scaling_kind_name(ScalingKind k) {
  switch (k) {
    case ScalingKind::kNone: return "none";
    case ScalingKind::kTensor: return "tensor";
    case ScalingKind::kRow: return "row";
    case ScalingKind::kTile: return "tile";
    case ScalingKind::kMX: return "mx";
    case ScalingKind::kNVFP4: return "nvfp4";
  }
  return "?";
}

// Packed length along the quantization axis of `n` elements of format f (FP8 n, FP6 3n/4, FP4 n/2).
MXPREC_HD constexpr int64_t packed_len(int64_t n, ElemFormat f) {
  return format_bits(f) == 8 ? n : (format_bits(f) == 4 ? n / 2 : n / 4 * 3);
}
// Elements per packing unit along the axis (FP8 1, FP4 2, FP6 4): K must be a multiple.
MXPREC_HD constexpr int64_t pack_unit(ElemFormat f) {
  return format_bits(f) == 8 ? 1 : (format_bits(f) == 4 ? 2 : 4);
}

// Static description of one GEMM operand (decoded from the attributes).
struct OperandDesc {
  ScalingKind kind;
  ElemFormat fmt;
  int32_t block;      // group size along K (mx / nvfp4 / tile), else 1
  int32_t tile_rows;  // tr (tile), else 1
  int32_t contract;   // 1 or 2: which axis of the 3-D buffer is K
};

// Expected shape of a 3-D operand buffer or its scale. `rows` is the free extent (M or N).
struct Dims3 {
  int32_t rank;  // 0 for a scalar, else 3
  int64_t d[3];
};

MXPREC_HD inline Dims3 make_dims(int64_t b, int64_t free_, int64_t k_, int32_t contract) {
  Dims3 r{3, {b, 0, 0}};
  r.d[contract] = k_;
  r.d[3 - contract] = free_;
  return r;
}

// Shape of the data buffer of an operand with K logical elements along the contraction axis.
MXPREC_HD inline Dims3 operand_data_dims(const OperandDesc& o, int64_t b, int64_t rows, int64_t k) {
  const int64_t kp = o.kind == ScalingKind::kNone ? k : packed_len(k, o.fmt);
  return make_dims(b, rows, kp, o.contract);
}

// Shape of the scale buffer (rank 0 for tensor; kind none: not checked).
MXPREC_HD inline Dims3 operand_scale_dims(const OperandDesc& o, int64_t b, int64_t rows, int64_t k) {
  switch (o.kind) {
    case ScalingKind::kRow:
      return make_dims(b, rows, 1, o.contract);
    case ScalingKind::kTile:
      return make_dims(b, rows / o.tile_rows, k / o.block, o.contract);
    case ScalingKind::kMX:
    case ScalingKind::kNVFP4:
      return make_dims(b, rows, k / o.block, o.contract);
    default:
      return Dims3{0, {0, 0, 0}};
  }
}

// Logical K of an operand from its data buffer's packed extent along the contraction axis.
MXPREC_HD inline int64_t logical_k(const OperandDesc& o, int64_t packed) {
  if (o.kind == ScalingKind::kNone) return packed;
  switch (format_bits(o.fmt)) {
    case 4: return packed * 2;
    case 6: return packed / 3 * 4;
    default: return packed;
  }
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_SCALED_GEMM_H_
