// Host side of mxprec's own persistent FP8 GEMM (sm90_fp8_gemm_persistent.cuh): TMA descriptors,
// launch, and the explicit instantiations for the three operand pairs x two output dtypes x both B scale shapes,
// and of the epilogue-scaled (per-tensor, row-wise) families.
#include "sm90_fp8_gemm_persistent.h"

#include "sm90_fp8_gemm_persistent.cuh"

#include <cstdlib>
#include <string>

namespace mxprec {
namespace cuda {
namespace persistent {
namespace {

// Shared-memory stages (of 227 KB): 5 x 37-41 KB at 160 / 192 columns; 6 x 32-33 KB at 128, except for 128x128 B
// scales with bf16 output: 5 x 32.5 KB, so that the store warps' 32 KB staging fits (6 stages, their A scales and the
// staging come to 96 bytes too many; store warps at 5 stages measured +1-1.7 % over none at 6, fortieth session).
constexpr int stages_for(int block_n, int rows_b, bool tma_store) {
  return block_n != 128 ? 5 : (rows_b == 128 && tma_store ? 5 : 6);
}

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

// p.sfa / p.sfb: the mainloop's block scales (kRowsB 128 or 1); unused with kRowsB == 0, whose scales are `es`.
// split_mode: the split tail's mode, split_error the message for a mode split_tail_pieces does not know.
template <int kPair, int kOut, int kRowsB, int kBlockN, int kClusterM, int kClusterN>
const char* launch(const BlockwiseGemmArgs& p, const EpilogueScales& es, const std::string& split_mode,
                   const char* split_error, DeviceScratch& scratch, cudaStream_t stream) {
  constexpr bool kTmaStore = kOut == 0 && MXPREC_PERSISTENT_TMA_STORE;  // bf16 output: staged TMA stores
  constexpr int kStages = stages_for(kBlockN, kRowsB, kTmaStore);
  using Smem = SmemLayout<kBlockN, kRowsB, kStages, kTmaStore>;
  static_assert(Smem::kAlloc <= 227 * 1024, "shared memory per CTA");
  constexpr int kClusterSize = kClusterM * kClusterN;
  const uint64_t m = p.m, n = p.n, k = p.k, l = p.l, kb = p.k / kBlockK, mp = p.m_pitch;
  CUtensorMap map_a, map_b, map_sfa, map_sfb;
  const CUtensorMapSwizzle sw128 = CU_TENSOR_MAP_SWIZZLE_128B, none = CU_TENSOR_MAP_SWIZZLE_NONE;
  // Boxes: the part of the A / B tile one CTA loads (the whole tile without a cluster along that operand).
  bool ok = encode_3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, k, m, l, k, m * k, kBlockK, kBlockM / kClusterN,
                      sw128) &&
            encode_3d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, k, n, l, k, n * k, kBlockK, kBlockN / kClusterM,
                      sw128);
  if (kRowsB != 0) {
    ok = ok && encode_3d(&map_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfa, mp, kb, l, mp * 4, mp * kb * 4, kBlockM, 1,
                         none);
  } else {
    map_sfa = map_a;  // unused
  }
  if (kRowsB == 1) {
    ok = ok && encode_3d(&map_sfb, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfb, n, kb, l, n * 4, n * kb * 4, kBlockN, 1,
                         none);
  } else {
    map_sfb = map_a;  // unused
  }
  CUtensorMap map_d;  // bf16 output: the epilogue's TMA stores of 64-row x 32-column slices
  if (kTmaStore) {
    ok = ok && encode_3d(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.d, n, m, l, n * 2, m * n * 2, kEpiCols, 64,
                         CU_TENSOR_MAP_SWIZZLE_64B);
  } else {
    map_d = map_a;  // unused
  }
  if (!ok) return "persistent FP8 GEMM: cuTensorMapEncodeTiled failed (operand not 16-byte aligned?)";

  auto kernel = blockwise_gemm_kernel<kPair, kOut, kRowsB, kBlockN, kStages, kClusterM, kClusterN>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem::kAlloc) != cudaSuccess) {
    (void)cudaGetLastError();
    return "persistent FP8 GEMM: cudaFuncSetAttribute (shared memory) failed";
  }
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kClusterSize;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = Smem::kAlloc;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // Persistent grid: as many clusters as fit on the device at once (a GPC's odd SM is left out by pairs), at most
  // one per cluster tile.
  static int max_clusters = 0;  // per instantiation; the device is the same H200 class throughout a process
  if (max_clusters <= 0) {
    cfg.gridDim = dim3(kClusterSize * (p.sm_count / kClusterSize), 1, 1);
    int c = 0;
    if (cudaOccupancyMaxActiveClusters(&c, kernel, &cfg) != cudaSuccess || c <= 0) {
      (void)cudaGetLastError();
      c = p.sm_count / kClusterSize;
    }
    max_clusters = c;
  }
  const int64_t num_m = (p.m + kBlockM - 1) / kBlockM, num_n = (p.n + kBlockN - 1) / kBlockN;
  const int64_t cluster_tiles =
      ((num_m + kClusterM - 1) / kClusterM) * ((num_n + kClusterN - 1) / kClusterN) * static_cast<int64_t>(p.l);
  SplitTail split{nullptr, 0, 1};
  int64_t tail = 0;
  const int pieces = split_tail_pieces(split_mode, cluster_tiles, max_clusters, static_cast<int64_t>(kb), &tail);
  if (pieces < 0) return split_error;
  if (pieces > 0) {
    const size_t bytes = static_cast<size_t>(tail) * pieces * kClusterSize * kBlockM * kBlockN * sizeof(float);
    split.partials = static_cast<float*>(scratch.allocate(bytes));
    if (split.partials == nullptr) return "persistent FP8 GEMM: no device scratch for the split tail's partial sums";
    split.tail_tiles = static_cast<int>(tail);
    split.pieces = pieces;
  }
  const int64_t work = cluster_tiles + static_cast<int64_t>(split.tail_tiles) * (split.pieces - 1);
  const int64_t clusters = work < max_clusters ? work : max_clusters;
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * kClusterSize), 1, 1);
  if (cudaLaunchKernelEx(&cfg, kernel, map_a, map_b, map_sfa, map_sfb, map_d, p.sfb, p.bias, p.d, p.m, p.n, p.k,
                         p.l, es, split) != cudaSuccess) {
    (void)cudaGetLastError();
    return "persistent FP8 GEMM: kernel launch failed";
  }
  if (split.tail_tiles > 0) {
    const dim3 grid(static_cast<unsigned>(split.tail_tiles * kClusterSize), kBlockN / 2 / (4 * kReduceGroups), 1);
    split_tail_reduce_kernel<kOut, kBlockN, kClusterM, kClusterN, kRowsB == 0>
        <<<grid, 256, 0, stream>>>(split, p.d, p.bias, p.m, p.n, p.l, es);
    if (cudaGetLastError() != cudaSuccess) return "persistent FP8 GEMM: split-tail reduce kernel launch failed";
  }
  return nullptr;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// The environment variables that configure the kernel for one family, and their error messages.
struct FamilyEnv {
  const char* cluster_var;
  const char* cluster_error;
  const char* tile_var;
  const char* tile_error;
  const char* split_var;  // the split tail's mode: auto (unset), off or a forced piece count
  const char* split_error;
};
constexpr FamilyEnv kBlockEnv{"MXPREC_SM90_BLOCKWISE_CLUSTER",
                              "MXPREC_SM90_BLOCKWISE_CLUSTER must be 1x2, 1x1 or (128x128 B scales, 128-column tiles) "
                              "2x1",
                              "MXPREC_SM90_BLOCKWISE_TILE_N",
                              "MXPREC_SM90_BLOCKWISE_TILE_N must be auto, 128, 160 or 192",
                              "MXPREC_SM90_BLOCKWISE_SPLIT_TAIL",
                              "MXPREC_SM90_BLOCKWISE_SPLIT_TAIL must be auto, off or a piece count 2 .. 4096"};
constexpr FamilyEnv kTensorEnv{"MXPREC_SM90_TENSORWISE_CLUSTER",
                               "MXPREC_SM90_TENSORWISE_CLUSTER must be 1x2, 1x1 or 2x1", "MXPREC_SM90_TENSORWISE_TILE_N",
                               "MXPREC_SM90_TENSORWISE_TILE_N must be auto, 128, 160 or 192",
                               "MXPREC_SM90_TENSORWISE_SPLIT_TAIL",
                               "MXPREC_SM90_TENSORWISE_SPLIT_TAIL must be auto, off or a piece count 2 .. 4096"};
constexpr FamilyEnv kRowEnv{"MXPREC_SM90_ROWWISE_CLUSTER", "MXPREC_SM90_ROWWISE_CLUSTER must be 1x2, 1x1 or 2x1",
                            "MXPREC_SM90_ROWWISE_TILE_N", "MXPREC_SM90_ROWWISE_TILE_N must be auto, 128, 160 or 192",
                            "MXPREC_SM90_ROWWISE_SPLIT_TAIL",
                            "MXPREC_SM90_ROWWISE_SPLIT_TAIL must be auto, off or a piece count 2 .. 4096"};

// Clusters: 1x2 and 1x1 for every family and tile; 2x1 (the two CTAs share the B tile), built and the default, for
// the epilogue-scaled families (+1-11 % over 1x2 at three of four shapes, twenty-second session) and for the
// 128x128-scaled block family's 128-column tiles (+0.7-4 % over 1x2 at four shapes, fortieth session); else 1x2.
template <int kRowsB, int kBlockN>
constexpr bool kTwoByOne = kRowsB == 0 || (kRowsB == 128 && kBlockN == 128);
template <int kPair, int kOut, int kRowsB, int kBlockN>
const char* launch_cluster(const BlockwiseGemmArgs& p, const EpilogueScales& es, const FamilyEnv& env,
                           DeviceScratch& scratch, cudaStream_t stream) {
  const std::string cluster = env_or(env.cluster_var, kTwoByOne<kRowsB, kBlockN> ? "2x1" : "1x2");
  const std::string split = env_or(env.split_var, "auto");
  const char* split_error = env.split_error;
  if (cluster == "1x1") return launch<kPair, kOut, kRowsB, kBlockN, 1, 1>(p, es, split, split_error, scratch, stream);
  if (cluster == "1x2") return launch<kPair, kOut, kRowsB, kBlockN, 1, 2>(p, es, split, split_error, scratch, stream);
  if constexpr (kTwoByOne<kRowsB, kBlockN>) {
    if (cluster == "2x1") {
      return launch<kPair, kOut, kRowsB, kBlockN, 2, 1>(p, es, split, split_error, scratch, stream);
    }
  }
  return env.cluster_error;
}

// tile: "128", "160" or "192" columns per CTA tile.
template <int kPair, int kOut, int kRowsB>
const char* launch_tile(const std::string& tile, const BlockwiseGemmArgs& p, const EpilogueScales& es,
                        const FamilyEnv& env, DeviceScratch& scratch, cudaStream_t stream) {
  if (tile == "128") return launch_cluster<kPair, kOut, kRowsB, 128>(p, es, env, scratch, stream);
  if (tile == "160") return launch_cluster<kPair, kOut, kRowsB, 160>(p, es, env, scratch, stream);
  if (tile == "192") return launch_cluster<kPair, kOut, kRowsB, 192>(p, es, env, scratch, stream);
  return env.tile_error;
}

// The per-tensor and row-wise families: A, B, D, bias and extents as BlockwiseGemmArgs, scales in `es`.
// TILE_N auto, 2x1 clusters: per-tensor, 192 columns where K >= 14336 on outputs of 2^25 elements or more, else 128.
// Thirty-seventh session (benchmarks/results/h200_gemm_steady.md, interleaved 400 ms windows at the power cap):
// 192 ahead by 4.7 % at 8192x28672x8192 and 1.2 % at 16384x14336x4096; level (within 1 %) at 8192^3,
// 8192x8192x28672 and 16384x11008x4096; 128 ahead by 1.5 % at 16384x4096x14336 and 2.5 % at 16384x4096x11008, where
// the twenty-second session's rule (192 also where N >= 8192; h200_persistent_tensorwise.md, 20-call bursts) took
// 192; 192 is 7-8 % slower at 4096^3, 1024x8192x8192, 2048x8192x8192. Not re-measured: 16384x4096x32000 (the logits
// head), where the old rule's bursts had 192 ahead by 1-4 % with 9 % between two runs. Row-wise: 128 (192 is 4-18 %
// slower except at K = 14336).
template <int kPair, int kOut>
const char* run_epilogue_scaled(const BlockwiseGemmArgs& p, const EpilogueScales& es, const FamilyEnv& env,
                                DeviceScratch& scratch, cudaStream_t stream) {
  if (!sm90_blockwise_aligned(p.m, p.n, p.k) || p.m <= 0 || p.l <= 0) {
    return "persistent per-tensor / row-wise FP8 GEMM: needs N, K > 0 multiples of 128 and M, L > 0";
  }
  std::string tile_n = env_or(env.tile_var, "auto");
  if (tile_n == "auto") {
    const bool per_tensor = es.row == nullptr, large = static_cast<int64_t>(p.m) * p.n >= (int64_t{1} << 25);
    tile_n = per_tensor && large && p.k >= 14336 ? "192" : "128";
  }
  return launch_tile<kPair, kOut, 0>(tile_n, p, es, env, scratch, stream);
}

}  // namespace
}  // namespace persistent

// MXPREC_SM90_BLOCKWISE_CLUSTER = "MxN" (CTAs per cluster along M x along N): 1x2 (the two CTAs of a cluster share
// the A tile, multicast), 1x1, or 2x1 (they share the B tile) for 128x128 B scales in 128-column tiles, where it is
// the default (kTwoByOne; with the store warps, fortieth session; h200_blockwise_persistent.md had found 2x1 no
// faster before them); 1x2 is the default of the other block-scaled tiles.
// MXPREC_SM90_BLOCKWISE_TILE_N = CTA tile columns: auto (default), 128, 160 or 192 (the wider tiles: no second
// partial sum, a partial last column tile when N % tile != 0, two B scale tiles per CTA tile).
template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_persistent_run(const BlockwiseGemmArgs& p, DeviceScratch& scratch, cudaStream_t stream) {
  using namespace persistent;
  static_assert(kBlockK == kBlockwiseK, "k blocks = the scale blocks sm90_blockwise_aligned checks");
  if (!sm90_blockwise_aligned(p.m, p.n, p.k) || p.m <= 0 || p.l <= 0) {
    return "persistent block-scaled GEMM: needs N, K > 0 multiples of 128 and M, L > 0";
  }
  std::string tile_n = env_or(kBlockEnv.tile_var, "auto");
  // auto: 1x128 B scales on large outputs with N >= 8192: 192 columns (the split loop, +1-8 % measured over 128 in
  // the reading-in-the-promotion form); else 128, whose one-group loop loads the column scales under the WGMMAs
  // (MXPREC_PERSISTENT_SB_EARLY 3). Forty-sixth session, two rounds: at 14336x16384x4096 128 (982 TFLOP/s) was ahead
  // of 192 (952), at 4096x16384x14336 level (982 / 990), at 4096x16384x32000 behind (909 / 975).
  if (tile_n == "auto") {
    tile_n = kRowsB == 1 && static_cast<int64_t>(p.m) * p.n >= (int64_t{1} << 25) && p.n >= 8192 ? "192" : "128";
  }
  return launch_tile<kPair, kOut, kRowsB>(tile_n, p, EpilogueScales{}, kBlockEnv, scratch, stream);
}

// MXPREC_SM90_TENSORWISE_CLUSTER / _TILE_N and MXPREC_SM90_ROWWISE_CLUSTER / _TILE_N: as the block-scaled
// family's, plus the 2x1 cluster (their default); TILE_N auto: run_epilogue_scaled.
template <int kPair, int kOut>
const char* sm90_tensorwise_persistent_run(const TensorwiseGemmArgs& p, DeviceScratch& scratch, cudaStream_t stream) {
  using namespace persistent;
  const BlockwiseGemmArgs a{p.a, p.b, p.d, nullptr, nullptr, p.bias, p.m, p.n, p.k, p.l, p.m, p.sm_count};
  return run_epilogue_scaled<kPair, kOut>(a, EpilogueScales{p.scale_a, p.scale_b, nullptr, nullptr}, kTensorEnv,
                                          scratch, stream);
}
template <int kPair, int kOut>
const char* sm90_rowwise_persistent_run(const RowwiseGemmArgs& p, DeviceScratch& scratch, cudaStream_t stream) {
  using namespace persistent;
  const BlockwiseGemmArgs a{p.a, p.b, p.d, nullptr, nullptr, p.bias, p.m, p.n, p.k, p.l, p.m, p.sm_count};
  return run_epilogue_scaled<kPair, kOut>(a, EpilogueScales{nullptr, nullptr, p.scale_a, p.scale_b}, kRowEnv,
                                          scratch, stream);
}

#define MXPREC_INSTANTIATE_PERSISTENT(P, O)                                                                       \
  template const char* sm90_blockwise_persistent_run<P, O, kBlockwiseRowsB>(const BlockwiseGemmArgs&,            \
                                                                             DeviceScratch&, cudaStream_t);      \
  template const char* sm90_blockwise_persistent_run<P, O, kBlockwiseRowsB1D>(const BlockwiseGemmArgs&,           \
                                                                               DeviceScratch&, cudaStream_t);    \
  template const char* sm90_tensorwise_persistent_run<P, O>(const TensorwiseGemmArgs&, DeviceScratch&,            \
                                                            cudaStream_t);                                       \
  template const char* sm90_rowwise_persistent_run<P, O>(const RowwiseGemmArgs&, DeviceScratch&, cudaStream_t);
MXPREC_INSTANTIATE_PERSISTENT(0, 0)
MXPREC_INSTANTIATE_PERSISTENT(1, 0)
MXPREC_INSTANTIATE_PERSISTENT(2, 0)
MXPREC_INSTANTIATE_PERSISTENT(0, 1)
MXPREC_INSTANTIATE_PERSISTENT(1, 1)
MXPREC_INSTANTIATE_PERSISTENT(2, 1)

}  // namespace cuda
}  // namespace mxprec
