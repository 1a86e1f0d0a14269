#!/usr/bin/env python
"""Llama training-step benchmark: same as ``python -m mxprec.bench llama [options]``."""

import os
import sys

try:
    import mxprec  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from mxprec.bench.llama import main

if __name__ == "__main__":
    main()
