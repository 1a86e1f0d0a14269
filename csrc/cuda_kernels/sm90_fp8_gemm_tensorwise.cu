// XLA FFI handler `mxprec_scaled_gemm` for platform "CUDA" (exported C symbol MxprecScaledGemmCuda).
//
// Implements the subset of the contract in csrc/common/scaled_gemm.h that maps onto the sm_90a
// CUTLASS FP8 GEMM (sm90_fp8_gemm_tensorwise.h):
//   * both operands kind 1 (tensor / delayed: one f32 () dequantization multiplier each);
//   * formats e4m3 x e4m3, e5m2 x e4m3, e4m3 x e5m2 (the HYBRID pairs);
//   * lhs_contract == 2 and rhs_contract == 2 ("TN": lhs (B, M, K), rhs (B, N, K), K contiguous).
//     The Python wrapper (mxprec.kernels.cuda.scaled_gemm) transposes an operand whose
//     contraction axis is not last before the call;
//   * output bf16 or f32; optional f32 (N,) bias (added to alpha * acc in FP32 before the cast);
//   * K % 16 == 0, N % 8 (bf16) / N % 4 (f32), every extent < 2**31.
// Anything else returns ffi::Error Unimplemented (attribute combinations the contract allows) or
// InvalidArgument (buffers that disagree with the contract). alpha = scale_lhs * scale_rhs is
// computed on the device by a one-thread kernel into XLA scratch memory (no host round trip), and
// the CUTLASS epilogue reads it from there.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "ffi_helpers.h"
#include "scaled_gemm.h"
#include "sm90_fp8_gemm_tensorwise.h"
#include "xla/ffi/api/ffi.h"

namespace mxprec {
namespace cuda {

namespace {
__global__ void scale_product_kernel(const float* sa, const float* sb, float* out) { out[0] = sa[0] * sb[0]; }
}  // namespace

cudaError_t launch_scale_product(const float* sa, const float* sb, float* alpha_out, cudaStream_t stream) {
  scale_product_kernel<<<1, 1, 0, stream>>>(sa, sb, alpha_out);
  return cudaGetLastError();
}

bool sm90_tensorwise_aligned(GemmOut out, int64_t m, int64_t n, int64_t k) {
  (void)m;
  return k > 0 && k % 16 == 0 && n % (out == GemmOut::kBF16 ? 8 : 4) == 0;
}

namespace {

namespace ffi = ::xla::ffi;

constexpr int kMaxDevices = 64;
std::atomic<int> g_sm_count[kMaxDevices];

int sm_count_for_stream(cudaStream_t stream, std::string* err) {
  int dev = 0;
  cudaError_t e = cudaStreamGetDevice(stream, &dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) {
      *err = std::string("cudaGetDevice: ") + cudaGetErrorString(e);
      return 0;
    }
  }
  if (dev >= 0 && dev < kMaxDevices) {
    int c = g_sm_count[dev].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  int c = 0;
  e = cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) {
    *err = std::string("cudaDeviceGetAttribute(multiProcessorCount): ") + cudaGetErrorString(e);
    return 0;
  }
  if (dev >= 0 && dev < kMaxDevices) g_sm_count[dev].store(c, std::memory_order_relaxed);
  return c;
}

ffi::Error unimplemented(const std::string& msg) {
  return ffi::Error(ffi::ErrorCode::kUnimplemented, "mxprec_scaled_gemm (CUDA): " + msg);
}

template <int P>
const char* dispatch_out(GemmOut out, const TensorwiseGemmArgs& a, void* ws, cudaStream_t s) {
  return out == GemmOut::kBF16 ? sm90_tensorwise_run<P, 0>(a, ws, s) : sm90_tensorwise_run<P, 1>(a, ws, s);
}
template <int P>
size_t workspace_out(GemmOut out, const TensorwiseGemmArgs& a) {
  return out == GemmOut::kBF16 ? sm90_tensorwise_workspace<P, 0>(a) : sm90_tensorwise_workspace<P, 1>(a);
}

ffi::Error ScaledGemmCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer ld,
                              ffi::AnyBuffer ls, ffi::AnyBuffer lt, ffi::AnyBuffer rd, ffi::AnyBuffer rs,
                              ffi::AnyBuffer rt, ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> out,
                              int32_t lhs_kind, int32_t lhs_fmt, int32_t lhs_block, int32_t lhs_tile_rows,
                              int32_t lhs_contract, int32_t rhs_kind, int32_t rhs_fmt, int32_t rhs_block,
                              int32_t rhs_tile_rows, int32_t rhs_contract, int32_t has_bias) {
  (void)lt;
  (void)rt;
  const char* op = "mxprec_scaled_gemm (CUDA)";
  {
    std::string e = check_operand_attrs("lhs", lhs_kind, lhs_fmt, lhs_block, lhs_tile_rows, lhs_contract);
    if (e.empty()) e = check_operand_attrs("rhs", rhs_kind, rhs_fmt, rhs_block, rhs_tile_rows, rhs_contract);
    if (!e.empty()) return invalid(std::string(op) + ": " + e);
    if (has_bias != 0 && has_bias != 1) return invalid(std::string(op) + ": has_bias must be 0 or 1");
  }
  const auto lk = static_cast<ScalingKind>(lhs_kind), rk = static_cast<ScalingKind>(rhs_kind);
  if (lk != ScalingKind::kTensor || rk != ScalingKind::kTensor) {
    return unimplemented(std::string("only per-tensor (kind 1: tensor / delayed) FP8 operands are implemented, got lhs ") +
                         scaling_kind_name(lk) + ", rhs " + scaling_kind_name(rk) +
                         " (use backend='xla' or the CPU backend)");
  }
  const auto lf = static_cast<ElemFormat>(lhs_fmt), rf = static_cast<ElemFormat>(rhs_fmt);
  int pair = -1;
  if (lf == ElemFormat::kE4M3 && rf == ElemFormat::kE4M3) pair = 0;
  if (lf == ElemFormat::kE5M2 && rf == ElemFormat::kE4M3) pair = 1;
  if (lf == ElemFormat::kE4M3 && rf == ElemFormat::kE5M2) pair = 2;
  if (pair < 0) {
    return unimplemented(std::string("FP8 pair ") + format_name(lf) + " x " + format_name(rf) +
                         " is not built (e4m3xe4m3, e5m2xe4m3, e4m3xe5m2)");
  }
  if (lhs_contract != 2 || rhs_contract != 2) {
    std::ostringstream os;
    os << "only lhs_contract=2 and rhs_contract=2 (lhs (B, M, K), rhs (B, N, K)) are implemented, got "
       << lhs_contract << " / " << rhs_contract << "; transpose first (mxprec.kernels.cuda.scaled_gemm does)";
    return unimplemented(os.str());
  }
  auto ldims = ld.dimensions(), rdims = rd.dimensions();
  if (ldims.size() != 3 || rdims.size() != 3) {
    return invalid(std::string(op) + ": lhs data " + dims_str(ldims) + " and rhs data " + dims_str(rdims) +
                   " must be 3-D");
  }
  const int64_t B = ldims[0], M = ldims[1], K = ldims[2], N = rdims[1];
  const OperandDesc lo{lk, lf, 1, 1, 2}, ro{rk, rf, 1, 1, 2};
  if (auto e = check_buffer(op, "lhs data", ld, operand_data_dims(lo, B, M, K), data_dtype(lf)); e.failure()) return e;
  if (auto e = check_buffer(op, "rhs data", rd, operand_data_dims(ro, B, N, K), data_dtype(rf)); e.failure()) return e;
  if (auto e = check_buffer(op, "lhs scale", ls, Dims3{0, {0, 0, 0}}, ffi::DataType::F32); e.failure()) return e;
  if (auto e = check_buffer(op, "rhs scale", rs, Dims3{0, {0, 0, 0}}, ffi::DataType::F32); e.failure()) return e;
  if (has_bias) {
    if (auto e = check_buffer(op, "bias", bias, Dims3{1, {N, 0, 0}}, ffi::DataType::F32); e.failure()) return e;
  }
  const ffi::DataType ot = out->element_type();
  if (!dims_equal(out->dimensions(), Dims3{3, {B, M, N}}) || !is_wide_float(ot)) {
    std::ostringstream os;
    os << op << ": result has shape " << dims_str(out->dimensions()) << " dtype " << dtype_name(ot)
       << ", expected (" << B << ", " << M << ", " << N << ") float32|bfloat16|float16";
    return invalid(os.str());
  }
  if (ot == ffi::DataType::F16) return unimplemented("float16 output is not built (bfloat16, float32)");
  const GemmOut gout = ot == ffi::DataType::BF16 ? GemmOut::kBF16 : GemmOut::kF32;
  if (B == 0 || M == 0 || N == 0) return ffi::Error::Success();
  if (!sm90_tensorwise_aligned(gout, M, N, K)) {
    std::ostringstream os;
    os << "shape (B, M, N, K) = (" << B << ", " << M << ", " << N << ", " << K
       << ") not supported: needs K > 0, K % 16 == 0 and N % " << (gout == GemmOut::kBF16 ? 8 : 4) << " == 0";
    return unimplemented(os.str());
  }
  constexpr int64_t kI32 = 2147483647;
  if (B > kI32 || M > kI32 || N > kI32 || K > kI32) return unimplemented("extents must be < 2**31");

  std::string err;
  const int sms = sm_count_for_stream(stream, &err);
  if (sms <= 0) return ffi::Error::Internal(std::string(op) + ": " + err);

  TensorwiseGemmArgs a{};
  a.a = ld.untyped_data();
  a.b = rd.untyped_data();
  a.d = out->untyped_data();
  a.bias = has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr;
  a.m = static_cast<int>(M);
  a.n = static_cast<int>(N);
  a.k = static_cast<int>(K);
  a.l = static_cast<int>(B);
  a.sm_count = sms;
  a.alpha = nullptr;

  size_t ws = 0;
  switch (pair) {
    case 0: ws = workspace_out<0>(gout, a); break;
    case 1: ws = workspace_out<1>(gout, a); break;
    default: ws = workspace_out<2>(gout, a); break;
  }
  // XLA's FFI scratch allocator accepts alignments up to 16 bytes (kMaxAlignment in
  // xla/ffi/ffi_api.cc; it rejects more with "Unsupported alignment"): over-allocate and align by
  // hand. Layout: alpha float, then the CUTLASS workspace, both 256-byte aligned. If the scratch
  // allocator is unavailable, fall back to stream-ordered cudaMallocAsync / cudaFreeAsync.
  constexpr size_t kAlign = 256, kAlphaBytes = 256;
  const size_t bytes = kAlign + kAlphaBytes + ws;
  void* raw = nullptr;
  void* async_raw = nullptr;
  if (auto mem = scratch.Allocate(bytes, 16); mem.has_value()) {
    raw = *mem;
  } else {
    cudaError_t me = cudaMallocAsync(&async_raw, bytes, stream);
    if (me != cudaSuccess) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        std::string(op) + ": could not allocate " + std::to_string(bytes) +
                            " bytes of scratch (XLA scratch allocator and cudaMallocAsync: " +
                            cudaGetErrorString(me) + ")");
    }
    raw = async_raw;
  }
  const uintptr_t base = (reinterpret_cast<uintptr_t>(raw) + kAlign - 1) & ~static_cast<uintptr_t>(kAlign - 1);
  float* alpha = reinterpret_cast<float*>(base);
  void* workspace = ws ? reinterpret_cast<void*>(base + kAlphaBytes) : nullptr;
  struct AsyncFree {
    void* p;
    cudaStream_t s;
    ~AsyncFree() {
      if (p) (void)cudaFreeAsync(p, s);
    }
  } async_free{async_raw, stream};
  a.alpha = alpha;

  cudaError_t ce = launch_scale_product(static_cast<const float*>(ls.untyped_data()),
                                        static_cast<const float*>(rs.untyped_data()), alpha, stream);
  if (ce != cudaSuccess) return ffi::Error::Internal(std::string(op) + ": scale kernel: " + cudaGetErrorString(ce));

  const char* msg = nullptr;
  switch (pair) {
    case 0: msg = dispatch_out<0>(gout, a, workspace, stream); break;
    case 1: msg = dispatch_out<1>(gout, a, workspace, stream); break;
    default: msg = dispatch_out<2>(gout, a, workspace, stream); break;
  }
  if (msg != nullptr) return ffi::Error::Internal(std::string(op) + ": " + msg);
  ce = cudaGetLastError();
  if (ce != cudaSuccess) return ffi::Error::Internal(std::string(op) + ": " + cudaGetErrorString(ce));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace cuda
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecScaledGemmCuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecScaledGemmCuda, mxprec::cuda::ScaledGemmCudaImpl,
                              MXPREC_SCALED_GEMM_BIND(xla::ffi::Ffi::Bind()
                                                          .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                                          .Ctx<xla::ffi::ScratchAllocator>()));
