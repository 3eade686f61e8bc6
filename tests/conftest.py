import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Keep the compiled-theory cache of the test run out of the user's home."""
    os.environ.setdefault("NOLOCO_CACHE", str(tmp_path_factory.mktemp("noloco-cache")))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread per process for a module's training runs: on the shared 2-core machine that is
    several times faster (a module opts in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
