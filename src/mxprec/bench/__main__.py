"""``python -m mxprec.bench llama [options]``."""

import sys

from mxprec.bench import main

if __name__ == "__main__":
    out = main()
    sys.exit(out if isinstance(out, int) else 0)
