"""The one cache (:func:`noloco.infra.cache.cached`) as `noloco simulate` and `noloco figs` use it:
keyed by the request and every project source, rebuilt when an entry is bad, harmless
when its folder cannot be written, and never inside the repository."""

import os
import shutil
from pathlib import Path

import pytest

from noloco.paper_figs.run import make
from noloco.quadratic.compare import cached_compare
from noloco.quadratic.simulator import SimConfig
from noloco.infra import cache as cache_module, files

REPO = Path(__file__).resolve().parents[1]
SMALL = SimConfig(trials=4, outer_steps=10)


@pytest.fixture
def tree_copy(tmp_path, monkeypatch):
    """A copy of the project's packages that keys the cache in place of the real tree, so a
    test can edit a source file without touching the repository."""
    copy = tmp_path / "tree"
    folders = {}
    for package, folder in cache_module.source_folders().items():
        folders[package] = copy / package
        shutil.copytree(folder, folders[package], ignore=shutil.ignore_patterns("__pycache__", "out"))
    monkeypatch.setattr(cache_module, "source_folders", lambda: folders)
    cache_module.source_hash.cache_clear()
    yield copy
    cache_module.source_hash.cache_clear()


def _edit(path):
    path.write_text(path.read_text() + "\n# an edit that changes no behaviour\n")
    cache_module.source_hash.cache_clear()  # what a new process would see


@pytest.mark.parametrize("edited", ["theory/conditions.py", "paper_figs/common.py", "quadratic/objectives.py"])
def test_editing_any_source_invalidates_a_simulation(tree_copy, tmp_path, edited):
    cache = tmp_path / "cache"
    assert not cached_compare(SMALL, directory=cache)[1]
    assert cached_compare(SMALL, directory=cache)[1]
    _edit(tree_copy / edited)
    assert not cached_compare(SMALL, directory=cache)[1]
    assert cached_compare(SMALL, directory=cache)[1]


@pytest.mark.parametrize("edited", ["paper_figs/common.py", "theory/conditions.py"])
def test_editing_any_source_invalidates_a_figure(tree_copy, tmp_path, edited):
    run = lambda: make("stability", quick=True, out=tmp_path / "out", cache_dir=tmp_path / "cache")["cached"]
    assert not run() and run()
    _edit(tree_copy / edited)
    assert not run() and run()


def _unwritable(tmp_path, kind):
    if kind == "read-only folder":
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        if os.access(folder, os.W_OK):
            pytest.skip("permissions do not bind this user (root)")
        return folder
    blocker = tmp_path / "a-file"  # a folder that cannot be made, whoever runs the test
    blocker.write_text("")
    return blocker / "cache"


@pytest.mark.parametrize("kind", ["read-only folder", "folder under a file"])
def test_an_unwritable_cache_only_costs_the_computation(tmp_path, capsys, kind):
    cache = _unwritable(tmp_path, kind)
    first, hit = cached_compare(SMALL, directory=cache)
    assert not hit and first["summary"]["stationary_variance_mc"] > 0
    second, hit = cached_compare(SMALL, directory=cache)
    assert not hit and second == first
    assert not make("stability", quick=True, out=tmp_path / "out", cache_dir=cache)["cached"]
    assert (tmp_path / "out" / "stability.png").exists()
    assert not (cache.exists() and any(cache.iterdir()))
    assert capsys.readouterr().err == ""


def test_a_read_only_cache_is_still_read(tmp_path):
    cache = tmp_path / "cache"
    result, _ = cached_compare(SMALL, directory=cache)
    for folder in (cache, cache / "simulate"):
        folder.chmod(0o555)
    assert cached_compare(SMALL, directory=cache) == (result, True)
    assert cached_compare(SMALL, directory=cache, refresh=True) == (result, False)


@pytest.mark.parametrize("content", ["{", "[]", "NaN", "wrong shape"])
def test_a_bad_entry_is_rebuilt_with_one_warning_naming_the_file(tmp_path, capsys, content):
    cache = tmp_path / "cache"
    result, _ = cached_compare(SMALL, directory=cache)
    path = cache_module.cache_path("simulate", SMALL.as_dict(), cache)
    if content == "wrong shape":  # a valid entry of this version whose data is not a result
        entry = files.loads(path.read_text())
        entry["data"] = {"summary": 1.0}
        content = files.dumps(entry)
    path.write_text(content)
    capsys.readouterr()
    assert cached_compare(SMALL, directory=cache) == (result, False)
    warning = capsys.readouterr().err.splitlines()
    assert len(warning) == 1 and str(path) in warning[0] and "warning" in warning[0]
    assert cached_compare(SMALL, directory=cache) == (result, True)  # rebuilt
    assert capsys.readouterr().err == ""


def test_nothing_is_written_inside_the_repository(tmp_path, monkeypatch):
    """With neither --cache nor $NOLOCO_CACHE the entries go to ~/.cache/noloco."""
    monkeypatch.delenv("NOLOCO_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    files = lambda: {p for p in REPO.rglob("*") if ".git" not in p.parts and "__pycache__" not in p.parts}
    before = files()
    assert not cached_compare(SMALL)[1]
    assert not make("stability", quick=True, out=tmp_path / "out")["cached"]
    assert files() - before == set()
    home = tmp_path / "home" / ".cache" / "noloco"
    assert [p.parent.name for p in sorted(home.glob("*/*.json"))] == ["figure-stability", "simulate"]
