"""mxprec.models.llama and the Llama-step benchmark (mxprec.bench.llama), on micro configs."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mxprec.bench import llama as bench
from mxprec.flax.linen import OVERWRITE_WITH_GRADIENT
from mxprec.models import llama as L

ARMS = ("bf16", "fp16", "fp8_delayed", "fp8_current", "fp8_block", "mxfp8", "mxfp6", "mxfp4", "flax_fp8")
LONG_ARMS = {"bf16": 20, "mxfp8": 20}  # arms trained long enough to see the loss go down
BATCH = 2


def _cfg(arm):
    """Micro configs that keep each compile short on a 2-core CPU.

    Most arms: one unrolled layer, no remat, the logits head quantized. fp8_delayed: two scanned,
    fully rematerialized layers with the MLP quantized (stacked per-layer OWG state, the state
    read again by the recomputed forward). The CLI test runs the scanned + remat path too.
    """
    if arm == "fp8_delayed":
        return L.micro(n_layers=2, quantize=("mlp",))
    return L.micro(n_layers=1, quantize=("logits",), remat="none", scan_layers=False)


def _owg_f32(variables):
    return jax.tree.map(lambda a: np.asarray(jax.lax.convert_element_type(a, jnp.float32)),
                        variables.get(OVERWRITE_WITH_GRADIENT, {}))


_RUNS = {}


def _train(arm, steps):
    """Trains ``arm`` for ``steps`` on one fixed batch; returns losses, finites, OWG snapshots, params."""
    if arm in _RUNS:
        return _RUNS[arm]
    model, cfg, info = bench.build_model(_cfg(arm), arm)
    tx = bench.make_optimizer(lr=3e-3)
    state = bench.init_train_state(model, cfg, tx, batch=BATCH, seed=0, loss_scale=info["loss_scale"])
    params0 = jax.tree.map(np.asarray, state["variables"]["params"])
    batch = bench.synthetic_batch(cfg, BATCH, seed=0)
    # No donation (snapshots stay readable); XLA -O0 for a quicker compile.
    step = jax.jit(bench.make_train_step(model, tx)).lower(state, batch).compile(
        compiler_options=bench.FAST_COMPILE)
    losses, finites, owg = [], [], [_owg_f32(state["variables"])]
    for _ in range(steps):
        state, m = step(state, batch)
        losses.append(float(m["loss"]))
        finites.append(bool(m["finite"]))
        if len(owg) < 3:
            owg.append(_owg_f32(state["variables"]))
    out = dict(losses=losses, finites=finites, owg=owg, params0=params0,
               params=jax.tree.map(np.asarray, state["variables"]["params"]), state=state)
    _RUNS[arm] = out
    return out


# ----------------------------------------------------------------------------- model


def test_forward_shapes_and_param_count():
    cfg = L.micro()
    tokens = jax.ShapeDtypeStruct((BATCH, cfg.seq), jnp.int32)
    for recipe, quantize in ((None, L.GROUPS), ("mxfp8", ("mlp", "logits")), ("fp8_delayed", ("attn",))):
        model = L.Llama(cfg.replace(quantize=quantize), recipe)
        variables = jax.eval_shape(model.init, jax.random.key(0), tokens)
        logits = jax.eval_shape(model.apply, variables, tokens)
        assert logits.shape == (BATCH, cfg.seq, cfg.vocab)
        assert logits.dtype == jnp.bfloat16
        n = sum(math.prod(p.shape) for p in jax.tree.leaves(variables["params"]))
        assert n == L.count_params(cfg)
        assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables["params"]))
        assert (OVERWRITE_WITH_GRADIENT in variables) == (recipe == "fp8_delayed")
    # Unrolled layers: same parameter count; scanned OWG state stacked per layer.
    unrolled = L.Llama(cfg.replace(scan_layers=False), None)
    v = jax.eval_shape(unrolled.init, jax.random.key(0), tokens)
    assert sum(math.prod(p.shape) for p in jax.tree.leaves(v["params"])) == L.count_params(cfg)
    v = jax.eval_shape(L.Llama(cfg, "fp8_delayed").init, jax.random.key(0), tokens)
    hist = v[OVERWRITE_WITH_GRADIENT]["layers"]["mlp"]["wi_0"]["MxDotGeneral_0"]["input_amax_history"]
    assert hist.shape[0] == cfg.n_layers


def test_config_validation_and_presets():
    with pytest.raises(ValueError, match="groups"):
        L.micro(quantize=("mlp", "embed"))
    with pytest.raises(ValueError, match="n_kv_heads"):
        L.micro(n_heads=3, n_kv_heads=2)
    with pytest.raises(ValueError, match="remat"):
        L.micro(remat="some")
    assert L.micro(quantize=("logits", "mlp")).quantize == ("mlp", "logits")
    big = L.llama3_8b_4layer()
    assert (big.d_model, big.d_ff, big.n_heads, big.n_kv_heads, big.n_layers, big.vocab, big.seq) == (
        4096, 14336, 32, 8, 4, 32000, 4096)
    assert 1.5e9 <= L.count_params(L.h200_large()) <= 3.5e9
    assert L.llama70b_layer().d_ff == 28672
    for name in ("tiny", "llama3_8b_4layer", "h200_large", "llama70b_layer"):
        c = L.get_config(name)
        for dim in (c.d_model, c.d_ff, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.vocab):
            assert dim % 128 == 0, (name, dim)  # fp8_block 128x128 tiles and MX blocks of 32 divide
        assert json.dumps(c.to_dict())


# ----------------------------------------------------------------------------- training


@pytest.mark.parametrize("arm", ARMS)
def test_train_step_finite(arm):
    run = _train(arm, LONG_ARMS.get(arm, 2))
    assert all(np.isfinite(run["losses"])), run["losses"]
    for leaf in jax.tree.leaves(run["params"]):
        assert np.all(np.isfinite(leaf))
    changed = any(not np.array_equal(a, b) for a, b in
                  zip(jax.tree.leaves(run["params0"]), jax.tree.leaves(run["params"])))
    if arm == "fp16":
        # Dynamic loss scaling may skip the first steps (overflow at 2**15) but must not go NaN.
        assert run["state"]["loss_scale"] is not None
        assert changed or not any(run["finites"])
        assert float(run["state"]["loss_scale"].scale) <= 2.0**15
    else:
        assert all(run["finites"]) and changed
    assert abs(run["losses"][0] - math.log(L.micro().vocab)) < 1.0  # starts near uniform


@pytest.mark.parametrize("arm", sorted(LONG_ARMS))
def test_loss_goes_down(arm):
    losses = _train(arm, LONG_ARMS[arm])["losses"]
    assert losses[-1] < losses[0] - 0.5, losses
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_fp8_delayed_owg_state_changes():
    owg = _train("fp8_delayed", 2)["owg"]
    assert owg[0], "fp8_delayed keeps its state in the _overwrite_with_gradient collection"
    h = [o["layers"]["mlp"]["wi_0"]["MxDotGeneral_0"]["input_amax_history"] for o in owg]
    n_layers = _cfg("fp8_delayed").n_layers
    assert h[0].shape == (n_layers, 1024) and np.all(h[0] == 0)  # one history per scanned layer
    assert np.any(h[1] != h[0]) and np.any(h[2] != h[1])  # a new amax recorded every step
    assert np.all(h[1][:, 0] > 0) and h[1][0, 0] != h[1][1, 0]  # each layer records its own amax
    g = [o["layers"]["mlp"]["wo"]["MxDotGeneral_0"]["output_grad_amax_history"] for o in owg]
    assert np.any(g[1] != g[0])  # the backward pass updated dY's history too
    s = [o["layers"]["mlp"]["wi_0"]["MxDotGeneral_0"]["input_scale"] for o in owg]
    assert np.all(s[0] == 1) and np.any(s[2] != s[0])  # scale follows the history


def test_init_variables_matches_model_init():
    """The bench's init (shared params + OWG filled with 0 / 1) has model.init's structure and values."""
    model, cfg, _ = bench.build_model(_cfg("bf16"), "fp8_delayed")  # OWG state in the logits head
    fast = bench.init_variables(model, cfg, batch=BATCH, seed=0)
    tokens = jnp.zeros((BATCH, cfg.seq), jnp.int32)
    ref = jax.eval_shape(model.init, jax.random.key(0), tokens)
    assert jax.tree.structure(fast) == jax.tree.structure(dict(ref))
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(dict(ref))):
        assert a.dtype == b.dtype and a.shape == b.shape
    for path, leaf in jax.tree_util.tree_leaves_with_path(_owg_f32(fast)):
        want = 0.0 if str(path[-1].key).endswith("amax_history") else 1.0
        assert np.all(leaf == want), path
    again = bench.init_variables(model, cfg, batch=BATCH, seed=0)  # fresh (donatable) copies, same values
    for a, b in zip(jax.tree.leaves(fast["params"]), jax.tree.leaves(again["params"])):
        assert a is not b
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------- benchmark


def test_gemm_shapes_and_flops():
    cfg = L.tiny()
    gemms = bench.projection_gemms(cfg, 4)
    assert {g["name"] for g in gemms} == {"query", "key", "value", "out", "wi_0", "wi_1", "wo", "logits"}
    # The projections' 2·M·K·N sum is the MaxText matmul FLOPs (forward) of the model.
    from mxprec.analysis import llama_train_flops

    fwd = sum(2 * g["M"] * g["K"] * g["N"] * (cfg.n_layers if g["per_layer"] else 1) for g in gemms)
    f = llama_train_flops(d_model=cfg.d_model, d_ff=cfg.d_ff, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                          n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, vocab=cfg.vocab, seq=cfg.seq, batch=4)
    assert 3 * fwd == f["matmul"]


def test_failing_arm_gives_error_row():
    args = bench.parse_args(["--config", "micro", "--no-progress"])
    row = bench._run_arm_safely("no_such_recipe", args, L.micro())
    assert "error" in row and "unknown recipe" in row["error"]
    assert set(bench.ROW_KEYS) <= set(row) and row["step_s_mean"] is None
    rows = [dict(bench.error_row("bf16", "OOM"))]
    assert bench.finish_rows(rows, "hopper")["f_measured"] is None


def test_bench_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "res"
    result = bench.main(["--config", "micro", "--arms", "bf16,fp8_current", "--steps", "2", "--warmup", "1",
                         "--batch", "2", "--quantize", "mlp", "--remat", "none", "--out", str(out), "--no-progress",
                         "--gemm-reps", "1", "--fast-compile"])
    path = out / "llama_micro.json"
    assert path.exists() and (out / "llama_micro.md").exists()
    data = json.loads(path.read_text())
    for k in ("device", "command", "date", "model", "rows"):
        assert k in data
    assert data["model"]["d_model"] == L.micro().d_model and data["model"]["batch"] == 2
    assert [r["arm"] for r in data["rows"]] == ["bf16", "fp8_current"]
    for r in data["rows"]:
        assert "error" not in r, r.get("error")
        assert set(bench.ROW_KEYS) <= set(r)
        assert r["step_s_mean"] > 0 and r["tokens_per_s_per_device"] > 0 and r["compile_s"] > 0
        assert r["predicted_mem_gb"] > 0 and r["expected_speedup"] >= 1.0
    assert data["rows"][0]["speedup_vs_bf16"] == pytest.approx(1.0)
    assert 0.0 < data["amdahl"]["f_measured"] <= 1.0
    table = capsys.readouterr().out
    assert "| arm | step (ms)" in table and "fp8_current" in table and "f=0.7" in table
    if os.environ.get("MPLBACKEND", "") != "none":
        try:
            import matplotlib  # noqa: F401

            assert (out / "llama_micro.png").exists()
        except ImportError:
            pass
    assert result["rows"][1]["arm"] == "fp8_current"


def test_arm_names_select_a_backend():
    assert bench.arm_info("fp8_current:xla")["recipe"].backend == "xla"
    assert bench.arm_info("fp8_current")["recipe"].backend == "auto"
    with pytest.raises(ValueError):
        bench.arm_info("fp8_current:nope")


def test_bench_merge_combines_per_arm_runs(tmp_path):
    """--merge: rows of separate runs (one process / device call per arm) in one table, Amdahl redone."""
    common = ["--config", "micro", "--steps", "1", "--warmup", "0", "--batch", "2", "--quantize", "mlp",
              "--remat", "none", "--no-progress", "--gemm-reps", "1", "--fast-compile", "--isolate", "off"]
    a = bench.main(common + ["--arms", "bf16", "--out", str(tmp_path / "a"), "--profile", str(tmp_path / "prof")])
    assert set(a["rows"][0]["profile"]) >= {"gpu_kernel_ms", "categories_ms", "top_kernels_ms"}  # 0 kernels on CPU
    bench.main(common + ["--arms", "flax_bf16", "--out", str(tmp_path / "b")])
    merged = bench.main(["--merge", str(tmp_path / "a" / "llama_micro.json"), str(tmp_path / "b" / "llama_micro.json"),
                         "--out", str(tmp_path / "m")])
    assert [r["arm"] for r in merged["rows"]] == ["bf16", "flax_bf16"]
    assert merged["rows"][1]["speedup_vs_bf16"] > 0 and merged["amdahl"]["f_measured"] is not None
    assert "plain flax" in merged["rows"][1]["backend"]
    data = json.loads((tmp_path / "m" / "llama_micro.json").read_text())
    assert data["merged_from"] == ["llama_micro.json", "llama_micro.json"] and ";" in data["command"]
    data["notes"] = ["why a target is missed"]
    assert "## Notes\n\n- why a target is missed" in bench.markdown(data)
    # the BF16 arm's CPU profile has no GPU kernels: f from the standalone GEMM timing, and the table says so
    assert data["amdahl"]["f_source"] == "standalone" and "timed standalone in BF16" in bench.markdown(data)
    other = json.loads((tmp_path / "a" / "llama_micro.json").read_text())
    other["model"]["d_model"] += 1
    (tmp_path / "c.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="different models"):
        bench.merge_results([str(tmp_path / "a" / "llama_micro.json"), str(tmp_path / "c.json")], str(tmp_path / "n"))


def _step_log(monkeypatch):
    """A stand-in compiled step and jax.block_until_ready that log dispatches and waits in order."""
    events = []

    def compiled(state, batch):
        events.append(("dispatch", state))
        return state + 1, {"loss": state, "finite": True}

    def wait(x):
        events.append(("wait", x["loss"] if isinstance(x, dict) else x[1]["loss"]))
        return x

    monkeypatch.setattr(jax, "block_until_ready", wait)
    return compiled, events


def test_pipelined_timing_dispatches_the_next_step_before_waiting(monkeypatch):
    """--timing pipelined: step i + 1 is queued before step i is waited for; one interval per timed step."""
    compiled, events = _step_log(monkeypatch)
    ticks = []
    state, metrics, times = bench._pipelined_steps(compiled, 0, [None], 5, 2, on_step=lambda: ticks.append(1))
    assert state == 5 and [m["loss"] for m in metrics] == [0, 1, 2, 3, 4] and len(ticks) == 5
    assert events == [("dispatch", 0), ("dispatch", 1), ("wait", 0), ("dispatch", 2), ("wait", 1),
                      ("dispatch", 3), ("wait", 2), ("dispatch", 4), ("wait", 3), ("wait", 4)]
    assert len(times) == 3 and all(t >= 0 for t in times)  # steps 2, 3, 4
    with pytest.raises(ValueError, match="warmup"):
        bench._pipelined_steps(compiled, 0, [None], 3, 0, on_step=lambda: None)
    events.clear()
    _, _, times = bench._blocking_steps(compiled, 0, [None], 3, 1, on_step=lambda: None)
    assert events == [("dispatch", 0), ("wait", 0), ("dispatch", 1), ("wait", 1), ("dispatch", 2), ("wait", 2)]
    assert len(times) == 2


def test_bench_records_timing_and_merge_refuses_mixed_timings(tmp_path):
    common = ["--config", "micro", "--steps", "2", "--warmup", "1", "--batch", "2", "--quantize", "mlp",
              "--remat", "none", "--no-progress", "--gemm-reps", "1", "--fast-compile", "--isolate", "off",
              "--arms", "bf16"]
    a = bench.main(common + ["--timing", "pipelined", "--out", str(tmp_path / "a")])
    assert a["timing"] == "pipelined" and len(a["rows"][0]["step_times_s"]) == 2
    assert "(pipelined timing)" in (tmp_path / "a" / "llama_micro.md").read_text()
    b = json.loads((tmp_path / "a" / "llama_micro.json").read_text())
    b["timing"] = "blocking"
    (tmp_path / "b.json").write_text(json.dumps(b))
    with pytest.raises(ValueError, match="timed differently"):
        bench.merge_results([str(tmp_path / "a" / "llama_micro.json"), str(tmp_path / "b.json")], str(tmp_path / "m"))
    # speedups compare rows across the merged runs: another device or measurement setting is refused too
    for key, value in (("device_kind", "another device"), ("steps", 7), ("warmup", 3), ("mu_dtype", "bfloat16"),
                       ("data", "tokens.npy"), ("fast_compile", False)):
        c = json.loads((tmp_path / "a" / "llama_micro.json").read_text())
        if key == "device_kind":
            c["device_info"][key] = value
        else:
            c[key] = value
        (tmp_path / "c.json").write_text(json.dumps(c))
        with pytest.raises(ValueError, match=f"different {key}"):
            bench.merge_results([str(tmp_path / "a" / "llama_micro.json"), str(tmp_path / "c.json")],
                                str(tmp_path / "m"))


@pytest.mark.parametrize("flags,message", [
    (["--mu-dtype", "bogus"], "invalid choice"),
    (["--config", "bogus"], "invalid choice"),
    (["--seed", "-2"], "--seed must be >= 0"),
    (["--data", "/nonexistent/tokens.npy"], "is not a file"),
    (["--quantize", "mlp,atn"], "unknown projection groups"),
])
def test_bench_rejects_bad_arguments_before_running(flags, message, capsys):
    """Values that would fail every arm (each becoming an error row of a run that exits 0) are usage errors."""
    with pytest.raises(SystemExit) as e:
        bench.parse_args(["--config", "micro"] + flags)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_attention_impls_agree_and_cudnn_is_explicit():
    """"auto" is XLA off-GPU; "cudnn" never silently becomes the XLA path (it needs a GPU)."""
    assert L.micro(attention_impl="cudnn").attention_impl == "cudnn"
    with pytest.raises(ValueError, match="attention_impl"):
        L.micro(attention_impl="flash")
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(k1, (2, 16, 4, 32), jnp.float32).astype(jnp.bfloat16)
    k = jax.random.normal(k2, (2, 16, 2, 32), jnp.float32).astype(jnp.bfloat16)
    v = jax.random.normal(k3, (2, 16, 2, 32), jnp.float32).astype(jnp.bfloat16)
    with jax.numpy_dtype_promotion("standard"):
        a = L.attention_core(q, k, v, "auto")
        b = L.attention_core(q, k, v, "jax")
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=2e-2)
    if jax.default_backend() != "gpu":
        with pytest.raises(Exception):  # noqa: B017 - cuDNN is unavailable here; the error type is JAX's
            L.attention_core(q, k, v, "cudnn")


def test_file_batches_windows(tmp_path):
    cfg = L.micro()
    stream = np.arange(5 * (cfg.seq + 1), dtype=np.int64) % cfg.vocab
    path = tmp_path / "tokens.npy"
    np.save(path, stream)
    batches = bench.file_batches(str(path), cfg, 2, 3)
    assert len(batches) == 3 and batches[0]["inputs"].shape == (2, cfg.seq)
    assert batches[0]["inputs"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(batches[0]["targets"][0]), stream[1:cfg.seq + 1])
    np.testing.assert_array_equal(np.asarray(batches[2]["inputs"][1]), stream[0:cfg.seq])  # window 5 % 5 = 0
    np.save(path, stream + cfg.vocab)
    with pytest.raises(ValueError, match="vocab"):
        bench.file_batches(str(path), cfg, 2, 1)


def test_save_gemm_remat_keeps_the_fused_blocks_gemm_outputs():
    """remat="save_gemm" saves every projection's output, the fused MLP block's gate and up too: its gradient runs as
    many dots as the unfused block's (the fused one had recomputed the wi_0 / wi_1 Fprop, +2 per layer). Counted in
    the program JAX hands XLA (its dot_generals and mxprec_scaled_gemm calls), where remat's recomputation is
    explicit: XLA's GPU compiler turns dots into library calls and fusions, so the compiled text's dots are not the
    GEMMs there (an H100 showed 11 dots for both policies); on the CPU the two counts agree."""
    import re

    def dots(remat, fused):
        cfg = L.micro(n_layers=1, remat=remat, fused_mlp=fused, quantize=("mlp",))
        tokens = jnp.zeros((2, cfg.seq), jnp.int32)
        model = L.Llama(cfg, recipe="fp8_current")
        params = model.init(jax.random.key(1), tokens)["params"]
        loss = lambda p: L.cross_entropy_loss(model.apply({"params": p}, tokens), tokens)[0]
        lowered = jax.jit(jax.grad(loss)).lower(params).as_text()  # XLA dots and the library's GEMM calls
        return len(re.findall(r"stablehlo\.dot_general|custom_call @mxprec_scaled_gemm\b", lowered))

    assert dots("save_gemm", True) == dots("save_gemm", False) < dots("full", True)


def test_loss_picks_agree_bit_for_bit_and_select_has_no_scatter():
    """``pick="select"`` (default) and ``"gather"`` give the same loss and logits gradient, bit for bit;
    only "gather"'s backward scatters into an FP32 [..., V] buffer."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(3))
    logits = (4 * jax.random.normal(k1, (2, 8, 50), jnp.float32)).astype(jnp.bfloat16)
    targets = jax.random.randint(k2, (2, 8), 0, 50)
    mask = jnp.arange(16).reshape(2, 8) % 3 != 0

    def loss_and_grad(pick, m):
        f = lambda lg: L.cross_entropy_loss(lg, targets, m, pick=pick)[0]
        return jax.value_and_grad(f)(logits)

    for m in (None, mask):
        (ls, gs), (lg, gg) = loss_and_grad("select", m), loss_and_grad("gather", m)
        np.testing.assert_array_equal(np.asarray(ls), np.asarray(lg))
        np.testing.assert_array_equal(np.asarray(gs, np.float32), np.asarray(gg, np.float32))
    # the loss is the FP64 mean of -log softmax at the targets (FP32 tolerance)
    lp = np.asarray(jax.nn.log_softmax(np.asarray(logits, np.float64), axis=-1))
    want = -np.take_along_axis(lp, np.asarray(targets)[..., None], -1).mean()
    np.testing.assert_allclose(float(loss_and_grad("select", None)[0]), want, rtol=1e-6)

    def hlo(pick):
        g = jax.grad(lambda lg: L.cross_entropy_loss(lg, targets, pick=pick)[0])
        return jax.jit(g).lower(logits).as_text()

    # a target outside [0, V) (negative, >= V, or a uint32 id that the int32 cast would wrap to -1): NaN under
    # either pick, unless the mask drops its position
    m0 = jnp.ones_like(mask).at[0, 0].set(False)
    for bad in (targets.at[0, 0].set(-1), targets.at[0, 0].set(50),
                targets.astype(jnp.uint32).at[0, 0].set(2**32 - 1)):
        for pick in L.LOSS_PICKS:
            assert np.isnan(float(L.cross_entropy_loss(logits, bad, pick=pick)[0])), (pick, bad[0, 0])
            loss_m, grad_m = jax.value_and_grad(lambda lg: L.cross_entropy_loss(lg, bad, m0, pick=pick)[0])(logits)
            assert np.isfinite(float(loss_m)) and bool(jnp.all(jnp.isfinite(grad_m.astype(jnp.float32)))), pick
    with pytest.raises(ValueError, match="mask"):
        L.cross_entropy_loss(logits, targets, mask[:, :1])  # (B, 1) would broadcast and count B, not B * S
    with pytest.raises(ValueError, match="integer ids"):
        L.cross_entropy_loss(logits, targets[:, :4])

    assert "scatter" not in hlo("select")
    assert "scatter" in hlo("gather")
    with pytest.raises(ValueError, match="pick='onehot'"):
        L.cross_entropy_loss(logits, targets, pick="onehot")
    with pytest.raises(ValueError, match="loss_pick"):
        L.micro().replace(loss_pick="onehot")


def test_amdahl_f_comes_from_the_bf16_profile_when_every_projection_is_quantized():
    """f = the BF16 arm's GEMM kernel time per step in its profile / its timed step where every projection
    group is quantized (every BF16 GEMM of that step is eligible); else the standalone GEMM timing, capped at 1."""
    bf16 = dict(bench.error_row("bf16", "x"), error=None, step_s_mean=0.2, format="bf16",
                gemm_s={"total_s": 0.25}, profile={"categories_ms": {"gemm_wide": 150.0, "attention": 20.0}})
    fp8 = dict(bf16, arm="fp8_current", format="fp8", step_s_mean=0.125, profile=None)
    am = bench.finish_rows([dict(bf16), dict(fp8)], "hopper")
    assert am["f_source"] == "profile" and am["f_measured"] == pytest.approx(0.75)
    assert am["table"]["fp8"]["f=measured"] == pytest.approx(1 / (0.25 + 0.75 / 2))
    am = bench.finish_rows([dict(bf16), dict(fp8)], "hopper", quantize_groups=("mlp",))  # other GEMMs in the step
    assert am["f_source"] == "standalone" and am["f_measured"] == 1.0  # 0.25 s of GEMMs in a 0.2 s step: capped
    no_profile = dict(bf16, profile={"categories_ms": {}}, gemm_s={"total_s": 0.1})  # a CPU trace: no GPU kernels
    am = bench.finish_rows([no_profile], "hopper")
    assert am["f_source"] == "standalone" and am["f_measured"] == pytest.approx(0.5)
    # the "jax" / "xla" attention cores run QK^T and PV as GEMM kernels, never quantized: not the profile's f
    for impl, source in (("cudnn", "profile"), ("auto", "profile"), ("jax", "standalone"), ("xla", "standalone")):
        am = bench.finish_rows([dict(bf16), dict(fp8)], "hopper", attention_impl=impl)
        assert am["f_source"] == source, impl


def test_saved_format_follows_what_dot_general_keeps():
    """The memory prediction's saved-activation format: per-tensor FP8 recipes keep X's 1-byte Fprop copy with
    wide residuals (it is exactly Wgrad's operand), the other recipes their BF16 source; quantized residuals the
    recipe's format."""
    from mxprec import recipes

    got = {n: bench._saved_format(recipes.get(n)) for n in ("bf16", "fp8_current", "fp8_delayed", "fp8_rowwise",
                                                            "fp8_block", "mxfp8")}
    assert got == {"bf16": "bf16", "fp8_current": "fp8", "fp8_delayed": "fp8", "fp8_rowwise": "bf16",
                   "fp8_block": "bf16", "mxfp8": "bf16"}
    assert bench._saved_format(recipes.get("mxfp8", residuals="quantized")) == "mxfp8"


def test_pipelined_timing_needs_a_warmup_step():
    with pytest.raises(SystemExit):
        bench.parse_args(["--config", "micro", "--timing", "pipelined", "--warmup", "0"])
    assert bench.parse_args(["--config", "micro", "--timing", "pipelined", "--warmup", "1"]).warmup == 1


def test_bf16_arm_is_traced_on_a_gpu_without_profile_flag(monkeypatch):
    """Amdahl's f needs the BF16 arm's profile: on a GPU that arm is traced into a temporary directory even
    without --profile (deleted afterwards); other arms and CPUs are not; --profile DIR traces every arm there."""
    import jax

    args = bench.parse_args(["--config", "micro", "--no-progress"])
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")  # (on a GPU host too)
    assert bench._profile_dir("bf16", args) == (None, None)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    d, tmp = bench._profile_dir("bf16", args)
    assert d == tmp and os.path.isdir(tmp)
    os.rmdir(tmp)
    assert bench._profile_dir("fp8_current", args) == (None, None)
    args = bench.parse_args(["--config", "micro", "--no-progress", "--profile", "/some/dir"])
    assert bench._profile_dir("fp8_current", args) == (os.path.join("/some/dir", "fp8_current"), None)


def test_a_profiler_that_cannot_trace_leaves_the_row_with_profile_error(monkeypatch, tmp_path):
    import jax

    def broken_trace(*a, **k):
        raise RuntimeError("no CUPTI here")

    monkeypatch.setattr(jax.profiler, "trace", broken_trace)
    row = bench.run_arm("bf16", L.micro(), batch=2, steps=1, warmup=0, progress=False,
                        compiler_options=bench.FAST_COMPILE, profile_dir=str(tmp_path))
    assert "error" not in row and row["step_s_mean"] > 0
    assert row["profile_error"] == "RuntimeError: no CUPTI here" and "profile" not in row
