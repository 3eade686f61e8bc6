"""The public face: every name in ``noloco.__all__`` has a docstring with a one-line summary and the Args (or,
for a dataclass, Attributes), Returns, Raises and Examples sections (Google style), and its examples run;
every exception a user can meet is exported. The data (``PRESETS``, ``METHODS``) is documented by the ``#:``
comment above its definition, the form Sphinx reads, and used in ``resolve``'s examples."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import inspect
import re
import time

import pytest

import noloco


def _assigned(name: str) -> bool:
    """Whether ``name`` is bound by an assignment (data), not a def or class, at the top of its module: read from
    the source, so that collecting these tests imports neither torch nor transformers."""
    tree = ast.parse(open(importlib.util.find_spec(noloco._EXPORTS[name]).origin).read())
    return any(isinstance(t, ast.Name) and t.id == name for node in tree.body
               for t in (node.targets if isinstance(node, ast.Assign) else
                         [node.target] if isinstance(node, ast.AnnAssign) else []))


NAMES = [name for name in noloco.__all__ if name != "__version__"]
DATA = [name for name in NAMES if _assigned(name)]
CODE = [name for name in NAMES if name not in DATA]
SECTIONS = ("Returns:", "Raises:", "Examples:")
#: seconds one object's examples may take, imports included (each takes well under a second once torch is
#: imported; the bound is wide for a busy machine and fails only on a slow example)
EXAMPLE_SECONDS = 10.0


def _doc(name: str) -> str:
    doc = getattr(noloco, name).__doc__  # its own, not a base class's
    assert doc, f"noloco.{name} has no docstring"
    return inspect.cleandoc(doc)


@pytest.mark.parametrize("name", CODE)
def test_every_exported_name_has_the_sections(name):
    doc = _doc(name)
    lines = doc.splitlines()
    assert lines[0].strip() and (len(lines) == 1 or not lines[1].strip()), f"{name}: no one-line summary"
    headings = set(re.findall(r"^(\w+):$", doc, re.M))
    assert headings & {"Args", "Attributes"}, f"{name}: no Args: section"
    missing = [s for s in SECTIONS if s[:-1] not in headings]
    assert not missing, f"{name}: no {', '.join(missing)} section"
    assert ">>> " in doc[doc.index("\nExamples:"):], f"{name}: Examples: holds no doctest"


@pytest.mark.parametrize("name", DATA)
def test_exported_data_is_documented_where_it_is_defined(name):
    source = inspect.getsource(importlib.import_module(noloco._EXPORTS[name]))
    assert re.search(rf"^#: .+\n(?:#: .*\n)*{name}\b", source, re.M), f"{name}: no #: comment above it"
    assert f"noloco.{name}" in _doc("resolve"), f"{name} is not in resolve's examples"


@pytest.mark.parametrize("name", CODE)
def test_the_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "cache"))
    tests = doctest.DocTestFinder(recurse=False).find(getattr(noloco, name), f"noloco.{name}", globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    start = time.perf_counter()
    for test in tests:
        runner.run(test)
    seconds = time.perf_counter() - start
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"noloco.{name}: {result} (the report is above)"
    assert seconds < EXAMPLE_SECONDS, f"noloco.{name}'s examples took {seconds:.1f} s"


def test_every_error_a_user_can_meet_is_exported():
    from noloco.infra import budget, errors
    from noloco.training import exchange

    raised = [cls for module in (errors, budget, exchange) for cls in vars(module).values()
              if inspect.isclass(cls) and issubclass(cls, Exception) and cls.__module__ == module.__name__]
    assert {cls.__name__ for cls in raised} <= set(noloco.__all__), raised
    assert all(getattr(noloco, cls.__name__) is cls for cls in raised)


def test_simulate_setting_is_a_deprecated_alias_outside_all():
    assert "simulate_setting" not in noloco.__all__
    _, outer, inner = noloco.resolve("paper", replicas=4, steps=5)
    with pytest.warns(DeprecationWarning, match="noloco.simulate"):
        result, text = noloco.simulate_setting("noloco", outer, inner, noloco.Spectrum((1.0,)), trials=4,
                                               outer_steps=5, progress=False, use_cache=False)
    assert result["diverged"] is None and text.startswith("noloco on quadratic: N=4")


def test_the_data_read_from_the_source_is_what_is_neither_class_nor_callable():
    assert DATA == [name for name in NAMES
                    if not (inspect.isclass(getattr(noloco, name)) or callable(getattr(noloco, name)))]
