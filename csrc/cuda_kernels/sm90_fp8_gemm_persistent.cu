// Host side of mxprec's own persistent block-scaled FP8 GEMM (sm90_fp8_gemm_persistent.cuh): TMA descriptors,
// launch, and the explicit instantiations for the three operand pairs x two output dtypes x both B scale shapes.
#include "sm90_fp8_gemm_persistent.h"

#include "sm90_fp8_gemm_persistent.cuh"

namespace mxprec {
namespace cuda {
namespace persistent {
namespace {

constexpr int kBlockN = 128;  // one B scale tile per CTA column block
constexpr int kStages = 6;    // 6 x 32.5-33 KB of the 227 KB of shared memory

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// 3-D map over (d0 contiguous, d1, d2) with byte strides s1 (d1), s2 (d2); box (b0, b1, 1).
bool encode_3d(CUtensorMap* map, CUtensorMapDataType type, const void* base, uint64_t d0, uint64_t d1, uint64_t d2,
               uint64_t s1, uint64_t s2, uint32_t b0, uint32_t b1, CUtensorMapSwizzle swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  cuuint64_t dims[3] = {d0, d1, d2};
  cuuint64_t strides[2] = {s1, s2};
  cuuint32_t box[3] = {b0, b1, 1};
  cuuint32_t elem_strides[3] = {1, 1, 1};
  return encode(map, type, 3, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace
}  // namespace persistent

template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_persistent_run(const BlockwiseGemmArgs& p, cudaStream_t stream) {
  using namespace persistent;
  using Smem = SmemLayout<kBlockN, kRowsB, kStages>;
  static_assert(Smem::kAlloc <= 227 * 1024, "shared memory per CTA");
  if (p.n % kBlockN != 0 || p.k % kBlockK != 0 || p.m <= 0 || p.l <= 0) {
    return "persistent block-scaled GEMM: needs N % 128 == 0, K % 128 == 0, M > 0";
  }
  const uint64_t m = p.m, n = p.n, k = p.k, l = p.l, kb = p.k / kBlockK, mp = p.m_pitch;
  CUtensorMap map_a, map_b, map_sfa, map_sfb;
  const CUtensorMapSwizzle sw128 = CU_TENSOR_MAP_SWIZZLE_128B, none = CU_TENSOR_MAP_SWIZZLE_NONE;
  bool ok = encode_3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, k, m, l, k, m * k, kBlockK, kBlockM, sw128) &&
            encode_3d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, k, n, l, k, n * k, kBlockK, kBlockN, sw128) &&
            encode_3d(&map_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfa, mp, kb, l, mp * 4, mp * kb * 4, kBlockM, 1,
                      none);
  if (kRowsB == 1) {
    ok = ok && encode_3d(&map_sfb, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfb, n, kb, l, n * 4, n * kb * 4, kBlockN, 1,
                         none);
  } else {
    map_sfb = map_sfa;  // unused
  }
  if (!ok) return "persistent block-scaled GEMM: cuTensorMapEncodeTiled failed (operand not 16-byte aligned?)";

  auto kernel = blockwise_gemm_kernel<kPair, kOut, kRowsB, kBlockN, kStages>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem::kAlloc) != cudaSuccess) {
    return "persistent block-scaled GEMM: cudaFuncSetAttribute (shared memory) failed";
  }
  const int64_t tiles = static_cast<int64_t>((p.m + kBlockM - 1) / kBlockM) * (p.n / kBlockN) * p.l;
  const int grid = static_cast<int>(tiles < p.sm_count ? tiles : p.sm_count);
  kernel<<<grid, kThreads, Smem::kAlloc, stream>>>(map_a, map_b, map_sfa, map_sfb, p.sfb, p.bias, p.d, p.m, p.n, p.k,
                                                  p.l);
  if (cudaGetLastError() != cudaSuccess) return "persistent block-scaled GEMM: kernel launch failed";
  return nullptr;
}

#define MXPREC_INSTANTIATE_PERSISTENT(P, O)                                                                   \
  template const char* sm90_blockwise_persistent_run<P, O, kBlockwiseRowsB>(const BlockwiseGemmArgs&,        \
                                                                             cudaStream_t);                  \
  template const char* sm90_blockwise_persistent_run<P, O, kBlockwiseRowsB1D>(const BlockwiseGemmArgs&, cudaStream_t);
MXPREC_INSTANTIATE_PERSISTENT(0, 0)
MXPREC_INSTANTIATE_PERSISTENT(1, 0)
MXPREC_INSTANTIATE_PERSISTENT(2, 0)
MXPREC_INSTANTIATE_PERSISTENT(0, 1)
MXPREC_INSTANTIATE_PERSISTENT(1, 1)
MXPREC_INSTANTIATE_PERSISTENT(2, 1)

}  // namespace cuda
}  // namespace mxprec
