"""Which kernels differ between two builds of a CUDA object, by their SASS.

    python3 benchmarks/sass_compare.py OLD.o NEW.o [--match tall_col]
    python3 benchmarks/sass_compare.py --sass OLD.sass NEW.sass        # cuobjdump -sass outputs saved earlier

A kernel change is measured on the device against the kernels it was meant to change; this says which those are.
Per kernel of either object: identical (the same instructions in the same order; addresses, encodings and the
anonymous-namespace hash of each build's mangled names left out), changed, or only in one of them. For changed
ones: instruction count, F2FP converts, local accesses in the body (sass_local_audit.py's count: before the last
EXIT) and, read from `cuobjdump --dump-resource-usage` where objects are given, REG / STACK. The check the sixty-fifth
session ran by hand (`row_kernel`'s format template: 6 kernels changed, the other 110 of cuda_quantize.o identical) and
the sixty-sixth with this tool (the same template for `tall_col_kernel` left its in-place spills). Needs cuobjdump on
PATH for object files (csrc/cuda_kernels/fetch_ci_tools.sh).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import subprocess
import sys

_spec = importlib.util.spec_from_file_location("sass_local_audit", pathlib.Path(__file__).with_name("sass_local_audit.py"))
_audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_audit)

# nvcc names each TU's anonymous namespace after the file and a per-build hash:
# _GLOBAL__N__1def9c37_16_cuda_quantize_cu_d51bdf3d (its length prefix, 49 here, stays the same).
_ANON = re.compile(r"_GLOBAL__N__[0-9a-f]{8}_\d+_\w+?_cu_[0-9a-f]{8}")
_USAGE = re.compile(r"Function (\S+):\s*\n?\s*REG:(\d+) STACK:(\d+)")
_F2FP = re.compile(r"(?:@!?U?P\w+\s+)?F2FP\b")


def canonical(name: str) -> str:
    """A mangled kernel name without its build's anonymous-namespace hash."""
    return _ANON.sub("ANON", name)


def kernels(sass: str) -> dict[str, list[str]]:
    """{canonical name: [instruction text, ...]} from cuobjdump -sass output (addresses and encodings left out)."""
    return {canonical(n): [t for _, t in ins] for n, ins in _audit.functions(sass).items()}


def usage(text: str) -> dict[str, tuple[int, int]]:
    """{canonical name: (REG, STACK)} from cuobjdump --dump-resource-usage output."""
    return {canonical(n): (int(r), int(s)) for n, r, s in _USAGE.findall(text)}


def summary(instructions: list[str], resources: tuple[int, int] | None) -> str:
    """Instructions, F2FP converts, body local accesses and (REG, STACK) of one kernel, in one short string."""
    local = _audit.audit(list(enumerate(instructions)))["body"]
    f2fp = sum(_F2FP.match(t) is not None for t in instructions)
    res = f" REG {resources[0]} STACK {resources[1]}" if resources else ""
    return f"{len(instructions)} instr, {f2fp} F2FP, {local} local in body{res}"


def compare(old: dict[str, list[str]], new: dict[str, list[str]], match: str = "") -> dict[str, list[str]]:
    """{"identical" | "changed" | "removed" | "added": [canonical names]} of the kernels matching `match`."""
    out = {"identical": [], "changed": [], "removed": [], "added": []}
    for name in sorted(set(old) | set(new)):
        if match and not re.search(match, name):
            continue
        if name not in new:
            out["removed"].append(name)
        elif name not in old:
            out["added"].append(name)
        else:
            out["identical" if old[name] == new[name] else "changed"].append(name)
    return out


def _cuobjdump(flag: str, obj: str) -> str:
    res = subprocess.run(["cuobjdump", flag, obj], check=False, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"cuobjdump {flag} {obj} failed: {res.stderr.strip()}")
    return res.stdout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", help="the reference object (.o / .so with sm_90a SASS), or with --sass its saved SASS")
    p.add_argument("new", help="the changed one")
    p.add_argument("--sass", action="store_true", help="OLD and NEW are saved cuobjdump -sass outputs")
    p.add_argument("--match", default="", help="only kernels whose mangled name matches this regex")
    args = p.parse_args(argv)
    if args.sass:
        sass = [pathlib.Path(f).read_text() for f in (args.old, args.new)]
        res = [{}, {}]
    else:
        sass = [_cuobjdump("-sass", f) for f in (args.old, args.new)]
        res = [usage(_cuobjdump("--dump-resource-usage", f)) for f in (args.old, args.new)]
    old, new = kernels(sass[0]), kernels(sass[1])
    groups = compare(old, new, args.match)
    for name in groups["changed"]:
        print(f"changed  {name}\n   old: {summary(old[name], res[0].get(name))}\n"
              f"   new: {summary(new[name], res[1].get(name))}")
    for name in groups["removed"]:
        print(f"removed  {name}\n   old: {summary(old[name], res[0].get(name))}")
    for name in groups["added"]:
        print(f"added    {name}\n   new: {summary(new[name], res[1].get(name))}")
    print(f"{len(groups['identical'])} identical, {len(groups['changed'])} changed, {len(groups['removed'])} removed, "
          f"{len(groups['added'])} added" + (f" (matching {args.match!r})" if args.match else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
