"""The torch harness: a small GPT trained with NoLoCo, DiLoCo, data parallel and no synchronisation on the
shipped corpus, replicas batched in one process or one per torchrun rank.

``config`` (a run's validated settings and presets; the outer step is
:class:`noloco.theory.config.OuterConfig`, the methods :mod:`noloco.theory.methods`), ``resources``
(memory and time estimates), ``data`` and ``domains`` (the corpus), ``architecture`` and ``model``,
``trainer`` (the training step), ``lifecycle`` (a run's folder, checkpoints, resume), ``train`` (runs of
one or several methods, in one process or under torchrun), ``evaluation`` (stages removed), ``pipeline`` and ``routing`` (stages), ``divergence``,
``adam_state`` (a checkpoint's second moment), ``comm_measure`` (gloo timings). How replicas talk and the outer
optimizer are :mod:`noloco.training` (public); nothing here imports the studies (:mod:`noloco.studies`).
"""
