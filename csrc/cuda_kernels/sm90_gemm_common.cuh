// What the three sm_90a CUTLASS FP8 GEMM families (per-tensor, row-wise, block-scaled) share:
// operand types of the built pairs, the "TN" layouts, the CollectiveBuilder assembly of a
// persistent kernel, packed strides, and the workspace / launch sequence. Each family's
// *_impl.cuh adds only its tile, schedule, epilogue fusion and arguments.
// Included by the instantiation TUs only (CUTLASS headers from the pinned nvidia-cutlass wheel).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_GEMM_COMMON_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_GEMM_COMMON_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <type_traits>

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
#include "packed_stride64.h"
#include "sm90_fp8_overlap_mainloop.cuh"

namespace mxprec {
namespace cuda {
namespace sm90 {

// Operand pair index (Fp8Pair in sm90_fp8_gemm_tensorwise.h) -> CUTLASS element types.
template <int kPair>
struct PairTypes;
template <>
struct PairTypes<0> { using A = cutlass::float_e4m3_t; using B = cutlass::float_e4m3_t; };
template <>
struct PairTypes<1> { using A = cutlass::float_e5m2_t; using B = cutlass::float_e4m3_t; };
template <>
struct PairTypes<2> { using A = cutlass::float_e4m3_t; using B = cutlass::float_e5m2_t; };

// Output index (GemmOut) -> CUTLASS element type.
template <int kOut>
struct OutType;
template <>
struct OutType<0> { using T = cutlass::bfloat16_t; };
template <>
struct OutType<1> { using T = float; };

// Types and layouts of a "TN" FP8 GEMM: A (M, K) and B (N, K) K-major, D (M, N) row-major, FP32
// accumulation and epilogue arithmetic, 16-byte aligned rows (TMA).
template <int kPair, int kOut>
struct TnOperands {
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
};

// A persistent sm_90 GEMM from CUTLASS's collective builders: the epilogue (no C operand, D of
// Ops::ElementD) first, so that the mainloop takes the shared memory it leaves. MainloopLayoutA/B
// are the layouts handed to the mainloop builder (the block-scaled mainloop takes
// cute::tuple<Layout, LayoutSF> there). kOverlapSlices > 0 replaces the FP8 mainloop's mma() with
// OverlapPromotionMainloop's (sm90_fp8_overlap_mainloop.cuh): N cut into that many slices, kOverlapTiles
// k-tiles per loop body.
// MXPREC_SM90_EPILOGUE_TILE_N = n > 0: epilogue subtiles of (tile M) x n instead of CUTLASS's automatic
// choice (128 x 32 for these tiles), for A/B builds only (fewer subtiles: fewer barriers per tile, more
// shared memory for the epilogue and fewer mainloop stages).
#ifndef MXPREC_SM90_EPILOGUE_TILE_N
#define MXPREC_SM90_EPILOGUE_TILE_N 0
#endif
template <class TileShape, int kN = MXPREC_SM90_EPILOGUE_TILE_N>
using EpilogueTileOf =
    std::conditional_t<(kN > 0), cute::Shape<cute::Int<decltype(cute::size<0>(TileShape{}))::value>, cute::Int<kN>>,
                       cutlass::epilogue::collective::EpilogueTileAuto>;

template <class Ops, class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule,
          class Fusion, class MainloopLayoutA = typename Ops::LayoutA,
          class MainloopLayoutB = typename Ops::LayoutB, int kOverlapSlices = 0, int kOverlapTiles = 1>
struct BuildGemm {
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      EpilogueTileOf<TileShape>, typename Ops::ElementAcc, typename Ops::ElementCompute, void,
      typename Ops::LayoutD, Ops::kAlignD, typename Ops::ElementD, typename Ops::LayoutD, Ops::kAlignD,
      EpilogueSchedule, Fusion>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Ops::ElementA, MainloopLayoutA, Ops::kAlignA,
      typename Ops::ElementB, MainloopLayoutB, Ops::kAlignB, typename Ops::ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Mainloop = std::conditional_t<(kOverlapSlices > 0),
                                      OverlapPromotionMainloop<CollectiveMainloop, kOverlapSlices, kOverlapTiles>, CollectiveMainloop>;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                          CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

// Packed (dense, batch-outermost) strides of A, B, C, D for an (M, N, K, L) problem, and the
// hardware info of the persistent scheduler.
template <class Gemm>
struct PackedProblem {
  typename Gemm::GemmKernel::StrideA sa;
  typename Gemm::GemmKernel::StrideB sb;
  typename Gemm::GemmKernel::StrideC sc;
  typename Gemm::GemmKernel::StrideD sd;
  cutlass::KernelHardwareInfo hw;

  PackedProblem(int M, int N, int K, int L, int sm_count)
      : sa(packed_stride(decltype(sa){}, M, K, L)),
        sb(packed_stride(decltype(sb){}, N, K, L)),
        sc(packed_stride(decltype(sc){}, M, N, L)),
        sd(packed_stride(decltype(sd){}, M, N, L)) {
    hw.device_id = 0;  // only used when sm_count == 0
    hw.sm_count = sm_count;
  }
};

// Static error strings of one family's launch sequence.
struct RunErrors {
  const char* can_implement;
  const char* initialize;
  const char* launch;
};

// Persistent-scheduler options from the environment, read once per process (tuning experiments;
// unset = CUTLASS's defaults): MXPREC_SM90_SWIZZLE = max_swizzle_size (1, 2, 4, 8), MXPREC_SM90_RASTER
// = "m" | "n" (raster along M / N; default: CUTLASS's heuristic). Unknown values keep the defaults.
struct SchedulerEnv {
  int swizzle = 1;
  int raster = 0;  // 0 heuristic, 1 along M, 2 along N
  SchedulerEnv() {
    if (const char* s = std::getenv("MXPREC_SM90_SWIZZLE")) {
      const int v = std::atoi(s);
      if (v == 1 || v == 2 || v == 4 || v == 8) swizzle = v;
    }
    if (const char* r = std::getenv("MXPREC_SM90_RASTER")) {
      if (r[0] == 'm' && r[1] == 0) raster = 1;
      if (r[0] == 'n' && r[1] == 0) raster = 2;
    }
  }
};
inline const SchedulerEnv& scheduler_env() {
  static const SchedulerEnv env;
  return env;
}

// G::make_args(p) with the scheduler options of scheduler_env() applied.
template <class G, class Args>
typename G::Gemm::Arguments make_args(const Args& p) {
  using RasterOptions = cutlass::gemm::kernel::detail::RasterOrderOptions;
  auto a = G::make_args(p);
  const SchedulerEnv& env = scheduler_env();
  a.scheduler.max_swizzle_size = env.swizzle;
  a.scheduler.raster_order = env.raster == 1   ? RasterOptions::AlongM
                             : env.raster == 2 ? RasterOptions::AlongN
                                               : RasterOptions::Heuristic;
  return a;
}

// Bytes of device workspace family G (with static make_args(Args)) needs for these arguments.
template <class G, class Args>
size_t workspace(const Args& p) {
  auto a = make_args<G>(p);
  return G::Gemm::get_workspace_size(a);
}

// can_implement, initialize, run on `stream`; nullptr on success, else the matching RunErrors string.
template <class G, class Args>
const char* run(const Args& p, void* workspace, cudaStream_t stream, const RunErrors& errors) {
  auto a = make_args<G>(p);
  typename G::Gemm gemm;
  if (gemm.can_implement(a) != cutlass::Status::kSuccess) return errors.can_implement;
  if (gemm.initialize(a, workspace, stream) != cutlass::Status::kSuccess) return errors.initialize;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return errors.launch;
  return nullptr;
}

// The optional bias. Each family builds two kernels, one with a bias row broadcast in the epilogue and one
// without, and launches the one args.bias asks for: a null bias pointer would still cost the
// broadcast's loads (through shared memory for LinCombPerColBias) and an FFMA per element. Measured on the
// H200: +0.2 to +2.4 % across the families (benchmarks/results/h200_sm90_variants.md; why: h200_ncu_gemm.md).
template <class WithBias, class NoBias, class Args>
size_t workspace_bias_or_not(const Args& p) {
  return std::max(workspace<WithBias>(p), workspace<NoBias>(p));
}
template <class WithBias, class NoBias, class Args>
const char* run_bias_or_not(const Args& p, void* workspace, cudaStream_t stream, const RunErrors& errors) {
  return p.bias != nullptr ? run<WithBias>(p, workspace, stream, errors) : run<NoBias>(p, workspace, stream, errors);
}

// Epilogue of the per-tensor and block-scaled families: D = alpha * acc + bias[n] (kBias) or D = alpha * acc
// (ScaledAcc: one FMUL per element), computed in FP32 and rounded once to ElementD. C is void.
template <class ElementD, bool kBias>
using AlphaBiasEpilogue =
    std::conditional_t<kBias, cutlass::epilogue::fusion::LinCombPerColBias<ElementD, float, float, ElementD, float>,
                       cutlass::epilogue::fusion::ScaledAcc<ElementD, float, float>>;

// Sets AlphaBiasEpilogue's arguments: alpha (or *alpha_ptr when not null), beta = 0, the bias (kBias only).
template <bool kBias, class FusionArgs>
void set_alpha_bias(FusionArgs& fusion, float alpha, const float* alpha_ptr, const float* bias) {
  fusion.alpha = alpha;
  fusion.alpha_ptr = alpha_ptr;
  fusion.beta = 0.0f;
  fusion.beta_ptr = nullptr;
  if constexpr (kBias) fusion.bias_ptr = bias;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_GEMM_COMMON_CUH_
