"""benchmarks/h200_session.sh, the device calls' driver: it parses, and every stage its header lists has a branch.

The forty-eighth session's edit of the onchip-ab stage deleted six other stages (llama:, rounds:, llama-ab:,
llama-kernels:, gemm-ab:, kmajor:) that the header still listed; a call naming one only printed "unknown stage".
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "h200_session.sh"


def _documented_and_handled(text: str) -> tuple[set[str], set[str]]:
    header = text.split("set -uo pipefail", 1)[0]
    documented = set(re.findall(r"^#   ([a-z0-9][a-z0-9-]*)(?::[A-Z]+)?\s", header, re.MULTILINE))
    handled = set()
    for label in re.findall(r"^    ([a-z0-9|:*-]+)\)", text, re.MULTILINE):
        handled.update(p.removesuffix("*").removesuffix(":") for p in label.split("|"))
    return documented, handled - {""}


def test_every_documented_stage_has_a_branch():
    if not SCRIPT.is_file():
        pytest.skip("needs the source tree")
    documented, handled = _documented_and_handled(SCRIPT.read_text())
    assert len(documented) > 20, sorted(documented)  # the header's list was found
    assert documented <= handled, f"stages listed in the header without a branch: {sorted(documented - handled)}"


def test_the_check_sees_a_missing_branch():
    text = SCRIPT.read_text() if SCRIPT.is_file() else pytest.skip("needs the source tree")
    cut = re.sub(r"^    llama:\*\)", "    llama-gone:*)", text, count=1, flags=re.MULTILINE)
    documented, handled = _documented_and_handled(cut)
    assert "llama" in documented - handled


def test_script_parses():
    if not SCRIPT.is_file() or shutil.which("bash") is None:
        pytest.skip("needs the source tree and bash")
    res = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(("gpu", "runs_stages"), [("NVIDIA H100 80GB HBM3", False), ("NVIDIA H200", True)])
def test_require_gpu_stops_before_any_stage_on_another_card(tmp_path, gpu, runs_stages):
    if not SCRIPT.is_file() or shutil.which("bash") is None:
        pytest.skip("needs the source tree and bash")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(f"#!/bin/sh\necho '{gpu}, 1980 MHz, 700.00 W'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "OUT": str(tmp_path / "out"), "REQUIRE_GPU": "H200"}
    # A stage the script does not know: it only reports it, so the card check is all that is exercised.
    res = subprocess.run(["bash", str(SCRIPT), "no-such-stage"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, check=False)
    if runs_stages:
        assert res.returncode == 0, res.stderr
        assert "unknown stage no-such-stage" in res.stderr
    else:
        assert res.returncode == 3, res.stderr
        assert "REQUIRE_GPU=H200" in res.stderr and "unknown stage" not in res.stderr
