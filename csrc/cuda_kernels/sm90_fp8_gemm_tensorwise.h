// Light interface of the sm_90a per-tensor-scaled FP8 GEMM (CUTLASS 3.x). No CUTLASS headers here:
// the FFI handler TU includes only this; the CUTLASS instantiations live in
// sm90_fp8_gemm_tensorwise_{bf16,f32}.cu (two TUs so that a 2-core machine compiles them in parallel).
//
//   D[l, m, n] = alpha * sum_k A[l, m, k] * B[l, n, k]  (+ bias[n]),   alpha = *alpha_ptr (device)
//
// A: (L, M, K) K-major (row-major), B: (L, N, K) K-major ("TN"), D: (L, M, N) row-major.
// FP8 partial sums are promoted into FP32 accumulators every 4 wgmma k-blocks (4 x 32 = 128 of K):
// KernelTmaWarpSpecializedCooperative, not the FP8FastAccum schedule.
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mxprec {
namespace cuda {

// Operand FP8 pair (A format, B format). e5m2 x e5m2 is not a HYBRID pair and is not built.
enum class Fp8Pair : int { kE4M3xE4M3 = 0, kE5M2xE4M3 = 1, kE4M3xE5M2 = 2 };
enum class GemmOut : int { kBF16 = 0, kF32 = 1 };

struct TensorwiseGemmArgs {
  const void* a;        // (L, M, K) FP8, K contiguous
  const void* b;        // (L, N, K) FP8, K contiguous
  void* d;              // (L, M, N) bf16 | f32, N contiguous
  float* alpha;         // device pointer to one float, alpha = scale_a * scale_b (formed by Tensorwise::run for the
                        // CUTLASS kernel, which reads it)
  const float* scale_a; // device pointers to the two scales: the persistent kernel's (alpha formed in the kernel)
  const float* scale_b;
  const float* bias;    // device pointer to N floats, or nullptr (no bias)
  int m, n, k, l;
  int sm_count;         // multiprocessors of the stream's device
};

// Alignment the kernels need (TMA: 16-byte rows): K % 16 == 0; N % 8 (bf16 out) / N % 4 (f32 out).
bool sm90_tensorwise_aligned(GemmOut out, int64_t m, int64_t n, int64_t k);

// Bytes of device workspace the kernel needs (may be 0).
template <int kPair, int kOut>
size_t sm90_tensorwise_workspace(const TensorwiseGemmArgs& args);

// Launches the GEMM on `stream`. Returns nullptr on success, else a static error string.
template <int kPair, int kOut>
const char* sm90_tensorwise_run(const TensorwiseGemmArgs& args, void* workspace, cudaStream_t stream);

// alpha_out[0] = sa[0] * sb[0] on `stream` (one thread).
cudaError_t launch_scale_product(const float* sa, const float* sb, float* alpha_out, cudaStream_t stream);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_H_
