"""The one cache (:func:`noloco.infra.cache.cached`) as `noloco simulate` and `noloco figs` use it:
keyed by the request and every project source, rebuilt when an entry is bad, harmless
when its folder cannot be written, and never inside the repository."""

import os
import shutil
from pathlib import Path

import pytest

from noloco.paper_figs.run import make
from noloco.quadratic.compare import cached_compare
from noloco.quadratic.sim_config import SimConfig
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
    run = lambda: make("stability", quick=True, out=tmp_path / "out", cache_dir=tmp_path / "cache").cached
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
    assert not make("stability", quick=True, out=tmp_path / "out", cache_dir=cache).cached
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
    assert not make("stability", quick=True, out=tmp_path / "out").cached
    assert files() - before == set()
    home = tmp_path / "home" / ".cache" / "noloco"
    assert [p.parent.name for p in sorted(home.glob("*/*.json"))] == ["figure-stability", "simulate"]


# ------------------------------------------------------------------ entries that are not what they seem (issue 22)

from places import within  # noqa: E402 (tests/places.py)




def _deep(depth: int = 100_000) -> str:
    return '{"schema_version": 2, "data": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("kind", ["named pipe", "symbolic link", "deeply nested", "edited data", "a folder"])
def test_an_entry_that_is_not_a_plain_entry_is_rebuilt_without_blocking(tmp_path, capsys, kind):
    cache = tmp_path / "cache"
    result, _ = cached_compare(SMALL, directory=cache)
    path = cache_module.cache_path("simulate", SMALL.as_dict(), cache)
    entry = path.read_text()
    path.unlink()
    if kind == "named pipe":
        os.mkfifo(path)
    elif kind == "symbolic link":  # a link to a valid entry: never followed
        (tmp_path / "elsewhere.json").write_text(entry)
        path.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "deeply nested":
        path.write_text(_deep())
    elif kind == "edited data":  # the right JSON and a plausible shape, but not what was computed
        doc = files.loads(entry)
        doc["data"]["summary"]["stationary_variance_mc"] = 123.0
        path.write_text(files.dumps(doc))
    else:
        path.mkdir()
        (path / "x").write_text("")
    capsys.readouterr()
    with within(60):
        assert cached_compare(SMALL, directory=cache) == (result, False)
    warning = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warning) == 1 and str(path) in warning[0] and "warning" in warning[0], warning


def test_a_full_cache_disk_only_costs_the_computation(tmp_path, monkeypatch, capsys):
    def full(path, write):
        raise files.DataError(f"cannot write {path} (No space left on device)")
    monkeypatch.setattr(files, "atomic_write", full)
    assert cached_compare(SMALL, directory=tmp_path / "cache")[1] is False
    assert capsys.readouterr().err == ""


def _forge(path, change, keyed: bool = True) -> None:
    """Edit the entry's data with ``change(data)`` and recompute its checksum and, where ``keyed``, its keyed
    digest with this user's secret: an entry written by another version's bug, which only the shape check
    finds. Without ``keyed``: a hand edit with the plain sha256 recomputed, which anyone can do."""
    import hashlib

    doc = files.loads(path.read_text())
    change(doc["data"])
    doc["sha256"] = hashlib.sha256(files.dumps(doc["data"]).encode()).hexdigest()
    if keyed:
        doc["hmac"] = cache_module.entry_document(doc["namespace"], doc["key"], doc["data"],
                                                  cache_module.user_key())["hmac"]
    path.write_text(files.dumps(doc))


def test_a_figure_entry_edited_with_its_checksum_recomputed_is_recomputed_with_a_warning(tmp_path, capsys):
    """Issue 34: `noloco figs --cache DIR` drew an entry whose data had been edited (its sha256 recomputed, as
    anyone can) as if it were the computed result, with no warning. The keyed digest finds the edit."""
    from noloco.cli import main

    argv = ["figs", "--quick", "--only", "transient", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "figs")]
    assert main(argv) == 0
    path = next((tmp_path / "c").glob("figure-transient/*.json"))
    computed = files.loads(path.read_text())["data"]
    _forge(path, lambda d: d["cases"][0].update(mc=[2 * x for x in d["cases"][0]["mc"]]), keyed=False)  # draws
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.strip()]
    assert len(err) == 1 and str(path) in err[0] and "keyed digest does not match" in err[0], err
    assert "(cache)" not in captured.out and files.loads(path.read_text())["data"] == computed  # recomputed
    assert main(argv) == 0 and "(cache)" in capsys.readouterr().out


def test_an_entry_keyed_with_another_secret_is_recomputed(tmp_path, monkeypatch, capsys):
    """An entry written under another user's (or machine's) secret, exactly as this toolkit writes one there."""
    cache = tmp_path / "cache"
    result, _ = cached_compare(SMALL, directory=cache)
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "elsewhere"))  # another secret
    capsys.readouterr()
    assert cached_compare(SMALL, directory=cache) == (result, False)
    assert "keyed digest does not match" in capsys.readouterr().err
    assert cached_compare(SMALL, directory=cache) == (result, True)


def test_without_a_private_root_for_the_secret_nothing_is_cached(tmp_path, monkeypatch, capsys):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)  # a cache root others can write: no secret is kept there
    monkeypatch.setenv("NOLOCO_CACHE", str(root))
    assert cache_module.user_key() is None
    assert cached_compare(SMALL, directory=tmp_path / "c") == cached_compare(SMALL, directory=tmp_path / "c")
    assert not cached_compare(SMALL, directory=tmp_path / "c")[1] and not (tmp_path / "c").exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("change", [lambda d: d.update(summary={"x": 1}),
                                    lambda d: d["trajectories"].update(mean_distance={"mc": "x"}),
                                    lambda d: d["effective"].pop("outer")],
                         ids=["summary", "trajectories", "effective"])
def test_an_entry_with_its_checksum_but_a_shape_its_reader_cannot_use_is_rebuilt(tmp_path, capsys, change):
    cache = tmp_path / "cache"
    result, _ = cached_compare(SMALL, directory=cache)
    path = cache_module.cache_path("simulate", SMALL.as_dict(), cache)
    _forge(path, change)
    capsys.readouterr()
    assert cached_compare(SMALL, directory=cache) == (result, False)
    warning = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warning) == 1 and str(path) in warning[0] and "unexpected content" in warning[0], warning


def test_a_shape_check_that_raises_counts_as_a_wrong_shape(tmp_path, capsys):
    def valid(data):
        return data["missing"]  # KeyError: the reader could not use it

    cache_module.cached("x", {"a": 1}, lambda: {"b": 2}, directory=tmp_path)
    assert cache_module.cached("x", {"a": 1}, lambda: {"b": 3}, directory=tmp_path, valid=valid) == ({"b": 3}, False)
    assert "unexpected content" in capsys.readouterr().err


def test_a_figure_whose_cached_data_does_not_draw_is_recomputed(tmp_path, monkeypatch, capsys):
    from noloco.cli import main

    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "cache"))
    argv = ["figs", "--quick", "--only", "transient", "--out", str(tmp_path / "figs")]
    assert main(argv) == 0
    path = next((tmp_path / "cache").glob("figure-transient/*.json"))
    _forge(path, lambda d: d.update(steps="x"))
    capsys.readouterr()
    assert main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("noloco: warning: figure transient: its cached data does not draw"), err
    assert main(argv) == 0 and "(cache)" in capsys.readouterr().out  # rebuilt: read back the next time
