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
// A null bias pointer makes the bias broadcast read zeros (Sm90RowBroadcast's null default).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_IMPL_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_IMPL_CUH_

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/functional.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/numeric_types.h"
#include "cutlass/util/packed_stride.hpp"
#include "sm90_fp8_gemm_rowwise.h"

namespace mxprec {
namespace cuda {
namespace rowwise {

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
struct Sm90RowwiseGemm {
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

  // 128x128x128 CTA tile, 1x2 cluster (TMA multicast of A), cooperative (2 consumer warpgroups).
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
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
  // fma(acc * sa[m], sb[n], bias[n]) in FP32, then one rounding to ElementD.
  using FusionCallbacks = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, ElementCompute, kRound>,
      AccTimesScaleA, ScaleB, Bias>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, EpilogueSchedule, FusionCallbacks>::CollectiveOp;

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

  static typename Gemm::Arguments make_args(const RowwiseGemmArgs& p) {
    const int M = p.m, N = p.n, K = p.k, L = p.l;
    StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, L));
    StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, L));
    StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, L));
    StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, L));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;  // only used when sm_count == 0
    hw.sm_count = p.sm_count;

    // EVT arguments mirror the tree: {child arguments..., node op arguments}.
    typename ScaleA::Arguments scale_a{p.scale_a, 0.0f, {cute::_1{}, cute::_0{}, static_cast<int64_t>(M)}};
    typename ScaleB::Arguments scale_b{p.scale_b, 0.0f, {cute::_0{}, cute::_1{}, static_cast<int64_t>(N)}};
    typename Bias::Arguments bias{p.bias, 0.0f, {cute::_0{}, cute::_1{}, int64_t(0)}};
    typename FusionCallbacks::Arguments thread{{{}, scale_a, {}}, scale_b, bias, {}};

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, L},
        {static_cast<const ElementA*>(p.a), sa, static_cast<const ElementB*>(p.b), sb},
        {thread, nullptr, sc, static_cast<ElementD*>(p.d), sd},
        hw};
    return args;
  }
};

}  // namespace rowwise

template <int kPair, int kOut>
size_t sm90_rowwise_workspace(const RowwiseGemmArgs& args) {
  using G = rowwise::Sm90RowwiseGemm<kPair, kOut>;
  auto a = G::make_args(args);
  return G::Gemm::get_workspace_size(a);
}

template <int kPair, int kOut>
const char* sm90_rowwise_run(const RowwiseGemmArgs& args, void* workspace, cudaStream_t stream) {
  using G = rowwise::Sm90RowwiseGemm<kPair, kOut>;
  auto a = G::make_args(args);
  typename G::Gemm gemm;
  if (gemm.can_implement(a) != cutlass::Status::kSuccess) return "CUTLASS can_implement rejected the row-wise problem";
  if (gemm.initialize(a, workspace, stream) != cutlass::Status::kSuccess) return "CUTLASS initialize failed (row-wise)";
  if (gemm.run(stream) != cutlass::Status::kSuccess) return "CUTLASS kernel launch failed (row-wise)";
  return nullptr;
}

#define MXPREC_INSTANTIATE_SM90_ROWWISE(P, O)                                                     \
  template size_t sm90_rowwise_workspace<P, O>(const RowwiseGemmArgs&);                          \
  template const char* sm90_rowwise_run<P, O>(const RowwiseGemmArgs&, void*, cudaStream_t);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_ROWWISE_IMPL_CUH_
