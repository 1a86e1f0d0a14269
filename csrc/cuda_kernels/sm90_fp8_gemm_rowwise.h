// Light interface of the sm_90a row-wise-scaled FP8 GEMM (CUTLASS 3.x). No CUTLASS headers here:
// the FFI handler TU (sm90_fp8_gemm_tensorwise.cu) includes only this; the CUTLASS instantiations
// live in sm90_fp8_gemm_rowwise_{bf16,f32}.cu (one TU per output dtype).
//
//   D[l, m, n] = (sum_k A[l, m, k] * B[l, n, k]) * sa[l, m] * sb[l, n]  (+ bias[n])
//
// All in FP32 (acc * sa[m], then one fused multiply-add with sb[n] and bias[n]), one rounding
// to the output dtype. A: (L, M, K) K-major, B: (L, N, K) K-major ("TN"), D: (L, M, N) row-major.
// FP8 partial sums are promoted into FP32 every 128 of K (KernelTmaWarpSpecializedCooperative,
// not FP8FastAccum), as in the per-tensor kernel.
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sm90_fp8_gemm_tensorwise.h"  // Fp8Pair, GemmOut

namespace mxprec {
namespace cuda {

struct RowwiseGemmArgs {
  const void* a;         // (L, M, K) FP8, K contiguous
  const void* b;         // (L, N, K) FP8, K contiguous
  void* d;               // (L, M, N) bf16 | f32, N contiguous
  const float* scale_a;  // (L, M) f32: one dequantization multiplier per row of A (the contract's (B, M, 1))
  const float* scale_b;  // (L, N) f32: one per row of B, i.e. per output column (the contract's (B, N, 1))
  const float* bias;     // N floats, or nullptr (no bias)
  int m, n, k, l;
  int sm_count;          // multiprocessors of the stream's device
};

// Alignment the kernels need is that of the per-tensor kernel (sm90_tensorwise_aligned): TMA rows
// of 16 bytes (K % 16), output rows of 16 bytes (N % 8 bf16 / N % 4 f32). M is free.

template <int kPair, int kOut>
size_t sm90_rowwise_workspace(const RowwiseGemmArgs& args);

// Launches the GEMM on `stream`. Returns nullptr on success, else a static error string.
template <int kPair, int kOut>
const char* sm90_rowwise_run(const RowwiseGemmArgs& args, void* workspace, cudaStream_t stream);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_H_
