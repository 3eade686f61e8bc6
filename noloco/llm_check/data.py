"""Byte-level text shipped with every Python: the standard-library sources and the
``pydoc_data`` topics. No downloads, so the text (and its hash, recorded in every
result) depends only on the Python version.

Split: a document goes to validation when a hash of its name falls in the last
``val_percent`` of 100 buckets, so the split is deterministic and held out by file; a domain
that this leaves without validation text gives its highest-bucket document (:func:`validation_names`).
Shards: IID cuts the training stream into blocks and deals them to replicas by a
seeded permutation; non-IID gives each replica a contiguous run of whole files
(sorted by path), i.e. different modules. Batches depend on (seed, replica, step)
only, so a resumed or distributed run reads exactly the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VOCAB = 256
_SKIP_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
BLOCK = 2048  # bytes per IID block


@functools.lru_cache(maxsize=1)
def _documents() -> tuple[tuple[str, bytes], ...]:
    root = Path(sysconfig.get_paths()["stdlib"])  # edge: sysconfig hands its paths over as a dict
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _SKIP_DIRS.intersection(rel.parts):
            continue
        docs.append((f"stdlib/{rel.as_posix()}", path.read_bytes()))
    from pydoc_data.topics import topics

    for key in sorted(topics):
        docs.append((f"pydoc_data/{key}", topics[key].encode("utf-8")))
    return tuple(docs)


def _bucket(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little") % 100


@functools.lru_cache(maxsize=4)
def validation_names(val_percent: int = 5) -> frozenset:
    """The validation documents: those whose name's hash falls in the last ``val_percent`` of 100 buckets, and
    in a domain (:mod:`noloco.llm_check.domains`) that this rule leaves without one, its document of the highest
    bucket. Python's standard library differs between versions: on 3.12 the rule alone gives the ``language``
    domain no validation file, and every domain needs one (a domain expert is evaluated on its own text)."""
    from noloco.llm_check.domains import domain_of

    names = [name for name, _ in _documents()]
    val = {name for name in names if _bucket(name) >= 100 - val_percent}
    by_domain: dict[str, list[str]] = {}
    for name in names:
        by_domain.setdefault(domain_of(name), []).append(name)
    for docs in by_domain.values():
        if len(docs) > 1 and not val.intersection(docs):
            val.add(max(docs, key=lambda name: (_bucket(name), name)))
    return frozenset(val)


def _is_val(name: str, val_percent: int) -> bool:
    return name in validation_names(val_percent)


@dataclass(frozen=True)
class Corpus:
    train_docs: tuple  # of np.uint8 arrays, sorted by name
    val: np.ndarray
    sha256: str
    python: str
    files: int

    @property
    def train_bytes(self) -> int:
        return sum(len(d) for d in self.train_docs)

    def unigram_entropy(self) -> float:
        """Entropy (nats per byte) of the training bytes: the loss of the best model
        that ignores context; a trained model should be far below it."""
        counts = np.zeros(VOCAB, dtype=np.int64)
        for d in self.train_docs:
            counts += np.bincount(d, minlength=VOCAB)
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())

    def info(self) -> dict:
        return {"corpus_sha256": self.sha256, "python": self.python, "files": self.files,
                "train_bytes": self.train_bytes, "val_bytes": int(len(self.val))}


@functools.lru_cache(maxsize=4)
def load_corpus(val_percent: int = 5, names: frozenset | None = None) -> Corpus:
    """The corpus; ``names``: only these documents (a domain: noloco.llm_check.domains.corpus), the hash
    still the whole corpus's."""
    docs = _documents()
    digest = hashlib.sha256()
    train, val = [], []
    for name, text in docs:
        digest.update(name.encode() + b"\0" + text + b"\0")
        if names is not None and name not in names:
            continue
        arr = np.frombuffer(text + b"\n", dtype=np.uint8)
        (val if _is_val(name, val_percent) else train).append(arr)
    return Corpus(tuple(train), np.concatenate(val), digest.hexdigest(),
                  sys.version.split()[0], len(train) + len(val))


def shards(corpus: Corpus, replicas: int, seed: int, noniid: bool = False) -> list[np.ndarray]:
    """One byte stream per replica."""
    if noniid:
        # contiguous runs of whole files with about equal byte counts
        sizes = np.array([len(d) for d in corpus.train_docs])
        edges = np.searchsorted(np.cumsum(sizes), np.arange(1, replicas) * sizes.sum() / replicas)
        bounds = [0, *edges.tolist(), len(sizes)]
        # an empty run (more replicas than files) is refused by check_fits
        return [np.concatenate(corpus.train_docs[a:b]) if b > a else np.zeros(0, np.uint8)
                for a, b in zip(bounds[:-1], bounds[1:])]
    stream = np.concatenate(corpus.train_docs)
    blocks = len(stream) // BLOCK
    order = np.random.default_rng([seed, 7919]).permutation(blocks)
    per = blocks // replicas
    return [stream[(order[r * per:(r + 1) * per, None] * BLOCK + np.arange(BLOCK)).ravel()]
            for r in range(replicas)]


def check_fits(shard_lengths, val_bytes: int, ctx: int, noniid: bool = False) -> None:
    """Every replica's shard and the validation text must hold a window of ``ctx + 1`` bytes; a
    ConfigError (exit 2) naming the limit otherwise (too many replicas for the text, or a context
    longer than it)."""
    from noloco.infra.errors import ConfigError

    shortest = min(shard_lengths) if len(shard_lengths) else 0
    if shortest < ctx + 2:
        kind = "non-IID shards of whole files" if noniid else f"IID shards of {BLOCK}-byte blocks"
        raise ConfigError(f"replicas={len(shard_lengths)} with ctx={ctx}: the {kind} leave a replica "
                          f"{shortest} bytes of text, fewer than a window of ctx + 2 = {ctx + 2}; use fewer "
                          f"replicas or a shorter context")
    if val_bytes < ctx + 2:
        raise ConfigError(f"ctx={ctx} is longer than the {val_bytes} bytes of validation text; allowed: "
                          f"ctx <= {val_bytes - 2}")


def batch(shard: np.ndarray, seed: int, replica: int, step: int, size: int, ctx: int) -> np.ndarray:
    """(size, ctx + 1) random windows of one shard, a function of (seed, replica, step)."""
    rng = np.random.default_rng([seed, replica, step])
    start = rng.integers(0, len(shard) - ctx - 1, size=size)
    return shard[start[:, None] + np.arange(ctx + 1)]


def val_windows(corpus: Corpus, seed: int, count: int, ctx: int) -> np.ndarray:
    """A fixed validation set of (count, ctx + 1) windows, evenly spaced through the
    held-out text so every evaluation sees the same bytes."""
    span = len(corpus.val) - ctx - 1
    start = (np.arange(count) * (span / max(count, 1))).astype(np.int64)
    return corpus.val[start[:, None] + np.arange(ctx + 1)]
