// CUTLASS 3.x definition of the sm_90a row-wise-scaled FP8 GEMM (see sm90_fp8_gemm_rowwise.h).
// Included by the instantiation TUs sm90_fp8_gemm_rowwise_{bf16,f32}.cu only.
//
// Mainloop: the same TMA warp-specialized cooperative FP8 mainloop as the per-tensor kernel (FP32
// promotion every 128 of K). Epilogue: an epilogue visitor tree (EVT) evaluated per accumulator
// element in FP32:
//
//   D = fma(acc * sa[m], sb[n], bias[n])      sa: column vector (one value per row m of the tile)
//                                             sb, bias: row vectors (one value per column n)
//
//   Sm90Compute<fma> ----- Sm90Compute<*> ----- Sm90AccFetch             (acc)
//                   |                    '----- Sm90ColBroadcast         (sa[l, m], stride (1, 0, M))
//                   |----- Sm90RowBroadcast                              (sb[l, n], stride (0, 1, N))
//                   '----- Sm90RowBroadcast                              (bias[n],  stride (0, 1, 0))
//
// Without a bias (args.bias == nullptr) a second kernel runs the tree without the bias leaf:
//   D = (acc * sa[m]) * sb[n].
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_IMPL_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_IMPL_CUH_

#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/functional.h"
#include "sm90_gemm_common.cuh"
#include "sm90_fp8_gemm_rowwise.h"

namespace mxprec {
namespace cuda {
namespace rowwise {

template <int kPair, int kOut, bool kBias>
struct Sm90RowwiseGemm {
  using Ops = sm90::TnOperands<kPair, kOut>;
  using ElementD = typename Ops::ElementD;
  using ElementCompute = typename Ops::ElementCompute;

  // 128 x TILE_N x 128 CTA tile, cluster CLUSTER_M x CLUSTER_N (default 3 - CLUSTER_M), cooperative
  // (2 consumer warpgroups);
  // MXPREC_SM90_ROWWISE_OVERLAP = N > 0: the FP32 promotion overlaps the next WGMMAs
  // (sm90_fp8_overlap_mainloop.cuh, N slices of the tile's columns, OVERLAP_TILES k-tiles per loop body),
  // 0: CUTLASS's mainloop. Defaults (eighth session, benchmarks/results/h200_sm90_overlap.md): 128x192,
  // cluster 2x1, 2 slices; until then 128x128, cluster 1x2, CUTLASS's mainloop.
#ifndef MXPREC_SM90_ROWWISE_TILE_N
#define MXPREC_SM90_ROWWISE_TILE_N 192
#endif
#ifndef MXPREC_SM90_ROWWISE_OVERLAP
#define MXPREC_SM90_ROWWISE_OVERLAP 2
#endif
#ifndef MXPREC_SM90_ROWWISE_OVERLAP_TILES
#define MXPREC_SM90_ROWWISE_OVERLAP_TILES 1
#endif
#ifndef MXPREC_SM90_ROWWISE_CLUSTER_M
#define MXPREC_SM90_ROWWISE_CLUSTER_M 2
#endif
#ifndef MXPREC_SM90_ROWWISE_CLUSTER_N
#define MXPREC_SM90_ROWWISE_CLUSTER_N (3 - MXPREC_SM90_ROWWISE_CLUSTER_M)
#endif
  using TileShape = cute::Shape<cute::_128, cute::Int<MXPREC_SM90_ROWWISE_TILE_N>, cute::_128>;
  using ClusterShape =
      cute::Shape<cute::Int<MXPREC_SM90_ROWWISE_CLUSTER_M>, cute::Int<MXPREC_SM90_ROWWISE_CLUSTER_N>, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;  // FP32 promotion
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // Leaves. Stages = 0 (broadcasts load straight from global memory, no smem pipeline).
  // sa: one f32 per row m, batch stride M (int64). Alignment 1: the column vector is read element-wise.
  using ScaleA = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, ElementCompute,
                                                             cute::Stride<cute::_1, cute::_0, int64_t>, 1>;
  // sb / bias: one f32 per column n, batch stride N / 0.
  using ScaleB = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, ElementCompute,
                                                             cute::Stride<cute::_0, cute::_1, int64_t>, 1>;
  using Bias = ScaleB;
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;

  // acc * sa[m] (FP32)
  using AccTimesScaleA = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementCompute, ElementCompute, kRound>, Acc,
      ScaleA>;
  // fma(acc * sa[m], sb[n], bias[n]) (kBias) or (acc * sa[m]) * sb[n] in FP32, then one rounding to ElementD.
  using FusionCallbacks = std::conditional_t<
      kBias,
      cutlass::epilogue::fusion::Sm90EVT<
          cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, ElementCompute, kRound>,
          AccTimesScaleA, ScaleB, Bias>,
      cutlass::epilogue::fusion::Sm90EVT<
          cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, ElementCompute, kRound>, AccTimesScaleA,
          ScaleB>>;

  using Gemm = typename sm90::BuildGemm<Ops, TileShape, ClusterShape, KernelSchedule, EpilogueSchedule,
                                        FusionCallbacks, typename Ops::LayoutA, typename Ops::LayoutB,
                                        MXPREC_SM90_ROWWISE_OVERLAP, MXPREC_SM90_ROWWISE_OVERLAP_TILES>::Gemm;

  static typename Gemm::Arguments make_args(const RowwiseGemmArgs& p) {
    const int M = p.m, N = p.n;
    const sm90::PackedProblem<Gemm> pp(M, N, p.k, p.l, p.sm_count);

    // EVT arguments mirror the tree: {child arguments..., node op arguments}.
    typename ScaleA::Arguments scale_a{p.scale_a, 0.0f, {cute::_1{}, cute::_0{}, static_cast<int64_t>(M)}};
    typename ScaleB::Arguments scale_b{p.scale_b, 0.0f, {cute::_0{}, cute::_1{}, static_cast<int64_t>(N)}};
    typename FusionCallbacks::Arguments thread = [&] {
      if constexpr (kBias) {
        typename Bias::Arguments bias{p.bias, 0.0f, {cute::_0{}, cute::_1{}, int64_t(0)}};
        return typename FusionCallbacks::Arguments{{{}, scale_a, {}}, scale_b, bias, {}};
      } else {
        return typename FusionCallbacks::Arguments{{{}, scale_a, {}}, scale_b, {}};
      }
    }();

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, p.k, p.l},
        {static_cast<const typename Ops::ElementA*>(p.a), pp.sa, static_cast<const typename Ops::ElementB*>(p.b), pp.sb},
        {thread, nullptr, pp.sc, static_cast<typename Ops::ElementD*>(p.d), pp.sd},
        pp.hw};
    return args;
  }
};

}  // namespace rowwise

template <int kPair, int kOut>
size_t sm90_rowwise_workspace(const RowwiseGemmArgs& args) {
  using WithBias = rowwise::Sm90RowwiseGemm<kPair, kOut, true>;
  using NoBias = rowwise::Sm90RowwiseGemm<kPair, kOut, false>;
  return sm90::workspace_bias_or_not<WithBias, NoBias>(args);
}

template <int kPair, int kOut>
const char* sm90_rowwise_run(const RowwiseGemmArgs& args, void* workspace, cudaStream_t stream) {
  using WithBias = rowwise::Sm90RowwiseGemm<kPair, kOut, true>;
  using NoBias = rowwise::Sm90RowwiseGemm<kPair, kOut, false>;
  static constexpr sm90::RunErrors kErrors{"CUTLASS can_implement rejected the row-wise problem",
                                           "CUTLASS initialize failed (row-wise)",
                                           "CUTLASS kernel launch failed (row-wise)"};
  return sm90::run_bias_or_not<WithBias, NoBias>(args, workspace, stream, kErrors);
}

#define MXPREC_INSTANTIATE_SM90_ROWWISE(P, O)                                                     \
  template size_t sm90_rowwise_workspace<P, O>(const RowwiseGemmArgs&);                          \
  template const char* sm90_rowwise_run<P, O>(const RowwiseGemmArgs&, void*, cudaStream_t);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_IMPL_CUH_
