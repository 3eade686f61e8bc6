"""`noloco llm study --help` names every study the table holds (noloco/cli/study_table.py)."""

import re

from noloco.cli import llm_study
from noloco.cli.study_table import table


def test_the_study_command_s_description_names_every_study():
    first = " ".join(llm_study.__doc__.split("\n\n")[0].split())
    named = set(re.findall(r"\(([a-z-]+(?:, [a-z-]+)*)\)", first)) | {"routing"}
    names = {n for group in named for n in group.split(", ")}
    assert {row.name for row in table()} <= names, {row.name for row in table()} - names
