// CUTLASS 3.x definition of the sm_90a per-tensor FP8 GEMM (see sm90_fp8_gemm_tensorwise.h).
// Included by the instantiation TUs only. Written against CUTLASS's public API (CollectiveBuilder,
// GemmUniversalAdapter); CUTLASS headers come from the pinned nvidia-cutlass wheel (.deps/).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_IMPL_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_IMPL_CUH_

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/numeric_types.h"
#include "cutlass/util/packed_stride.hpp"
#include "sm90_fp8_gemm_tensorwise.h"

namespace mxprec {
namespace cuda {

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

// CTA tile / cluster / schedule. The FP32 promotion of FP8 partial sums (non-FastAccum schedules)
// keeps two accumulator fragments per consumer warpgroup, so a warpgroup tile of 64x256 (the
// 128x256 cooperative tile) needs 2 x 128 accumulator registers and spills (cuobjdump: STACK 248);
// the configs below keep each warpgroup at <= 64x128 (2 x 64 registers) or 64x192.
#ifndef MXPREC_SM90_TENSORWISE_CONFIG
#define MXPREC_SM90_TENSORWISE_CONFIG 3
#endif
template <int kConfig>
struct TensorwiseTileConfig;
template <>  // 128x256x128, cluster 2x1, cooperative: the first version (spills; kept for comparison)
struct TensorwiseTileConfig<0> {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_128>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
template <>  // 128x128x128, cluster 1x2 (TMA multicast of A), cooperative: 2 warpgroups of 64x128
struct TensorwiseTileConfig<1> {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
template <>  // 64x128x128 per warpgroup, cluster 1x2, ping-pong (one warpgroup's epilogue overlaps the other's MMAs)
struct TensorwiseTileConfig<2> {
  using TileShape = cute::Shape<cute::_64, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
};
template <>  // 128x192x128, cluster 1x2, cooperative: 2 warpgroups of 64x192 (2 x 96 accumulator registers)
struct TensorwiseTileConfig<3> {
  using TileShape = cute::Shape<cute::_128, cute::_192, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

template <int kPair, int kOut>
struct Sm90TensorwiseGemm {
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

  using Config = TensorwiseTileConfig<MXPREC_SM90_TENSORWISE_CONFIG>;
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  using KernelSchedule = typename Config::KernelSchedule;
  using EpilogueSchedule = typename Config::EpilogueSchedule;

  // D = alpha * acc + bias[n] (bias_ptr == nullptr: no bias, no loads); C is void.
  using FusionOp = cutlass::epilogue::fusion::LinCombPerColBias<ElementD, ElementCompute, float, ElementD,
                                                                ElementCompute>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, EpilogueSchedule, FusionOp>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignA, ElementB, LayoutB, kAlignB,
      ElementAcc, TileShape, ClusterShape,
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

  static typename Gemm::Arguments make_args(const TensorwiseGemmArgs& p) {
    const int M = p.m, N = p.n, K = p.k, L = p.l;
    StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, L));
    StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, L));
    StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, L));
    StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, L));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;  // only used when sm_count == 0
    hw.sm_count = p.sm_count;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, L},
        {static_cast<const ElementA*>(p.a), sa, static_cast<const ElementB*>(p.b), sb},
        {{}, nullptr, sc, static_cast<ElementD*>(p.d), sd},
        hw};
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.alpha_ptr = p.alpha;
    fusion.beta = 0.0f;
    fusion.beta_ptr = nullptr;
    fusion.bias_ptr = p.bias;
    return args;
  }
};

template <int kPair, int kOut>
size_t sm90_tensorwise_workspace(const TensorwiseGemmArgs& args) {
  using G = Sm90TensorwiseGemm<kPair, kOut>;
  auto a = G::make_args(args);
  return G::Gemm::get_workspace_size(a);
}

template <int kPair, int kOut>
const char* sm90_tensorwise_run(const TensorwiseGemmArgs& args, void* workspace, cudaStream_t stream) {
  using G = Sm90TensorwiseGemm<kPair, kOut>;
  auto a = G::make_args(args);
  typename G::Gemm gemm;
  if (gemm.can_implement(a) != cutlass::Status::kSuccess) return "CUTLASS can_implement rejected the problem";
  if (gemm.initialize(a, workspace, stream) != cutlass::Status::kSuccess) return "CUTLASS initialize failed";
  if (gemm.run(stream) != cutlass::Status::kSuccess) return "CUTLASS kernel launch failed";
  return nullptr;
}

#define MXPREC_INSTANTIATE_SM90_TENSORWISE(P, O)                                                    \
  template size_t sm90_tensorwise_workspace<P, O>(const TensorwiseGemmArgs&);                      \
  template const char* sm90_tensorwise_run<P, O>(const TensorwiseGemmArgs&, void*, cudaStream_t);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_TENSORWISE_IMPL_CUH_
