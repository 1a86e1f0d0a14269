"""Lazy loading of a native mxprec library and registration of its FFI targets (one place).

Each backend module (``cuda``, ``hip``) describes its library with a :class:`NativeLibrary`; the
first ``load()`` checks the platform precondition, finds the file, loads it with ctypes (C-ABI
handler symbols, so one build serves every Python version) and registers each target with
``jax.ffi.register_ffi_target``. The outcome, success or the reason for failure, is cached.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import threading
from collections.abc import Callable

import jax


class NativeLibrary:
    """A native library: file name, ``{ffi target: C symbol}``, XLA platform, how to build it."""

    def __init__(self, *, file: str, symbols: dict, platform: str, build_hint: str,
                 build_dirs: tuple = ("build",), precondition: Callable[[], str | None] | None = None,
                 env_var: str | None = None):
        self.file = file
        self.symbols = dict(symbols)
        self.platform = platform
        self.build_hint = build_hint
        self.build_dirs = tuple(build_dirs)
        self.precondition = precondition  # returns None when usable here, else the reason
        self.env_var = env_var  # names an explicit library path that replaces the search
        self.state: dict = {}  # "result" -> (lib | None, reason)
        self._lock = threading.Lock()

    def search_paths(self) -> list[pathlib.Path]:
        """``$env_var`` alone when set; else the package's ``_lib/``, then (checkouts) the build folders."""
        explicit = os.environ.get(self.env_var) if self.env_var else None
        if explicit:
            return [pathlib.Path(explicit)]
        pkg = pathlib.Path(__file__).resolve().parent.parent  # .../mxprec
        paths = [pkg / "_lib" / self.file]
        root = pkg.parent.parent
        if (root / "pyproject.toml").is_file() and (root / "src" / "mxprec") == pkg:
            paths += [root / d / self.file for d in self.build_dirs]
        return paths

    def load(self) -> tuple[ctypes.CDLL | None, str]:
        """(library, "") once loaded and registered, else (None, reason). Cached."""
        with self._lock:
            if "result" not in self.state:
                self.state["result"] = self._load_uncached()
            return self.state["result"]

    def _load_uncached(self) -> tuple[ctypes.CDLL | None, str]:
        reason = self.precondition() if self.precondition else None
        if reason:
            return None, reason
        paths = self.search_paths()
        found = next((p for p in paths if p.is_file()), None)
        if found is None:
            looked = ", ".join(str(p) for p in paths)
            return None, f"{self.file} not found (looked in {looked}); build it with {self.build_hint}"
        try:
            lib = ctypes.CDLL(str(found))
            for target, symbol in self.symbols.items():
                jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform=self.platform)
        except (OSError, AttributeError, RuntimeError, ValueError) as e:
            return None, f"{found} failed to load: {e}; rebuild it with {self.build_hint}"
        return lib, ""

    def available(self) -> bool:
        return self.load()[0] is not None

    def require(self, what: str) -> None:
        """Loads the library or raises RuntimeError naming ``what`` and how to build it."""
        lib, reason = self.load()
        if lib is None:
            raise RuntimeError(f"{what} are unavailable: {reason}")
