"""Analysis models: memory, Amdahl, FLOPs."""

import pytest

from mxprec.analysis import amdahl, flops, memory


def test_memory_70b_fsdp8():
    est = memory.seed_memory(70e9, 8)
    assert est.persistent_bytes == pytest.approx(105e9)
    assert est.gradient_bytes == pytest.approx(35e9)
    assert est.persistent_gb == pytest.approx(105.0)
    assert est.gradient_gb == pytest.approx(35.0)
    assert est.saved_activation_bytes == 0.0
    assert est.total_gb == pytest.approx(140.0)


@pytest.mark.parametrize(
    "fmt, expected",
    [("bf16", 2.0), ("fp8", 1.0), ("mxfp8", 1.03125), ("mxfp6", 0.78125), ("mxfp4", 0.53125), ("nvfp4", 0.5625)],
)
def test_bytes_per_value(fmt, expected):
    assert memory.format_bytes_per_value(fmt) == expected


def test_seed_saved_formula():
    est = memory.seed_memory(0, 1, a_high=1000, a_low=3200, low_format="mxfp8")
    assert est.saved_activation_bytes == 2 * 1000 + 3200 * (8 / 8 + 1 / 32)


def test_llama_memory_full_remat():
    L, D, F, S, B = 4, 8, 16, 5, 2
    t = B * S
    est = memory.llama_memory(
        n_params=1e6, n_layers=L, d_model=D, d_ff=F, seq=S, batch=B, fsdp=2, recipe_name="mxfp4"
    )
    a_h = L * t * D + t * (5 * D + 2 * F)
    a_e = t * (3 * D + F)
    assert est.saved_activation_bytes == pytest.approx(2 * a_h + 0.53125 * a_e)
    assert est.persistent_bytes == pytest.approx(6e6)
    bf16 = memory.llama_memory(
        n_params=1e6, n_layers=L, d_model=D, d_ff=F, seq=S, batch=B, fsdp=2, recipe_name="bf16"
    )
    assert bf16.saved_activation_bytes == pytest.approx(2 * (a_h + a_e))
    none = memory.llama_memory(
        n_params=1e6, n_layers=L, d_model=D, d_ff=F, seq=S, batch=B, fsdp=2, recipe_name="bf16", remat="none"
    )
    assert none.saved_activation_bytes == pytest.approx(2 * L * (t * (5 * D + 2 * F) + a_e))


def test_memory_bad_input():
    with pytest.raises(ValueError, match="fsdp=0"):
        memory.seed_memory(1e9, 0)
    with pytest.raises(ValueError, match="bogus"):
        memory.format_bytes_per_value("bogus")
    with pytest.raises(ValueError, match="partial"):
        memory.llama_memory(
            n_params=1, n_layers=1, d_model=1, d_ff=1, seq=1, batch=1, fsdp=1, recipe_name="bf16", remat="partial"
        )


def test_amdahl_seed_numbers():
    assert [round(v, 2) for v in amdahl.amdahl_table(2.0).values()] == [1.54, 1.67, 1.82]
    assert [round(v, 2) for v in amdahl.amdahl_table(4.0).values()] == [2.11, 2.50, 3.08]
    assert amdahl.amdahl_speedup(0.0, 4.0) == 1.0
    assert amdahl.amdahl_speedup(1.0, 4.0) == 4.0


def test_peak_ratios():
    assert amdahl.peak_ratio("fp8", "hopper") == 2.0
    assert amdahl.peak_ratio("mxfp4", "hopper") == 2.0
    assert amdahl.peak_ratio("mxfp4", "blackwell") == 4.0
    assert amdahl.peak_ratio("fp8", "blackwell") == 2.0
    with pytest.raises(ValueError, match="volta"):
        amdahl.peak_ratio("fp8", "volta")
    with pytest.raises(ValueError, match="1.5"):
        amdahl.amdahl_speedup(1.5, 2.0)


def test_llama_flops_hand_computed():
    # D=4, F=8, L=2, H=2, KV=1, hd=2, V=10, S=3, B=1
    # per layer fwd: ffn 6*3*4*8 = 576, qkv 2*3*4*(2+2)*2 = 192, proj 2*3*4*2*2 = 96 -> 864
    # matmul = 3 * (864*2 + 2*3*4*10) = 3 * 1968 = 5904
    # attention fwd noncausal 4*9*2*2 = 144, causal 72; x3 x L = 432
    out = flops.llama_train_flops(
        d_model=4, d_ff=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=2, vocab=10, seq=3, batch=1
    )
    assert out == {"total": 6336, "matmul": 5904, "attention": 432}
    noncausal = flops.llama_train_flops(
        d_model=4, d_ff=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=2, vocab=10, seq=3, batch=1, causal=False
    )
    assert noncausal["attention"] == 864
    assert noncausal["matmul"] == 5904


def test_llama_flops_close_to_6N():
    # Llama-2-7B-like: matmul FLOPs per token ~ 6 * matmul params
    kw = dict(d_model=4096, d_ff=11008, n_layers=32, n_heads=32, n_kv_heads=32, head_dim=128, vocab=32000)
    out = flops.llama_train_flops(**kw, seq=4096, batch=2)
    n_matmul = 32 * (3 * 4096 * 11008 + 4 * 4096 * 4096) + 4096 * 32000
    assert out["matmul"] == 6 * 2 * 4096 * n_matmul
    assert out["attention"] == 6 * 2 * 4096**2 * 32 * 128 * 32
    with pytest.raises(ValueError, match="n_kv_heads"):
        flops.llama_train_flops(**{**kw, "n_kv_heads": 0}, seq=1, batch=1)


def test_mfu():
    assert flops.mfu(1e15, 1.0, 2, 1e15) == 0.5
    for bad in (float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="need positive step_seconds"):
            flops.mfu(1e15, bad, 2, 1e15)


def test_llama_memory_takes_every_recipe_name():
    """Every preset and alias of mxprec.recipes names a saved-value format (fp8_block, fp8_rowwise, fp16 and
    mxfp8_floor were refused until the fiftieth session); the FP8 family saves 1 byte per value, fp16 2."""
    from mxprec import recipes

    kw = dict(n_params=1e9, n_layers=2, d_model=512, d_ff=1024, seq=128, batch=2, fsdp=1)
    for name in recipes.names():
        assert memory.llama_memory(**kw, recipe_name=name).total_bytes > 0, name
    fp8 = memory.llama_memory(**kw, recipe_name="fp8_delayed").total_bytes
    assert memory.llama_memory(**kw, recipe_name="fp8_block").total_bytes == fp8
    assert memory.llama_memory(**kw, recipe_name="fp16").total_bytes == memory.llama_memory(
        **kw, recipe_name="bf16").total_bytes
