"""Shared by the tests that run a real gloo group in which one rank stays silent."""

from __future__ import annotations

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
