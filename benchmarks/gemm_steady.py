"""mxprec's FP8 GEMMs against torch._scaled_mm on the same FP8 bytes, interleaved, in long windows.

    PYTHONPATH=src python3 benchmarks/gemm_steady.py --out DIR [--shapes 8192x8192x8192,...]
        [--families tensor,tensor_e5m2xe4m3,tensor_e4m3xe5m2,row,block] [--rounds 4] [--window-ms 400]

Why a second GEMM benchmark: ``benchmarks/gemm.py`` (the issue's table) times each implementation once, 20 calls
after 3 warmups (15-40 ms on the large shapes), in a fixed order, and feeds torch its own operands (randn cast to
E4M3 without a scale) while mxprec gets x quantized to the full E4M3 range. The H200 runs FP8 GEMMs at its 700 W
power cap, where the SM clock follows the power drawn; a 20-call burst that starts after an idle gap (a compile)
runs at a higher clock than the same kernel a second later, and the operand bits change the power drawn. This
script removes those differences from the ratio:

* both sides multiply the same operands: x (M, K) and w (N, K) quantized once by ``mxprec.quantize`` for the
  family, handed to torch through DLPack (the codes as uint8, viewed as torch FP8; the scales in torch's layouts);
  the outputs are compared with each other (``rel_diff_vs_torch``: ``||ours - torch||_F / ||torch||_F``) and with
  the FP32 oracle of the same operands (``rel_err_vs_reference``, ``mxprec.kernels.scaled_gemm.reference_scaled_gemm``);
* per round, each implementation runs back to back for ``--window-ms`` (after 3 warmups), the order alternating
  between rounds; the row's time is the median of its rounds' means;
* ``nvidia-smi`` samples the SM clock and power every 50 ms; each row carries the median of its windows' samples
  (``power.draw`` is averaged by the driver over a longer span than a window, so its column is only indicative).

Families: ``tensor`` (E4M3 x E4M3 per-tensor), ``tensor_e5m2xe4m3``, ``tensor_e4m3xe5m2`` (the HYBRID pairs),
``row`` (row-wise), ``block`` (1x128 activations x 128x128 weights). ``--torch-own-operands`` adds, for
``tensor``, torch on its own operands as gemm.py builds them (impl ``torch, randn operands``); ``--variants``
times our other kernel choices as well (impl ``mxprec KERNEL:CLUSTER:TILE_N``, the family's
``MXPREC_SM90_*_{KERNEL,CLUSTER,TILE_N}`` set for their windows; plain ``mxprec`` is the default, "auto").
Writes ``DIR/h200_gemm_steady.{json,md}`` (``<device>_gemm_steady`` off an H200): an object with device,
command, date and rows ``{op, recipe, family, backend, impl, m, k, n, tflops, tflops_rounds, sm_mhz, power_w,
ratio_vs_torch, rel_diff_vs_torch, rel_err_vs_reference}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
import gemm as gemm_bench  # tflops, _b, timed_window, pitched_block_scales, shape lists
import gpu_clocks  # nvidia-smi log reader

import mxprec
from mxprec import formats
from mxprec.kernels.scaled_gemm import reference_scaled_gemm
from mxprec.scaling import RowScaling, TensorScaling, TileScaling

E4M3, E5M2 = formats.E4M3, formats.E5M2
# family -> (recipe it measures, torch form, lhs spec, rhs spec)
FAMILIES = {
    "tensor": ("fp8_current", "tensor", TensorScaling(E4M3), TensorScaling(E4M3)),
    "tensor_e5m2xe4m3": ("fp8_current", "tensor", TensorScaling(E5M2), TensorScaling(E4M3)),
    "tensor_e4m3xe5m2": ("fp8_current", "tensor", TensorScaling(E4M3), TensorScaling(E5M2)),
    "row": ("fp8_rowwise", "row", RowScaling(E4M3), RowScaling(E4M3)),
    "block": ("fp8_block", "block", TileScaling(E4M3, tile=(1, 128)), TileScaling(E4M3, tile=(128, 128))),
}
DEFAULT_SHAPES = ",".join("x".join(map(str, s)) for s in
                          gemm_bench.PAPER_SHAPES + gemm_bench.LLAMA_SHAPES + gemm_bench.SMALL_M)


def torch_operands(qx, qw, form, pad_block_scales: bool = True):
    """(a, b, scale_a, scale_b) for torch._scaled_mm from 2-D QTensors qx (M, K) and qw (N, K): the same bytes."""
    import torch

    def codes(q):
        u8 = torch.from_dlpack(jax.block_until_ready(jax.lax.bitcast_convert_type(q.data, jnp.uint8)))
        return u8.view(torch.float8_e5m2 if q.data.dtype == jnp.float8_e5m2 else torch.float8_e4m3fn)

    a, b = codes(qx), codes(qw).t()  # b: (K, N) column-major, as cuBLASLt's TN GEMM wants it
    sx, sw = torch.from_dlpack(qx.scale), torch.from_dlpack(qw.scale)
    if form == "tensor":
        return a, b, sx.reshape(()), sw.reshape(())
    if form == "row":
        return a, b, sx.reshape(-1, 1), sw.reshape(1, -1)
    # block: A's (M, K/128) scales M-contiguous, B's (N/128, K/128) viewed as (K/128, N/128) (torch >= 2.9's layout)
    return a, b, sx.t().contiguous().t(), gemm_bench.pitched_block_scales(sw, pad_block_scales)


class SmiLog:
    """nvidia-smi sampling the SM clock and power every 50 ms into a temporary CSV (nothing without nvidia-smi)."""

    def __init__(self):
        self.proc, self.path = None, None
        if shutil.which("nvidia-smi"):
            fd, self.path = tempfile.mkstemp(suffix=".csv")
            os.close(fd)
            self.proc = subprocess.Popen(
                ["nvidia-smi", ("--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                                "clocks_event_reasons.active"), "--format=csv,noheader", "-lms", "50", "-f", self.path])

    def summary(self, windows) -> dict:
        """Median SM clock and power of the busy samples inside the windows (empty without a log)."""
        if self.path is None:
            return {}
        samples = gpu_clocks.read_log(self.path)
        busy = [s for s in samples if any(w["start"] <= s[0] <= w["end"] for w in windows) and s[2] > 100.0]
        if not busy:
            return {}
        return dict(sm_mhz=statistics.median(s[1] for s in busy),
                    power_w=round(statistics.median(s[2] for s in busy), 1), smi_samples=len(busy))

    def close(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def measure_shape(m, k, n, families, rounds, window_s, smi, torch_own, variants=()):
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (m, k), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (n, k), jnp.float32) * 0.02).astype(jnp.bfloat16)
    rows = []
    for fam in families:
        try:
            rows += measure_family(m, k, n, x, w, fam, rounds, window_s, smi, torch_own, variants)
        except Exception as e:  # noqa: BLE001 - a family that fails is reported, the run goes on
            rows.append(dict(op="gemm", recipe=FAMILIES[fam][0], family=fam, m=m, k=k, n=n, error=str(e)[:300]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def kernel_env(fam: str, variant: str | None) -> dict:
    """MXPREC_SM90_<FAMILY>_{KERNEL,CLUSTER,TILE_N,SPLIT_TAIL} for "KERNEL[:CLUSTER[:TILE_N[:SPLIT_TAIL]]]" (None,
    or an empty field: unset, "auto")."""
    prefix = {"row": "MXPREC_SM90_ROWWISE", "block": "MXPREC_SM90_BLOCKWISE"}.get(fam, "MXPREC_SM90_TENSORWISE")
    names = ("KERNEL", "CLUSTER", "TILE_N", "SPLIT_TAIL")
    fields = (variant or "").split(":")
    return {f"{prefix}_{name}": (fields[i] if i < len(fields) and fields[i] else None)
            for i, name in enumerate(names)}


def apply_env(env: dict):
    for var, value in env.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def measure_family(m, k, n, x, w, fam, rounds, window_s, smi, torch_own, variants=()):
    import torch

    recipe, form, lhs, rhs = FAMILIES[fam]
    rows = []
    qx = jax.block_until_ready(jax.jit(lambda v: mxprec.quantize(v, lhs, axis=1))(x))
    qw = jax.block_until_ready(jax.jit(lambda v: mxprec.quantize(v, rhs, axis=1))(w))
    ours = jax.jit(lambda a, b: mxprec.scaled_gemm(a, b, lhs_contract=2, rhs_contract=2,
                                                   out_dtype=jnp.bfloat16, backend="ffi"))
    bx, bw = gemm_bench._b(qx), gemm_bench._b(qw)
    a, b, sa, sb = torch_operands(qx, qw, form)
    # name -> (call, sync); our variants' kernel choice is set before their windows (the FFI handler reads it per
    # call, on the host; a window ends synchronised, so no call of another variant is still pending then)
    impls = {
        "mxprec": (lambda: ours(bx, bw), jax.block_until_ready),
        "torch": (lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
                  lambda _: torch.cuda.synchronize()),
    }
    if torch_own and fam == "tensor":
        ra = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        rb = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        impls["torch, randn operands"] = (
            lambda: torch._scaled_mm(ra, rb, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
            lambda _: torch.cuda.synchronize())
    envs = {name: kernel_env(fam, None) for name in impls}
    for v in variants:
        impls[f"mxprec {v}"] = (lambda: ours(bx, bw), jax.block_until_ready)
        envs[f"mxprec {v}"] = kernel_env(fam, v)
    # Every output against the FP32 oracle of the same operands, and ours against torch's.
    # Every JAX result is complete before torch reads it through DLPack (torch reads on its own stream: without the
    # wait the thirty-ninth session's first check of a 3 ms GEMM read unfinished memory, inf / nan, while the same
    # kernels' outputs, synchronised, were finite and bit-identical to the other kernel's).
    exact = torch.from_dlpack(jax.block_until_ready(
        reference_scaled_gemm(bx, bw, lhs_contract=2, rhs_contract=2, out_dtype=jnp.float32)[0]))
    outs = {}
    for name, (fn, _) in impls.items():
        if not (name.startswith("mxprec") or name == "torch"):
            continue  # torch on its own operands: timed only, its product is of other inputs
        apply_env(envs[name])
        out = fn()
        if name.startswith("mxprec"):
            outs[name] = torch.from_dlpack(jax.block_until_ready(out[0])).float()
        else:
            outs[name] = out.float()
    torch.cuda.synchronize()

    def rel(u, v):
        return round(float(torch.linalg.norm(u - v) / torch.linalg.norm(v)), 6)

    diff_vs_torch = {name: rel(outs[name], outs["torch"]) for name in outs if name != "torch"}
    err = {name: rel(outs[name], exact) for name in outs}
    del outs, exact
    names = list(impls)
    windows = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            fn, sync = impls[name]
            apply_env(envs[name])
            windows[name].append(gemm_bench.timed_window(fn, sync, window_s))
    apply_env(kernel_env(fam, None))
    t_torch = statistics.median(wd["t"] for wd in windows["torch"])
    for name in names:
        t = statistics.median(wd["t"] for wd in windows[name])
        rows.append(dict(
            op="gemm", recipe=recipe, family=fam, backend="mxprec-ffi" if name.startswith("mxprec") else "torch",
            impl=name, m=m, k=k, n=n, tflops=round(gemm_bench.tflops(m, k, n, t), 1),
            tflops_rounds=[round(gemm_bench.tflops(m, k, n, wd["t"]), 1) for wd in windows[name]],
            calls_per_round=[wd["calls"] for wd in windows[name]],
            ratio_vs_torch=round(t_torch / t, 3),
            rel_diff_vs_torch=diff_vs_torch.get(name),
            rel_err_vs_reference=err.get(name),
            **smi.summary(windows[name])))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _blank(v) -> str:
    return "" if v is None else str(v)


def markdown(result) -> str:
    lines = [f"# FP8 GEMMs on the same operands, interleaved: {result['device']}", "",
             f"Command: `{result['command']}` ({result['date']}, jax {result['jax']}, torch {result['torch']}).", "",
             ("| M×K×N | family | impl | TFLOP/s (median of rounds) | rounds | ratio vs torch | SM MHz | W | "
              "rel. diff vs torch | rel. error vs FP32 reference |"), "|---|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['m']}×{r['k']}×{r['n']} | {r['family']} | error: {r['error'][:120]} | | | | | | | |")
            continue
        lines.append(f"| {r['m']}×{r['k']}×{r['n']} | {r['family']} | {r['impl']} | {r['tflops']} | "
                     f"{' / '.join(map(str, r['tflops_rounds']))} | {r['ratio_vs_torch']} | {r.get('sm_mhz', '')} | "
                     f"{r.get('power_w', '')} | {_blank(r['rel_diff_vs_torch'])} | "
                     f"{_blank(r.get('rel_err_vs_reference'))} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--shapes", default=DEFAULT_SHAPES)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--window-ms", type=float, default=400.0)
    p.add_argument("--torch-own-operands", action="store_true")
    p.add_argument("--variants", default="", help="our kernel choices timed as well, KERNEL[:CLUSTER[:TILE_N[:SPLIT_TAIL]]] "
                   "comma-separated, e.g. persistent:2x1:192,cutlass,persistent:::off (the family's MXPREC_SM90_* "
                   "variables; empty fields: the default)")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("gemm_steady.py needs torch with CUDA (torch._scaled_mm is the reference)")
    if jax.default_backend() != "gpu" or not torch.cuda.is_available():
        sys.exit("gemm_steady.py needs a GPU visible to both jax and torch")
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        sys.exit(f"unknown families {sorted(unknown)}; known: {sorted(FAMILIES)}")
    device = jax.devices()[0].device_kind
    tag = "h200" if "H200" in device else device.lower().replace(" ", "_")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{tag}_gemm_steady.json")
    result = dict(device=device, command="python " + " ".join([sys.argv[0]] + (argv or sys.argv[1:])),
                  date=datetime.date.today().isoformat(), jax=jax.__version__, torch=torch.__version__,
                  rounds=args.rounds, window_ms=args.window_ms, rows=[])
    smi = SmiLog()
    try:
        for spec in args.shapes.split(","):
            m, k, n = (int(v) for v in spec.split("x"))
            result["rows"] += measure_shape(m, k, n, families, args.rounds, args.window_ms / 1e3, smi,
                                            args.torch_own_operands, [v for v in args.variants.split(",") if v])
            with open(path, "w") as f:  # a run cut short keeps every finished shape
                json.dump(result, f, indent=1)
            with open(path.replace(".json", ".md"), "w") as f:
                f.write(markdown(result))
    finally:
        smi.close()


if __name__ == "__main__":
    main()
