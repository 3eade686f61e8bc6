"""Watch an outer step the toolkit did not write: a :class:`noloco.Observer` on a run whose synchronisation is
another framework's (accelerate's ``LocalSGD``, torchft's DiLoCo, the reference code, a loop of your own).

The observer needs, at every outer step, the outer weights phi and the progress theta - phi; both can be read
from the model's parameters alone. :class:`Watch` keeps a copy of phi, taken when the framework has finished a
synchronisation (the parameters are then the new outer weights), and at the next synchronisation reads the
progress against it, just before the framework moves the parameters. Two calls mark those moments::

    watch.before_sync()    # the inner phase is over: the parameters are theta (measures the outer step)
    ...                    # the framework's synchronisation
    watch.after_sync()     # the parameters are the new phi (copied)

or, given the inner optimizer and H, hooks on it make both calls: ``before_sync`` after every H-th
``step()`` and ``after_sync`` before the next ``step()`` (or when the observer closes). That fits every
framework whose synchronisation runs after the optimizer's ``step()`` returns (``LocalSGD.step()``, a loop's
own code); one that synchronises from a hook of its own on the same optimizer must be given the optimizer
after the Watch has hooked it (hooks run in the order they were registered).

The setting (method, n, alpha, beta, gamma, H) describes the framework's outer step, for the advice to
predict from: ``LocalSGD`` averages the replicas every H steps, which is ``method="diloco", alpha=0,
beta=1``; DiLoCo's outer Nesterov SGD is ``method="diloco", momentum="nesterov"`` with its own alpha and
beta. Nothing here moves the parameters.
"""

from __future__ import annotations

import torch

from noloco.infra.errors import ConfigError
from noloco.theory.config import OuterConfig
from noloco.training.outer_optimizer import OuterStep


class Watch(OuterStep):
    """Another framework's outer step, seen from its replicas, for an :class:`noloco.Observer`.

    Where a framework (accelerate's ``LocalSGD``, torchft's DiLoCo, a loop of one's own) runs the outer step,
    the Watch keeps a copy of phi after each synchronisation and reads the progress against it before the
    next, so the observer gets what an :class:`noloco.OuterOptimizer` would give it. Two calls mark those
    moments, ``before_sync()`` and ``after_sync()``; given the inner optimizer, hooks on it make them every H
    steps. Nothing here moves the parameters. Replicas must start equal, as for any outer step.

    Args:
        model: a module, a dict or iterable of tensors, or a list of N modules (as OuterOptimizer takes them).
        inner_optimizer: the inner optimizer, hooked for the two calls around its step and read for the Adam
            state ``noloco llm predict --gap`` needs (optional).
        inner_steps, method, preset, group_size, alpha, beta, gamma, momentum, seed, config: the framework's
            outer setting, as :class:`noloco.OuterOptimizer` takes it (for the advice).
        replicas: None, one replica per torch.distributed rank (the framework's process group); N, all N in
            this process.
        timeout: seconds a rank waits for a peer.

    Returns:
        The watch; ``outer_done`` counts the synchronisations seen.

    Raises:
        ConfigError: a value out of range or a conflict with the method, as for OuterOptimizer.

    Examples:
        A DiLoCo-style loop of one's own, 4 replicas in one process, every H = 5 steps the replicas averaged by
        hand:

        >>> import tempfile, torch, noloco
        >>> w = torch.nn.Parameter(torch.zeros(4, 3))
        >>> inner = torch.optim.SGD([w], lr=0.1)
        >>> watch = noloco.Watch([w], inner, replicas=4, inner_steps=5, method="diloco", alpha=0.0, beta=1.0)
        >>> observer = noloco.Observer(watch, tempfile.mkdtemp(), outer_steps=2, lr=0.1, inner_optimizer="sgd")
        >>> for step in range(10):
        ...     w.grad = torch.randn(4, 3)
        ...     inner.step()
        ...     if (step + 1) % 5 == 0:
        ...         with torch.no_grad():
        ...             _ = w.copy_(w.mean(0, keepdim=True).expand_as(w))   # the framework's sync
        >>> observer.close()
        >>> watch.outer_done, len(observer.inputs), observer.rows[2]["weight_std"]
        (2, 2, 0.0)
    """

    def __init__(self, model, inner_optimizer: torch.optim.Optimizer | None = None, *,
                 inner_steps: int | None = None, method: str | None = None, preset: str | None = None,
                 replicas: int | None = None, group_size: int | None = None, alpha: float | None = None,
                 beta: float | None = None, gamma: float | None = None, momentum: str | None = None,
                 seed: int = 0, timeout: float = 600.0, config: OuterConfig | None = None):
        # config: a resolved OuterConfig whole, as OuterOptimizer takes it (it was a TypeError here)
        self._setup(model, inner_optimizer, inner_steps=inner_steps, method=method, preset=preset,
                    replicas=replicas, group_size=group_size, alpha=alpha, beta=beta, gamma=gamma, momentum=momentum,
                    seed=seed, stages=None, exchange=None, timeout=timeout, config=config)
        # phi: the outer weights at the last synchronisation (at the start: the replicas' common start)
        self._phi = {k: t.clone() for k, t in self.replicas_here.theta().items()}
        self._synced = False  # a synchronisation happened and phi is not copied yet
        inner = self.inner_optimizer
        if inner is not None:
            self._optimizer_hooks += [inner.register_step_pre_hook(lambda *_: self._before_inner_step()),
                                      inner.register_step_post_hook(lambda *_: self._after_inner_step())]

    @property
    def phi(self) -> dict:
        """The outer weights of the last synchronisation (copies, this process's)."""
        self.settle()
        return self._phi

    def settle(self) -> None:
        """A synchronisation whose phi is not copied yet (the hooks copy it at the next inner step): copy it."""
        if self._synced:
            self.after_sync()

    @torch.no_grad()
    def before_sync(self) -> None:
        """The inner phase is over and the framework is about to synchronise: the progress theta - phi of this
        outer step, seen by the observer (its progress hook)."""
        if self._synced:
            raise ConfigError("before_sync() twice without after_sync(): call after_sync() once the framework "
                              "has synchronised the replicas")
        theta = self.replicas_here.theta()
        progress = {k: theta[k] - self._phi[k] for k in self._phi}
        for hook in self._progress_hooks:
            hook(self._phi, progress, self.outer_done)
        self._synced = True

    @torch.no_grad()
    def after_sync(self) -> None:
        """The framework has synchronised: the parameters are the new outer weights phi (copied)."""
        if not self._synced:
            raise ConfigError("after_sync() without before_sync(): call before_sync() before the framework "
                              "synchronises the replicas")
        for k, t in self.replicas_here.theta().items():
            self._phi[k].copy_(t)
        self._synced = False
        self.outer_done += 1
        self.inner_done = 0

    def _after_inner_step(self) -> None:
        self.inner_done += 1
        if self.inner_done == self.inner_steps:
            self.before_sync()

    def _before_inner_step(self) -> None:
        if self._synced:  # the first step of a phase: the synchronisation is done, the parameters are phi
            self.after_sync()

    def __repr__(self) -> str:
        o = self.config
        return (f"Watch(method={self.method!r}, replicas={o.replicas}, group_size={o.group_size}, alpha={o.alpha:g}, "
                f"beta={o.beta:g}, gamma={o.gamma:g}, momentum={o.momentum!r}, inner_steps={self.inner_steps}, "
                f"outer_done={self.outer_done})")
