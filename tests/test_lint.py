"""The tree passes ``ruff check`` with the configuration in pyproject.toml (ruff pinned in the ``test`` extra, so a
new ruff release cannot change the verdict)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    pytest.importorskip("ruff", reason="ruff is in the test extra: pip install '.[test]'")
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("needs the source tree")
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
