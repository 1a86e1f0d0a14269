"""Llama training-step benchmark: one row per recipe arm, seed 000's table.

``python -m mxprec.bench llama [--arms bf16,fp16,...] [--config tiny] [--steps N] [--warmup W]
[--batch B] [--out DIR] [--profile DIR]`` (or ``benchmarks/llama_step.py``, the same ``main``). An
arm is ``RECIPE[:BACKEND][+fused_mlp]`` (e.g. ``fp8_current:ffi``; ``+fused_mlp``: the MLP as
:func:`mxprec.fused_mlp.swiglu_mlp`) or a Flax peer (``flax_bf16``, ``flax_fp8``).

The step
--------
:class:`mxprec.models.llama.Llama` with the arm's recipe on the projection groups in
``--quantize`` (default MLP, attention Q/K/V/O and the logits head; the attention core stays
BF16); optax AdamW (``mu_dtype`` configurable, FP32 by default) on FP32 master weights and FP32
gradients; compute dtype BF16 (FP16 for the ``fp16`` arm, which adds
:class:`mxprec.training.DynamicLossScale`: scale the loss, unscale once, skip the update and back
off on overflow); full rematerialization (``nothing_saveable``: the custom GEMMs are recomputed);
delayed-scaling state updated through the ``_overwrite_with_gradient`` convention
(:func:`mxprec.flax.apply_updates_with_owg`). The batch is one synthetic batch of random tokens
reused every step (seed 000's setup) or, with ``--data tokens.npy``, consecutive windows of a
token file. Arm ``flax_fp8`` runs plain Flax's ``nn.Fp8DirectDotGeneralOp`` (delayed scaling) on
the same projections: the peer.

Timing: compile time (``lower`` + ``compile``), ``--warmup`` steps, then ``--steps`` timed steps;
mean and standard deviation of the per-step times. ``--timing blocking`` (default): each step
dispatched, then waited for with ``jax.block_until_ready`` (the host's dispatch counted while the
device idles); ``--timing pipelined``: the next step dispatched before the previous is waited for
(as a training loop runs), a step's time the interval between consecutive completions.

Columns
-------
* TFLOP/s/device: :func:`mxprec.analysis.llama_train_flops` (MaxText's formula: 6·matmul-params
  FLOPs per token plus causal attention, remat not counted) / step time / devices.
* expected speedup: Amdahl ``1/((1-f) + f/r)``. ``f`` is *measured*. On a GPU with every projection
  group quantized, it is the BF16 arm's GEMM kernel time per step in a profile of two more of its
  steps (traced after the timed ones, into ``--profile DIR`` or a temporary directory) over its
  timed step: every BF16 GEMM of that step is a quantized projection; the table says "profile".
  Otherwise (a CPU, some groups unquantized, or a profiler that could not trace: the row's
  ``profile_error``) the projection GEMMs that the arm quantizes (Fprop, Dgrad, Wgrad of every
  quantized projection of every layer, same shapes, BF16; the Fprop counted twice under full remat,
  since the backward pass recomputes it) are timed standalone in jitted loops and divided by the
  measured BF16 step time, capped at 1 ("standalone"). ``r`` is the
  format's peak ratio over BF16 on this device (:func:`mxprec.analysis.peak_ratio`; on a CPU,
  which has no low-precision GEMM units, the Hopper ratios are used as the reference). The
  f = 0.7 / 0.8 / 0.9 table is printed too.
* peak memory: ``device.memory_stats()["peak_bytes_in_use"]`` where the device reports it (GPU),
  else null. On accelerators every arm runs in its own process (``--isolate auto``) so that each
  peak is that arm's own. Predicted: :func:`mxprec.analysis.llama_memory` (FSDP 1; saved values
  in the format dot_general saves them in: the quantized format with ``Recipe.residuals == "quantized"``, FP8
  for per-tensor recipes with wide residuals (X's Fprop copy is the exact Wgrad operand, so it is kept), else
  BF16).
* backend: the backend line of ``Recipe.describe()``.

Outputs ``<out>/llama_<config>.json`` (``device``, ``command``, ``date``, ``model``, ``rows``, …),
``<out>/llama_<config>.md`` and ``<out>/llama_<config>.png`` (matplotlib, if installed). An arm
that fails (e.g. out of memory) gets a row with an ``error`` field; the run goes on.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

DEFAULT_ARMS = ("bf16", "fp16", "fp8_delayed", "fp8_current", "fp8_block", "mxfp8", "mxfp6", "mxfp4")
PEER_ARM = "flax_fp8"
FUSED_MLP_SUFFIX = "+fused_mlp"  # RECIPE[:BACKEND]+fused_mlp: LlamaConfig.fused_mlp
PLAIN_ARM = "flax_bf16"  # plain Flax DenseGeneral (lax.dot_general), no mxprec: the anchor of issue 7
ROW_KEYS = ("arm", "step_s_mean", "step_s_std", "tflops_per_device", "tokens_per_s_per_device",
            "expected_speedup", "speedup_vs_bf16", "peak_mem_gb", "predicted_mem_gb", "compile_s", "backend")
AMDAHL_FS = (0.7, 0.8, 0.9)

# Per-config defaults: batch (sequences per step), warmup and timed steps.
CONFIG_DEFAULTS = {
    "micro": dict(batch=2, warmup=1, steps=2),
    "tiny": dict(batch=4, warmup=1, steps=3),
    "llama3_8b_4layer": dict(batch=4, warmup=3, steps=10),
    "h200_large": dict(batch=4, warmup=3, steps=10),
    "llama70b_layer": dict(batch=4, warmup=3, steps=10),
}
_FALLBACK_DEFAULTS = dict(batch=4, warmup=2, steps=5)
# ``--fast-compile``: XLA backend optimization level 0 (CPU smoke runs and tests: compiles about
# 40% faster, steps slower; not for reported numbers).
FAST_COMPILE = {"xla_backend_optimization_level": 0}


# ----------------------------------------------------------------------------- arms


def arm_info(arm: str) -> dict:
    """What an arm runs: recipe (or Flax peer), compute dtype, loss scaling, format for Amdahl, backend."""
    import flax.linen as nn
    import jax.numpy as jnp

    if arm == PEER_ARM:
        return dict(recipe=None, dot_general_cls=nn.Fp8DirectDotGeneralOp, dtype=jnp.bfloat16,
                    loss_scale=False, fmt="fp8", saved="bf16",
                    backend="flax nn.Fp8DirectDotGeneralOp (XLA fp8 dot, delayed scaling)")
    if arm == PLAIN_ARM:
        return dict(recipe=None, dot_general_cls=None, dtype=jnp.bfloat16, loss_scale=False, fmt="bf16",
                    saved="bf16", backend="plain flax DenseGeneral (lax.dot_general, no mxprec)")
    recipe = arm_recipe(arm)
    fused = arm.endswith(FUSED_MLP_SUFFIX)
    fp16 = recipe.compute_dtype is not None and jnp.dtype(recipe.compute_dtype) == jnp.dtype(jnp.float16)
    backend = recipe.describe().splitlines()[-1].strip()
    backend = backend.removeprefix("backend: ")
    if fused:
        backend += "; MLP: mxprec.fused_mlp"
    return dict(recipe=recipe, dot_general_cls=None, dtype=jnp.float16 if fp16 else jnp.bfloat16,
                loss_scale=fp16, fmt=_amdahl_format(recipe), saved=_saved_format(recipe), backend=backend,
                fused_mlp=fused)


def arm_recipe(arm: str):
    """The Recipe of a recipe arm ``RECIPE[:BACKEND][+fused_mlp]`` ("fp8_current:ffi": the preset on another
    backend)."""
    from mxprec import recipes

    name, _, backend = arm.removesuffix(FUSED_MLP_SUFFIX).partition(":")
    return recipes.get(name, backend=backend) if backend else recipes.get(name)


def _amdahl_format(recipe) -> str:
    if not recipe.quantized:
        return "bf16"
    base = recipe.name.split("_")[0]
    return base if base in ("mxfp8", "mxfp6", "mxfp4", "nvfp4") else "fp8"


def _saved_format(recipe) -> str:
    """Storage format of the saved matmul inputs, as a key of analysis.memory.RECIPE_SAVED_FORMAT: the recipe's
    with ``residuals="quantized"``; with wide residuals FP8 where X's Fprop copy is exactly Wgrad's operand (the same
    per-tensor spec: dot_general's ``_reuse_or_keep`` keeps that 1-byte copy), else BF16."""
    from mxprec.scaling import DelayedScaling, TensorScaling

    if not recipe.quantized:
        return "bf16"
    if recipe.residuals == "quantized":
        return _amdahl_format(recipe)
    lhs = recipe.fprop_lhs
    return "fp8" if isinstance(lhs, (TensorScaling, DelayedScaling)) and lhs == recipe.wgrad_lhs else "bf16"


def amdahl_arch(device_kind: str) -> tuple[str, str]:
    """(arch for mxprec.analysis.peak_ratio, note) from a device kind string."""
    k = device_kind.upper()
    if any(t in k for t in ("H100", "H200", "H800", "GH200")):
        return "hopper", ""
    if any(t in k for t in ("B100", "B200", "B300", "GB200", "GB300")):
        return "blackwell", ""
    return "hopper", f"{device_kind} has no peak-ratio entry: Hopper ratios used as the reference"


# ----------------------------------------------------------------------------- train step


def make_optimizer(lr: float = 3e-4, mu_dtype: Any = None, weight_decay: float = 0.1):
    """optax AdamW (b1 0.9, b2 0.95, eps 1e-8); ``mu_dtype`` None keeps FP32 moments."""
    import optax

    return optax.adamw(lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=weight_decay, mu_dtype=mu_dtype)


def build_model(cfg, arm: str):
    """``(model, cfg_for_arm, arm_info)``: the Llama module an arm trains."""
    from mxprec.models.llama import Llama

    info = arm_info(arm)
    cfg = cfg.replace(dtype=info["dtype"], fused_mlp=info.get("fused_mlp", False))
    return Llama(cfg, recipe=info["recipe"], dot_general_cls=info["dot_general_cls"]), cfg, info


_PARAM_INIT_FNS: dict = {}  # unquantized-model config -> jitted init (compiled once, holds no arrays)


def init_variables(model, cfg, *, batch: int, seed: int = 0) -> dict:
    """``model.init`` without compiling the quantized forward pass.

    ``model.init`` traces and compiles the whole forward (quantizers included) only to throw it
    away, which costs seconds per arm on a CPU. The parameters do not depend on the recipe or on
    the compute dtype, so they come from the jitted init of the unquantized model (compiled once
    per config, run afresh for every call: new buffers, nothing cached on the device); the ``_overwrite_with_gradient`` delayed-scaling state, whose structure comes from
    ``jax.eval_shape(model.init)``, is filled with its initial values (amax history 0, scale 1),
    in each leaf's own dtype. Anything else in that collection falls back to ``model.init``.
    """
    import jax
    import jax.numpy as jnp

    from mxprec.flax.linen import OVERWRITE_WITH_GRADIENT
    from mxprec.models.llama import Llama
    from mxprec.recipes import Recipe, get as get_recipe

    tokens = jnp.zeros((batch, cfg.seq), jnp.int32)
    key = jax.random.key(seed)
    base_cfg = cfg.replace(dtype=jnp.bfloat16, fused_mlp=False)  # the fused MLP has the same variables
    if base_cfg not in _PARAM_INIT_FNS:
        _PARAM_INIT_FNS[base_cfg] = jax.jit(lambda k, t: Llama(base_cfg).init(k, t)["params"])
    fresh = {"params": _PARAM_INIT_FNS[base_cfg](key, tokens)}
    recipe = model.recipe if model.recipe is None or isinstance(model.recipe, Recipe) else get_recipe(model.recipe)
    if model.dot_general_cls is None and (recipe is None or not recipe.is_delayed):
        return fresh  # stateless: nothing but parameters
    shapes = jax.eval_shape(model.init, key, tokens)
    if set(shapes) - {"params", OVERWRITE_WITH_GRADIENT}:
        return dict(jax.jit(model.init)(key, tokens))

    def fill(path, sds):
        name = str(getattr(path[-1], "key", path[-1]))
        if name.endswith("amax_history"):
            value = 0.0
        elif name.endswith("scale"):
            value = 1.0
        else:
            raise KeyError(name)
        return jax.lax.convert_element_type(jnp.full(sds.shape, value, jnp.float32), sds.dtype)

    out = fresh
    if OVERWRITE_WITH_GRADIENT in shapes:
        try:
            out[OVERWRITE_WITH_GRADIENT] = jax.tree_util.tree_map_with_path(fill, shapes[OVERWRITE_WITH_GRADIENT])
        except KeyError:
            return dict(jax.jit(model.init)(key, tokens))
    return out


def init_train_state(model, cfg, tx, *, batch: int, seed: int = 0, loss_scale: bool = False,
                     initial_loss_scale: float = float(2**15)) -> dict:
    """``{"variables", "opt_state", "loss_scale"}``; the optimizer sees only the trainable part."""
    import jax

    from mxprec.flax.owg import split_owg
    from mxprec.training import DynamicLossScale

    variables = init_variables(model, cfg, batch=batch, seed=seed)
    trainable, _ = split_owg(variables)
    ls = DynamicLossScale.create(initial_loss_scale) if loss_scale else None
    return {"variables": dict(variables), "opt_state": jax.jit(tx.init)(trainable), "loss_scale": ls}


def make_train_step(model, tx):
    """``step(state, batch) -> (state, {"loss", "finite"})`` for :func:`init_train_state` states.

    Gradients come from ``jax.vjp`` with a unit cotangent; the OWG leaves' "gradients" are their new
    values (Flax's ``fp32_max_grad`` dtype). With a loss scale: gradients unscaled once, checked for finiteness, the
    parameter and optimizer update skipped on overflow, the scale updated. The delayed-scaling
    (OWG) state is always replaced by its new value.
    """
    import jax
    import jax.numpy as jnp

    from mxprec.flax.linen import OVERWRITE_WITH_GRADIENT
    from mxprec.flax.owg import apply_updates_with_owg, split_owg
    from mxprec.models.llama import cross_entropy_loss
    from mxprec.training import all_finite, masked_update, scale_loss, unscale_grads

    pick = model.cfg.loss_pick

    def step(state, batch):
        variables, ls = state["variables"], state["loss_scale"]

        def loss_fn(v):
            logits = model.apply(v, batch["inputs"])
            loss, _ = cross_entropy_loss(logits, batch["targets"], pick=pick)
            return (scale_loss(loss, ls) if ls is not None else loss), loss

        _, vjp_fn, loss = jax.vjp(loss_fn, variables, has_aux=True)
        (grads,) = vjp_fn(jnp.ones((), jnp.float32))
        g_train, g_owg = split_owg(grads)
        if ls is not None:
            g_train = unscale_grads(g_train, ls)
            finite = all_finite(g_train)
        else:
            finite = jnp.asarray(True)
        g_all = dict(g_train, **({OVERWRITE_WITH_GRADIENT: g_owg} if g_owg else {}))
        # optax's bias corrections raise float ** int32, which strict dtype promotion rejects.
        with jax.numpy_dtype_promotion("standard"):
            new_vars, new_opt = apply_updates_with_owg(variables, g_all, state["opt_state"], tx)
        if ls is not None:
            old_train, _ = split_owg(variables)
            new_train, new_owg = split_owg(new_vars)
            new_train, new_opt = masked_update(finite, (new_train, new_opt), (old_train, state["opt_state"]))
            new_vars = dict(new_train, **({OVERWRITE_WITH_GRADIENT: new_owg} if new_owg else {}))
            ls = ls.update(finite)
        return {"variables": new_vars, "opt_state": new_opt, "loss_scale": ls}, {"loss": loss, "finite": finite}

    return step


def synthetic_batch(cfg, batch: int, seed: int = 0) -> dict:
    """One fixed batch of uniform random tokens: ``{"inputs", "targets"}`` int32 ``(batch, seq)``."""
    import jax.numpy as jnp
    import numpy as np

    toks = np.random.default_rng(seed + 1).integers(0, cfg.vocab, (batch, cfg.seq + 1), dtype=np.int32)
    return {"inputs": jnp.asarray(toks[:, :-1]), "targets": jnp.asarray(toks[:, 1:])}


def file_batches(path: str, cfg, batch: int, n: int) -> list[dict]:
    """``n`` batches of consecutive ``seq + 1`` windows from a ``.npy`` token file (1-D or 2-D)."""
    import jax.numpy as jnp
    import numpy as np

    data = np.load(path, mmap_mode="r")
    if not np.issubdtype(data.dtype, np.integer):
        raise ValueError(f"--data {path}: tokens must be integers, got {data.dtype}")
    L = cfg.seq + 1
    if data.ndim == 1:
        n_win = data.shape[0] // L
        windows = lambda i: data[i * L:(i + 1) * L]
    elif data.ndim == 2 and data.shape[1] >= L:
        n_win = data.shape[0]
        windows = lambda i: data[i, :L]
    else:
        raise ValueError(f"--data {path}: need a 1-D token stream or 2-D (rows, >= {L}) array, got {data.shape}")
    if n_win < 1:
        raise ValueError(f"--data {path}: fewer than seq + 1 = {L} tokens")
    out = []
    for s in range(n):
        rows = np.stack([np.asarray(windows((s * batch + j) % n_win)) for j in range(batch)]).astype(np.int32)
        if rows.max() >= cfg.vocab or rows.min() < 0:
            raise ValueError(f"--data {path}: token ids must lie in [0, vocab={cfg.vocab})")
        out.append({"inputs": jnp.asarray(rows[:, :-1]), "targets": jnp.asarray(rows[:, 1:])})
    return out


# ----------------------------------------------------------------------------- GEMM fraction


def projection_gemms(cfg, batch: int) -> list[dict]:
    """The quantizable projections: ``{"name", "group", "M", "K", "N", "per_layer"}``."""
    M = batch * cfg.seq
    D, F, H, KV, hd, V = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.vocab
    return [
        dict(name="query", group="attn", M=M, K=D, N=H * hd, per_layer=True),
        dict(name="key", group="attn", M=M, K=D, N=KV * hd, per_layer=True),
        dict(name="value", group="attn", M=M, K=D, N=KV * hd, per_layer=True),
        dict(name="out", group="attn", M=M, K=H * hd, N=D, per_layer=True),
        dict(name="wi_0", group="mlp", M=M, K=D, N=F, per_layer=True),
        dict(name="wi_1", group="mlp", M=M, K=D, N=F, per_layer=True),
        dict(name="wo", group="mlp", M=M, K=F, N=D, per_layer=True),
        dict(name="logits", group="logits", M=M, K=D, N=V, per_layer=False),
    ]


def _time_fn(fn, args, reps: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile + warm
    ts = []
    for _ in range(max(reps, 1)):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def measure_gemm_seconds(cfg, batch: int, reps: int = 5, dtype: Any = None) -> dict:
    """Seconds per training step spent in the quantizable projection GEMMs, measured standalone in BF16.

    Per projection of the groups in ``cfg.quantize``: Fprop ``X·W``, Dgrad ``dY·Wᵀ``, Wgrad
    ``Xᵀ·dY`` with the model's shapes (FP32 accumulation, BF16 out), jitted, one function per
    kind (layer Fprops, layer backward GEMMs, head Fprop, head backward), median of ``reps``.
    ``total = L·(fprop·n_fprop + bwd) + head_fprop + head_bwd`` with ``n_fprop = 2`` under full
    remat (the backward pass recomputes every layer's Fprop; the head is not rematerialized).
    """
    import jax
    import jax.numpy as jnp

    dtype = dtype or jnp.bfloat16
    gemms = [g for g in projection_gemms(cfg, batch) if g["group"] in cfg.quantize]
    key = jax.random.key(1234)

    def operands(g):
        k1, k2, k3 = jax.random.split(jax.random.fold_in(key, hash(g["name"]) % (2**31)), 3)
        x = jax.random.normal(k1, (g["M"], g["K"]), jnp.float32).astype(dtype)
        w = jax.random.normal(k2, (g["K"], g["N"]), jnp.float32).astype(dtype)
        dy = jax.random.normal(k3, (g["M"], g["N"]), jnp.float32).astype(dtype)
        return x, w, dy

    def dot(a, b, dims):
        return jax.lax.dot_general(a, b, (dims, ((), ())), preferred_element_type=jnp.float32).astype(dtype)

    @jax.jit
    def fprop(ops):
        return [dot(x, w, ((1,), (0,))) for x, w, _ in ops]

    @jax.jit
    def bwd(ops):
        return [(dot(dy, w, ((1,), (1,))), dot(x, dy, ((0,), (0,)))) for x, w, dy in ops]

    out = {"layer_fprop_s": 0.0, "layer_bwd_s": 0.0, "head_fprop_s": 0.0, "head_bwd_s": 0.0}
    for part, sel in (("layer", True), ("head", False)):
        group = [g for g in gemms if g["per_layer"] == sel]
        if not group:
            continue
        ops = [operands(g) for g in group]
        out[f"{part}_fprop_s"] = _time_fn(fprop, (ops,), reps)
        out[f"{part}_bwd_s"] = _time_fn(bwd, (ops,), reps)
        del ops
    n_fprop = 2 if cfg.remat == "full" else 1
    out["n_fprop"] = n_fprop
    out["total_s"] = (cfg.n_layers * (out["layer_fprop_s"] * n_fprop + out["layer_bwd_s"])
                      + out["head_fprop_s"] + out["head_bwd_s"])
    return out


# ----------------------------------------------------------------------------- one arm


def device_description() -> dict:
    import jax

    devs = jax.devices()
    kind = devs[0].device_kind
    return {"platform": jax.default_backend(), "device_kind": kind, "n_devices": len(devs),
            "jax": jax.__version__, "description": f"{len(devs)}x {kind} ({jax.default_backend()}), jax {jax.__version__}"}


def _peak_mem_gb() -> float | None:
    import jax

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - backends without memory stats
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 1e9


def predicted_mem_gb(cfg, batch: int, saved: str, mu_dtype: Any = None) -> float | None:
    """:func:`mxprec.analysis.llama_memory` for one device (FSDP 1), in GB (1e9 bytes)."""
    import jax.numpy as jnp

    from mxprec.analysis import llama_memory
    from mxprec.models.llama import count_params

    if cfg.remat not in ("full", "none"):
        return None
    P = count_params(cfg)
    est = llama_memory(n_params=P, n_layers=cfg.n_layers, d_model=cfg.d_model, d_ff=cfg.d_ff, seq=cfg.seq,
                       batch=batch, fsdp=1, recipe_name=saved, remat=cfg.remat)
    total = est.total_bytes
    if mu_dtype is not None:  # the model assumes FP32 mu
        total -= P * (4 - jnp.dtype(mu_dtype).itemsize)
    return total / 1e9


# How the timed steps are measured (``--timing``):
# * "blocking": each step is dispatched, then waited for (``jax.block_until_ready``); its time is dispatch to
#   completion, so the host's per-step dispatch (argument handling, enqueueing the executable) is counted while the
#   device idles.
# * "pipelined": step i + 1 is dispatched before step i is waited for, as a training loop runs; a step's time is the
#   interval between the completions of consecutive steps (the device always has the next step queued), i.e. the
#   steady-state step time. The first timed interval starts at the completion of the last warmup step.
TIMINGS = ("blocking", "pipelined")


def _blocking_steps(compiled, state, batches, n, warmup, on_step):
    """Runs ``n`` steps, each waited for; returns (state, per-step metrics, times of the steps after ``warmup``)."""
    import jax

    metrics, times = [], []
    for i in range(n):
        t = time.perf_counter()
        state, m = compiled(state, batches[i % len(batches)])
        jax.block_until_ready((state, m))
        if i >= warmup:
            times.append(time.perf_counter() - t)
        metrics.append(m)
        on_step()
    return state, metrics, times


def _pipelined_steps(compiled, state, batches, n, warmup, on_step):
    """Runs ``n`` steps, step i + 1 dispatched before step i is waited for; returns (state, per-step metrics, the
    intervals between consecutive completions after the ``warmup``-th step). Needs ``warmup >= 1``."""
    import jax

    if warmup < 1:
        raise ValueError("pipelined timing needs at least one warmup step (the first interval's start)")
    metrics, times, done_at = [], [], None
    for i in range(n):
        state, m = compiled(state, batches[i % len(batches)])
        metrics.append(m)
        if i >= 1:
            jax.block_until_ready(metrics[i - 1])  # step i - 1 done while step i is queued
            now = time.perf_counter()
            if i - 1 >= warmup:
                times.append(now - done_at)
            done_at = now
            on_step()
    jax.block_until_ready((state, metrics[-1]))
    now = time.perf_counter()
    times.append(now - done_at)
    on_step()
    return state, metrics, times


def run_arm(arm: str, cfg, *, batch: int, steps: int, warmup: int, lr: float = 3e-4, mu_dtype: Any = None,
            data: str | None = None, seed: int = 0, measure_gemms: bool = False, gemm_reps: int = 5,
            progress: bool = True, compiler_options: dict | None = None, profile_dir: str | None = None,
            timing: str = "blocking") -> dict:
    """Compiles and times one arm; returns its row (without the columns that need the BF16 arm).

    ``compiler_options``: XLA options for this compile (e.g. ``FAST_COMPILE``).
    ``profile_dir``: after timing, two more steps run under ``jax.profiler.trace(profile_dir)`` and
    the row gets a ``profile`` summary (:func:`mxprec.bench.trace_summary.summarize_trace`), or, where the
    profiler cannot trace, a ``profile_error`` (the timed row stands).
    ``timing``: ``"blocking"`` or ``"pipelined"`` (:data:`TIMINGS`).
    """
    import jax
    import numpy as np
    from tqdm.auto import tqdm

    from mxprec.analysis import llama_train_flops

    model, acfg, info = build_model(cfg, arm)
    tx = make_optimizer(lr, mu_dtype)
    state = init_train_state(model, acfg, tx, batch=batch, seed=seed, loss_scale=info["loss_scale"])
    n_batches = warmup + steps
    batches = file_batches(data, acfg, batch, n_batches) if data else [synthetic_batch(acfg, batch, seed)]
    jitted = jax.jit(make_train_step(model, tx), donate_argnums=(0,))

    t0 = time.perf_counter()
    compiled = jitted.lower(state, batches[0]).compile(compiler_options=compiler_options)
    compile_s = time.perf_counter() - t0

    bar = tqdm(total=n_batches, desc=f"{arm}", unit="step", leave=False, disable=not progress, file=sys.stderr)
    run_steps = _pipelined_steps if timing == "pipelined" else _blocking_steps
    steps_unix = [time.time()]  # wall-clock window of the warmup and timed steps (to match a GPU clock log)
    state, metrics, times = run_steps(compiled, state, batches, n_batches, warmup, on_step=lambda: bar.update(1))
    steps_unix.append(time.time())
    losses, finites = [m["loss"] for m in metrics], [m["finite"] for m in metrics]
    bar.close()
    profile, profile_error = None, None
    if profile_dir:
        from mxprec.bench.trace_summary import summarize_trace

        n_prof = 2
        try:
            with jax.profiler.trace(profile_dir):
                for i in range(n_prof):
                    state, last = compiled(state, batches[i % len(batches)])
                jax.block_until_ready((state, last))
            profile = summarize_trace(profile_dir, steps=n_prof, top=80)
        except Exception as e:  # noqa: BLE001 - a profiler that cannot trace leaves the timed row intact, named
            profile_error = f"{type(e).__name__}: {e}"[:500]
    losses = [float(x) for x in losses]
    finites = [bool(x) for x in finites]
    final_scale = float(state["loss_scale"].scale) if state["loss_scale"] is not None else None
    del state, compiled, jitted
    gc.collect()

    mean = statistics.fmean(times)
    std = statistics.stdev(times) if len(times) > 1 else 0.0
    flops = llama_train_flops(d_model=acfg.d_model, d_ff=acfg.d_ff, n_layers=acfg.n_layers, n_heads=acfg.n_heads,
                              n_kv_heads=acfg.n_kv_heads, head_dim=acfg.head_dim, vocab=acfg.vocab, seq=acfg.seq,
                              batch=batch)["total"]
    n_dev = 1  # one device, no sharding
    row = {
        "arm": arm,
        "step_s_mean": mean,
        "step_s_std": std,
        "tflops_per_device": flops / mean / n_dev / 1e12,
        "tokens_per_s_per_device": batch * acfg.seq / mean / n_dev,
        "expected_speedup": None,
        "speedup_vs_bf16": None,
        "peak_mem_gb": _peak_mem_gb(),
        "predicted_mem_gb": predicted_mem_gb(acfg, batch, info["saved"], mu_dtype),
        "compile_s": compile_s,
        "backend": info["backend"],
        "format": info["fmt"],
        "compute_dtype": np.dtype(acfg.dtype).name,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "skipped_steps": sum(not f for f in finites),
        "loss_scale_final": final_scale,
        "step_times_s": times,
        "steps_unix": steps_unix,
    }
    if profile is not None:
        row["profile"] = profile
    if profile_error is not None:
        row["profile_error"] = profile_error
    if measure_gemms:
        row["gemm_s"] = measure_gemm_seconds(cfg, batch, reps=gemm_reps)
    return row


def error_row(arm: str, err: str) -> dict:
    row = {k: None for k in ROW_KEYS}
    row["arm"] = arm
    row["error"] = err
    return row


# ----------------------------------------------------------------------------- report


F_SOURCES = {
    "profile": "the BF16 arm's GEMM kernel time per step in its profile / BF16 step",
    "standalone": "quantized-projection GEMMs timed standalone in BF16 / BF16 step, capped at 1",
}


def eligible_gemm_fraction(bf16: dict | None, quantize_groups,
                           attention_impl: str = "auto") -> tuple[float | None, str | None]:
    """Amdahl's f, the share of the BF16 step spent in the GEMMs the recipes quantize, and where it came from.

    ``"profile"``: the BF16 arm was profiled on a GPU (:func:`_profile_dir`), every projection group is quantized and
    the attention core is cuDNN's (``attention_impl`` "auto" or "cudnn": category ``attention``), so every BF16 GEMM
    kernel of its step (``categories_ms["gemm_wide"]``) is eligible: f = their kernel time per step / the timed step.
    With the "jax" / "xla" attention cores QKᵀ and PV are GEMM kernels too, which the recipes never quantize, so the
    profile's GEMM time would overstate f. ``"standalone"``: otherwise, the quantized projections' BF16 GEMMs timed
    on their own (:func:`measure_gemm_seconds`) / the timed step, capped at 1 (standalone GEMMs can take longer than
    inside the step). ``(None, None)`` without a BF16 row.
    """
    from mxprec.models.llama import GROUPS

    if not bf16 or not bf16.get("step_s_mean"):
        return None, None
    step_ms = bf16["step_s_mean"] * 1e3
    gemm_ms = ((bf16.get("profile") or {}).get("categories_ms") or {}).get("gemm_wide")
    every_group = quantize_groups is None or set(GROUPS) <= set(quantize_groups)
    if gemm_ms and every_group and attention_impl in ("auto", "cudnn"):
        return min(gemm_ms / step_ms, 1.0), "profile"
    gemm = bf16.get("gemm_s")
    if gemm:
        return min(gemm["total_s"] * 1e3 / step_ms, 1.0), "standalone"
    return None, None


def finish_rows(rows: list[dict], arch: str, quantize_groups=None, attention_impl: str = "auto") -> dict:
    """Fills expected_speedup / speedup_vs_bf16 from the BF16 row; returns the Amdahl summary (f from
    :func:`eligible_gemm_fraction` of the groups ``quantize_groups`` quantizes, None: every group, with the model's
    attention core ``attention_impl``)."""
    from mxprec.analysis import amdahl_speedup, peak_ratio

    bf16 = next((r for r in rows if r["arm"] == "bf16" and not r.get("error")), None)
    f, f_source = eligible_gemm_fraction(bf16, quantize_groups, attention_impl)
    gemm = bf16.get("gemm_s") if bf16 else None
    table = {}
    for r in rows:
        if r.get("error"):
            continue
        ratio = peak_ratio(r["format"], arch)
        r["r"] = ratio
        if f is not None:
            r["expected_speedup"] = amdahl_speedup(f, ratio)
        if bf16:
            r["speedup_vs_bf16"] = bf16["step_s_mean"] / r["step_s_mean"]
        table.setdefault(r["format"], {"r": ratio, **{f"f={x}": amdahl_speedup(x, ratio) for x in AMDAHL_FS},
                                       "f=measured": amdahl_speedup(f, ratio) if f is not None else None})
    return {"arch": arch, "f_measured": f, "f_source": f_source, "gemm_s": gemm, "table": table}


def _fmt(v, spec):
    return "—" if v is None else format(v, spec)


def markdown(result: dict) -> str:
    m, am = result["model"], result["amdahl"]
    lines = [
        f"# Llama training step: `{result['config']}` on {result['device']}",
        "",
        (f"Model: D {m['d_model']}, F {m['d_ff']}, {m['n_layers']} layers, {m['n_heads']} heads / "
         f"{m['n_kv_heads']} KV × {m['head_dim']}, vocab {m['vocab']}, seq {m['seq']}, batch {m['batch']}, "
         f"{m['n_params'] / 1e6:.1f}M params; remat {m['remat']}, quantized groups {', '.join(m['quantize'])}; "
         f"AdamW (mu {result['mu_dtype']}), {result['warmup']} warmup + {result['steps']} timed steps "
         f"({result.get('timing', 'blocking')} timing)."),
        f"Command: `{result['command']}` ({result['date']})",
        "",
        ("| arm | step (ms) | std (ms) | TFLOP/s/device | tokens/s/device | expected speedup | speedup vs bf16 "
         "| peak mem (GB) | predicted mem (GB) | compile (s) | backend |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        if r.get("error"):
            lines.append(f"| {r['arm']} | error: {r['error'].splitlines()[0][:120]} | | | | | | | | | |")
            continue
        lines.append(
            f"| {r['arm']} | {r['step_s_mean'] * 1e3:.1f} | {r['step_s_std'] * 1e3:.1f} | "
            f"{r['tflops_per_device']:.4g} | {r['tokens_per_s_per_device']:,.0f} | "
            f"{_fmt(r['expected_speedup'], '.2f')} | {_fmt(r['speedup_vs_bf16'], '.2f')} | "
            f"{_fmt(r['peak_mem_gb'], '.2f')} | {_fmt(r['predicted_mem_gb'], '.2f')} | {r['compile_s']:.1f} | "
            f"{r['backend']} |")
    f = am["f_measured"]
    lines += [
        "",
        (f"Amdahl: S = 1/((1−f) + f/r), r = peak GEMM ratio over BF16 ({am['arch']}"
         f"{'; ' + result['amdahl_note'] if result.get('amdahl_note') else ''}); "
         f"f measured = {_fmt(f, '.3f')} ({F_SOURCES.get(am.get('f_source', 'standalone'), 'not measured')})."),
        "",
        "| format | r | f=0.7 | f=0.8 | f=0.9 | f=measured |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for fmt, t in am["table"].items():
        lines.append(f"| {fmt} | {t['r']:.1f} | {t['f=0.7']:.2f} | {t['f=0.8']:.2f} | {t['f=0.9']:.2f} | "
                     f"{_fmt(t['f=measured'], '.2f')} |")
    if result.get("notes"):  # free text a person added to a merged result (e.g. why a target is missed)
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; skipping the PNG chart", file=sys.stderr)
        return None
    rows = [r for r in result["rows"] if not r.get("error")]
    if not rows:
        return None
    arms = [r["arm"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(min(16.0, max(9.0, 1.6 * len(arms))), 4.5))
    a1.bar(arms, [r["tokens_per_s_per_device"] for r in rows], color="tab:blue")
    a1.set_ylabel("tokens/s/device")
    a1.set_title("throughput")
    x = range(len(arms))
    w = 0.4
    a2.bar([i - w / 2 for i in x], [r["speedup_vs_bf16"] or 0.0 for r in rows], w, label="measured")
    a2.bar([i + w / 2 for i in x], [r["expected_speedup"] or 0.0 for r in rows], w, label="expected (Amdahl)")
    a2.axhline(1.0, color="gray", lw=0.8)
    a2.set_xticks(list(x), arms)
    a2.set_ylabel("speedup vs bf16")
    a2.set_title("speedup")
    a2.legend()
    for a in (a1, a2):
        a.tick_params(axis="x", rotation=45)
    fig.suptitle(f"Llama step, {result['config']}, {result['device']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- CLI


def parse_args(argv):
    from mxprec.models.llama import CONFIGS, GROUPS

    p = argparse.ArgumentParser(prog="python -m mxprec.bench llama", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                   help=f"comma-separated RECIPE[:BACKEND] (e.g. fp8_current:ffi) recipe presets and/or the peers '{PEER_ARM}', '{PLAIN_ARM}' "
                        "(default: %(default)s)")
    p.add_argument("--config", default="tiny", choices=tuple(CONFIGS), help="model config (default: %(default)s)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default per config)")
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default per config)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default per config)")
    p.add_argument("--out", default=os.path.join("benchmarks", "results", "cpu"), help="output directory")
    p.add_argument("--data", default=None, help=".npy token file (1-D stream or 2-D rows); default: synthetic")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--mu-dtype", default="float32", choices=("float32", "bfloat16"), help="AdamW first-moment dtype")
    p.add_argument("--quantize", default="mlp,attn,logits", help="projection groups that run the recipe")
    p.add_argument("--remat", default="full", choices=("full", "save_gemm", "none"))
    p.add_argument("--no-scan", action="store_true", help="unroll the layers instead of nn.scan")
    p.add_argument("--attention", default="auto", choices=("auto", "cudnn", "jax", "xla"),
                   help="attention core (LlamaConfig.attention_impl; auto: cuDNN on GPU, XLA elsewhere)")
    p.add_argument("--loss-pick", default="select", choices=("select", "gather"),
                   help="how the loss takes each target's log-probability (measurement knob; see cross_entropy_loss)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gemm-reps", type=int, default=5, help="repetitions when timing the standalone GEMMs")
    p.add_argument("--isolate", default="auto", choices=("auto", "on", "off"),
                   help="one process per arm (auto: on for accelerators, so peak memory is per arm)")
    p.add_argument("--fast-compile", action="store_true",
                   help="XLA backend optimization level 0: faster compiles, slower steps (smoke runs)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="after timing, trace two steps per arm with jax.profiler into DIR/<arm> and add a "
                        "per-category GPU-time summary to each row (``profile``); on a GPU the BF16 arm is "
                        "traced anyway (temporary directory): its profile gives Amdahl's f")
    p.add_argument("--timing", default="blocking", choices=TIMINGS,
                   help="blocking: each step dispatched then waited for; pipelined: the next step dispatched "
                        "before the previous is waited for, step time = interval between completions (TIMINGS)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="combine the results JSONs of earlier runs (e.g. one process per arm, each its own "
                        "device call) into one table under --out; runs nothing")
    args = p.parse_args(argv)
    d = CONFIG_DEFAULTS.get(args.config, _FALLBACK_DEFAULTS)
    for k in ("batch", "warmup", "steps"):
        if getattr(args, k) is None:
            setattr(args, k, d[k])
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        p.error("need --steps >= 1, --warmup >= 0, --batch >= 1")
    if args.timing == "pipelined" and args.warmup < 1:
        p.error("--timing pipelined needs --warmup >= 1 (the first timed interval starts when a warmup step ends)")
    if args.seed < 0:
        p.error(f"--seed must be >= 0, got {args.seed}")
    if args.data is not None and not os.path.isfile(args.data):
        p.error(f"--data {args.data!r} is not a file")
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    args.quantize = tuple(g.strip() for g in args.quantize.split(",") if g.strip())
    bad = [g for g in args.quantize if g not in GROUPS]
    if bad:
        p.error(f"--quantize: unknown projection groups {bad}; choose from {GROUPS}")
    return args


def _config(args):
    from mxprec.models.llama import get_config

    return get_config(args.config, remat=args.remat, scan_layers=not args.no_scan, quantize=args.quantize,
                      attention_impl=args.attention, loss_pick=args.loss_pick)


def _mu_dtype(args):
    import jax.numpy as jnp

    return None if jnp.dtype(args.mu_dtype) == jnp.dtype(jnp.float32) else jnp.dtype(args.mu_dtype)


def _profile_dir(arm: str, args) -> tuple[str | None, str | None]:
    """(trace directory of this arm, temporary directory to delete afterwards): ``--profile DIR`` traces every arm
    into DIR/<arm>; without it the BF16 arm is still traced on a GPU, into a temporary directory, because Amdahl's f
    comes from its profile (:func:`eligible_gemm_fraction`)."""
    import jax

    if args.profile:
        return os.path.join(args.profile, arm), None
    if arm == "bf16" and jax.default_backend() == "gpu":
        tmp = tempfile.mkdtemp(prefix="mxprec_bf16_profile_")
        return tmp, tmp
    return None, None


def _run_arm_safely(arm, args, cfg) -> dict:
    tmp = None
    try:
        profile_dir, tmp = _profile_dir(arm, args)
        return run_arm(arm, cfg, batch=args.batch, steps=args.steps, warmup=args.warmup, lr=args.lr,
                       mu_dtype=_mu_dtype(args), data=args.data, seed=args.seed, measure_gemms=(arm == "bf16"),
                       gemm_reps=args.gemm_reps, progress=not args.no_progress,
                       compiler_options=FAST_COMPILE if args.fast_compile else None,
                       profile_dir=profile_dir, timing=args.timing)
    except Exception as e:  # noqa: BLE001 - an arm's failure (OOM, unsupported shape) becomes its row
        msg = f"{type(e).__name__}: {e}"
        print(f"arm {arm} failed: {msg.splitlines()[0][:300]}", file=sys.stderr)
        if os.environ.get("MXPREC_BENCH_TRACEBACK"):
            traceback.print_exc()
        return error_row(arm, msg[:2000])
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        gc.collect()


def _run_arm_in_child(arm, argv, progress) -> tuple[dict, dict | None]:
    """Runs one arm in a fresh process (its own peak memory); returns (row, device)."""
    import mxprec

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(mxprec.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if _ORIG_PREALLOCATE is None:
        env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
    else:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = _ORIG_PREALLOCATE
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        cmd = [sys.executable, "-m", "mxprec.bench", "llama", *argv, "--arms", arm, "--isolate", "off",
               "--child-json", out] + ([] if progress else ["--no-progress"])
        rc = subprocess.call(cmd, env=env)
        if rc != 0 or not os.path.exists(out):
            return error_row(arm, f"arm process exited with status {rc}"), None
        with open(out) as fh:
            got = json.load(fh)
    return got["row"], got["device"]


_ORIG_PREALLOCATE: str | None = None


def _child_argv(argv):
    """``argv`` without the options the parent sets for each child (--arms, --isolate, ...)."""
    with_value = ("--arms", "--isolate", "--child-json")
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in with_value:
            skip = True
            continue
        if a == "--no-progress" or any(a.startswith(o + "=") for o in with_value):
            continue
        out.append(a)
    return out


# What merged runs must share besides model / config / timing (speedups compare rows across runs).
_MERGE_SAME = ("device_kind", "steps", "warmup", "mu_dtype", "data", "fast_compile")


_MERGE_DEFAULTS = {"mu_dtype": "float32", "fast_compile": False}  # (runs written before these keys existed)


def _merge_key(result: dict, key: str):
    if key == "device_kind":
        return (result.get("device_info") or {}).get(key)
    return result.get(key, _MERGE_DEFAULTS.get(key))


def merge_results(paths, out_dir: str) -> dict:
    """One result from several runs of the same config (rows in the order given; Amdahl redone).

    For runs split across processes or device calls (each arm's peak memory is its own process's).
    The runs must share config, model dimensions and batch; their commands are listed.
    """
    results = []
    for path in paths:
        with open(path) as fh:
            results.append(json.load(fh))
    base = dict(results[0])
    for r in results[1:]:
        if r["model"] != base["model"] or r["config"] != base["config"]:
            raise ValueError(f"cannot merge runs of different models/configs: {paths[0]} vs {r.get('command')}")
        if r.get("timing", "blocking") != base.get("timing", "blocking"):
            raise ValueError(f"cannot merge runs timed differently ({base.get('timing', 'blocking')} vs "
                             f"{r.get('timing', 'blocking')}): {paths[0]} vs {r.get('command')}")
        # speedup_vs_bf16 and Amdahl's f compare rows across runs: same device and measurement settings only
        for key in _MERGE_SAME:
            if _merge_key(r, key) != _merge_key(base, key):
                raise ValueError(f"cannot merge runs with different {key} ({_merge_key(base, key)!r} vs "
                                 f"{_merge_key(r, key)!r}): {paths[0]} vs {r.get('command')}")
    rows = [dict(row) for r in results for row in r["rows"]]
    arch, _ = amdahl_arch(base["device_info"]["device_kind"])
    base.update(
        rows=rows,
        amdahl=finish_rows(rows, arch, base["model"].get("quantize"), base["model"].get("attention_impl", "auto")),
        command="; ".join(r["command"] for r in results),
        wall_s=sum(r["wall_s"] for r in results),
        partial=any(r["partial"] for r in results),
        merged_from=[os.path.basename(p) for p in paths],
        compile_s_note="each arm compiled in its own process",
    )
    _, md = _save(base, out_dir, with_png=True)
    print(md)
    return base


def main(argv=None) -> dict:
    global _ORIG_PREALLOCATE
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.merge:
        return merge_results(args.merge, args.out)
    if args.child_json is None and args.isolate != "off":
        # The parent only looks at the platform: keep it from preallocating accelerator memory.
        _ORIG_PREALLOCATE = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"

    import jax
    from tqdm.auto import tqdm

    cfg = _config(args)

    if args.child_json is not None:  # one arm, in a process of its own
        (arm,) = args.arms
        row = _run_arm_safely(arm, args, cfg)
        with open(args.child_json, "w") as fh:
            json.dump({"row": row, "device": device_description()}, fh)
        return {"rows": [row]}

    for arm in args.arms:
        if arm not in (PEER_ARM, PLAIN_ARM):
            arm_recipe(arm)  # fail fast on an unknown name or backend
    isolate = args.isolate == "on" or (args.isolate == "auto" and jax.default_backend() != "cpu")
    child_argv = _child_argv(argv)

    t_start = time.perf_counter()
    rows, device = [], None
    bar = tqdm(args.arms, desc=f"llama {args.config}", unit="arm", disable=args.no_progress, file=sys.stderr)
    for arm in bar:
        bar.set_postfix_str(arm)
        if isolate:
            row, dev = _run_arm_in_child(arm, child_argv, not args.no_progress)
            device = device or dev
        else:
            row = _run_arm_safely(arm, args, cfg)
        rows.append(row)
        # A run stopped early (time limit, OOM-killed process) still leaves every finished arm on disk.
        print(f"arm {arm}: " + json.dumps({k: row.get(k) for k in ("step_s_mean", "step_s_std", "compile_s",
                                                                    "peak_mem_gb", "error")}), flush=True)
        _write_results(args, argv, cfg, rows, device or device_description(), isolate,
                       time.perf_counter() - t_start, partial=len(rows) < len(args.arms))
    bar.close()
    device = device or device_description()
    wall_s = time.perf_counter() - t_start
    result, stem, md = _write_results(args, argv, cfg, rows, device, isolate, wall_s, partial=False, final=True)
    print(md)
    print(f"wrote {stem}.json, {stem}.md" + (f", {stem}.png" if os.path.exists(stem + ".png") else "")
          + f" (wall {wall_s:.1f} s)")
    return result


def _write_results(args, argv, cfg, rows, device, isolate, wall_s, partial: bool, final: bool = False):
    """Writes <out>/llama_<config>.{json,md} (and the PNG when final); returns (result, stem, md)."""
    rows = [dict(r) for r in rows]

    arch, note = amdahl_arch(device["device_kind"])
    amdahl = finish_rows(rows, arch, cfg.quantize, cfg.attention_impl)
    model = dict(cfg.to_dict(), batch=args.batch, tokens_per_step=args.batch * cfg.seq)
    result = {
        "device": device["description"],
        "command": "python -m mxprec.bench llama " + shlex.join(argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": model,
        "rows": rows,
        "config": args.config,
        "steps": args.steps,
        "warmup": args.warmup,
        "timing": args.timing,
        "mu_dtype": args.mu_dtype,
        "data": args.data or "synthetic (one fixed random batch)",
        "amdahl": amdahl,
        "amdahl_note": note,
        "isolated": isolate,
        "fast_compile": args.fast_compile,
        "wall_s": wall_s,
        "partial": partial,
        "device_info": device,
    }
    stem, md = _save(result, args.out, with_png=final)
    return result, stem, md


def _save(result: dict, out_dir: str, with_png: bool) -> tuple[str, str]:
    """Writes <out_dir>/llama_<config>.{json,md} (and .png); returns (path stem, markdown)."""
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"llama_{result['config']}")
    md = markdown(result)
    with open(stem + ".json", "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    with open(stem + ".md", "w") as fh:
        fh.write(md)
    if with_png:
        plot(result, stem + ".png")
    return stem, md


if __name__ == "__main__":
    main()
