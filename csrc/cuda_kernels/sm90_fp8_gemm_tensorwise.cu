// XLA FFI handler `mxprec_scaled_gemm` for platform "CUDA" (exported C symbol MxprecScaledGemmCuda).
//
// Implements the subset of the contract in csrc/common/scaled_gemm.h that maps onto the sm_90a
// CUTLASS FP8 GEMMs. Three operand-scaling families, each its own kernel:
//   * tensor x tensor (kind 1: tensor / delayed, one f32 () multiplier each) -> per-tensor GEMM
//     (sm90_fp8_gemm_tensorwise.h); alpha = scale_lhs * scale_rhs is computed on the device by a
//     one-thread kernel into XLA scratch memory and read by the epilogue (no host round trip);
//   * row x row (kind 2, scales (B, M, 1) / (B, N, 1)) -> row-wise GEMM (sm90_fp8_gemm_rowwise.h),
//     scales applied in the epilogue;
//   * tile x tile with lhs 1x128 tiles (tile_rows 1, block 128; scales (B, M, K/128)) and rhs
//     128x128 tiles (tile_rows 128; scales (B, N/128, K/128): Fprop / Dgrad) or 1x128 tiles
//     (tile_rows 1; scales (B, N, K/128): Wgrad) -> block-scaled GEMM (sm90_fp8_gemm_blockwise.h),
//     scales applied per 128 of K in the mainloop; the scale buffers are transposed on the stream
//     into the kernel's layout (XLA scratch memory).
// Common to all three:
//   * formats e4m3 x e4m3, e5m2 x e4m3, e4m3 x e5m2 (the HYBRID pairs);
//   * lhs_contract == 2 and rhs_contract == 2 ("TN": lhs (B, M, K), rhs (B, N, K), K contiguous).
//     The Python wrapper (mxprec.kernels.cuda.scaled_gemm) transposes an operand whose
//     contraction axis is not last (and its scales) before the call;
//   * output bf16 or f32; optional f32 (N,) bias (added in FP32 before the cast);
//   * K % 16 == 0, N % 8 (bf16) / N % 4 (f32) (tile: K % 128 == 0, N % 128 == 0), extents < 2**31.
// Anything else returns ffi::Error Unimplemented (attribute combinations the contract allows) or
// InvalidArgument (buffers that disagree with the contract).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "ffi_helpers.h"
#include "scaled_gemm.h"
#include "sm90_fp8_gemm_blockwise.h"
#include "sm90_fp8_gemm_persistent.h"
#include "sm90_fp8_gemm_rowwise.h"
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

bool sm90_blockwise_aligned(int64_t m, int64_t n, int64_t k) {
  (void)m;
  return k > 0 && k % kBlockwiseK == 0 && n > 0 && n % kBlockwiseRowsB == 0;  // whole 128-row N tiles either way
}

namespace {

// One scale matrix to transpose: out[l][c][r] = r < rows ? in[l][r][c] : 0, for r < pitch, c < cols.
struct ScaleTranspose {
  const float* in;  // (L, rows, cols), cols contiguous
  float* out;       // (L, cols, pitch), pitch contiguous
  int64_t rows, cols, pitch;
};

// A block transposes kTRows source rows x up to kTCols columns at a time (scales: K / 128 <= 128 columns for
// K <= 16384, more in several passes). Rows r0 .. r0 + kTRows of the source are one contiguous run of memory and
// each output column's kTRows values are too, so both sides are coalesced; the shared tile's odd row length keeps
// both sides free of bank conflicts. (The 32 x 32 tile version before it ran at ~13 us per call in the Llama step,
// ~5x the bytes' time: 111 calls per step, twenty-eighth session.)
constexpr int kTRows = 64, kTCols = 128, kTThreads = 256;

// blockIdx.x < a_blocks: operand a's row block blockIdx.x, else b's; blockIdx.y (strided) the batch entry.
__global__ void __launch_bounds__(kTThreads) transpose_scales_kernel(ScaleTranspose a, ScaleTranspose b, int64_t batch,
                                                                     int64_t a_blocks) {
  __shared__ float tile[kTCols][kTRows + 1];
  const bool is_b = blockIdx.x >= a_blocks;
  // Field by field (a reference to either parameter struct would put both on the stack).
  const float* const in0 = is_b ? b.in : a.in;
  float* const out0 = is_b ? b.out : a.out;
  const int64_t rows = is_b ? b.rows : a.rows, cols = is_b ? b.cols : a.cols, pitch = is_b ? b.pitch : a.pitch;
  const int64_t r0 = (is_b ? blockIdx.x - a_blocks : blockIdx.x) * static_cast<int64_t>(kTRows);
  for (int64_t l = blockIdx.y; l < batch; l += gridDim.y) {
    const float* in = in0 + l * rows * cols;
    float* out = out0 + l * cols * pitch;
    for (int64_t c0 = 0; c0 < cols; c0 += kTCols) {
      const int cw = static_cast<int>(cols - c0 < kTCols ? cols - c0 : kTCols);
      for (int i = threadIdx.x; i < kTRows * cw; i += kTThreads) {
        const int rr = i / cw, cc = i - rr * cw;
        const int64_t r = r0 + rr;
        tile[cc][rr] = r < rows ? in[r * cols + c0 + cc] : 0.0f;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < kTRows * cw; i += kTThreads) {
        const int cc = i / kTRows, rr = i % kTRows;
        const int64_t r = r0 + rr;
        if (r < pitch) out[(c0 + cc) * pitch + r] = tile[cc][rr];
      }
      __syncthreads();
    }
  }
}

}  // namespace

cudaError_t launch_blockwise_scale_layout(const float* sa, const float* sb, float* sfa, float* sfb, int64_t l,
                                          int64_t m, int64_t m_pitch, int64_t nb, int64_t kb, cudaStream_t stream) {
  const ScaleTranspose ta{sa, sfa, m, kb, m_pitch}, tb{sb, sfb, nb, kb, nb};
  const int64_t a_blocks = (m_pitch + kTRows - 1) / kTRows, b_blocks = (nb + kTRows - 1) / kTRows;
  if (a_blocks + b_blocks > 2147483647) return cudaErrorInvalidConfiguration;
  transpose_scales_kernel<<<dim3(static_cast<unsigned>(a_blocks + b_blocks), static_cast<unsigned>(std::min<int64_t>(l, 65535))),
                            kTThreads, 0, stream>>>(ta, tb, l, a_blocks);
  return cudaGetLastError();
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

// Which kernel of a family runs, read from MXPREC_SM90_{TENSORWISE,ROWWISE,BLOCKWISE}_KERNEL at every call (under
// XLA's command buffers: when the call is captured): "persistent" (ours, sm90_fp8_gemm_persistent.h), "cutlass"
// (the family's CUTLASS kernel) or "auto" (unset: per shape, the one that measured faster, *_auto_choice).
// Anything else is an error, not a fallback.
enum class GemmKernel { kCutlass, kPersistent, kAuto, kUnknown };
GemmKernel kernel_choice(const char* var) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return GemmKernel::kAuto;
  if (std::strcmp(v, "persistent") == 0) return GemmKernel::kPersistent;
  if (std::strcmp(v, "cutlass") == 0) return GemmKernel::kCutlass;
  return GemmKernel::kUnknown;
}
// "auto" for the per-tensor and row-wise families: the persistent kernel wherever it runs (N, K multiples of 128),
// CUTLASS's otherwise. Twenty-second session (benchmarks/results/h200_persistent_tensorwise.md): ours 0-8 %
// (per-tensor) / 2-11 % (row-wise) ahead, except row-wise with K >= 14336, where CUTLASS's row-wise kernel (128x192
// tile, overlapped promotion) was 2.5 % ahead, so it kept those shapes until the thirty-ninth session: with the
// split last wave (and the store warps) the persistent kernel led it there in each of five interleaved
// measurements (h200_gemm_split_tail.md: +2.7 % at 8192x28672x8192, unsplit; h200_gemm_block_split.md: +0.7 / +1.9 %
// at 16384x14336x4096, +4.2 / +4.6 % at 8192x28672x8192).
GemmKernel epilogue_scaled_auto_choice(int64_t m, int64_t n, int64_t k) {
  return sm90_blockwise_aligned(m, n, k) ? GemmKernel::kPersistent : GemmKernel::kCutlass;
}

// Runs the chosen kernel of a family: CUTLASS's (with its workspace) or the persistent one (with device scratch
// on demand); `error` otherwise.
template <class Args>
const char* run_choice(GemmKernel choice, const char* error, const Args& a, void* ws, DeviceScratch& scratch,
                       cudaStream_t s, const char* (*cutlass)(const Args&, void*, cudaStream_t),
                       const char* (*persistent)(const Args&, DeviceScratch&, cudaStream_t)) {
  switch (choice) {
    case GemmKernel::kCutlass: return cutlass(a, ws, s);
    case GemmKernel::kPersistent: return persistent(a, scratch, s);
    default: return error;
  }
}
// The per-tensor / row-wise kernel the family's variable names, "auto" resolved per shape.
GemmKernel epilogue_scaled_choice(const char* var, int64_t m, int64_t n, int64_t k) {
  const GemmKernel choice = kernel_choice(var);
  return choice == GemmKernel::kAuto ? epilogue_scaled_auto_choice(m, n, k) : choice;
}

// The three kernel families behind one dispatch: Args type, workspace query and launch.
struct Tensorwise {
  using Args = TensorwiseGemmArgs;
  template <int P, int O>
  static size_t workspace(const Args& a) { return sm90_tensorwise_workspace<P, O>(a); }
  // CUTLASS's epilogue reads alpha = scale_a * scale_b, formed first by scale_product_kernel; the persistent kernel
  // forms it itself.
  template <int P, int O>
  static const char* run(const Args& a, void* ws, DeviceScratch& scratch, cudaStream_t s) {
    const GemmKernel choice = epilogue_scaled_choice("MXPREC_SM90_TENSORWISE_KERNEL", a.m, a.n, a.k);
    if (choice == GemmKernel::kCutlass &&
        launch_scale_product(a.scale_a, a.scale_b, a.alpha, s) != cudaSuccess) {
      return "scale_product_kernel launch failed";
    }
    return run_choice<Args>(choice, "MXPREC_SM90_TENSORWISE_KERNEL must be 'auto', 'cutlass' or 'persistent'", a, ws,
                            scratch, s, sm90_tensorwise_run<P, O>, sm90_tensorwise_persistent_run<P, O>);
  }
};
struct Rowwise {
  using Args = RowwiseGemmArgs;
  template <int P, int O>
  static size_t workspace(const Args& a) { return sm90_rowwise_workspace<P, O>(a); }
  template <int P, int O>
  static const char* run(const Args& a, void* ws, DeviceScratch& scratch, cudaStream_t s) {
    return run_choice<Args>(epilogue_scaled_choice("MXPREC_SM90_ROWWISE_KERNEL", a.m, a.n, a.k),
                            "MXPREC_SM90_ROWWISE_KERNEL must be 'auto', 'cutlass' or 'persistent'", a, ws, scratch, s,
                            sm90_rowwise_run<P, O>, sm90_rowwise_persistent_run<P, O>);
  }
};
// "auto" (block-scaled): the persistent kernel for both B scale shapes. 128x128 B scales: since the fortieth session
// (2x1 clusters, store warps, B scale rings per k block parity; benchmarks/results/h200_gemm_block_rings.md) it leads
// CUTLASS's at eight of the nine benchmark shapes with a torch peer (+1 to +22 %) and is level (-0.7 %) at 4096^3;
// before, CUTLASS's ran where it had been faster: N <= 4096, N >= 16384, M < 8192 and (until that session's B scale
// rings) K > 8192 (h200_blockwise_persistent.md and the twenty-eighth / twenty-ninth sessions). 1x128 B scales
// (Wgrad): always the persistent kernel (+0-13 % on outputs of 2^25 elements or more, its 192-column tiles; within
// -3..+6 % below, ahead at the K = 16384 of Wgrad's token dimension). MXPREC_SM90_BLOCKWISE_KERNEL=cutlass still
// selects CUTLASS's.
template <int kRowsB>
struct Blockwise {
  using Args = BlockwiseGemmArgs;
  template <int P, int O>
  static size_t workspace(const Args& a) { return sm90_blockwise_workspace<P, O, kRowsB>(a); }
  template <int P, int O>
  static const char* run(const Args& a, void* ws, DeviceScratch& scratch, cudaStream_t s) {
    GemmKernel choice = kernel_choice("MXPREC_SM90_BLOCKWISE_KERNEL");
    if (choice == GemmKernel::kAuto) choice = GemmKernel::kPersistent;  // see "auto" (block-scaled) above
    return run_choice<Args>(choice, "MXPREC_SM90_BLOCKWISE_KERNEL must be 'auto', 'cutlass' or 'persistent'", a, ws,
                            scratch, s, sm90_blockwise_run<P, O, kRowsB>, sm90_blockwise_persistent_run<P, O, kRowsB>);
  }
};
using Blockwise2D = Blockwise<kBlockwiseRowsB>;    // B in 128x128 tiles
using Blockwise1D = Blockwise<kBlockwiseRowsB1D>;  // B in 1x128 tiles

template <class F, int P>
size_t workspace_out(GemmOut out, const typename F::Args& a) {
  return out == GemmOut::kBF16 ? F::template workspace<P, 0>(a) : F::template workspace<P, 1>(a);
}
template <class F>
size_t workspace_for(int pair, GemmOut out, const typename F::Args& a) {
  switch (pair) {
    case 0: return workspace_out<F, 0>(out, a);
    case 1: return workspace_out<F, 1>(out, a);
    default: return workspace_out<F, 2>(out, a);
  }
}
template <class F, int P>
const char* run_out(GemmOut out, const typename F::Args& a, void* ws, DeviceScratch& sc, cudaStream_t s) {
  return out == GemmOut::kBF16 ? F::template run<P, 0>(a, ws, sc, s) : F::template run<P, 1>(a, ws, sc, s);
}
template <class F>
const char* run_for(int pair, GemmOut out, const typename F::Args& a, void* ws, DeviceScratch& sc, cudaStream_t s) {
  switch (pair) {
    case 0: return run_out<F, 0>(out, a, ws, sc, s);
    case 1: return run_out<F, 1>(out, a, ws, sc, s);
    default: return run_out<F, 2>(out, a, ws, sc, s);
  }
}

constexpr size_t kAlign = 256;
size_t round_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
// The first kAlign-aligned address at or after p (allocations ask for kAlign bytes more than they use).
void* align_up(void* p) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(p) + kAlign - 1) & ~static_cast<uintptr_t>(kAlign - 1));
}

// DeviceScratch over the call's XLA scratch allocator (freed when the handler returns; stream-ordered for XLA), with
// the kAlign alignment done by hand (the allocator accepts at most 16).
class FfiDeviceScratch final : public DeviceScratch {
 public:
  explicit FfiDeviceScratch(ffi::ScratchAllocator& scratch) : scratch_(scratch) {}
  void* allocate(size_t bytes) override {
    auto mem = scratch_.Allocate(bytes + kAlign, 16);
    return mem.has_value() ? align_up(*mem) : nullptr;
  }

 private:
  ffi::ScratchAllocator& scratch_;
};

enum class Family { kTensor, kRow, kBlock };

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
  Family fam;
  if (lk == ScalingKind::kTensor && rk == ScalingKind::kTensor) {
    fam = Family::kTensor;
  } else if (lk == ScalingKind::kRow && rk == ScalingKind::kRow) {
    fam = Family::kRow;
  } else if (lk == ScalingKind::kTile && rk == ScalingKind::kTile) {
    if (lhs_tile_rows != 1 || lhs_block != kBlockwiseK ||
        (rhs_tile_rows != kBlockwiseRowsB && rhs_tile_rows != kBlockwiseRowsB1D) || rhs_block != kBlockwiseK) {
      std::ostringstream os;
      os << "unimplemented tile shapes lhs " << lhs_tile_rows << "x" << lhs_block << ", rhs " << rhs_tile_rows << "x"
         << rhs_block << ": the block-scaled kernels take lhs 1x128 and rhs 128x128 or 1x128 tiles";
      return unimplemented(os.str());
    }
    fam = Family::kBlock;
  } else {
    return unimplemented(std::string("unimplemented scaling kinds lhs ") + scaling_kind_name(lk) + ", rhs " +
                         scaling_kind_name(rk) +
                         ": the CUDA kernels take tensor x tensor (tensor / delayed), row x row and tile 1x128 x "
                         "tile 128x128 or 1x128 FP8 operands (use backend='xla' or the CPU backend)");
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
  const OperandDesc lo{lk, lf, fam == Family::kBlock ? lhs_block : 1, fam == Family::kBlock ? lhs_tile_rows : 1, 2};
  const OperandDesc ro{rk, rf, fam == Family::kBlock ? rhs_block : 1, fam == Family::kBlock ? rhs_tile_rows : 1, 2};
  if (auto e = check_buffer(op, "lhs data", ld, operand_data_dims(lo, B, M, K), data_dtype(lf)); e.failure()) return e;
  if (auto e = check_buffer(op, "rhs data", rd, operand_data_dims(ro, B, N, K), data_dtype(rf)); e.failure()) return e;
  if (fam == Family::kBlock && (K % kBlockwiseK != 0 || N % rhs_tile_rows != 0)) {
    std::ostringstream os;
    os << op << ": K=" << K << " and N=" << N << " must be multiples of the tile block " << kBlockwiseK
       << " and the rhs tile rows " << rhs_tile_rows;
    return invalid(os.str());
  }
  // Scales: tensor f32 (); row (B, M, 1) / (B, N, 1); tile (B, M, K/128) / (B, N/tile_rows, K/128).
  if (auto e = check_buffer(op, "lhs scale", ls, operand_scale_dims(lo, B, M, K), ffi::DataType::F32); e.failure())
    return e;
  if (auto e = check_buffer(op, "rhs scale", rs, operand_scale_dims(ro, B, N, K), ffi::DataType::F32); e.failure())
    return e;
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
  if (fam == Family::kBlock ? !sm90_blockwise_aligned(M, N, K) : !sm90_tensorwise_aligned(gout, M, N, K)) {
    std::ostringstream os;
    os << "shape (B, M, N, K) = (" << B << ", " << M << ", " << N << ", " << K << ") not supported: needs K > 0, ";
    if (fam == Family::kBlock) {
      os << "K % 128 == 0 and N % 128 == 0";
    } else {
      os << "K % 16 == 0 and N % " << (gout == GemmOut::kBF16 ? 8 : 4) << " == 0";
    }
    return unimplemented(os.str());
  }
  constexpr int64_t kI32 = 2147483647;
  if (B > kI32 || M > kI32 || N > kI32 || K > kI32) return unimplemented("extents must be < 2**31");
  const bool rows_b_1d = fam == Family::kBlock && rhs_tile_rows == kBlockwiseRowsB1D;
  const int64_t m_pitch = blockwise_sfa_pitch(M), kb = K / kBlockwiseK;
  const int64_t nb = N / (rows_b_1d ? kBlockwiseRowsB1D : kBlockwiseRowsB);
  if (fam == Family::kBlock && (m_pitch > kI32 || B * m_pitch * kb > kI32 || B * nb * kb > kI32)) {
    return unimplemented("block-scaled: B * M * K/128 and B * N/tile_rows * K/128 (the scale counts) must be < 2**31");
  }

  std::string err;
  const int sms = sm_count_for_stream(stream, &err);
  if (sms <= 0) return ffi::Error::Internal(std::string(op) + ": " + err);

  TensorwiseGemmArgs ta{};
  RowwiseGemmArgs ra{};
  BlockwiseGemmArgs ba{};
  size_t ws = 0, sfa_bytes = 0, sfb_bytes = 0;
  const float* lsp = static_cast<const float*>(ls.untyped_data());
  const float* rsp = static_cast<const float*>(rs.untyped_data());
  const float* biasp = has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr;
  switch (fam) {
    case Family::kTensor:
      ta.a = ld.untyped_data();
      ta.b = rd.untyped_data();
      ta.d = out->untyped_data();
      ta.alpha = nullptr;  // set below, once the scratch is allocated (CUTLASS's kernel reads it)
      ta.scale_a = lsp;
      ta.scale_b = rsp;
      ta.bias = biasp;
      ta.m = static_cast<int>(M);
      ta.n = static_cast<int>(N);
      ta.k = static_cast<int>(K);
      ta.l = static_cast<int>(B);
      ta.sm_count = sms;
      ws = workspace_for<Tensorwise>(pair, gout, ta);
      break;
    case Family::kRow:
      // (B, M, 1) / (B, N, 1) are the (L, M) / (L, N) vectors the epilogue broadcasts.
      ra = RowwiseGemmArgs{ld.untyped_data(), rd.untyped_data(), out->untyped_data(), lsp, rsp, biasp,
                           static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), static_cast<int>(B), sms};
      ws = workspace_for<Rowwise>(pair, gout, ra);
      break;
    case Family::kBlock:
      ba = BlockwiseGemmArgs{ld.untyped_data(), rd.untyped_data(), out->untyped_data(), nullptr, nullptr, biasp,
                             static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), static_cast<int>(B),
                             static_cast<int>(m_pitch), sms};
      ws = rows_b_1d ? workspace_for<Blockwise1D>(pair, gout, ba) : workspace_for<Blockwise2D>(pair, gout, ba);
      sfa_bytes = round_up(static_cast<size_t>(B * m_pitch * kb) * sizeof(float));
      sfb_bytes = round_up(static_cast<size_t>(B * nb * kb) * sizeof(float));
      break;
  }
  // XLA's FFI scratch allocator accepts alignments up to 16 bytes (kMaxAlignment in
  // xla/ffi/ffi_api.cc; it rejects more with "Unsupported alignment"): FfiDeviceScratch
  // over-allocates and aligns by hand. Layout, each piece 256-byte aligned: alpha float (256 bytes),
  // the transposed block scales (sfa, sfb; block-scaled only), then the CUTLASS workspace. If the
  // scratch allocator is unavailable, fall back to stream-ordered cudaMallocAsync / cudaFreeAsync.
  constexpr size_t kAlphaBytes = 256;
  const size_t bytes = kAlphaBytes + sfa_bytes + sfb_bytes + ws;
  FfiDeviceScratch device_scratch(scratch);
  void* aligned = device_scratch.allocate(bytes);
  void* async_raw = nullptr;
  if (aligned == nullptr) {
    cudaError_t me = cudaMallocAsync(&async_raw, kAlign + bytes, stream);
    if (me != cudaSuccess) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        std::string(op) + ": could not allocate " + std::to_string(kAlign + bytes) +
                            " bytes of scratch (XLA scratch allocator and cudaMallocAsync: " +
                            cudaGetErrorString(me) + ")");
    }
    aligned = align_up(async_raw);
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(aligned);
  float* alpha = reinterpret_cast<float*>(base);
  float* sfa = reinterpret_cast<float*>(base + kAlphaBytes);
  float* sfb = reinterpret_cast<float*>(base + kAlphaBytes + sfa_bytes);
  void* workspace = ws ? reinterpret_cast<void*>(base + kAlphaBytes + sfa_bytes + sfb_bytes) : nullptr;
  struct AsyncFree {
    void* p;
    cudaStream_t s;
    ~AsyncFree() {
      if (p) (void)cudaFreeAsync(p, s);
    }
  } async_free{async_raw, stream};

  cudaError_t ce = cudaSuccess;
  const char* msg = nullptr;
  switch (fam) {
    case Family::kTensor:
      ta.alpha = alpha;
      msg = run_for<Tensorwise>(pair, gout, ta, workspace, device_scratch, stream);
      break;
    case Family::kRow:
      msg = run_for<Rowwise>(pair, gout, ra, workspace, device_scratch, stream);
      break;
    case Family::kBlock:
      ba.sfa = sfa;
      ba.sfb = sfb;
      ce = launch_blockwise_scale_layout(lsp, rsp, sfa, sfb, B, M, m_pitch, nb, kb, stream);
      if (ce != cudaSuccess) {
        return ffi::Error::Internal(std::string(op) + ": scale layout kernel: " + cudaGetErrorString(ce));
      }
      msg = rows_b_1d ? run_for<Blockwise1D>(pair, gout, ba, workspace, device_scratch, stream)
                      : run_for<Blockwise2D>(pair, gout, ba, workspace, device_scratch, stream);
      break;
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
