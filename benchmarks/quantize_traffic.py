"""Quantize calls and their traffic in one compiled Llama training step (no device needed: compiles on the CPU).

    PYTHONPATH=src python3 benchmarks/quantize_traffic.py [--arm fp8_block:ffi] [--config llama3_8b_4layer]
                                                          [--batch 4] [--list]

Lowers and compiles the step of ``mxprec.bench llama`` for ARM on abstract inputs (``jax.eval_shape``: nothing is
allocated) and counts the ``mxprec_quantize`` custom calls in XLA's optimized HLO. The layers are one scanned body,
so a call inside a while loop's body runs once per layer; the others (the output head) run once. Traffic per call:
operand elements x (operand bytes + 1 byte of codes); scales are left out. ``--list`` prints every call (operand
shape, dtype, quantization axis of the kernel's 3-D view, FP8 format code). The ``ffi`` backend needs
libmxprec_cpu.so (``pip install .``, or CMake into build/).
"""

from __future__ import annotations

import argparse
import collections
import math
import re

_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


def quantize_calls(arm: str, config: str, batch: int) -> list[dict]:
    """One dict per mxprec_quantize call of the compiled step: shape, dtype, axis, fmt, in_loop, bytes."""
    import jax

    from mxprec.bench import llama as bl
    from mxprec.models.llama import get_config

    cfg = get_config(config)
    model, cfg, _ = bl.build_model(cfg, arm)
    tx = bl.make_optimizer()
    state = jax.eval_shape(lambda: bl.init_train_state(model, cfg, tx, batch=batch))
    data = jax.eval_shape(lambda: bl.synthetic_batch(cfg, batch))
    text = jax.jit(bl.make_train_step(model, tx)).lower(state, data).compile().as_text()
    loop_bodies = set(re.findall(r"body=(%[\w.\-]+)", text))
    defs, calls, computation = {}, [], None  # HLO lists an instruction's operands before it
    for line in text.splitlines():
        m = re.match(r"(?:ENTRY )?(%[\w.\-]+) .*\{$", line)
        if m:
            computation = m.group(1)
        m = re.match(r"\s*(?:ROOT )?(%\S+) = (\w+)\[([0-9,]*)\]", line)
        if m:
            defs[m.group(1)] = (m.group(2), tuple(int(d) for d in m.group(3).split(",") if d))
        if 'custom_call_target="mxprec_quantize"' not in line:
            continue
        operand = re.search(r"custom-call\(([^,)]*)", line).group(1).strip()
        dtype, shape = defs.get(operand, ("?", ()))
        elems = math.prod(shape) if shape else 0
        calls.append(dict(
            shape=shape, dtype=dtype, axis=int(re.search(r"axis = (\d+)", line).group(1)),
            fmt=int(re.search(r"fmt = (\d+)", line).group(1)), in_loop=computation in loop_bodies,
            bytes=elems * (_BYTES.get(dtype, 0) + 1)))
    return calls


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", default="fp8_block:ffi")
    p.add_argument("--config", default="llama3_8b_4layer")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    from mxprec.models.llama import get_config

    layers = get_config(args.config).n_layers
    calls = quantize_calls(args.arm, args.config, args.batch)
    if args.list:
        for (shape, dtype, axis, fmt, in_loop), n in collections.Counter(
            (c["shape"], c["dtype"], c["axis"], c["fmt"], c["in_loop"]) for c in calls
        ).most_common():
            print(f"{n} x {dtype}{list(shape)} axis {axis} fmt {fmt}{'' if in_loop else ' (outside the layers)'}")
    body = [c for c in calls if c["in_loop"]]
    head = [c for c in calls if not c["in_loop"]]
    per_layer = sum(c["bytes"] for c in body) / 1e9
    head_gb = sum(c["bytes"] for c in head) / 1e9
    print(f"{args.arm}, {args.config}, batch {args.batch}: {len(calls)} quantize calls in the compiled step "
          f"({len(body)} in the scanned layer body, {len(head)} outside it); {per_layer:.2f} GB per layer, "
          f"{head_gb:.2f} GB outside, {layers * per_layer + head_gb:.1f} GB per step")


if __name__ == "__main__":
    main()
