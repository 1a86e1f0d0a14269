// CUTLASS 3.x definition of the sm_90a per-tensor FP8 GEMM (see sm90_fp8_gemm_tensorwise.h).
// Included by the instantiation TUs only. Written against CUTLASS's public API (CollectiveBuilder,
// GemmUniversalAdapter); CUTLASS headers come from the pinned nvidia-cutlass wheel (.deps/).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_IMPL_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_IMPL_CUH_

#include "sm90_gemm_common.cuh"
#include "sm90_fp8_gemm_tensorwise.h"

namespace mxprec {
namespace cuda {

// CTA tile / cluster / schedule. The FP32 promotion of FP8 partial sums (non-FastAccum schedules)
// keeps two accumulator fragments per consumer warpgroup, so a warpgroup tile of 64x256 (the
// 128x256 cooperative tile) needs 2 x 128 accumulator registers and spills (cuobjdump: STACK 248);
// the configs below keep each warpgroup at <= 64x128 (2 x 64 registers) or 64x192, or cut its N into
// slices (kSlices). Default: config 9 (eighth session, benchmarks/results/h200_sm90_overlap.md).
#ifndef MXPREC_SM90_TENSORWISE_CONFIG
#define MXPREC_SM90_TENSORWISE_CONFIG 9
#endif
// A configuration: kM x kN x 128 CTA tile, kClusterM x kClusterN cluster, schedule (cooperative by default);
// kSlices > 0 overlaps the FP32 promotion with the next WGMMAs (sm90_fp8_overlap_mainloop.cuh: N cut into
// kSlices slices, kTiles k-tiles per loop body), 0 keeps CUTLASS's FP8 mainloop.
template <int kM, int kN, int kClusterM, int kClusterN, int kSlices = 0, int kTiles = 1,
          class Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative,
          class EpiSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative>
struct TileConfig {
  using TileShape = cute::Shape<cute::Int<kM>, cute::Int<kN>, cute::_128>;
  using ClusterShape = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using KernelSchedule = Schedule;
  using EpilogueSchedule = EpiSchedule;
  static constexpr int kOverlapSlices = kSlices, kOverlapTiles = kTiles;
};
// Ping-pong: each of the two consumer warpgroups owns a kM x kN tile; one's epilogue overlaps the other's MMAs.
template <int kM, int kN, int kClusterM, int kClusterN, int kSlices = 0>
using PingpongTile = TileConfig<kM, kN, kClusterM, kClusterN, kSlices, 1,
                                cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized>;
// FP8 fast accumulation (no FP32 promotion of partial sums), which the issue's numerics rule out.
template <int kM, int kN, int kClusterM, int kClusterN>
using FastAccumTile =
    TileConfig<kM, kN, kClusterM, kClusterN, 0, 1, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum>;

template <int kConfig>
struct TensorwiseTileConfig;
template <>  // 128x256x128, cluster 2x1: the first version (spills; kept for comparison)
struct TensorwiseTileConfig<0> : TileConfig<128, 256, 2, 1> {};
template <>  // 128x128x128, cluster 1x2 (TMA multicast of A): 2 warpgroups of 64x128
struct TensorwiseTileConfig<1> : TileConfig<128, 128, 1, 2> {};
template <>  // 64x128x128 per warpgroup, cluster 1x2, ping-pong
struct TensorwiseTileConfig<2> : PingpongTile<64, 128, 1, 2> {};
template <>  // 128x192x128, cluster 1x2: 2 warpgroups of 64x192 (2 x 96 accumulator registers)
struct TensorwiseTileConfig<3> : TileConfig<128, 192, 1, 2> {};
// Configs 4 / 5: N = 160 WGMMA atoms are CuTe's "extended" shapes (CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED); without that
// define the CollectiveBuilder tiles these tiles with 64x32 atoms, five per k-block (tenth session, cuobjdump), which is
// why they measured 0.69x torch (benchmarks/results/h200_sm90_tiles.md).
template <>  // 128x160x128, cluster 2x1: cuBLASLt's own FP8 tile on the H200 (nvjet_sm90_qqtst_128x160_128x5_2x1)
struct TensorwiseTileConfig<4> : TileConfig<128, 160, 2, 1> {};
template <>  // 128x160x128, cluster 1x2
struct TensorwiseTileConfig<5> : TileConfig<128, 160, 1, 2> {};

// Diagnostics only (never the default): FP8 fast accumulation; they measure what the promotion costs.
template <>  // 128x192x128, cluster 1x2, FP8FastAccum
struct TensorwiseTileConfig<6> : FastAccumTile<128, 192, 1, 2> {};
template <>  // 128x256x128, cluster 2x1, FP8FastAccum
struct TensorwiseTileConfig<7> : FastAccumTile<128, 256, 2, 1> {};

// FP32 promotion overlapped with the next WGMMAs (sm90_fp8_overlap_mainloop.cuh): N cut into kSlices.
template <>  // 128x192x128, cluster 1x2, cooperative, 2 slices of 96 (accumulator 96 + 2 x 48 registers)
struct TensorwiseTileConfig<8> : TileConfig<128, 192, 1, 2, 2> {};
template <>  // 128x192x128, cluster 2x1, cooperative, 2 slices of 96
struct TensorwiseTileConfig<9> : TileConfig<128, 192, 2, 1, 2> {};
template <>  // 128x256x128, cluster 2x1, cooperative, 4 slices of 64 (accumulator 128 + 2 x 32 registers)
struct TensorwiseTileConfig<10> : TileConfig<128, 256, 2, 1, 4> {};
template <>  // 128x256x128, cluster 1x2, cooperative, 4 slices of 64
struct TensorwiseTileConfig<11> : TileConfig<128, 256, 1, 2, 4> {};
template <>  // config 9 with 2 k-tiles per loop body
struct TensorwiseTileConfig<12> : TileConfig<128, 192, 2, 1, 2, 2> {};
template <>  // config 9 with 4 k-tiles per loop body
struct TensorwiseTileConfig<13> : TileConfig<128, 192, 2, 1, 2, 4> {};

// Configs 14-18: measured in the ninth session, all slower than config 9 (1026 / 774 / 840 / 1022 / 1077 against
// 1111-1161 TFLOP/s at 8192^3, benchmarks/results/h200_sm90_variants.md). The ideas: the last slice's add is
// the part of the promotion left exposed, 1/3 of it with 3 slices; ping-pong overlaps one warpgroup's epilogue
// with the other's mainloop (64x192 per warpgroup: accumulator 96 + 2 x 48 registers), but a lone warpgroup
// keeps too few WGMMAs in flight; larger clusters (TMA multicast of both operands) cut L2 traffic, which is
// not the limit.
template <>  // 128x192x128, cluster 2x1, cooperative, 3 slices of 64
struct TensorwiseTileConfig<14> : TileConfig<128, 192, 2, 1, 3> {};
template <>  // 64x192x128 per warpgroup, cluster 2x1, ping-pong, 2 slices of 96
struct TensorwiseTileConfig<15> : PingpongTile<64, 192, 2, 1, 2> {};
template <>  // 64x256x128 per warpgroup, cluster 2x1, ping-pong, 4 slices of 64 (accumulator 128 + 2 x 32)
struct TensorwiseTileConfig<16> : PingpongTile<64, 256, 2, 1, 4> {};
template <>  // 128x192x128, cluster 2x2, cooperative, 2 slices of 96
struct TensorwiseTileConfig<17> : TileConfig<128, 192, 2, 2, 2> {};
template <>  // 128x192x128, cluster 4x1, cooperative, 2 slices of 96
struct TensorwiseTileConfig<18> : TileConfig<128, 192, 4, 1, 2> {};

template <int kPair, int kOut, bool kBias>
struct Sm90TensorwiseGemm {
  using Ops = sm90::TnOperands<kPair, kOut>;
  using Config = TensorwiseTileConfig<MXPREC_SM90_TENSORWISE_CONFIG>;
  // D = alpha * acc (+ bias[n] with kBias), alpha = *alpha_ptr.
  using FusionOp = sm90::AlphaBiasEpilogue<typename Ops::ElementD, kBias>;
  using Gemm = typename sm90::BuildGemm<Ops, typename Config::TileShape, typename Config::ClusterShape,
                                        typename Config::KernelSchedule, typename Config::EpilogueSchedule,
                                        FusionOp, typename Ops::LayoutA, typename Ops::LayoutB,
                                        Config::kOverlapSlices, Config::kOverlapTiles>::Gemm;

  static typename Gemm::Arguments make_args(const TensorwiseGemmArgs& p) {
    const sm90::PackedProblem<Gemm> pp(p.m, p.n, p.k, p.l, p.sm_count);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {p.m, p.n, p.k, p.l},
        {static_cast<const typename Ops::ElementA*>(p.a), pp.sa, static_cast<const typename Ops::ElementB*>(p.b), pp.sb},
        {{}, nullptr, pp.sc, static_cast<typename Ops::ElementD*>(p.d), pp.sd},
        pp.hw};
    sm90::set_alpha_bias<kBias>(args.epilogue.thread, 1.0f, p.alpha, p.bias);
    return args;
  }
};

template <int kPair, int kOut>
size_t sm90_tensorwise_workspace(const TensorwiseGemmArgs& args) {
  using WithBias = Sm90TensorwiseGemm<kPair, kOut, true>;
  using NoBias = Sm90TensorwiseGemm<kPair, kOut, false>;
  return sm90::workspace_bias_or_not<WithBias, NoBias>(args);
}

template <int kPair, int kOut>
const char* sm90_tensorwise_run(const TensorwiseGemmArgs& args, void* workspace, cudaStream_t stream) {
  using WithBias = Sm90TensorwiseGemm<kPair, kOut, true>;
  using NoBias = Sm90TensorwiseGemm<kPair, kOut, false>;
  static constexpr sm90::RunErrors kErrors{"CUTLASS can_implement rejected the problem", "CUTLASS initialize failed",
                                           "CUTLASS kernel launch failed"};
  return sm90::run_bias_or_not<WithBias, NoBias>(args, workspace, stream, kErrors);
}

#define MXPREC_INSTANTIATE_SM90_TENSORWISE(P, O)                                                    \
  template size_t sm90_tensorwise_workspace<P, O>(const TensorwiseGemmArgs&);                      \
  template const char* sm90_tensorwise_run<P, O>(const TensorwiseGemmArgs&, void*, cudaStream_t);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_IMPL_CUH_
