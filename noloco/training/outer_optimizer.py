"""The outer optimizer around a user's model and inner optimizer: NoLoCo, DiLoCo or local training in
their own torch loop.

Every ``inner_steps`` (H) steps of the inner optimizer it runs the one outer step
(:func:`noloco.theory.outer.outer_step`) on every replica::

    progress  Delta_i = theta_i - phi_i
    delta_i  <- alpha * delta_i + beta * mean_G(i)(Delta) + gamma * (mean_G(i)(phi) - phi_i)
    phi_i    <- phi_i + delta_i;   theta_i <- phi_i   (the inner optimizer's state is kept)

with G(i) replica i's group in a fresh random partition into groups of n drawn from (seed, outer step)
(:func:`noloco.theory.partitions.partition`). The group means are communication
(:mod:`noloco.training.exchange`): point-to-point within the group across torch.distributed ranks, one
all-reduce where n = N (DiLoCo), an index shuffle in one process.

Settings are resolved as the command line resolves them (:func:`noloco.theory.methods.resolve`: a
preset, then the values given, then the method's constraints), so a bad value raises the project's
:class:`noloco.infra.errors.ConfigError` (a ``ValueError``) naming the field.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from noloco.infra.checks import check_flag, check_integer, check_seed, check_timeout
from noloco.infra.errors import ConfigError, DataError
from noloco.theory.config import OuterConfig
from noloco.theory.methods import METHOD_TABLE, METHODS, check_outer, resolve
from noloco.training.exchange import DistExchange, Exchange, LocalExchange, PendingSum
from noloco.training.replicas import Modules, Tensors, is_module_list

#: the version of :meth:`OuterOptimizer.state_dict`'s layout (2: an exchange in flight is saved as the group mean
#: of v, where version 1, read too, saved its sum)
STATE_VERSION = 2


class OuterStep:
    """What an outer step is, whoever runs it: its setting (method, :class:`noloco.theory.config.OuterConfig`,
    H), where the replicas are (this process's tensors, the exchange), the counters and the progress hooks
    an :class:`noloco.training.observer.Observer` attaches to. :class:`OuterOptimizer` runs the step;
    :class:`noloco.training.watch.Watch` watches one that another framework runs."""

    def _setup(self, model, inner_optimizer, *, inner_steps, method, preset, replicas, group_size, alpha, beta,
               gamma, momentum, seed, stages, exchange, timeout, config=None) -> None:
        self.seed = check_seed("seed", seed)
        if config is not None:  # the resolved setting passed whole: the loose values would contradict it
            loose = {"preset": preset, "group_size": group_size, "alpha": alpha, "beta": beta, "gamma": gamma,
                     "momentum": momentum}
            given = [k for k, v in loose.items() if v is not None]
            if given:
                raise ConfigError(f"config= and {', '.join(k + '=' for k in given)} both given; give the OuterConfig "
                                  f"or the loose settings, not both")
            check_outer("config", config, method or "noloco")
            if replicas is not None and replicas != config.replicas:
                raise ConfigError(f"replicas={replicas!r} but config.replicas={config.replicas}")
        check_timeout("timeout", timeout)
        if inner_optimizer is not None and not isinstance(inner_optimizer, torch.optim.Optimizer):
            raise ConfigError(f"inner_optimizer={type(inner_optimizer).__name__} is not a torch.optim.Optimizer; give "
                              "the optimizer of the inner steps, or None (then call step() after each)")
        if model is None:
            raise ConfigError("model=None; give a module, a dict of tensors, an iterable of tensors or a list of "
                              "modules")
        if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1):
            raise ConfigError(f"replicas={replicas!r} is out of range; allowed: an integer >= 1 (replicas in this "
                              f"process) or None (one per torch.distributed rank)")
        if is_module_list(model):
            if replicas is not None and replicas != len(model):
                raise ConfigError(f"replicas={replicas} but model is a list of {len(model)} modules")
            self.replicas_here = Modules(model)
            replicas = len(model)
        else:
            batched = exchange.N if isinstance(exchange, LocalExchange) else None
            self.replicas_here = Tensors(model, replicas if exchange is None else batched)
        self.params = self.replicas_here.params
        self.exchange = exchange or self._exchange(replicas, timeout)
        if config is None:
            self.method, self.config, inner = resolve(
                preset, method, replicas=self.exchange.N, group_size=group_size, alpha=alpha, beta=beta,
                gamma=gamma, momentum=momentum, steps=inner_steps)
        else:  # validated when it was made; only H (the method's default when not given) is resolved here
            if config.replicas != self.exchange.N:
                raise ConfigError(f"config.replicas={config.replicas} but the run has {self.exchange.N} replicas")
            self.method, self.config = method or "noloco", config
            inner = resolve(None, self.method, steps=inner_steps)[2]
        if METHOD_TABLE[self.method].synchronous:
            raise ConfigError(f"method={self.method!r} averages gradients at every inner step, which is torch's "
                              f"DistributedDataParallel, not an outer step; allowed here: "
                              f"{', '.join(m for m in METHODS if not METHOD_TABLE[m].synchronous)}")
        self.inner_steps = inner.steps
        self.stages = self._stages(stages)
        self.outer_done = 0  # outer steps done
        self.inner_done = 0  # inner steps of the current phase done
        self._progress_hooks = []
        # its state is the user's; the observer reads Adam's second moment. A wrapper (accelerate's
        # AcceleratedOptimizer) holds the torch optimizer whose step() runs the hooks
        self.inner_optimizer = torch_optimizer(inner_optimizer)
        self._optimizer_hooks = []  # handles of hooks on the inner optimizer (close() removes them)

    def _exchange(self, replicas: int | None, timeout: float) -> Exchange:
        if replicas is not None:
            return LocalExchange(replicas)
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError("replicas=None means one replica per torch.distributed rank, but no process group "
                              "is started: call torch.distributed.init_process_group() first (under torchrun), "
                              "or give replicas=N for N replicas in this process")
        device = next(iter(self.params.values())).device
        return DistExchange(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)),
                            timeout, device)

    def _stages(self, stages) -> list[list[str]]:
        """Sets of parameter names whose replicas form their own groups (pipeline stages; stage s draws
        its groups from stream s). Default: one set, every parameter."""
        if stages is None:
            return [list(self.params)]
        if isinstance(stages, (str, dict)) or not hasattr(stages, "__iter__"):  # 3 was a TypeError
            raise ConfigError(f"stages={stages!r} is not a list of lists of parameter names")
        stages = [list(keys) for keys in stages]
        named = [k for keys in stages for k in keys]
        if sorted(named) != sorted(self.params):
            raise ConfigError("stages must name every parameter exactly once")
        return stages

    # ------------------------------------------------------------------ the loop

    @property
    def replicas(self) -> int:
        """N, every replica of the run (not only those held here)."""
        return self.exchange.N

    def add_progress_hook(self, hook) -> "_Handle":
        """Call ``hook(phi, progress, outer_step)`` at every outer step before the exchange (dicts of
        this process's tensors; do not modify them); ``.remove()`` on the returned handle stops it."""
        if not callable(hook):  # named now, not as a TypeError at the next outer step
            raise ConfigError(f"hook={hook!r} is not callable; give a function of (phi, progress, outer_step)")
        self._progress_hooks.append(hook)
        return _Handle(self._progress_hooks, hook)

    def start_at(self, outer_step: int, inner_step: int = 0) -> None:
        """Count on from ``outer_step`` outer steps done and ``inner_step`` inner steps of the current phase.

        A loop that keeps its own checkpoints (phi and delta restored by hand) resumes the counters here; the
        groups of outer step t are drawn from (seed, t), so they follow.

        Args:
            outer_step: outer steps already done, >= 0.
            inner_step: inner steps of the current phase already done, 0 <= inner_step < inner_steps.

        Raises:
            ConfigError: a count that is not an integer in range.
        """
        self.outer_done = check_integer("outer_step", outer_step, "an integer >= 0", lambda v: v >= 0)
        self.inner_done = check_integer("inner_step", inner_step, f"an integer 0 <= inner_step < {self.inner_steps}",
                                        lambda v: 0 <= v < self.inner_steps)

    def settle(self) -> None:
        """Bring ``phi`` and ``outer_done`` up to date (the observer calls it when it closes)."""

    def close(self) -> None:
        """Detach from the inner optimizer (its steps no longer count)."""
        for handle in self._optimizer_hooks:
            handle.remove()
        self._optimizer_hooks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class OuterOptimizer(OuterStep):
    """The outer step of NoLoCo, DiLoCo or local training around a user's model and inner optimizer.

    Every ``inner_steps`` (H) steps of the inner optimizer, every replica i runs the outer step
    (:func:`noloco.outer_step`) with its group G(i) of a fresh random partition into groups of n::

        Delta_i = theta_i - phi_i
        delta_i <- alpha * delta_i + beta * mean_G(i)(Delta) + gamma * (mean_G(i)(phi) - phi_i)
        phi_i   <- phi_i + delta_i;   theta_i <- phi_i

    (heavy-ball; ``momentum="nesterov"`` is torch's convention). With an ``inner_optimizer`` the outer step
    runs from a hook after its ``step()``; without one, call :meth:`step` after every inner step. Replicas
    must start equal (seed torch alike on every rank).

    Args:
        model: a module, a dict or iterable of tensors, or a list of N modules (one replica each).
        inner_optimizer: the ``torch.optim.Optimizer`` of the inner steps (or a wrapper holding one), or None.
        config: the outer setting passed whole, an :class:`noloco.OuterConfig` (as :func:`noloco.resolve`
            returns it); then ``preset``, ``group_size``, ``alpha``, ``beta``, ``gamma`` and ``momentum`` are
            not given, and ``method`` (default ``"noloco"``, the setting as given) must leave it unchanged.
        inner_steps: H, inner steps per outer step (None: the method's preset's, 50 for noloco).
        method: ``"noloco"``, ``"diloco"`` or ``"local"`` (:data:`noloco.METHODS` less ``ddp``).
        preset: ``"paper"``, ``"diloco"`` or ``"diloco-nesterov"`` (:data:`noloco.PRESETS`); None: the
            method's.
        replicas: None, one replica per torch.distributed rank (N = world size; the process group must be
            started); an integer N, all N replicas in this process, every tensor with a leading dimension N.
        group_size: n, dividing N. alpha: outer momentum, 0 <= alpha < 1. beta: outer learning rate on the
            group-mean progress. gamma: pull towards the group-mean weights. momentum: ``"heavy-ball"`` or
            ``"nesterov"``. (None: the preset's value, then the method's constraints.)
        seed: seed of the groups, the same on every rank.
        outer_dtype: dtype of phi and delta (None: each parameter's).
        wire_dtype: dtype of the one vector each replica sends per outer step, beta * progress + gamma * phi
            (None: the outer state's; ``torch.bfloat16`` halves the bytes).
        stages: lists of parameter names whose replicas form their own groups (pipeline stages).
        timeout: seconds a rank waits for a peer under torch.distributed.
        overlap: the exchange in flight during the next inner phase (:func:`noloco.theory.outer.late_outer_step`):
            the step of sync t is applied at sync t + 1, the progress made since carried on top; the first sync
            only sends, and :meth:`settle` or :meth:`close` applies the last. One more P-vector of memory.

    Returns:
        The optimizer; ``outer_done`` counts its outer steps, ``phi`` and ``delta`` are its state.

    Raises:
        ConfigError: a value out of range, a conflict with the method, or ``config`` next to a loose setting.
        PeerError: under torch.distributed, a peer of the group died or did not answer within ``timeout``.

    Examples:
        4 replicas of a 2-vector in one process, H = 2, SGD lr 1 adding 1 to every weight:

        >>> import torch, noloco
        >>> w = torch.nn.Parameter(torch.zeros(4, 2))
        >>> inner = torch.optim.SGD([w], lr=1.0)
        >>> outer = noloco.OuterOptimizer([w], inner, replicas=4, inner_steps=2, alpha=0.5, beta=0.5)
        >>> for _ in range(2):
        ...     w.grad = -torch.ones_like(w)
        ...     inner.step()
        >>> outer.outer_done, w[0].tolist()   # progress 2, delta 0.5 * 2 = 1 (equal replicas: no pull)
        (1, [1.0, 1.0])

        The same setting passed whole, as resolved once:

        >>> method, config, _ = noloco.resolve("paper", replicas=4, alpha=0.5, beta=0.5)
        >>> noloco.OuterOptimizer([w], inner, config=config, replicas=4, inner_steps=2).config == config
        True
    """

    def __init__(self, model, inner_optimizer: torch.optim.Optimizer | None = None, *,
                 config: OuterConfig | None = None, inner_steps: int | None = None, method: str | None = None,
                 preset: str | None = None, replicas: int | None = None, group_size: int | None = None,
                 alpha: float | None = None, beta: float | None = None, gamma: float | None = None,
                 momentum: str | None = None, seed: int = 0, outer_dtype: torch.dtype | None = None,
                 wire_dtype: torch.dtype | None = None, stages=None, timeout: float = 600.0, overlap: bool = False):
        if outer_dtype is not None and not isinstance(outer_dtype, torch.dtype):
            raise ConfigError(f"outer_dtype={outer_dtype!r} is not a torch dtype; allowed: e.g. torch.float32, "
                              f"or None (each parameter's)")
        if wire_dtype is not None and not (isinstance(wire_dtype, torch.dtype) and wire_dtype.is_floating_point):
            raise ConfigError(f"wire_dtype={wire_dtype!r} is not a floating torch dtype; allowed: e.g. "
                              f"torch.bfloat16, or None (the outer state's dtype)")
        check_flag("overlap", overlap)
        exchange = self.__dict__.pop("_given_exchange", None)  # set by _placed only
        self._setup(model, inner_optimizer, inner_steps=inner_steps, method=method, preset=preset, replicas=replicas,
                    group_size=group_size, alpha=alpha, beta=beta, gamma=gamma, momentum=momentum, seed=seed,
                    stages=stages, exchange=exchange, timeout=timeout, config=config)
        self.wire_dtype, self.overlap = wire_dtype, overlap
        self._pending = None  # overlap: the group sums started at the last sync, one per bucket
        theta = self.replicas_here.theta()
        # phi, delta and the outer step's work vector live in one flat buffer per stage and dtype; self.phi and
        # self.delta hold views of them (an entry replaced by the caller is copied back in at the next step)
        rows = self.exchange.N if isinstance(self.exchange, LocalExchange) else None
        self.buckets = []
        for stage, keys in enumerate(self.stages):
            dtypes = {k: outer_dtype or theta[k].dtype for k in keys}
            for dtype in dict.fromkeys(dtypes.values()):
                same = [k for k in keys if dtypes[k] == dtype]
                self.buckets.append(_Bucket(same, theta, dtype, wire_dtype, rows, stage, overlap))
        views = {k: b for b in self.buckets for k in b.keys}
        self.phi = {k: views[k].phi_views[k] for k in theta}  # the model's order
        self.delta = {k: views[k].delta_views[k] for k in theta}
        self._anchor = {k: views[k].anchor_views[k] for k in theta} if overlap else None
        if self.inner_optimizer is not None:
            self._optimizer_hooks.append(self.inner_optimizer.register_step_post_hook(lambda *_: self.step()))

    @classmethod
    def _placed(cls, exchange: Exchange, model, inner_optimizer=None, **settings) -> "OuterOptimizer":
        """The harness's constructor: the replicas are where its own ``exchange`` puts them (a pipeline
        rank's stage, a batched group), which no user chooses; ``settings`` are the public keywords."""
        self = cls.__new__(cls)
        self._given_exchange = exchange
        self.__init__(model, inner_optimizer, **settings)
        return self

    # ------------------------------------------------------------------ the outer step

    def step(self) -> bool:
        """Count one inner step; after the H-th of a phase run the outer step. True when it ran."""
        self.inner_done += 1
        if self.inner_done < self.inner_steps:
            return False
        self.sync()
        return True

    @torch.no_grad()
    def sync(self) -> None:
        """The outer step now, whatever the count of inner steps; the next phase starts from phi.

        One vector per replica is exchanged: ``v / n`` with ``v = beta * progress + gamma * phi``, whose group sum
        less ``gamma * phi_i`` is the update ``u_i`` of :func:`noloco.theory.outer.outer_step` (the same rule,
        rearranged; equal to float rounding, tests/test_outer_optimizer.py); every operation writes into
        buffers allocated once, and with heavy-ball momentum ``delta - gamma / alpha * phi`` is formed while
        the messages are in flight. With ``overlap=True`` the exchange started at the last sync is waited for
        and applied first (the weights to phi plus the progress since), then this one is started and not waited
        for: the next phase starts from where the replica stands."""
        o = self.config
        for b in self.buckets:
            b.adopt(self.phi, self.delta)
        finished = self._pending is not None
        if finished:
            self._finish()
        self._call_hooks()
        if self.overlap:
            pending = []
            for b in self.buckets:
                # the weights at the send: where the next progress is measured from (after _finish they are the
                # anchor already, bit for bit where the model has the outer state's dtype)
                source = b.anchor if finished and b.exact else None
                if source is None:
                    self.replicas_here.scaled_into(1.0, b.anchor_views)
                self._form(b, source)
                pending.append(self.exchange.start_group_sum(b.work, b.wire, self.seed, self.outer_done,
                                                             o.group_size, b.stage))
            self._pending = pending
            self.inner_done = 0
            return
        for b in self.buckets:
            self._form(b)
            self.exchange.group_sum_(b.work, b.wire, self.seed, self.outer_done, o.group_size, b.stage,
                                     lambda b=b: self._meanwhile(b))
            self._apply(b)
        self.replicas_here.load(self.phi)
        self.outer_done += 1
        self.inner_done = 0

    def _finish(self) -> None:
        """overlap: the exchange of the last sync waited for and applied by the unchanged rule; the weights moved
        to phi + (theta - anchor), the progress made since that sync, and kept as the anchor."""
        pending, self._pending = self._pending, None
        for b, sent in zip(self.buckets, pending):
            self._meanwhile(b)
            sent.wait()
            self._apply(b)
            self.replicas_here.progress_into(b.anchor_views, b.work_views)
            torch.add(b.work, b.phi, out=b.anchor)
        self.replicas_here.load(self._anchor)
        self.outer_done += 1

    def _call_hooks(self) -> None:
        if self._progress_hooks:  # the progress theta - phi (the theory's sign), only for the hooks
            progress = {}
            for b in self.buckets:
                if b.progress is None:
                    b.progress = torch.empty_like(b.phi)
                    b.progress_views = b.views(b.progress)
                self.replicas_here.progress_into(b.phi_views, b.progress_views)
                progress.update(b.progress_views)
            for hook in self._progress_hooks:
                hook(self.phi, progress, self.outer_done)

    def _form(self, b: "_Bucket", theta=None) -> None:
        """v / n = (beta theta + (gamma - beta) phi) / n into ``work`` (one pass where beta = gamma), and onto the
        wire: the group sum of what is sent is then the group mean of v (for n = 2 the division is exact); theta
        is the model's, or the flat ``theta`` given."""
        o = self.config
        n = o.group_size
        if theta is None:
            self.replicas_here.scaled_into(o.beta / n, b.work_views)
        else:
            torch.mul(theta, o.beta / n, out=b.work)
        if o.gamma != o.beta:
            b.work.add_(b.phi, alpha=(o.gamma - o.beta) / n)
        if b.wire is not b.work:
            b.wire.copy_(b.work)

    def _meanwhile(self, b: "_Bucket") -> None:
        """heavy-ball, while the messages are in flight: delta - gamma / alpha phi, one pass (none where gamma = 0),
        alpha applied by :meth:`_apply` (where alpha = 0: - gamma phi)."""
        o = self.config
        if o.momentum != "heavy-ball":
            return
        if o.alpha:
            if o.gamma:
                b.delta.sub_(b.phi, alpha=o.gamma / o.alpha)
        else:
            torch.mul(b.phi, -o.gamma, out=b.delta)

    def _apply(self, b: "_Bucket") -> None:
        """The rest of the outer step once ``work`` holds the group mean of v (the group sum of v / n)."""
        o = self.config
        if o.momentum == "heavy-ball":  # delta <- mean_G(v) + alpha (delta - gamma / alpha phi);  phi <- phi + delta
            torch.add(b.work, b.delta, alpha=o.alpha or 1.0, out=b.delta)
            b.phi.add_(b.delta)
        else:  # u = mean_G(v) - gamma phi;  delta <- alpha delta + u;  phi <- phi + u + alpha delta
            if o.gamma:
                b.work.sub_(b.phi, alpha=o.gamma)
            torch.add(b.work, b.delta, alpha=o.alpha, out=b.delta)
            b.phi.add_(b.work).add_(b.delta, alpha=o.alpha)

    def settle(self) -> None:
        """``overlap=True``: the exchange in flight waited for and applied now (the weights to phi plus the
        progress since the last sync); the next sync then only sends."""
        if self._pending is not None:
            with torch.no_grad():
                self._finish()

    def close(self) -> None:
        """Apply an exchange still in flight (``overlap=True``), then detach from the inner optimizer."""
        self.settle()
        super().close()

    def __repr__(self) -> str:
        o = self.config
        return (f"OuterOptimizer(method={self.method!r}, replicas={o.replicas}, group_size={o.group_size}, "
                f"alpha={o.alpha:g}, beta={o.beta:g}, gamma={o.gamma:g}, momentum={o.momentum!r}, "
                f"inner_steps={self.inner_steps}, seed={self.seed}, outer_done={self.outer_done}"
                f"{', overlap=True' if self.overlap else ''})")

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """phi, delta, the counters, the seed and the setting: plain data (``torch.load(...,
        weights_only=True)`` reads it). Save it with the model's and the inner optimizer's state; under
        torch.distributed every rank saves its own. With ``overlap=True`` an exchange in flight is waited for
        (not applied): its group sum and the anchor are saved, and applied at the next sync after a load."""
        state = {"version": STATE_VERSION, "method": self.method, "outer": dataclasses.asdict(self.config),
                "inner_steps": self.inner_steps, "seed": self.seed, "outer_step": self.outer_done,
                "inner_step": self.inner_done, "replicas_here": list(self.exchange.replicas),
                # copies: a view would carry its whole flat buffer into the file
                "phi": {k: v.clone(memory_format=torch.contiguous_format) for k, v in self.phi.items()},
                "delta": {k: v.clone(memory_format=torch.contiguous_format) for k, v in self.delta.items()}}
        if self._pending is not None:
            for sent in self._pending:
                sent.wait()
            views = {k: b for b in self.buckets for k in b.keys}
            state["pending"] = {part: {k: getattr(views[k], part + "_views")[k].clone(
                memory_format=torch.contiguous_format) for k in self.phi} for part in ("work", "anchor")}
        return state

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Resume from :meth:`state_dict`: phi, delta, counters and seed. ``strict``: the method, the outer
        setting and H must equal this optimizer's (ConfigError naming the field). At an outer-step
        boundary the parameters are set to phi; mid-phase they are the model's (load its state too)."""
        check_flag("strict", strict)  # "no" is truthy: a mismatched setting would be refused, not loaded
        if not isinstance(state, dict) or state.get("version") not in (1, STATE_VERSION):
            found = state.get("version") if isinstance(state, dict) else type(state).__name__
            raise DataError(f"outer optimizer state of version {found!r}; this version reads 1 and {STATE_VERSION}")
        # checked before anything is copied: a state without its counters raised a KeyError after phi was loaded
        for part in ("outer", "phi", "delta", "pending"):
            if not isinstance(state.get(part) or {}, dict):
                raise DataError(f"the state's {part} is a {type(state[part]).__name__}, not a dict (give what "
                                f"state_dict() returned)")
        for name in ("seed", "outer_step", "inner_step"):
            value = state.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DataError(f"the state's {name} is {value!r}, not an integer >= 0 (give what state_dict() "
                                f"returned)")
        if strict:
            mine = {"method": self.method, "inner_steps": self.inner_steps, **dataclasses.asdict(self.config)}
            theirs = {"method": state.get("method"), "inner_steps": state.get("inner_steps"), **state.get("outer", {})}
            for name, value in mine.items():
                if theirs.get(name) != value:
                    raise ConfigError(f"{name}={theirs.get(name)!r} in the state loaded (now {value!r}); "
                                      f"load_state_dict(state, strict=False) keeps this optimizer's setting")
        if state.get("replicas_here") != list(self.exchange.replicas):
            raise DataError(f"the state holds replicas {state.get('replicas_here')}, this process "
                            f"{list(self.exchange.replicas)} (under torch.distributed load each rank's own)")
        for part in ("phi", "delta"):
            saved = state.get(part) or {}
            for k, mine in getattr(self, part).items():
                got = saved.get(k)
                if not isinstance(got, torch.Tensor) or got.shape != mine.shape:
                    shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                    raise DataError(f"the state holds {part}[{k!r}] of shape {shape}, expected {tuple(mine.shape)}")
        pending = state.get("pending")
        if pending is not None and not self.overlap:
            raise ConfigError("the state holds an exchange in flight (saved with overlap=True); load it into an "
                              "OuterOptimizer(..., overlap=True)")
        views = {k: b for b in self.buckets for k in b.keys}
        for part in ("work", "anchor") if pending is not None else ():
            for k in self.phi:
                got = (pending.get(part) or {}).get(k)
                mine = getattr(views[k], part + "_views")[k]
                if not isinstance(got, torch.Tensor) or got.shape != mine.shape:
                    raise DataError(f"the state's exchange in flight lacks {part}[{k!r}] of shape {tuple(mine.shape)}")
        for sent in self._pending or ():  # this optimizer's own exchange in flight: received, then dropped
            sent.wait()
        for part in ("phi", "delta"):
            for k, mine in getattr(self, part).items():
                mine.copy_(state[part][k])
        self._pending = None
        if pending is not None:
            for k in self.phi:
                views[k].work_views[k].copy_(pending["work"][k])
                if state["version"] == 1:  # its group sum of v made the mean
                    views[k].work_views[k].div_(self.config.group_size)
                views[k].anchor_views[k].copy_(pending["anchor"][k])
            self._pending = [PendingSum(lambda: None, b.work) for b in self.buckets]
        self.seed = check_seed("seed", state["seed"])
        self.outer_done, self.inner_done = int(state["outer_step"]), int(state["inner_step"])
        if self.inner_done == 0:
            with torch.no_grad():
                self.replicas_here.load(self.phi if pending is None else self._anchor)


def torch_optimizer(optimizer):
    """The torch optimizer inside a wrapper (accelerate's ``AcceleratedOptimizer`` holds it as ``.optimizer``):
    the one whose ``step()`` runs hooks and whose ``state`` holds Adam's moments."""
    while optimizer is not None and not hasattr(optimizer, "_optimizer_step_post_hooks") and \
            hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


class _Bucket:
    """The outer state of one pipeline stage's parameters of one dtype, flat: ``phi``, ``delta`` and ``work``
    (the progress, then the vector sent, then its group mean, then the update) of shape (P,) or (N, P),
    with views per parameter; ``wire`` is ``work`` or, for another wire dtype, its rounded copy; with overlap,
    ``anchor``: the weights at the last sync (where the progress is measured from)."""

    def __init__(self, keys: list, theta: dict, dtype: torch.dtype, wire_dtype, batched: int | None, stage: int,
                 overlap: bool = False):
        self.keys, self.stage = keys, stage
        first = theta[keys[0]]
        lead = (batched,) if batched else ()
        sizes = [theta[k][0].numel() if batched else theta[k].numel() for k in keys]
        self.phi = torch.empty(*lead, sum(sizes), dtype=dtype, device=first.device)
        self.delta = torch.zeros_like(self.phi)
        self.work = torch.empty_like(self.phi)
        self.wire = self.work if wire_dtype in (None, dtype) else torch.empty_like(self.phi, dtype=wire_dtype)

        def views(flat):
            parts = flat.split(sizes, dim=-1)
            return {k: part.view(theta[k].shape) for k, part in zip(keys, parts)}

        self.views = views
        self.phi_views, self.delta_views, self.work_views = views(self.phi), views(self.delta), views(self.work)
        self.progress = self.progress_views = None  # allocated when a progress hook is attached
        self.anchor = torch.empty_like(self.phi) if overlap else None
        self.anchor_views = views(self.anchor) if overlap else None
        self.exact = all(theta[k].dtype == dtype for k in keys)  # the model holds the outer state's values
        for k in keys:
            self.phi_views[k].copy_(theta[k])

    def adopt(self, phi: dict, delta: dict) -> None:
        """Entries of ``phi`` or ``delta`` that the caller replaced (a loaded checkpoint, a subclass) are
        copied into the buffer, and the views put back."""
        for mine, given in ((self.phi_views, phi), (self.delta_views, delta)):
            for k in self.keys:
                if given[k] is not mine[k]:
                    mine[k].copy_(given[k])
                    given[k] = mine[k]


class _Handle:
    def __init__(self, hooks: list, hook):
        self.hooks, self.hook = hooks, hook

    def remove(self) -> None:
        if self.hook in self.hooks:
            self.hooks.remove(self.hook)
