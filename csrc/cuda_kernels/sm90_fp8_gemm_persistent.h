// Light interface of mxprec's own persistent FP8 GEMM (sm90_fp8_gemm_persistent.cuh; no CUTLASS). Block-scaled:
// same arguments, scale layouts and semantics as sm90_blockwise_run (sm90_fp8_gemm_blockwise.h); per-tensor and
// row-wise: as sm90_tensorwise_run / sm90_rowwise_run, for N and K multiples of 128. None needs a workspace.
// Selected at run time by MXPREC_SM90_{BLOCKWISE,TENSORWISE,ROWWISE}_KERNEL (sm90_fp8_gemm_tensorwise.cu).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_

#include <cuda_runtime.h>

#include "sm90_fp8_gemm_blockwise.h"
#include "sm90_fp8_gemm_rowwise.h"
#include "sm90_fp8_gemm_tensorwise.h"

namespace mxprec {
namespace cuda {

// Launches the GEMM on `stream`. Returns nullptr on success, else a static error string.
template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_persistent_run(const BlockwiseGemmArgs& args, cudaStream_t stream);
template <int kPair, int kOut>
const char* sm90_tensorwise_persistent_run(const TensorwiseGemmArgs& args, cudaStream_t stream);
template <int kPair, int kOut>
const char* sm90_rowwise_persistent_run(const RowwiseGemmArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_
