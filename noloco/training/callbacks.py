"""What the callbacks for other trainers (Hugging Face's ``Trainer``, Lightning's) share: the
:class:`noloco.OuterOptimizer` settings they pass on, checked when the callback is made, and
``DistributedDataParallel``'s gradient all-reduce stopped so that every rank trains its own replica.
Neither framework is imported here."""

from __future__ import annotations

import torch

from noloco.infra.errors import ConfigError

#: OuterOptimizer's settings a callback passes on
SETTINGS = ("inner_steps", "method", "preset", "group_size", "alpha", "beta", "gamma", "momentum", "seed",
            "outer_dtype", "wire_dtype", "timeout")


def check_settings(owner: str, settings: dict, steps: str) -> None:
    """The settings' names and values, checked at construction (a ConfigError now, not when training begins);
    the group size against the world size waits for it. ``steps`` names what the inner steps are."""
    for name in settings:
        if name in ("replicas", "inner_optimizer", "exchange", "stages"):
            raise ConfigError(f"{name}= is not a setting of {owner}: under the {steps} every torch.distributed rank "
                              f"is one replica, and the {steps}'s optimizer steps are the inner steps")
        if name not in SETTINGS:  # a misspelt name now, not when training begins
            raise ConfigError(f"{name}= is not a setting of {owner}; allowed: {', '.join(SETTINGS)}")
    _check_values(**settings)


def _check_values(*, preset=None, method=None, inner_steps=None, group_size=None, alpha=None, beta=None, gamma=None,
                  momentum=None, seed=0, timeout=600.0, **dtypes) -> None:
    """The values of the settings whose names :func:`check_settings` allowed (the dtypes are the optimizer's to
    check)."""
    from noloco.infra.checks import check_integer, check_seed, check_timeout
    from noloco.theory.methods import resolve

    resolve(preset, method, steps=inner_steps, alpha=alpha, beta=beta, gamma=gamma, momentum=momentum)
    if group_size is not None:
        check_integer("group_size", group_size, "an integer >= 1", lambda v: v >= 1)
    check_seed("seed", seed)
    check_timeout("timeout", timeout)


def check_observe(observe, observer_options) -> None:
    """Observer options need the run folder they are for."""
    if observe is None and observer_options:
        raise ConfigError("observer_options= without observe=FOLDER: give the run folder the observer writes")


def keep_gradients_local(wrapped) -> bool:
    """Stop ``DistributedDataParallel``'s gradient all-reduce (and its buffer broadcast) on ``wrapped``, the
    trainer's wrapped model (through a ``torch.compile`` wrapper); False when it is no DDP (nothing to stop).
    These are the flags DDP's own ``no_sync()`` sets and restores, so gradient accumulation leaves them False."""
    while hasattr(wrapped, "_orig_mod"):  # torch.compile's OptimizedModule
        wrapped = wrapped._orig_mod
    if not isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
        return False
    wrapped.require_backward_grad_sync = False  # the reducer is not armed: no all-reduce in backward
    wrapped.require_forward_param_sync = False  # and no buffer broadcast before the next forward
    return True
