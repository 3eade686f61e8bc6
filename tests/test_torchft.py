"""noloco.Watch on torchft's DiLoCo: torchft's lighthouse in this process, two replica groups of one process each
(their manager, their TCPStore, torchft's gloo process group), DiLoCo's outer Nesterov SGD every H steps. The
observer's all-gather needs a group across the replicas, which torchft does not give (its groups are rebuilt at
every quorum), so the two processes also start a plain gloo group for it. The watched run measures what the
toolkit's own DiLoCo step measures on the same replicas and data (tests/test_watch.py's loop, float64), and its
folder is complete. Skipped without the [torchft] extra; slow: 175 s at load 12 on the 2 shared cores."""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta

import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
if importlib.util.find_spec("torchft") is None:  # not imported here: collecting this file stays cheap
    pytest.skip("torchft is not installed (the [torchft] extra)", allow_module_level=True)

from peers import as_torchrun, spawn_ranks  # noqa: E402 (tests/peers.py)
from test_watch import DILOCO, H, LR, T, _loss, _models, _run, measured_as_own  # noqa: E402

pytestmark = [needs_torch, pytest.mark.torch, pytest.mark.slow]


def _replica_group(rank, world, port, lighthouse, folder):
    """Replica group ``rank``: torchft's manager and DiLoCo around one model, watched."""
    as_torchrun(rank, world, port)
    import torch.distributed as dist
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    import noloco

    (model,) = _models(1)  # every replica from seed 0: equal, so torchft's first sync needs no healing
    inner = torch.optim.AdamW(model.parameters(), lr=LR)
    outer = torch.optim.SGD(model.parameters(), lr=DILOCO["beta"], momentum=DILOCO["alpha"], nesterov=True)
    store = dist.TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(), min_replica_size=2, load_state_dict=None, state_dict=None,
                      use_async_quorum=False, init_sync=False, replica_id=str(rank), store_addr="localhost",
                      store_port=store.port, rank=0, world_size=1, lighthouse_addr=lighthouse,
                      timeout=timedelta(seconds=60))
    dist.init_process_group("gloo")  # the observer's group across the replicas (torchrun's variables)
    watch = noloco.Watch(model, inner, **DILOCO)  # before DiLoCo hooks the optimizer: the Watch's hooks run first
    observer = noloco.Observer(watch, folder, outer_steps=T, lr=LR, sample=None)
    with DiLoCo(manager, [model], inner, outer, sync_every=H):
        for step in range(T * H):
            inner.zero_grad()
            _loss(model, rank, step).backward()
            inner.step()  # every H-th: DiLoCo's outer step, from its hook after the Watch's
            if (step + 1) % H == 0:
                with torch.no_grad():
                    loss = float(_loss(model, 999, 0))  # DiLoCo: every replica is the average model
                observer.log((step + 1) // H, val_loss_avg_model=loss, val_loss_replicas_mean=loss)
    observer.close()
    torch.save({"weights": [p.detach().clone() for p in model.parameters()], "outer_done": watch.outer_done,
                "manager_step": manager.current_step()}, f"{folder}-rank{rank}.pt")
    manager.shutdown(wait=False)
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors (docs/reliability.md)


def test_torchft_diloco_is_watched_as_the_toolkits_own_step(tmp_path):
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    try:
        spawn_ranks(_replica_group, lighthouse.address(), str(tmp_path / "run"), deadline=300.0)
    finally:
        lighthouse.shutdown()
    own_models, own = _run(tmp_path / "own", watched=False, replicas=2)
    for rank in range(2):
        saved = torch.load(tmp_path / f"run-rank{rank}.pt", weights_only=True)
        assert saved["outer_done"] == saved["manager_step"] == T  # every sync committed, every one seen
        for a, b in zip(saved["weights"], own_models[rank].parameters(), strict=True):
            torch.testing.assert_close(a, b.detach(), rtol=0, atol=1e-12)  # torchft's DiLoCo is the toolkit's
    run, result = measured_as_own(tmp_path / "run", tmp_path / "own")
    assert run.world_size == 2 and result["adam_second_moment"]["sum_sqrt_v"] > 0
