// Light interface of mxprec's own persistent FP8 GEMM (sm90_fp8_gemm_persistent.cuh; no CUTLASS). Block-scaled:
// same arguments, scale layouts and semantics as sm90_blockwise_run (sm90_fp8_gemm_blockwise.h); per-tensor and
// row-wise: as sm90_tensorwise_run / sm90_rowwise_run, for N and K multiples of 128. Every family takes device
// scratch for a split last wave (DeviceScratch).
// Selected at run time by MXPREC_SM90_{BLOCKWISE,TENSORWISE,ROWWISE}_KERNEL (sm90_fp8_gemm_tensorwise.cu).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_

#include <cuda_runtime.h>

#include "sm90_fp8_gemm_blockwise.h"
#include "sm90_fp8_gemm_rowwise.h"
#include "sm90_fp8_gemm_tensorwise.h"

namespace mxprec {
namespace cuda {

// Device memory a call asks for only on some shapes (the split tail's partial sums, see
// SplitTail in split_tail.h), valid until the call's kernels have run on its stream.
class DeviceScratch {
 public:
  virtual void* allocate(size_t bytes) = 0;  // 256-byte aligned, or nullptr if it cannot be had
 protected:
  ~DeviceScratch() = default;
};

// Launches the GEMM on `stream`. Returns nullptr on success, else a static error string. The per-tensor family
// reads TensorwiseGemmArgs::scale_a / scale_b (alpha is formed in the kernel; args.alpha is not read).
template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_persistent_run(const BlockwiseGemmArgs& args, DeviceScratch& scratch, cudaStream_t stream);
template <int kPair, int kOut>
const char* sm90_tensorwise_persistent_run(const TensorwiseGemmArgs& args, DeviceScratch& scratch,
                                           cudaStream_t stream);
template <int kPair, int kOut>
const char* sm90_rowwise_persistent_run(const RowwiseGemmArgs& args, DeviceScratch& scratch, cudaStream_t stream);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_
