// CUTLASS 3.x definition of the sm_90a block-scaled FP8 GEMM (see sm90_fp8_gemm_blockwise.h).
// Included by the instantiation TUs sm90_fp8_gemm_blockwise_{bf16,f32}.cu only.
//
// Mainloop: CollectiveBuilder with KernelTmaWarpSpecializedCooperativeFP8Blockwise. In CUTLASS 4.x
// the scale-factor layouts ride along with the operand layouts: the builder takes
// `cute::tuple<LayoutA, LayoutSFA>` / `cute::tuple<LayoutB, LayoutSFB>`, where LayoutSF* are CuTe
// layouts of shape ((granularity, blocks_MN), (granularity_K, blocks_K), L). The granularities
// come from Sm90BlockwiseScaleConfig<1, 128, 128>: one A scale per row and 128 of K (128 per
// 128-row CTA tile, loaded by TMA since they are M-major), one B scale per 128x128 tile (one per
// CTA tile, loaded with cp.async by the producer's auxiliary warp).
// Epilogue: LinCombPerColBias with alpha = 1 (the scales are already in the accumulator):
// D = acc + bias[n], bias_ptr == nullptr: no bias.
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_IMPL_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_IMPL_CUH_

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/numeric_types.h"
#include "cutlass/util/packed_stride.hpp"
#include "sm90_fp8_gemm_blockwise.h"

namespace mxprec {
namespace cuda {
namespace blockwise {

template <int kPair>
struct PairTypes;
template <>
struct PairTypes<0> { using A = cutlass::float_e4m3_t; using B = cutlass::float_e4m3_t; };
template <>
struct PairTypes<1> { using A = cutlass::float_e5m2_t; using B = cutlass::float_e4m3_t; };
template <>
struct PairTypes<2> { using A = cutlass::float_e4m3_t; using B = cutlass::float_e5m2_t; };

template <int kOut>
struct OutType;
template <>
struct OutType<0> { using T = cutlass::bfloat16_t; };
template <>
struct OutType<1> { using T = float; };

template <int kPair, int kOut>
struct Sm90BlockwiseGemm {
  using ElementA = typename PairTypes<kPair>::A;
  using ElementB = typename PairTypes<kPair>::B;
  using ElementD = typename OutType<kOut>::T;
  using ElementAcc = float;
  using ElementCompute = float;
  using LayoutA = cutlass::layout::RowMajor;     // (M, K), K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // (K, N) column-major == (N, K), K contiguous
  using LayoutD = cutlass::layout::RowMajor;     // (M, N), N contiguous
  static constexpr int kAlignA = 16;
  static constexpr int kAlignB = 16;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  // Scale granularity (M, N, K) = (1, 128, 128); both scale layouts MN-major (the only SM90 form).
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kBlockwiseRowsB, kBlockwiseK>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  // 128x128x128 CTA tile (one K tile = one scale block), 1x2 cluster (TMA multicast of A),
  // cooperative (2 consumer warpgroups, 64 rows each).
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

  using FusionOp = cutlass::epilogue::fusion::LinCombPerColBias<ElementD, ElementCompute, float, ElementD,
                                                                ElementCompute>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, EpilogueSchedule, FusionOp>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA, LayoutSFA>, kAlignA,
      ElementB, cute::tuple<LayoutB, LayoutSFB>, kAlignB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;

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
    const int M = p.m, N = p.n, K = p.k, L = p.l;
    StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, L));
    StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, L));
    StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, L));
    StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, L));
    // ((128, N/128), (128, K/128), L) : ((0, 1), (0, N/128), N/128 * K/128): float[L][K/128][N/128].
    LayoutSFB layout_sfb = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(M, N, K, L));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;  // only used when sm_count == 0
    hw.sm_count = p.sm_count;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, L},
        {static_cast<const ElementA*>(p.a), sa, static_cast<const ElementB*>(p.b), sb, p.sfa, make_layout_sfa(p),
         p.sfb, layout_sfb},
        {{}, nullptr, sc, static_cast<ElementD*>(p.d), sd},
        hw};
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.alpha_ptr = nullptr;
    fusion.beta = 0.0f;
    fusion.beta_ptr = nullptr;
    fusion.bias_ptr = p.bias;
    return args;
  }
};

}  // namespace blockwise

template <int kPair, int kOut>
size_t sm90_blockwise_workspace(const BlockwiseGemmArgs& args) {
  using G = blockwise::Sm90BlockwiseGemm<kPair, kOut>;
  auto a = G::make_args(args);
  return G::Gemm::get_workspace_size(a);
}

template <int kPair, int kOut>
const char* sm90_blockwise_run(const BlockwiseGemmArgs& args, void* workspace, cudaStream_t stream) {
  using G = blockwise::Sm90BlockwiseGemm<kPair, kOut>;
  auto a = G::make_args(args);
  typename G::Gemm gemm;
  if (gemm.can_implement(a) != cutlass::Status::kSuccess) return "CUTLASS can_implement rejected the block-scaled problem";
  if (gemm.initialize(a, workspace, stream) != cutlass::Status::kSuccess) return "CUTLASS initialize failed (block-scaled)";
  if (gemm.run(stream) != cutlass::Status::kSuccess) return "CUTLASS kernel launch failed (block-scaled)";
  return nullptr;
}

#define MXPREC_INSTANTIATE_SM90_BLOCKWISE(P, O)                                                   \
  template size_t sm90_blockwise_workspace<P, O>(const BlockwiseGemmArgs&);                      \
  template const char* sm90_blockwise_run<P, O>(const BlockwiseGemmArgs&, void*, cudaStream_t);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_BLOCKWISE_IMPL_CUH_
