"""mxprec.bench.trace_summary on a synthetic Chrome trace (the layout jax.profiler writes on GPU)."""

from __future__ import annotations

import gzip
import json

from mxprec.bench.trace_summary import categorize, idle_gaps, summarize_trace


def test_categorize_kernel_names():
    assert categorize("nvjet_sm90_qrtst_128x160_128x5_2x1_v_bz_coopA_algo2_TNT") == "gemm_fp8"
    assert categorize("nvjet_sm90_tststt_128x256_64x4_1x2_h_bz_TNT") == "gemm_wide"
    assert categorize("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32") == "gemm_wide"
    assert categorize("cutlass::device_kernel<GemmUniversal<MainloopSm90TmaGmmaWarpSpecializedFP8<float_e4m3_t>>>") == "gemm_fp8"
    # mxprec's own GEMMs are FP8 (their names carry no type); its quantize / transpose kernels are not GEMMs.
    assert categorize("void mxprec::cuda::persistent::blockwise_gemm_kernel<2, 0, 1, 192, 5, 1, 2>(CUtensorMap_st, "
                      "CUtensorMap_st, float const*, void*, int, int,") == "gemm_fp8"
    assert categorize("mxprec::cuda::(anonymous namespace)::transpose_scales_kernel(ScaleTranspose, long)") == "other"
    assert categorize("void mxprec::cuda_quantize::(anonymous namespace)::col_kernel<(mxprec::InType)1, true, 8, "
                      "false, true>(Args)") == "other"
    assert categorize("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16") == "attention"
    assert categorize("input_convert_transpose_fusion_8") == "other"


def test_summarize_trace_counts_gpu_stream_kernels_per_step(tmp_path):
    run = tmp_path / "plugins" / "profile" / "2026_11_29"
    run.mkdir(parents=True)
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Stream #14(Compute)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 8, "args": {"name": "XLA Ops"}},
        {"ph": "X", "pid": 1, "tid": 7, "name": "nvjet_sm90_qqtst_x", "ts": 0, "dur": 3000.0},
        {"ph": "X", "pid": 1, "tid": 7, "name": "loop_add_fusion", "ts": 0, "dur": 1000.0},
        {"ph": "X", "pid": 1, "tid": 7, "name": "Memset 3", "ts": 0, "dur": 2.0},
        {"ph": "X", "pid": 1, "tid": 7, "name": "Memset 3", "ts": 0, "dur": 2.0},
        {"ph": "X", "pid": 1, "tid": 8, "name": "fusion.1", "ts": 0, "dur": 4000.0},
        {"ph": "X", "pid": 2, "tid": 1, "name": "python", "ts": 0, "dur": 9000.0},
    ]
    with gzip.open(run / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    s = summarize_trace(str(tmp_path), steps=2)
    assert s["gpu_kernel_ms"] == 2.002  # (3 + 1 + 0.004) ms over 2 steps; the XLA Ops row is not a kernel
    assert s["categories_ms"] == {"gemm_fp8": 1.5, "other": 0.502}
    assert s["top_ops_ms"] == [["fusion.1", 2.0]]
    assert s["kernel_launches"] == 2  # 4 kernels over 2 steps
    assert s["top_kernels_launches"] == {"nvjet_sm90_qqtst_x": 0.5, "loop_add_fusion": 0.5, "Memset 3": 1.0}


def test_idle_gaps_are_the_holes_in_the_union_of_the_streams_kernels():
    # stream A: [0, 10) and [30, 40); stream B: [5, 20) overlaps the first; [1040, 1050) after a 1 ms hole
    kernels = [(0.0, 10.0, "a1"), (30.0, 10.0, "a2"), (5.0, 15.0, "b1"), (1040.0, 10.0, "late")]
    g = idle_gaps(kernels, steps=2)
    assert g["idle_ms"] == 0.505  # (10 + 1000) us over 2 steps
    assert g["by_bucket"]["5-20us"] == {"ms": 0.005, "count": 0.5}
    assert g["by_bucket"][">=1ms"] == {"ms": 0.5, "count": 0.5}
    assert g["by_bucket"]["<5us"] == {"ms": 0.0, "count": 0.0}
    assert g["before_kernel_ms"] == [["late", 0.5], ["a2", 0.005]]
    assert g["after_kernel_ms"] == [["a2", 0.5], ["b1", 0.005]]  # b1 ends last before the 10 us hole
    assert g["largest_us"][0] == [1000.0, "a2", "late"]


def test_summarize_trace_reports_idle_time_per_gpu(tmp_path):
    run = tmp_path / "plugins" / "profile" / "r"
    run.mkdir(parents=True)
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Stream #14(Compute)"}},
        {"ph": "X", "pid": 1, "tid": 7, "name": "k1", "ts": 100, "dur": 50.0},
        {"ph": "X", "pid": 1, "tid": 7, "name": "k2", "ts": 160, "dur": 40.0},
    ]
    with gzip.open(run / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    (idle,) = summarize_trace(str(tmp_path), steps=1)["idle"]
    assert idle["idle_ms"] == 0.01 and idle["before_kernel_ms"] == [["k2", 0.01]]
