"""The layer picture of ARCHITECTURE.md holds: no module imports a layer above its own, nothing imports the
command line, no pre-``noloco.*`` top-level name is imported, and the distribution installs one top-level
import name."""

import ast
import re
import tomllib
from pathlib import Path

import pytest

from noloco.infra.cache import source_folders

ROOT = Path(__file__).resolve().parents[1]
OLD_NAMES = {"theory", "quadratic", "llm_check", "paper_figs", "benchmarks", "claims", "infra"}


def allowed() -> dict[str, set]:
    """``{layer: the layers it may import}`` from ARCHITECTURE.md's ```layers block."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S).group(1)
    rows = {}
    for line in block.strip().splitlines():
        name, _, below = line.partition("->")
        rows[name.strip()] = set(below.split())
    return rows


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path`` (``from noloco import x`` counts as ``noloco.x``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            if node.module == "noloco":
                out += [(node.lineno, f"noloco.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def layer_of(module: str, layers) -> str | None:
    parts = module.split(".")
    if parts[0] != "noloco":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in layers else "noloco"


def test_the_table_names_every_package():
    assert set(allowed()) == set(source_folders())


@pytest.mark.parametrize("layer", sorted(allowed()))
def test_no_layer_imports_upward(layer):
    rows = allowed()
    folder = source_folders()[layer]
    # the top-level package's own modules; its __main__ is ``python -m noloco``, the command line itself
    paths = sorted(p for p in folder.glob("*.py") if p.name != "__main__.py") if layer == "noloco" \
        else sorted(folder.rglob("*.py"))
    wrong = []
    for path in paths:
        for line, module in imports(path):
            target = layer_of(module, rows)
            if module.split(".")[0] in OLD_NAMES:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} (the old top-level name)")
            elif target is not None and target != layer and target not in rows[layer]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({layer} may import "
                             f"{', '.join(sorted(rows[layer])) or 'nothing of ours'})")
            elif target == "cli" and layer != "cli":
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports the command line ({module})")
    assert not wrong, "\n".join(wrong)


def test_the_check_has_teeth(tmp_path):
    """A module of theory importing quadratic, or anything importing the command line, is caught."""
    rows = allowed()
    bad = tmp_path / "bad.py"
    bad.write_text("from noloco.quadratic.simulator import simulate\nimport noloco.cli.check\n")
    found = [layer_of(m, rows) for _, m in imports(bad)]
    assert found == ["quadratic", "cli"] and "quadratic" not in rows["theory"]


def test_one_top_level_import_name():
    """Installed, the distribution adds ``noloco`` alone to site-packages, and every Python source of the
    repository outside the tests is inside it."""
    import setuptools

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = setuptools.find_packages(str(ROOT), include=find["include"])
    assert {p.split(".")[0] for p in packages} == {"noloco"}
    stray = [p.relative_to(ROOT) for p in ROOT.rglob("*.py")
             if p.relative_to(ROOT).parts[0] not in ("noloco", "tests", "build", ".venv")]
    assert not stray, stray


def test_every_module_is_the_file_its_name_spells():
    """A static reader resolves ``noloco.a.b`` to ``noloco/a/b.py`` (or ``noloco/a/b/__init__.py``) from
    the repository root, with no mapping, no ``__path__`` extension and nothing but the folders."""
    for package, folder in source_folders().items():
        expected = ROOT / "noloco" if package == "noloco" else ROOT / "noloco" / package
        assert folder.resolve() == expected.resolve(), (package, folder)
    for path in (ROOT / "noloco").rglob("__init__.py"):
        assert "__path__" not in path.read_text(), path


def test_a_module_has_one_name_only():
    """From the repository root (the current folder first on the path, as ``python -m`` has it), no
    module of the toolkit can be imported under a name other than ``noloco.*``: every other path from an
    entry of ``sys.path`` to a source file is tried and must fail."""
    code = r"""
import importlib, sys
from pathlib import Path
root = Path.cwd().resolve()
sources = [p for p in (root / "noloco").rglob("*.py") if "out" not in p.parts]
seconds = []
for entry in list(sys.path):
    base = Path(entry or ".").resolve()
    for path in sources:
        try:
            parts = path.with_suffix("").relative_to(base).parts
        except ValueError:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if not parts or parts[0] == "noloco" or not all(p.isidentifier() for p in parts):
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        seconds.append(name)
print(len(sources), sorted(set(seconds)))
"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    count, _, seconds = out.stdout.partition(" ")
    assert int(count) > 100 and seconds.strip() == "[]", out.stdout


def test_the_second_name_check_has_teeth(tmp_path):
    """A folder of the toolkit on the path, as the old layout's top-level folders were, is caught."""
    import subprocess
    import sys

    code = ("import sys, importlib; sys.path.insert(0, 'noloco'); "
            "m = importlib.import_module('theory.outer'); print(m.__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "theory.outer"  # the very thing the test above searches for


def test_the_advice_imports_no_torch():
    """The advice reads run folders on a machine without torch (a notebook, a user's laptop): no module of
    ``noloco.advice`` names torch in an import, at any depth, and importing all of them loads none of it."""
    import subprocess
    import sys

    folder = source_folders()["advice"]
    named = [f"{p.name}:{line} {m}" for p in sorted(folder.rglob("*.py")) for line, m in imports(p)
             if m.split(".")[0] == "torch"]
    assert not named, named
    code = ("import importlib, pkgutil, sys, noloco.advice as a; "
            "[importlib.import_module(f'noloco.advice.{m.name}') for m in pkgutil.iter_modules(a.__path__)]; "
            "print(len(list(pkgutil.iter_modules(a.__path__))), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    count, loaded = out.stdout.split()
    assert int(count) >= 5 and loaded == "False", out.stdout


def test_the_torch_check_has_teeth(tmp_path):
    """A lazy ``import torch`` inside a function is an import too."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import torch.nn\n    from torch import load\n")
    assert [m for _, m in imports(bad)] == ["torch.nn", "torch"]
