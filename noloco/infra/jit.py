"""Compiled loops (numba), where numba is installed: the one switch that chooses them and the one way
they are compiled.

Two hot loops have a compiled form: the exact inner phase's outer step (:mod:`noloco.quadratic.fused`) and
a step of the idle-time simulation (:func:`noloco.quadratic.idle.simulate_idle`). Each is used when numba is
installed (``pip install 'noloco-toolkit[fast]'``) and the work is large enough to pay for loading
numba (about 0.5 s a process; compiling, the first time on a machine for a version of the sources,
a few seconds). ``NOLOCO_JIT`` overrides the choice: unset or ``auto`` (by size), ``1`` (always;
without numba a ConfigError, exit 2), ``0`` (never).

The machine code is cached under ``$NOLOCO_CACHE/numba/<hash of the sources>/``, and numba reads its
cache index and code with pickle, which runs whatever code a planted file names. So a file is read only
when it is exactly what this toolkit wrote there on this machine: every index and code file carries a
keyed digest (HMAC-SHA256 with this user's secret, :func:`noloco.infra.cache.user_key`, over its path under
the cache root and its bytes), read once and verified before anything of it is unpickled
(:class:`_SignedCacheFile`). A planted, edited, truncated or moved file, and every file of a cache copied
in (``cp -a``, ``tar -p``: the secret is bound to the inode it was made on), is recompiled and rewritten,
never executed and never an error. The cache is used only where no one but this user can write it
(:func:`noloco.infra.cache.private_folder`): every folder from the cache root down a real folder (no
symbolic link), owned by this user and not writable by group or others (made with mode 0700), and every
file of the function's cache folder a regular file of this user that no one else can write; checked when
the function is compiled and again before every load and every save. Anywhere else (a shared,
group-writable cache, one owned by another uid) the loops are compiled without a cache: a few seconds,
nothing read. A cache that cannot be written (a full disk, a read-only folder) or an entry that cannot be
loaded only costs the compile, never an error.
"""

from __future__ import annotations

import importlib.util
import inspect
import io
import os
import pickle

from noloco.infra.cache import (cache_dir, private_folder, signed_bytes, source_hash, untrusted_reason, user_key,
                                verified)
from noloco.infra.checks import check_choice
from noloco.infra.entry import interrupts_held
from noloco.infra.errors import ConfigError

#: what numba and its compiler add to a process's peak memory (measured: 120 MiB at D = 10000)
COMPILER_BYTES = 128 << 20
#: the values of ``NOLOCO_JIT``
JIT_SETTINGS = ("auto", "1", "0")


def enabled(work: float, threshold: float) -> bool:
    """Whether a run of ``work`` units uses its compiled loop, where ``threshold`` units are what
    it takes for compiling to pay (``NOLOCO_JIT=auto``)."""
    setting = os.environ.get("NOLOCO_JIT") or "auto"
    check_choice("NOLOCO_JIT", setting, JIT_SETTINGS)
    available = importlib.util.find_spec("numba") is not None
    if setting == "1" and not available:
        raise ConfigError("NOLOCO_JIT=1 needs numba: pip install 'noloco-toolkit[fast]' (or unset NOLOCO_JIT)")
    return available and (setting == "1" or (setting == "auto" and work >= threshold))


def cache_folders(function) -> tuple:
    """``(root, parts)``: the cache root and the folders below it where numba keeps ``function``'s
    machine code (``numba``, the sources' hash, numba's own folder name for the function's source file)."""
    from numba.core.caching import _CacheLocator

    return cache_dir(), ("numba", source_hash(), _CacheLocator.get_suitable_cache_subpath(inspect.getfile(function)))


def untrusted(root, parts: tuple) -> str:
    """Why the cache folder ``root/parts...`` must not be read ('' when it may): a folder of the chain or a
    file in the last one that is a link, belongs to another user or that others can write."""
    reason = private_folder(root, *parts, create=False)
    if reason:
        return reason
    folder = os.path.join(root, *parts)
    try:
        names = sorted(os.listdir(folder))
    except OSError as err:
        return f"{folder}: {err.strerror or err}"
    for name in names:
        reason = untrusted_reason(os.path.join(folder, name), "file")
        if reason:
            return reason
    return ""


class _PrivateCache:
    """numba's cache of one function, read and written only while :func:`untrusted` finds nothing wrong
    (checked again before every load and every save); a failed load or save costs only the compile."""

    def __init__(self, cache, root, parts: tuple):
        self._cache, self._root, self._parts = cache, root, parts

    def __getattr__(self, name):  # cache_path, flush, enable, disable: numba's own
        return getattr(self._cache, name)

    def load_overload(self, sig, target_context):
        if untrusted(self._root, self._parts):
            return None
        try:
            return self._cache.load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - an entry numba cannot read (truncated, another version): compile
            return None

    def save_overload(self, sig, data):
        if untrusted(self._root, self._parts):
            return
        try:
            self._cache.save_overload(sig, data)
        except Exception:  # noqa: BLE001 - a full disk, a read-only folder, no secret: the next process compiles again
            pass


def _signed_file_class():
    """:class:`_SignedCacheFile`, made on first use (numba is imported only where it compiles)."""
    global _SignedCacheFile
    if _SignedCacheFile is None:
        from numba.core.caching import IndexDataCacheFile

        class SignedCacheFile(IndexDataCacheFile):
            """numba's index and code files of one function, each written with this user's keyed digest in front
            and read back only where it matches (:func:`noloco.infra.cache.verified`): the bytes are read once,
            verified, and only then unpickled, so no file can be swapped in between. numba's own reader
            unpickles an index as it finds it; an index that is not ours is an empty one here (numba then
            compiles and writes a new one)."""

            def __init__(self, original, root):
                self.__dict__.update(original.__dict__)
                self._root = os.fspath(root)

            def _verified(self, path):
                key = user_key()
                return None if key is None else verified(key, self._name_of(path), path)

            def _name_of(self, path) -> str:  # what the digest covers: a file moved elsewhere does not verify
                return os.path.relpath(path, self._root)

            def _load_index(self):
                payload = self._verified(self._index_path)
                if payload is None:
                    return {}
                try:
                    stream = io.BytesIO(payload)
                    if pickle.load(stream) != self._version:
                        return {}
                    stamp, overloads = pickle.loads(stream.read())
                except Exception:  # noqa: BLE001 - ours but unreadable (another numba's classes): rebuilt
                    return {}
                return overloads if stamp == self._source_stamp else {}

            def _load_data(self, name):
                path = self._data_path(name)
                payload = self._verified(path)
                if payload is None:  # numba's load takes an OSError as a missing file: it compiles
                    raise FileNotFoundError(f"{path} is not a file this toolkit wrote")
                return pickle.loads(payload)

            def _write_signed(self, path, payload: bytes):
                key = user_key()
                if key is None:
                    raise PermissionError(f"no secret to sign {path} with")
                with self._open_for_write(path) as handle:
                    handle.write(signed_bytes(key, self._name_of(path), payload))

            def _save_index(self, overloads):
                self._write_signed(self._index_path, pickle.dumps(self._version, protocol=-1)
                                   + self._dump((self._source_stamp, overloads)))

            def _save_data(self, name, data):
                self._write_signed(self._data_path(name), self._dump(data))

        _SignedCacheFile = SignedCacheFile
    return _SignedCacheFile


_SignedCacheFile = None


def _compile_holding_interrupts(dispatcher):
    """Make ``dispatcher`` compile with Ctrl-C and SIGTERM held (:func:`~noloco.infra.entry.interrupts_held`).
    LLVM calls back into Python while numba compiles: a KeyboardInterrupt raised there is swallowed ("Exception
    ignored on calling ctypes callback") and the run carried on as if no one had asked it to stop. numba compiles
    a call's types through the dispatcher's ``compile``; the calls of the machine code are not held (holding
    costs about 16 us a call: 6 times a small block's compiled outer step)."""
    compile_types = dispatcher.compile

    def compile_held(sig):
        with interrupts_held():
            return compile_types(sig)

    dispatcher.compile = compile_held
    return dispatcher


def compile_with_cache(build, **options):
    """``build(jit)``, where ``jit(f)`` compiles ``f`` with numba (``options``: numba's, such as
    ``nogil=True``), caching the machine code under ``$NOLOCO_CACHE/numba/<hash of the sources>`` where that
    folder chain is this user's alone (module docstring); anywhere else numba compiles in every process,
    with no cache at all (not numba's own fallback, a ``__pycache__`` beside the sources, which another
    edit leaves stale). Every function compiles with interrupts held (:func:`_compile_holding_interrupts`)."""
    import numba
    from numba.core.caching import NullCache

    def njit_cached(f):
        # one folder per version of the sources: numba checks only the compiled function's own file for
        # staleness, not those of the functions it calls (theory/outer.py for noloco.quadratic.fused)
        root, parts = cache_folders(f)
        if private_folder(root, *parts) or untrusted(root, parts):
            return numba.njit(f, **options)
        previous = numba.config.CACHE_DIR
        numba.config.CACHE_DIR = os.path.join(root, *parts[:2])
        try:
            dispatcher = numba.njit(f, cache=True, **options)
        except RuntimeError:  # numba found no place for its cache ("no locator available")
            return numba.njit(f, **options)
        finally:
            numba.config.CACHE_DIR = previous
        cache = dispatcher._cache
        here = os.path.realpath(os.path.join(root, *parts))
        trusted = os.path.realpath(getattr(cache, "cache_path", "") or "") == here
        if trusted:  # every file read through its keyed digest, before numba unpickles anything
            cache._cache_file = _signed_file_class()(cache._cache_file, root)
        # numba falls back to other places when it cannot use ours: then no cache at all
        dispatcher._cache = _PrivateCache(cache, root, parts) if trusted else NullCache()
        return dispatcher

    return build(lambda f: _compile_holding_interrupts(njit_cached(f)))
