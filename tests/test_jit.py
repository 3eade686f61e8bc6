"""noloco.infra.jit: numba's machine code cached in the toolkit's cache, keyed by the sources, and never
beside the sources (where numba would fall back to, and where an edit to another file leaves it
stale)."""

from pathlib import Path

import pytest

from noloco.infra import jit
from noloco.infra.cache import source_hash

numba = pytest.importorskip("numba")


def _twice(x):
    return 2 * x


def _compiled_twice():
    return jit.compile_with_cache(lambda compile_one: compile_one(_twice))


def _index_files(root):
    return sorted(p.name for p in root.rglob("*.nbi") if "_twice" in p.name)


def test_the_machine_code_is_cached_under_the_toolkit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path))
    assert _compiled_twice()(21) == 42
    assert _index_files(tmp_path / "numba" / source_hash())
    assert numba.config.CACHE_DIR != str(tmp_path / "numba" / source_hash())  # restored afterwards


def test_an_unwritable_cache_compiles_without_caching_anywhere(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("NOLOCO_CACHE", str(blocker / "cache"))
    tests = Path(__file__).parent
    before = _index_files(tests)
    assert _compiled_twice()(4) == 8
    assert _index_files(tests) == before   # numba's own fallback would write tests/__pycache__/
