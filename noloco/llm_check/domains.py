"""Named domains of the shipped corpus (:mod:`noloco.llm_check.data`): the text a domain-expert ensemble
(:mod:`noloco.studies.ensemble`) trains one expert on.

A document belongs to the domain that names its top-level standard-library module or package
(``stdlib/email/mime/text.py`` and ``stdlib/smtplib.py`` are ``email``); the ``pydoc_data`` topics are the
English prose domain ``docs``; a module no domain names (one a newer Python adds) goes to
:data:`FALLBACK`. The assignment is a function of the document's name, so the split is deterministic and
every document is in exactly one domain. The train/validation split is the corpus's own
(``data._is_val``, by file), so every domain has training and validation text: the table below was
drawn so that each holds at least one validation file (tests/test_hdee.py checks it).

Held-out domains (:data:`HELD_OUT`) are not trained on by anything in the study: the ensemble has no
expert for them and the data-parallel baselines train on the mixture of the :data:`TRAINING` domains.

A *domain spec* (``TrainConfig.domain``, ``--domain``) is one name, a comma-separated list of names
(their union) or ``train`` (every training domain).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Optional

from noloco.infra.errors import ConfigError
from noloco.infra.record import JsonRecord


@dataclass(frozen=True)
class Domain:
    name: str
    description: str
    modules: tuple
    held_out: bool = False


DOMAINS = (
    Domain("docs", "English prose: the pydoc topics (the language reference)", ("pydoc_data",)),
    Domain("encodings", "codec tables and codecs", ("encodings", "codecs", "stringprep")),
    Domain("build", "packaging, installation, import machinery", (
        "distutils", "ensurepip", "venv", "sysconfig", "site", "_sitebuiltins", "zipapp", "py_compile", "compileall",
        "pkgutil", "modulefinder", "runpy", "importlib", "imp", "zipimport", "_aix_support", "_osx_support",
        "_sysconfigdata", "config-", "_bootsubprocess", "__phello__", "__hello__", "this", "antigravity")),
    Domain("language", "Python's own syntax: parsers, bytecode, 2to3, regular expressions", (
        "lib2to3", "ast", "dis", "opcode", "tokenize", "token", "keyword", "symtable", "pyclbr", "tabnanny", "code",
        "codeop", "inspect", "__future__", "re", "sre_constants", "sre_compile", "sre_parse")),
    Domain("concurrency", "asyncio, threads, processes", (
        "asyncio", "concurrent", "multiprocessing", "threading", "_threading_local", "queue", "selectors", "sched",
        "asyncore", "asynchat", "subprocess", "signal", "contextvars")),
    Domain("web", "HTTP, URLs, sockets, servers", (
        "http", "urllib", "wsgiref", "xmlrpc", "socket", "ssl", "socketserver", "cgi", "cgitb", "webbrowser", "ftplib",
        "nntplib", "telnetlib", "ipaddress", "nturl2path", "uuid")),
    Domain("formats", "data formats: json, xml, html, csv, pickle, config files", (
        "json", "xml", "html", "csv", "_markupbase", "plistlib", "configparser", "tomllib", "netrc", "xdrlib", "pickle",
        "pickletools", "_compat_pickle", "shelve", "dbm", "sqlite3", "copyreg")),
    Domain("archives", "archives, compression, audio and image headers, hashes", (
        "zipfile", "tarfile", "gzip", "bz2", "lzma", "_compression", "chunk", "aifc", "wave", "sunau", "sndhdr",
        "imghdr", "hashlib", "hmac", "secrets", "crypt")),
    Domain("core", "the data model and runtime: typing, collections, enum, functools, warnings", (
        "typing", "collections", "_collections_abc", "abc", "_py_abc", "enum", "dataclasses", "functools", "operator",
        "copy", "weakref", "_weakrefset", "contextlib", "types", "linecache", "warnings")),
    Domain("os", "files, paths, processes' environment, ctypes", (
        "os", "posixpath", "ntpath", "genericpath", "pathlib", "shutil", "tempfile", "stat", "filecmp", "fileinput",
        "glob", "fnmatch", "platform", "pty", "tty", "ctypes", "pipes", "struct")),
    Domain("cli", "command-line programs, logging, help and tracebacks", (
        "argparse", "optparse", "getopt", "cmd", "rlcompleter", "getpass", "pydoc", "logging", "traceback")),
    Domain("text", "strings, text I/O, numbers and dates", (
        "string", "textwrap", "difflib", "gettext", "locale", "shlex", "io", "_pyio", "reprlib", "pprint", "_pydecimal",
        "decimal", "fractions", "numbers", "statistics", "random", "datetime", "_strptime", "calendar", "zoneinfo",
        "bisect", "heapq", "graphlib")),
    Domain("gui", "tkinter, IDLE, turtle, curses", (
        "idlelib", "tkinter", "turtle", "turtledemo", "curses", "colorsys"), held_out=True),
    Domain("email", "e-mail: messages, MIME, mailboxes, SMTP/IMAP/POP", (
        "email", "mailbox", "smtplib", "imaplib", "poplib", "smtpd", "mimetypes", "quopri", "uu", "base64", "mailcap"),
        held_out=True),
    Domain("testing", "unittest, doctest, debuggers, profilers", (
        "unittest", "doctest", "pdb", "bdb", "trace", "profile", "cProfile", "pstats", "timeit", "tracemalloc"),
        held_out=True),
)
NAMES = tuple(d.name for d in DOMAINS)
TRAINING = tuple(d.name for d in DOMAINS if not d.held_out)
HELD_OUT = tuple(d.name for d in DOMAINS if d.held_out)
#: the domain of a module no domain names
FALLBACK = "core"
#: the spec that names every training domain
ALL_TRAINING = "train"
_BY_MODULE = {m: d.name for d in DOMAINS for m in d.modules}
_PREFIXES = tuple(m for m in _BY_MODULE if m.endswith("-") or m == "_sysconfigdata")


def module_of(document: str) -> str:
    """The top-level module or package of a document name (``stdlib/email/utils.py`` -> ``email``,
    ``stdlib/os.py`` -> ``os``, ``pydoc_data/KEY`` -> ``pydoc_data``)."""
    parts = document.split("/")
    if parts[0] != "stdlib":
        return parts[0]
    top = parts[1] if len(parts) > 2 else parts[1].removesuffix(".py")
    return next((p for p in _PREFIXES if top.startswith(p)), top)


def domain_of(document: str) -> str:
    """The domain of a document name (:data:`FALLBACK` for a module no domain names)."""
    return _BY_MODULE.get(module_of(document), FALLBACK)


def members(spec: str) -> tuple:
    """The domain names a spec means (its names in the order given; ``train``: :data:`TRAINING`)."""
    names = [s.strip() for s in spec.split(",")]
    return TRAINING if names == [ALL_TRAINING] else tuple(names)


def check_spec(name: str, value) -> str:
    """A domain spec (one domain, a comma-separated list of different ones, or ``train``); a ConfigError
    naming the field, the value and the allowed names otherwise."""
    allowed = f"{', '.join(NAMES)}, a comma-separated list of them, or {ALL_TRAINING!r} (every training domain)"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: {allowed}")
    got = members(value)
    wrong = [n for n in got if n not in NAMES]
    if wrong or len(set(got)) != len(got):
        why = f"unknown {', '.join(map(repr, wrong))}" if wrong else "a domain named twice"
        raise ConfigError(f"{name}={value!r} is not allowed ({why}); allowed: {allowed}")
    return value


@dataclass(frozen=True)
class DomainSplit:
    """A domain's document names, split as the corpus splits training and validation."""

    train: tuple
    val: tuple


@functools.lru_cache(maxsize=1)
def split() -> dict[str, DomainSplit]:
    """Every domain's :class:`DomainSplit` of the corpus on this Python."""
    from noloco.llm_check import data

    train: dict = {name: [] for name in NAMES}
    val: dict = {name: [] for name in NAMES}
    for document, _ in data._documents():
        (val if data._is_val(document, 5) else train)[domain_of(document)].append(document)
    return {name: DomainSplit(train=tuple(train[name]), val=tuple(val[name])) for name in NAMES}


def corpus(spec: str):
    """The :class:`noloco.llm_check.data.Corpus` of a domain spec: its domains' training and validation
    documents only (the recorded hash stays the whole corpus's)."""
    from noloco.llm_check import data

    keep = frozenset(doc for name in members(check_spec("domain", spec)) for doc in split()[name].train
                     + split()[name].val)
    return data.load_corpus(names=keep)


def _train_text(name: str) -> bytes:
    from noloco.llm_check import data

    texts = dict(data._documents())
    return b"".join(texts[doc] + b"\n" for doc in split()[name].train)


@functools.lru_cache(maxsize=None)
def difficulty(name: str) -> float:
    """A domain's difficulty: the zlib (level 9) size of its training text in bits per byte, a property of the
    text measured before any training (computed per domain: compressing every domain takes seconds)."""
    import zlib

    train = _train_text(name)
    return 8 * len(zlib.compress(train, 9)) / max(len(train), 1)


@dataclass(frozen=True)
class DomainSize(JsonRecord):
    """A domain's row: its training and validation bytes and files, the unigram entropy of its training bytes
    (nats/byte), and its :func:`difficulty` (None in :func:`sizes`' rows)."""

    OPTIONAL_KEYS = ("zlib_bits_per_byte",)

    name: str
    description: str
    held_out: bool
    train_bytes: int
    val_bytes: int
    train_files: int
    val_files: int
    unigram_entropy: float
    zlib_bits_per_byte: Optional[float] = None


@functools.lru_cache(maxsize=1)
def sizes() -> tuple[DomainSize, ...]:
    """One row per domain; :func:`statistics` without the difficulty."""
    import numpy as np

    from noloco.llm_check import data

    texts = dict(data._documents())
    rows = []
    for d in DOMAINS:
        parts = split()[d.name]
        train = _train_text(d.name)
        val_bytes = sum(len(texts[doc]) + 1 for doc in parts.val)
        counts = np.bincount(np.frombuffer(train, dtype=np.uint8), minlength=data.VOCAB)
        p = counts[counts > 0] / max(counts.sum(), 1)
        rows.append(DomainSize(name=d.name, description=d.description, held_out=d.held_out,
                               train_bytes=len(train), val_bytes=val_bytes, train_files=len(parts.train),
                               val_files=len(parts.val), unigram_entropy=float(-(p * np.log(p)).sum())))
    return tuple(rows)


@functools.lru_cache(maxsize=1)
def statistics() -> tuple[DomainSize, ...]:
    """:func:`sizes`' rows with each domain's :func:`difficulty` (``zlib_bits_per_byte``)."""
    return tuple(dataclasses.replace(r, zlib_bits_per_byte=difficulty(r.name)) for r in sizes())


def format_table(rows=None) -> str:
    """The domain table (:func:`statistics`) as text."""
    rows = statistics() if rows is None else rows
    lines = [f"{'domain':<12} {'role':<9} {'train bytes':>12} {'files':>6} {'val bytes':>10} {'files':>6} "
             f"{'unigram H':>10} {'zlib b/B':>9}"]
    for r in rows:
        lines.append(f"{r.name:<12} {'held out' if r.held_out else 'train':<9} {r.train_bytes:>12} "
                     f"{r.train_files:>6} {r.val_bytes:>10} {r.val_files:>6} {r.unigram_entropy:>10.3f} "
                     f"{r.zlib_bits_per_byte:>9.3f}")
    return "\n".join(lines)
