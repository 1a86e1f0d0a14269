// CUTLASS instantiations of the sm_90a block-scaled (1x128 x 128x128) FP8 GEMM, bf16 output (3 operand pairs).
#include "sm90_fp8_gemm_blockwise_impl.cuh"

namespace mxprec {
namespace cuda {
MXPREC_INSTANTIATE_SM90_BLOCKWISE(0, 0, kBlockwiseRowsB)  // e4m3 x e4m3
MXPREC_INSTANTIATE_SM90_BLOCKWISE(1, 0, kBlockwiseRowsB)  // e5m2 x e4m3
MXPREC_INSTANTIATE_SM90_BLOCKWISE(2, 0, kBlockwiseRowsB)  // e4m3 x e5m2
}  // namespace cuda
}  // namespace mxprec
