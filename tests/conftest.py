"""Strict test configuration (equinox-style): strict dtype promotion, no rank promotion, 8 CPU devices."""

import os
import shutil
import subprocess

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


@pytest.fixture
def host_cxx_check(tmp_path):
    """run(src, include) compiles the C++17 host check `src` (-Wall -Wextra -Werror, -I include), runs it and
    returns ({name: (cases, mismatches)} from its "NAME CASES MISMATCHES" lines, its stdout, its exit code).
    Skips the test without a C++ compiler (g++ / c++ / clang++, or $CXX)."""
    if CXX is None:
        pytest.skip("no C++ compiler (g++ / c++ / clang++) on PATH")

    def run(src, include):
        exe = str(tmp_path / os.path.splitext(os.path.basename(src))[0])
        subprocess.run([CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-I" + include, src, "-o", exe],
                       check=True)
        r = subprocess.run([exe], capture_output=True, text=True, check=False)
        counts = {ln.split()[0]: (int(ln.split()[1]), int(ln.split()[2]))
                  for ln in r.stdout.splitlines() if not ln.startswith("MISMATCH")}
        return counts, r.stdout, r.returncode

    return run
