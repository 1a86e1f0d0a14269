// sm_100a (Blackwell, tcgen05) block-scaled MX GEMMs, written against CUTLASS 4.2's public API
// (block-scaled CollectiveBuilder for OpClassBlockScaledTensorOp, GemmUniversalAdapter). Interface,
// operand and scale layouts: sm100_mx_gemm_blockscaled.h.
//
// STATUS: compiled, not run. We have no sm_100 GPU; this TU is built with
//   nvcc -gencode=arch=compute_100a,code=sm_100a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr
// and its SASS checked for the block-scaled tcgen05 MMA (UTCQMMA / PTX
// tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale); see docs/backends/cuda.md, tests/test_cuda_isa.py.
//
// -DMXPREC_SM100_MX_FORMAT=<n> (n from MxprecSm100MxFormat) compiles only that format (build_sm100.sh
// compiles one object per format so that they build in parallel, and links one dispatcher object built
// with -DMXPREC_SM100_MX_FORMAT=0); without the macro every format and the dispatcher are in this TU.
// Compile for sm_100a only (`code=sm_100a`): the tcgen05 instructions are arch-conditional
// (CUTE_ARCH_MMA_SM100A_ENABLED needs __CUDA_ARCH_FEAT_SM100_ALL); for any other target CuTe compiles
// them to a printf + breakpoint, and an sm_100a cubin does not load on other GPUs anyway.
#include "sm100_mx_gemm_blockscaled.h"

#ifndef MXPREC_SM100_MX_FORMAT
#define MXPREC_SM100_MX_ALL 1
#define MXPREC_SM100_MX_WANT(f) 1
#else
#define MXPREC_SM100_MX_ALL 0
#define MXPREC_SM100_MX_WANT(f) (MXPREC_SM100_MX_FORMAT == (f))
#endif

// Per-format C entry points (each object of a split build defines its own format's pair).
#define MXPREC_SM100_MX_DEFINE(F, NAME)                                                                    \
  extern "C" size_t mxprec_sm100_mx_gemm_workspace_##NAME(const MxprecSm100MxGemmArgs* args) {            \
    return mxprec::cuda::sm100::Sm100MxGemm<F>::workspace(*args);                                          \
  }                                                                                                       \
  extern "C" const char* mxprec_sm100_mx_gemm_run_##NAME(const MxprecSm100MxGemmArgs* args, void* ws,     \
                                                         cudaStream_t stream) {                           \
    return mxprec::cuda::sm100::Sm100MxGemm<F>::run(*args, ws, stream);                                    \
  }

#define MXPREC_SM100_MX_DECLARE(NAME)                                                                       \
  extern "C" size_t mxprec_sm100_mx_gemm_workspace_##NAME(const MxprecSm100MxGemmArgs* args);              \
  extern "C" const char* mxprec_sm100_mx_gemm_run_##NAME(const MxprecSm100MxGemmArgs* args, void* ws,     \
                                                         cudaStream_t stream);

#if MXPREC_SM100_MX_ALL || MXPREC_SM100_MX_FORMAT != 0  // the dispatcher-only object needs no CUTLASS
#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/float8.h"
#include "cutlass/float_subbyte.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/numeric_types.h"
#include "cutlass/util/packed_stride.hpp"

namespace mxprec {
namespace cuda {
namespace sm100 {

using namespace cute;

// Per-format CUTLASS types. Both operands use the same MX format; scales are E8M0 per 32 along K.
template <int kFormat>
struct MxFormat;

template <>
struct MxFormat<MXPREC_SM100_MXFP8_E4M3> {
  using ElementPair = cutlass::mx_float8_t<cutlass::float_e4m3_t>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecialized2SmMxf8f6f4Sm100;  // kind::mxf8f6f4, cta_group::2
  using MmaTileShape = Shape<_256, _256, _128>;                             // M spans the SM pair
  static constexpr int kAlign = 16;                                         // elements (16 B)
};

template <>
struct MxFormat<MXPREC_SM100_MXFP6_E2M3> {
  using ElementPair = cutlass::mx_float6_t<cutlass::float_e2m3_t>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecialized2SmMxf8f6f4Sm100;  // 6-bit unpacked to 8 in smem
  using MmaTileShape = Shape<_256, _256, _128>;
  static constexpr int kAlign = 128;  // "16U6" TMA format: 96-byte K rows
};

template <>
struct MxFormat<MXPREC_SM100_MXFP4_E2M1> {
  using ElementPair = cutlass::mx_float4_t<cutlass::float_e2m1_t>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecialized2SmMxf4Sm100;  // kind::mxf4: packed FP4, 2x rate
  using MmaTileShape = Shape<_256, _256, _256>;
  static constexpr int kAlign = 32;  // 16 B
};

template <int kFormat>
struct Sm100MxGemm {
  using F = MxFormat<kFormat>;
  using ElementPairA = typename F::ElementPair;
  using ElementPairB = typename F::ElementPair;
  using ElementD = cutlass::bfloat16_t;
  using ElementAcc = float;
  using ElementCompute = float;
  using LayoutA = cutlass::layout::RowMajor;     // (M, K), K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // (K, N) column-major == (N, K), K contiguous
  using LayoutD = cutlass::layout::RowMajor;     // (M, N), N contiguous
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using ClusterShape = Shape<_2, _1, _1>;  // the 2-SM MMA pair; B is not multicast further

  // D = alpha * acc + bias[n] (bias_ptr == nullptr: no bias loads); no C operand.
  using FusionOp = cutlass::epilogue::fusion::LinCombPerColBias<ElementD, ElementCompute, float, ElementD,
                                                                ElementCompute>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, typename F::MmaTileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, cutlass::epilogue::TmaWarpSpecialized2Sm, FusionOp>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, ElementPairA, LayoutA, F::kAlign,
      ElementPairB, LayoutB, F::kAlign, ElementAcc, typename F::MmaTileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename F::Schedule>::CollectiveOp;

  // Tile scheduler void: the default sm100 persistent scheduler (cluster launch control).
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  using LayoutSFA = typename Gemm::GemmKernel::CollectiveMainloop::LayoutSFA;
  using LayoutSFB = typename Gemm::GemmKernel::CollectiveMainloop::LayoutSFB;
  using Sm1xxBlkScaledConfig = typename Gemm::GemmKernel::CollectiveMainloop::Sm1xxBlkScaledConfig;
  using ElementA = typename Gemm::GemmKernel::CollectiveMainloop::ElementA;
  using ElementB = typename Gemm::GemmKernel::CollectiveMainloop::ElementB;
  using ElementSF = typename Gemm::GemmKernel::CollectiveMainloop::ElementSF;
  static_assert(cute::is_same_v<ElementSF, cutlass::float_ue8m0_t>, "MX scales are E8M0");
  static_assert(Sm1xxBlkScaledConfig::SFVecSize == 32, "MX scale block is 32");

  static typename Gemm::Arguments make_args(const MxprecSm100MxGemmArgs& p) {
    const int M = p.m, N = p.n, K = p.k, L = p.l;
    StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(M, K, L));
    StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(N, K, L));
    StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, make_shape(M, N, L));
    StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(M, N, L));
    // The interleaved 128x4 scale layouts (see the header for the closed form).
    LayoutSFA lsfa = Sm1xxBlkScaledConfig::tile_atom_to_shape_SFA(make_shape(M, N, K, L));
    LayoutSFB lsfb = Sm1xxBlkScaledConfig::tile_atom_to_shape_SFB(make_shape(M, N, K, L));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;  // only used when sm_count == 0
    hw.sm_count = p.sm_count;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, L},
        {static_cast<const ElementA*>(p.a), sa, static_cast<const ElementB*>(p.b), sb,
         reinterpret_cast<const ElementSF*>(p.sfa), lsfa, reinterpret_cast<const ElementSF*>(p.sfb), lsfb},
        {{}, nullptr, sc, static_cast<ElementD*>(p.d), sd},
        hw};
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.alpha_ptr = p.alpha;  // nullptr: use alpha = 1
    fusion.beta = 0.0f;
    fusion.beta_ptr = nullptr;
    fusion.bias_ptr = p.bias;
    return args;
  }

  static size_t workspace(const MxprecSm100MxGemmArgs& p) { return Gemm::get_workspace_size(make_args(p)); }

  static const char* run(const MxprecSm100MxGemmArgs& p, void* workspace, cudaStream_t stream) {
    auto a = make_args(p);
    Gemm gemm;
    if (gemm.can_implement(a) != cutlass::Status::kSuccess) return "CUTLASS can_implement rejected the problem";
    if (gemm.initialize(a, workspace, stream) != cutlass::Status::kSuccess) return "CUTLASS initialize failed";
    if (gemm.run(stream) != cutlass::Status::kSuccess) return "CUTLASS kernel launch failed";
    return nullptr;
  }
};

}  // namespace sm100
}  // namespace cuda
}  // namespace mxprec

#if MXPREC_SM100_MX_WANT(1)  // MXPREC_SM100_MXFP8_E4M3 (enums are invisible to #if)
MXPREC_SM100_MX_DEFINE(MXPREC_SM100_MXFP8_E4M3, mxfp8_e4m3)
#endif
#if MXPREC_SM100_MX_WANT(2)  // MXPREC_SM100_MXFP6_E2M3
MXPREC_SM100_MX_DEFINE(MXPREC_SM100_MXFP6_E2M3, mxfp6_e2m3)
#endif
#if MXPREC_SM100_MX_WANT(3)  // MXPREC_SM100_MXFP4_E2M1
MXPREC_SM100_MX_DEFINE(MXPREC_SM100_MXFP4_E2M1, mxfp4_e2m1)
#endif
#endif  // kernels

// Dispatcher: in the all-formats TU, or in the split build's -DMXPREC_SM100_MX_FORMAT=0 object (which
// then links against the per-format objects, all of which build_sm100.sh compiles).
#if MXPREC_SM100_MX_ALL || MXPREC_SM100_MX_WANT(0)
#if !MXPREC_SM100_MX_ALL
MXPREC_SM100_MX_DECLARE(mxfp8_e4m3)
MXPREC_SM100_MX_DECLARE(mxfp6_e2m3)
MXPREC_SM100_MX_DECLARE(mxfp4_e2m1)
#endif

extern "C" {

int mxprec_sm100_mx_gemm_compiled(int format) {
  return format == MXPREC_SM100_MXFP8_E4M3 || format == MXPREC_SM100_MXFP6_E2M3 ||
         format == MXPREC_SM100_MXFP4_E2M1;
}

int mxprec_sm100_mx_gemm_supported(int format, int64_t m, int64_t n, int64_t k) {
  const int64_t kMax = int64_t{1} << 31;
  if (m <= 0 || n <= 0 || k <= 0 || m >= kMax || n >= kMax || k >= kMax) return 0;
  if (n % 8 != 0) return 0;  // bf16 D rows: 16 bytes for TMA
  switch (format) {
    case MXPREC_SM100_MXFP8_E4M3: return k % 32 == 0;
    case MXPREC_SM100_MXFP6_E2M3: return k % 128 == 0;
    case MXPREC_SM100_MXFP4_E2M1: return k % 32 == 0;
    default: return 0;
  }
}

size_t mxprec_sm100_mx_gemm_workspace(int format, const MxprecSm100MxGemmArgs* args) {
  switch (format) {
    case MXPREC_SM100_MXFP8_E4M3: return mxprec_sm100_mx_gemm_workspace_mxfp8_e4m3(args);
    case MXPREC_SM100_MXFP6_E2M3: return mxprec_sm100_mx_gemm_workspace_mxfp6_e2m3(args);
    case MXPREC_SM100_MXFP4_E2M1: return mxprec_sm100_mx_gemm_workspace_mxfp4_e2m1(args);
    default: return static_cast<size_t>(-1);
  }
}

const char* mxprec_sm100_mx_gemm_run(int format, const MxprecSm100MxGemmArgs* args, void* workspace,
                                     cudaStream_t stream) {
  if (!mxprec_sm100_mx_gemm_supported(format, args->m, args->n, args->k) || args->l <= 0)
    return "unsupported MX format or shape for the sm_100a kernel";
  switch (format) {
    case MXPREC_SM100_MXFP8_E4M3: return mxprec_sm100_mx_gemm_run_mxfp8_e4m3(args, workspace, stream);
    case MXPREC_SM100_MXFP6_E2M3: return mxprec_sm100_mx_gemm_run_mxfp6_e2m3(args, workspace, stream);
    case MXPREC_SM100_MXFP4_E2M1: return mxprec_sm100_mx_gemm_run_mxfp4_e2m1(args, workspace, stream);
    default: return "unsupported MX format";
  }
}

}  // extern "C"
#endif
