"""Shared by the tests that run a real gloo group in which one rank stays silent."""

from __future__ import annotations

import os
import time

from noloco.training.exchange import PeerError


def report_peer_error(call, report: str) -> None:
    """Run ``call()`` and write to ``report`` the seconds it took and its PeerError's message
    ("no error" when it returned)."""
    start = time.monotonic()
    try:
        call()
        message = "no error"
    except PeerError as err:
        message = str(err)
    with open(report, "w") as handle:
        handle.write(f"{time.monotonic() - start:.3f}\n{message}")


def stay_silent(report: str, seconds: float = 8.0) -> None:
    """The silent rank: alive, sending nothing, until the other rank has written ``report`` (or ``seconds``,
    well past its timeout, have passed): only the timeout can end the other's wait, and no test sleeps longer."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(report):
        time.sleep(0.05)
