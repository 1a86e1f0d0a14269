"""mxprec.xla_flags: IEEE FP32 division for XLA's GPU programs, requested at ``import mxprec``."""

import os
import subprocess
import sys
import warnings

import jax
import pytest

from mxprec import xla_flags

FLAG = "--xla_backend_extra_options=-nvptx-prec-divf32=2"
SET = xla_flags.with_native_fusion_emitters(FLAG)  # what import mxprec adds (with the autotuner flag on jaxlib 0.10 / 0.11)


@pytest.mark.parametrize("before, after", [
    ("", FLAG),
    ("--xla_force_host_platform_device_count=8", "--xla_force_host_platform_device_count=8 " + FLAG),
    ("--xla_backend_extra_options=-foo=1", "--xla_backend_extra_options=-foo=1,-nvptx-prec-divf32=2"),
    ("--xla_backend_extra_options=", FLAG),
    (FLAG, FLAG),
    ("--xla_backend_extra_options=-nvptx-prec-divf32=1", "--xla_backend_extra_options=-nvptx-prec-divf32=1"),
])
def test_with_ieee_division_adds_or_merges_the_llvm_option(before, after):
    assert xla_flags.with_ieee_division(before) == after


def _import_in_fresh_python(env_extra: dict, prelude: str = "") -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", xla_flags.OPT_OUT_ENV)}
    env.update(env_extra)
    code = (f"{prelude}\nimport os, mxprec\nfrom mxprec import xla_flags\n"
            "print(xla_flags.STATE, '|', os.environ.get('XLA_FLAGS', ''))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_sets_the_flag_before_any_backend_starts():
    assert _import_in_fresh_python({"XLA_FLAGS": "--xla_dump_hlo_as_text"}) == (
        f"set | --xla_dump_hlo_as_text {SET}")


@pytest.mark.parametrize("before, version, after", [
    ("", "0.11.2", xla_flags.FUSION_AUTOTUNER_FLAG),
    ("--a", "0.10.2", f"--a {xla_flags.FUSION_AUTOTUNER_FLAG}"),
    ("--a", "0.12.0", "--a"),  # not checked there: an unknown flag would abort XLA
    ("--a", "0.9.1", "--a"),
    ("--a", "dev", "--a"),
    ("--xla_gpu_experimental_enable_fusion_autotuner=true", "0.11.2",
     "--xla_gpu_experimental_enable_fusion_autotuner=true"),  # the user's choice stands
])
def test_native_fusion_emitters_flag_only_where_checked(before, version, after):
    assert xla_flags.with_native_fusion_emitters(before, version) == after


def test_this_jaxlib_parses_the_fusion_autotuner_flag():
    """The installed jaxlib starts a backend with the flag (an unknown flag would abort the process)."""
    import jaxlib

    if tuple(int(p) for p in jaxlib.__version__.split(".")[:2]) not in xla_flags.FUSION_AUTOTUNER_JAXLIB:
        pytest.skip(f"jaxlib {jaxlib.__version__}: the flag is not added there")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = xla_flags.FUSION_AUTOTUNER_FLAG
    subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.ones(1).block_until_ready()"], env=env,
                   check=True, capture_output=True)


def test_opt_out_and_too_late_leave_xla_flags_alone():
    assert _import_in_fresh_python({xla_flags.OPT_OUT_ENV: "0"}) == "opted_out |"
    assert _import_in_fresh_python({}, "import jax.numpy as jnp; jnp.ones(1).block_until_ready()") == "too_late |"
    assert _import_in_fresh_python({"XLA_FLAGS": FLAG}) == f"user | {FLAG}"
    other = "--xla_backend_extra_options=-nvptx-prec-divf32=1"
    assert _import_in_fresh_python({"XLA_FLAGS": other}) == f"user_other | {other}"


@pytest.mark.parametrize("plugins, started, want", [
    (set(), False, "set"), ({"cuda"}, False, "set"), ({"cuda", "rocm"}, False, "set"), ({"rocm"}, False, "not_cuda"),
    ({"cuda"}, True, "too_late")])
def test_request_depends_on_the_plugins_and_the_backends(monkeypatch, plugins, started, want):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_hlo_as_text")
    monkeypatch.delenv(xla_flags.OPT_OUT_ENV, raising=False)
    monkeypatch.setattr(xla_flags, "_gpu_plugins", lambda: plugins)
    monkeypatch.setattr(xla_flags, "_backends_started", lambda: started)
    assert xla_flags.request_ieee_division() == want
    assert (os.environ["XLA_FLAGS"] == "--xla_dump_hlo_as_text " + SET) == (want == "set")


def test_this_test_process_divides_with_ieee_division():
    assert xla_flags.ieee_division_in_effect(), xla_flags.STATE


@pytest.mark.parametrize("state, backend, warns", [
    ("too_late", "gpu", True), ("opted_out", "gpu", True), ("set", "gpu", False), ("too_late", "cpu", False),
    ("not_cuda", "gpu", False), ("user_other", "gpu", True)])
def test_the_xla_quantizer_warns_once_on_a_gpu_without_ieee_division(monkeypatch, state, backend, warns):
    monkeypatch.setattr(xla_flags, "STATE", state)
    monkeypatch.setattr(xla_flags, "_warned", False)
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xla_flags.warn_if_gpu_division_inexact()
        xla_flags.warn_if_gpu_division_inexact()
    assert [w.category for w in caught] == ([xla_flags.XlaGpuDivisionWarning] if warns else [])


def test_info_reports_the_division_state():
    import mxprec

    assert f"XLA GPU FP32 division: IEEE (div.rn) [{xla_flags.STATE}]" in mxprec.info()
