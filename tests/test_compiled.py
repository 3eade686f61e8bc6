"""theory/compiled.py is generated from the sympy derivation and kept in the repository
(golden file): it must match the generator, and nothing may need sympy or eval at run time."""

import ast
import os
import subprocess
import sys
from pathlib import Path

from noloco.infra.cache import source_files
from noloco.theory import codegen

ROOT = Path(__file__).resolve().parent.parent


def test_compiled_module_is_up_to_date():
    text = codegen.generate()
    if os.environ.get("NOLOCO_REGENERATE") == "1":
        codegen.atomic_write_text(codegen.TARGET, text)
    assert codegen.TARGET.read_text() == text, (
        f"{codegen.TARGET.relative_to(ROOT)} is stale (its sources changed); regenerate it with "
        f"`{codegen.REGENERATE[0]}` or `{codegen.REGENERATE[1]}` and commit the result")


def test_numeric_needs_no_sympy():
    code = "import sys, noloco.theory.numeric; print('sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_eval_or_exec():
    """Calls of the builtins by name; ``model.eval()`` and the like are attributes and fine."""
    calls = [
        f"{name}:{node.lineno}"
        for name, path in source_files()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec")
    ]
    assert not calls, f"eval/exec called at {', '.join(calls)}"
