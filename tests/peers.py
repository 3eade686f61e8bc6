"""Shared by the tests that run a real gloo group: ranks started as torchrun starts them, and a rank that stays
silent."""

from __future__ import annotations

import os
import time


def report_peer_error(call, report: str) -> None:
    """Run ``call()`` and write to ``report`` the seconds it took and its PeerError's message
    ("no error" when it returned)."""
    from noloco.training.exchange import PeerError

    start = time.monotonic()
    try:
        call()
        message = "no error"
    except PeerError as err:
        message = str(err)
    with open(report, "w") as handle:
        handle.write(f"{time.monotonic() - start:.3f}\n{message}")


def stay_silent(report: str, seconds: float = 60.0) -> None:
    """The silent rank: alive, sending nothing, until the other rank has written ``report`` (or ``seconds``
    have passed, a cap for a broken test only): only the timeout can end the other's wait. The cap is far past
    the timeout because the other rank may spend many seconds building its model first on a loaded machine."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(report):
        time.sleep(0.05)


def as_torchrun(rank: int, world: int, port: int) -> None:
    """This process as rank ``rank`` of ``world``: the variables torchrun sets; one torch thread."""
    import torch

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)


def spawn_ranks(fn, *args, deadline: float = 120.0) -> None:
    """Two ranks of ``fn(rank, 2, port, *args)``; a hang fails the test after ``deadline`` seconds."""
    import pytest
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    ranks = mp.start_processes(fn, args=(2, free_port(), *args), nprocs=2, join=False, start_method="spawn")
    end = time.monotonic() + deadline
    while not ranks.join(timeout=max(0.0, end - time.monotonic())):  # False while a rank is still running
        if time.monotonic() >= end:
            for process in ranks.processes:
                process.kill()
            pytest.fail(f"the ranks did not finish in {deadline:.0f} s")
