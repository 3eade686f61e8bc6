"""How replicas talk: in one process (an index shuffle over the leading replica
dimension) or across torchrun ranks (one replica per rank).

Across ranks, the NoLoCo group exchange is point-to-point only: every rank derives
the partition from (seed, outer step) with :func:`theory.partitions.partition`,
sends its (phi, progress) to the other members of its group and receives theirs.
No collective spans all ranks on that path. Collectives are used only for ``ddp``
gradients (that is what data parallel is) and for logging at evaluations (the
replica-mean model and the weight spread); both are documented costs.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from theory.config import ConfigError
from theory.io import DataError
from theory.partitions import partition


def free_port() -> int:
    """A free TCP port on localhost for a rendezvous (the OS picks it; a race with another
    process taking it in between is possible but harmless for tests and measurements)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_device(device: str, local_rank: int) -> str:
    """The device of one torchrun rank: the one rule for CUDA under torchrun.

    NCCL binds rank r to ``cuda:LOCAL_RANK``, so with ``device="cuda"`` each rank uses
    ``cuda:{local_rank}`` (pick the GPUs with ``CUDA_VISIBLE_DEVICES``). An explicit
    ``cuda:K`` would put every rank on GPU K, so it is refused rather than reinterpreted.
    """
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        return f"cuda:{local_rank}"
    raise ConfigError(f"device={device!r} under torchrun: every rank would use that one GPU while NCCL binds "
                      f"cuda:LOCAL_RANK; give --device cuda (each rank then uses cuda:LOCAL_RANK; choose the "
                      f"GPUs with CUDA_VISIBLE_DEVICES)")


class PeerError(DataError):
    """A peer did not answer in time (or died): a clear error instead of a hang (exit code 3)."""


class Exchange:
    replicas: list[int]
    world_size: int = 1
    is_main: bool = True

    def ckpt_name(self) -> str:
        return "ckpt.pt"

    def agree(self, values: list) -> list:
        """Every rank's ``values`` (floats), concatenated in rank order: one collective, used at the
        start (did every rank prepare?) and at checkpoints (did any replica diverge?)."""
        return self.gather_floats(values)

    def close(self) -> None:
        pass


class LocalExchange(Exchange):
    """All N replicas stacked along dimension 0 of every tensor."""

    def __init__(self, replicas: int):
        self.replicas = list(range(replicas))

    def average_grads(self, grads) -> None:
        for g in grads:
            g.copy_(g.mean(0, keepdim=True).expand_as(g))

    def group_means(self, phis, progs, seed: int, step: int, group_size: int):
        N = len(self.replicas)
        perm = torch.from_numpy(partition(seed, step, N, group_size).ravel()).to(phis[0].device)

        def mean(x):
            # consecutive blocks of n in the permuted order are the groups
            blocks = x[perm].view(N // group_size, group_size, *x.shape[1:])
            out = torch.empty_like(x)
            out[perm] = blocks.mean(1, keepdim=True).expand_as(blocks).reshape(x.shape)
            return out

        return [mean(x) for x in phis], [mean(x) for x in progs]

    def replica_mean(self, xs):
        return [x.double().mean(0, keepdim=True) for x in xs]

    def sum_scalar(self, value: float) -> float:
        return value

    def gather_floats(self, values: list) -> list:
        return list(values)


def _flat(xs) -> torch.Tensor:
    return torch.cat([x.reshape(-1) for x in xs])


def _unflat(flat: torch.Tensor, like):
    out, i = [], 0
    for x in like:
        out.append(flat[i:i + x.numel()].view_as(x))
        i += x.numel()
    return out


class DistExchange(Exchange):
    """One replica per rank; gloo on CPU, NCCL on GPU."""

    def __init__(self, rank: int, world_size: int, local_rank: int, timeout: float, device: torch.device):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.replicas = [rank]
        self.is_main = rank == 0
        self.timeout = timeout
        self.device = device

    @classmethod
    def init(cls, cfg, timeout: float) -> "DistExchange":
        """Join the torchrun process group; the rank's device is :func:`rank_device` (``self.device``)."""
        import torch.distributed as dist

        world = int(os.environ["WORLD_SIZE"])
        if world != cfg.replicas:
            raise ConfigError(f"replicas={cfg.replicas} must equal the number of torchrun processes ({world})")
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device(rank_device(cfg.device, local_rank))
        cuda = device.type == "cuda"
        if cuda:
            if not torch.cuda.is_available():
                raise ConfigError("device=cuda but torch sees no GPU")
            torch.cuda.set_device(device)
        try:
            dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout))
        except RuntimeError as err:  # the rendezvous failed: a peer or the store is gone
            raise PeerError(f"joining the torchrun process group failed: {str(err).splitlines()[0]}") from err
        return cls(dist.get_rank(), world, local_rank, timeout, device)

    def _wait(self, works, what: str, peers) -> None:
        try:
            for w in works:
                w.wait(timeout=timedelta(seconds=self.timeout))
        except RuntimeError as err:
            raise PeerError(f"rank {self.rank}: {what} with rank(s) {peers} failed or timed out after "
                            f"{self.timeout:g} s (a peer died or hangs): {str(err).splitlines()[0]}") from err

    def average_grads(self, grads) -> None:
        import torch.distributed as dist

        flat = _flat(grads)
        self._wait([dist.all_reduce(flat, async_op=True)], "gradient all-reduce (ddp)", "all")
        for g, a in zip(grads, _unflat(flat / self.world_size, grads)):
            g.copy_(a)

    def group_means(self, phis, progs, seed: int, step: int, group_size: int):
        import torch.distributed as dist

        group = next(row for row in partition(seed, step, self.world_size, group_size).tolist() if self.rank in row)
        mine = _flat(phis + progs)
        peers = [r for r in group if r != self.rank]
        received = {r: torch.empty_like(mine) for r in peers}
        ops = [dist.P2POp(dist.isend, mine, r) for r in peers] + [dist.P2POp(dist.irecv, received[r], r) for r in peers]
        if ops:
            self._wait(dist.batch_isend_irecv(ops), f"group exchange at outer step {step}", peers)
        # sum in the group's order, as the one-process shuffle does
        total = sum(mine if r == self.rank else received[r] for r in group) / len(group)
        means = _unflat(total, phis + progs)
        return means[:len(phis)], means[len(phis):]

    def replica_mean(self, xs):
        import torch.distributed as dist

        flat = _flat(xs).double()
        self._wait([dist.all_reduce(flat, async_op=True)], "replica mean for logging", "all")
        return _unflat(flat / self.world_size, xs)

    def sum_scalar(self, value: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        self._wait([dist.all_reduce(t, async_op=True)], "logging all-reduce", "all")
        return float(t.item())

    def gather_floats(self, values: list) -> list:
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        self._wait([dist.all_gather(out, t, async_op=True)], "logging all-gather", "all")
        return [v for x in out for v in x.tolist()]

    def ckpt_name(self) -> str:
        return f"ckpt-rank{self.rank}.pt"

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
