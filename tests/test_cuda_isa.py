"""ISA checks of the CUDA kernels that need no GPU (docs/backends/cuda.md, "sm_100a block-scaled MX GEMM").

- the sm_100a block-scaled MX GEMM (csrc/cuda_kernels/sm100_mx_gemm_blockscaled.cu) compiles to PTX
  with the block-scaled tcgen05 MMA `tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale` (MXFP8);
- the interleaved 128x4 E8M0 scale layout documented in sm100_mx_gemm_blockscaled.h (closed form and
  numpy reorder recipe) equals CUTLASS's `Sm1xxBlockScaledConfig<32>::tile_atom_to_shape_SF{A,B}`;
- if objects were built and cuobjdump + nvdisasm are available: the SASS has UTCQMMA (sm_100a) /
  QGMMA + FADD promotion (sm_90a per-tensor and row-wise) / QGMMA + FFMA scaled promotion (sm_90a
  block-scaled), and no row-wise / block-scaled kernel spills registers (STACK:0, LOCAL:0).
  Objects are looked for in $MXPREC_CUDA_BUILD_DIR (default <repo>/build-cuda), as written by
  `bash csrc/cuda_kernels/build.sh [DIR]`.

Skipped unless nvcc and the CUTLASS headers (<repo>/.deps/cutlass_library/source/include, or
$MXPREC_CUTLASS_INCLUDE) are present. The PTX test runs cicc over CUTLASS: ~1.5-2 min on 2 cores.

With MXPREC_CUDA_CI_BUILD=1 (set by .ci/run) and nvcc on PATH, this module first fetches the CUTLASS
headers and cuobjdump/nvdisasm from PyPI (csrc/cuda_kernels/fetch_ci_tools.sh) and builds the sm_90a
library (csrc/cuda_kernels/build.sh, one TU at a time: ~6 min on 2 cores) when it is not built, so
that CI compiles every CUDA source and checks its SASS; a fetch or compile failure then fails here.
"""

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "csrc" / "cuda_kernels"
BUILD = Path(os.environ.get("MXPREC_CUDA_BUILD_DIR") or ROOT / "build-cuda")
SM100_SRC = KERNELS / "sm100_mx_gemm_blockscaled.cu"
CI_BUILD = os.environ.get("MXPREC_CUDA_CI_BUILD") == "1" and shutil.which(os.environ.get("NVCC") or "nvcc")

if CI_BUILD:  # at collection, so that the skip conditions below see the fetched headers
    subprocess.run(["bash", str(KERNELS / "fetch_ci_tools.sh")], check=True,
                   env={**os.environ, "PYTHON": sys.executable})


def _slow(f):
    # pytest.mark.slow where the marker is registered (pyproject); unregistered marks are errors here.
    with warnings.catch_warnings():
        warnings.simplefilter("error", pytest.PytestUnknownMarkWarning)
        try:
            return pytest.mark.slow(f)
        except pytest.PytestUnknownMarkWarning:
            return f


def _nvcc():
    return os.environ.get("NVCC") or shutil.which("nvcc")


def _cutlass_include():
    env = os.environ.get("MXPREC_CUTLASS_INCLUDE")
    inc = Path(env) if env else ROOT / ".deps" / "cutlass_library" / "source" / "include"
    return inc if (inc / "cutlass" / "cutlass.h").is_file() else None


def _cuobjdump():
    """(cuobjdump, env) with nvdisasm on PATH, or None."""
    extra = ROOT / ".deps" / "cuobjdump" / "nvidia" / "cu13" / "bin"
    path = f"{extra}{os.pathsep}{os.environ.get('PATH', '')}"
    exe = shutil.which("cuobjdump", path=path)
    if exe is None or shutil.which("nvdisasm", path=path) is None:
        return None
    return exe, {**os.environ, "PATH": path}


needs_toolchain = pytest.mark.skipif(
    _nvcc() is None or _cutlass_include() is None,
    reason="needs nvcc and CUTLASS 4.2 headers (.deps/cutlass_library/source/include or $MXPREC_CUTLASS_INCLUDE)",
)


def _nvcc_flags():
    inc = _cutlass_include()
    flags = [
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        "--expt-relaxed-constexpr",
        f"-I{KERNELS}",
        "-isystem",
        str(inc),
    ]
    util = inc.parent / "tools" / "util" / "include"
    if util.is_dir():
        flags += ["-isystem", str(util)]
    return flags


@pytest.fixture(scope="module", autouse=True)
def _ci_build_sm90():
    """Under MXPREC_CUDA_CI_BUILD=1: build the sm_90a library into BUILD unless it is there."""
    if CI_BUILD and not (BUILD / "libmxprec_cuda.so").is_file():
        res = subprocess.run(["bash", str(KERNELS / "build.sh"), str(BUILD)], check=False, capture_output=True,
                             text=True, env={**os.environ, "PYTHON": sys.executable, "JOBS": "1"})
        assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]


# --- scale layout -------------------------------------------------------------------------------


def _sf_offset(l, r, c, rows, scale_cols):
    """mxprec_sm100_sf_offset() of sm100_mx_gemm_blockscaled.h."""
    row_blocks, col_blocks = -(-rows // 128), -(-scale_cols // 4)
    return (
        ((l * row_blocks + r // 128) * col_blocks + c // 4) * 512
        + (r % 32) * 16
        + ((r % 128) // 32) * 4
        + c % 4
    )


def _reorder(s):
    """The numpy recipe of sm100_mx_gemm_blockscaled.h: row-major (L, rows, K/32) -> interleaved bytes."""
    L, rows, cols = s.shape
    R, C = -(-rows // 128) * 128, -(-cols // 4) * 4
    s = np.pad(s, ((0, 0), (0, R - rows), (0, C - cols)), constant_values=0x7F)
    return s.reshape(L, R // 128, 4, 32, C // 4, 4).transpose(0, 1, 4, 3, 2, 5).reshape(L * R * C)


@pytest.mark.parametrize("shape", [(1, 128, 4), (2, 200, 3), (3, 300, 17), (1, 1, 1), (2, 257, 128)])
def test_sm100_scale_reorder_recipe_matches_offset_formula(shape):
    L, rows, cols = shape
    rng = np.random.default_rng(0)
    s = rng.integers(0, 0xFF, size=shape, dtype=np.uint8)  # 0..254: no NaN scale
    out = _reorder(s)
    R, C = -(-rows // 128) * 128, -(-cols // 4) * 4
    assert out.size == L * R * C
    l, r, c = np.meshgrid(np.arange(L), np.arange(rows), np.arange(cols), indexing="ij")
    np.testing.assert_array_equal(out[_sf_offset(l, r, c, rows, cols)], s)
    filled = np.zeros(out.size, bool)
    filled[_sf_offset(l, r, c, rows, cols).ravel()] = True
    assert np.all(out[~filled] == 0x7F)  # padding: 1.0, never 0xFF (NaN)


_LAYOUT_PROG = r"""
#include <cstdio>
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "sm100_mx_gemm_blockscaled.h"
using namespace cute;
int main() {
  using Cfg = cutlass::detail::Sm1xxBlockScaledConfig<32>;
  const int shapes[][4] = {{128, 128, 128, 1}, {200, 72, 96, 2}, {300, 8, 544, 3}, {1, 8, 32, 1}, {257, 16, 4096, 2}};
  long bad = 0, checked = 0;
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1], K = s[2], L = s[3];
    auto la = Cfg::tile_atom_to_shape_SFA(make_shape(M, N, K, L));
    auto lb = Cfg::tile_atom_to_shape_SFB(make_shape(M, N, K, L));
    for (int l = 0; l < L; ++l)
      for (int k = 0; k < K; ++k) {
        for (int m = 0; m < M; ++m, ++checked) bad += la(m, k, l) != mxprec_sm100_sf_offset(l, m, k / 32, M, K / 32);
        for (int n = 0; n < N; ++n, ++checked) bad += lb(n, k, l) != mxprec_sm100_sf_offset(l, n, k / 32, N, K / 32);
      }
    bad += cosize(la) != mxprec_sm100_sf_bytes(L, M, K / 32);
    bad += cosize(lb) != mxprec_sm100_sf_bytes(L, N, K / 32);
  }
  printf("checked %ld mismatches %ld\n", checked, bad);
  return bad != 0;
}
"""


@needs_toolchain
def test_sm100_scale_layout_matches_cutlass(tmp_path):
    """The header's closed form == CuTe's layout, element by element (host program, ~30 s to build)."""
    src = tmp_path / "layout.cu"
    src.write_text(_LAYOUT_PROG)
    exe = tmp_path / "layout"
    subprocess.run(
        [_nvcc(), *_nvcc_flags(), str(src), "-o", str(exe)], check=True, capture_output=True, text=True
    )
    res = subprocess.run([str(exe)], check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"checked \d+ mismatches 0", res.stdout), res.stdout


_PACKED_STRIDE_PROG = r"""
#include <cstdio>
#include "packed_stride64.h"
#include "cutlass/gemm/gemm.h"
using namespace mxprec::cuda::sm90;
template <class S>
long check(S s, int rows, int cols, int batch, long inner) {
  const S got = packed_stride(s, rows, cols, batch);
  const long long want = batch > 1 ? static_cast<long long>(rows) * cols : 0;
  const long long batch_stride = cute::get<2>(got), inner_stride = cute::get<0>(got) + cute::get<1>(got) - 1;
  if (batch_stride == want && inner_stride == inner) return 0;
  printf("MISMATCH %d x %d x %d: batch %lld (want %lld), inner %lld (want %ld)\n", rows, cols, batch, batch_stride,
         want, inner_stride, inner);
  return 1;
}
int main() {
  using A = cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>;     // (M, K), K contiguous
  using B = cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>;  // (N, K), K contiguous
  using D = cutlass::gemm::TagToStrideC_t<cutlass::layout::RowMajor>;     // (M, N), N contiguous
  const int cases[][3] = {{262144, 16384, 2}, {196608, 16384, 2}, {16777216, 264, 2}, {8192, 8192, 2},
                          {262144, 16384, 1}, {128, 64, 65535}};
  long bad = 0, n = 0;
  for (const auto& c : cases) {
    bad += check(A{}, c[0], c[1], c[2], c[1]) + check(B{}, c[0], c[1], c[2], c[1]) + check(D{}, c[0], c[1], c[2], c[1]);
    n += 3;
  }
  printf("checked %ld mismatches %ld\n", n, bad);
  return bad != 0;
}
"""


@needs_toolchain
def test_cutlass_batch_strides_are_64_bit(tmp_path):
    """The CUTLASS GEMMs' packed strides (packed_stride64.h): a batch of 2^31 elements or more keeps its stride
    (CUTLASS's make_cute_packed_stride multiplies two ints: 262144 x 16384 wrapped to 0, and batch 1 read batch 0)."""
    src = tmp_path / "strides.cu"
    src.write_text(_PACKED_STRIDE_PROG)
    exe = tmp_path / "strides"
    subprocess.run([_nvcc(), *_nvcc_flags(), str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    res = subprocess.run([str(exe)], check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"checked 18 mismatches 0", res.stdout), res.stdout


# --- PTX / SASS ---------------------------------------------------------------------------------


@_slow
@needs_toolchain
def test_sm100_mxfp8_ptx_has_block_scaled_tcgen05_mma(tmp_path):
    """cicc over the MXFP8 kernel (~1.5-2 min): the PTX must issue the block-scaled tcgen05 MMA."""
    ptx = tmp_path / "sm100_mxfp8.ptx"
    cmd = [
        _nvcc(),
        *_nvcc_flags(),
        "-gencode=arch=compute_100a,code=compute_100a",
        "-DMXPREC_SM100_MX_FORMAT=1",
        "-ptx",
        str(SM100_SRC),
        "-o",
        str(ptx),
    ]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    text = ptx.read_text()
    mmas = re.findall(r"tcgen05\.mma[\w:.]*", text)
    assert any("kind::mxf8f6f4.block_scale" in m for m in mmas), sorted(set(mmas))
    assert all("block_scale" in m for m in mmas), sorted(set(mmas))  # no unscaled MMA sneaked in
    assert "tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale" in text  # the 2-SM schedule
    assert "tcgen05.cp" in text  # scale factors smem -> tensor memory (UTCCP)


def _cuobjdump_out(flag, path):
    """``cuobjdump <flag> <path>``'s output (skips when cuobjdump / nvdisasm are not available)."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("needs cuobjdump and nvdisasm (pip download nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    exe, env = tool
    res = subprocess.run([exe, flag, str(path)], check=False, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


@functools.lru_cache(maxsize=1)  # consecutive tests read the same object (the persistent one's SASS: ~70 MB)
def _sass(path):
    return _cuobjdump_out("--dump-sass", path)


def _first_existing(*paths):
    for p in paths:
        if p.is_file():
            return p
    pytest.skip(f"not built: {paths[0]}")


def test_sm100_sass_has_utcqmma():
    """On a built library (bash csrc/cuda_kernels/build_sm100.sh): UTCQMMA (mxf8f6f4) + UTCOMMA (mxf4)."""
    lib = _first_existing(
        ROOT / "build-cuda" / "libmxprec_cuda_sm100.so",
        ROOT / "build-cuda" / "obj" / "sm100_mx_gemm_blockscaled_f1.o",
    )
    sass = _sass(lib)
    assert re.search(r"UTCQMMA\.2CTA ", sass), "no block-scaled 2-CTA tcgen05 MMA in the SASS"
    assert "UTCCP" in sass  # scale factors copied to tensor memory


def test_sm90_sass_has_qgmma_and_fp32_promotion():
    """On the built sm_90a library: FP8 wgmma (QGMMA) and FADDs (the FP32 promotion, not fast-accum)."""
    obj = _first_existing(
        BUILD / "obj" / "sm90_fp8_gemm_tensorwise_bf16.o",
        BUILD / "libmxprec_cuda.so",
    )
    sass = _sass(obj)
    for pair in ("E4M3.E4M3", "E5M2.E4M3", "E4M3.E5M2"):
        assert re.search(rf"QGMMA\.64x\d+x32\.F32\.{pair}", sass), pair
    assert len(re.findall(r"\bFADD\b", sass)) >= 256


_SM90_PAIRS = ("E4M3.E4M3", "E5M2.E4M3", "E4M3.E5M2")


@pytest.mark.parametrize("out", ["bf16", "f32"])
def test_sm90_rowwise_sass_has_qgmma_and_fp32_promotion(out):
    """Row-wise GEMM objects: FP8 wgmma for the 3 pairs, FADD promotion (scales in the epilogue)."""
    sass = _sass(_first_existing(BUILD / "obj" / f"sm90_fp8_gemm_rowwise_{out}.o"))
    for pair in _SM90_PAIRS:
        assert re.search(rf"QGMMA\.64x\d+x32\.F32\.{pair}", sass), pair
    assert len(re.findall(r"\bFADD\b", sass)) >= 256


@pytest.mark.parametrize("fam", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("out", ["bf16", "f32"])
def test_sm90_per_tensor_and_rowwise_overlap_their_promotion(fam, out):
    """Per-tensor and row-wise objects run sm90_fp8_overlap_mainloop.cuh (128x192 tiles in 2 slices): WGMMAs
    of N 96 (CUTLASS's own FP8 mainloop would issue N 192) and a wait_group 1 (the add of one slice while the
    next one runs) in each of the 3 kernels; build.sh has already rejected a build where ptxas serialized them."""
    sass = _sass(_first_existing(BUILD / "obj" / f"sm90_fp8_gemm_{fam}_{out}.o"))
    for pair in _SM90_PAIRS:
        assert re.search(rf"QGMMA\.64x96x32\.F32\.{pair}", sass), pair
    assert not re.search(r"QGMMA\.64x192x32", sass)
    assert len(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1", sass)) >= len(_SM90_PAIRS)


@pytest.mark.parametrize("fam", ["blockwise", "blockwise1d"])
@pytest.mark.parametrize("out", ["bf16", "f32"])
def test_sm90_blockwise_sass_has_qgmma_and_scaled_promotion(fam, out):
    """Block-scaled GEMM objects (B in 128x128 / 1x128 tiles): FP8 wgmma for the 3 pairs; each
    128-of-K partial sum enters the FP32 accumulator through an FFMA with its scale (CUTLASS
    GmmaFP8Accumulation::scale); TMA loads of the operands."""
    sass = _sass(_first_existing(BUILD / "obj" / f"sm90_fp8_gemm_{fam}_{out}.o"))
    for pair in _SM90_PAIRS:
        assert re.search(rf"QGMMA\.64x\d+x32\.F32\.{pair}", sass), pair
    assert len(re.findall(r"\bFFMA\b", sass)) >= 3 * 64  # >= one per accumulator register per kernel
    assert "UTMALDG" in sass


def test_sm90_persistent_blockwise_sass():
    """mxprec's own persistent kernel (sm90_fp8_gemm_persistent.cu). Block-scaled: 78 kernels (3 pairs x 2 outputs
    x 2 B scale shapes x clusters 1x1 / 1x2 x CTA tiles 128 x 128 / 160 / 192, and the 2x1 cluster of 128x128 B
    scales at 128 columns since the fortieth session); per-tensor / row-wise (kRowsB 0,
    the scales in the epilogue): 54 (3 pairs x 2 outputs x clusters 1x1 / 1x2 / 2x1 x the 3 tiles). 64x128 FP8
    wgmma for the 3 pairs, an FFMA per accumulator register per k block in the block-scaled ones (the scaled
    promotion) and an FADD in the others (acc += partial), TMA loads (multicast ones for the clusters' shared
    tiles) and TMA stores (the bf16 epilogue), the 232-register consumer warpgroups, and the pipelined k loop of
    the 128-column tiles except with 1x128 B scales. 160 / 192-column tiles of every family (block-scaled ones since
    the twenty-eighth session): the split k loop (64x80 / 64x96 wgmma halves, the first half awaited alone, no
    full-width wgmma); with bf16 output and 128 / 160 columns, the store warps' named-barrier handshake (BAR.ARV):
    per-tensor / row-wise, and 128x128 B scales since the fortieth session. The split tail's reduce kernel
    (split_tail_reduce_kernel): 32 instances (2 outputs x the 3 tiles x the per-tensor / row-wise epilogue's 3
    clusters or the block-scaled bias-only epilogue's 2, plus the latter's 2x1 at 128 columns; neither the operand
    pair nor the B scale shape enters it), FADDs and no QGMMA."""
    sass = _sass(_first_existing(BUILD / "obj" / "sm90_fp8_gemm_persistent.o"))
    bodies = re.split(r"\n\s*Function : ", sass)[1:]
    names = [body.split("\n", 1)[0] for body in bodies]
    assert sum("blockwise_gemm_kernel" in nm for nm in names) == 132, names
    reduce = [body for nm, body in zip(names, bodies) if "split_tail_reduce_kernel" in nm]
    assert len(reduce) == 32, names
    for body in reduce:
        assert re.search(r"\bFADD\b", body) and "QGMMA" not in body
    names, bodies = zip(*[(nm, body) for nm, body in zip(names, bodies) if "blockwise_gemm_kernel" in nm])
    for pair in _SM90_PAIRS:
        for width in (128, 80, 96):  # 128-column tiles, and the halves of the split 160 / 192-column ones
            assert re.search(rf"QGMMA\.64x{width}x32\.F32\.{pair}", sass), (pair, width)
    for op in ("UTMALDG.3D.MULTICAST", "UTMASTG.3D", "USETMAXREG"):
        assert op in sass, op
    for name, body in zip(names, bodies):
        rows_b, width = (int(v) for v in re.search(r"blockwise_gemm_kernelILi\dELi\dELi(\d+)ELi(\d+)E", name).groups())
        promote = r"\bFADD\b" if rows_b == 0 else r"\bFFMA\b"
        assert len(re.findall(promote, body)) >= width // 2, name
        # The software-pipelined k loop (the older of two WGMMA groups awaited, wait_group 1) with 128x128 B scales
        # or none and 128 columns; 1x128 B scales at 128 columns: one group at a time (wait_group 0 only); the wider
        # tiles of every family (twenty-eighth session): the split loop (its first half awaited alone, wait_group 1).
        split = width > 128
        pipelined = rows_b != 1 and width == 128
        assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in body) == (pipelined or split), name
        if split:
            assert re.search(rf"QGMMA\.64x{width // 2}x32\.", body), name
            assert not re.search(rf"QGMMA\.64x{width}x32\.", body), name
        out_bf16 = re.search(r"blockwise_gemm_kernelILi\dELi0E", name) is not None
        store_warps = out_bf16 and rows_b != 1 and width < 192
        assert ("BAR.ARV" in body) == store_warps, name


def _kernel_instructions(body):
    """(address, instruction text) of one kernel's SASS (a body of cuobjdump's output after "Function : ")."""
    return [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", body)]


def _innermost_wgmma_loops(instructions):
    """(first, last) indices of the innermost loops holding a QGMMA: a predicated backward branch closes each (the
    unconditional backward branches are the mbarrier retry stubs' returns into the loop, not loops)."""
    index = {addr: i for i, (addr, _) in enumerate(instructions)}
    loops = []
    for i, (addr, op) in enumerate(instructions):
        branch = re.match(r"@!?U?P\d\s+BRA\s+(0x[0-9a-f]+)$", op)
        if branch and int(branch.group(1), 16) < addr and int(branch.group(1), 16) in index:
            first = index[int(branch.group(1), 16)]
            if any("QGMMA" in o for _, o in instructions[first:i]):
                loops.append((first, i))
    return [(s, e) for s, e in loops if not any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in loops)]


def test_sm90_persistent_block_scale_loads_are_not_read_in_their_iteration():
    """The 128x128-scaled persistent kernels' k loop (128-column tiles, two k blocks per iteration) loads each B scale
    from L2 kSbAhead k blocks ahead. No instruction after such a load in the same iteration may read its register:
    the warp would wait there for L2. With one ring moved every k block, ptxas placed the move of the newest load
    right behind it, between two WGMMAs (ncu, fortieth session: 1.9 % of all stall samples at that move; the rings
    per k block parity gained 3-9 %)."""
    sass = _sass(_first_existing(BUILD / "obj" / "sm90_fp8_gemm_persistent.o"))
    checked = 0
    for body in re.split(r"\n\s*Function : ", sass)[1:]:
        name = body.split("\n", 1)[0]
        shape = re.search(r"blockwise_gemm_kernelILi\dELi\dELi(\d+)ELi(\d+)E", name)
        if shape is None or shape.groups() != ("128", "128"):
            continue
        instructions = _kernel_instructions(body)
        loops = _innermost_wgmma_loops(instructions)
        assert loops, name
        for first, last in loops:
            for j in range(first, last):
                load = re.search(r"\bLDG\.E\.CONSTANT\s+(R\d+),", instructions[j][1])
                if load is None:
                    continue
                for _, later in instructions[j + 1:last]:
                    sources = later.split(",", 1)[1] if "," in later else ""
                    assert not re.search(rf"\b{load.group(1)}\b", sources), (name, instructions[j][1], later)
        checked += 1
    assert checked == 18, checked  # 3 pairs x 2 outputs x clusters 1x1 / 1x2 / 2x1


def _column_scale_reads(sass):
    """{tile columns: the set over the 1x128-scaled persistent kernels' k loops of (LDS.64 before the loop's first
    WARPGROUP.DEPBAR, LDS.64 in the loop, SHFL in the loop)}: how the promotion reads the column scales."""
    counts = {}
    for body in re.split(r"\n\s*Function : ", sass)[1:]:
        shape = re.search(r"blockwise_gemm_kernelILi\dELi\dELi1ELi(\d+)E", body.split("\n", 1)[0])
        if shape is None:
            continue
        instructions = _kernel_instructions(body)
        for first, last in _innermost_wgmma_loops(instructions):
            ops = [op for _, op in instructions[first:last + 1]]
            wait = next(i for i, op in enumerate(ops) if "WARPGROUP.DEPBAR" in op)
            counts.setdefault(int(shape.group(1)), set()).add(
                (sum("LDS.64" in op for op in ops[:wait]), sum("LDS.64" in op for op in ops),
                 sum("SHFL" in op for op in ops)))
    return counts


def test_sm90_persistent_reads_column_scales_under_the_wgmmas_at_128_columns():
    """The default build (MXPREC_PERSISTENT_SB_EARLY=3) with 1x128 B scales: one LDS.64 of column scales per column
    group (16 / 20 / 24 per k block at 128 / 160 / 192 columns); the one-group loop (128 columns) issues its 16
    before the WGMMA wait (they complete under the WGMMAs; forty-sixth session: +3-6 % at 128 columns), the split
    loop (160 / 192) all after it, in the promotion (mode 1 there was 7-8 % slower; h200_wgrad_promotion.md)."""
    default = _first_existing(BUILD / "obj" / "sm90_fp8_gemm_persistent.o")
    assert _column_scale_reads(_sass(default)) == {128: {(16, 16, 0)}, 160: {(0, 20, 0)}, 192: {(0, 24, 0)}}


@needs_toolchain
@_slow
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_sm90_persistent_sb_early_knob_reads_column_scales_under_the_wgmmas(tmp_path, mode):
    """MXPREC_PERSISTENT_SB_EARLY (a build knob; the default build, 3: the test above), with 1x128 B scales. Mode 0
    reads every column scale after the WGMMA wait, in the promotion. Mode 1 issues the column-scale LDS.64 before the
    WGMMA wait (the k block's 16 at 128 columns, the first half's 10 / 12 in the split loop). Mode 2 loads each scale
    once per warp and shuffles it to the lanes that use it: no LDS.64, two SHFL per column group. Each mode's build
    compiles the persistent TU alone (~1 min), without spills or serialized WGMMAs (build.sh fails on C7514)."""
    (tmp_path / "obj").mkdir()
    for obj in (_first_existing(BUILD / "obj" / "sm90_fp8_gemm_persistent.o").parent).glob("*.o"):
        shutil.copy(obj, tmp_path / "obj" / obj.name)
    env = {**os.environ, "PYTHON": sys.executable, "JOBS": "1", "ONLY": "sm90_fp8_gemm_persistent*",
           "EXTRA_NVCC_FLAGS": f"-DMXPREC_PERSISTENT_SB_EARLY={mode}"}
    res = subprocess.run(["bash", str(KERNELS / "build.sh"), str(tmp_path)], capture_output=True, text=True, env=env,
                         check=False)
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    built = tmp_path / "obj" / "sm90_fp8_gemm_persistent.o"
    usage = re.findall(r"STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", _cuobjdump_out("--dump-resource-usage", built))
    assert usage and set(usage) == {("0", "0")}, usage
    want = {0: {128: {(0, 16, 0)}, 160: {(0, 20, 0)}, 192: {(0, 24, 0)}},
            1: {128: {(16, 16, 0)}, 160: {(10, 20, 0)}, 192: {(12, 24, 0)}},
            2: {128: {(0, 0, 32)}, 160: {(0, 0, 40)}, 192: {(0, 0, 48)}}}[mode]
    assert _column_scale_reads(_sass(built)) == want


def _benchmark_tool(name):
    """benchmarks/NAME.py as a module (sass_promotion_yield: the promotion instructions' control bits decoded;
    sass_local_audit: local-memory accesses per kernel)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sm90_persistent_promotion_keeps_ptxas_yield_alternation():
    """The persistent kernels' FP32 promotion instructions (unpredicated ``FFMA Rd, Ra, Rb, Rd`` / ``FADD Rd, Ra, Rd``)
    as decoded from the object's bytes equal cuobjdump's, and their control bits are ptxas's: no instruction both
    yields and keeps a reuse flag, and in the 128x128-scaled kernels about every second FFMA yields (the reuse flag
    on the others). On the H200 that alternation measured 5-7 % faster than every promotion FFMA yielding
    (DeepGEMM's rewrite) and 9-10 % faster than none (forty-first session, h200_promotion_yield.md): a toolchain that
    changes it changes the kernels' speed."""
    obj = _first_existing(BUILD / "obj" / "sm90_fp8_gemm_persistent.o")
    sass = _sass(obj)
    tool = _benchmark_tool("sass_promotion_yield")
    decoded = {}
    for name, _, kind, hi in tool.promotion_instructions(obj.read_bytes()):
        d = decoded.setdefault(name, {"ffma": [], "fadd": []})
        d[kind].append(hi)
    checked = 0
    for body in re.split(r"\n\s*Function : ", sass)[1:]:
        name = body.split("\n", 1)[0].strip()
        if "blockwise_gemm_kernel" not in name:
            continue
        ffma = re.findall(r"\*/\s+FFMA (R\d+), R\d+(?:\.reuse)?, R\d+(?:\.reuse)?, \1 ;", body)
        fadd = re.findall(r"\*/\s+FADD (R\d+), R\d+(?:\.reuse)?, \1 ;", body)
        got = decoded.get(name, {"ffma": [], "fadd": []})
        assert (len(got["ffma"]), len(got["fadd"])) == (len(ffma), len(fadd)), name
        for hi in got["ffma"] + got["fadd"]:
            assert hi & tool.YIELD_BIT or not hi & tool.REUSE_BITS, (name, hex(hi))  # a yielding one keeps no reuse
        if re.search(r"blockwise_gemm_kernelILi\dELi\dELi128E", name):  # 128x128 B scales
            yielding = sum(not hi & tool.YIELD_BIT for hi in got["ffma"]) / len(got["ffma"])
            assert 0.35 <= yielding <= 0.65, (name, yielding)
        checked += 1
    assert checked == 132, checked


# The first per-tensor tile (128x256, FP32 promotion) spilled: STACK:248 and ~390 TFLOP/s on the H200.
@pytest.mark.parametrize(
    "tu",
    [f"{fam}_{out}" for fam in ("tensorwise", "rowwise", "blockwise", "blockwise1d") for out in ("bf16", "f32")]
    + ["persistent"],
)
def test_sm90_gemm_kernels_do_not_spill(tu):
    """Every kernel of a built sm_90a GEMM object: STACK:0 and LOCAL:0 (register spills make it slow)."""
    text = _cuobjdump_out("--dump-resource-usage", _first_existing(BUILD / "obj" / f"sm90_fp8_gemm_{tu}.o"))
    usage = re.findall(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", text)
    assert len(usage) >= 3, text  # 3 operand pairs per TU
    for reg, stack, local in usage:
        assert (stack, local) == ("0", "0"), f"{tu}: REG:{reg} STACK:{stack} LOCAL:{local} (spills)"


def test_sm90_fp8_transpose_moves_16_byte_pieces_without_spills():
    """mxprec_transpose_bytes (cuda_transpose.cu): the whole-tile instance loads and stores 16-byte pieces
    (4 LDG.E.128 / 4 STS.128 / 4 STG.E.128 per thread), reads 32-bit shared words (16 LDS) and transposes
    4 x 4 byte blocks with byte permutes (32 PRMT); neither instance spills."""
    obj = _first_existing(BUILD / "obj" / "cuda_transpose.o")
    usage = re.findall(r"STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", _cuobjdump_out("--dump-resource-usage", obj))
    assert len(usage) == 2 and all(u == ("0", "0") for u in usage), usage
    sass = _sass(obj)
    whole = [f for f in re.split(r"\n\s*Function : ", sass) if "transpose_bytes_kernelILb1E" in f.split("\n", 1)[0]]
    assert len(whole) == 1, "whole-tile instance not found"
    count = lambda pat: len(re.findall(pat, whole[0]))
    assert count(r"\bLDG\.E\.128") == 4 and count(r"\bSTS\.128") == 4 and count(r"\bSTG\.E\.128") == 4
    assert count(r"\bLDS\b") == 16 and count(r"\bPRMT\b") == 32
    assert count(r"\b(LDG|STG)\.E\.U8") == 0


def test_swiglu_kernels_vector_accesses_without_spills():
    """mxprec_swiglu_{backward,forward}_fp8 (cuda_swiglu.cu), one instance per input dtype and FP8 format mix (backward:
    2 x 8, forward: 2 x 2): no spills; the backward reads its three inputs as 16-byte pieces (12 LDG.E.128 per thread: 4
    row passes) and stores d_gate's / d_up's codes as 8-byte pieces (8 STG.E.64), the forward 2 LDG.E.128 and 1
    STG.E.64 per piece; no byte stores to global memory; the FP8 codes come from the saturating converts of each
    instance's own formats (the format is a template parameter, not a branch per element: at least 16 converts per
    output of a format in the backward, 4 in the forward; an all-E4M3 instance has fewer E5M2 converts than one
    output needs, those of the out-of-line exact division). The amax-only passes (mxprec_swiglu_{backward,forward}_amax,
    one instance per input dtype each): 3 / 2 LDG.E.128 per piece, no global store but the one amax reduction."""
    obj = _first_existing(BUILD / "obj" / "cuda_swiglu.o")
    usage = re.findall(r"Function (\S+):\s*\n?\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)",
                       _cuobjdump_out("--dump-resource-usage", obj))
    assert len(usage) == 24, usage
    assert all((stack, local) == ("0", "0") for _, _, stack, local in usage), usage
    funcs = re.split(r"\n\s*Function : ", _sass(obj))[1:]
    for kind, ldg, stg, n_inst, per_output in (("backward", 12, 8, 16, 16), ("forward", 2, 1, 4, 4)):
        found = [f for f in funcs if f"swiglu_{kind}_kernel" in f.split("\n", 1)[0]]
        assert len(found) == n_inst, kind
        for f in found:
            name = f.split("\n", 1)[0]
            e5m2 = [flag == "1" for flag in re.findall(r"Lb([01])E", name)]
            count = lambda pat: len(re.findall(pat, f))
            assert count(r"\bLDG\.E\.128") == ldg and count(r"\bSTG\.E\.64") == stg, kind
            assert count(r"\bSTG\.E\.U8") == 0
            for fmt, n in (("E4M3", e5m2.count(False)), ("E5M2", e5m2.count(True))):
                converts = count(rf"F2FP\.SATFINITE\.{fmt}")
                assert converts >= per_output * n and (n > 0 or converts < per_output), (name, fmt, converts)
    amax = [f for f in funcs if "swiglu_amax_kernel" in f.split("\n", 1)[0]]
    assert len(amax) == 4
    for f in amax:
        backward = "Lb1EE" in f.split("\n", 1)[0]
        count = lambda pat: len(re.findall(pat, f))
        assert count(r"\bLDG\.E\.128") == (3 if backward else 2)
        assert count(r"\bSTG\.") == 0 and count(r"\bREDG\.E\.MAX") == 1


_COL_ROWS = r"col_kernel\S*Li8ELb0ELb1ELb1EE"  # kTransposed + kRows (mxprec_quantize_rows_transposed)


def test_quantize_col_kernel_transposed_instances():
    """mxprec_quantize_transposed's col_kernel instances (kTransposed, one per input dtype) and
    mxprec_quantize_rows_transposed's (kTransposed + kRows): each thread stages its two columns' codes as 16-byte
    chunks (4 STS.128, none of the in-place layout's STS.U16) that leave as 16-byte row pieces of the (B, C, R)
    result; the kRows instances also store the row copy's codes (8-byte STG). No col_kernel instance spills, except
    that the kRows instances, held to 64 registers for 4 CTAs per SM, keep at most 8 local loads / stores (a
    mask and the thread's amax key; without the bound: 79 registers, 3 CTAs per SM and 7.5 % slower on the H200)."""
    obj = _first_existing(BUILD / "obj" / "cuda_quantize.o")
    usage = _cuobjdump_out("--dump-resource-usage", obj)
    col = re.findall(r"Function (\S*(?<!tall_)col_kernel\S*):\s*\n?\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)",
                     usage)
    assert len(col) >= 15, usage
    for name, reg, stack, local in col:
        if re.search(_COL_ROWS, name):
            assert int(reg) <= 64 and int(stack) <= 8 and local == "0", f"{name}: REG:{reg} STACK:{stack} LOCAL:{local}"
        else:
            assert (stack, local) == ("0", "0"), f"{name}: REG:{reg} STACK:{stack} LOCAL:{local} (spills)"
    functions = re.split(r"\n\s*Function : ", _sass(obj))
    transposed = [f for f in functions if re.search(r"col_kernel\S*Li8ELb0ELb1ELb[01]EE", f.split("\n", 1)[0])]
    assert len(transposed) == 6, "transposed col_kernel instances (f32, bf16, f16; with and without rows) not found"
    for body in transposed:
        count = lambda pat: len(re.findall(pat, body))
        assert count(r"\bSTS\.128") == 4 and count(r"\bSTS\.U16") == 0 and count(r"\bSTG\.E\.128") >= 1
        rows = re.search(_COL_ROWS, body.split("\n", 1)[0]) is not None
        assert (count(r"\bSTG\.E\.64") >= 1) == rows
        assert count(r"\b(STL|LDL)") <= (8 if rows else 0)


def test_quantize_tall_col_kernel_instances():
    """tall_col_kernel (row scaling down the columns in one launch): per input dtype, L2 hints or not, and code tile or
    in place. The in-place instances write each thread's codes over its own x words (STS.U16, no code tile) and
    gather them as 8-byte row pieces (STG.E.64); for 2-byte inputs they are held to 48 registers (5 CTAs per SM) and
    keep at most 32 bytes of stack (a few words). Every other instance stores 16-byte row pieces from the code tile
    and does not spill."""
    in_place = lambda name: name.strip().endswith("Lb1EEEvNS1_4ArgsEPjl")  # tall_col_kernel<I, kHint, kInPlace>
    obj = _first_existing(BUILD / "obj" / "cuda_quantize.o")
    usage = re.findall(r"Function (\S*tall_col_kernel\S*):\s*\n?\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)",
                       _cuobjdump_out("--dump-resource-usage", obj))
    assert len(usage) == 12, usage  # f32 / bf16 / f16 x hints x in place
    for name, reg, stack, local in usage:
        resources = f"{name}: REG:{reg} STACK:{stack} LOCAL:{local}"
        if in_place(name) and "InTypeE0E" not in name:  # 2-byte input
            assert int(reg) <= 48 and int(stack) <= 32 and local == "0", resources
        else:
            assert (stack, local) == ("0", "0"), f"{resources} (spills)"
    bodies = [f for f in re.split(r"\n\s*Function : ", _sass(obj)) if "tall_col_kernel" in f.split("\n", 1)[0]]
    assert len(bodies) == 12
    for body in bodies:
        gathered = in_place(body.split("\n", 1)[0])
        count = lambda pat: len(re.findall(pat, body))
        assert count(r"\bSTS\.U16") >= 16, "codes as 16-bit row pairs"
        assert (count(r"\bSTG\.E\.64") >= 1) == gathered and (count(r"\bSTG\.E\.128") >= 1) == (not gathered)


def _assert_local_accesses_in_body(mangled: str, what: str, instances: int = 1, at_most: int = 0) -> None:
    """The `instances` kernels of cuda_quantize.o whose names contain `mangled` have at most `at_most` local-memory
    loads and stores before their last EXIT (benchmarks/sass_local_audit.py)."""
    tool = _benchmark_tool("sass_local_audit")
    obj = _first_existing(BUILD / "obj" / "cuda_quantize.o")
    kernels = {name: ins for name, ins in tool.functions(_sass(obj)).items() if mangled in name}
    assert len(kernels) == instances, f"{what}: {sorted(kernels)}"
    for name, instructions in kernels.items():
        found = tool.audit(instructions)
        assert found["body"] <= at_most, (
            f"{what} ({name}): {found['body']} local accesses in the body, the first: {found['first_store']}")


def test_quantize_onchip_kernel_keeps_x_in_registers():
    """onchip_kernel (per-tensor current scaling in one read of x), its bf16 FP8 instance with L2 hints (the default
    for bf16 training): no local-memory load or store before the kernel's last EXIT, i.e. none outside the cold
    division subroutines placed after it. With the certified multiply's loops written once per path (sixty-second
    session) ptxas kept one register-held round of x in local memory through both phases (an STL.64 right after its
    load), and the tensors that divide got 1-1.5 us slower (h100_quantize_mul_in_loop.md). (The f16 and non-FP8
    instances have spilled in their bodies since before the multiply: not checked.)"""
    _assert_local_accesses_in_body("13onchip_kernelILNS_6InTypeE1ELb1ELb1EE", "onchip_kernel<bf16, FP8, hints>")


def test_quantize_nvfp4_onchip_kernel_keeps_x_in_registers():
    """nvfp4_onchip_kernel (NVFP4 along rows in one read of x), its bf16 instance with L2 hints (the one the default
    rule launches for bf16): no local-memory load or store before the last EXIT. With every chunk of the kNoRegItems
    register items in registers it (REG 125, STACK 16) kept one chunk in local memory through both phases, stored
    after the register loads and before the shared-memory items' loads; the last register item's last two chunks now
    wait in shared memory (kNoTail). (The f16 and unhinted instances still spill: not checked.)"""
    _assert_local_accesses_in_body("19nvfp4_onchip_kernelILNS_6InTypeE1ELb1EE", "nvfp4_onchip_kernel<bf16, hints>")


def test_quantize_row_kernel_bf16_codes_stay_in_registers():
    """row_kernel (FP8 row / 1 x G scaling along rows, groups of 257 .. 16384 elements), its bf16 instances: at most
    three local-memory accesses before the last EXIT (one value stored before the loop, reloaded once per group, and
    once at the end). The FP8 format is a template argument: as a runtime flag, ptxas converted each chunk under both
    formats' predicates into two registers and kept them in local memory across the loop in the 4-chunk instances
    (STACK 40, 19 accesses: two loads and a store per chunk and group)."""
    # 128 x 4, 128 x 8, 512 x 4; E4M3 and E5M2
    _assert_local_accesses_in_body("10row_kernelILNS_6InTypeE1E", "row_kernel<bf16>", instances=6, at_most=3)


def test_quantize_tall_ring_kernel_instances():
    """tall_ring_kernel (MXPREC_QUANTIZE_TALL=3), per input dtype and ring depth (2 / 3 tile buffers): its tiles come by
    one-row bulk copies (UBLKCP) completing on mbarriers (SYNCS), the consumers meet on named barrier 1 of 256 threads
    and never on barrier 0 after the start (the producer warp has left: a __syncthreads there would hang), the codes
    are written in place (STS.U16) and leave as 8-byte row pieces; no spills, and few enough registers for the CTAs
    per SM the ring's shared memory allows (2-byte inputs: 2 with 3 slots, 3 with 2; f32: 1)."""
    obj = _first_existing(BUILD / "obj" / "cuda_quantize.o")
    usage = re.findall(r"Function (\S*tall_ring_kernel\S*):\s*\n?\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)",
                       _cuobjdump_out("--dump-resource-usage", obj))
    assert len(usage) == 6, usage  # f32 / bf16 / f16 x 2 / 3 slots
    for name, reg, stack, local in usage:
        slots = int(re.search(r"ELi(\d)EEEvNS1_4ArgsEPjl", name).group(1))
        ctas = 1 if "InTypeE0E" in name else 6 // slots
        warps = (256 + 32) // 32
        assert (stack, local) == ("0", "0"), f"{name}: REG:{reg} STACK:{stack} LOCAL:{local} (spills)"
        assert ctas * warps * 32 * ((int(reg) + 7) // 8 * 8) <= 65536, f"{name}: REG:{reg} for {ctas} CTAs per SM"
    bodies = [f for f in re.split(r"\n\s*Function : ", _sass(obj)) if "tall_ring_kernel" in f.split("\n", 1)[0]]
    assert len(bodies) == 6
    for body in bodies:
        count = lambda pat: len(re.findall(pat, body))
        assert count(r"\bUBLKCP\.S\.G\b") >= 4 and count(r"\bSYNCS\.PHASECHK") >= 2, "bulk copies on mbarriers"
        assert count(r"\bBAR\.SYNC\S* 0x0\b") == 1, "barrier 0 only before the producer warp leaves"
        assert count(r"\bBAR\.SYNC\S* 0x1, 0x100\b") >= 3, "the consumers' named barrier"
        assert count(r"\bSTS\.U16") >= 16 and count(r"\bSTG\.E\.64") >= 1, "codes in place, 8-byte row pieces"


def test_quantize_cp_async_destinations_start_on_32_byte_sectors():
    """Every kernel of cuda_quantize.o that copies x into shared memory by cp.async (LDGSTS) starts the buffer on a
    32-byte boundary, as its 16-byte global sources are placed in their sectors: with the two 16 bytes apart, each
    warp's copy of 512 bytes took 32 L2 sectors instead of 16 (tall_col_kernel until the fifty-fifth session, ncu:
    12.8 M sectors requested for 8.7 M of data, h100_quantize_l2.md). The dynamic base follows the static shared words
    (cuobjdump's SHARED, 1 KiB reserved included) on a 16-byte boundary, so either those end on a 32-byte boundary or
    the kernel rounds its buffer up at run time (tall_col_kernel: `& 0x7f` of the base, kTallSmemPad).
    nvfp4_onchip_kernel is exempt, with exactly its two tail copies: each thread copies 16 bytes of its own 64-byte
    item, so a warp's 32 sources lie in 32 different sectors wherever the destinations start."""
    obj = _first_existing(BUILD / "obj" / "cuda_quantize.o")
    shared = dict(re.findall(r"Function (\S+):\s*\n?\s*REG:\d+ STACK:\d+ SHARED:(\d+)",
                             _cuobjdump_out("--dump-resource-usage", obj)))
    checked = 0
    for body in re.split(r"\n\s*Function : ", _sass(obj))[1:]:
        name = body.split("\n", 1)[0].strip()
        if not re.search(r"\bLDGSTS\b", body):
            continue
        if "nvfp4_onchip_kernel" in name:  # the strided tail copies (kNoTail = 2)
            assert len(re.findall(r"\bLDGSTS\b", body)) == 2, name
            continue
        checked += 1
        rounded = re.search(r"\bULOP3\.LUT UR\d+, UR\d+, 0x7f,", body) is not None
        assert rounded or (int(shared[name]) - 1024) % 32 == 0, f"{name}: SHARED:{shared[name]}, its buffer off a sector"
        assert rounded == ("tall_col_kernel" in name), name
    assert checked >= 30, checked  # col_kernel, row_kernel and tall_col_kernel instances


def test_swiglu_tile_kernel_instances():
    """fp8_block's SwiGLU tile kernels (swiglu_tile_kernel in cuda_quantize.cu: h along F, h K-major, the gradients;
    bf16 and f16 each): held to 64 registers (4 CTAs per SM), no local memory; the h instances keep no stack, the
    gradients' (two col_tile_codes with row groups, as col_kernel's kRows instances) at most 16 bytes and 10 local
    accesses. The inputs arrive as 16-byte loads (2 per 8-element piece for h, 3 + 2 for d_gate then d_up, the loop
    unrolled twice), one exp per element and product (the gradients compute the sigmoid twice), the row copies leave
    as 8-byte stores and the K-major copies as 16-byte row pieces."""
    obj = _first_existing(BUILD / "obj" / "cuda_quantize.o")
    usage = re.findall(r"Function (\S*swiglu_tile_kernel\S*):\s*\n?\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)",
                       _cuobjdump_out("--dump-resource-usage", obj))
    assert len(usage) == 6, usage
    mode = lambda name: int(re.search(r"InTypeE\dELi(\d)E", name).group(1))
    for name, reg, stack, local in usage:
        assert int(reg) <= 64 and local == "0" and int(stack) <= (16 if mode(name) == 2 else 0), (name, reg, stack)
    funcs = [f for f in re.split(r"\n\s*Function : ", _sass(obj)) if "swiglu_tile_kernel" in f.split("\n", 1)[0]]
    assert len(funcs) == 6
    for f in funcs:
        m = mode(f.split("\n", 1)[0])
        count = lambda pat: len(re.findall(pat, f))
        assert count(r"\bLDG\.E\.128") == (10 if m == 2 else 4) and count(r"MUFU\.EX2") == (32 if m == 2 else 16), m
        assert (count(r"\bSTG\.E\.64") >= 1) == (m != 1) and (count(r"\bSTG\.E\.128") >= 1) == (m != 0), m
        assert count(r"\b(STL|LDL)") <= (10 if m == 2 else 0), m


@pytest.mark.parametrize("serialized", [True, False])
def test_build_fails_when_ptxas_serializes_wgmmas(tmp_path, serialized):
    """build.sh treats ptxas's C7514 ("wgmma.mma_async instructions are serialized") as an error: a stand-in
    nvcc (no CUDA needed) compiles one TU, printing C7514 or not; the link only runs without it."""
    message = "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized"
    compile_output = f"echo '{message}'" if serialized else "true"
    fake = tmp_path / "nvcc"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'out="${@: -1}"\n'
        f'if [[ " $* " == *" -c "* ]]; then {compile_output}; fi\n'
        'touch "$out"\n'
    )
    fake.chmod(0o755)
    cutlass = tmp_path / "cutlass"
    (cutlass / "include" / "cutlass").mkdir(parents=True)
    (cutlass / "include" / "cutlass" / "cutlass.h").write_text("")
    out = tmp_path / "build"
    (out / "obj").mkdir(parents=True)
    for src in list(KERNELS.glob("sm90_*.cu")) + list(KERNELS.glob("cuda_*.cu")):
        (out / "obj" / f"{src.stem}.o").write_text("")
    env = {**os.environ, "NVCC": str(fake), "PYTHON": sys.executable, "CUTLASS_DIR": str(cutlass),
           "ONLY": "sm90_fp8_gemm_tensorwise_bf16*", "JOBS": "1"}
    res = subprocess.run(["bash", str(KERNELS / "build.sh"), str(out)], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    if serialized:
        assert res.returncode != 0
        assert "serialized the WGMMAs (C7514)" in res.stderr
        assert "sm90_fp8_gemm_tensorwise_bf16.o.log" in res.stderr
        assert not (out / "libmxprec_cuda.so").exists()
    else:
        assert res.returncode == 0, res.stderr
        assert (out / "libmxprec_cuda.so").exists()
