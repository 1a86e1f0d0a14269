"""benchmarks/gemm_steady.py's CPU-side pieces: kernel-choice environment, clock-log windows, the markdown table.
The timing itself needs torch and a GPU (benchmarks/results/h200_gemm_steady.md)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import time

_DIR = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_DIR))  # gemm_steady imports gemm.py and gpu_clocks.py beside it
_spec = importlib.util.spec_from_file_location("gemm_steady", _DIR / "gemm_steady.py")
steady = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steady)


def test_kernel_env_names_the_family_variables():
    assert steady.kernel_env("tensor_e5m2xe4m3", "persistent:2x1:192") == {
        "MXPREC_SM90_TENSORWISE_KERNEL": "persistent",
        "MXPREC_SM90_TENSORWISE_CLUSTER": "2x1",
        "MXPREC_SM90_TENSORWISE_TILE_N": "192",
        "MXPREC_SM90_TENSORWISE_SPLIT_TAIL": None,
    }
    assert steady.kernel_env("row", "persistent:::off") == {
        "MXPREC_SM90_ROWWISE_KERNEL": "persistent",
        "MXPREC_SM90_ROWWISE_CLUSTER": None,
        "MXPREC_SM90_ROWWISE_TILE_N": None,
        "MXPREC_SM90_ROWWISE_SPLIT_TAIL": "off",
    }
    assert steady.kernel_env("block", "cutlass") == {
        "MXPREC_SM90_BLOCKWISE_KERNEL": "cutlass",
        "MXPREC_SM90_BLOCKWISE_CLUSTER": None,
        "MXPREC_SM90_BLOCKWISE_TILE_N": None,
        "MXPREC_SM90_BLOCKWISE_SPLIT_TAIL": None,
    }
    assert set(steady.kernel_env("row", None).values()) == {None}  # the default: every variable unset ("auto")


def test_apply_env_sets_and_unsets(monkeypatch):
    monkeypatch.setenv("MXPREC_SM90_ROWWISE_TILE_N", "160")
    monkeypatch.delenv("MXPREC_SM90_ROWWISE_KERNEL", raising=False)
    steady.apply_env(steady.kernel_env("row", "persistent"))
    assert os.environ["MXPREC_SM90_ROWWISE_KERNEL"] == "persistent"
    assert "MXPREC_SM90_ROWWISE_TILE_N" not in os.environ  # a variant's unset field does not inherit a leftover
    steady.apply_env(steady.kernel_env("row", None))
    assert "MXPREC_SM90_ROWWISE_KERNEL" not in os.environ


_clock_spec = importlib.util.spec_from_file_location("test_gpu_clocks",
                                                     pathlib.Path(__file__).with_name("test_gpu_clocks.py"))
_clock_tests = importlib.util.module_from_spec(_clock_spec)
_clock_spec.loader.exec_module(_clock_tests)


def _line(t: float, mhz: int, watts: float) -> str:
    """An nvidia-smi CSV sample (test_gpu_clocks.py's writer), capped by power."""
    return _clock_tests._line(t, mhz, watts, "0x0000000000000004")


def test_smi_summary_keeps_busy_samples_inside_the_windows(tmp_path):
    t0 = 1_764_000_000.0
    log = tmp_path / "smi.csv"
    log.write_text("\n".join([
        _line(t0 - 1.0, 1980, 650.0),  # before every window
        _line(t0 + 0.1, 1400, 690.0),
        _line(t0 + 0.2, 1300, 50.0),  # inside, idle: dropped
        _line(t0 + 0.3, 1500, 680.0),
        _line(t0 + 5.1, 1200, 695.0),  # second window
        _line(t0 + 9.0, 1980, 700.0),  # after
    ]) + "\n")
    smi = steady.SmiLog.__new__(steady.SmiLog)
    smi.proc, smi.path = None, str(log)
    got = smi.summary([dict(start=t0, end=t0 + 0.5), dict(start=t0 + 5.0, end=t0 + 5.5)])
    assert got == dict(sm_mhz=1400, power_w=690.0, smi_samples=3)
    assert smi.summary([dict(start=t0 + 20, end=t0 + 21)]) == {}
    no_log = steady.SmiLog.__new__(steady.SmiLog)
    no_log.proc, no_log.path = None, None
    assert no_log.summary([dict(start=t0, end=t0 + 1)]) == {}


def test_markdown_has_a_line_per_row_and_error_rows():
    rows = [
        dict(m=8, k=128, n=128, family="tensor", impl="mxprec", tflops=1.0, tflops_rounds=[1.0, 1.1],
             ratio_vs_torch=0.99, rel_diff_vs_torch=0.0, rel_err_vs_reference=1e-3, sm_mhz=1400, power_w=690.0),
        dict(m=8, k=128, n=128, family="tensor", impl="torch", tflops=1.0, tflops_rounds=[1.0],
             ratio_vs_torch=1.0, rel_diff_vs_torch=None, rel_err_vs_reference=1e-3),
        dict(m=8, k=1152, n=128, family="block", error="Invalid scaling configuration."),
    ]
    md = steady.markdown(dict(device="GPU", command="c", date="d", jax="j", torch="t", rows=rows))
    table = [line for line in md.splitlines() if line.startswith("| 8×")]
    assert len(table) == 3
    assert all(line.count("|") == 11 for line in table)
    assert "| 0.99 | 1400 | 690.0 | 0.0 | 0.001 |" in table[0]
    assert "error: Invalid scaling configuration." in table[2]


def test_timed_window_runs_about_the_window():
    calls, synced = [], []

    def fn():
        time.sleep(0.002)
        calls.append(1)
        return len(calls)

    got = steady.gemm_bench.timed_window(fn, synced.append, 0.05)
    assert got["calls"] >= 5 and len(calls) == 3 + 5 + got["calls"]
    assert synced == [3, 8, len(calls)]  # each phase ends synchronised on its last output
    assert got["t"] >= 0.002 and got["end"] - got["start"] >= got["calls"] * 0.002
