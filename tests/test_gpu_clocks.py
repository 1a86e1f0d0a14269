"""benchmarks/gpu_clocks.py: the per-arm clock / power summary behind benchmarks/results/h200_llama_clocks.md."""

from __future__ import annotations

import datetime
import importlib.util
import json
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_clocks.py"
_spec = importlib.util.spec_from_file_location("gpu_clocks", _PATH)
clocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clocks)

_HEADER = ("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
           "clocks_event_reasons.active")


def _line(t: float, mhz: int, watts: float, reasons: str) -> str:
    stamp = datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {mhz} MHz, 3201 MHz, {watts} W, 60, {reasons}"


def test_only_busy_samples_inside_the_steps_window_count(tmp_path):
    t0 = 1_764_000_000.0
    log = tmp_path / "smi.csv"
    log.write_text("\n".join([
        _HEADER,
        _line(t0 - 1.0, 1980, 650.0, "0x0000000000000004"),  # before the window (compiling)
        _line(t0 + 0.1, 1980, 120.0, "0x0000000000000000"),  # inside but idle: dropped
        _line(t0 + 0.2, 1500, 690.0, "0x0000000000000004"),
        _line(t0 + 0.3, 1600, 700.0, "0x0000000000000004"),
        _line(t0 + 0.4, 1700, 500.0, "0x0000000000000000"),
        "not a sample line",
        _line(t0 + 9.0, 1980, 690.0, "0x0000000000000004"),  # after the window (profiling)
    ]) + "\n")
    run = tmp_path / "clocks_fp8"
    run.mkdir()
    row = {"arm": "fp8", "step_s_mean": 0.16, "step_times_s": [0.15, 0.16, 0.17], "steps_unix": [t0, t0 + 1.0]}
    (run / "llama_x.json").write_text(json.dumps({"rows": [row]}))
    out = tmp_path / "clocks.json"
    clocks.main(["--log", str(log), "--runs", str(run), "--out", str(out)])
    (r,) = json.loads(out.read_text())["rows"]
    assert r["busy_samples"] == 3
    assert r["sm_mhz"] == {"min": 1500, "median": 1600, "max": 1700}
    assert r["power_w"]["median"] == 690.0
    assert r["power_capped_fraction"] == round(2 / 3, 3)
    assert r["step_s_median"] == 0.16


def test_per_step_clocks_place_the_steps_back_from_the_window_end():
    t0 = 1_764_000_000.0
    # two steps of 0.2 s ending at t0 + 1.0: [t0 + 0.6, t0 + 0.8] and [t0 + 0.8, t0 + 1.0]; a third of 0.2 s before
    samples = [(t0 + 0.45, 1800, 690.0, 60, "0x4"), (t0 + 0.65, 1400, 690.0, 60, "0x4"),
               (t0 + 0.75, 1500, 690.0, 60, "0x4"), (t0 + 0.9, 1700, 690.0, 60, "0x4")]
    out = clocks.per_step_clocks(samples, t0 + 1.0, [0.2, 0.2, 0.2])
    assert out["step_sm_mhz"] == [1800.0, 1450.0, 1700.0]
    assert out["corr_step_time_sm_clock"] is None  # equal step times: no correlation to speak of
    out = clocks.per_step_clocks(samples, t0 + 1.0, [0.19, 0.2, 0.21])
    assert out["step_sm_mhz"][1:] == [1450.0, 1700.0]
