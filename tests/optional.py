"""Optional heavy packages (torch and what imports it) imported when a test first uses them, not when the tests
are collected: collecting every test file stays free of torch's seconds of imports."""

from __future__ import annotations

import importlib
import importlib.util

import pytest


class LazyModule:
    """``torch = LazyModule("torch")``: the module, imported at the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            # what pytest's collection asks of every module-level object (__bases__, __test__, ...): not the
            # module's, so collecting does not import it
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def installed(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it."""
    return importlib.util.find_spec(name) is not None


#: skips a test (or, as ``pytestmark``, a module) where torch is not installed, as ``importorskip`` did
needs_torch = pytest.mark.skipif(not installed("torch"), reason="torch is not installed (the [llm] extra)")
