// CUTLASS 3.x definition of the sm_90a block-scaled FP8 GEMM (see sm90_fp8_gemm_blockwise.h).
// Included by the instantiation TUs sm90_fp8_gemm_blockwise_{bf16,f32}.cu only.
//
// Mainloop: CollectiveBuilder with KernelTmaWarpSpecializedCooperativeFP8Blockwise. In CUTLASS 4.x
// the scale-factor layouts ride along with the operand layouts: the builder takes
// `cute::tuple<LayoutA, LayoutSFA>` / `cute::tuple<LayoutB, LayoutSFB>`, where LayoutSF* are CuTe
// layouts of shape ((granularity, blocks_MN), (granularity_K, blocks_K), L). The granularities
// come from Sm90BlockwiseScaleConfig<1, kRowsB, 128>. kRowsB = 128: one A scale per row and 128 of
// K (128 per 128-row CTA tile, loaded by TMA since they are M-major), one B scale per 128x128 tile
// (one per CTA tile, loaded with cp.async by the producer's auxiliary warp). kRowsB = 1: 128 scales
// per CTA tile on both sides, both loaded with cp.async (CUTLASS uses TMA for a scale operand only
// when the other one has fewer than 32 per tile), and every accumulator element gets its own
// sa[m] * sb[n] at each promotion.
// Epilogue: sm90::AlphaBiasEpilogue with alpha = 1 (the scales are already in the accumulator):
// D = acc + bias[n] when a bias is given, else D = acc (a second kernel without the bias broadcast).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_IMPL_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_IMPL_CUH_

#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "sm90_gemm_common.cuh"
#include "sm90_fp8_gemm_blockwise.h"

// Build-time configuration of the block-scaled kernel (defaults: the measured, tested one).
#ifndef MXPREC_SM90_BLOCKWISE_TILE_M
#define MXPREC_SM90_BLOCKWISE_TILE_M 128
#endif
#ifndef MXPREC_SM90_BLOCKWISE_TILE_N
#define MXPREC_SM90_BLOCKWISE_TILE_N 128
#endif
#ifndef MXPREC_SM90_BLOCKWISE_CLUSTER_M
#define MXPREC_SM90_BLOCKWISE_CLUSTER_M 1
#endif
#ifndef MXPREC_SM90_BLOCKWISE_CLUSTER_N
#define MXPREC_SM90_BLOCKWISE_CLUSTER_N 2
#endif
#ifndef MXPREC_SM90_BLOCKWISE_PINGPONG
#define MXPREC_SM90_BLOCKWISE_PINGPONG 0
#endif
// N > 0: the FP32 promotion overlaps the next WGMMAs (sm90_fp8_overlap_mainloop.cuh, N slices of the tile's
// columns, cooperative schedule only). 0 (CUTLASS's mainloop) by default: on the H200 the overlap was slower
// (1051 vs 1097 TFLOP/s at 8192^3, N-64 slices re-read A; benchmarks/results/h200_sm90_variants.md).
#ifndef MXPREC_SM90_BLOCKWISE_OVERLAP
#define MXPREC_SM90_BLOCKWISE_OVERLAP 0
#endif

namespace mxprec {
namespace cuda {
namespace blockwise {

template <int kPair, int kOut, int kRowsB, bool kBias>
struct Sm90BlockwiseGemm {
  static_assert(kRowsB == kBlockwiseRowsB || kRowsB == kBlockwiseRowsB1D, "B scale tiles are 128x128 or 1x128");
  using Ops = sm90::TnOperands<kPair, kOut>;

  // Scale granularity (M, N, K) = (1, kRowsB, 128); both scale layouts MN-major (the only SM90 form).
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kRowsB, kBlockwiseK>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  // 128x128x128 CTA tile (one K tile = one scale block), 1x2 cluster (TMA multicast of A),
  // cooperative (2 consumer warpgroups, 64 rows each). The MXPREC_SM90_BLOCKWISE_* macros below select
  // other configurations at build time (EXTRA_NVCC_FLAGS), for A/B runs on the device only: unset,
  // they give exactly this kernel.
  using TileShape = cute::Shape<cute::Int<MXPREC_SM90_BLOCKWISE_TILE_M>, cute::Int<MXPREC_SM90_BLOCKWISE_TILE_N>,
                                cute::_128>;
  using ClusterShape =
      cute::Shape<cute::Int<MXPREC_SM90_BLOCKWISE_CLUSTER_M>, cute::Int<MXPREC_SM90_BLOCKWISE_CLUSTER_N>, cute::_1>;
#if MXPREC_SM90_BLOCKWISE_PINGPONG
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif

  using FusionOp = sm90::AlphaBiasEpilogue<typename Ops::ElementD, kBias>;
  using Gemm = typename sm90::BuildGemm<Ops, TileShape, ClusterShape, KernelSchedule, EpilogueSchedule, FusionOp,
                                        cute::tuple<typename Ops::LayoutA, LayoutSFA>,
                                        cute::tuple<typename Ops::LayoutB, LayoutSFB>,
                                        MXPREC_SM90_BLOCKWISE_OVERLAP>::Gemm;

  // ((1, m_pitch), (128, K/128), L) : ((0, 1), (0, m_pitch), m_pitch * K/128), i.e.
  // ScaleConfig::tile_atom_to_shape_SFA of M rounded up to m_pitch: TMA loads of the A scales need
  // 16-byte strides (CUTLASS's can_implement checks M % 4 == 0 on this layout). The rows
  // M..m_pitch-1 hold zeros and only feed accumulator rows the epilogue never stores.
  static LayoutSFA make_layout_sfa(const BlockwiseGemmArgs& p) {
    using namespace cute;
    const int kb = p.k / kBlockwiseK;
    return make_layout(make_shape(make_shape(_1{}, p.m_pitch), make_shape(Int<kBlockwiseK>{}, kb), p.l),
                       make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, p.m_pitch), p.m_pitch * kb));
  }

  static typename Gemm::Arguments make_args(const BlockwiseGemmArgs& p) {
    const sm90::PackedProblem<Gemm> pp(p.m, p.n, p.k, p.l, p.sm_count);
    // ((kRowsB, NB), (128, K/128), L) : ((0, 1), (0, NB), NB * K/128): float[L][K/128][NB], NB = N/kRowsB.
    LayoutSFB layout_sfb = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(p.m, p.n, p.k, p.l));
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {p.m, p.n, p.k, p.l},
        {static_cast<const typename Ops::ElementA*>(p.a), pp.sa, static_cast<const typename Ops::ElementB*>(p.b), pp.sb,
         p.sfa, make_layout_sfa(p), p.sfb, layout_sfb},
        {{}, nullptr, pp.sc, static_cast<typename Ops::ElementD*>(p.d), pp.sd},
        pp.hw};
    sm90::set_alpha_bias<kBias>(args.epilogue.thread, 1.0f, nullptr, p.bias);
    return args;
  }
};

}  // namespace blockwise

template <int kPair, int kOut, int kRowsB>
size_t sm90_blockwise_workspace(const BlockwiseGemmArgs& args) {
  using WithBias = blockwise::Sm90BlockwiseGemm<kPair, kOut, kRowsB, true>;
  using NoBias = blockwise::Sm90BlockwiseGemm<kPair, kOut, kRowsB, false>;
  return sm90::workspace_bias_or_not<WithBias, NoBias>(args);
}

template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_run(const BlockwiseGemmArgs& args, void* workspace, cudaStream_t stream) {
  using WithBias = blockwise::Sm90BlockwiseGemm<kPair, kOut, kRowsB, true>;
  using NoBias = blockwise::Sm90BlockwiseGemm<kPair, kOut, kRowsB, false>;
  static constexpr sm90::RunErrors kErrors{"CUTLASS can_implement rejected the block-scaled problem",
                                           "CUTLASS initialize failed (block-scaled)",
                                           "CUTLASS kernel launch failed (block-scaled)"};
  return sm90::run_bias_or_not<WithBias, NoBias>(args, workspace, stream, kErrors);
}

#define MXPREC_INSTANTIATE_SM90_BLOCKWISE(P, O, R)                                                   \
  template size_t sm90_blockwise_workspace<P, O, R>(const BlockwiseGemmArgs&);                      \
  template const char* sm90_blockwise_run<P, O, R>(const BlockwiseGemmArgs&, void*, cudaStream_t);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_IMPL_CUH_
