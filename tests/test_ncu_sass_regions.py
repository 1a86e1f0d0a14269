"""benchmarks/ncu_sass_regions.py: the stall-sample split behind benchmarks/results/h200_ncu_gemm.md."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "ncu_sass_regions.py"
_spec = importlib.util.spec_from_file_location("ncu_sass_regions", _PATH)
regions_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regions_mod)


def _write(path, rows):
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])  # ncu's first line
        w.writerow(header)
        for i, (src, samples, executed) in enumerate(rows):
            w.writerow([hex(i * 16), src, samples, executed])


def test_regions_split_the_samples(tmp_path, capsys):
    path = str(tmp_path / "k.csv.gz")
    _write(path, [("LDC R1, c[0x0]", 1, 1), ("QGMMA.64x96x32", 6, 100), ("@P0 BRA 0x10", 2, 100),
                  ("STSM.16.M88.4", 1, 10), ("UTMALDG.3D", 0, 50)])
    instrs = regions_mod.load(path)
    assert [s for s, _, _ in instrs] == [1, 6, 2, 1, 0]
    got = regions_mod.regions(instrs, {"mainloop": [(1, 3)], "epilogue": [(3, 4)], "producer": [(4, 5)]})
    assert got == {"mainloop": 80.0, "epilogue": 10.0, "producer": 0.0, "other": 10.0}
    lines = regions_mod.coarse_map(instrs, 2)
    assert len(lines) == 3 and "max_executed=       100" in lines[0] and "BRAx1" in lines[1]
    regions_mod.main([path, "mainloop=1:3,3:4"])
    assert "{'mainloop': 90.0, 'other': 10.0}" in capsys.readouterr().out


def test_bad_region_is_an_error():
    with pytest.raises(SystemExit):
        regions_mod.main(["x.csv", "mainloop"])
