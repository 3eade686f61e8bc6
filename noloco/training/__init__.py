"""The public face for a user's own model and loop: :class:`noloco.training.outer_optimizer.OuterOptimizer`
(exported as ``noloco.OuterOptimizer``) wraps a model and its inner optimizer and runs the outer step;
:class:`noloco.training.observer.Observer` (``noloco.Observer``) measures the run's spread and the theory's
inputs (of an outer step another framework runs too: :class:`noloco.training.watch.Watch`, ``noloco.Watch``) (:mod:`noloco.training.measure`, across ranks from :mod:`noloco.training.sample`) into a run folder the
advice reads, with early warnings (:mod:`noloco.training.early_warning`); :mod:`noloco.training.exchange` is
how replicas talk (in one process, or point-to-point across torch.distributed ranks);
:mod:`noloco.training.replicas` where a user's replicas live; :mod:`noloco.training.hf` the same outer step in
Hugging Face's Trainer (a callback; the [hf] extra). Needs torch."""
