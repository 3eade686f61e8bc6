"""A JSON object as a frozen dataclass, read and written back exactly: the one way a record crosses a file edge.

A record class is a frozen dataclass whose field names are the JSON keys and that derives from
:class:`JsonRecord`. ``from_json(obj)`` keeps what the class does not name in ``extra`` (a user's own fields
are never lost) and the keys' order, so ``Record.from_json(obj).to_json() == obj``, in the same key order.
Fields without a default are required (a missing one is a :class:`noloco.infra.errors.DataError`); a key that
the object lacks stays absent on the way back, one that holds null stays null. ``NESTED`` names the fields
that hold records themselves: a record class, or ``(dict, spec)`` / ``(list, spec)`` for a JSON object or array
of them (``spec`` again a class or such a pair)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from noloco.infra.errors import DataError

#: the bookkeeping fields every record has; never JSON keys of their own
_OWN = ("extra", "order")


@dataclasses.dataclass(frozen=True)
class JsonRecord:
    """The base of a record dataclass (itself ``@dataclass(frozen=True)``): ``from_json`` / ``to_json``.

    ``extra`` holds the keys the record does not name; ``order`` the keys as read (keyword-only, so a subclass's
    required fields may follow them)."""

    NESTED: ClassVar[dict] = {}
    #: fields a record made in code leaves out of its JSON while they are None (keys its writer adds only
    #: sometimes); a record read from JSON writes the keys it read
    OPTIONAL_KEYS: ClassVar[tuple] = ()
    extra: dict = dataclasses.field(default_factory=dict, kw_only=True)
    order: tuple = dataclasses.field(default=(), repr=False, compare=False, kw_only=True)

    @classmethod
    def _names(cls) -> tuple:
        return _field_names(cls)

    @classmethod
    def from_json(cls, obj: Any):
        """The record of the JSON object ``obj`` (DataError when it is not an object or lacks a required key)."""
        if not isinstance(obj, dict):
            raise DataError(f"{cls.__name__}: expected a JSON object, got {type(obj).__name__}")
        names = cls._names()
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in obj]
        if missing:
            raise DataError(f"{cls.__name__}: the JSON object lacks {', '.join(missing)}")
        values = {n: _read(cls.NESTED.get(n), obj[n]) for n in names if n in obj}
        extra = {k: v for k, v in obj.items() if k not in values}
        return cls(**values, extra=extra, order=tuple(obj))

    def to_json(self) -> dict:
        """The JSON object: the keys read, in their order (a field set since, then the extra keys, after them);
        a record made in code writes every field in its declared order, then ``extra``."""
        names, extra = self._names(), self.extra
        order = self.order or [n for n in names if not (n in self.OPTIONAL_KEYS and getattr(self, n) is None)]
        seen = set(order)
        keys = list(order) + [n for n in names if n not in seen and getattr(self, n) is not None]
        if extra:
            seen.update(keys)
            keys += [k for k in extra if k not in seen]
            own = set(names)
            return {k: _write(getattr(self, k)) if k in own else extra[k] for k in keys}
        return {k: _write(getattr(self, k)) for k in keys}


_FIELD_NAMES: dict[type, tuple] = {}


def _field_names(cls: type) -> tuple:
    """A record class's JSON keys: its fields less the bookkeeping ones (found once a class: every row's
    to_json asks)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name not in _OWN)
    return names


def _read(spec, value):
    """``value`` read by ``spec``: None (kept as is), a record class, or ``(dict, spec)`` / ``(list, spec)``."""
    if spec is None or value is None:
        return value
    if isinstance(spec, tuple):
        kind, inner = spec
        if not isinstance(value, kind):
            raise DataError(f"expected a JSON {'object' if kind is dict else 'array'}, got {type(value).__name__}")
        if kind is dict:
            return {k: _read(inner, v) for k, v in value.items()}
        return [_read(inner, v) for v in value]
    return spec.from_json(value)


def _write(value):
    if hasattr(value, "to_json"):  # a record, or a result that writes itself
        return value.to_json()
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_write(v) for v in value]
    return value
