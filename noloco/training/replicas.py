"""Where a user's replicas live, seen as one dict ``{name: tensor}`` of inner weights theta.

Three layouts, one view for the outer step:

* tensors with a leading replica dimension (N, ...): all N replicas in one process, as the harness
  batches them; or the same tensors without it, one replica per torch.distributed rank;
* a list of N modules of one architecture in one process (stacked for the outer step, written back).

:func:`layout` picks it from what the user passes (a module, a dict of named tensors, an iterable of
tensors, or a list of modules).
"""

from __future__ import annotations

import torch

from noloco.infra.errors import ConfigError


def _named(model) -> dict:
    """``{name: parameter}`` of a module (the trainable ones), a dict, or an iterable of tensors."""
    if isinstance(model, torch.nn.Module):
        return {k: p for k, p in model.named_parameters() if p.requires_grad}
    if isinstance(model, dict):
        named = dict(model)
    elif isinstance(model, (torch.Tensor, str)) or not hasattr(model, "__iter__"):
        # a lone tensor would be iterated along its first dimension, its rows taken for parameters
        hint = "; give a lone tensor as [tensor]" if isinstance(model, torch.Tensor) else ""
        raise ConfigError(f"model={type(model).__name__} is not a module, a dict of tensors, an iterable of tensors "
                          f"or a list of modules{hint}")
    else:
        named = {str(i): p for i, p in enumerate(model)}
    wrong = [k for k, p in named.items() if not isinstance(p, torch.Tensor)]
    if wrong:
        raise ConfigError(f"model: {wrong[0]!r} is a {type(named[wrong[0]]).__name__}; give a module, a dict of "
                          f"tensors, an iterable of tensors or a list of modules")
    # an integer tensor was taken, and the first outer step failed in torch ("Float can't be cast to Long")
    ints = [k for k, p in named.items() if not (p.is_floating_point() or p.is_complex())]
    if ints:
        raise ConfigError(f"model: {ints[0]!r} is a {named[ints[0]].dtype} tensor; the outer step needs floating-point "
                          f"weights")
    return named


class Tensors:
    """The user's own tensors, updated in place: (N, ...) each in the batched mode, one replica's under
    torch.distributed."""

    def __init__(self, model, replicas: int | None):
        self.params = _named(model)
        if not self.params:
            raise ConfigError("model has no trainable parameters")
        if replicas is not None:  # batched: the leading dimension is the replica
            wrong = {k: tuple(p.shape) for k, p in self.params.items() if p.dim() == 0 or p.shape[0] != replicas}
            if wrong:
                name, shape = next(iter(wrong.items()))
                raise ConfigError(f"replicas={replicas} but parameter {name!r} has shape {shape}: in one process "
                                  f"every tensor holds the replicas along its first dimension")

    def theta(self) -> dict:
        return {k: p.detach() for k, p in self.params.items()}

    def progress_into(self, phi: dict, out: dict) -> None:
        """The progress theta - phi written into ``out``'s tensors (the outer step's buffers), one pass each."""
        for k, o in out.items():
            _difference(self.params[k].detach(), phi[k], o)

    def scaled_into(self, factor: float, out: dict) -> None:
        """``factor * theta`` written into ``out``'s tensors, one pass each."""
        for k, o in out.items():
            _scaled(self.params[k].detach(), factor, o)

    def load(self, phi: dict) -> None:
        for k, p in self.params.items():
            p.data.copy_(phi[k])  # .data: a leaf that requires grad may be written outside autograd


class Modules:
    """A list of N modules of one architecture, one replica each."""

    def __init__(self, modules):
        self.each = [_named(m) for m in modules]
        first = self.each[0]
        for i, named in enumerate(self.each[1:], 1):
            if [(k, p.shape) for k, p in named.items()] != [(k, p.shape) for k, p in first.items()]:
                raise ConfigError(f"model: module {i} does not have module 0's parameters (names and shapes); "
                                  f"replicas are copies of one architecture")
            other = [(k, p.dtype, p.device) for k, p in named.items() if (p.dtype, p.device) != (first[k].dtype,
                                                                                                 first[k].device)]
            if other:  # the stacked outer step would silently cast them to module 0's
                k, dtype, device = other[0]
                raise ConfigError(f"model: module {i}'s {k} is {dtype} on {device}, module 0's "
                                  f"{first[k].dtype} on {first[k].device}; replicas must share dtype and device")
        if not first:
            raise ConfigError("model has no trainable parameters")
        owner = {}
        for i, named in enumerate(self.each):  # one module given twice: its spread would always be 0
            for k, p in named.items():
                j = owner.setdefault(p.data_ptr(), i) if p.numel() else i  # (an empty tensor has no storage)
                if j != i:
                    raise ConfigError(f"model: modules {j} and {i} share the parameter {k} (the same module given "
                                      "twice?); each replica needs its own copy (copy.deepcopy)")
        self.params = first

    def theta(self) -> dict:
        return {k: torch.stack([named[k].detach() for named in self.each]) for k in self.params}

    def progress_into(self, phi: dict, out: dict) -> None:
        for k, o in out.items():
            for i, named in enumerate(self.each):
                _difference(named[k].detach(), phi[k][i], o[i])

    def scaled_into(self, factor: float, out: dict) -> None:
        for k, o in out.items():
            for i, named in enumerate(self.each):
                _scaled(named[k].detach(), factor, o[i])

    def load(self, phi: dict) -> None:
        for i, named in enumerate(self.each):
            for k, p in named.items():
                p.data.copy_(phi[k][i])


def _difference(theta, phi, out) -> None:
    if theta.dtype == phi.dtype == out.dtype:
        torch.sub(theta, phi, out=out)
    else:  # a model in another dtype than its outer state: theta cast first
        out.copy_(theta)
        out.sub_(phi)


def _scaled(theta, factor: float, out) -> None:
    if theta.dtype == out.dtype:
        torch.mul(theta, factor, out=out)
    else:
        out.copy_(theta)
        out.mul_(factor)


def is_module_list(model) -> bool:
    return isinstance(model, (list, tuple)) and len(model) > 0 and all(isinstance(m, torch.nn.Module)
                                                                         for m in model)
