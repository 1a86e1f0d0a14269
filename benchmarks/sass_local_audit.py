"""Which kernels of a CUDA object touch local memory (register spills) in their bodies.

    python3 benchmarks/sass_local_audit.py build-cuda/obj/cuda_quantize.o [--match onchip] [--all]
    python3 benchmarks/sass_local_audit.py --sass saved.sass            # cuobjdump -sass output saved earlier

Per kernel: the STL / LDL count before its last EXIT ("body": the code every launch runs; ptxas places cold
subroutines, e.g. the slow path of an FP32 division, after it) and after it, and the body's first STL with the
global load that wrote its register, where the latest write of that register before the store is a global load. Such a store waits for
the load's data: the thread stalls on its first DRAM round trip before issuing the loads after it. That is what
cost `onchip_kernel` 1-1.5 us in the sixty-second session (h100_quantize_mul_in_loop.md) and what
`nvfp4_onchip_kernel` still does (docs/backends/cuda_sessions.md, sixty-third session). Needs cuobjdump (and
nvdisasm) on PATH for object files: csrc/cuda_kernels/fetch_ci_tools.sh fetches both.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

_FUNCTION = re.compile(r"\n\s*Function : (\S+)")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_LOCAL = re.compile(r"\b(?:STL|LDL)(?:\.\S+)?\b")


def _width(opcode: str) -> int:
    """Registers an instruction writes from its destination on (by its .64 / .128 suffix; CS2R writes two)."""
    if ".128" in opcode:
        return 4
    return 2 if ".64" in opcode or opcode.startswith("CS2R") else 1


def functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    """{kernel name: [(address, instruction text), ...]} from cuobjdump -sass output."""
    parts = _FUNCTION.split(sass)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = [(int(a, 16), text.strip()) for a, text in _INSTR.findall(body)]
    return out


def audit(instructions: list[tuple[int, str]]) -> dict:
    """Local accesses of one kernel: in the body (before the last EXIT) and after it, and the body's first STL with
    the global load (LDG) that wrote its source register, if the latest write of that register is one."""
    exits = [i for i, (_, t) in enumerate(instructions) if re.search(r"\bEXIT\b", t)]
    end = exits[-1] if exits else len(instructions)
    body = [_LOCAL.search(t) is not None for _, t in instructions[:end]]
    after = sum(_LOCAL.search(t) is not None for _, t in instructions[end:])
    first = None
    for i, (addr, text) in enumerate(instructions[:end]):
        if re.search(r"\bSTL(?:\.\S+)?\s", text):
            src = int(text.split(",")[-1].strip()[1:]) if re.search(r",\s*R\d+$", text) else -1
            load = None
            for j in range(i - 1, -1, -1):  # the latest instruction that wrote the stored register
                m = re.match(r"(?:@!?U?P\w+\s+)?(\S+)\s+R(\d+)\b", instructions[j][1])
                if m and int(m.group(2)) <= src < int(m.group(2)) + _width(m.group(1)):
                    if m.group(1).startswith("LDG"):
                        load = (*instructions[j], i - j)
                    break
            first = {"address": addr, "store": text, "load": load}
            break
    return {"body": sum(body), "after_exit": after, "first_store": first}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("object", nargs="?", help="a .o / .so with sm_90a SASS")
    p.add_argument("--sass", help="cuobjdump -sass output saved to a file (instead of an object)")
    p.add_argument("--match", default="", help="only kernels whose mangled name matches this regex")
    p.add_argument("--all", action="store_true", help="also list kernels with no local access in their body")
    args = p.parse_args(argv)
    if bool(args.object) == bool(args.sass):
        p.error("give an object file or --sass FILE")
    if args.sass:
        with open(args.sass) as fh:
            sass = fh.read()
    else:
        res = subprocess.run(["cuobjdump", "-sass", args.object], check=False, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"cuobjdump -sass {args.object} failed: {res.stderr.strip()}", file=sys.stderr)
            return 2
        sass = res.stdout
    rows = 0
    for name, instructions in functions(sass).items():
        if args.match and not re.search(args.match, name):
            continue
        a = audit(instructions)
        if not a["body"] and not args.all:
            continue
        rows += 1
        line = f"{a['body']:4d} in body {a['after_exit']:4d} after EXIT  {name}"
        if a["first_store"]:
            s = a["first_store"]
            line += f"\n      first STL at {s['address']:#x}: {s['store']}"
            if s["load"]:
                line += f"  <- waits for {s['load'][1]} at {s['load'][0]:#x} ({s['load'][2]} instructions before)"
        print(line)
    if not rows:
        print("no kernel touches local memory in its body" + (f" (matching {args.match!r})" if args.match else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
