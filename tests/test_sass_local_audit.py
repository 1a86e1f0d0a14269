"""benchmarks/sass_local_audit.py: local-memory accesses in a kernel's body and the load a spill store waits for."""

from __future__ import annotations

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "sass_local_audit.py"
_spec = importlib.util.spec_from_file_location("sass_local_audit", _PATH)
audit_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit_mod)


def _function(name, instructions):
    lines = [f"\n\t\tFunction : {name}"]
    for i, text in enumerate(instructions):
        lines.append(f"        /*{i * 16:04x}*/                   {text} ;   /* 0x0000000000000000 */")
    return "\n".join(lines)


# Shaped after cuobjdump's output of onchip_kernel<bf16, FP8, hints> in the sixty-second session's library (a held
# round stored to local memory right after its load) and of 937a84c's (spills only in the subroutine after EXIT).
SASS = "\n".join([
    _function("spills_a_load", [
        "CS2R R24, SRZ",
        "@!P1 LDG.E.128.CONSTANT R24, desc[UR8][R20.64]",
        "IADD3 R2, R2, 0x1, RZ",
        "STL.64 [R1+0x8], R26",
        "LDL R10, [R1+0xc]",
        "EXIT",
        "STL [R1+0x10], R41",
        "RET.REL.NODEC R18 0x0",
    ]),
    _function("spills_after_exit", [
        "LDG.E.128.CONSTANT R24, desc[UR8][R20.64]",
        "EXIT",
        "STL [R1], R35",
        "LDL.LU R3, [R1]",
    ]),
    _function("spills_a_sum", [
        "LDG.E R5, desc[UR8][R2.64]",
        "FADD R5, R5, R6",
        "STL [R1], R5",
        "EXIT",
    ]),
])


def test_body_and_after_exit_are_counted_apart():
    fs = audit_mod.functions(SASS)
    assert list(fs) == ["spills_a_load", "spills_after_exit", "spills_a_sum"]
    a = audit_mod.audit(fs["spills_a_load"])
    assert (a["body"], a["after_exit"]) == (2, 1)
    b = audit_mod.audit(fs["spills_after_exit"])
    assert (b["body"], b["after_exit"], b["first_store"]) == (0, 2, None)


def test_first_store_names_the_load_it_waits_for():
    fs = audit_mod.functions(SASS)
    s = audit_mod.audit(fs["spills_a_load"])["first_store"]
    assert s["address"] == 0x30 and s["store"] == "STL.64 [R1+0x8], R26"
    assert s["load"][0] == 0x10 and s["load"][1].startswith("@!P1 LDG.E.128") and s["load"][2] == 2
    # The stored register was last written by an FADD, not by the load: no load to name.
    assert audit_mod.audit(fs["spills_a_sum"])["first_store"]["load"] is None


def test_cli_lists_only_kernels_with_body_accesses(tmp_path, capsys):
    path = tmp_path / "k.sass"
    path.write_text(SASS)
    assert audit_mod.main(["--sass", str(path)]) == 0
    out = capsys.readouterr().out
    assert "spills_a_load" in out and "spills_a_sum" in out and "spills_after_exit" not in out
    assert "waits for @!P1 LDG.E.128.CONSTANT R24" in out
    assert audit_mod.main(["--sass", str(path), "--match", "after_exit"]) == 0
    assert "no kernel touches local memory in its body" in capsys.readouterr().out
