"""How replicas talk: the group sum across gloo ranks gives every member the bits of the one-process sum, for
groups of two (the partner's message added in place) and of three (the members before this one summed first)."""

import os

import pytest


def _rank(rank, world, port, out):
    import datetime

    import torch
    import torch.distributed as dist

    from noloco.training.exchange import DistExchange

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    ex = DistExchange(rank, world, rank, 60.0, torch.device("cpu"))
    rows = torch.randn(world, 1000, generator=torch.Generator().manual_seed(0))
    got = {}
    for n in (2, 3):
        for step in range(3):
            x = rows[rank].clone()
            ex.group_sum_(x, x, 4, step, n)
            got[(n, step)] = x
    torch.save(got, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors (docs/reliability.md)


@pytest.mark.torch
@pytest.mark.slow
def test_the_group_sum_across_ranks_is_the_one_process_sum_bit_for_bit(tmp_path):
    import torch
    import torch.multiprocessing as mp

    from noloco.training.exchange import LocalExchange, free_port

    world = 6
    mp.start_processes(_rank, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True, start_method="spawn")
    rows = torch.randn(world, 1000, generator=torch.Generator().manual_seed(0))
    for n in (2, 3):
        for step in range(3):
            x = rows.clone()
            LocalExchange(world).group_sum_(x, x, 4, step, n)
            for rank in range(world):
                got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)[(n, step)]
                assert torch.equal(got, x[rank]), (n, step, rank)
    # the sums are not all equal whatever the order: float addition of three terms depends on it
    a, b, c = rows[0], rows[1], rows[2]
    assert not torch.equal((a + b) + c, (b + c) + a)
