#!/usr/bin/env python3
"""Set the yield / reuse control bits of the FP32 promotion instructions in sm_90a SASS, in place.

    python3 benchmarks/sass_promotion_yield.py --mode yield|noyield|report FILE [--kernel REGEX]

FILE is a cubin, an object or a shared library with sm_90a cubins embedded uncompressed (as nvcc 13.0 links
them); every embedded ELF whose machine is EM_CUDA is scanned. In each ``.text.<kernel>`` section whose name
matches ``--kernel`` (default: mxprec's persistent GEMM kernels), the promotion instructions are

* unpredicated ``FFMA Rd, Ra, Rb, Rd`` (block-scaled: ``acc = partial * scale + acc``), and
* unpredicated ``FADD Rd, Ra, Rd`` (per-tensor / row-wise: ``acc = acc + partial``),

and ``--mode`` rewrites their control bits:

* ``yield``: the yield bit cleared (the warp may yield after the instruction) and the operand reuse flags
  cleared (a yielded warp loses its reuse cache), on every promotion instruction. DeepGEMM does this to its
  promotion FFMAs (its README, "FFMA SASS interleaving"); ptxas alternates yield / no-yield with reuse on
  every second one.
* ``noyield``: the yield bit set (no yield) on every promotion instruction; reuse flags left as they are.
* ``report``: count only.

Measured on the H200 (forty-first session, ``benchmarks/results/h200_promotion_yield.md``): both rewrites are slower
than ptxas's own bits for the block-scaled kernels (``yield`` -5 to -7 %, ``noyield`` -9 to -10 %) and no faster for
the per-tensor ones, so the build does not use this tool; it stays for such A/B runs (patch a copy of the library,
pick it with ``MXPREC_CUDA_LIBRARY``), and ``tests/test_cuda_isa.py`` uses its decoder to check that ptxas still
alternates the bits.

Why this is safe: neither bit changes what an instruction computes. The stall count and the scoreboard
barriers, which order dependent instructions, are not touched; a cleared reuse flag only makes the next
instruction read its operand from the register file instead of the reuse cache. Instruction words follow the
sm_90 layout (128 bits, little-endian): opcode bits 0-11, guard predicate 12-15, Rd 16-23, Ra 24-31, Rb 32-39,
Rc 64-71; control: yield bit 109, reuse flags 122-125 (as cuobjdump prints them: ``.reuse`` on operand b = bit 123).
"""
from __future__ import annotations

import argparse
import re
import struct
import sys

EM_CUDA = 190
OPCODE_FFMA_RRR = 0x223  # FFMA Rd, Ra, Rb, Rc (all registers)
OPCODE_FADD_RR = 0x221  # FADD Rd, Ra, Rb
PREDICATE_TRUE = 0x7  # bits 12-15: @PT
YIELD_BIT = 1 << (109 - 64)  # in the high 64-bit word; set = no yield
REUSE_BITS = 0xF << (122 - 64)
DEFAULT_KERNEL = r"mxprec4cuda10persistent21blockwise_gemm_kernel"


def _cuda_elfs(data: bytes):
    """Yield the offset of every EM_CUDA ELF64 image inside ``data``."""
    pos = data.find(b"\x7fELF")
    while pos >= 0:
        if len(data) >= pos + 64 and data[pos + 4] == 2 and struct.unpack_from("<H", data, pos + 18)[0] == EM_CUDA:
            yield pos
        pos = data.find(b"\x7fELF", pos + 4)


def _text_sections(data: bytes, base: int):
    """(name, file offset, size) of each ``.text.*`` section of the ELF at ``base``."""
    shoff, = struct.unpack_from("<Q", data, base + 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, base + 0x3A)

    def header(i):
        return struct.unpack_from("<IIQQQQ", data, base + shoff + i * shentsize)

    strtab_off = header(shstrndx)[4]
    for i in range(shnum):
        name_off, _, _, _, off, size = header(i)
        end = data.index(b"\0", base + strtab_off + name_off)
        name = data[base + strtab_off + name_off:end].decode()
        if name.startswith(".text."):
            yield name[len(".text."):], base + off, size


def promotion_kind(lo: int, hi: int) -> str | None:
    """'ffma' / 'fadd' when the instruction words are a promotion instruction, else None."""
    opcode, predicate, rd = lo & 0xFFF, (lo >> 12) & 0xF, (lo >> 16) & 0xFF
    if predicate != PREDICATE_TRUE:  # the k loop's promotion is unpredicated; the epilogue's FFMAs are not
        return None
    if opcode == OPCODE_FFMA_RRR and rd == hi & 0xFF and rd != 0xFF:
        return "ffma"
    if opcode == OPCODE_FADD_RR and rd == (lo >> 32) & 0xFF and rd != 0xFF:
        return "fadd"
    return None


def promotion_instructions(data: bytes, kernel_regex: str = DEFAULT_KERNEL):
    """Yield (kernel, file offset, kind, high word) for each promotion instruction of the matching kernels."""
    pattern = re.compile(kernel_regex)
    for base in _cuda_elfs(data):
        for name, off, size in _text_sections(data, base):
            if not pattern.search(name):
                continue
            for at in range(off, off + size - 15, 16):
                lo, hi = struct.unpack_from("<QQ", data, at)
                kind = promotion_kind(lo, hi)
                if kind is not None:
                    yield name, at, kind, hi


def patch(data: bytearray, mode: str, kernel_regex: str = DEFAULT_KERNEL) -> dict[str, dict[str, int]]:
    """Rewrite ``data`` in place; returns {kernel: {"ffma": n, "fadd": n, "changed": n}}."""
    counts: dict[str, dict[str, int]] = {}
    for name, at, kind, hi in list(promotion_instructions(bytes(data), kernel_regex)):
        c = counts.setdefault(name, {"ffma": 0, "fadd": 0, "changed": 0})
        c[kind] += 1
        new = hi
        if mode == "yield":
            new = hi & ~YIELD_BIT & ~REUSE_BITS
        elif mode == "noyield":
            new = hi | YIELD_BIT
        if new != hi:
            struct.pack_into("<Q", data, at + 8, new)
            c["changed"] += 1
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file")
    p.add_argument("--mode", choices=("yield", "noyield", "report"), required=True)
    p.add_argument("--kernel", default=DEFAULT_KERNEL, help="regex on the kernel (section) names")
    a = p.parse_args(argv)
    with open(a.file, "rb") as f:
        data = bytearray(f.read())
    counts = patch(data, a.mode, a.kernel)
    if not counts:
        print(f"no kernel matching {a.kernel!r} in {a.file}", file=sys.stderr)
        return 1
    if a.mode != "report":
        with open(a.file, "wb") as f:
            f.write(data)
    total = {k: sum(c[k] for c in counts.values()) for k in ("ffma", "fadd", "changed")}
    print(f"{a.mode}: {len(counts)} kernels, {total['ffma']} FFMA + {total['fadd']} FADD promotion "
          f"instructions, {total['changed']} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
