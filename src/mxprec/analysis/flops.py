"""Training FLOPs per step of a dense Llama decoder (MaxText's formula).

Follows ``calculate_tflops_training_per_device`` in MaxText
(AI-Hypercomputer/maxtext, ``maxtext_utils.py``; default decoder path, dense SwiGLU FFN with
``mlp_activations = ["silu", "linear"]``), but for the whole batch ``B`` and in FLOPs, not TFLOPs.
With ``D`` = d_model, ``F`` = d_ff, ``L`` layers, ``H`` query heads, ``KV`` kv heads, ``hd`` head dim,
``V`` vocab, ``S`` sequence length, forward FLOPs per layer are::

    ffn        = 2·B·S·F·D·2 + 2·B·S·F·D          = 6·B·S·D·F     (gate+up, down)
    qkv        = 2·B·S·D·(H + 2·KV)·hd
    projection = 2·B·S·D·H·hd
    attention  = 4·B·S²·H·hd  (QKᵀ and PV), halved when causal
    embedding  = 2·B·S·D·V    (logits head, counted once)

and training counts forward + backward as 3× forward::

    matmul    = 3 · ((ffn + qkv + projection)·L + embedding)
              = 6·B·S·(L·(3·D·F + D·(H + 2·KV)·hd + D·H·hd) + D·V)
    attention = 3 · L · attention = 12·B·S²·H·hd·L (/2 if causal)
    total     = matmul + attention

Activation recomputation (remat) is *not* counted (model FLOPs, as in MFU).
"""

from __future__ import annotations

__all__ = ["llama_train_flops", "mfu"]


def llama_train_flops(
    *,
    d_model: int,
    d_ff: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    vocab: int,
    seq: int,
    batch: int,
    causal: bool = True,
) -> dict[str, int]:
    """FLOPs of one training step over the whole batch: ``{"total", "matmul", "attention"}`` (ints)."""
    dims = dict(
        d_model=d_model, d_ff=d_ff, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
        head_dim=head_dim, vocab=vocab, seq=seq, batch=batch,
    )
    bad = {k: v for k, v in dims.items() if int(v) != v or v <= 0}
    if bad:
        raise ValueError(f"all dimensions must be positive integers; got {bad}")
    B, S, D, F, L = batch, seq, d_model, d_ff, n_layers
    H, KV, hd, V = n_heads, n_kv_heads, head_dim, vocab
    if H % KV:
        raise ValueError(f"n_heads={H} must be a multiple of n_kv_heads={KV}")
    ffn = 2 * B * S * F * D * 2 + 2 * B * S * F * D
    qkv = 2 * B * S * D * (H + 2 * KV) * hd
    projection = 2 * B * S * D * H * hd
    embedding = 2 * B * S * D * V
    attention_fwd = 4 * B * S * S * H * hd
    if causal:
        attention_fwd //= 2  # 4·B·S²·H·hd is even
    matmul = 3 * ((ffn + qkv + projection) * L + embedding)
    attention = 3 * attention_fwd * L
    return {"total": matmul + attention, "matmul": matmul, "attention": attention}


def mfu(flops_per_step: float, step_seconds: float, n_devices: int, peak_flops_per_device: float) -> float:
    """Model FLOPs utilization: ``flops_per_step / (step_seconds · n_devices · peak)``."""
    if not (step_seconds > 0 and n_devices > 0 and peak_flops_per_device > 0):  # (NaN fails too)
        raise ValueError(
            f"need positive step_seconds, n_devices, peak; got {step_seconds}, {n_devices}, {peak_flops_per_device}"
        )
    return flops_per_step / (step_seconds * n_devices * peak_flops_per_device)
