"""The ``mxprec_scaled_gemm`` and ``mxprec_quantize`` XLA FFI custom calls.

This module loads mxprec's native libraries lazily (ctypes; one build serves every Python
version), registers the handlers with ``jax.ffi.register_ffi_target``, and wraps each custom call
for JAX: ``jax.ffi.ffi_call`` inside a ``custom_partitioning`` rule (GSPMD callbacks and a Shardy
sharding rule) inside a ``custom_vmap`` batching rule. The C++ contract (buffer order, shapes,
dtypes, attributes) is written once in ``csrc/common/scaled_gemm.h`` / ``quantize.h`` and
summarised in docs/ffi.md; both wrappers repeat it in their docstrings.

Libraries (platform "cpu": ``libmxprec_cpu.so``) are looked up, in order, in the installed package
(``mxprec/_lib/``), and, for a source checkout, ``<repo>/build/`` (``cmake -S . -B build &&
cmake --build build``). :func:`library_search_paths` lists them; :func:`require` raises a
RuntimeError naming the missing file and the build command. On platform "cuda" the handlers come
from ``libmxprec_cuda.so``, loaded by :mod:`mxprec.kernels.cuda` (``mxprec_quantize`` serves every
kind there; ``mxprec_scaled_gemm`` the per-tensor / row / tile FP8 pairs that module lists).

Sharding (under ``jit`` with ``NamedSharding``): batch B, M and N shardings pass through; a
sharded contraction dimension K runs the local GEMM in FP32 and ends with ``psum`` (then bias and
the output cast); MX / tile / NVFP4 scales shard with their data along K; a quantizer whose input
is sharded pmax-reduces the tensor amax (tensor, delayed, NVFP4) or the row amax (row scaling
along a sharded axis) across the shards. A sharding that would split a scaling block or tile, or
that names one mesh axis twice, is dropped for that dimension (the operand is gathered there).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import pathlib
import re
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P

from mxprec.quantize import (
    QTensor,
    _amax_from_bits,
    _validate as _validate_quantize_args,
    qtensor_layout,
    tensor_amax,
)
from mxprec.scaling import (
    DelayedScaling,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    TensorScaling,
    TileScaling,
    delayed_scale_of,
)

__all__ = [
    "FMT",
    "KIND",
    "QUANTIZE_TARGET",
    "SCALED_GEMM_TARGET",
    "available",
    "library_search_paths",
    "quantize",
    "require",
    "scaled_gemm",
]

SCALED_GEMM_TARGET = "mxprec_scaled_gemm"
QUANTIZE_TARGET = "mxprec_quantize"

# Attribute enums (csrc/common/formats.h ElemFormat, csrc/common/scaled_gemm.h ScalingKind).
FMT = {"e4m3": 0, "e5m2": 1, "e2m3": 2, "e3m2": 3, "e2m1": 4}
KIND = {"none": 0, "tensor": 1, "delayed": 1, "row": 2, "tile": 3, "mx": 4, "nvfp4": 5}
_BITS = {0: 8, 1: 8, 2: 6, 3: 6, 4: 4}
_WIDE = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))

# platform -> (library file, {target name: exported handler symbol}, build hint)
_LIBRARIES = {
    "cpu": (
        "libmxprec_cpu.so",
        {SCALED_GEMM_TARGET: "MxprecScaledGemmCpu", QUANTIZE_TARGET: "MxprecQuantizeCpu"},
        (
            "`pip install .` (scikit-build-core builds it into mxprec/_lib/) or, in a source checkout, "
            "`cmake -S . -B build && cmake --build build` (CMake option MXPREC_BUILD_CPU=ON)"
        ),
    ),
}
_PLATFORM_ALIASES = {"cpu": "cpu", "host": "cpu", "gpu": "cuda", "cuda": "cuda", "rocm": "rocm"}


# ----------------------------------------------------------------------------- loading


def _normalize_platform(platform: str | None) -> str:
    p = (platform or jax.default_backend()).lower()
    return _PLATFORM_ALIASES.get(p, p)


def library_search_paths(platform: str | None = None) -> list[pathlib.Path]:
    """Where the native library for ``platform`` is looked for, in order (may not exist)."""
    platform = _normalize_platform(platform)
    if platform == "cuda":
        return _cuda().library_search_paths()
    if platform not in _LIBRARIES:
        return []
    name = _LIBRARIES[platform][0]
    pkg = pathlib.Path(__file__).resolve().parent.parent  # .../mxprec
    paths = [pkg / "_lib" / name]
    root = pkg.parent.parent
    if (root / "pyproject.toml").is_file() and (root / "src" / "mxprec") == pkg:
        paths.append(root / "build" / name)
    return paths


_lock = threading.Lock()
_loaded: dict[str, tuple[ctypes.CDLL | None, str]] = {}


def _load(platform: str) -> tuple[ctypes.CDLL | None, str]:
    """(library, "") once loaded and registered, else (None, reason). Cached per platform."""
    with _lock:
        if platform in _loaded:
            return _loaded[platform]
        result: tuple[ctypes.CDLL | None, str]
        if platform not in _LIBRARIES:
            result = (None, f"mxprec has no native kernels for platform {platform!r} in this build")
        else:
            name, symbols, hint = _LIBRARIES[platform]
            paths = library_search_paths(platform)
            found = next((p for p in paths if p.is_file()), None)
            if found is None:
                searched = ", ".join(str(p) for p in paths)
                reason = (
                    f"mxprec native library {name} for platform {platform!r} not found (looked in {searched}); "
                    f"build it with {hint}"
                )
                result = (None, reason)
            else:
                try:
                    lib = ctypes.CDLL(str(found))
                    for target, symbol in symbols.items():
                        jax.ffi.register_ffi_target(
                            target, jax.ffi.pycapsule(getattr(lib, symbol)), platform=platform
                        )
                    result = (lib, "")
                except (OSError, AttributeError, RuntimeError, ValueError) as e:  # as native.py: a failed
                    # registration reads as a library that could not load, not as an exception at first use
                    result = (
                        None,
                        f"mxprec native library {found} failed to load: {e}; rebuild it with {hint}",
                    )
        _loaded[platform] = result
        return result


def _cuda():
    """mxprec.kernels.cuda, which loads libmxprec_cuda.so for platform "CUDA" (imported lazily: it
    imports this module)."""
    from mxprec.kernels import cuda

    return cuda


def available(platform: str | None = None) -> bool:
    """Whether the mxprec custom calls are registered for ``platform`` (default: JAX's backend)."""
    platform = _normalize_platform(platform)
    if platform == "cuda":
        return _cuda().available()
    return _load(platform)[0] is not None


def require(platform: str | None = None) -> None:
    """Loads the native library for ``platform`` (default: JAX's backend) or raises RuntimeError
    naming what to build. On "cuda" that is libmxprec_cuda.so (mxprec.kernels.cuda)."""
    platform = _normalize_platform(platform)
    if platform == "cuda":
        lib, reason = _cuda()._load()
    else:
        lib, reason = _load(platform)
    if lib is None:
        raise RuntimeError(f"backend='ffi' is unavailable on platform {platform!r}: {reason}")


# ----------------------------------------------------------------------------- sharding helpers


def _spec_axes(sharding, ndim: int) -> list[tuple]:
    """Per-dimension tuples of mesh axis names of a NamedSharding (() = replicated)."""
    spec = tuple(getattr(sharding, "spec", ()) or ())
    spec = spec + (None,) * (ndim - len(spec))
    out = []
    for s in spec[:ndim]:
        if s is None:
            out.append(())
        elif isinstance(s, str):
            out.append((s,))
        else:
            out.append(tuple(s))
    return out


def _pspec(dims: list[tuple]) -> P:
    return P(*[None if not a else (a[0] if len(a) == 1 else tuple(a)) for a in dims])


def _axes_size(mesh, axes: tuple) -> int:
    return math.prod(mesh.shape[a] for a in axes)


def _pmax_nan(v: jax.Array, axes: tuple) -> jax.Array:
    """pmax of amaxes (>= 0 or NaN) that propagates NaN (an all-reduce max need not): one integer
    pmax over the FP32 bits, where NaN patterns sort above +Inf, as in :func:`tensor_amax`."""
    if not axes:
        return v
    return _amax_from_bits(lax.pmax(lax.bitcast_convert_type(v, jnp.uint32), axes))


# max |x| as the kernels compute it: NaN (canonical) if the group holds a NaN, a subnormal maximum
# flushed to +0 (mxprec.quantize.tensor_amax, one integer max over the FP32 bits).
_amax = tensor_amax


# ----------------------------------------------------------------------------- scaled_gemm


@dataclasses.dataclass(frozen=True)
class _Operand:
    """Static attributes of one GEMM operand."""

    kind: int
    fmt: int
    block: int
    tile_rows: int
    contract: int

    @property
    def bits(self) -> int:
        return 8 if self.kind == 0 else _BITS[self.fmt]

    @property
    def group(self) -> int:
        """Elements along K that must stay together on one shard (block / tile / packing unit)."""
        unit = {8: 1, 6: 4, 4: 2}[self.bits]
        blk = self.block if self.kind in (3, 4, 5) else 1
        return math.lcm(unit, blk)


@dataclasses.dataclass(frozen=True)
class _GemmCfg:
    """A GEMM call's static attributes. ``k_unit`` / ``n_unit``: the multiples of K / N a shard's local GEMM must
    keep (a backend's alignment, e.g. the CUDA kernels' K % 16, N % 8); not attributes of the call, only of its
    sharding rule."""

    lhs: _Operand
    rhs: _Operand
    out_dtype: str
    has_bias: bool
    k_unit: int = 1
    n_unit: int = 1

    @property
    def k_group(self) -> int:
        """Elements along K that must stay on one shard: the operands' groups and the backend's unit."""
        return math.lcm(self.lhs.group, self.rhs.group, self.k_unit)

    def free_unit(self, o: _Operand, n_side: bool) -> int:
        """Rows of operand ``o``'s free axis (M or N) that must stay on one shard."""
        tr = o.tile_rows if o.kind == 3 else 1
        return math.lcm(tr, self.n_unit) if n_side else tr

    def attrs(self) -> dict:
        a = {}
        for name, o in (("lhs", self.lhs), ("rhs", self.rhs)):
            a.update(
                {
                    f"{name}_kind": o.kind,
                    f"{name}_fmt": o.fmt,
                    f"{name}_block": o.block,
                    f"{name}_tile_rows": o.tile_rows,
                    f"{name}_contract": o.contract,
                }
            )
        a["has_bias"] = int(self.has_bias)
        return {k: np.int32(v) for k, v in a.items()}


def _operand_desc(spec, contract: int) -> _Operand:
    """The contract attributes (kind, fmt, block, tile_rows, contract) of an operand quantized per ``spec``.

    Shared by every backend's wrapper (CPU here, mxprec.kernels.cuda, mxprec.kernels.hip).
    """
    block = spec.block if isinstance(spec, (MXScaling, NVFP4Scaling)) else 1
    tr = 1
    if isinstance(spec, TileScaling):
        tr, block = spec.tile
    return _Operand(KIND[spec.kind], FMT[spec.fmt.name], int(block), int(tr), contract)


def _bias_buffer(bias, n: int) -> jax.Array:
    """The bias operand: float32 ``(N,)``, or a float32 scalar placeholder when there is none."""
    if bias is None:
        return jnp.zeros((), jnp.float32)
    b = jnp.asarray(bias)
    if b.shape != (n,) or b.dtype != jnp.float32:
        raise ValueError(f"scaled_gemm: bias must be float32 ({n},), got {b.dtype} {b.shape}")
    return b


def _operand_buffers(op, contract: int, name: str):
    """(data, scale, tensor_scale, _Operand) of a QTensor or plain array operand."""
    one = jnp.ones((), jnp.float32)
    if isinstance(op, QTensor):
        spec = op.spec
        if op.axis != contract:
            raise ValueError(
                f"scaled_gemm: {name} is quantized along axis {op.axis} but contracts axis {contract}"
            )
        desc = _operand_desc(spec, contract)
        ts = op.tensor_scale if isinstance(spec, NVFP4Scaling) else one
        return op.data, jnp.asarray(op.scale), jnp.asarray(ts, jnp.float32).reshape(()), desc
    if not hasattr(op, "dtype") or jnp.dtype(op.dtype) not in _WIDE:
        raise TypeError(
            f"scaled_gemm: plain {name} must be float32/bfloat16/float16, got "
            f"{getattr(op, 'dtype', type(op).__name__)} {getattr(op, 'shape', '')}"
        )
    return op, one, one, _Operand(0, 0, 1, 1, contract)


def _gemm_out_shape(cfg: _GemmCfg, ld, rd) -> tuple:
    return (ld.shape[0], ld.shape[3 - cfg.lhs.contract], rd.shape[3 - cfg.rhs.contract])


def _gemm_ffi(cfg: _GemmCfg, ld, ls, lt, rd, rs, rt, bias):
    out = jax.ShapeDtypeStruct(_gemm_out_shape(cfg, ld, rd), jnp.dtype(cfg.out_dtype))
    call = jax.ffi.ffi_call(SCALED_GEMM_TARGET, out, vmap_method="sequential")
    return call(ld, ls, lt, rd, rs, rt, bias, **cfg.attrs())


def _gemm_impl(cfg: _GemmCfg, ld, ls, lt, rd, rs, rt, bias):
    return _gemm_ffi(cfg, ld, ls, lt, rd, rs, rt, bias)


class _GemmPlan:
    """Per-dimension mesh axes of one partitioned GEMM call."""

    def __init__(self, cfg: _GemmCfg, mesh, arg_shapes):
        lc, rc = cfg.lhs.contract, cfg.rhs.contract
        ld, rd = arg_shapes[0], arg_shapes[3]
        la = _spec_axes(ld.sharding, 3)
        ra = _spec_axes(rd.sharding, 3)
        B, M, N = _gemm_out_shape(cfg, ld, rd)
        K = ld.shape[lc] * 8 // cfg.lhs.bits
        used: set = set()

        def take(axes, extent, unit):
            if not axes or any(a in used for a in axes) or extent % (_axes_size(mesh, axes) * unit):
                return ()
            used.update(axes)
            return tuple(axes)

        self.b = take(la[0] or ra[0], B, 1)
        self.m = take(la[3 - lc], M, cfg.free_unit(cfg.lhs, False))
        self.k = take(la[lc] or ra[rc], K, cfg.k_group)
        self.n = take(ra[3 - rc], N, cfg.free_unit(cfg.rhs, True))
        self.cfg = cfg
        self.mesh = mesh

    def _operand_shardings(self, o: _Operand, free: tuple):
        dims = [self.b, (), ()]
        dims[o.contract], dims[3 - o.contract] = self.k, free
        data = NamedSharding(self.mesh, _pspec(dims))
        if o.kind in (0, 1):
            scale = NamedSharding(self.mesh, P())
        elif o.kind == 2:
            sd = list(dims)
            sd[o.contract] = ()
            scale = NamedSharding(self.mesh, _pspec(sd))
        else:
            scale = data
        return [data, scale, NamedSharding(self.mesh, P())]

    def arg_shardings(self):
        bias = NamedSharding(self.mesh, _pspec([self.n]) if self.cfg.has_bias else P())
        return tuple(
            self._operand_shardings(self.cfg.lhs, self.m)
            + self._operand_shardings(self.cfg.rhs, self.n)
            + [bias]
        )

    def result_sharding(self):
        return NamedSharding(self.mesh, _pspec([self.b, self.m, self.n]))


def _gemm_partition(cfg: _GemmCfg, mesh, arg_shapes, result_shape):
    plan = _GemmPlan(cfg, mesh, arg_shapes)
    k_axes = plan.k

    def lower_fn(ld, ls, lt, rd, rs, rt, bias):
        if not k_axes:
            return _gemm_ffi(cfg, ld, ls, lt, rd, rs, rt, bias)
        local = dataclasses.replace(cfg, out_dtype="float32", has_bias=False)
        acc = lax.psum(_gemm_ffi(local, ld, ls, lt, rd, rs, rt, bias), k_axes)
        if cfg.has_bias:
            acc = acc + lax.broadcast_in_dim(bias, acc.shape, (2,))
        return acc.astype(jnp.dtype(cfg.out_dtype))

    return mesh, lower_fn, plan.result_sharding(), plan.arg_shardings()


def _gemm_infer(cfg: _GemmCfg, mesh, arg_shapes, result_shape):
    return _GemmPlan(cfg, mesh, arg_shapes).result_sharding()


def _dims_of(t) -> tuple:
    """Static shape of an MLIR tensor type (what custom_partitioning hands a sharding-rule callable)."""
    from jax.interpreters import mlir

    return tuple(mlir.ir.RankedTensorType(t).shape)


def _gemm_rule(cfg: _GemmCfg, mesh, value_types, result_types):
    """Shardy rule: factors b, m, n, k (K in units of G elements) plus per-operand sub-factors."""
    shapes = [_dims_of(t) for t in value_types]
    ld, rd = shapes[0], shapes[3]
    K = ld[cfg.lhs.contract] * 8 // cfg.lhs.bits
    G = cfg.k_group
    kk = K // G if K % G == 0 else 0
    sizes: dict = {}
    whole: set = set()  # factors some dimension holds alone (their sizes are inferred)
    compound: dict = {}  # factor -> size where it sits in "(main sub)" (given to Shardy unless also whole)

    def dim(main, sub, extent, unit_extent):
        """Dimension `extent` = size(main) * unit_extent: "main" or "(main sub)"."""
        if unit_extent == 1:
            whole.add(main)
            return main
        sizes[sub] = unit_extent
        compound[main] = extent // unit_extent
        return f"({main} {sub})"

    def operand(o: _Operand, data_shape, side: str, free: str):
        tr = o.tile_rows if o.kind == 3 else 1
        free_extent = data_shape[3 - o.contract]
        unit = cfg.free_unit(o, side == "r")
        unit = unit if free_extent % unit == 0 else tr  # a backend's unit that N misses: N stays whole (gathered)
        fdim = dim(free, f"{side}t", free_extent, unit)
        if kk:
            kdim = dim("k", f"{side}d", data_shape[o.contract], data_shape[o.contract] // kk)
        else:
            kdim = f"{side}kd"
            whole.add(kdim)
        d = ["b", "", ""]
        d[o.contract], d[3 - o.contract] = kdim, fdim
        data = " ".join(d)
        if o.kind in (0, 1):
            scale = ""
        elif o.kind == 2:
            s = ["b", "", ""]
            s[o.contract], s[3 - o.contract] = f"{side}o", fdim  # one scale per row
            scale = " ".join(s)
        else:
            nb = K // o.block
            if kk:
                ks = dim("k", f"{side}s", nb, nb // kk)
            else:
                ks = f"{side}ks"
            s = ["b", "", ""]
            # One scale per tile row (extent rows / tr); a backend unit above tr groups unit / tr of them.
            s[o.contract] = ks
            s[3 - o.contract] = dim(free, f"{side}u", free_extent // tr, unit // tr)
            scale = " ".join(s)
        return [data, scale, ""], fdim

    lhs, mdim = operand(cfg.lhs, ld, "l", "m")
    rhs, ndim = operand(cfg.rhs, rd, "r", "n")
    bias = ndim if cfg.has_bias else ""
    rule = ", ".join(lhs + rhs + [bias]) + f" -> b {mdim} {ndim}"
    sizes.update({f: size for f, size in compound.items() if f not in whole})
    return rule, dict(sizes, reduction_factors=("k",) if kk else ())


_RULE_FACTOR_LISTS = ("reduction_factors", "need_replication_factors", "permutation_factors")


def _merge_unit_factors(rule: str, sizes: dict, shapes: list[tuple]) -> tuple[str, dict]:
    """``rule`` with each compound dimension ``(main sub ...)`` that holds a factor of size 1 (128 rows = one 128-row
    tile) written as one whole factor (``main_sub``), and ``sizes`` cut to the factors still compound: MLIR's
    verifier rejects a size-1 factor inside a compound dimension. ``shapes``: every operand's, then every
    result's."""
    lhs, rhs = rule.split("->")
    n_in = len(lhs.split(","))
    tensors = [t.strip() for t in lhs.split(",")] + [t.strip() for t in rhs.split(",")]
    specs = [re.findall(r"\([^)]*\)|[^\s()]+", t) for t in tensors]
    if len(specs) != len(shapes):  # pragma: no cover - a rule out of step with its call
        raise ValueError(f"sharding rule {rule!r}: {len(specs)} tensors, {len(shapes)} shapes")
    merge = set()
    for spec, shape in zip(specs, shapes):
        for dim, extent in zip(spec, shape):
            if dim.startswith("("):
                main, *subs = dim[1:-1].split()
                sub_sizes = [sizes[f] for f in subs]
                if 1 in sub_sizes or sizes.get(main, extent // math.prod(sub_sizes)) == 1:
                    merge.add(main)
    if not merge:
        return rule, sizes

    def rewrite(dim: str) -> str:
        factors = dim[1:-1].split() if dim.startswith("(") else None
        return "_".join(factors) if factors and factors[0] in merge else dim

    specs = [[rewrite(d) for d in spec] for spec in specs]
    compound = {f for spec in specs for d in spec if d.startswith("(") for f in d[1:-1].split()}
    present = {f for spec in specs for d in spec for f in d.strip("()").split()}
    new_sizes = {k: v for k, v in sizes.items() if k in compound}
    for key in _RULE_FACTOR_LISTS:
        if key in sizes:
            new_sizes[key] = tuple(f for f in sizes[key] if f in present)
    text = [" ".join(spec) for spec in specs]
    return f"{', '.join(text[:n_in])} -> {', '.join(text[n_in:])}", new_sizes


def _shardy_rule(rule):
    """``rule(cfg, mesh, value_types, result_types) -> (text, sizes)`` through :func:`_merge_unit_factors`."""

    @functools.wraps(rule)
    def wrapped(cfg, mesh, value_types, result_types):
        text, sizes = rule(cfg, mesh, value_types, result_types)
        return _merge_unit_factors(text, dict(sizes), [_dims_of(t) for t in (*value_types, *result_types)])

    return wrapped


def _on_mesh_axes(mesh, shape: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """``shape`` with its sharding (an XLA sharding: custom_partitioning's ``decode_shardings=False``) as a
    NamedSharding over ``mesh``'s axes, or replicated where those axes cannot express it.

    Shardy shards a compound tile dimension ``(tiles within)`` with sub-axes where a mesh axis holds more devices
    than there are tiles (256 rows = 2 tiles over 4 devices). JAX's own decoding raises on those (INTERNAL
    ``KeyError``); read as replicated, the partition callbacks ask for that operand whole, XLA gathers it, and the
    results are resharded to what the program wants: right, at the cost of a gather in that case only.
    """
    sharding = getattr(shape, "sharding", None)
    if sharding is None or isinstance(sharding, NamedSharding):
        return shape
    try:
        from jax._src.sharding_impls import parse_flatten_op_sharding  # what decode_shardings=True runs

        hlo = sharding._to_xla_hlo_sharding(len(shape.shape))
    except (ImportError, AttributeError) as e:  # pragma: no cover - a jax without them (0.10 and 0.11 have both)
        raise RuntimeError(f"mxprec sharding: jax {jax.__version__} lacks the sharding decoder mxprec's custom "
                           f"calls read their shardings with ({e}); please report it") from e
    try:
        spec = parse_flatten_op_sharding(hlo, mesh)[0]
    except Exception:  # noqa: BLE001 - any sharding off the mesh's axes: the operand whole (see above)
        spec = P()
    return jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=NamedSharding(mesh, spec))


def _decoding(callback):
    """A partition / infer callback ``(cfg, mesh, arg_shapes, result_shape)`` that reads its shardings through
    :func:`_on_mesh_axes`."""

    def is_shape(x):
        return isinstance(x, jax.ShapeDtypeStruct)

    @functools.wraps(callback)
    def wrapped(cfg, mesh, arg_shapes, result_shape):
        arg_shapes, result_shape = jax.tree.map(lambda t: _on_mesh_axes(mesh, t) if is_shape(t) else t,
                                                (arg_shapes, result_shape), is_leaf=is_shape)
        return callback(cfg, mesh, arg_shapes, result_shape)

    return wrapped


def _partitioned(impl, partition, infer, rule):
    """``custom_partitioning`` of ``impl(cfg, *arrays)`` (cfg static) with its GSPMD callbacks and Shardy rule: every
    cfg-taking custom call of the package (GEMM, quantize here; mxprec.kernels.cuda's transposed quantize and SwiGLU
    calls). The callbacks see NamedShardings, replicated where Shardy's sub-axes leave the mesh's axes
    (:func:`_on_mesh_axes`); the rule's size-1 tile factors are merged (:func:`_merge_unit_factors`)."""
    cp = custom_partitioning(impl, static_argnums=(0,))
    cp.def_partition(partition=_decoding(partition), infer_sharding_from_operands=_decoding(infer),
                     decode_shardings=False, sharding_rule=_shardy_rule(rule))
    return cp


_gemm_cp = _partitioned(_gemm_impl, _gemm_partition, _gemm_infer, _gemm_rule)


@functools.cache
def _gemm_vmappable(cfg: _GemmCfg):
    """The custom call with a batching rule: a vmapped axis folds into B (one call)."""

    @jax.custom_batching.custom_vmap
    def f(ld, ls, lt, rd, rs, rt, bias):
        return _gemm_cp(cfg, ld, ls, lt, rd, rs, rt, bias)

    @f.def_vmap
    def rule(axis_size, in_batched, ld, ls, lt, rd, rs, rt, bias):
        args = [ld, ls, lt, rd, rs, rt, bias]
        scalar_batched = any(b and a.ndim == 1 for a, b in zip(args, in_batched))
        if scalar_batched or in_batched[6]:
            # A per-example tensor scale or bias cannot fold into B: one call per example.
            args = [a if b else jnp.broadcast_to(a, (axis_size,) + a.shape) for a, b in zip(args, in_batched)]
            return lax.map(lambda t: f(*t), tuple(args)), True
        folded = []
        for i, (a, b) in enumerate(zip(args, in_batched)):
            if i in (0, 1, 3, 4) and a.ndim == (4 if b else 3):
                a = a if b else jnp.broadcast_to(a, (axis_size,) + a.shape)
                a = a.reshape((axis_size * a.shape[1],) + a.shape[2:])
            folded.append(a)
        out = f(*folded)
        return out.reshape((axis_size, out.shape[0] // axis_size) + out.shape[1:]), True

    return f


def scaled_gemm(lhs, rhs, *, lhs_contract: int, rhs_contract: int, out_dtype, bias=None) -> jax.Array:
    """``mxprec_scaled_gemm``: batched GEMM of (quantized) operands with FP32 accumulation.

    Args:
      lhs: QTensor quantized along ``lhs_contract`` or a plain f32/bf16/f16 array;
        ``(B, M, K)`` (``lhs_contract=2``) or ``(B, K, M)`` (``lhs_contract=1``).
      rhs: likewise ``(B, K, N)`` (``rhs_contract=1``) or ``(B, N, K)`` (``rhs_contract=2``).
      out_dtype: float32, bfloat16 or float16.
      bias: optional float32 ``(N,)``, added to the FP32 accumulator before the output cast.

    Returns:
      ``(B, M, N)`` of ``out_dtype``; equals :func:`mxprec.kernels.reference_scaled_gemm` up to
      FP32 summation order (the CPU kernel sums k = 0..K-1 in order per output element).

    Custom-call buffers, in order (csrc/common/scaled_gemm.h): lhs data, lhs scale, lhs
    tensor_scale, rhs data, rhs scale, rhs tensor_scale, bias; data/scale layouts exactly
    QTensor's (FP4/FP6 packed along K). Scales: tensor/delayed f32 ``()``; row f32 with K -> 1;
    tile f32 ``(B, rows/tr, K/tc)`` (K axis in place); MX E8M0 / NVFP4 E4M3 with K -> K/block.
    A plain operand passes a f32 ``()`` placeholder scale; tensor_scale is 1 unless NVFP4.
    Attributes (int32): ``{lhs,rhs}_{kind,fmt,block,tile_rows,contract}``, ``has_bias``.
    """
    require()
    for name, c in (("lhs_contract", lhs_contract), ("rhs_contract", rhs_contract)):
        if c not in (1, 2):
            raise ValueError(f"scaled_gemm: {name} must be 1 or 2, got {c}")
    if len(lhs.shape) != 3 or len(rhs.shape) != 3:
        raise ValueError(f"scaled_gemm: lhs and rhs must be 3-D, got shapes {lhs.shape} and {rhs.shape}")
    ld, ls, lt, lo = _operand_buffers(lhs, lhs_contract, "lhs")
    rd, rs, rt, ro = _operand_buffers(rhs, rhs_contract, "rhs")
    if lhs.shape[0] != rhs.shape[0] or lhs.shape[lhs_contract] != rhs.shape[rhs_contract]:
        raise ValueError(
            f"scaled_gemm: lhs {lhs.shape} (contract {lhs_contract}) and rhs {rhs.shape} "
            f"(contract {rhs_contract}) disagree on B or K"
        )
    out_dtype = jnp.dtype(out_dtype)
    if out_dtype not in _WIDE:
        raise TypeError(f"scaled_gemm: out_dtype must be float32/bfloat16/float16, got {out_dtype}")
    b = _bias_buffer(bias, rhs.shape[3 - rhs_contract])
    cfg = _GemmCfg(lo, ro, out_dtype.name, bias is not None)
    return _gemm_vmappable(cfg)(ld, ls, lt, rd, rs, rt, b)


# ----------------------------------------------------------------------------- quantize


@dataclasses.dataclass(frozen=True)
class _QuantCfg:
    kind: int
    fmt: int
    block: int
    tile_rows: int
    scale_rule: int
    power_of_two: int
    axis: int  # of the 3-D view: 1 or 2
    delayed: int
    # 1: the caller does not read the amax result (kinds row / tile / mx): amax_mode 3, no amax computed, and
    # QTensor.amax is NaN (_nan_amax). Not an attribute of its own.
    no_amax: int = 0

    @property
    def bits(self) -> int:
        return _BITS[self.fmt]

    def attrs(self, amax_mode: int = 0) -> dict:
        d = dataclasses.asdict(self)
        if d.pop("no_amax") and amax_mode == 0:
            amax_mode = 3
        d["amax_mode"] = amax_mode
        return {k: np.int32(v) for k, v in d.items()}

    def data_shape(self, shape3) -> tuple:
        s = list(shape3)
        s[self.axis] = s[self.axis] * self.bits // 8
        return tuple(s)

    def scale_shape(self, shape3) -> tuple:
        if self.kind == 1:
            return ()
        s = list(shape3)
        row = 3 - self.axis
        if self.kind == 2:
            s[self.axis] = 1
        else:
            s[self.axis] //= self.block
            if self.kind == 3:
                s[row] //= self.tile_rows
        return tuple(s)

    def data_dtype(self):
        return {0: jnp.float8_e4m3fn, 1: jnp.float8_e5m2}.get(self.fmt, jnp.uint8)

    def scale_dtype(self):
        return {4: jnp.float8_e8m0fnu, 5: jnp.float8_e4m3fn}.get(self.kind, jnp.float32)

    @property
    def group(self) -> int:
        unit = {8: 1, 6: 4, 4: 2}[self.bits]
        return math.lcm(unit, self.block if self.kind in (3, 4, 5) else 1)


def _nan_amax():
    """QTensor.amax of a quantization that did not compute it (``amax=False``): NaN, so a stray use shows."""
    return jnp.full((), jnp.nan, jnp.float32)


# Kinds (_QuantCfg.kind) whose scales come from their groups alone: row, tile, mx. Only they can skip the amax.
_AMAX_OPTIONAL_KINDS = (2, 3, 4)


def _quant_ffi(cfg: _QuantCfg, x, scale_in, amax_in=None, amax_mode: int = 0):
    shape3 = x.shape
    outs = (
        jax.ShapeDtypeStruct(cfg.data_shape(shape3), cfg.data_dtype()),
        jax.ShapeDtypeStruct(cfg.scale_shape(shape3), cfg.scale_dtype()),
        jax.ShapeDtypeStruct((), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
    )
    if amax_in is None:
        amax_in = jnp.zeros((), jnp.float32)
    call = jax.ffi.ffi_call(QUANTIZE_TARGET, outs, vmap_method="sequential")
    data, scale, amax, ts = call(x, scale_in, amax_in, **cfg.attrs(amax_mode))
    return data, scale, _nan_amax() if cfg.no_amax else amax, ts  # no_amax: the kernel may leave amax unwritten


def _quant_impl(cfg: _QuantCfg, x, scale_in):
    return _quant_ffi(cfg, x, scale_in)


class _QuantPlan:
    def __init__(self, cfg: _QuantCfg, mesh, arg_shapes):
        x = arg_shapes[0]
        dims = _spec_axes(x.sharding, 3)
        row = 3 - cfg.axis
        tr = cfg.tile_rows if cfg.kind == 3 else 1
        units = {0: 1, cfg.axis: cfg.group, row: tr}
        self.dims = [
            a if a and x.shape[d] % (_axes_size(mesh, a) * units[d]) == 0 else () for d, a in enumerate(dims)
        ]
        self.cfg = cfg
        self.mesh = mesh

    @property
    def all_axes(self) -> tuple:
        return tuple(a for d in self.dims for a in d)

    def arg_shardings(self):
        return (NamedSharding(self.mesh, _pspec(self.dims)), NamedSharding(self.mesh, P()))

    def result_shardings(self):
        rep = NamedSharding(self.mesh, P())
        data = NamedSharding(self.mesh, _pspec(self.dims))
        if self.cfg.kind == 1:
            scale = rep
        elif self.cfg.kind == 2:
            sd = list(self.dims)
            sd[self.cfg.axis] = ()
            scale = NamedSharding(self.mesh, _pspec(sd))
        else:
            scale = data
        return (data, scale, rep, rep)


def _quant_partition(cfg: _QuantCfg, mesh, arg_shapes, result_shape):
    plan = _QuantPlan(cfg, mesh, arg_shapes)
    axes = plan.all_axes
    q_axes = plan.dims[cfg.axis]

    def lower_fn(x, scale_in):
        if not axes:
            return _quant_ffi(cfg, x, scale_in)
        if cfg.kind in (1, 5) and not cfg.delayed:
            # Per-tensor amax (tensor scale / NVFP4 tensor scale) across every shard.
            amax = _pmax_nan(_amax(x), axes)
            data, scale, _, ts = _quant_ffi(cfg, x, scale_in, amax, amax_mode=1)
            return data, scale, amax, ts
        if cfg.kind == 2 and q_axes:
            # Row amax along a sharded quantization axis: reduce across those shards.
            amax_rows = _pmax_nan(_amax(x, axis=cfg.axis, keepdims=True), q_axes)
            data, scale, amax, ts = _quant_ffi(cfg, x, scale_in, amax_rows, amax_mode=2)
        else:
            data, scale, amax, ts = _quant_ffi(cfg, x, scale_in)
        return data, scale, amax if cfg.no_amax else _pmax_nan(amax, axes), ts  # no_amax: NaN, nothing to reduce

    return mesh, lower_fn, plan.result_shardings(), plan.arg_shardings()


def _quant_infer(cfg: _QuantCfg, mesh, arg_shapes, result_shape):
    return _QuantPlan(cfg, mesh, arg_shapes).result_shardings()


def _quant_rule(cfg: _QuantCfg, mesh, value_types, result_types):
    shape = _dims_of(value_types[0])
    ax, row = cfg.axis, 3 - cfg.axis
    sizes: dict = {}
    tr = cfg.tile_rows if cfg.kind == 3 else 1
    grouped = cfg.kind in (3, 4, 5)
    blk = cfg.block if grouped else 1
    x = ["b", "", ""]
    data = ["b", "", ""]
    scale = ["b", "", ""]
    # Row axis: "r" or "(r rt)" for tile rows.
    if tr > 1:
        sizes["rt"] = tr
        x[row] = data[row] = "(r rt)"
    else:
        x[row] = data[row] = "r"
    scale[row] = "r"
    # Quantization axis: groups "q" of blk elements / blk * bits / 8 bytes.
    if blk > 1:
        sizes["qx"] = blk
        x[ax] = "(q qx)"
        db = blk * cfg.bits // 8
        if db > 1:
            sizes["qd"] = db
            data[ax] = "(q qd)"
        else:
            data[ax] = "q"
        scale[ax] = "q"
    else:
        x[ax] = data[ax] = "q"
        scale[ax] = "qo"
        if cfg.bits != 8:  # pragma: no cover - FP4/FP6 always come with MX / NVFP4 blocks
            raise ValueError("unblocked FP4/FP6 quantization")
    del shape
    scale_s = "" if cfg.kind == 1 else " ".join(scale)
    rule = f"{' '.join(x)}, -> {' '.join(data)}, {scale_s}, , "
    return rule, sizes


_quant_cp = _partitioned(_quant_impl, _quant_partition, _quant_infer, _quant_rule)


@functools.cache
def _quant_vmappable(cfg: _QuantCfg):
    """The custom call with a batching rule: blockwise kinds fold the vmapped axis into B."""

    @jax.custom_batching.custom_vmap
    def f(x, scale_in):
        return _quant_cp(cfg, x, scale_in)

    @f.def_vmap
    def rule(axis_size, in_batched, x, scale_in):
        xb, sb = in_batched
        if cfg.kind in (2, 3, 4) and not sb:
            xs = x if xb else jnp.broadcast_to(x, (axis_size,) + x.shape)
            data, scale, _, ts = f(xs.reshape((-1,) + xs.shape[2:]), scale_in)
            unfold = lambda t: t.reshape((axis_size, t.shape[0] // axis_size) + t.shape[1:])
            # The folded call's amax spans every example: each one's own, or NaN as unbatched with no_amax.
            amax = jnp.full((axis_size,), jnp.nan, jnp.float32) if cfg.no_amax else _amax(xs, axis=(1, 2, 3))
            return (unfold(data), unfold(scale), amax, jnp.broadcast_to(ts, (axis_size,))), (True,) * 4
        xs = x if xb else jnp.broadcast_to(x, (axis_size,) + x.shape)
        ss = scale_in if sb else jnp.broadcast_to(scale_in, (axis_size,))
        return lax.map(lambda t: f(*t), (xs, ss)), (True,) * 4

    return f


def _view3(shape: tuple, axis: int) -> tuple[tuple, int]:
    """The 3-D (B, R, C) view of ``shape`` quantized along ``axis`` and the view's axis (1|2)."""
    n = len(shape)
    if axis == n - 1:
        lead = shape[:-2]
        rows = shape[-2] if n >= 2 else 1
        return (math.prod(lead), rows, shape[-1]), 2
    return (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])), 1


def _quant_cfg(spec, axis3: int) -> _QuantCfg:
    fmt = FMT[spec.fmt.name]
    if isinstance(spec, (TensorScaling, DelayedScaling)):
        return _QuantCfg(1, fmt, 1, 1, 0, 0, axis3, int(isinstance(spec, DelayedScaling)))
    if isinstance(spec, RowScaling):
        return _QuantCfg(2, fmt, 1, 1, 0, 0, axis3, 0)
    if isinstance(spec, TileScaling):
        return _QuantCfg(3, fmt, spec.tile[1], spec.tile[0], 0, int(spec.power_of_two), axis3, 0)
    if isinstance(spec, MXScaling):
        return _QuantCfg(4, fmt, spec.block, 1, {"rceil": 0, "floor": 1}[spec.scale_rule], 0, axis3, 0)
    if isinstance(spec, NVFP4Scaling):
        if spec.block != 16:
            raise ValueError(
                f"quantize: the mxprec_quantize kernel supports NVFP4 block 16, got {spec.block}"
            )
        return _QuantCfg(5, fmt, 16, 1, 0, 0, axis3, 0)
    raise TypeError(f"quantize: spec must be a scaling spec, got {spec!r}")  # pragma: no cover


def quantize(x: jax.Array, spec, axis: int = -1, state=None, amax: bool = True) -> QTensor:
    """``mxprec_quantize``: the custom-call twin of :func:`mxprec.quantize` (bit-identical output).

    Args:
      x: float32 / bfloat16 / float16 array of any rank >= 1.
      spec: TensorScaling, DelayedScaling, RowScaling, TileScaling, MXScaling or NVFP4Scaling.
      axis: the quantization (contraction) axis.
      state: DelayedScalingState (required for DelayedScaling; its ``scale`` is used).
      amax: False where the caller never reads ``QTensor.amax``: for RowScaling, TileScaling and MXScaling (whose
        scales come from their groups alone) the call then computes no tensor amax (``amax_mode=3``: on CUDA no
        zeroed result buffer and no atomics) and ``QTensor.amax`` is NaN. The other kinds scale by the tensor
        amax and return it either way. Codes and scales are the same bits.

    Returns:
      QTensor with exactly the fields :func:`mxprec.quantize` returns (RNE rounding; stochastic
      rounding is not offered by the kernel).

    The kernel sees ``x`` as 3-D ``(B, R, C)`` quantized along view axis 1 or 2 (see
    csrc/common/quantize.h). Custom-call buffers: ``x``, ``scale_in`` f32 ``()`` (delayed scale),
    ``amax_in`` f32 (tensor amax ``()`` or per-group amax, used by the sharded lowering);
    results: data (FP8 typed / uint8 packed along the axis), scale (f32 / E8M0 / E4M3 as
    QTensor), amax f32 ``()``, tensor_scale f32 ``()``. Attributes (int32): kind, fmt, block,
    tile_rows, scale_rule, power_of_two, axis, delayed, amax_mode (0 local, 1 tensor amax in,
    2 per-group amax in, 3 no amax result).

    Platforms: "cpu" (libmxprec_cpu.so) and "cuda" (libmxprec_cuda.so, sm_90a kernels for every
    kind, axis 1 quantized in place; docs/backends/cuda.md). Both equal mxprec.quantize as XLA's CPU
    runtime computes it (FTZ/DAZ, x86 NaN rules). Raises RuntimeError when the current platform's
    library is not loaded.
    """
    require()
    axis = _validate_quantize_args(x, spec, axis)
    if isinstance(spec, DelayedScaling):
        if state is None:
            raise ValueError(
                "quantize: DelayedScaling needs state=DelayedScalingState (DelayedScalingState.init(spec))"
            )
        scale_in = delayed_scale_of(state, "mxprec.kernels.ffi.quantize")
    else:
        scale_in = jnp.ones((), jnp.float32)
    shape = tuple(x.shape)
    shape3, axis3 = _view3(shape, axis)
    cfg = _quant_cfg(spec, axis3)
    if not amax and cfg.kind in _AMAX_OPTIONAL_KINDS:
        cfg = dataclasses.replace(cfg, no_amax=1)
    data3, scale3, amax_out, ts = _quant_vmappable(cfg)(jnp.reshape(x, shape3), scale_in)
    data_shape, scale_shape = qtensor_layout(spec, shape, axis)
    return QTensor(
        data=data3.reshape(data_shape),
        scale=scale3.reshape(scale_shape),
        amax=amax_out,
        tensor_scale=ts if cfg.kind == 5 else None,
        spec=spec,
        axis=axis,
        shape=shape,
        dtype=jnp.dtype(x.dtype),
    )
