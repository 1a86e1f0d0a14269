"""Benchmarks: ``python -m mxprec.bench <name> ...`` (``llama``: the Llama training-step table)."""

__all__ = ["COMMANDS", "main"]

COMMANDS = {"llama": "mxprec.bench.llama"}


def main(argv=None):
    """Dispatch ``<name> [args...]`` to ``mxprec.bench.<name>.main``."""
    import importlib
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m mxprec.bench {" + ",".join(COMMANDS) + "} [options]\n"
              "  llama   Llama training-step benchmark (seed 000's table); see --help", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])
