// An sm_90a FP8 mainloop whose FP32 promotion overlaps the tensor cores' next MMAs.
//
// CUTLASS's FP8 mainloops (MainloopSm90TmaGmmaWarpSpecializedFP8, the non-FastAccum schedules, and the
// block-scaled ...FP8Blockwise) issue a k-tile's WGMMAs (128 of K) into one temporary accumulator, wait for
// all of them (wgmma.wait_group 0), then add the temporary into the FP32 accumulator (one FADD, or FFMA with
// the block scales, per accumulator register). While a warpgroup adds, it has no WGMMA in flight.
// OverlapPromotionMainloop<Base, kSlices, kTiles> keeps one in flight instead:
//
//   the k-tile's N columns are cut into kSlices slices (WGMMAs of N / kSlices); slice j's WGMMAs go into
//   temporary buffer j % 2; after issuing slice j the warpgroup waits until only slice j is in flight
//   (wait_group 1) and adds slice j - 1's buffer into its columns of the accumulator while slice j runs.
//   Every kTiles k-tiles the loop body ends with wait_group 0 and the last slice's add (see mma()).
//
// Register cost: accumulator + 2 buffers of 1/kSlices of it (CUTLASS's: accumulator + 1 full buffer), so
// kSlices 2 costs what CUTLASS's loop costs, 3 and 4 less. Numerics are CUTLASS's: every 128 of K (one
// k-tile, 4 WGMMAs of K 32) the tensor-core partial sums are added into FP32 registers with the same
// arithmetic (block-scaled: BlockScaledPromotion below).
//
// It derives from CUTLASS's collective (everything but mma() is CUTLASS's: TMA loads, shared-memory
// layouts, pipeline, mma_tail) and is written against CuTe's public API. Measured on the H200:
// benchmarks/results/h200_sm90_overlap.md.
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_OVERLAP_MAINLOOP_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_OVERLAP_MAINLOOP_CUH_

#include <type_traits>

#include "cute/algorithm/clear.hpp"
#include "cute/tensor.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace mxprec {
namespace cuda {
namespace sm90 {

// How a finished slice of partial sums enters the FP32 accumulator.
// Per-tensor / row-wise mainloops (their scales are applied in the epilogue): added as they are.
struct UnscaledPromotion {
  CUTLASS_DEVICE void load(int /*stage*/) {}
  template <int kOffset, class Accum, class Buf>
  CUTLASS_DEVICE void add(Accum& accum, Buf const& buf) const {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(buf); ++i) accum(kOffset + i) += buf(i);
  }
};

// CUTLASS's block-scaled FP8 mainloop (KernelTmaWarpSpecializedCooperativeFP8Blockwise): each k-tile's
// partial sums are multiplied by their blocks' scales, read from shared memory once per k-tile, with
// CUTLASS's arithmetic (GmmaFP8Accumulation::scale_core): acc += p * s (one scale per row or per tile,
// s = sa * sb precomputed) or acc += p * sa * sb (scales per row and per column).
template <class Base, class SmemSFA, class SmemSFB, class RegSFA, class RegSFB>
struct BlockScaledPromotion {
  static constexpr int kMs = Base::ScaleMsPerTile, kNs = Base::ScaleNsPerTile;
  SmemSFA smem_a;  // (MMA,MMA_M,MMA_N,(MMA_K,PIPE)), laid out like the accumulator
  SmemSFB smem_b;
  RegSFA sa;  // (MMA,MMA_M,MMA_N): this k-tile's scales (broadcast modes have stride 0)
  RegSFB sb;

  CUTLASS_DEVICE void load(int stage) {
    using namespace cute;
    copy(smem_a(_, _, _, make_coord(_0{}, stage)), sa);
    copy(smem_b(_, _, _, make_coord(_0{}, stage)), sb);
    if constexpr (kMs == 1 && kNs == 1) {
      sa(_0{}) = sa(_0{}) * sb(_0{});
    } else if constexpr (kMs > 1 && kNs == 1) {
      const float b = sb(_0{});
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(filter_zeros(sa)); ++i) filter_zeros(sa)(i) = filter_zeros(sa)(i) * b;
    } else if constexpr (kMs == 1 && kNs > 1) {
      const float a = sa(_0{});
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(filter_zeros(sb)); ++i) filter_zeros(sb)(i) = filter_zeros(sb)(i) * a;
    }
  }
  template <int kOffset, class Accum, class Buf>
  CUTLASS_DEVICE void add(Accum& accum, Buf const& buf) const {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(buf); ++i) {
      if constexpr (kMs == 1 && kNs == 1) accum(kOffset + i) += buf(i) * sa(cute::_0{});
      else if constexpr (kMs > 1 && kNs == 1) accum(kOffset + i) += buf(i) * sa(kOffset + i);
      else if constexpr (kMs == 1 && kNs > 1) accum(kOffset + i) += buf(i) * sb(kOffset + i);
      else accum(kOffset + i) += buf(i) * sa(kOffset + i) * sb(kOffset + i);
    }
  }
};

// Whether Base is CUTLASS's block-scaled FP8 collective (it has per-tile scale counts).
template <class Base, class = void>
struct IsBlockScaledMainloop : std::false_type {};
template <class Base>
struct IsBlockScaledMainloop<Base, std::void_t<decltype(Base::ScaleMsPerTile)>> : std::true_type {};

template <class Base, int kSlices, int kTiles = 1>
struct OverlapPromotionMainloop : Base {
  static_assert(kSlices >= 2 && kSlices <= 4, "kSlices: 2, 3 or 4");
  static_assert(kTiles >= 1, "kTiles: k-tiles per loop body");
  static_assert(kTiles == 1 || !IsBlockScaledMainloop<Base>::value,
                "block scales are loaded per k-tile into one register set: one k-tile per loop body");
  using TileShape = typename Base::TileShape;
  using MainloopPipeline = typename Base::MainloopPipeline;
  using PipelineState = typename Base::PipelineState;
  using TensorStorage = typename Base::TensorStorage;
  using Params = typename Base::Params;

  static constexpr int kBlkM = cute::size<0>(TileShape{});
  static constexpr int kBlkN = cute::size<1>(TileShape{});
  static constexpr int kBlkK = cute::size<2>(TileShape{});
  static constexpr int kSliceN = kBlkN / kSlices;
  static constexpr int kWarpGroups = cute::size(typename Base::TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  static_assert(kBlkN % (8 * kSlices) == 0, "each slice must be a whole WGMMA N (a multiple of 8)");
  // One WGMMA atom of N = kSliceN, warpgroups stacked along M as in the CollectiveBuilder's TiledMma.
  using SliceMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<typename Base::ElementA, typename Base::ElementB, float,
                                 cute::Shape<cute::Int<kBlkM>, cute::Int<kSliceN>, cute::Int<kBlkK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kWarpGroups>, cute::_1, cute::_1>>{}));

  // Same contract as CUTLASS's mma(): accum (this warpgroup's fragment of the tile) receives the sum over
  // k_tile_count k-tiles; every stage but the last is released here, the last by mma_tail().
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const& /*mainloop_params*/) {
    using namespace cute;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), typename Base::SmemLayoutA{});  // (M,K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{});  // (N,K,PIPE)
    const int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    SliceMma slice_mma;
    auto thread_mma = slice_mma.get_slice(make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{})(warp_group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,1,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,kSlices,MMA_K,PIPE)
    static_assert(decltype(size<1>(tCrA))::value == 1, "one WGMMA atom along M per warpgroup");
    static_assert(decltype(size<1>(tCrB))::value == kSlices, "B partitions into kSlices slices");

    auto scales = [&] {
      if constexpr (IsBlockScaledMainloop<Base>::value) {
        // The scale tiles in shared memory as CUTLASS's block-scaled mma() views them: (BLK_M,BLK_N,(BLK_K,PIPE))
        // with the unscaled dimension broadcast, partitioned like the accumulator.
        using LayoutSFA = typename Base::SmemLayoutSFA;
        using LayoutSFB = typename Base::SmemLayoutSFB;
        Tensor sSFA = make_tensor(
            make_smem_ptr(shared_tensors.smem_SFA.data()),
            make_layout(make_shape(get<0>(shape(LayoutSFA{})), get<1>(TileShape{}),
                                   make_shape(get<1>(shape(LayoutSFA{})), get<2>(shape(LayoutSFA{})))),
                        make_stride(get<0>(stride(LayoutSFA{})), _0{},
                                    make_stride(get<1>(stride(LayoutSFA{})), get<2>(stride(LayoutSFA{}))))));
        Tensor sSFB = make_tensor(
            make_smem_ptr(shared_tensors.smem_SFB.data()),
            make_layout(make_shape(get<0>(TileShape{}), get<0>(shape(LayoutSFB{})),
                                   make_shape(get<1>(shape(LayoutSFB{})), get<2>(shape(LayoutSFB{})))),
                        make_stride(_0{}, get<0>(stride(LayoutSFB{})),
                                    make_stride(get<1>(stride(LayoutSFB{})), get<2>(stride(LayoutSFB{}))))));
        typename Base::TiledMma full_mma;
        Tensor tCsSFA = full_mma.get_slice(thread_idx).partition_C(sSFA);
        Tensor tCsSFB = full_mma.get_slice(thread_idx).partition_C(sSFB);
        Tensor tCrSFA = make_tensor_like<float>(tCsSFA(_, _, _, _0{}));
        Tensor tCrSFB = make_tensor_like<float>(tCsSFB(_, _, _, _0{}));
        return BlockScaledPromotion<Base, decltype(tCsSFA), decltype(tCsSFB), decltype(tCrSFA), decltype(tCrSFB)>{
            tCsSFA, tCsSFB, tCrSFA, tCrSFB};
      } else {
        return UnscaledPromotion{};
      }
    }();

    Tensor buf0 = partition_fragment_C(slice_mma, Shape<Int<kBlkM>, Int<kSliceN>>{});  // (MMA,1,1)
    Tensor buf1 = make_fragment_like(buf0);
    constexpr int kSliceRegs = decltype(size(buf0))::value;
    static_assert(kSliceRegs * kSlices == decltype(size(accum))::value,
                  "the accumulator is the slices' fragments in order (N/8 is its outermost value mode)");
    // Every register a WGMMA will write is defined before the first WGMMA: ptxas serializes the WGMMAs
    // (warning C7514) if a non-WGMMA instruction touches a WGMMA accumulator while any WGMMA is in flight,
    // e.g. to materialize an uninitialized buffer.
    clear(accum);
    clear(buf0);
    clear(buf1);
    warpgroup_fence_operand(accum);
    warpgroup_fence_operand(buf0);
    warpgroup_fence_operand(buf1);
    if (k_tile_count <= 0) return;

    PipelineState smem_pipe_release = smem_pipe_read;

    // Issue slice s of the k-tile at smem_pipe_read into buf (waits for the stage on the first slice).
    auto issue = [&](auto s, auto& buf) {
      constexpr int kS = decltype(s)::value;
      const int stage = smem_pipe_read.index();
      if constexpr (kS == 0) {
        auto token = pipeline.consumer_try_wait(smem_pipe_read);
        pipeline.consumer_wait(smem_pipe_read, token);
        scales.load(stage);  // no WGMMA of an earlier k-tile is in flight: the last body ended in wait_group 0
      }
      slice_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < size<2>(tCrA); ++kb) {
        cute::gemm(slice_mma, tCrA(_, 0, kb, stage), tCrB(_, kS, kb, stage), buf(_, 0, 0));
        slice_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();  // no register fence on buf here: it is in flight until a later wait
      if constexpr (kS == kSlices - 1) ++smem_pipe_read;
    };
    // Add buf (complete) into slice s's columns of accum; release the stage after a k-tile's last slice.
    auto retire = [&](auto s, auto& buf, bool release) {
      constexpr int kS = decltype(s)::value;
      warpgroup_fence_operand(buf);
      warpgroup_fence_operand(accum);
      scales.template add<kS * kSliceRegs>(accum, buf);
      warpgroup_fence_operand(accum);
      if (release) {
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
    };

    // kTiles k-tiles (kTiles * kSlices groups g) per loop body: group g is slice g % kSlices of k-tile
    // k + g / kSlices, in buffer g % 2. After issuing group g the warpgroup waits until only g is in flight
    // and adds group g - 1; the body's last group is added after wait_group 0. Nothing is in flight across
    // the loop's back edge: ptxas tracks wait_group N > 0 only within straight-line code, and serializes
    // every WGMMA (warning C7514) if an accumulator is read after a wait_group 1 that follows a WGMMA
    // issued in an earlier iteration.
    auto body = [&](int k, auto tiles) {
      constexpr int kGroups = decltype(tiles)::value * kSlices;
      cute::for_each(make_int_sequence<kGroups>{}, [&](auto g) {
        constexpr int kG = decltype(g)::value;
        if constexpr (kG % 2 == 0) issue(Int<kG % kSlices>{}, buf0);
        else issue(Int<kG % kSlices>{}, buf1);
        if constexpr (kG > 0) {
          constexpr int kPrev = (kG - 1) % kSlices;
          warpgroup_wait<1>();  // group kG - 1 is complete, group kG runs
          if constexpr (kG % 2 == 1) retire(Int<kPrev>{}, buf0, kPrev == kSlices - 1);
          else retire(Int<kPrev>{}, buf1, kPrev == kSlices - 1);
        }
      });
      warpgroup_wait<0>();
      // The stage of the last k-tile of all is released by mma_tail().
      const bool release = k + decltype(tiles)::value < k_tile_count;
      if constexpr ((kGroups - 1) % 2 == 0) retire(Int<kSlices - 1>{}, buf0, release);
      else retire(Int<kSlices - 1>{}, buf1, release);
    };
    int k = 0;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k + kTiles <= k_tile_count; k += kTiles) body(k, Int<kTiles>{});
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k < k_tile_count; ++k) body(k, Int<1>{});
  }
};

}  // namespace sm90
}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_OVERLAP_MAINLOOP_CUH_
