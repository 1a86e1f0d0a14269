// Light interface of the sm_90a block-scaled FP8 GEMMs (CUTLASS 3.x, DeepSeek-V3 style tiles). No
// CUTLASS headers here: the FFI handler TU (sm90_fp8_gemm_tensorwise.cu) includes only this; the
// CUTLASS instantiations live in sm90_fp8_gemm_blockwise_{bf16,f32}.cu (B in 128x128 tiles: Fprop /
// Dgrad) and sm90_fp8_gemm_blockwise1d_{bf16,f32}.cu (B in 1x128 tiles: Wgrad), one TU per output
// dtype. kRowsB = rows of B per scale (128 or 1):
//
//   D[l, m, n] = sum_kb sa[l, m, kb] * sb[l, n / kRowsB, kb] * sum_{k in block kb} A[l, m, k] * B[l, n, k]
//                (+ bias[n])
//
// A: (L, M, K) K-major FP8 with 1x128 tiles (one f32 scale per row and 128 of K),
// B: (L, N, K) K-major FP8 with kRowsB x 128 tiles (one f32 scale per kRowsB rows and 128 of K),
// D: (L, M, N) row-major bf16 | f32. CUTLASS KernelTmaWarpSpecializedCooperativeFP8Blockwise: every
// 128 of K the tensor core's partial sum is promoted into the FP32 accumulator multiplied by
// sa * sb (both FP32; the product sa[m] * sb[n/128] is rounded to FP32 once), i.e. the FP32
// promotion and the scaling both happen per 128 of K. Epilogue: D = acc (+ bias[n]), one rounding.
//
// Scale layouts the kernel reads (CUTLASS Sm90BlockwiseScaleConfig<1, kRowsB, 128>, both "MN-major"):
//   sfa: float[L][K/128][m_pitch], element (l, kb, m) at (l * (K/128) + kb) * m_pitch + m;
//        m_pitch = round_up(M, 4) (TMA needs 16-byte strides; rows m >= M are never read);
//   sfb: float[L][K/128][NB],  element (l, kb, nb) at (l * (K/128) + kb) * NB + nb, NB = N / kRowsB.
// The FFI contract's buffers are (B, M, K/128) and (B, NB, K/128) (K/128 contiguous):
// launch_blockwise_scale_layout() transposes them on the stream (tiny: 1/128 of the data's
// element count for A, 1/16384 for B).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sm90_fp8_gemm_tensorwise.h"  // Fp8Pair, GemmOut

namespace mxprec {
namespace cuda {

constexpr int kBlockwiseK = 128;     // scale block along K (both operands)
constexpr int kBlockwiseRowsB = 128;  // rows (N) per B scale tile (Fprop / Dgrad); A has one scale per row
constexpr int kBlockwiseRowsB1D = 1;  // B scaled per row and 128 of K like A (Wgrad: dW = X^T dY)

// Row pitch (in floats) of the transposed A scales: M rounded up to a multiple of 4.
constexpr int64_t blockwise_sfa_pitch(int64_t m) { return (m + 3) / 4 * 4; }

struct BlockwiseGemmArgs {
  const void* a;     // (L, M, K) FP8, K contiguous
  const void* b;     // (L, N, K) FP8, K contiguous
  void* d;           // (L, M, N) bf16 | f32, N contiguous
  const float* sfa;  // float[L][K/128][m_pitch] (see above)
  const float* sfb;  // float[L][K/128][N/kRowsB]
  const float* bias; // N floats, or nullptr (no bias)
  int m, n, k, l;
  int m_pitch;       // blockwise_sfa_pitch(m)
  int sm_count;      // multiprocessors of the stream's device
};

// Shapes the kernels need: K % 128 == 0 (whole scale blocks; implies the TMA's K % 16),
// N % 128 == 0 (whole B scale tiles; implies the output alignment), M free.
bool sm90_blockwise_aligned(int64_t m, int64_t n, int64_t k);

template <int kPair, int kOut, int kRowsB>
size_t sm90_blockwise_workspace(const BlockwiseGemmArgs& args);

// Launches the GEMM on `stream`. Returns nullptr on success, else a static error string.
template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_run(const BlockwiseGemmArgs& args, void* workspace, cudaStream_t stream);

// On `stream`: sfa[l][kb][m] = sa[l][m][kb] (m < M; pad columns zero) and
// sfb[l][kb][nb] = sb[l][nb][kb], for sa (L, M, KB), sb (L, NB, KB) as in the FFI contract.
cudaError_t launch_blockwise_scale_layout(const float* sa, const float* sb, float* sfa, float* sfb, int64_t l,
                                          int64_t m, int64_t m_pitch, int64_t nb, int64_t kb, cudaStream_t stream);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_H_
