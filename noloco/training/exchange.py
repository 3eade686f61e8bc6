"""How replicas talk: in one process (an index shuffle over the leading replica
dimension) or across torchrun ranks (one replica per rank).

Across ranks, the NoLoCo group exchange is point-to-point only: every rank derives
the partition from (seed, outer step) with :func:`noloco.theory.partitions.partition`,
sends its (phi, progress) to the other members of its group and receives theirs.
No collective spans all ranks on that path. Collectives are used only for ``ddp``
gradients (that is what data parallel is) and for logging at evaluations (the
replica-mean model and the weight spread); both are documented costs.

Where the group is every replica (n = N > 2, DiLoCo) the group mean is one all-reduce of (phi, progress)
over the replicas instead of N - 1 messages from every rank (a pair exchanges its two messages).
A group sum may be started and waited for later (:meth:`DistExchange.start_group_sum`, a :class:`PendingSum`):
the outer optimizer's ``overlap=True`` keeps it in flight during the next inner phase.

With S pipeline stages there are S x N ranks, rank ``s * N + k`` holding replica k of stage s
(``stage``); groups, ``ddp`` gradients and replica means are among the N ranks of one stage, and
activations move between stages point-to-point (the harness's ``noloco.llm_check.pipeline``).

:class:`DistExchange` needs only the process group's numbers (:meth:`DistExchange.join` starts or joins
it); :meth:`DistExchange.init` is the harness's form, from its run config.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import timedelta

import torch

from noloco.infra.errors import ConfigError
from noloco.infra.errors import DataError
from noloco.theory.partitions import partition


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
    """A peer rank did not answer in time, or died: a clear error instead of a hang (a DataError, exit 3).

    Under torch.distributed every message of an outer step (and the join of the process group) waits at
    most ``timeout`` seconds; past it, the rank raises this error naming the peers it waited for.

    Args:
        message: the one line: this rank, what it waited for, the peers, the timeout.

    Returns:
        The exception; the command line prints its line and exits 3.

    Raises:
        Nothing itself: raised by :class:`noloco.OuterOptimizer` and the harness under torchrun.

    Examples:
        >>> import noloco
        >>> issubclass(noloco.PeerError, noloco.DataError)
        True
    """


class PendingSum:
    """A group sum started and not yet waited for (:meth:`Exchange.start_group_sum`): ``wait()`` completes it
    into its ``x`` and returns ``x``; a second ``wait()`` does nothing. Until then neither the vector sent nor
    ``x`` may be written."""

    def __init__(self, finish, x):
        self._finish, self.x, self.done = finish, x, False

    def wait(self):
        if not self.done:
            self._finish()
            self.done = True
        return self.x


class Exchange:
    """How the replicas held here talk to the others: ``replicas`` the indices held here (all N in one
    process, one under torchrun), ``N`` the number of replicas (of one pipeline stage)."""

    replicas: list[int]
    N: int
    world_size: int = 1
    is_main: bool = True
    stage: int | None = None  # the one pipeline stage held here (None: every stage)

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
        self.N = replicas

    def average_grads(self, grads) -> None:
        for g in grads:
            g.copy_(g.mean(0, keepdim=True).expand_as(g))

    def group_sum_(self, x, wire, seed: int, step: int, group_size: int, stage: int = 0, meanwhile=None):
        """In place: row i of ``x`` (N, P) becomes the sum of ``wire``'s rows (``x`` itself, or ``x`` rounded to
        the wire's dtype, as a message would carry it) over replica i's group, in the group's order as the
        ranks sum it (:meth:`DistExchange.group_sum_`): the same bits either way, and no buffer. ``meanwhile()``
        is called where the ranks' messages would be in flight."""
        if meanwhile is not None:
            meanwhile()
        return self._group_sum(x, wire, seed, step, group_size, stage)

    def start_group_sum(self, x, wire, seed: int, step: int, group_size: int, stage: int = 0) -> PendingSum:
        """:meth:`group_sum_` to be waited for later (in one process it runs at the wait, on what was sent)."""
        return PendingSum(lambda: self._group_sum(x, wire, seed, step, group_size, stage), x)

    def _group_sum(self, x, wire, seed, step, group_size, stage):
        if wire is not x:
            x.copy_(wire)
        if group_size == 1:
            return x
        for group in partition(seed, step, self.N, group_size, stage).tolist():
            total = x[group[0]]
            for r in group[1:]:
                total.add_(x[r])
            for r in group[1:]:
                x[r].copy_(total)
        return x

    def group_means(self, phis, progs, seed: int, step: int, group_size: int, stage: int = 0):
        """The group means of phi and of the progress, two lists of (N, ...) tensors (the two-vector form;
        the outer optimizer sends one vector, :meth:`group_sum_`)."""
        xs = phis + progs
        flat = torch.cat([x.reshape(x.shape[0], -1) for x in xs], 1)
        self.group_sum_(flat, flat, seed, step, group_size, stage).div_(group_size)
        means = [part.reshape(x.shape) for part, x in zip(flat.split([x[0].numel() for x in xs], 1), xs)]
        return means[:len(phis)], means[len(phis):]

    def replica_mean(self, xs):
        return [x.double().mean(0, keepdim=True) for x in xs]

    def sum_floats(self, values: list) -> list:
        return list(values)

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
    """One replica of one stage per rank; gloo on CPU, NCCL on GPU."""

    def __init__(self, rank: int, world_size: int, local_rank: int, timeout: float, device: torch.device,
                 stages: int = 1):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.N = world_size // stages
        self.stage, replica = divmod(rank, self.N)
        self.replicas = [replica]
        self.is_main = rank == 0
        self.timeout = timeout
        self.device = device
        self.stage_group = None  # the world: one stage
        self._buffers = {}  # the receive buffers of the group exchange, kept from step to step
        if stages > 1:
            import torch.distributed as dist

            groups = [dist.new_group([self.rank_of(s, k) for k in range(self.N)]) for s in range(stages)]
            self.stage_group = groups[self.stage]

    @classmethod
    def init(cls, cfg, timeout: float) -> "DistExchange":
        """The harness's form of :meth:`join`: ``cfg`` has ``replicas``, ``stages`` and ``device``."""
        return cls.join(cfg.replicas, cfg.stages, cfg.device, timeout)

    @classmethod
    def join(cls, replicas: int | None = None, stages: int = 1, device: str = "cpu",
             timeout: float = 600.0) -> "DistExchange":
        """Join the torchrun process group (or use the one already started): gloo on CPU, NCCL on
        ``device="cuda"``, the rank's device by :func:`rank_device` (``self.device``); ``replicas``
        (None: the world over ``stages``) x ``stages`` must be the number of processes."""
        import torch.distributed as dist

        world = dist.get_world_size() if dist.is_initialized() else int(os.environ["WORLD_SIZE"])
        if replicas is None:
            replicas = world // stages
        if world != replicas * stages:
            fix = f"; give replicas={world // stages} (--replicas {world // stages})" if world % stages == 0 else ""
            raise ConfigError(f"replicas={replicas} x stages={stages} must equal the number of torchrun "
                              f"processes ({world}){fix}")
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device(rank_device(str(device), local_rank))
        cuda = device.type == "cuda"
        if cuda:
            if not torch.cuda.is_available():
                raise ConfigError("device=cuda but torch sees no GPU")
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            try:
                dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout))
            except RuntimeError as err:  # the rendezvous failed: a peer or the store is gone
                raise PeerError(f"joining the torchrun process group failed: {str(err).splitlines()[0]}") from err
        return cls(dist.get_rank(), world, local_rank, timeout, device, stages)

    def rank_of(self, stage: int, replica: int) -> int:
        return stage * self.N + replica

    @contextmanager
    def _talking(self, what: str, peers):
        """Communication with ``peers``: gloo raises when an operation starts on a socket the peer has
        closed, and when a wait runs past the timeout; either is a PeerError."""
        try:
            yield
        except RuntimeError as err:
            raise PeerError(f"rank {self.rank}: {what} with rank(s) {peers} failed or timed out after "
                            f"{self.timeout:g} s (a peer died or hangs): {str(err).splitlines()[0]}") from err

    def _run(self, start, what: str, peers) -> None:
        """Start the operations (``start()`` returns their works) and wait for them."""
        with self._talking(what, peers):
            for w in start():
                w.wait(timeout=timedelta(seconds=self.timeout))

    def send(self, messages, what: str) -> list:
        """Start sending ``(rank, tag, tensor)`` messages; the pending works (:meth:`wait` them)."""
        import torch.distributed as dist

        with self._talking(what, sorted({dst for dst, _, _ in messages})):
            return [(dist.isend(t.contiguous(), dst, tag=tag), dst) for dst, tag, t in messages]

    def receive(self, sources, shape, dtype, what: str) -> list:
        """One tensor of ``shape`` from each ``(rank, tag)``, in that order."""
        import torch.distributed as dist

        out = [torch.empty(shape, dtype=dtype, device=self.device) for _ in sources]
        self._run(lambda: [dist.irecv(t, src, tag=tag) for t, (src, tag) in zip(out, sources)], what,
                  sorted({src for src, _ in sources}))
        return out

    def wait(self, works, what: str) -> None:
        self._run(lambda: [w for w, _ in works], what, sorted({peer for _, peer in works}))

    def average_grads(self, grads) -> None:
        import torch.distributed as dist

        flat = _flat(grads)
        self._run(lambda: [dist.all_reduce(flat, group=self.stage_group, async_op=True)], "gradient all-reduce (ddp)",
                  "all")
        for g, a in zip(grads, _unflat(flat / self.N, grads)):
            g.copy_(a)

    def group_sum_(self, x, wire, seed: int, step: int, group_size: int, stage: int = 0, meanwhile=None):
        """In place: ``x`` (this replica's flat vector) becomes the sum over its group of every member's
        ``wire`` (``x`` itself, or ``x`` rounded to the wire's dtype), in the group's order: one message to
        each other member and one from each, into buffers kept from step to step; where the group is every
        replica (n = N > 2, DiLoCo) one all-reduce of ``wire`` instead. ``meanwhile()`` runs while the
        messages are in flight."""
        pending = self.start_group_sum(x, wire, seed, step, group_size, stage)
        if meanwhile is not None:
            meanwhile()
        return pending.wait()

    def start_group_sum(self, x, wire, seed: int, step: int, group_size: int, stage: int = 0) -> PendingSum:
        """:meth:`group_sum_`'s messages started; its sum formed at ``wait()``. One sum in flight per shape and
        dtype of ``wire`` (the receive buffers are kept per shape and dtype)."""
        import torch.distributed as dist

        if x.numel() == 0:
            return PendingSum(lambda: None, x)
        if group_size == self.N > 2:  # every replica: one all-reduce (the sum's order is the backend's)
            what = f"group exchange at outer step {step} (all-reduce: n = N)"
            with self._talking(what, "all"):
                works = [dist.all_reduce(wire, group=self.stage_group, async_op=True)]

            def reduced():
                self._run(lambda: works, what, "all")
                if wire is not x:
                    x.copy_(wire)

            return PendingSum(reduced, x)
        members = next(row for row in partition(seed, step, self.N, group_size, stage).tolist()
                       if self.replicas[0] in row)
        group = [self.rank_of(self.stage, r) for r in members]
        peers = [r for r in group if r != self.rank]
        key = (wire.shape, wire.dtype, wire.device, len(peers))
        if key not in self._buffers:
            self._buffers[key] = [torch.empty_like(wire) for _ in peers]
        source = dict(zip(peers, self._buffers[key]))
        ops = [dist.P2POp(dist.isend, wire, r) for r in peers] + [dist.P2POp(dist.irecv, source[r], r) for r in peers]
        what = f"group exchange at outer step {step}"
        with self._talking(what, peers):
            works = dist.batch_isend_irecv(ops) if ops else []
        source[self.rank] = wire
        return PendingSum(lambda: self._summed(works, what, peers, x, wire, group, source), x)

    def _summed(self, works, what, peers, x, wire, group, source) -> None:
        self._run(lambda: works, what, peers)
        # summed in the group's order, as the one-process sum is: every member gets the same bits. The members
        # before this one are summed into the first's receive buffer, then added to x in place (a + b is b + a
        # bit for bit), so x is written once and never copied back
        if wire is not x:
            x.copy_(source[group[0]])
            for r in group[1:]:
                x.add_(source[r])
            return x
        mine = group.index(self.rank)
        if mine:
            prefix = source[group[0]]
            for r in group[1:mine]:
                prefix.add_(source[r])
            torch.add(prefix, x, out=x)
        for r in group[mine + 1:]:
            x.add_(source[r])
        return x

    def group_means(self, phis, progs, seed: int, step: int, group_size: int, stage: int = 0):
        """The group means of phi and of the progress (the two-vector form; the outer optimizer sends one
        vector, :meth:`group_sum_`)."""
        if not phis:  # another stage's tensors: none here
            return [], []
        mine = _flat(phis + progs)
        self.group_sum_(mine, mine, seed, step, group_size, stage).div_(group_size)
        means = _unflat(mine, phis + progs)
        return means[:len(phis)], means[len(phis):]

    def replica_mean(self, xs):
        """The mean over the replicas of this rank's stage (float64)."""
        import torch.distributed as dist

        flat = _flat(xs).double()
        self._run(lambda: [dist.all_reduce(flat, group=self.stage_group, async_op=True)], "replica mean for logging",
                  "all")
        return _unflat(flat / self.N, xs)

    def sum_floats(self, values: list) -> list:
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self._run(lambda: [dist.all_reduce(t, async_op=True)], "logging all-reduce", "all")
        return t.tolist()

    def gather_floats(self, values: list) -> list:
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        self._run(lambda: [dist.all_gather(out, t, async_op=True)], "logging all-gather", "all")
        return [v for x in out for v in x.tolist()]

    def ckpt_name(self) -> str:
        return f"ckpt-rank{self.rank}.pt"

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
