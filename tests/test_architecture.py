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
    paths = sorted(folder.glob("*.py")) if layer == "noloco" else sorted(folder.rglob("*.py"))
    wrong = []
    for path in paths:
        for line, module in imports(path):
            target = layer_of(module, rows)
            if module.split(".")[0] in OLD_NAMES:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} (the old top-level name)")
            elif target is not None and target != layer and target not in rows[layer]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({layer} may import "
                             f"{', '.join(sorted(rows[layer])) or 'nothing of ours'})")
            elif target == "noloco" and layer != "noloco" and module not in ("noloco",):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports the command line ({module})")
    assert not wrong, "\n".join(wrong)


def test_the_check_has_teeth(tmp_path):
    """A module of theory importing quadratic, or anything importing the command line, is caught."""
    rows = allowed()
    bad = tmp_path / "bad.py"
    bad.write_text("from noloco.quadratic.simulator import simulate\nimport noloco.cmd_check\n")
    found = [layer_of(m, rows) for _, m in imports(bad)]
    assert found == ["quadratic", "noloco"] and "quadratic" not in rows["theory"]


def test_one_top_level_import_name():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in config["packages"]} == {"noloco"}
    assert set(config["package-dir"]) == set(config["packages"])
    for package, folder in config["package-dir"].items():
        assert (ROOT / folder / "__init__.py").is_file(), (package, folder)
