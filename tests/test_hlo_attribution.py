"""mxprec.bench.hlo_attribution on a synthetic HLO text (the layout of XLA's optimized-HLO dump)."""

from mxprec.bench.hlo_attribution import attribute, fusion_index

HLO = """
ENTRY %main {
  %input_transpose_fusion.4 = f8e5m2[4096,16384]{1,0} fusion(%input_convert_reduce_fusion.1), kind=kCustom, calls=%fused_transpose.4, metadata={op_name="jit(step)/dot/optimization_barrier" deduplicated_name="input_transpose_fusion.4"}
  %input_convert_reduce_fusion.1 = (u16[8192]{0}, f8e5m2[1,16384,4096]{2,1,0}) fusion(%p0, %p1), kind=kInput, calls=%fused_convert_reduce.1, metadata={op_name="jit(step)/layers/mlp/wo/MxDotGeneral_0/reduce_max"}
  %loop_add_fusion.5 = (f32[4,4096]{1,0}, f32[4,4096]{1,0}) fusion(%state__params__w, %state__opt_state___0__mu__w), kind=kLoop, calls=%fused_add.5, metadata={op_name="jit(step)/add"}
  %input_add_reduce_fusion.2 = (f32[128,4096]{1,0}, bf16[4,4096,4096]{2,1,0}) fusion(%a, %b), kind=kInput, calls=%fused_add_reduce.2, metadata={op_name="jit(step)/layers/pre_mlp_norm/reduce_sum" scheduling_name="input_add_reduce_fusion.7"}
  %loop_add_fusion.1 = bf16[4,4096,4096]{2,1,0} fusion(%a, %b), kind=kLoop, calls=%fused_add.1, metadata={op_name="jit(step)/layers/add"}
}
"""


def test_fusion_index_keys_by_name_deduplicated_and_scheduling_name():
    idx = fusion_index(HLO)
    assert idx["input_transpose_fusion_4"][0].startswith("f8e5m2[4096,16384]")
    assert idx["input_add_reduce_fusion_7"] == idx["input_add_reduce_fusion_2"]
    assert idx["loop_add_fusion_5"][2] == "jit(step)/add"


def test_attribute_files_kernels_under_roles():
    top = [
        ("input_transpose_fusion_4", "other", 1.5),
        ("input_convert_reduce_fusion_1", "other", 1.25),
        ("void mxprec::cuda_quantize::(anonymous namespace)::tensor_kernel<1, true>(Args)", "other", 2.0),
        ("loop_add_fusion_5", "other", 3.0),
        ("input_add_reduce_fusion_7", "other", 0.5),
        ("loop_add_fusion_1", "other", 0.25),
        ("nvjet_sm90_qqtst_128x160", "gemm_fp8", 20.0),  # not "other": left out
        ("unknown_kernel", "other", 0.125),
    ]
    roles, rows = attribute(top, HLO)
    assert roles == {"fp8_transpose": 1.5, "fp8_cast": 1.25, "mxprec_quantize": 2.0, "optimizer": 3.0,
                     "norm": 0.5, "other": 0.375}
    assert len(rows) == 7 and rows[0]["role"] == "fp8_transpose"


def test_fusion_index_takes_lines_that_end_at_calls():
    """A dump without metadata (``--xla_dump_disable_metadata``) ends a fusion's line right after ``calls=%...``."""
    hlo = """
  %loop_convert_fusion.3 = f8e4m3fn[64,64]{1,0} fusion(%p0), kind=kLoop, calls=%fused_convert.3
  ROOT %input_transpose_fusion.9 = f8e4m3fn[64,64]{1,0} fusion(%loop_convert_fusion.3), kind=kInput, calls=%fused_t.9
"""
    idx = fusion_index(hlo)
    assert set(idx) == {"loop_convert_fusion_3", "input_transpose_fusion_9"} and idx["loop_convert_fusion_3"][2] == ""
    roles, _ = attribute([("loop_convert_fusion_3", "other", 1.0), ("input_transpose_fusion_9", "other", 2.0)], hlo)
    assert roles["fp8_cast"] == 1.0 and roles["fp8_transpose"] == 2.0
