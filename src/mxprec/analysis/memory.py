"""Per-GPU training memory model (seed model, FSDP).

With FSDP degree ``N_F`` and ``P`` parameters, per GPU:

* ``M_persistent = P / N_F · (4 + 4 + 4)`` bytes: FP32 master weights + Adam ``mu`` + Adam ``nu``.
* ``M_gradient   = P / N_F · 4`` bytes: FP32 gradient shard.
* ``M_saved      = 2 · A_h + A_e · (b/8 + s/(8k))`` bytes, where

  - ``A_h`` = number of saved activation values kept in BF16 (2 bytes each, hence the ``2·``);
  - ``A_e`` = number of saved values stored in a low-precision format with ``b`` bits per
    element plus one ``s``-bit scale per ``k`` elements (the seed writes ``s/k`` with ``s`` in
    bytes; it is the same number).

Effective bytes per value (:data:`BYTES_PER_VALUE`): bf16 2.0, per-tensor fp8 1.0 (plus one FP32
scale per tensor, neglected), mxfp8 1.03125, mxfp6 0.78125, mxfp4 0.53125, nvfp4 0.5625
(E2M1 + one E4M3 scale per 16; the FP32 tensor scale is neglected).

GB here is 1e9 bytes. Example: 70e9 parameters, FSDP-8 → 105 GB persistent, 35 GB gradient.
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "BYTES_PER_VALUE",
    "FORMAT_BITS",
    "RECIPE_SAVED_FORMAT",
    "MemoryEstimate",
    "bytes_per_value",
    "format_bytes_per_value",
    "llama_layer_saved_values",
    "llama_memory",
    "seed_memory",
]

GB = 1e9

# (element bits b, scale bits s, block size k); k = 0 means "one scale per tensor, neglected".
FORMAT_BITS: dict[str, tuple[int, int, int]] = {
    "bf16": (16, 0, 0),
    "fp8": (8, 0, 0),
    "mxfp8": (8, 8, 32),
    "mxfp6": (6, 8, 32),
    "mxfp4": (4, 8, 32),
    "nvfp4": (4, 8, 16),
}


def bytes_per_value(b: int, s: int = 0, k: int = 0) -> float:
    """Effective bytes per stored value: ``b/8 + s/(8k)`` (``k == 0``: no per-block scale)."""
    if b <= 0 or s < 0 or k < 0:
        raise ValueError(f"need b > 0, s >= 0, k >= 0; got b={b}, s={s}, k={k}")
    if s > 0 and k == 0:
        raise ValueError(f"a per-block scale of s={s} bits needs a block size k > 0")
    return b / 8 + (s / (8 * k) if k else 0.0)


BYTES_PER_VALUE: dict[str, float] = {name: bytes_per_value(*bits) for name, bits in FORMAT_BITS.items()}

# Recipe name -> storage format of the low-precision saved values (matmul inputs): the seed's names and every
# preset and alias of mxprec.recipes (tests/test_analysis.py checks that each one is here). fp16 saves 16-bit
# values like bf16.
RECIPE_SAVED_FORMAT: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8_tensor": "fp8",
    "fp8_delayed": "fp8",
    "fp8_current": "fp8",
    "fp8_row": "fp8",
    "fp8_rowwise": "fp8",
    "fp8_tile": "fp8",
    "fp8_block": "fp8",
    "te_fp8_delayedscaling": "fp8",
    "te_fp8_currentscaling": "fp8",
    "mxfp8": "mxfp8",
    "mxfp8_floor": "mxfp8",
    "te_mxfp8": "mxfp8",
    "mxfp6": "mxfp6",
    "mxfp4": "mxfp4",
    "aiter_fp4": "mxfp4",
    "nvfp4": "nvfp4",
    "te_nvfp4": "nvfp4",
}


def format_bytes_per_value(fmt: str) -> float:
    """Effective bytes per value of a storage format name (see :data:`BYTES_PER_VALUE`)."""
    try:
        return BYTES_PER_VALUE[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; known: {sorted(BYTES_PER_VALUE)}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Per-GPU memory estimate in bytes (``*_gb`` properties: 1 GB = 1e9 bytes)."""

    persistent_bytes: float
    gradient_bytes: float
    saved_activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.persistent_bytes + self.gradient_bytes + self.saved_activation_bytes

    @property
    def persistent_gb(self) -> float:
        return self.persistent_bytes / GB

    @property
    def gradient_gb(self) -> float:
        return self.gradient_bytes / GB

    @property
    def saved_activation_gb(self) -> float:
        return self.saved_activation_bytes / GB

    @property
    def total_gb(self) -> float:
        return self.total_bytes / GB


def seed_memory(
    n_params: float, fsdp: int, *, a_high: float = 0.0, a_low: float = 0.0, low_format: str = "bf16"
) -> MemoryEstimate:
    """The seed model: ``P/N_F·12`` + ``P/N_F·4`` + ``2·A_h + A_e·bytes_per_value(low_format)``.

    ``a_high`` / ``a_low`` are value counts (not bytes) per GPU.
    """
    if n_params < 0 or fsdp < 1 or a_high < 0 or a_low < 0:
        raise ValueError(
            f"need n_params >= 0, fsdp >= 1, a_high >= 0, a_low >= 0; "
            f"got n_params={n_params}, fsdp={fsdp}, a_high={a_high}, a_low={a_low}"
        )
    shard = n_params / fsdp
    return MemoryEstimate(
        persistent_bytes=shard * 12.0,
        gradient_bytes=shard * 4.0,
        saved_activation_bytes=2.0 * a_high + a_low * format_bytes_per_value(low_format),
    )


def llama_layer_saved_values(d_model: int, d_ff: int, tokens: int) -> tuple[int, int]:
    """Saved values ``(A_h, A_e)`` of one Llama decoder layer for ``tokens`` tokens (no remat).

    Per token (multi-head attention assumed, ``H·hd = d_model``, no GQA saving: conservative):

    * BF16 (``A_h``): q, k, v (3D), attention output for the flash-attention backward (D),
      mid-layer residual for the second RMSNorm backward (D), SwiGLU gate and up
      pre-activations (2F) → ``5D + 2F``. The layer input itself is the remat checkpoint and is
      counted separately.
    * low precision (``A_e``): the quantized matmul inputs kept for the weight-gradient GEMMs:
      RMSNorm-1 output (D), attention output (D), RMSNorm-2 output (D), SwiGLU output (F)
      → ``3D + F``.

    Softmax statistics, RMSNorm scales and dropout masks are O(tokens) and neglected.
    """
    if d_model <= 0 or d_ff <= 0 or tokens < 0:
        raise ValueError(f"need d_model > 0, d_ff > 0, tokens >= 0; got {d_model}, {d_ff}, {tokens}")
    return tokens * (5 * d_model + 2 * d_ff), tokens * (3 * d_model + d_ff)


def llama_memory(
    *,
    n_params: float,
    n_layers: int,
    d_model: int,
    d_ff: int,
    seq: int,
    batch: int,
    fsdp: int,
    recipe_name: str,
    remat: str = "full",
) -> MemoryEstimate:
    """Predicted per-GPU peak for a Llama decoder under FSDP.

    ``batch`` is the per-GPU micro-batch (sequences), ``seq`` the sequence length.
    ``recipe_name`` selects the storage format of the low-precision saved values
    (:data:`RECIPE_SAVED_FORMAT`; ``bf16`` stores everything in BF16).

    Saved activations:

    * ``remat="full"``: one layer input per layer in the compute dtype (BF16,
      ``2 · n_layers · batch · seq · d_model`` bytes) plus the working set of the one layer being
      recomputed in the backward pass (:func:`llama_layer_saved_values`).
    * ``remat="none"``: the working set of every layer (``n_layers ×``), no checkpoints.

    Not modelled: FSDP all-gather buffers of the current layer's weights, the logits / loss
    buffers (``batch·seq·vocab``), XLA temporaries and allocator fragmentation.
    """
    if n_layers <= 0 or seq <= 0 or batch <= 0:
        raise ValueError(f"need n_layers, seq, batch > 0; got {n_layers}, {seq}, {batch}")
    if recipe_name not in RECIPE_SAVED_FORMAT:
        raise ValueError(f"unknown recipe {recipe_name!r}; known: {sorted(RECIPE_SAVED_FORMAT)}")
    tokens = batch * seq
    a_h_layer, a_e_layer = llama_layer_saved_values(d_model, d_ff, tokens)
    if remat == "full":
        a_high = n_layers * tokens * d_model + a_h_layer
        a_low = a_e_layer
    elif remat == "none":
        a_high = n_layers * a_h_layer
        a_low = n_layers * a_e_layer
    else:
        raise ValueError(f"remat must be 'full' or 'none', got {remat!r}")
    return seed_memory(
        n_params, fsdp, a_high=a_high, a_low=a_low, low_format=RECIPE_SAVED_FORMAT[recipe_name]
    )
