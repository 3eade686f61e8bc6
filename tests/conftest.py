import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Keep the compiled-theory cache of the test run out of the user's home."""
    os.environ.setdefault("NOLOCO_CACHE", str(tmp_path_factory.mktemp("noloco-cache")))
