"""The manual holds together: every relative link and anchor in docs/ and the README resolves, no page names an
issue number, the word budget holds, and the Python reference names every exported name."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").rglob("*.md")])
#: docs/ and the README together stay under this many words (``wc -w``), so that the manual stays readable
WORD_BUDGET = 36_000

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
ISSUE = re.compile(r"\bissues?\s+#?\d+|\bitem\s+\d+\s+of\s+(the\s+)?issue|#\d+\b(?!\])", re.I)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page defines: its headings (a repeated one numbered as GitHub does) and explicit ids."""
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    found = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def links(page: Path) -> list[str]:
    """The relative links of a page, outside code blocks and inline code."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def broken(page: Path) -> list[str]:
    """The links of a page whose file or anchor does not exist."""
    bad = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            bad.append(f"{page.name}: {target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            bad.append(f"{page.name}: {target} (no such anchor)")
    return bad


def test_every_link_and_anchor_resolves():
    assert [page for page in PAGES if links(page)], "no links found: the link pattern is wrong"
    assert [b for page in PAGES for b in broken(page)] == []


def test_no_page_names_an_issue_number():
    hits = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for page in PAGES if page.name != "ARCHITECTURE.md"
            for n, line in enumerate(page.read_text().splitlines(), 1) if ISSUE.search(line)]
    assert hits == []


def test_the_manual_stays_within_its_word_budget():
    words = sum(len(page.read_text().split()) for page in PAGES if page.name != "ARCHITECTURE.md")
    assert words <= WORD_BUDGET, f"{words} words in docs/ and the README, the budget is {WORD_BUDGET}"


def test_the_python_reference_names_every_exported_name():
    import noloco

    text = (ROOT / "docs" / "api.md").read_text()
    assert [name for name in noloco.__all__ if f"`{name}" not in text and f"noloco.{name}" not in text] == []


@pytest.mark.parametrize("text,bad", [("see [x](missing.md)", True), ("see [x](#nowhere)", True),
                                      ("see [x](#a-heading)", False), ("fixed in issue 12", True),
                                      ("item 5 of issue", True), ("an issue with numbers", False)])
def test_the_checks_can_fail(tmp_path, text, bad):
    page = tmp_path / "page.md"
    page.write_text(f"# A heading\n\n{text}\n")
    assert bool(broken(page) or ISSUE.search(text)) == bad



def test_the_command_reference_names_every_flag():
    import argparse

    from noloco.cli import build_parser

    def flags(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from flags(sub)
            elif action.help != argparse.SUPPRESS:
                yield from (f for f in action.option_strings if f.startswith("--") and f != "--help")

    text = (ROOT / "docs" / "cli.md").read_text()
    assert sorted({f for f in flags(build_parser()) if not re.search(re.escape(f) + r"(?![\w-])", text)}) == []


def test_the_run_folder_reference_names_every_field_the_observer_writes(tmp_path):
    """A real run under ``noloco.Observer`` (4 replicas, 3 outer steps): every file it writes and every key of
    every row is named in docs/run_folder.md."""
    torch = pytest.importorskip("torch")
    import json

    import noloco

    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 1) for _ in range(4)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-2)
    outer = noloco.OuterOptimizer(models, inner, inner_steps=2)
    observer = noloco.Observer(outer, tmp_path / "run", outer_steps=3, lr=1e-2)
    for step in range(6):
        inner.zero_grad()
        sum(((m(torch.randn(8, 4)) - 1) ** 2).mean() for m in models).backward()
        inner.step()
        if (step + 1) % 2 == 0:
            observer.log(outer.outer_done, val_loss_avg_model=0.1, val_loss_replicas_mean=0.2)
    observer.close()

    run = tmp_path / "run"
    result = json.loads((run / "result.json").read_text())
    rows = [json.loads(line) for name in ("metrics.jsonl", "inputs.jsonl") for line in (run / name).open()]
    groups = [g for row in rows for g in (row.get("groups") or {}).values()]
    names = {p.name for p in run.iterdir()} | set(result) | set(result["config"]) | set(result["config"]["outer"])
    names |= {k for row in rows + groups for k in row}
    text = (ROOT / "docs" / "run_folder.md").read_text()
    assert len(names) > 30 and sorted(n for n in names if f"`{n}`" not in text) == []
