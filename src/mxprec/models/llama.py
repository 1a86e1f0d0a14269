"""A MaxText-style Llama decoder in Flax linen whose projections run an mxprec recipe.

Architecture (MaxText's default decoder): token embedding → ``n_layers`` × [RMSNorm →
grouped-query attention with RoPE (``jax.nn.dot_product_attention``, causal) → residual →
RMSNorm → SwiGLU MLP → residual] → RMSNorm → untied output head (logits).

Every projection is an ``nn.DenseGeneral`` (no bias). The projection *groups*

* ``"attn"``   — query, key, value, out,
* ``"mlp"``    — wi_0 (gate), wi_1 (up), wo (down),
* ``"logits"`` — the output head,

listed in ``LlamaConfig.quantize`` take ``dot_general_cls`` from the recipe
(``recipe.dot_general_cls()``); the others run plain ``lax.dot_general`` in the compute dtype.
The attention core (QKᵀ, softmax, PV) always stays in the compute dtype (BF16): on GPU
``jax.nn.dot_product_attention(implementation="cudnn")`` (cuDNN flash attention, as MaxText and
the plain-Flax anchor use; an ineligible shape raises instead of silently running the
materialized-softmax XLA path); elsewhere :func:`xla_attention`, the same math as jax.nn's XLA
path written to lower under strict dtype promotion (``LlamaConfig.attention_impl``; see
:func:`attention_core`).

Parameters are ``param_dtype`` (FP32 master weights); activations ``dtype`` (BF16, or FP16 for
an FP16 run). RMSNorm, RoPE and the softmax statistics are computed in FP32.

Layers and rematerialization
----------------------------
With ``scan_layers=True`` one decoder layer is ``nn.scan``-ned over ``n_layers`` (parameters and
the ``_overwrite_with_gradient`` delayed-scaling state stacked along axis 0, so every layer keeps
its own amax history). ``remat``:

* ``"full"`` — ``nn.remat(policy=jax.checkpoint_policies.nothing_saveable)``: only each layer's
  input is kept; the backward pass recomputes the whole layer, *including the custom mxprec
  GEMMs* (their Fprop, with its operand quantization, runs twice per step). ``prevent_cse`` is
  off under ``nn.scan`` (scan already prevents the CSE that remat guards against) and on for an
  unrolled stack.
* ``"save_gemm"`` — ``jax.checkpoint_policies.save_only_these_names("mxprec_gemm")``: mxprec
  tags every projection output ``checkpoint_name(y, "mxprec_gemm")``, so the GEMM outputs are
  saved and only the cheap element-wise work is recomputed (more memory, no second Fprop).
  Projections not run through mxprec (groups not in ``quantize``, or a foreign
  ``dot_general_cls``) carry no tag and are recomputed.
* ``"none"`` — no rematerialization.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mxprec.flax.linen import OVERWRITE_WITH_GRADIENT
from mxprec.recipes import Recipe, get as get_recipe

__all__ = [
    "CONFIGS",
    "GROUPS",
    "Llama",
    "LlamaConfig",
    "RMSNorm",
    "apply_rope",
    "count_params",
    "cross_entropy_loss",
    "get_config",
    "h200_large",
    "llama3_8b_4layer",
    "llama70b_layer",
    "micro",
    "tiny",
]

GROUPS = ("mlp", "attn", "logits")
REMAT_POLICIES = ("full", "save_gemm", "none")
ATTENTION_IMPLS = ("auto", "cudnn", "jax", "xla")
LOSS_PICKS = ("select", "gather")  # how cross_entropy_loss takes the target log-probability


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    """Llama decoder dimensions and execution options (hashable, JSON-able via :meth:`to_dict`)."""

    vocab: int = 512
    d_model: int = 256
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    d_ff: int = 512
    seq: int = 128
    dtype: Any = jnp.bfloat16  # activation / compute dtype
    param_dtype: Any = jnp.float32  # master weights
    remat: str = "full"  # "full" | "save_gemm" | "none"
    scan_layers: bool = True
    quantize: tuple[str, ...] = GROUPS  # projection groups that run the recipe
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    attention_impl: str = "auto"  # "auto" | "cudnn" | "jax" | "xla" (see attention_core)
    loss_pick: str = "select"  # "select" | "gather" (see cross_entropy_loss)
    fused_mlp: bool = False  # the MLP as mxprec.fused_mlp.swiglu_mlp (needs an mxprec recipe on the "mlp" group)

    def __post_init__(self):
        for f in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "seq"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"LlamaConfig.{f} must be a positive int, got {v!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (RoPE)")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {self.remat!r}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {self.attention_impl!r}")
        if self.loss_pick not in LOSS_PICKS:
            raise ValueError(f"loss_pick must be one of {LOSS_PICKS}, got {self.loss_pick!r}")
        q = tuple(self.quantize)
        bad = [g for g in q if g not in GROUPS]
        if bad:
            raise ValueError(f"unknown projection groups {bad}; choose from {GROUPS}")
        object.__setattr__(self, "quantize", tuple(g for g in GROUPS if g in q))

    def replace(self, **changes) -> LlamaConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["dtype"] = jnp.dtype(self.dtype).name
        d["param_dtype"] = jnp.dtype(self.param_dtype).name
        d["quantize"] = list(self.quantize)
        d["n_params"] = count_params(self)
        return d


def count_params(cfg: LlamaConfig) -> int:
    """Number of parameters (embedding and untied head included)."""
    D, F, H, KV, hd, V = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.vocab
    layer = D * (H + 2 * KV) * hd + H * hd * D + 3 * D * F + 2 * D
    return V * D + cfg.n_layers * layer + D + D * V


# ----------------------------------------------------------------------------- presets


def micro(**kw) -> LlamaConfig:
    """Test-sized: every projection dim a multiple of 128 (fp8_block tiles, MX blocks of 32)."""
    base = dict(vocab=256, d_model=128, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=128, d_ff=256, seq=64)
    return LlamaConfig(**{**base, **kw})


def tiny(**kw) -> LlamaConfig:
    """CPU benchmark default: D 256, F 512, 4 heads / 2 KV of 64, 2 layers, seq 128, vocab 512."""
    base = dict(vocab=512, d_model=256, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=64, d_ff=512, seq=128)
    return LlamaConfig(**{**base, **kw})


def llama3_8b_4layer(**kw) -> LlamaConfig:
    """Llama-3-8B widths, 4 layers (the plain-Flax H200 anchor): D 4096, F 14336, 32/8 heads, seq 4096."""
    base = dict(vocab=32000, d_model=4096, n_layers=4, n_heads=32, n_kv_heads=8, head_dim=128,
                d_ff=14336, seq=4096)
    return LlamaConfig(**{**base, **kw})


def h200_large(**kw) -> LlamaConfig:
    """Llama-2-7B widths (D 4096, F 11008, 32 MHA heads), 12 layers ≈ 2.7B params, seq 4096.

    About 2.69e9 parameters: FP32 master + AdamW moments + FP32 gradients ≈ 43 GB, plus the
    full-remat layer checkpoints, one layer's working set and the FP32 logits of batch × 4096 ×
    32000, for one H200 without sharding.
    """
    base = dict(vocab=32000, d_model=4096, n_layers=12, n_heads=32, n_kv_heads=32, head_dim=128,
                d_ff=11008, seq=4096)
    return LlamaConfig(**{**base, **kw})


def llama70b_layer(**kw) -> LlamaConfig:
    """One Llama-70B-width layer: D 8192, F 28672, 64 heads / 8 KV of 128, vocab 32000, seq 4096."""
    base = dict(vocab=32000, d_model=8192, n_layers=1, n_heads=64, n_kv_heads=8, head_dim=128,
                d_ff=28672, seq=4096)
    return LlamaConfig(**{**base, **kw})


CONFIGS: dict[str, Callable[..., LlamaConfig]] = {
    "micro": micro,
    "tiny": tiny,
    "llama3_8b_4layer": llama3_8b_4layer,
    "h200_large": h200_large,
    "llama70b_layer": llama70b_layer,
}


def get_config(name: str, **overrides) -> LlamaConfig:
    if name not in CONFIGS:
        raise ValueError(f"unknown Llama config {name!r}; known: {', '.join(CONFIGS)}")
    return CONFIGS[name](**overrides)


# ----------------------------------------------------------------------------- layers


class RMSNorm(nn.Module):
    """``x / rms(x) · scale``, statistics in FP32, output in ``dtype``."""

    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32
    eps: float = 1e-5

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (d,), self.param_dtype)
        x32 = x.astype(jnp.float32)
        ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        y = x32 * jax.lax.rsqrt(ms + jnp.float32(self.eps))
        y = y * jnp.reshape(scale.astype(jnp.float32), (1,) * (x.ndim - 1) + (d,))
        return y.astype(self.dtype)


def rope_tables(seq: int, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """``cos, sin`` of shape ``(seq, head_dim // 2)``, FP32."""
    half = head_dim // 2
    inv_freq = jnp.float32(1.0) / (
        jnp.float32(theta) ** (jnp.arange(half, dtype=jnp.float32) * jnp.float32(2.0 / head_dim)))
    ang = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotary embedding on ``x (B, S, heads, hd)`` (MaxText's split-halves layout), in FP32."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    x1, x2 = x32[..., :half], x32[..., half:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    return out.astype(x.dtype)


def xla_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Causal GQA attention in XLA: the math of ``jax.nn.dot_product_attention(implementation="xla")``.

    ``q (B, T, N, hd)``, ``k, v (B, S, K, hd)`` with ``N % K == 0``. QKᵀ accumulates in FP32,
    softmax in FP32, probabilities cast to ``v.dtype`` for PV (FP32 accumulation), output in
    ``q.dtype``. Written with explicit dtypes so that it also lowers under
    ``jax_numpy_dtype_promotion="strict"``.
    """
    B, T, N, hd = q.shape
    S, K = k.shape[1], k.shape[2]
    G = N // K
    qg = q.reshape(B, T, K, G, hd)
    logits = jnp.einsum("btkgh,bskh->bkgts", qg, k, preferred_element_type=jnp.float32)
    logits = logits * jnp.float32(1.0 / math.sqrt(hd))
    causal = jnp.tril(jnp.ones((T, S), jnp.bool_))
    logits = jnp.where(causal[None, None, None], logits, jnp.float32(jnp.finfo(jnp.float32).min))
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskh->btkgh", probs, v, preferred_element_type=jnp.float32)
    return out.reshape(B, T, N, hd).astype(q.dtype)


def attention_core(q: jax.Array, k: jax.Array, v: jax.Array, impl: str = "auto") -> jax.Array:
    """The (never quantized) attention core, causal, grouped-query.

    ``impl``:

    * ``"auto"`` — ``"cudnn"`` on GPU, ``"xla"`` elsewhere.
    * ``"cudnn"`` — ``jax.nn.dot_product_attention(is_causal=True, implementation="cudnn")``: cuDNN
      flash attention (BF16/FP16, head_dim <= 128 ...); JAX raises if the shape is ineligible.
    * ``"jax"`` — ``jax.nn.dot_product_attention(implementation=None)``, which in jax 0.10–0.11
      still means its XLA path: the (B, N, T, S) FP32 logits are materialized (8.6 GB per layer
      at batch 4, 32 heads, seq 4096).
    * ``"xla"`` — always :func:`xla_attention`.

    Why not jax.nn everywhere: jax 0.10's XLA path of ``dot_product_attention`` gives its BF16
    QKᵀ einsum ``precision=DotAlgorithmPreset.BF16_BF16_F32``; the backward pass then holds a
    mixed f32 × bf16 dot with that algorithm, whose *lowering* calls ``promote_types`` and fails
    under ``jax_numpy_dtype_promotion="strict"`` (the test configuration).
    """
    if impl == "auto":
        impl = "cudnn" if jax.default_backend() == "gpu" else "xla"
    if impl == "cudnn":
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
    if impl == "jax":
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=None)
    if impl == "xla":
        return xla_attention(q, k, v)
    raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")


def _dense_cls(cfg: LlamaConfig, dg_cls, group: str):
    """``nn.DenseGeneral`` partial for a projection group (recipe's dot_general_cls if quantized)."""
    return functools.partial(
        nn.DenseGeneral,
        use_bias=False,
        dtype=cfg.dtype,
        param_dtype=cfg.param_dtype,
        dot_general_cls=dg_cls if (dg_cls is not None and group in cfg.quantize) else None,
    )


class Attention(nn.Module):
    cfg: LlamaConfig
    dg_cls: Any = None

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        dense = _dense_cls(cfg, self.dg_cls, "attn")
        q = dense((cfg.n_heads, cfg.head_dim), name="query")(x).astype(cfg.dtype)
        k = dense((cfg.n_kv_heads, cfg.head_dim), name="key")(x).astype(cfg.dtype)
        v = dense((cfg.n_kv_heads, cfg.head_dim), name="value")(x).astype(cfg.dtype)
        cos, sin = rope_tables(x.shape[1], cfg.head_dim, cfg.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attention_core(q, k, v, cfg.attention_impl)
        out = dense(cfg.d_model, axis=(-2, -1), name="out")(o.astype(cfg.dtype))
        return out.astype(cfg.dtype)


class MLP(nn.Module):
    cfg: LlamaConfig
    dg_cls: Any = None

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        if cfg.fused_mlp:
            from mxprec.flax.linen import MxDotGeneral, fused_swiglu_mlp_in

            dg_cls = self.dg_cls if "mlp" in cfg.quantize else None
            if not (isinstance(dg_cls, functools.partial) and dg_cls.func is MxDotGeneral):
                raise ValueError(f"LlamaConfig.fused_mlp needs an mxprec recipe on the 'mlp' group; it runs {dg_cls!r} "
                                 f"(quantize={cfg.quantize})")
            y = fused_swiglu_mlp_in(self, x, cfg.d_ff, dg_cls.keywords["recipe"], cfg.dtype, cfg.param_dtype)
            return y.astype(cfg.dtype)
        dense = _dense_cls(cfg, self.dg_cls, "mlp")
        gate = dense(cfg.d_ff, name="wi_0")(x).astype(cfg.dtype)
        up = dense(cfg.d_ff, name="wi_1")(x).astype(cfg.dtype)
        h = (nn.silu(gate) * up).astype(cfg.dtype)
        return dense(cfg.d_model, name="wo")(h).astype(cfg.dtype)


class DecoderLayer(nn.Module):
    """One pre-norm decoder layer; ``(x) -> (x, None)`` so that it can be ``nn.scan``-ned."""

    cfg: LlamaConfig
    dg_cls: Any = None

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        norm = functools.partial(RMSNorm, dtype=cfg.dtype, param_dtype=cfg.param_dtype, eps=cfg.norm_eps)
        h = x + Attention(cfg, self.dg_cls, name="attention")(norm(name="pre_attention_norm")(x))
        out = h + MLP(cfg, self.dg_cls, name="mlp")(norm(name="pre_mlp_norm")(h))
        return out.astype(cfg.dtype), None


def _remat_policy(name: str):
    from mxprec.training import remat_policy

    return None if name == "none" else remat_policy(save_gemm_outputs=name == "save_gemm")


class Llama(nn.Module):
    """Llama decoder: ``tokens (B, S) int -> logits (B, S, vocab)`` in the head's output dtype.

    Attributes:
      cfg: dimensions and options.
      recipe: an mxprec Recipe or preset name for the groups in ``cfg.quantize`` (None: plain
        ``lax.dot_general`` everywhere).
      dot_general_cls: explicit ``dot_general_cls`` for the quantized groups, overriding
        ``recipe`` (e.g. ``nn.Fp8DirectDotGeneralOp``, plain Flax's FP8, as a peer).
    """

    cfg: LlamaConfig
    recipe: Any | None = None
    dot_general_cls: Any | None = None

    def _dg_cls(self):
        if self.dot_general_cls is not None:
            return self.dot_general_cls
        if self.recipe is None:
            return None
        r = self.recipe if isinstance(self.recipe, Recipe) else get_recipe(self.recipe)
        return r.dot_general_cls()

    @nn.compact
    def __call__(self, tokens):
        cfg = self.cfg
        dg_cls = self._dg_cls()
        x = nn.Embed(cfg.vocab, cfg.d_model, param_dtype=cfg.param_dtype,
                     embedding_init=nn.initializers.normal(stddev=1.0), name="token_embedder")(tokens)
        x = x.astype(cfg.dtype)

        layer_cls = DecoderLayer
        if cfg.remat != "none":
            layer_cls = nn.remat(layer_cls, policy=_remat_policy(cfg.remat), prevent_cse=not cfg.scan_layers)
        if cfg.scan_layers:
            stack = nn.scan(
                layer_cls,
                variable_axes={"params": 0, OVERWRITE_WITH_GRADIENT: 0},
                split_rngs={"params": True},
                length=cfg.n_layers,
            )
            x, _ = stack(cfg, dg_cls, name="layers")(x)
        else:
            for i in range(cfg.n_layers):
                x, _ = layer_cls(cfg, dg_cls, name=f"layers_{i}")(x)

        x = RMSNorm(dtype=cfg.dtype, param_dtype=cfg.param_dtype, eps=cfg.norm_eps, name="decoder_norm")(x)
        head = _dense_cls(cfg, dg_cls, "logits")
        return head(cfg.vocab, name="logits_dense")(x)


def cross_entropy_loss(logits: jax.Array, targets: jax.Array, mask: jax.Array | None = None, *,
                       pick: str = "select"):
    """Mean next-token cross entropy in FP32 over valid targets; returns ``(loss, n_valid)``.

    logits: [..., V]; targets: [...] integer ids in [0, V); mask: [...] (true = counted) or None.
    ``pick`` chooses how each position's target log-probability is taken:

    - ``"select"`` (default): ``sum(where(iota == target, logp, 0), -1)``. Its backward is a select
      of the cotangent, which XLA fuses into the log-softmax backward; no scatter.
    - ``"gather"``: ``take_along_axis``. Its backward is a scatter into an FP32 ``[..., V]`` zeros
      buffer; on the H200 Llama step that buffer and the scatter held 2 GB each at the peak.

    Same loss and gradients bit for bit for targets in [0, V) (only one term of the sum is nonzero).
    A target outside [0, V) makes the loss NaN under either pick (never a silent 0 or a wrapped id),
    unless ``mask`` excludes its position. ``mask`` must have ``targets``' shape.
    """
    if pick not in LOSS_PICKS:
        raise ValueError(f"cross_entropy_loss: pick={pick!r}; known: {LOSS_PICKS}")
    if not jnp.issubdtype(targets.dtype, jnp.integer) or targets.shape != logits.shape[:-1]:
        raise ValueError(f"cross_entropy_loss: targets must be integer ids of shape logits.shape[:-1] = "
                         f"{logits.shape[:-1]}, got {targets.dtype}{targets.shape}")
    if mask is not None and mask.shape != targets.shape:
        raise ValueError(f"cross_entropy_loss: mask {mask.shape} must have targets' shape {targets.shape}")
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    vocab_size = logp.shape[-1]
    in_range = (targets >= 0) & (targets < vocab_size)  # before the int32 cast, which wraps ids >= 2**31
    tgt = targets[..., None].astype(jnp.int32)
    if pick == "gather":
        nll = -jnp.take_along_axis(logp, tgt, axis=-1)[..., 0]
    else:
        vocab = jax.lax.broadcasted_iota(jnp.int32, logp.shape, logp.ndim - 1)
        nll = -jnp.sum(jnp.where(vocab == tgt, logp, jnp.float32(0)), axis=-1)
    nll = jnp.where(in_range, nll, jnp.float32(jnp.nan))
    if mask is None:
        n = jnp.float32(math.prod(targets.shape))
        return jnp.sum(nll) / n, n
    m = mask.astype(jnp.bool_)
    n = jnp.sum(m, dtype=jnp.float32)
    total = jnp.sum(jnp.where(m, nll, jnp.float32(0)))
    return total / jnp.maximum(n, jnp.float32(1)), n
