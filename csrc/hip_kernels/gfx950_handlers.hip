// XLA FFI handlers for platform "ROCM" (exported C symbols MxprecScaledGemmHip, MxprecQuantizeHip):
// `mxprec_scaled_gemm` (contract: csrc/common/scaled_gemm.h) and `mxprec_quantize`
// (csrc/common/quantize.h) on the gfx950 (MI355X) kernels of gfx950_mx_gemm.hip,
// gfx950_fp8_gemm.hip, gfx950_mx_quantize.hip and gfx950_scaled_quantize.hip, launched on the
// hipStream_t XLA passes.
//
// COMPILE-CHECKED ONLY. This file and libmxprec_hip.so are compiled (clang-22 -x hip, gfx950)
// against Debian's ROCm 5.2 libamdhip64-dev headers; nothing here has run: we have no AMD GPU, and
// a ROCm 5.2 runtime cannot drive an MI355X anyway (docs/backends/hip.md).
//
// What the kernels serve (anything else the contract allows: ffi::Error Unimplemented, naming why;
// buffers that disagree with the contract: InvalidArgument):
//   mxprec_scaled_gemm
//     * lhs_contract == 2 and rhs_contract == 2 only: lhs (B, M, K') and rhs (B, N, K'), K
//       contiguous ("K-major", what the scaled MFMA loads). mxprec.kernels.hip.scaled_gemm
//       transposes an operand whose contraction axis is 1 (data and scale) before the call;
//     * both kind mx (4), block 32, formats of one family: FP8 x FP8 (e4m3 / e5m2, all 4 pairs),
//       FP6 x FP6 (e2m3 / e3m2, all 4 pairs), e2m1 x e2m1; K % 32 == 0;
//     * both kind tensor (1; delayed is tensor at GEMM time), FP8 x FP8 (4 pairs); K % 32 == 0;
//     * both kind tile (3), FP8 x FP8, block (tc) 128, tile_rows 1x128 / 128x128 (not both 128);
//       K % 128 == 0;
//     * output f32 / bf16 / f16, optional f32 (N,) bias; any M, N (edge tiles masked).
//     Not served: kind none / row / nvfp4, mixed kinds, mixed families (FP8 x FP4, ...).
//   mxprec_quantize (x f32 / bf16 / f16, axis 2 = the contiguous axis only)
//     * kind mx, block 32, amax_mode 0, not delayed; every element format, scale rule rceil / floor;
//     * kind tensor (e4m3 / e5m2): current scaling (amax pass + cast pass), delayed (scale_in),
//       amax_mode 0 / 1;
//     * kind row (e4m3 / e5m2), amax_mode 0 / 2;
//     * kind tile (e4m3 / e5m2) 1x128 and 128x128, plain or power-of-two scales, amax_mode 0 / 2;
//     * kind nvfp4 (e2m1, block 16, E4M3 block scales, FP32 tensor scale; amax pass + block
//       pass), amax_mode 0 / 1.
//     Not served: axis 1 (any kind), other tile shapes, mx amax_mode 1 / 2.
//
// Kernels are launched with hipLaunchKernel (what hipLaunchKernelGGL / <<<>>> lower to) through
// their host-side handles, looked up by the names gfx950_kernels.h spells (gemm_kernel_name,
// quantize_kernel_name, scaled_quantize_kernel_name, amax_kernel_name), with the single by-value
// argument GemmArgs / QuantizeArgs / ScaledQuantizeArgs.
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <unordered_map>

#include "ffi_helpers.h"
#include "formats.h"
#include "gfx950_kernels.h"
#include "mfma_layout.h"
#include "quantize.h"
#include "quantize_ffi.h"
#include "scaled_gemm.h"
#include "xla/ffi/api/ffi.h"

// ------------------------------------------------------------------------------ kernel handles
// X-macro lists of every kernel the device translation units define (gfx950_gemm_impl.h
// MXPREC_MX_PAIR / MXPREC_FP8_PAIR, gfx950_mx_quantize.hip MXPREC_QUANT_FMT). A name listed here
// but not defined there fails the link of libmxprec_hip.so (-Wl,--no-undefined).
#define MXH_OUTS(X, base) X(base##_f32) X(base##_bf16) X(base##_f16)
#define MXH_MX_PAIR(X, fa, fb)                                \
  MXH_OUTS(X, mxprec_gfx950_mx_gemm_16x16x128_##fa##_##fb)     \
  MXH_OUTS(X, mxprec_gfx950_mx_gemm_32x32x64_##fa##_##fb)
#define MXH_FP8_PAIR(X, fa, fb)                                   \
  MXH_OUTS(X, mxprec_gfx950_tensor_gemm_16x16x128_##fa##_##fb)     \
  MXH_OUTS(X, mxprec_gfx950_tile_gemm_1x128_128x128_##fa##_##fb)   \
  MXH_OUTS(X, mxprec_gfx950_tile_gemm_128x128_1x128_##fa##_##fb)   \
  MXH_OUTS(X, mxprec_gfx950_tile_gemm_1x128_1x128_##fa##_##fb)
#define MXH_GEMM_KERNELS(X)                                                                          \
  MXH_MX_PAIR(X, e4m3, e4m3) MXH_MX_PAIR(X, e4m3, e5m2) MXH_MX_PAIR(X, e5m2, e4m3)                   \
  MXH_MX_PAIR(X, e5m2, e5m2) MXH_MX_PAIR(X, e2m3, e2m3) MXH_MX_PAIR(X, e2m3, e3m2)                   \
  MXH_MX_PAIR(X, e3m2, e2m3) MXH_MX_PAIR(X, e3m2, e3m2) MXH_MX_PAIR(X, e2m1, e2m1)                   \
  MXH_FP8_PAIR(X, e4m3, e4m3) MXH_FP8_PAIR(X, e4m3, e5m2) MXH_FP8_PAIR(X, e5m2, e4m3)                \
  MXH_FP8_PAIR(X, e5m2, e5m2)
#define MXH_QUANT_INS(X, fmt, rule)                                                      \
  X(mxprec_gfx950_mx_quantize_##fmt##_##rule##_f32)                                      \
  X(mxprec_gfx950_mx_quantize_##fmt##_##rule##_bf16)                                     \
  X(mxprec_gfx950_mx_quantize_##fmt##_##rule##_f16)
#define MXH_QUANT_FMT(X, fmt) MXH_QUANT_INS(X, fmt, rceil) MXH_QUANT_INS(X, fmt, floor)
// gfx950_scaled_quantize.hip MXPREC_SQ_IN: amax / nvfp4 per input type, tensor / row / tile per
// FP8 format and input type.
#define MXH_SQ_FP8(X, fmt, in) \
  X(mxprec_gfx950_tensor_quantize_##fmt##_##in) X(mxprec_gfx950_row_quantize_##fmt##_##in) X(mxprec_gfx950_tile_quantize_##fmt##_##in)
#define MXH_SQ_IN(X, in) \
  X(mxprec_gfx950_amax_##in) X(mxprec_gfx950_nvfp4_quantize_##in) MXH_SQ_FP8(X, e4m3, in) MXH_SQ_FP8(X, e5m2, in)
#define MXH_QUANT_KERNELS(X)                                                                 \
  MXH_QUANT_FMT(X, e4m3) MXH_QUANT_FMT(X, e5m2) MXH_QUANT_FMT(X, e2m3) MXH_QUANT_FMT(X, e3m2) \
  MXH_QUANT_FMT(X, e2m1)
#define MXH_SCALED_QUANT_KERNELS(X) MXH_SQ_IN(X, f32) MXH_SQ_IN(X, bf16) MXH_SQ_IN(X, f16)

#define MXH_DECLARE_GEMM(name) extern "C" __global__ void name(::mxprec::hip::GemmArgs);
#define MXH_DECLARE_QUANT(name) extern "C" __global__ void name(::mxprec::hip::QuantizeArgs);
MXH_GEMM_KERNELS(MXH_DECLARE_GEMM)
MXH_QUANT_KERNELS(MXH_DECLARE_QUANT)
#define MXH_DECLARE_SQUANT(name) extern "C" __global__ void name(::mxprec::hip::ScaledQuantizeArgs);
MXH_SCALED_QUANT_KERNELS(MXH_DECLARE_SQUANT)
extern "C" __global__ void mxprec_gfx950_quantize_init(float* amax, float* tensor_scale);

namespace mxprec {
namespace hip {
namespace {

namespace ffi = ::xla::ffi;

#define MXH_TABLE_ENTRY(name) {#name, reinterpret_cast<const void*>(&name)},

using KernelTable = std::unordered_map<std::string, const void*>;

const KernelTable& gemm_kernels() {
  static const KernelTable* t = new KernelTable{MXH_GEMM_KERNELS(MXH_TABLE_ENTRY)};
  return *t;
}
const KernelTable& quantize_kernels() {
  static const KernelTable* t =
      new KernelTable{MXH_QUANT_KERNELS(MXH_TABLE_ENTRY) MXH_SCALED_QUANT_KERNELS(MXH_TABLE_ENTRY)};
  return *t;
}

const void* find_kernel(const KernelTable& t, const std::string& name) {
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

constexpr const char* kGemmOp = "mxprec_scaled_gemm (ROCM)";
constexpr const char* kQuantOp = "mxprec_quantize (ROCM)";
constexpr int64_t kMaxGridThreads = 4294967295LL;  // AMD: grid size (threads) per dimension < 2**32

ffi::Error unimplemented(const char* op, const std::string& msg) {
  return ffi::Error(ffi::ErrorCode::kUnimplemented,
                    std::string(op) + ": " + msg + " (use backend='xla'; docs/backends/hip.md lists what the gfx950 kernels serve)");
}

ffi::Error hip_error(const char* op, const char* what, hipError_t e) {
  return ffi::Error::Internal(std::string(op) + ": " + what + ": " + hipGetErrorName(e) + ": " + hipGetErrorString(e));
}

// Launches `kernel` (a host-side kernel handle) with one by-value argument on `stream`.
template <typename Args>
hipError_t launch(const void* kernel, int64_t groups, int32_t group_size, Args args, hipStream_t stream) {
  void* params[] = {&args};
  return hipLaunchKernel(kernel, dim3(static_cast<uint32_t>(groups)), dim3(static_cast<uint32_t>(group_size)), params,
                         0, stream);
}

// ------------------------------------------------------------------------------ scaled GEMM

ffi::Error ScaledGemmHipImpl(hipStream_t stream, ffi::AnyBuffer ld, ffi::AnyBuffer ls, ffi::AnyBuffer lt,
                             ffi::AnyBuffer rd, ffi::AnyBuffer rs, ffi::AnyBuffer rt, ffi::AnyBuffer bias,
                             ffi::Result<ffi::AnyBuffer> out, int32_t lhs_kind, int32_t lhs_fmt, int32_t lhs_block,
                             int32_t lhs_tile_rows, int32_t lhs_contract, int32_t rhs_kind, int32_t rhs_fmt,
                             int32_t rhs_block, int32_t rhs_tile_rows, int32_t rhs_contract, int32_t has_bias) {
  (void)lt;  // NVFP4 tensor scales: not served (nvfp4 is refused below)
  (void)rt;
  const char* op = kGemmOp;
  {
    std::string e = check_operand_attrs("lhs", lhs_kind, lhs_fmt, lhs_block, lhs_tile_rows, lhs_contract);
    if (e.empty()) e = check_operand_attrs("rhs", rhs_kind, rhs_fmt, rhs_block, rhs_tile_rows, rhs_contract);
    if (!e.empty()) return invalid(std::string(op) + ": " + e);
    if (has_bias != 0 && has_bias != 1) return invalid(std::string(op) + ": has_bias must be 0 or 1");
  }
  if (lhs_contract != 2 || rhs_contract != 2) {
    std::ostringstream os;
    os << "only K-major operands are implemented: lhs_contract=2 (lhs (B, M, K')) and rhs_contract=2 (rhs (B, N, K')), got "
       << lhs_contract << " / " << rhs_contract
       << "; transpose the data and scale of a contract-1 operand first (mxprec.kernels.hip.scaled_gemm does)";
    return unimplemented(op, os.str());
  }
  const auto lk = static_cast<ScalingKind>(lhs_kind), rk = static_cast<ScalingKind>(rhs_kind);
  const auto lf = static_cast<ElemFormat>(lhs_fmt), rf = static_cast<ElemFormat>(rhs_fmt);
  GemmScaling sc;
  if (lk != rk) {
    return unimplemented(op, std::string("mixed scaling kinds lhs ") + scaling_kind_name(lk) + " x rhs " +
                                 scaling_kind_name(rk) + " are not implemented (both mx, both tensor or both tile)");
  }
  switch (lk) {
    case ScalingKind::kMX: sc = GemmScaling::kMX; break;
    case ScalingKind::kTensor: sc = GemmScaling::kTensor; break;
    case ScalingKind::kTile: sc = GemmScaling::kTile; break;
    default:
      return unimplemented(op, std::string("scaling kind ") + scaling_kind_name(lk) +
                                   " is not implemented (mx, tensor / delayed, tile)");
  }
  if (sc == GemmScaling::kMX && (lhs_block != kMxBlock || rhs_block != kMxBlock)) {
    std::ostringstream os;
    os << "MX block " << lhs_block << " / " << rhs_block << " is not implemented (block 32: one scaled-MFMA lane fragment)";
    return unimplemented(op, os.str());
  }
  const int32_t tra = sc == GemmScaling::kTile ? lhs_tile_rows : 1;
  const int32_t trb = sc == GemmScaling::kTile ? rhs_tile_rows : 1;
  if (sc == GemmScaling::kTile && (lhs_block != 128 || rhs_block != 128)) {
    std::ostringstream os;
    os << "tile width " << lhs_block << " / " << rhs_block << " is not implemented (1x128 / 128x128 tiles)";
    return unimplemented(op, os.str());
  }
  // Instruction shape: 32x32x64 (fewer, larger tiles) when both M and N fill it; else 16x16x128.
  // Tensor / tile scaling exist for 16x16x128 only. A heuristic: nothing was measured.
  auto ldims = ld.dimensions(), rdims = rd.dimensions();
  if (ldims.size() != 3 || rdims.size() != 3) {
    return invalid(std::string(op) + ": lhs data " + dims_str(ldims) + " and rhs data " + dims_str(rdims) +
                   " must be 3-D");
  }
  const OperandDesc lo{lk, lf, lhs_block, lhs_tile_rows, 2}, ro{rk, rf, rhs_block, rhs_tile_rows, 2};
  const int64_t B = ldims[0], M = ldims[1], N = rdims[1];
  const int64_t K = logical_k(lo, ldims[2]);
  const MfmaShape shape =
      (sc == GemmScaling::kMX && M >= 32 && N >= 32) ? MfmaShape::k32x32x64 : MfmaShape::k16x16x128;
  if (!gemm_supported(sc, lf, rf, shape, tra, trb)) {
    std::ostringstream os;
    os << scaling_kind_name(lk) << " " << format_name(lf) << " x " << format_name(rf);
    if (sc == GemmScaling::kTile) os << " tiles " << tra << "x128 x " << trb << "x128";
    os << " has no gfx950 kernel (mx: FP8 x FP8, FP6 x FP6, e2m1 x e2m1; tensor: FP8 x FP8; tile: FP8 x FP8, "
          "1x128 / 128x128 but not 128x128 x 128x128)";
    return unimplemented(op, os.str());
  }
  // Buffers (K from lhs; rhs must agree).
  if (ldims[2] != packed_len(K, lf) || K % pack_unit(lf) != 0) {
    return invalid(std::string(op) + ": lhs data " + dims_str(ldims) + " has a packed K extent that is not a whole number of " +
                   format_name(lf) + " packing units");
  }
  if (auto e = check_buffer(op, "lhs data", ld, operand_data_dims(lo, B, M, K), data_dtype(lf)); e.failure()) return e;
  if (auto e = check_buffer(op, "rhs data", rd, operand_data_dims(ro, B, N, K), data_dtype(rf)); e.failure()) return e;
  const int64_t k_unit = sc == GemmScaling::kTile ? 128 : kMxBlock;
  if (K % k_unit != 0) {
    std::ostringstream os;
    os << "K=" << K << " must be a multiple of " << k_unit << " for " << scaling_kind_name(lk) << " operands";
    return sc == GemmScaling::kTensor ? unimplemented(op, os.str()) : invalid(std::string(op) + ": " + os.str());
  }
  if (sc == GemmScaling::kTile && (M % tra != 0 || N % trb != 0)) {
    std::ostringstream os;
    os << op << ": M=" << M << " / N=" << N << " must be multiples of the tile rows " << tra << " / " << trb;
    return invalid(os.str());
  }
  const ffi::DataType sdt = scale_dtype(lk);
  if (auto e = check_buffer(op, "lhs scale", ls, operand_scale_dims(lo, B, M, K), sdt); e.failure()) return e;
  if (auto e = check_buffer(op, "rhs scale", rs, operand_scale_dims(ro, B, N, K), sdt); e.failure()) return e;
  if (has_bias) {
    if (auto e = check_buffer(op, "bias", bias, Dims3{1, {N, 0, 0}}, ffi::DataType::F32); e.failure()) return e;
  }
  const ffi::DataType ot = out->element_type();
  if (!dims_equal(out->dimensions(), Dims3{3, {B, M, N}}) || !is_wide_float(ot)) {
    std::ostringstream os;
    os << op << ": result has shape " << dims_str(out->dimensions()) << " dtype " << dtype_name(ot) << ", expected ("
       << B << ", " << M << ", " << N << ") float32|bfloat16|float16";
    return invalid(os.str());
  }
  const OutType o = ot == ffi::DataType::F32 ? OutType::kF32 : (ot == ffi::DataType::BF16 ? OutType::kBF16 : OutType::kF16);
  if (B == 0 || M == 0 || N == 0) return ffi::Error::Success();

  const int64_t groups = num_workgroups(B, M, N, shape, kGemmWavesPerGroup);
  if (groups * kGemmGroupSize > kMaxGridThreads) {
    return unimplemented(op, "grid of " + std::to_string(groups) + " workgroups exceeds the 2**32-thread grid limit");
  }
  const std::string name = gemm_kernel_name(sc, lf, rf, shape, o, tra, trb);
  const void* kernel = find_kernel(gemm_kernels(), name);
  if (kernel == nullptr) return ffi::Error::Internal(std::string(op) + ": kernel " + name + " is not in libmxprec_hip.so");

  GemmArgs args{};
  args.a = static_cast<const uint8_t*>(ld.untyped_data());
  args.a_scale = ls.untyped_data();
  args.b = static_cast<const uint8_t*>(rd.untyped_data());
  args.b_scale = rs.untyped_data();
  args.bias = has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr;
  args.out = out->untyped_data();
  args.batch = B;
  args.m = M;
  args.n = N;
  args.k = K;
  if (hipError_t e = launch(kernel, groups, kGemmGroupSize, args, stream); e != hipSuccess)
    return hip_error(op, name.c_str(), e);
  return ffi::Error::Success();
}

// ------------------------------------------------------------------------------ quantize

// Kinds tensor (current / delayed), row, tile, nvfp4 (gfx950_scaled_quantize.hip); the
// attributes are already validated by QuantizeHipImpl. Launch sequence on `stream`:
//   quantize_init (amax = +0, tensor_scale = 1); tensor / nvfp4: amax pass, then the cast / block
//   pass (which reads the amax, or amax_in with amax_mode 1); row / tile: one pass (per-group
//   amax in LDS, atomic tensor amax), amax_in per group with amax_mode 2.
ffi::Error QuantizeScaledHip(hipStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale_in, ffi::AnyBuffer amax_in,
                             ffi::Result<ffi::AnyBuffer> data, ffi::Result<ffi::AnyBuffer> scale,
                             ffi::Result<ffi::AnyBuffer> amax_out, ffi::Result<ffi::AnyBuffer> tensor_scale_out,
                             const QuantizeCall& call) {
  const char* op = kQuantOp;
  const QuantizeDesc& d = call.desc;
  const ScalingKind k = d.kind;
  const ElemFormat f = d.fmt;
  const int64_t B = call.b, R = call.r, C = call.c;
  if (!scaled_quantize_supported(k, f))
    return invalid(std::string(op) + ": " + scaling_kind_name(k) + " does not take format " + format_name(f));
  if (k == ScalingKind::kTile && !((d.tile_rows == 1 || d.tile_rows == 128) && d.block == 128))
    return unimplemented(op, "tile " + std::to_string(d.tile_rows) + "x" + std::to_string(d.block) +
                                 " is not implemented (1x128 and 128x128 only)");

  const int32_t in_type = x.element_type() == ffi::DataType::F32 ? 0 : (x.element_type() == ffi::DataType::BF16 ? 1 : 2);
  float* amax_p = static_cast<float*>(amax_out->untyped_data());
  float* ts_p = static_cast<float*>(tensor_scale_out->untyped_data());
  {
    void* params[] = {&amax_p, &ts_p};
    hipError_t e = hipLaunchKernel(reinterpret_cast<const void*>(&mxprec_gfx950_quantize_init), dim3(1), dim3(kWaveSize),
                                   params, 0, stream);
    if (e != hipSuccess) return hip_error(op, "mxprec_gfx950_quantize_init", e);
  }
  const int64_t rows = B * R, n = rows * C;
  ScaledQuantizeArgs args{};
  args.x = x.untyped_data();
  args.data = static_cast<uint8_t*>(data->untyped_data());
  args.scale = scale->untyped_data();
  args.amax = amax_p;
  args.tensor_scale = ts_p;
  args.amax_src = d.amax_mode == AmaxMode::kTensor ? static_cast<const float*>(amax_in.untyped_data()) : amax_p;
  args.scale_src = d.delayed ? static_cast<const float*>(scale_in.untyped_data()) : nullptr;
  args.group_amax = d.amax_mode == AmaxMode::kPerGroup ? static_cast<const float*>(amax_in.untyped_data()) : nullptr;
  args.rows = rows;
  args.l = C;
  args.tr = k == ScalingKind::kTile ? d.tile_rows : 1;
  args.tc = k == ScalingKind::kTile ? d.block : C;
  args.power_of_two = d.power_of_two ? 1 : 0;
  const int64_t stride_groups =
      std::min<int64_t>(kElementwiseMaxGroups, std::max<int64_t>(1, (n + kScaledGroupSize - 1) / kScaledGroupSize));
  args.stride = stride_groups * kScaledGroupSize;

  auto run = [&](const std::string& name, int64_t groups) -> ffi::Error {
    const void* kernel = find_kernel(quantize_kernels(), name);
    if (kernel == nullptr) return ffi::Error::Internal(std::string(op) + ": kernel " + name + " is not in libmxprec_hip.so");
    if (groups * kScaledGroupSize > kMaxGridThreads)
      return unimplemented(op, "grid of " + std::to_string(groups) + " workgroups exceeds the 2**32-thread grid limit");
    if (hipError_t e = launch(kernel, groups, kScaledGroupSize, args, stream); e != hipSuccess)
      return hip_error(op, name.c_str(), e);
    return ffi::Error::Success();
  };
  const std::string name = scaled_quantize_kernel_name(k, f, in_type);
  if (k == ScalingKind::kTensor || k == ScalingKind::kNVFP4) {
    // amax pass (the amax result; also the scale's amax unless amax_mode 1), then the cast pass,
    // which also writes the scale (tensor) / tensor_scale (nvfp4) even for an empty x.
    if (n > 0)
      if (auto e = run(amax_kernel_name(in_type), stride_groups); e.failure()) return e;
    const int64_t groups = k == ScalingKind::kTensor
                               ? stride_groups
                               : std::max<int64_t>(1, (n / kNvfp4Block + kScaledGroupSize - 1) / kScaledGroupSize);
    return run(name, groups);
  }
  // row / tile: one workgroup per group (row: also for C == 0, whose scales are 1)
  const int64_t ngroups = k == ScalingKind::kRow ? rows : (rows / args.tr) * (C / args.tc);
  if (ngroups == 0) return ffi::Error::Success();
  return run(name, ngroups);
}

ffi::Error QuantizeHipImpl(hipStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale_in, ffi::AnyBuffer amax_in,
                           ffi::Result<ffi::AnyBuffer> data, ffi::Result<ffi::AnyBuffer> scale,
                           ffi::Result<ffi::AnyBuffer> amax_out, ffi::Result<ffi::AnyBuffer> tensor_scale_out,
                           int32_t kind, int32_t fmt, int32_t block, int32_t tile_rows, int32_t scale_rule,
                           int32_t power_of_two, int32_t axis, int32_t delayed, int32_t amax_mode) {
  const char* op = kQuantOp;
  // The contract's checks of attributes and buffers, as every backend does (csrc/common/quantize_ffi.h),
  // then what the gfx950 kernels do not implement.
  QuantizeCall call{};
  if (auto e = validate_quantize(op, x, scale_in, amax_in, *data, *scale, *amax_out, *tensor_scale_out, kind, fmt,
                                 block, tile_rows, scale_rule, power_of_two, axis, delayed, amax_mode, &call);
      e.failure())
    return e;
  const QuantizeDesc& d = call.desc;
  if (d.axis != 2)
    return unimplemented(op, "axis=1 (strided) quantization is not implemented: quantize along the contiguous axis 2");
  if (d.kind != ScalingKind::kMX)
    return QuantizeScaledHip(stream, x, scale_in, amax_in, data, scale, amax_out, tensor_scale_out, call);
  if (d.block != kMxBlock)
    return unimplemented(op, "MX block " + std::to_string(d.block) + " is not implemented (32 only)");
  const ElemFormat f = d.fmt;
  const int64_t B = call.b, R = call.r, C = call.c;

  const int32_t in_type = x.element_type() == ffi::DataType::F32 ? 0 : (x.element_type() == ffi::DataType::BF16 ? 1 : 2);
  const int64_t rows = B * R;
  const int64_t blocks = rows * (C / kMxBlock);
  const int64_t groups = (blocks + kQuantizeGroupSize - 1) / kQuantizeGroupSize;
  if (groups * kQuantizeGroupSize > kMaxGridThreads)
    return unimplemented(op, "grid of " + std::to_string(groups) + " workgroups exceeds the 2**32-thread grid limit");

  // amax = +0, tensor_scale = 1 (the quantize kernels atomically max into amax).
  {
    float* amax_p = static_cast<float*>(amax_out->untyped_data());
    float* ts_p = static_cast<float*>(tensor_scale_out->untyped_data());
    void* params[] = {&amax_p, &ts_p};
    hipError_t e = hipLaunchKernel(reinterpret_cast<const void*>(&mxprec_gfx950_quantize_init), dim3(1), dim3(kWaveSize),
                                   params, 0, stream);
    if (e != hipSuccess) return hip_error(op, "mxprec_gfx950_quantize_init", e);
  }
  if (blocks == 0) return ffi::Error::Success();

  const std::string name = quantize_kernel_name(f, d.scale_rule, in_type);
  const void* kernel = find_kernel(quantize_kernels(), name);
  if (kernel == nullptr) return ffi::Error::Internal(std::string(op) + ": kernel " + name + " is not in libmxprec_hip.so");
  QuantizeArgs args{};
  args.x = x.untyped_data();
  args.data = static_cast<uint8_t*>(data->untyped_data());
  args.scale = static_cast<uint8_t*>(scale->untyped_data());
  args.amax = static_cast<float*>(amax_out->untyped_data());
  args.rows = rows;
  args.l = C;
  if (hipError_t e = launch(kernel, groups, kQuantizeGroupSize, args, stream); e != hipSuccess)
    return hip_error(op, name.c_str(), e);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace hip
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecScaledGemmHip);
MXPREC_DECLARE_HANDLER_SYMBOL(MxprecQuantizeHip);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecScaledGemmHip, mxprec::hip::ScaledGemmHipImpl,
                              MXPREC_SCALED_GEMM_BIND(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<hipStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecQuantizeHip, mxprec::hip::QuantizeHipImpl,
                              MXPREC_QUANTIZE_BIND(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<hipStream_t>>()));
