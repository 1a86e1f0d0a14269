// CUTLASS instantiations of the sm_90a block-scaled (1x128 x 1x128, the Wgrad pair) FP8 GEMM, f32 output (3 operand pairs).
#include "sm90_fp8_gemm_blockwise_impl.cuh"

namespace mxprec {
namespace cuda {
MXPREC_INSTANTIATE_SM90_BLOCKWISE(0, 1, kBlockwiseRowsB1D)  // e4m3 x e4m3
MXPREC_INSTANTIATE_SM90_BLOCKWISE(1, 1, kBlockwiseRowsB1D)  // e5m2 x e4m3
MXPREC_INSTANTIATE_SM90_BLOCKWISE(2, 1, kBlockwiseRowsB1D)  // e4m3 x e5m2
}  // namespace cuda
}  // namespace mxprec
