// mxprec's own persistent sm_90a FP8 GEMM with the scaling in the mainloop (no CUTLASS): the block-scaled
// family (sm90_fp8_gemm_blockwise.h) written directly against PTX (TMA, mbarriers, WGMMA), so that the loop
// around the WGMMAs is ours: per-warpgroup pipelines and epilogues, no cross-warpgroup barrier after the start.
//
//   D[l, m, n] = sum_kb sa[l, kb, m] * sb[l, kb, n / kRowsB] * sum_{k in block kb} A[l, m, k] * B[l, n, k] (+ bias[n])
//
// Same operands, scale layouts (sfa float[L][K/128][m_pitch], sfb float[L][K/128][N/kRowsB]) and numerics as the
// CUTLASS kernel: every 128 of K (4 WGMMAs of k32) the tensor core's partial sum (fresh registers) is promoted into
// the FP32 accumulator as acc = fma(partial, sa * sb, acc), the product sa * sb rounded to FP32 once.
//
// kRowsB == 0 (kEpilogueScaled): the per-tensor and row-wise families. No scales in the mainloop: every 128 of K
// the partial sum is promoted as acc += partial, and the epilogue applies the scales (EpilogueScales), as the
// CUTLASS per-tensor / row-wise kernels do (sm90_fp8_gemm_tensorwise.h, sm90_fp8_gemm_rowwise.h). With bf16 output
// and 128 / 160 columns two warps of the producer warpgroup issue their TMA stores (kStoreWarp, SmemLayout; also
// with 128x128 B scales since the fortieth session). The 160 / 192-column tiles of every family split each k block
// into two half-width WGMMA groups (kSplitN).
//
// CTA: 384 threads, a 128 x kBlockN output tile (kBlockN = 128, 160 or 192). Warpgroup 0 (40 registers) is the
// producer: one thread issues the TMA loads of A, B and the A scales (with kRowsB == 1 also the B scales) into a
// kStages-deep ring of shared-memory stages. Warpgroups 1 and 2 (232 registers) each own 64 rows of the tile: per
// k block a warpgroup waits for the stage, issues its 4 WGMMAs, waits for them, releases the stage (one arrive per
// warp, on every CTA of the cluster) and adds the scaled partial sum (with 128x128 B scales and 128 columns while
// the next k block's WGMMAs run). The two consumer warpgroups never synchronise with each other, so one's
// promotion and epilogue can overlap the other's WGMMAs. Epilogue: bias in FP32, then bf16 through per-warpgroup
// staging buffers and TMA stores, f32 from registers. Persistent: as many clusters as fit on the device, each
// walking cluster tiles cluster_id, cluster_id + clusters, ... of a raster grouped by kGroupM row blocks.
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_CUH_

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "mbarrier.cuh"
#include "sm90_fp8_gemm_blockwise.h"
#include "split_tail.h"

namespace mxprec {
namespace cuda {
namespace persistent {

template <int N>
using IntC = std::integral_constant<int, N>;  // compile-time counts passed to the consumer's lambdas

constexpr int kBlockM = 128;       // rows per CTA tile (2 consumer warpgroups x 64)
constexpr int kBlockK = 128;       // K per stage = one scale block
constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups
constexpr int kGroupM = 8;         // row blocks per raster group

// ---------------------------------------------------------------------------------------------------------------
// PTX wrappers
// smem_u32, mbar_init, mbar_arrive_expect_tx, mbar_arrive, mbar_wait: mbarrier.cuh (shared-window addresses).
// Arrive on the barrier at the same shared-memory offset as `bar` in the cluster's CTA `rank`. The default
// (.release.cta) form, as CUTLASS's ClusterBarrier::arrive(cta_id): `.release.cluster` compiles to a MEMBAR.ALL.GPU
// in front of every arrive (measured: 40 % slower). What the arrive publishes is that the warp's WGMMAs finished
// reading the stage, complete at wgmma.wait_group.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float2 lds_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
// 3-D TMA tile load into shared memory, completing its bytes on `bar`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// The same, multicast to the CTAs of the cluster in `mask` (same shared-memory offset and barrier in each).
__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                                      int c1, int c2, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(mask)
      : "memory");
}
// 3-D TMA store of a shared-memory box (bulk-group completion), and its group bookkeeping.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {  // at most kPending groups still reading shared memory
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Generic-proxy shared-memory writes visible to the async proxy (the TMA store that reads them).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrive on named barrier `id` without waiting (the other side waits with named_barrier_sync).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// All threads of every CTA of the cluster (release / acquire: barrier inits and shared-memory lifetimes).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving register reads / writes of `r` across the WGMMA fences.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// WGMMA shared-memory descriptor of a K-major operand tile stored with the 128-byte swizzle (TMA's
// CU_TENSOR_MAP_SWIZZLE_128B): rows of 128 bytes, 8-row core-matrix groups 1024 bytes apart (SBO), the tile base
// 1024-byte aligned. Advancing the start address by 32 bytes (+2 in the descriptor) selects the next k32 slice of
// the 128-byte rows; +kBytes >> 4 moves to another tile (addresses stay below 2^18, in the 14-bit field).
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t smem_addr) {
  const uint64_t addr = smem_addr;
  uint64_t desc = (addr & 0x3FFFFu) >> 4;  // start address
  desc |= uint64_t(1) << 16;              // leading byte offset (unused by swizzled K-major layouts)
  desc |= uint64_t(1024 >> 4) << 32;      // stride byte offset
  desc |= uint64_t(1) << 62;              // 128-byte swizzle
  return desc;
}

// clang-format off
// The accumulator registers of a WGMMA, in chunks: the PTX operand list (%0 ...) and the asm outputs (d[0] ...).
#define MXPREC_WGMMA_REGS_0_63  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"   \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"   \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"   \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MXPREC_WGMMA_REGS_64_79  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define MXPREC_WGMMA_REGS_80_95  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define MXPREC_WGMMA_D_0_63(d)  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),  \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),  \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),  \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),  \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MXPREC_WGMMA_D_64_79(d)  \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),  \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define MXPREC_WGMMA_D_80_95(d)  \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),  \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
// The half-width WGMMAs of the split 160 / 192-column tiles: 40 / 48 accumulator registers.
#define MXPREC_WGMMA_REGS_0_39  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"  \
  "%32, %33, %34, %35, %36, %37, %38, %39"
#define MXPREC_WGMMA_REGS_40_47  \
  "%40, %41, %42, %43, %44, %45, %46, %47"
#define MXPREC_WGMMA_D_0_39(d)  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),  \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define MXPREC_WGMMA_D_40_47(d)  \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
// d[0 .. N/2) [+]= A * B^T, one wgmma.mma_async of SHAPE (m64nNk32); IA / IB / IP: the operand numbers of the two
// descriptors and the accumulate flag (N/2, N/2 + 1, N/2 + 2); the outputs follow the descriptor arguments.
#define MXPREC_WGMMA_ASM(SHAPE, TYPES, REGS, IA, IB, IP, desc_a, desc_b, scale_d, ...)  \
  asm volatile(  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"  \
      "wgmma.mma_async.sync.aligned." SHAPE ".f32" TYPES " "  \
      "{" REGS "}, %" #IA ", %" #IB ", p, 1, 1;\n}\n"  \
      : __VA_ARGS__  \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define MXPREC_WGMMA_64x128x32(TYPES, d, desc_a, desc_b, scale_d)  \
  MXPREC_WGMMA_ASM("m64n128k32", TYPES, MXPREC_WGMMA_REGS_0_63, 64, 65, 66, desc_a, desc_b, scale_d,  \
                   MXPREC_WGMMA_D_0_63(d))
#define MXPREC_WGMMA_64x80x32(TYPES, d, desc_a, desc_b, scale_d)  \
  MXPREC_WGMMA_ASM("m64n80k32", TYPES, MXPREC_WGMMA_REGS_0_39, 40, 41, 42, desc_a, desc_b, scale_d,  \
                   MXPREC_WGMMA_D_0_39(d))
#define MXPREC_WGMMA_64x96x32(TYPES, d, desc_a, desc_b, scale_d)  \
  MXPREC_WGMMA_ASM("m64n96k32", TYPES, MXPREC_WGMMA_REGS_0_39 "," MXPREC_WGMMA_REGS_40_47, 48, 49, 50, desc_a,  \
                   desc_b, scale_d, MXPREC_WGMMA_D_0_39(d), MXPREC_WGMMA_D_40_47(d))
// The wider tiles (MXPREC_SM90_BLOCKWISE_TILE_N): 80 / 96 accumulator registers per thread.
#define MXPREC_WGMMA_64x160x32(TYPES, d, desc_a, desc_b, scale_d)  \
  MXPREC_WGMMA_ASM("m64n160k32", TYPES, MXPREC_WGMMA_REGS_0_63 "," MXPREC_WGMMA_REGS_64_79, 80, 81, 82, desc_a,  \
                   desc_b, scale_d, MXPREC_WGMMA_D_0_63(d), MXPREC_WGMMA_D_64_79(d))
#define MXPREC_WGMMA_64x192x32(TYPES, d, desc_a, desc_b, scale_d)  \
  MXPREC_WGMMA_ASM("m64n192k32", TYPES,  \
                   MXPREC_WGMMA_REGS_0_63 "," MXPREC_WGMMA_REGS_64_79 "," MXPREC_WGMMA_REGS_80_95, 96, 97, 98,  \
                   desc_a, desc_b, scale_d, MXPREC_WGMMA_D_0_63(d), MXPREC_WGMMA_D_64_79(d), MXPREC_WGMMA_D_80_95(d))

// clang-format on

// d (kBlockN / 2 floats per thread) [+]= A(64 x 32) * B(kBlockN x 32)^T for the operand pair kPair.
#define MXPREC_WGMMA_PAIR(N, d, desc_a, desc_b, accumulate)                  \
  if constexpr (kPair == 0) {                                                 \
    MXPREC_WGMMA_64x##N##x32(".e4m3.e4m3", d, desc_a, desc_b, accumulate);    \
  } else if constexpr (kPair == 1) {                                          \
    MXPREC_WGMMA_64x##N##x32(".e5m2.e4m3", d, desc_a, desc_b, accumulate);    \
  } else {                                                                    \
    MXPREC_WGMMA_64x##N##x32(".e4m3.e5m2", d, desc_a, desc_b, accumulate);    \
  }
template <int kPair, int kBlockN>
__device__ __forceinline__ void wgmma_fp8(float* d, uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  static_assert(kBlockN == 80 || kBlockN == 96 || kBlockN == 128 || kBlockN == 160 || kBlockN == 192,
                "WGMMA widths built: 80, 96 (halves of the split tiles), 128, 160, 192");
  if constexpr (kBlockN == 80) {
    MXPREC_WGMMA_PAIR(80, d, desc_a, desc_b, accumulate)
  } else if constexpr (kBlockN == 96) {
    MXPREC_WGMMA_PAIR(96, d, desc_a, desc_b, accumulate)
  } else if constexpr (kBlockN == 128) {
    MXPREC_WGMMA_PAIR(128, d, desc_a, desc_b, accumulate)
  } else if constexpr (kBlockN == 160) {
    MXPREC_WGMMA_PAIR(160, d, desc_a, desc_b, accumulate)
  } else {
    MXPREC_WGMMA_PAIR(192, d, desc_a, desc_b, accumulate)
  }
}
#undef MXPREC_WGMMA_PAIR

// ---------------------------------------------------------------------------------------------------------------
// Shared memory: kStages x (A tile, B tile, A scales[, B scales]) and the full / empty barriers.
// bf16 output leaves through shared memory and TMA stores (MXPREC_PERSISTENT_TMA_STORE, default on): per consumer
// warpgroup two 64 x 32 staging buffers (4 KB, 64-byte swizzle); f32 output is stored from registers.
#ifndef MXPREC_PERSISTENT_SB_AHEAD
#define MXPREC_PERSISTENT_SB_AHEAD 4
#endif
constexpr int kSbAhead = MXPREC_PERSISTENT_SB_AHEAD;  // k blocks between a 128x128 B scale's load and its use
#ifndef MXPREC_PERSISTENT_TMA_STORE
#define MXPREC_PERSISTENT_TMA_STORE 1
#endif
// Epilogue-scaled 160 / 192-column tiles: split k loop (kSplitN below); 0 selects the one-group loop.
#ifndef MXPREC_PERSISTENT_SPLIT_N
#define MXPREC_PERSISTENT_SPLIT_N 1
#endif
// The block-scaled 160 / 192-column tiles too (twenty-eighth session); 0 keeps their one-group loop.
#ifndef MXPREC_PERSISTENT_SPLIT_N_BLOCK
#define MXPREC_PERSISTENT_SPLIT_N_BLOCK 1
#endif
// 1x128 B scales (the one-group and the split k loop): 1 reads a k block's B scales from shared memory into
// registers right after issuing its WGMMAs, so the loads complete under them; 2 does the same with one 32-bit load
// per scale per warp and shuffles to the lanes that use it (a thread's LDS.64 costs 2 shared-memory wavefronts
// while 8 lanes read each address: with 1 and 0 the scales' loads are ~30 % of the Wgrad kernel's shared-memory
// traffic); 0 reads them in the promotion; 3 (the default) is 1 in the one-group loop (128 columns) and 0 in the
// split loop (160 / 192). Forty-sixth session (h200_wgrad_promotion.md, two rounds each): 1 took the 128-column
// loop +3-6 % (e.g. 4096x16384x4096 900 -> 945 TFLOP/s) but the 192-column split loop -7 to -8 %; 2 was 7-14 %
// slower than 0 everywhere.
#ifndef MXPREC_PERSISTENT_SB_EARLY
#define MXPREC_PERSISTENT_SB_EARLY 3
#endif
// Timing experiments only (wrong results): 1 replaces the epilogue-scaled kernels' epilogue by a sum of the
// accumulators (so the promotion stays), 2 drops their promotion FADDs.
#ifndef MXPREC_PERSISTENT_EXPERIMENT
#define MXPREC_PERSISTENT_EXPERIMENT 0
#endif
constexpr int kEpiCols = 32;                       // columns per TMA store (64 bytes of bf16)
constexpr int kEpiBufBytes = 64 * kEpiCols * 2;    // one 64 x 32 bf16 buffer
// bf16 output: a warp of the producer warpgroup per consumer warpgroup issues its TMA stores from staging buffers
// that hold the warpgroup's whole tile (where they fit next to the stages: the 128- and 160-column tiles of the
// epilogue-scaled and 128x128-scaled families), so the consumer warpgroup only writes shared memory and goes on to
// its next tile (0: the consumers store, two 64 x 32 buffers). Not for 1x128 B scales (not measured with them).
#ifndef MXPREC_PERSISTENT_STORE_WARP
#define MXPREC_PERSISTENT_STORE_WARP 1
#endif
constexpr int kStoreThreads = 128 + 32;  // named barriers between a consumer warpgroup and its store warp

template <int kBlockN, int kRowsB, int kStages, bool kTmaStore = false>
struct SmemLayout {
  static constexpr int kABytes = kBlockM * kBlockK;           // e4m3/e5m2: one byte per element
  static constexpr int kBBytes = kBlockN * kBlockK;
  static constexpr int kSfaBytes = kRowsB == 0 ? 0 : kBlockM * 4;  // kRowsB == 0: no scales in the mainloop
  static constexpr int kSfbBytes = kRowsB == 1 ? kBlockN * 4 : 0;  // per-row B scales ride in shared memory
  static constexpr int kStageTx = kABytes + kBBytes + kSfaBytes + kSfbBytes;
  static constexpr int kA = 0;
  static constexpr int kB = kA + kStages * kABytes;
  static constexpr int kSfa = kB + kStages * kBBytes;
  static constexpr int kSfb = kSfa + kStages * kSfaBytes;
  static constexpr int kEpi = (kSfb + kStages * kSfbBytes + 511) / 512 * 512;
  // Staging per consumer warpgroup: two 64 x 32 buffers, or (kStoreWarp) one per 32-column slice of its tile.
  static constexpr int kWholeTileEpiBytes = 2 * (kBlockN / kEpiCols) * kEpiBufBytes;
  static constexpr bool kStoreWarp = kTmaStore && kRowsB != 1 && MXPREC_PERSISTENT_STORE_WARP &&
                                     kEpi + kWholeTileEpiBytes + 2 * kStages * 8 + 1024 <= 227 * 1024;
  static constexpr int kEpiBufs = kStoreWarp ? kBlockN / kEpiCols : 2;  // 64 x 32 buffers per warpgroup
  static constexpr int kEpiBytes = kTmaStore ? 2 * kEpiBufs * kEpiBufBytes : 0;
  static constexpr int kBars = kEpi + kEpiBytes;
  static constexpr int kBytes = kBars + 2 * kStages * 8;
  static constexpr int kAlloc = kBytes + 1024;  // slack to align the base to 1024 bytes
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzled tiles need 1024-byte alignment");
  static_assert(!kTmaStore || kEpi % 512 == 0, "64-byte swizzled staging buffers need 512-byte alignment");
};

struct TileCoord {
  int l, m_blk, n_blk;
};

// Tile t of the grouped raster over a (num_m x num_n) grid per batch: groups of kGroupM row blocks, column blocks
// outer within a group. With clusters the grid is that of cluster tiles (kClusterM x kClusterN CTA tiles each).
__device__ __forceinline__ TileCoord tile_coord(int t, int num_m, int num_n) {
  const int per_l = num_m * num_n;
  TileCoord c;
  c.l = t / per_l;
  const int r = t - c.l * per_l;
  const int group_size = kGroupM * num_n;
  const int g = r / group_size;
  const int first_m = g * kGroupM;
  const int gm = min(num_m - first_m, kGroupM);
  const int in_group = r - g * group_size;
  c.m_blk = first_m + in_group % gm;
  c.n_blk = in_group / gm;
  return c;
}

// CTA tile of cluster rank (m_rank = rank % kClusterM, n_rank = rank / kClusterM) in cluster tile t.
template <int kClusterM, int kClusterN>
__device__ __forceinline__ TileCoord cta_tile_coord(int t, int num_cm, int num_cn, int m_rank, int n_rank) {
  const TileCoord c = tile_coord(t, num_cm, num_cn);
  return TileCoord{c.l, c.m_blk * kClusterM + m_rank, c.n_blk * kClusterN + n_rank};
}

template <int kOut>
__device__ __forceinline__ void store_pair(void* d, size_t idx, float x, float y) {
  if constexpr (kOut == 0) {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(d) + idx) = __floats2bfloat162_rn(x, y);
  } else {
    *reinterpret_cast<float2*>(static_cast<float*>(d) + idx) = make_float2(x, y);
  }
}

// Stores kAcc accumulators of one thread (rows r0 and r0 + 8, columns n0 + 8 j and + 1) into D[l] from registers;
// rows >= m and, in a partial last column tile (kWide), columns >= n are not stored.
template <int kOut, int kAcc, bool kWide>
__device__ __forceinline__ void store_registers(void* d, const float* acc, int l, int m, int n, int r0, int n0) {
  const int r1 = r0 + 8;
  const size_t base_l = static_cast<size_t>(l) * m * n;
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    const int col = n0 + 8 * j;
    if (kWide && col >= n) continue;
    if (r0 < m) store_pair<kOut>(d, base_l + static_cast<size_t>(r0) * n + col, acc[4 * j], acc[4 * j + 1]);
    if (r1 < m) store_pair<kOut>(d, base_l + static_cast<size_t>(r1) * n + col, acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// Writes 32-column slice `slice` of a consumer warpgroup's accumulators (this thread: rows r_lo and r_lo + 8 of
// the warpgroup's 64, columns 2 * (lane % 4) and + 1 of each 8-column group) as bf16 into the 64 x 32 staging
// buffer `buf`, with TMA's 64-byte swizzle: 16-byte chunk c of row r at c ^ ((r >> 1) & 3), conflict-free.
__device__ __forceinline__ void stage_slice_bf16(const float* acc, int slice, uint32_t buf, int r_lo, int lane) {
#pragma unroll
  for (int jj = 0; jj < kEpiCols / 8; ++jj) {
    const int j = slice * (kEpiCols / 8) + jj;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r_lo + 8 * h;
      const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      sts_u32(buf + r * (kEpiCols * 2) + ((jj ^ ((r >> 1) & 3)) * 16) + (lane % 4) * 4,
              *reinterpret_cast<const uint32_t*>(&v));
    }
  }
}

// Issues the 4 WGMMAs (k32 each) of one 128-deep k block into `part` (zeroed by the first) and commits them.
template <int kPair, int kBlockN>
__device__ __forceinline__ void issue_k_block(float* part, uint64_t desc_a, uint64_t desc_b) {
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) fence_operand(part[i]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk) {
    wgmma_fp8<kPair, kBlockN>(part, desc_a + 2 * kk, desc_b + 2 * kk, kk > 0 ? 1u : 0u);
  }
  wgmma_commit();
}

// acc += part * s for kGroups 8-column groups of the thread's two rows (s0: row0, s1: row0 + 8): part's groups
// 0 .. kGroups are the tile's groups kJ0 .. kJ0 + kGroups (kJ0 > 0: the second half of a split tile). s = the first
// 128-column B scale tile's product for tile groups t < kLo, the second's for the rest (tiles wider than 128 columns).
template <int kGroups, int kJ0, int kLo>
__device__ __forceinline__ void promote_groups(float* acc, const float* part, float s0_lo, float s1_lo, float s0_hi,
                                               float s1_hi) {
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const int t = kJ0 + j;
    const float s0 = t < kLo ? s0_lo : s0_hi, s1 = t < kLo ? s1_lo : s1_hi;
    acc[4 * t + 0] = fmaf(part[4 * j + 0], s0, acc[4 * t + 0]);
    acc[4 * t + 1] = fmaf(part[4 * j + 1], s0, acc[4 * t + 1]);
    acc[4 * t + 2] = fmaf(part[4 * j + 2], s1, acc[4 * t + 2]);
    acc[4 * t + 3] = fmaf(part[4 * j + 3], s1, acc[4 * t + 3]);
  }
}
// The same, for a tile whose first column lies `off` (a multiple of 32) past a 128-column B scale boundary: its
// first (128 - off) columns take the first scale. One uniform branch per k block picks the unrolled copy.
template <int kGroups, int kJ0, int kBlockN>
__device__ __forceinline__ void promote_two_scale_tiles(float* acc, const float* part, int off, float s0_lo,
                                                        float s1_lo, float s0_hi, float s1_hi) {
  static_assert(kBlockN % 32 == 0 && kBlockN + 128 - (kBlockN % 64 == 0 ? 64 : 32) <= 256,
                "at most two B scale tiles per CTA tile");
  if (off == 0) {
    promote_groups<kGroups, kJ0, 16>(acc, part, s0_lo, s1_lo, s0_hi, s1_hi);
  } else if (off == 64) {
    promote_groups<kGroups, kJ0, 8>(acc, part, s0_lo, s1_lo, s0_hi, s1_hi);
  } else if constexpr (kBlockN % 64 != 0) {  // off is a multiple of 64 when kBlockN is
    if (off == 32) {
      promote_groups<kGroups, kJ0, 12>(acc, part, s0_lo, s1_lo, s0_hi, s1_hi);
    } else {
      promote_groups<kGroups, kJ0, 4>(acc, part, s0_lo, s1_lo, s0_hi, s1_hi);
    }
  }
}
// One column group of a thread's accumulators with 1x128 B scales: acc[0..3] += part[0..3] * (sa * sb), rows r0
// (registers 0, 1) and r0 + 8 (2, 3) with A scales sa0 / sa1, the group's two columns with B scales sbv.x / sbv.y.
__device__ __forceinline__ void promote_column_group(float* acc, const float* part, float sa0, float sa1,
                                                     float2 sbv) {
  acc[0] = fmaf(part[0], sa0 * sbv.x, acc[0]);
  acc[1] = fmaf(part[1], sa0 * sbv.y, acc[1]);
  acc[2] = fmaf(part[2], sa1 * sbv.x, acc[2]);
  acc[3] = fmaf(part[3], sa1 * sbv.y, acc[3]);
}
// 1x128 B scales: acc += part * (sa * sb[n]) for kGroups column groups (tile groups kJ0 ..), sb of the tile's columns
// read from the stage's shared-memory B scales at `sfb` (this thread's first column), two per group.
template <int kGroups, int kJ0>
__device__ __forceinline__ void promote_column_scales(float* acc, const float* part, float sa0, float sa1,
                                                      uint32_t sfb) {
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    promote_column_group(acc + 4 * (kJ0 + j), part + 4 * j, sa0, sa1, lds_f32x2(sfb + 32 * (kJ0 + j)));
  }
}
// The same in two steps (MXPREC_PERSISTENT_SB_EARLY): load_column_scales reads the B scales of groups kJ0 ..
// kJ0 + kGroups - 1 into registers ahead of the promotion, promote_loaded_column_scales promotes with them.
template <int kGroups, int kJ0>
__device__ __forceinline__ void load_column_scales(float2* sbv, uint32_t sfb) {
#pragma unroll
  for (int j = 0; j < kGroups; ++j) sbv[j] = lds_f32x2(sfb + 32 * (kJ0 + j));
}
// MXPREC_PERSISTENT_SB_EARLY=2: the same values as load_column_scales, from the stage's B scales at `sfb_tile`
// (the tile's column 0): lane l of the warp loads column 8 kJ0 + 32 i + l, and each thread takes its two columns
// of group j (8 j + 2 (lane % 4) and the next, counted from column 8 kJ0) from the lanes that loaded them.
template <int kGroups, int kJ0>
__device__ __forceinline__ void shuffle_column_scales(float2* sbv, uint32_t sfb_tile, int lane) {
  constexpr int kCols = 8 * kGroups, kLoads = (kCols + 31) / 32;
  float v[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    v[i] = 32 * i + lane < kCols ? lds_f32(sfb_tile + 4 * (8 * kJ0 + 32 * i + lane)) : 0.f;
  }
  const int src = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {  // 8 j + src <= 8 j + 6 lies in load j / 4, at lane 8 (j % 4) + src
    sbv[j].x = __shfl_sync(0xffffffffu, v[j / 4], 8 * (j % 4) + src);
    sbv[j].y = __shfl_sync(0xffffffffu, v[j / 4], 8 * (j % 4) + src + 1);
  }
}
template <int kGroups, int kJ0>
__device__ __forceinline__ void promote_loaded_column_scales(float* acc, const float* part, float sa0, float sa1,
                                                             const float2* sbv) {
#pragma unroll
  for (int j = 0; j < kGroups; ++j) promote_column_group(acc + 4 * (kJ0 + j), part + 4 * j, sa0, sa1, sbv[j]);
}

// The epilogue's scales when kRowsB == 0. Per-tensor (row == nullptr): D = alpha * acc, or fma(alpha, acc,
// bias[n]). Row-wise: D = (acc * row[l, m]) * col[l, n], or fma(acc * row[l, m], col[l, n], bias[n]). The same
// expressions as the CUTLASS kernels' epilogues, so for the same acc the outputs agree bit for bit.
// Per-tensor: alpha = scale_a * scale_b is formed in the kernel (one FP32 product, as the CUTLASS path's
// scale_product_kernel forms it), so the call needs no kernel before the GEMM.
struct EpilogueScales {
  const float* scale_a;  // per-tensor: A's one float scale; unused when row != nullptr
  const float* scale_b;  // per-tensor: B's one float scale
  const float* row;      // row-wise: (L, M) scales of A's rows, or nullptr (per-tensor)
  const float* col;      // row-wise: (L, N) scales of B's rows (the output columns)
};

// D values of one thread's accumulators (rows r0 and r0 + 8, columns n0 + 8 j, + 1) under EpilogueScales, in
// place. Rows >= m and, in a partial last column tile (kWide), columns >= n are not stored: their scales are not read.
template <int kAcc, bool kWide>
__device__ __forceinline__ void apply_epilogue_scales(float* acc, const EpilogueScales& es, const float* bias,
                                                      int l, int m, int n, int r0, int n0) {
  if (es.row == nullptr) {
    const float alpha = __ldg(es.scale_a) * __ldg(es.scale_b);
#pragma unroll
    for (int j = 0; j < kAcc / 4; ++j) {
      if (bias != nullptr) {
        if (kWide && n0 + 8 * j >= n) continue;
        const float2 bv = __ldg(reinterpret_cast<const float2*>(bias + n0 + 8 * j));
        acc[4 * j + 0] = fmaf(alpha, acc[4 * j + 0], bv.x);
        acc[4 * j + 1] = fmaf(alpha, acc[4 * j + 1], bv.y);
        acc[4 * j + 2] = fmaf(alpha, acc[4 * j + 2], bv.x);
        acc[4 * j + 3] = fmaf(alpha, acc[4 * j + 3], bv.y);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[4 * j + i] *= alpha;
      }
    }
    return;
  }
  const float* row = es.row + static_cast<size_t>(l) * m;
  const float sa0 = r0 < m ? __ldg(row + r0) : 0.f, sa1 = r0 + 8 < m ? __ldg(row + r0 + 8) : 0.f;
  const float* col = es.col + static_cast<size_t>(l) * n;
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    const int c = n0 + 8 * j;
    if (kWide && c >= n) continue;
    const float2 sb = __ldg(reinterpret_cast<const float2*>(col + c));
    const float t0 = acc[4 * j + 0] * sa0, t1 = acc[4 * j + 1] * sa0;
    const float t2 = acc[4 * j + 2] * sa1, t3 = acc[4 * j + 3] * sa1;
    if (bias != nullptr) {
      const float2 bv = __ldg(reinterpret_cast<const float2*>(bias + c));
      acc[4 * j + 0] = fmaf(t0, sb.x, bv.x);
      acc[4 * j + 1] = fmaf(t1, sb.y, bv.y);
      acc[4 * j + 2] = fmaf(t2, sb.x, bv.x);
      acc[4 * j + 3] = fmaf(t3, sb.y, bv.y);
    } else {
      acc[4 * j + 0] = t0 * sb.x;
      acc[4 * j + 1] = t1 * sb.y;
      acc[4 * j + 2] = t2 * sb.x;
      acc[4 * j + 3] = t3 * sb.y;
    }
  }
}

// The block-scaled families' epilogue: acc += bias[n] in FP32 before the one rounding (without a bias D = acc
// exactly). Columns >= n of a partial last column tile (kWide) are skipped (N % 128 == 0: both or neither of a pair).
template <int kAcc, bool kWide>
__device__ __forceinline__ void add_bias(float* acc, const float* bias, int n, int n0) {
  if (bias == nullptr) return;
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    if (kWide && n0 + 8 * j >= n) continue;
    const float2 bv = __ldg(reinterpret_cast<const float2*>(bias + n0 + 8 * j));
    acc[4 * j + 0] += bv.x;
    acc[4 * j + 1] += bv.y;
    acc[4 * j + 2] += bv.x;
    acc[4 * j + 3] += bv.y;
  }
}

// Split tail (every family): SplitTail and work_item in split_tail.h; split_tail_reduce_kernel below.

// Consumer state of one k block between its WGMMA issue and its promotion.
struct KBlockScales {
  float sa0, sa1;  // A scales of this thread's two rows
  float sb;        // B scale of the 128x128 tile (kRowsB == 128) of the CTA tile's first 128 columns
  float sb_hi;     // and of the next 128 columns (kBlockN > 128: the tile straddles two B scale tiles)
  int stage;       // the shared-memory stage holding the k block (released after its promotion)
};

// Cluster of kClusterM x kClusterN CTAs (rank r: m_rank = r % kClusterM, n_rank = r / kClusterM) working on
// neighbouring tiles: the kClusterN CTAs of one row block share its A tile, the kClusterM CTAs of one column block
// its B tile. Each CTA loads the n_rank-th part of the shared A tile and the m_rank-th part of the shared B tile
// and multicasts them, so every A and B byte leaves L2 once per cluster; a stage is refilled only after the
// consumers of every CTA of the cluster released it
// (their warps arrive on each CTA's empty barrier).
//
// Per k block a consumer warpgroup waits for its WGMMAs, releases the stage, then promotes; the other warpgroup's
// WGMMAs fill the tensor pipe meanwhile. With 128x128 B scales the loop is software-pipelined over a second
// 64-register partial sum (kPipelined): k block kb + 1's WGMMAs are issued before kb is promoted, so the warpgroup's
// own WGMMAs run under its promotion too (+3-7 % measured, twentieth session). ptxas reports 168 registers for a
// 384-thread kernel but allocates up to the setmaxnreg count (232) after the increase: the consumer code uses ~214.
template <int kPair, int kOut, int kRowsB, int kBlockN, int kStages, int kClusterM, int kClusterN>
__global__ void __launch_bounds__(kThreads, 1)
    blockwise_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const __grid_constant__ CUtensorMap map_sfa, const __grid_constant__ CUtensorMap map_sfb,
                          const __grid_constant__ CUtensorMap map_d, const float* __restrict__ sfb,
                          const float* __restrict__ bias, void* __restrict__ d, int m, int n, int k, int l,
                          const EpilogueScales epi_scales, const SplitTail split) {
  constexpr bool kTmaStore = MXPREC_PERSISTENT_TMA_STORE && kOut == 0;
  using Smem = SmemLayout<kBlockN, kRowsB, kStages, kTmaStore>;
  constexpr int kAcc = kBlockN / 2;  // accumulator floats per thread (64 x kBlockN over 128 threads)
  // 128x128 B scales: the k loop keeps two partial sums in flight. 1x128 B scales: one (pipelined as well, with the
  // B scales read per column pair, it measured no faster, twentieth session).
  // Tiles wider than 128 columns (96 + 96 registers at 192) leave no room for a second partial sum.
  constexpr bool kEpilogueScaled = kRowsB == 0;  // per-tensor / row-wise: scales in the epilogue only
  constexpr bool kPipelined = (kRowsB == 128 || kEpilogueScaled) && kBlockN == 128;
  constexpr bool kWide = kBlockN > 128;  // N % kBlockN may be nonzero: the last column tile is partial
  // Wide tiles (every family since the twenty-eighth session): each k block as two half-width WGMMA groups (columns
  // [0, kBlockN / 2) and the rest) into two partial sums, so that the second half's WGMMAs run while the first half
  // is promoted.
  constexpr bool kSplitN =
      kWide && MXPREC_PERSISTENT_SPLIT_N && (kEpilogueScaled || MXPREC_PERSISTENT_SPLIT_N_BLOCK);
  constexpr int kClusterSize = kClusterM * kClusterN;
  constexpr int kARows = kBlockM / kClusterN;  // rows of the A tile this CTA loads (and multicasts)
  constexpr int kBRows = kBlockN / kClusterM;  // rows of the B tile this CTA loads (and multicasts)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Every shared-memory address below is this 1024-byte aligned 32-bit base plus a constant or stage offset.
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t full0 = base + Smem::kBars, empty0 = full0 + 8 * kStages;

  const int num_m = (m + kBlockM - 1) / kBlockM;
  const int num_n = kWide ? (n + kBlockN - 1) / kBlockN : n / kBlockN;
  const int num_kb = k / kBlockK;
  const int num_cm = (num_m + kClusterM - 1) / kClusterM, num_cn = (num_n + kClusterN - 1) / kClusterN;
  const int num_cluster_tiles = num_cm * num_cn * l;
  // Full tiles, then the split tail's units (SplitTail; tail_tiles 0: none).
  const int num_full = num_cluster_tiles - split.tail_tiles;
  const int num_work = num_full + split.tail_tiles * split.pieces;
  const int cluster_id = blockIdx.x / kClusterSize, num_clusters = gridDim.x / kClusterSize;
  const uint32_t rank = kClusterSize > 1 ? cluster_cta_rank() : 0;
  const int m_rank = rank % kClusterM, n_rank = rank / kClusterM;
  // This CTA's tile in cluster tile t: its batch entry and row / column blocks (the producer, the consumers and the
  // store warps walk the same sequence). n_blk may lie beyond N in a cluster's last column block.
  auto cta_tile = [&](int t) { return cta_tile_coord<kClusterM, kClusterN>(t, num_cm, num_cn, m_rank, n_rank); };
  // Warp-uniform by construction; the shuffle lets the compiler see it (CUTLASS's canonical_warp_group_idx), so the
  // descriptor and barrier arithmetic below stays in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 8 * kClusterSize);  // one arrive per consumer warp of every CTA of the cluster
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (kClusterSize > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  if (wg == 0) {
    setmaxnreg_dec<40>();
    // Producer: one thread streams every stage of every tile this CTA owns.
    if (threadIdx.x == 0) {
      tma_prefetch_descriptor(&map_a);
      tma_prefetch_descriptor(&map_b);
      if constexpr (!kEpilogueScaled) tma_prefetch_descriptor(&map_sfa);
      if constexpr (kRowsB == 1) tma_prefetch_descriptor(&map_sfb);
      uint16_t mask_a = 0, mask_b = 0;  // CTAs sharing this CTA's A rows (same m_rank) / B rows (same n_rank)
      for (int j = 0; j < kClusterN; ++j) mask_a |= uint16_t(1u << (m_rank + kClusterM * j));
      for (int i = 0; i < kClusterM; ++i) mask_b |= uint16_t(1u << (i + kClusterM * n_rank));
      const uint32_t a_part = base + Smem::kA + n_rank * kARows * kBlockK;
      const uint32_t b_part = base + Smem::kB + m_rank * kBRows * kBlockK;
      int s = 0;
      uint32_t phase = 0;
      for (int w = cluster_id; w < num_work; w += num_clusters) {
        const WorkItem wk = work_item(w, num_full, num_kb, split);
        const TileCoord c = cta_tile(wk.tile);
        const int m_blk = c.m_blk, n_blk = c.n_blk;
        const int a_row = m_blk * kBlockM + n_rank * kARows, b_row = n_blk * kBlockN + m_rank * kBRows;
        for (int kb = wk.kb_begin; kb < wk.kb_end; ++kb) {
          const uint32_t full = full0 + 8 * s;
          mbar_wait(empty0 + 8 * s, phase ^ 1);
          mbar_arrive_expect_tx(full, Smem::kStageTx);
          if constexpr (kClusterN > 1) {
            tma_load_3d_multicast(a_part + s * Smem::kABytes, &map_a, full, kb * kBlockK, a_row, c.l, mask_a);
          } else {
            tma_load_3d(a_part + s * Smem::kABytes, &map_a, full, kb * kBlockK, a_row, c.l);
          }
          if constexpr (kClusterM > 1) {
            tma_load_3d_multicast(b_part + s * Smem::kBBytes, &map_b, full, kb * kBlockK, b_row, c.l, mask_b);
          } else {
            tma_load_3d(b_part + s * Smem::kBBytes, &map_b, full, kb * kBlockK, b_row, c.l);
          }
          if constexpr (!kEpilogueScaled) {
            tma_load_3d(base + Smem::kSfa + s * Smem::kSfaBytes, &map_sfa, full, m_blk * kBlockM, kb, c.l);
          }
          if constexpr (kRowsB == 1) {
            tma_load_3d(base + Smem::kSfb + s * Smem::kSfbBytes, &map_sfb, full, n_blk * kBlockN, kb, c.l);
          }
          if (++s == kStages) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
    // Lanes 1-31 of warp 0 wait here for the producer lane (blocked, not at the cluster barrier below, which every
    // thread of a warp must reach together).
    __syncwarp();
    if constexpr (Smem::kStoreWarp) {
      // Store warps: warp 1 + cw stores consumer warpgroup cw's tiles. Per tile the warpgroup fills its staging
      // buffers and arrives on barrier 3 + cw; this warp waits there, stores every 32-column slice with TMA, and
      // once the stores have read the buffers arrives on barrier 5 + cw, where the warpgroup waits before it
      // rewrites them (one tile later). The first tile's buffers are free from the start.
      const int warp = threadIdx.x / 32;
      if (warp == 1 || warp == 2) {
        const int cw = warp - 1;
        const uint32_t epi = base + Smem::kEpi + cw * Smem::kEpiBufs * kEpiBufBytes;
        named_barrier_arrive(5 + cw, kStoreThreads);
        bool first = true;
        for (int w = cluster_id; w < num_work; w += num_clusters) {
          const WorkItem wk = work_item(w, num_full, num_kb, split);
          const TileCoord c = cta_tile(wk.tile);
          const int m_blk = c.m_blk, n_blk = c.n_blk;
          // Not stored here: beyond N, or a split-tail unit (the consumers store its partial sum themselves).
          if (n_blk >= num_n || wk.unit >= 0) continue;
          if (!first) named_barrier_arrive(5 + cw, kStoreThreads);  // the previous tile's buffers are free
          first = false;
          named_barrier_sync(3 + cw, kStoreThreads);
          if (threadIdx.x % 32 == 0) {
#pragma unroll
            for (int slice = 0; slice < kBlockN / kEpiCols; ++slice) {
              tma_store_3d(&map_d, epi + slice * kEpiBufBytes, n_blk * kBlockN + slice * kEpiCols,
                           m_blk * kBlockM + cw * 64, c.l);
            }
            tma_store_commit();
            tma_store_wait_read<0>();
          }
          __syncwarp();
        }
        if (threadIdx.x % 32 == 0) tma_store_wait_all();  // the staging buffers must outlive the stores reading them
        __syncwarp();
      }
    }
  } else {
    setmaxnreg_inc<232>();
    // Consumers: warpgroup 1 -> tile rows 0..63, warpgroup 2 -> rows 64..127.
    const int cw = wg - 1;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    const int row0 = cw * 64 + warp * 16 + lane / 4;  // this thread's rows: row0 and row0 + 8
    const int col0 = (lane % 4) * 2;                  // and columns col0, col0 + 1 of every 8-column group
    const int nb_count = n / 128;                     // B scale columns per k block (kRowsB == 128)
    const uint64_t desc_a0 = smem_desc_sw128(base + Smem::kA + cw * 64 * kBlockK);
    const uint64_t desc_b0 = smem_desc_sw128(base + Smem::kB);
    const uint32_t sfa0 = base + Smem::kSfa + row0 * 4;
    const uint32_t sfb0 = base + Smem::kSfb + col0 * 4;

    float acc[kAcc];
    float part0[kAcc];  // the k block's partial sum (fresh each k block)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) part0[i] = 0.f;
    float part1[kAcc];  // the next k block's (kPipelined)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) part1[i] = 0.f;
    // 1x128 B scales with MXPREC_PERSISTENT_SB_EARLY: the B scales of the k block (split loop: of the half) being
    // promoted, loaded while its WGMMAs run.
    constexpr bool kSbEarly = kRowsB == 1 && (MXPREC_PERSISTENT_SB_EARLY == 1 || MXPREC_PERSISTENT_SB_EARLY == 2 ||
                                              (MXPREC_PERSISTENT_SB_EARLY == 3 && !kSplitN));
    float2 sbv[kAcc / 4];
    // Loads groups kJ0 .. kJ0 + kGroups - 1 of stage `stage`'s B scales into sbv (MXPREC_PERSISTENT_SB_EARLY 1 - 3).
    auto load_scales = [&](auto groups, auto first, int stage) {
      constexpr int kGroups = decltype(groups)::value, kJ0 = decltype(first)::value;
      if constexpr (MXPREC_PERSISTENT_SB_EARLY == 2) {
        shuffle_column_scales<kGroups, kJ0>(sbv, base + Smem::kSfb + stage * Smem::kSfbBytes, lane);
      } else {
        load_column_scales<kGroups, kJ0>(sbv, sfb0 + stage * Smem::kSfbBytes);
      }
    };

    int s = 0;
    uint32_t phase = 0;
    for (int w = cluster_id; w < num_work; w += num_clusters) {
      const WorkItem wk = work_item(w, num_full, num_kb, split);
      const int nk = wk.kb_end - wk.kb_begin;  // k blocks in this item (num_kb but for split-tail units), >= 1
      const TileCoord c = cta_tile(wk.tile);
      const int m_blk = c.m_blk, n_blk = c.n_blk;
      const bool n_valid = n_blk < num_n;  // a cluster's last column block may lie beyond N (zero B, not stored)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
      const int nb_first = n_valid ? (n_blk * kBlockN) / 128 : 0;
      // A split-tail unit's k blocks start at wk.kb_begin: k block kb of the loop below is kb_begin + kb (the
      // producer loads the A / 1x128 B scales at the absolute k block; the 128x128 B scale ring starts there).
      const float* sfb_tile = sfb + (static_cast<size_t>(c.l) * num_kb + wk.kb_begin) * nb_count + nb_first;
      // Wide tiles: the tile's first column lies off_b past a B scale tile boundary; the columns from 128 - off_b on
      // take the next B scale tile's scale (hi_b = 1), or none exists (the rest of the tile lies beyond N).
      const int off_b = kWide ? (n_blk * kBlockN) % 128 : 0;
      const int hi_b = kWide && nb_first + 1 < nb_count ? 1 : 0;
      // The B scales of k block kb come from global memory (L2) kSbAhead k blocks ahead of their use, in two rings
      // of registers, one per k block parity: ring[kb % 2][i] holds k block kb + 2 i. A ring moves when a k block of
      // its parity is taken, so a load is first moved two k blocks after it was issued. (One ring for all k blocks
      // moved each load one k block later, which the unrolled pipelined loop put right behind the load: its warps
      // waited there for L2 in the middle of issuing their WGMMAs; fortieth session, ncu.)
      static_assert(kSbAhead % 2 == 0 && kSbAhead >= 2, "B scale rings of kSbAhead / 2 per k block parity");
      constexpr int kRing = kSbAhead / 2;
      float sb_next[2][kRing], sb_hi_next[2][kRing];
#pragma unroll
      for (int i = 0; i < kSbAhead; ++i) {
        float& lo = sb_next[i % 2][i / 2];
        float& hi = sb_hi_next[i % 2][i / 2];
        lo = 0.f;
        hi = 0.f;
        if (kRowsB == 128 && i < nk) {
          lo = __ldg(sfb_tile + static_cast<size_t>(i) * nb_count);
          if (kWide) hi = __ldg(sfb_tile + static_cast<size_t>(i) * nb_count + hi_b);
        }
      }

      // Takes k block kb's 128x128 B scales (sc.sb, sc.sb_hi) off its parity's ring (kParity = kb % 2) and loads
      // k block kb + kSbAhead's into it.
      auto take_b_scales = [&](int kb, KBlockScales& sc, auto parity) {
        constexpr int kParity = decltype(parity)::value;
        float* ring = sb_next[kParity];
        float* ring_hi = sb_hi_next[kParity];
        sc.sb = ring[0];
        sc.sb_hi = ring_hi[0];
        if constexpr (kRowsB == 128) {
#pragma unroll
          for (int i = 0; i + 1 < kRing; ++i) ring[i] = ring[i + 1];
          if constexpr (kWide) {
#pragma unroll
            for (int i = 0; i + 1 < kRing; ++i) ring_hi[i] = ring_hi[i + 1];
          }
          if (kb + kSbAhead < nk) {
            ring[kRing - 1] = __ldg(sfb_tile + static_cast<size_t>(kb + kSbAhead) * nb_count);
            if (kWide) ring_hi[kRing - 1] = __ldg(sfb_tile + static_cast<size_t>(kb + kSbAhead) * nb_count + hi_b);
          }
        }
      };
      using Even = IntC<0>;
      using Odd = IntC<1>;
      // The same where kb's parity is known only at run time (the loops that take one k block per iteration).
      auto take_b_scales_any = [&](int kb, KBlockScales& sc) {
        if (kb % 2 == 0) {
          take_b_scales(kb, sc, Even{});
        } else {
          take_b_scales(kb, sc, Odd{});
        }
      };
      // Waits for stage s and reads its A scales.
      auto wait_stage = [&](KBlockScales& sc) {
        sc.stage = s;
        mbar_wait(full0 + 8 * s, phase);
        if constexpr (!kEpilogueScaled) {
          sc.sa0 = lds_f32(sfa0 + s * Smem::kSfaBytes);
          sc.sa1 = lds_f32(sfa0 + s * Smem::kSfaBytes + 32);
        }
      };
      // Waits for stage s, reads its scales and issues its WGMMAs into `part`; kb is the k block it holds, `parity`
      // kb % 2 (Even / Odd).
      auto issue = [&](int kb, float* part, auto parity) -> KBlockScales {
        KBlockScales sc;
        take_b_scales(kb, sc, parity);
        wait_stage(sc);
        issue_k_block<kPair, kBlockN>(part, desc_a0 + ((s * Smem::kABytes) >> 4),
                                      desc_b0 + ((s * Smem::kBBytes) >> 4));
        return sc;
      };
      // Releases `stage` in every CTA of the cluster: lane i of each consumer warp arrives on CTA i's empty barrier.
      auto release = [&](int stage) {
        if (lane < kClusterSize) {
          if constexpr (kClusterSize > 1) {
            mbar_arrive_cluster(empty0 + 8 * stage, lane);
          } else {
            mbar_arrive(empty0 + 8 * stage);
          }
        }
      };
      // Promotes the finished k block (its WGMMAs complete) and releases its stage.
      auto promote = [&](const KBlockScales& sc, float* part) {
        const int stage = sc.stage;
#pragma unroll
        for (int i = 0; i < kAcc; ++i) fence_operand(part[i]);
        if constexpr (kEpilogueScaled) {
          release(stage);
#pragma unroll
          for (int i = 0; i < kAcc; ++i) {
            if (MXPREC_PERSISTENT_EXPERIMENT != 2) acc[i] += part[i];
          }
        } else if constexpr (kRowsB == 128) {
          release(stage);
          const float s0 = sc.sa0 * sc.sb, s1 = sc.sa1 * sc.sb;
          if constexpr (kWide) {
            promote_two_scale_tiles<kAcc / 4, 0, kBlockN>(acc, part, off_b, s0, s1, sc.sa0 * sc.sb_hi,
                                                           sc.sa1 * sc.sb_hi);
          } else {  // one B scale tile: every column group takes the first scale
            promote_groups<kAcc / 4, 0, kAcc / 4>(acc, part, s0, s1, s0, s1);
          }
        } else {
          if constexpr (kSbEarly) {
            promote_loaded_column_scales<kAcc / 4, 0>(acc, part, sc.sa0, sc.sa1, sbv);
          } else {
            promote_column_scales<kAcc / 4, 0>(acc, part, sc.sa0, sc.sa1, sfb0 + stage * Smem::kSfbBytes);
          }
          __syncwarp();  // every lane has read the stage's B scales
          release(stage);
        }
      };
      auto advance = [&]() {
        if (++s == kStages) {
          s = 0;
          phase ^= 1;
        }
      };

      if constexpr (kPipelined) {
        // Software-pipelined over two partial sums: k block kb + 1's WGMMAs run while kb is promoted, and the
        // warpgroup waits only for the older group (wait_group 1); across the back edge one group is in flight.
        KBlockScales sc_cur = issue(0, part0, Even{});
        advance();
        int kb = 0;
        for (; kb + 2 < nk; kb += 2) {
          const KBlockScales sc_nxt = issue(kb + 1, part1, Odd{});
          advance();
          wgmma_wait<1>();
          promote(sc_cur, part0);
          sc_cur = issue(kb + 2, part0, Even{});
          advance();
          wgmma_wait<1>();
          promote(sc_nxt, part1);
        }
        if (kb + 1 < nk) {
          const KBlockScales sc_nxt = issue(kb + 1, part1, Odd{});
          advance();
          wgmma_wait<1>();
          promote(sc_cur, part0);
          wgmma_wait<0>();
          promote(sc_nxt, part1);
        } else {
          wgmma_wait<0>();
          promote(sc_cur, part0);
        }
      } else if constexpr (kSplitN) {
        // Per k block: lo = columns [0, kHalfN), hi = the rest, each 4 WGMMAs of 64 x kHalfN x 32 (the B tile's rows
        // from kHalfN on start kHalfN * 128 bytes, a multiple of the 1024-byte swizzle atom, into it); lo is
        // promoted while hi runs, and the stage released once both are complete (with 1x128 B scales, once hi's
        // promotion has read the stage's B scales). Each column keeps its promotion, acc = fma(part, s, acc) (or
        // acc + part) in k block order, so the result is the one-group loop's bit for bit.
        constexpr int kHalfN = kBlockN / 2, kHalfAcc = kAcc / 2, kHalfGroups = kHalfAcc / 4;
        float* lo = part0;  // the first kHalfAcc registers of each partial sum (the rest stay unused)
        float* hi = part1;
        auto issue_half = [&](float* half, int first_col) {
          issue_k_block<kPair, kHalfN>(half, desc_a0 + ((s * Smem::kABytes) >> 4),
                                       desc_b0 + ((s * Smem::kBBytes + first_col * kBlockK) >> 4));
        };
        // Promotes half kHalf (0: lo, 1: hi) of k block sc into acc.
        auto promote_half = [&](auto half_index, const KBlockScales& sc, float* half) {
          constexpr int kHalf = decltype(half_index)::value;
          constexpr int kJ0 = kHalf * kHalfGroups;
#pragma unroll
          for (int i = 0; i < kHalfAcc; ++i) fence_operand(half[i]);
          if constexpr (kEpilogueScaled) {
#pragma unroll
            for (int i = 0; i < kHalfAcc; ++i) acc[4 * kJ0 + i] += half[i];
          } else if constexpr (kRowsB == 128) {
            promote_two_scale_tiles<kHalfGroups, kJ0, kBlockN>(acc, half, off_b, sc.sa0 * sc.sb, sc.sa1 * sc.sb,
                                                               sc.sa0 * sc.sb_hi, sc.sa1 * sc.sb_hi);
          } else if constexpr (kSbEarly) {
            promote_loaded_column_scales<kHalfGroups, kJ0>(acc, half, sc.sa0, sc.sa1, sbv);
          } else {
            promote_column_scales<kHalfGroups, kJ0>(acc, half, sc.sa0, sc.sa1, sfb0 + sc.stage * Smem::kSfbBytes);
          }
        };
        // Two groups in flight across a loop's back edge, or issued while the other half of the previous k block is
        // still running, make ptxas serialize every WGMMA (C7514), so each k block's groups complete within its
        // iteration: only lo's promotion runs under the warpgroup's own WGMMAs (hi's).
        for (int kb = 0; kb < nk; ++kb) {
          KBlockScales sc;
          take_b_scales_any(kb, sc);
          wait_stage(sc);
          issue_half(lo, 0);
          issue_half(hi, kHalfN);
          advance();
          if constexpr (kSbEarly) load_scales(IntC<kHalfGroups>{}, IntC<0>{}, sc.stage);
          wgmma_wait<1>();  // lo
          promote_half(IntC<0>{}, sc, lo);
          if constexpr (kSbEarly) load_scales(IntC<kHalfGroups>{}, IntC<kHalfGroups>{}, sc.stage);
          wgmma_wait<0>();  // hi
          if constexpr (kRowsB != 1) release(sc.stage);
          promote_half(IntC<1>{}, sc, hi);
          if constexpr (kRowsB == 1) {
            __syncwarp();  // every lane has read the stage's B scales
            release(sc.stage);
          }
        }
      } else {
        for (int kb = 0; kb < nk; ++kb) {
          // (Only 128x128 B scales use the parity; this loop runs them only with MXPREC_PERSISTENT_SPLIT_N_BLOCK=0.)
          const KBlockScales sc = kRowsB == 128 && kb % 2 == 1 ? issue(kb, part0, Odd{}) : issue(kb, part0, Even{});
          if constexpr (kSbEarly) load_scales(IntC<kAcc / 4>{}, IntC<0>{}, sc.stage);
          wgmma_wait<0>();
          promote(sc, part0);
          advance();
        }
      }

      // Epilogue: D = acc (+ bias[n]) rounded once; rows >= m (TMA's zero fill of A) are not stored.
      if (kEpilogueScaled && MXPREC_PERSISTENT_EXPERIMENT == 1) {  // keeps acc (and the promotion) live
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kAcc; ++i) sum += acc[i];
        if (sum == 1.2345e-30f) static_cast<float*>(d)[0] = sum;
      } else if (wk.unit >= 0) {
        // A split-tail unit: its sum (block-scaled: scaled in the mainloop; else unscaled), without the bias, for
        // split_tail_reduce_kernel (thread-major: coalesced per register).
        const size_t warpgroup = (static_cast<size_t>(wk.unit) * kClusterSize + rank) * 2 + cw;
        float* dst = split.partials + warpgroup * kAcc * 128 + tid;
#pragma unroll
        for (int i = 0; i < kAcc; ++i) dst[static_cast<size_t>(i) * 128] = acc[i];
      } else if (n_valid) {
        const int n0 = n_blk * kBlockN + col0;
        if constexpr (kEpilogueScaled) {
          apply_epilogue_scales<kAcc, kWide>(acc, epi_scales, bias, c.l, m, n, m_blk * kBlockM + row0, n0);
        } else {
          add_bias<kAcc, kWide>(acc, bias, n, n0);
        }
        if constexpr (Smem::kStoreWarp) {
          // The warpgroup's whole 64 x kBlockN bf16 tile into its staging buffers (one 64 x 32 buffer per 32-column
          // slice), then its store warp stores them (see the producer warpgroup).
          const uint32_t epi = base + Smem::kEpi + cw * Smem::kEpiBufs * kEpiBufBytes;
          const int r_lo = warp * 16 + lane / 4;
          named_barrier_sync(5 + cw, kStoreThreads);  // the previous tile's stores have read the buffers
#pragma unroll
          for (int slice = 0; slice < kBlockN / kEpiCols; ++slice) {
            stage_slice_bf16(acc, slice, epi + slice * kEpiBufBytes, r_lo, lane);
          }
          fence_proxy_async_shared();
          named_barrier_arrive(3 + cw, kStoreThreads);
        } else if constexpr (kTmaStore) {
          // Per 32-column slice: the warpgroup writes its 64 x 32 bf16 block into a staging buffer, then one thread
          // stores it with TMA. Two buffers alternate; a buffer is rewritten once the store issued from it two slices
          // ago has read it.
          const uint32_t epi = base + Smem::kEpi + cw * 2 * kEpiBufBytes;
          const int r_lo = warp * 16 + lane / 4;  // rows r_lo, r_lo + 8 of the warpgroup's 64
          const bool leader = tid == 0;
#pragma unroll
          for (int slice = 0; slice < kBlockN / kEpiCols; ++slice) {
            const uint32_t buf = epi + (slice & 1) * kEpiBufBytes;
            if (leader) tma_store_wait_read<1>();
            named_barrier_sync(1 + cw, 128);
            stage_slice_bf16(acc, slice, buf, r_lo, lane);
            fence_proxy_async_shared();
            named_barrier_sync(1 + cw, 128);
            if (leader) {
              tma_store_3d(&map_d, buf, n_blk * kBlockN + slice * kEpiCols, m_blk * kBlockM + cw * 64, c.l);
              tma_store_commit();
            }
          }
        } else {
          store_registers<kOut, kAcc, kWide>(d, acc, c.l, m, n, m_blk * kBlockM + row0, n0);
        }
      }
    }
    if constexpr (kTmaStore && !Smem::kStoreWarp) {
      if (tid == 0) tma_store_wait_all();  // the staging buffers must outlive the stores reading them
    }
  }
  // No CTA may leave while a peer can still multicast into its shared memory or arrive on its barriers.
  if constexpr (kClusterSize > 1) cluster_sync();
}

// The split tail's second pass: CTA (q, chunk) of grid (tail_tiles * kClusterSize, kChunks) takes CTA tile q of the
// tail (cluster tile num_full + q / kClusterSize, cluster rank q % kClusterSize) and 4-register column groups
// [chunk * kGroups, + kGroups) of every thread of its two consumer warpgroups (256 threads, the GEMM kernel's
// register layout): acc = sum of the tile's `pieces` partial sums in piece order, then the GEMM's epilogue
// (kEpilogueScaled: apply_epilogue_scales; block-scaled, whose partial sums carry their scales: add_bias) and its
// stores from registers.
constexpr int kReduceGroups = 4;  // 4-register column groups (32 columns) per thread per CTA
template <int kOut, int kBlockN, int kClusterM, int kClusterN, bool kEpilogueScaled>
__global__ void __launch_bounds__(256) split_tail_reduce_kernel(const SplitTail split, void* __restrict__ d,
                                                                const float* __restrict__ bias, int m, int n, int l,
                                                                const EpilogueScales epi_scales) {
  constexpr int kClusterSize = kClusterM * kClusterN;
  constexpr int kAcc = kBlockN / 2;
  constexpr bool kWide = kBlockN > 128;
  constexpr int kChunkAcc = 4 * kReduceGroups;
  static_assert(kAcc % kChunkAcc == 0, "whole chunks per tile");
  const int num_m = (m + kBlockM - 1) / kBlockM;
  const int num_n = kWide ? (n + kBlockN - 1) / kBlockN : n / kBlockN;
  const int num_cm = (num_m + kClusterM - 1) / kClusterM, num_cn = (num_n + kClusterN - 1) / kClusterN;
  const int num_full = num_cm * num_cn * l - split.tail_tiles;
  const int q = blockIdx.x, rank = q % kClusterSize, tail = q / kClusterSize;
  const TileCoord ct =
      cta_tile_coord<kClusterM, kClusterN>(num_full + tail, num_cm, num_cn, rank % kClusterM, rank / kClusterM);
  const int m_blk = ct.m_blk, n_blk = ct.n_blk;
  if (n_blk >= num_n) return;  // a cluster's column block beyond N: never stored
  const int cw = threadIdx.x / 128, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int i0 = blockIdx.y * kChunkAcc;
  float acc[kChunkAcc];
  const size_t unit_stride = static_cast<size_t>(kClusterSize) * 2 * kAcc * 128;
  const float* src = split.partials + static_cast<size_t>(tail) * split.pieces * unit_stride +
                     ((static_cast<size_t>(rank) * 2 + cw) * kAcc + i0) * 128 + tid;
#pragma unroll
  for (int i = 0; i < kChunkAcc; ++i) acc[i] = src[static_cast<size_t>(i) * 128];
  for (int p = 1; p < split.pieces; ++p) {
    src += unit_stride;
#pragma unroll
    for (int i = 0; i < kChunkAcc; ++i) acc[i] += src[static_cast<size_t>(i) * 128];
  }
  const int r0 = m_blk * kBlockM + cw * 64 + warp * 16 + lane / 4;
  const int n0 = n_blk * kBlockN + (lane % 4) * 2 + 8 * (i0 / 4);
  if constexpr (kEpilogueScaled) {
    apply_epilogue_scales<kChunkAcc, kWide>(acc, epi_scales, bias, ct.l, m, n, r0, n0);
  } else {
    add_bias<kChunkAcc, kWide>(acc, bias, n, n0);
  }
  store_registers<kOut, kChunkAcc, kWide>(d, acc, ct.l, m, n, r0, n0);
}

}  // namespace persistent
}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_CUH_
