"""noloco.infra.jit: numba's machine code cached in the toolkit's cache, keyed by the sources, and never
beside the sources (where numba would fall back to, and where an edit to another file leaves it
stale)."""

from pathlib import Path

import pytest

from noloco.infra import jit
from noloco.infra.cache import source_hash

numba = None  # the [fast] extra, imported when a test runs (not when the tests are collected)


@pytest.fixture(autouse=True, scope="module")
def _numba():
    global numba
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


# ------------------------------------------------------------------ the cache's trust model (issue 22)

import errno  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class _Payload:
    """Unpickling this creates the file ``path``: what a planted cache index could do (run any code)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def _plant(cache_root: Path, marker: Path) -> list:
    """Replace every numba index under ``cache_root`` by the payload; the files replaced."""
    planted = sorted(cache_root.rglob("*.nbi"))
    assert planted, "nothing was cached to plant into"
    for index in planted:
        index.write_bytes(pickle.dumps(_Payload(marker)))
    return planted


def _cached_twice(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("NOLOCO_CACHE", str(cache))
    assert _compiled_twice()(21) == 42
    return cache


def _group_writable(cache: Path, monkeypatch) -> None:
    cache.chmod(0o770)


def _numba_group_writable(cache: Path, monkeypatch) -> None:
    (cache / "numba").chmod(0o777)


def _other_owner(cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: os.stat(cache).st_uid + 1)  # the folders are someone else's


def _linked(cache: Path, monkeypatch) -> None:
    (cache / "numba").rename(cache / "elsewhere")
    (cache / "numba").symlink_to(cache / "elsewhere")


def _file_group_writable(cache: Path, monkeypatch) -> None:
    for index in cache.rglob("*.nbi"):
        index.chmod(0o664)


@pytest.mark.parametrize("untrust", [_group_writable, _numba_group_writable, _other_owner, _linked,
                                     _file_group_writable], ids=lambda f: f.__name__.strip("_"))
def test_a_planted_index_outside_a_private_folder_chain_is_never_unpickled(tmp_path, monkeypatch, untrust):
    cache = _cached_twice(tmp_path, monkeypatch)
    marker = tmp_path / "marker"
    _plant(cache, marker)
    untrust(cache, monkeypatch)
    assert _compiled_twice()(4) == 8      # compiled afresh, nothing read
    assert not marker.exists()


def test_a_private_cache_is_read_back_and_a_planted_index_in_it_is_not(tmp_path, monkeypatch):
    """A second dispatcher loads the first one's machine code from a private folder chain; a pickled call
    planted as the index in that same chain (right uid, mode 0700: a cache restored with ``cp -a``) is not
    what this toolkit wrote, so it is recompiled, never unpickled (issue 34: before, numba ran it), and the
    rewritten index is read back by the next dispatcher."""
    cache = _cached_twice(tmp_path, monkeypatch)
    second = _compiled_twice()
    assert second(5) == 10 and second.stats.cache_hits and not second.stats.cache_misses
    _plant(cache, tmp_path / "marker")
    third = _compiled_twice()
    assert third(1) == 2 and third.stats.cache_misses
    assert not (tmp_path / "marker").exists()
    fourth = _compiled_twice()
    assert fourth(3) == 6 and fourth.stats.cache_hits and not fourth.stats.cache_misses


def _sign_payload(cache: Path, marker: Path) -> list:
    """Every index under ``cache`` replaced by the payload signed with that cache's own secret, as this toolkit
    would have written it there: in that cache, on this machine, it is trusted."""
    from noloco.infra.cache import signed_bytes, user_key

    indexes = sorted(cache.rglob("*.nbi"))
    assert indexes
    for index in indexes:
        index.write_bytes(signed_bytes(user_key(), str(index.relative_to(cache)), pickle.dumps(_Payload(marker))))
    return indexes


def test_a_cache_copied_with_cp_a_is_recompiled_even_when_its_files_are_signed(tmp_path, monkeypatch):
    """A whole cache, secret and signed index included, restored with ``cp -a`` (same uid, same modes): the
    secret is bound to the inode it was made on, so nothing of the copy verifies and the payload never runs.
    The control: in the cache it was signed in, the same payload is unpickled (the signature is right)."""
    cache = _cached_twice(tmp_path, monkeypatch)
    marker = tmp_path / "marker"
    _sign_payload(cache, marker)
    copy = tmp_path / "restored"
    subprocess.run(["cp", "-a", str(cache), str(copy)], check=True)
    monkeypatch.setenv("NOLOCO_CACHE", str(copy))
    compiled = _compiled_twice()
    assert compiled(4) == 8 and compiled.stats.cache_misses
    assert not marker.exists()
    again = _compiled_twice()  # the copy now holds a new secret and what this process wrote with it
    assert again(2) == 4 and again.stats.cache_hits and not again.stats.cache_misses
    monkeypatch.setenv("NOLOCO_CACHE", str(cache))
    _compiled_twice()(1)
    assert marker.exists()


@pytest.mark.parametrize("content", [b"\x80\x04\x95\x10", b"", b"not a pickle at all"],
                         ids=["truncated pickle", "empty", "text"])
def test_a_damaged_index_is_rebuilt_not_an_error(tmp_path, monkeypatch, content):
    """An index that is not a pickle at all (issue 34: ``UnpicklingError: pickle data was truncated``, an internal
    error, exit 3) is recompiled and rewritten; the next dispatcher reads the new one."""
    cache = _cached_twice(tmp_path, monkeypatch)
    for index in cache.rglob("*.nbi"):
        index.write_bytes(content)
    assert _compiled_twice()(4) == 8
    again = _compiled_twice()
    assert again(2) == 4 and again.stats.cache_hits


def test_the_secret_is_private_and_bound_to_its_file(tmp_path, monkeypatch):
    from noloco.infra.cache import KEY_NAME, user_key

    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "cache"))
    key = user_key()
    path = tmp_path / "cache" / KEY_NAME
    assert len(key) == 32 and oct(path.stat().st_mode & 0o777) == "0o600" and user_key() == key
    copy = path.with_name("copy")  # the same words in another file (another inode): a copy, not the secret made here
    copy.write_text(path.read_text())
    copy.chmod(0o600)
    copy.replace(path)
    assert user_key() not in (None, key)


def test_made_folders_are_private(tmp_path, monkeypatch):
    cache = _cached_twice(tmp_path, monkeypatch)
    chain = [cache, cache / "numba", cache / "numba" / source_hash()]
    chain.append(next(p for p in chain[-1].iterdir()))
    assert [oct(p.stat().st_mode & 0o777) for p in chain] == ["0o700"] * 4


@pytest.mark.parametrize("failure", ["full disk", "numba folder is a file"])
def test_a_cache_that_cannot_be_written_only_costs_the_compile(tmp_path, monkeypatch, failure):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path))
    if failure == "full disk":
        from numba.core import caching

        def full(self, *args):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(caching.IndexDataCacheFile, "_open_for_write", full)  # every write of the cache
    else:
        (tmp_path / "numba").write_text("")
    compiled = _compiled_twice()
    assert compiled(21) == 42 and compiled.stats.cache_misses
    assert not _index_files(tmp_path)


def _numba_index(function, cache: Path) -> Path:
    """The index file numba reads for ``function`` in the toolkit's cache under ``cache`` (numba's own
    FunctionCache names it, with the folder noloco.infra.jit gives numba)."""
    from numba.core.caching import FunctionCache

    _, parts = jit.cache_folders(function)
    previous, numba.config.CACHE_DIR = numba.config.CACHE_DIR, str(cache.joinpath(*parts[:2]))
    try:
        return Path(FunctionCache(function)._cache_file._index_path)
    finally:
        numba.config.CACHE_DIR = previous


def test_the_commands_compiled_path_never_reads_a_shared_cache(tmp_path):
    """`NOLOCO_JIT=1 noloco simulate` (the exact inner phase's compiled outer step) in a fresh process, with
    a payload planted as the index of each of its three compiled functions in a group-writable cache: the
    command succeeds and the payload never runs. Afterwards numba's own index loader runs it (so it sat
    where numba looks)."""
    from noloco.quadratic import fused
    from noloco.theory.outer import outer_arithmetic

    cache, marker = tmp_path / "cache", tmp_path / "marker"
    indexes = [_numba_index(f, cache) for f in (outer_arithmetic, fused._mean_of_rows_py, fused._exact_step)]
    for index in indexes:
        index.write_bytes(pickle.dumps(_Payload(marker)))
    cache.chmod(0o775)
    env = {**os.environ, "NOLOCO_CACHE": str(cache), "NOLOCO_JIT": "1", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "noloco", "simulate", "--trials", "4", "--outer-steps", "3", "--no-cache"]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert not marker.exists()
    assert all(index.read_bytes() == pickle.dumps(_Payload(marker)) for index in indexes)  # not rewritten either
    with open(indexes[0], "rb") as handle:
        pickle.load(handle)
    assert marker.exists()


def test_ctrl_c_while_numba_compiles_is_not_swallowed(tmp_path, monkeypatch):
    """Ctrl-C that lands while numba compiles stops the work once the call returns. LLVM calls back into
    Python while compiling (numba's object cache), and a KeyboardInterrupt raised inside a ctypes callback is
    only printed ("Exception ignored on calling ctypes callback") and the run went on (issue 22: one Ctrl-C in
    fifteen of a fresh ``noloco simulate`` was lost). Here the signal is raised inside such a callback."""
    import ctypes
    import signal

    from numba.core.dispatcher import Dispatcher

    from noloco.infra.entry import termination_as_interrupt

    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path))
    compile_for = Dispatcher.compile
    ctrl_c_in_a_callback = ctypes.CFUNCTYPE(None)(lambda: signal.raise_signal(signal.SIGINT))

    def compile_interrupted(self, sig):
        ctrl_c_in_a_callback()  # its handler runs inside the callback, as inside LLVM's
        return compile_for(self, sig)

    monkeypatch.setattr(Dispatcher, "compile", compile_interrupted)
    with termination_as_interrupt(), pytest.raises(KeyboardInterrupt):
        _compiled_twice()(21)


# ------------------------------------------------------------------ a cache root that is a system folder (issue 34)

@pytest.mark.parametrize("folder", ["/", "/etc", "/usr", "/usr/lib/x", "/tmp", "/root", "/proc/self", "/var/lib/x"])
def test_a_system_folder_is_no_cache_root(folder):
    from noloco.infra.cache import system_folder

    assert system_folder(folder)


@pytest.mark.parametrize("folder", ["/tmp/x", "/root/.cache/noloco", "/var/cache/noloco", "/home/u/c"])
def test_a_folder_of_ones_own_is_a_cache_root(folder):
    from noloco.infra.cache import system_folder

    assert not system_folder(folder)


def test_a_link_to_the_root_folder_is_no_cache_root(tmp_path):
    from noloco.infra.cache import system_folder

    (tmp_path / "root").symlink_to("/")
    assert system_folder(tmp_path / "root")


@pytest.mark.parametrize("argv", [["simulate", "--trials", "4", "--outer-steps", "3"],
                                  ["figs", "--quick", "--only", "transient", "--out", "{tmp}/figs"]])
@pytest.mark.parametrize("root", ["/proc", "/sys/kernel"])
def test_a_system_cache_root_is_refused_with_one_line(tmp_path, monkeypatch, capsys, argv, root):
    """``NOLOCO_CACHE=/`` as root made ``/simulate`` and ``/numba`` (issue 34); here folders no one can write
    (so that the test, run before the fix, wrote nothing either: the cache then only cost the computation)."""
    from noloco.cli import main

    monkeypatch.setenv("NOLOCO_CACHE", root)
    capsys.readouterr()
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"NOLOCO_CACHE='{root}' cannot be a cache" in err[0], err
    assert not (tmp_path / "figs").exists()  # refused before any work
