// CPU lowering of `mxprec_scaled_gemm` (contract: csrc/common/scaled_gemm.h).
//
// Per batch index b: each operand's slice is dequantized once to FP32 exactly as
// mxprec.dequantize does (decode table per format, then the group scale), laid out as
// A (M x K) and Bm (K x N); then a blocked FP32 GEMM accumulates every output element over
// k = 0 .. K-1 in order (so results do not depend on how B, M or N are split across devices),
// adds the optional bias and converts to the output dtype (round to nearest even).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ffi_helpers.h"
#include "formats.h"
#include "scaled_gemm.h"
#include "xla/ffi/api/ffi.h"

namespace mxprec {
namespace {

constexpr const char* kOp = "mxprec_scaled_gemm";

struct DecodeTable {
  std::array<float, 256> v;
  explicit DecodeTable(ElemFormat f) {
    const int n = 1 << format_bits(f);
    v.fill(0.0f);
    for (int c = 0; c < n; ++c) v[c] = decode_code(static_cast<uint8_t>(c), f);
  }
};

const DecodeTable& decode_table(ElemFormat f) {
  static const DecodeTable tables[kNumElemFormats] = {
      DecodeTable(ElemFormat::kE4M3), DecodeTable(ElemFormat::kE5M2), DecodeTable(ElemFormat::kE2M3),
      DecodeTable(ElemFormat::kE3M2), DecodeTable(ElemFormat::kE2M1)};
  return tables[static_cast<int>(f)];
}

struct Operand {
  const ffi::AnyBuffer* data;
  const ffi::AnyBuffer* scale;
  const ffi::AnyBuffer* tensor_scale;
  OperandDesc desc;
  int64_t rows;  // free extent (M or N)
};

// Dequantizes batch b of an operand into `out`, in the operand's own (unpacked) layout:
// contract 2 -> (rows, K), contract 1 -> (K, rows). Bit-exact with mxprec.dequantize.
void dequantize_slice(const Operand& op, int64_t b, int64_t K, float* out) {
  const OperandDesc& o = op.desc;
  const int64_t rows = op.rows;
  // (P, L, Q) view of the slice with L = K along the contraction axis.
  const int64_t P = o.contract == 2 ? rows : 1;
  const int64_t Q = o.contract == 2 ? 1 : rows;
  const int64_t n = rows * K;
  if (o.kind == ScalingKind::kNone) {
    const ffi::DataType t = op.data->element_type();
    const void* base = op.data->untyped_data();
    for (int64_t i = 0; i < n; ++i) out[i] = load_wide(base, t, b * n + i);
    return;
  }
  const int32_t bits = format_bits(o.fmt);
  const int64_t Lp = packed_len(K, o.fmt);
  const uint8_t* data = static_cast<const uint8_t*>(op.data->untyped_data()) + b * rows * Lp;
  const float* lut = decode_table(o.fmt).v.data();
  // Decode the element values first.
  for (int64_t p = 0; p < P; ++p) {
    const uint8_t* dp = data + p * Lp * Q;
    float* op_ = out + p * K * Q;
    if (bits == 8) {
      for (int64_t i = 0; i < K * Q; ++i) op_[i] = lut[dp[i]];
    } else {
      for (int64_t l = 0; l < K; ++l)
        for (int64_t q = 0; q < Q; ++q) op_[l * Q + q] = lut[packed_code(dp + q, l, Q, bits)];
    }
  }
  // Apply the group scales.
  switch (o.kind) {
    case ScalingKind::kTensor: {
      const float s = *static_cast<const float*>(op.scale->untyped_data());
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] * s;
      break;
    }
    case ScalingKind::kRow: {
      const float* s = static_cast<const float*>(op.scale->untyped_data()) + b * rows;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t l = 0; l < K; ++l)
          for (int64_t q = 0; q < Q; ++q) out[(p * K + l) * Q + q] *= s[p * Q + q];
      break;
    }
    case ScalingKind::kTile: {
      const int64_t tp = o.contract == 2 ? o.tile_rows : 1, tq = o.contract == 2 ? 1 : o.tile_rows;
      const int64_t gL = K / o.block, gQ = Q / tq, gP = P / tp;
      const float* s = static_cast<const float*>(op.scale->untyped_data()) + b * gP * gL * gQ;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t l = 0; l < K; ++l) {
          const float* srow = s + ((p / tp) * gL + l / o.block) * gQ;
          for (int64_t q = 0; q < Q; ++q) out[(p * K + l) * Q + q] *= srow[q / tq];
        }
      break;
    }
    case ScalingKind::kMX: {
      const int64_t gL = K / o.block;
      const uint8_t* s = static_cast<const uint8_t*>(op.scale->untyped_data()) + b * P * gL * Q;
      const float nan = bits_f32(0x7FC00000u);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t l = 0; l < K; ++l) {
          const uint8_t* srow = s + (p * gL + l / o.block) * Q;
          for (int64_t q = 0; q < Q; ++q) {
            float& v = out[(p * K + l) * Q + q];
            const uint8_t byte = srow[q];
            v = byte == kE8M0Nan ? nan : mx_multiply(v, e8m0_exponent(byte));
          }
        }
      break;
    }
    case ScalingKind::kNVFP4: {
      const int64_t gL = K / o.block;
      const uint8_t* s = static_cast<const uint8_t*>(op.scale->untyped_data()) + b * P * gL * Q;
      const float ts = *static_cast<const float*>(op.tensor_scale->untyped_data());
      const float* e4m3 = decode_table(ElemFormat::kE4M3).v.data();
      for (int64_t p = 0; p < P; ++p)
        for (int64_t l = 0; l < K; ++l) {
          const uint8_t* srow = s + (p * gL + l / o.block) * Q;
          for (int64_t q = 0; q < Q; ++q) out[(p * K + l) * Q + q] *= e4m3[srow[q]] * ts;
        }
      break;
    }
    default:
      break;
  }
}

void transpose(const float* in, int64_t r, int64_t c, float* out) {  // in (r, c) -> out (c, r)
  constexpr int64_t T = 32;
  for (int64_t i0 = 0; i0 < r; i0 += T)
    for (int64_t j0 = 0; j0 < c; j0 += T)
      for (int64_t i = i0; i < std::min(r, i0 + T); ++i)
        for (int64_t j = j0; j < std::min(c, j0 + T); ++j) out[j * r + i] = in[i * c + j];
}

// C (M x N) = A (M x K) . Bm (K x N), every C element accumulated over k in increasing order.
void gemm_f32(const float* A, const float* Bm, float* Cm, int64_t M, int64_t N, int64_t K) {
  constexpr int64_t NB = 256, KB = 128;
  std::fill(Cm, Cm + M * N, 0.0f);
  for (int64_t n0 = 0; n0 < N; n0 += NB) {
    const int64_t nb = std::min(NB, N - n0);
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      const int64_t kb = std::min(KB, K - k0);
      int64_t m = 0;
      for (; m + 4 <= M; m += 4) {
        float* c0 = Cm + (m + 0) * N + n0;
        float* c1 = Cm + (m + 1) * N + n0;
        float* c2 = Cm + (m + 2) * N + n0;
        float* c3 = Cm + (m + 3) * N + n0;
        for (int64_t k = k0; k < k0 + kb; ++k) {
          const float a0 = A[(m + 0) * K + k], a1 = A[(m + 1) * K + k];
          const float a2 = A[(m + 2) * K + k], a3 = A[(m + 3) * K + k];
          const float* bp = Bm + k * N + n0;
          for (int64_t j = 0; j < nb; ++j) {
            const float bv = bp[j];
            c0[j] += a0 * bv;
            c1[j] += a1 * bv;
            c2[j] += a2 * bv;
            c3[j] += a3 * bv;
          }
        }
      }
      for (; m < M; ++m) {
        float* c0 = Cm + m * N + n0;
        for (int64_t k = k0; k < k0 + kb; ++k) {
          const float a0 = A[m * K + k];
          const float* bp = Bm + k * N + n0;
          for (int64_t j = 0; j < nb; ++j) c0[j] += a0 * bp[j];
        }
      }
    }
  }
}

std::string check_operand(const char* who, const Operand& op, int64_t B, int64_t K) {
  const OperandDesc& o = op.desc;
  std::ostringstream os;
  if (o.kind == ScalingKind::kNone) {
    if (!is_wide_float(op.data->element_type()))
      os << who << " data (kind none) must be float32/bfloat16/float16, got " << dtype_name(op.data->element_type());
    return os.str();
  }
  if (op.data->element_type() != data_dtype(o.fmt)) {
    os << who << " data has dtype " << dtype_name(op.data->element_type()) << ", expected "
       << dtype_name(data_dtype(o.fmt)) << " for format " << format_name(o.fmt);
    return os.str();
  }
  if (K % pack_unit(o.fmt) != 0 || (format_bits(o.fmt) == 6 && op.data->dimensions()[o.contract] % 3 != 0)) {
    os << who << " data " << dims_str(op.data->dimensions()) << ": packed K is not a whole number of "
       << format_name(o.fmt) << " packing units";
    return os.str();
  }
  if ((o.kind == ScalingKind::kMX || o.kind == ScalingKind::kNVFP4 || o.kind == ScalingKind::kTile) &&
      K % o.block != 0) {
    os << who << ": K=" << K << " is not a multiple of the " << scaling_kind_name(o.kind) << " block " << o.block;
    return os.str();
  }
  if (o.kind == ScalingKind::kTile && op.rows % o.tile_rows != 0) {
    os << who << ": rows=" << op.rows << " is not a multiple of tile_rows " << o.tile_rows;
    return os.str();
  }
  const Dims3 sd = operand_scale_dims(o, B, op.rows, K);
  if (!dims_equal(op.scale->dimensions(), sd) || op.scale->element_type() != scale_dtype(o.kind)) {
    os << who << " scale has shape " << dims_str(op.scale->dimensions()) << " dtype "
       << dtype_name(op.scale->element_type()) << ", expected shape " << dims_str(sd) << " dtype "
       << dtype_name(scale_dtype(o.kind)) << " (" << scaling_kind_name(o.kind) << " " << format_name(o.fmt)
       << " block " << o.block << ")";
    return os.str();
  }
  if (o.kind == ScalingKind::kNVFP4 &&
      (op.tensor_scale->dimensions().size() != 0 || op.tensor_scale->element_type() != ffi::DataType::F32)) {
    os << who << " tensor_scale has shape " << dims_str(op.tensor_scale->dimensions()) << " dtype "
       << dtype_name(op.tensor_scale->element_type()) << ", expected shape () dtype float32";
    return os.str();
  }
  return os.str();
}

ffi::Error ScaledGemmImpl(ffi::AnyBuffer lhs_data, ffi::AnyBuffer lhs_scale, ffi::AnyBuffer lhs_ts,
                          ffi::AnyBuffer rhs_data, ffi::AnyBuffer rhs_scale, ffi::AnyBuffer rhs_ts,
                          ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> out, int32_t lhs_kind, int32_t lhs_fmt,
                          int32_t lhs_block, int32_t lhs_tile_rows, int32_t lhs_contract, int32_t rhs_kind,
                          int32_t rhs_fmt, int32_t rhs_block, int32_t rhs_tile_rows, int32_t rhs_contract,
                          int32_t has_bias) {
  // ---------------------------------------------------------------- attributes
  for (const std::string& err :
       {check_operand_attrs("lhs", lhs_kind, lhs_fmt, lhs_block, lhs_tile_rows, lhs_contract),
        check_operand_attrs("rhs", rhs_kind, rhs_fmt, rhs_block, rhs_tile_rows, rhs_contract)})
    if (!err.empty()) return invalid(std::string(kOp) + ": " + err);
  if (has_bias != 0 && has_bias != 1) return invalid(std::string(kOp) + ": has_bias must be 0 or 1");
  auto desc = [](int32_t kind, int32_t fmt, int32_t block, int32_t tr, int32_t contract) {
    const bool grouped = kind == 3 || kind == 4 || kind == 5;
    return OperandDesc{static_cast<ScalingKind>(kind), static_cast<ElemFormat>(kind == 0 ? 0 : fmt),
                       grouped ? block : 1, kind == 3 ? tr : 1, contract};
  };
  Operand lhs{&lhs_data, &lhs_scale, &lhs_ts, desc(lhs_kind, lhs_fmt, lhs_block, lhs_tile_rows, lhs_contract), 0};
  Operand rhs{&rhs_data, &rhs_scale, &rhs_ts, desc(rhs_kind, rhs_fmt, rhs_block, rhs_tile_rows, rhs_contract), 0};

  // ---------------------------------------------------------------- shapes
  const auto ld = lhs_data.dimensions(), rd = rhs_data.dimensions();
  if (ld.size() != 3 || rd.size() != 3)
    return invalid(std::string(kOp) + ": lhs and rhs data must be 3-D, got " + dims_str(ld) + " and " + dims_str(rd));
  const int64_t B = ld[0];
  lhs.rows = ld[3 - lhs_contract];
  rhs.rows = rd[3 - rhs_contract];
  const int64_t K = logical_k(lhs.desc, ld[lhs_contract]);
  const int64_t Kr = logical_k(rhs.desc, rd[rhs_contract]);
  if (rd[0] != B || K != Kr) {
    std::ostringstream os;
    os << kOp << ": lhs data " << dims_str(ld) << " (contract " << lhs_contract << ", K=" << K << ") and rhs data "
       << dims_str(rd) << " (contract " << rhs_contract << ", K=" << Kr << ") disagree on B or K";
    return invalid(os.str());
  }
  for (const std::string& err : {check_operand("lhs", lhs, B, K), check_operand("rhs", rhs, B, K)})
    if (!err.empty()) return invalid(std::string(kOp) + ": " + err);
  const int64_t M = lhs.rows, N = rhs.rows;
  if (has_bias) {
    if (auto e = check_buffer(kOp, "bias", bias, Dims3{1, {N, 0, 0}}, ffi::DataType::F32); e.failure()) return e;
  }
  const ffi::DataType ot = out->element_type();
  if (!dims_equal(out->dimensions(), Dims3{3, {B, M, N}}) || !is_wide_float(ot)) {
    std::ostringstream os;
    os << kOp << ": result has shape " << dims_str(out->dimensions()) << " dtype " << dtype_name(ot)
       << ", expected shape " << dims_str(Dims3{3, {B, M, N}}) << " dtype float32/bfloat16/float16";
    return invalid(os.str());
  }

  // ---------------------------------------------------------------- compute
  ScopedFlushDenormal ftz;
  std::vector<float> a_nat(static_cast<size_t>(M * K)), b_nat(static_cast<size_t>(K * N));
  std::vector<float> a_mk(lhs_contract == 2 ? 0 : static_cast<size_t>(M * K));
  std::vector<float> b_kn(rhs_contract == 1 ? 0 : static_cast<size_t>(K * N));
  std::vector<float> acc(static_cast<size_t>(M * N));
  const float* bias_p = has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    dequantize_slice(lhs, b, K, a_nat.data());
    dequantize_slice(rhs, b, K, b_nat.data());
    const float* A = a_nat.data();
    const float* Bm = b_nat.data();
    if (lhs_contract == 1) {  // (K, M) -> (M, K)
      transpose(a_nat.data(), K, M, a_mk.data());
      A = a_mk.data();
    }
    if (rhs_contract == 2) {  // (N, K) -> (K, N)
      transpose(b_nat.data(), N, K, b_kn.data());
      Bm = b_kn.data();
    }
    gemm_f32(A, Bm, acc.data(), M, N, K);
    if (bias_p)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) acc[m * N + n] += bias_p[n];
    const int64_t mn = M * N;
    if (ot == ffi::DataType::F32) {
      if (mn) std::memcpy(static_cast<float*>(out->untyped_data()) + b * mn, acc.data(), sizeof(float) * mn);
    } else {
      uint16_t* o = static_cast<uint16_t*>(out->untyped_data()) + b * mn;
      if (ot == ffi::DataType::BF16)
        for (int64_t i = 0; i < mn; ++i) o[i] = f32_to_bf16(acc[i]);
      else
        for (int64_t i = 0; i < mn; ++i) o[i] = f32_to_f16(acc[i]);
    }
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecScaledGemmCpu);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecScaledGemmCpu, mxprec::ScaledGemmImpl,
                              MXPREC_SCALED_GEMM_BIND(xla::ffi::Ffi::Bind()));
