"""benchmarks/sass_compare.py: which kernels two builds of an object differ in, by their SASS."""

from __future__ import annotations

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "sass_compare.py"
_spec = importlib.util.spec_from_file_location("sass_compare", _PATH)
cmp_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmp_mod)

_ANON_OLD = "_GLOBAL__N__1def9c37_16_cuda_quantize_cu_d51bdf3d"
_ANON_NEW = "_GLOBAL__N__7a0b11c2_16_cuda_quantize_cu_0c4e9f10"


def _function(name, instructions, base=0):
    lines = [f"\n\t\tFunction : {name}"]
    for i, text in enumerate(instructions):
        lines.append(f"        /*{base + i * 16:04x}*/                   {text} ;   /* 0x{i:016x} */")
    return "\n".join(lines)


def _kernel(anon, what):
    return f"_ZN6mxprec13cuda_quantize49{anon}{what}EvNS1_4ArgsE"


# Shaped after cuobjdump's output: the same kernel in two builds, at other addresses and with other encodings and
# anonymous-namespace hashes; one kernel changed (a predicated convert pair became one convert); one kernel in each
# build only.
COMMON = ["LDG.E.128.CONSTANT R8, desc[UR4][R2.64]", "FMUL R4, R8, R9", "EXIT"]
OLD = "\n".join([
    _function(_kernel(_ANON_OLD, "9keep_sameI"), COMMON),
    _function(_kernel(_ANON_OLD, "10row_kernelI"), [
        "@P0 F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R4, R5, R6, RZ",
        "@!P0 F2FP.SATFINITE.E5M2.F32.PACK_AB_MERGE_C R4, R5, R6, RZ",
        "STL [R1], R4",
        "LDL R4, [R1]",
        "EXIT",
    ]),
    _function(_kernel(_ANON_OLD, "8old_onlyI"), COMMON),
])
NEW = "\n".join([
    _function(_kernel(_ANON_NEW, "9keep_sameI"), COMMON, base=0x100),
    _function(_kernel(_ANON_NEW, "10row_kernelI"), ["F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R4, R5, R6, RZ", "EXIT"]),
    _function(_kernel(_ANON_NEW, "8new_onlyI"), COMMON),
])
USAGE = f""" Function {_kernel(_ANON_OLD, "10row_kernelI")}:
  REG:64 STACK:40 SHARED:0 LOCAL:0 CONSTANT[0]:752 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function {_kernel(_ANON_OLD, "9keep_sameI")}:
  REG:32 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:752 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_builds_compare_by_instructions_not_addresses_or_hashes():
    old, new = cmp_mod.kernels(OLD), cmp_mod.kernels(NEW)
    groups = cmp_mod.compare(old, new)
    same, row = cmp_mod.canonical(_kernel(_ANON_OLD, "9keep_sameI")), cmp_mod.canonical(_kernel(_ANON_NEW, "10row_kernelI"))
    assert same == cmp_mod.canonical(_kernel(_ANON_NEW, "9keep_sameI")) and "ANON" in same
    assert groups["identical"] == [same] and groups["changed"] == [row]
    assert groups["removed"] == [cmp_mod.canonical(_kernel(_ANON_OLD, "8old_onlyI"))]
    assert groups["added"] == [cmp_mod.canonical(_kernel(_ANON_NEW, "8new_onlyI"))]
    assert cmp_mod.compare(old, new, match="row_kernel") == {"identical": [], "changed": [row], "removed": [],
                                                              "added": []}


def test_summary_counts_converts_local_accesses_and_resources():
    old = cmp_mod.kernels(OLD)
    usage = cmp_mod.usage(USAGE)
    row = cmp_mod.canonical(_kernel(_ANON_OLD, "10row_kernelI"))
    assert usage[row] == (64, 40)
    assert cmp_mod.summary(old[row], usage[row]) == "5 instr, 2 F2FP, 2 local in body REG 64 STACK 40"
    assert cmp_mod.summary(cmp_mod.kernels(NEW)[row], None) == "2 instr, 1 F2FP, 0 local in body"


def test_cli_on_saved_sass(tmp_path, capsys):
    (tmp_path / "old.sass").write_text(OLD)
    (tmp_path / "new.sass").write_text(NEW)
    assert cmp_mod.main(["--sass", str(tmp_path / "old.sass"), str(tmp_path / "new.sass")]) == 0
    out = capsys.readouterr().out
    assert "changed  _ZN6mxprec13cuda_quantize49ANON10row_kernelI" in out
    assert "old: 5 instr, 2 F2FP, 2 local in body" in out and "new: 2 instr, 1 F2FP, 0 local in body" in out
    assert out.strip().endswith("1 identical, 1 changed, 1 removed, 1 added")
