"""Records are typed: a string-key lookup (``d["key"]``, read or written, or ``d.get("key")``) in the library sits
at a file's edge, in a function that reads or writes a file's JSON form, or on a dict a foreign library hands over
or asks for (torch's optimizer state, Hugging Face's logs, Lightning's step outputs, a caller's ``**kwargs``,
os.environ), marked on its line ``# edge: why``."""

import ast
import re
import sys
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "noloco"
#: a function whose name says it reads or writes a file's JSON form
EDGE = re.compile(r"^_?(from_json|to_json|from_row|to_row|from_dict|to_dict|state_dict|load_state_dict"
                  r"|(read|load|write|save|parse)\w*|\w*_json)$")


def lookups_elsewhere() -> list[str]:
    found = []
    for path in sorted(LIBRARY.rglob("*.py")):
        lines = path.read_text().splitlines()

        def walk(node, names):
            for child in ast.iter_child_nodes(node):
                inner = names + [child.name] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else names
                looked_in = _keyed(child)
                if (looked_in is not None
                        and not any(EDGE.match(n) for n in inner)
                        and "# edge:" not in lines[child.lineno - 1]
                        and not ast.unparse(looked_in).endswith("environ")):
                    found.append(f"{path.relative_to(LIBRARY.parent)}:{child.lineno}")
                walk(child, inner)

        walk(ast.parse(path.read_text()), [])
    return found


def _keyed(node):
    """What ``node`` looks a string key up in (``d`` of ``d["key"]`` or ``d.get("key", ...)``), else None."""
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = node.args[0]
    else:
        return None
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return node.value if isinstance(node, ast.Subscript) else node.func.value
    return None


def test_string_key_lookups_stay_at_the_file_edge():
    found = lookups_elsewhere()
    assert not found, f"{len(found)} string-key lookups outside the file edge (type the record): " + ", ".join(found)


def test_every_edge_mark_says_why():
    marks = [(p, line) for p in LIBRARY.rglob("*.py") for line in p.read_text().splitlines() if "# edge:" in line]
    assert marks and all(line.split("# edge:", 1)[1].strip() for _, line in marks)


def test_the_scan_finds_a_lookup_outside_the_edge(tmp_path, monkeypatch):
    (tmp_path / "noloco").mkdir()
    (tmp_path / "noloco" / "m.py").write_text(
        'import os\n\n\ndef f(r, k):\n    return r["a"], r.get("c", 0), r.get(k), os.environ.get("HOME")\n\n\n'
        'def read_x(d):\n    return d["b"], d.get("b")\n\n\n'
        'def g(kw):\n    return kw.get("d")  # edge: a caller\'s **kwargs\n\n\n'
        'def h(kw):\n    return kw.get("e")\n')
    monkeypatch.setattr(sys.modules[__name__], "LIBRARY", tmp_path / "noloco")
    assert lookups_elsewhere() == ["noloco/m.py:5", "noloco/m.py:5", "noloco/m.py:17"]
